//! The `exec` tool.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::json;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::SIDE_EFFECTS;
use yieldshell_proto::views::{self, ExecView};

use super::{ErrorBody, describe, last_line, output_schema, respond_with, tool};
use crate::args::{ArgError, Args};
use crate::progress::{HEARTBEAT, Progress};
use crate::server::Shim;

pub(super) fn definition(shim: &Shim) -> Tool {
    let p = &shim.config.policy;
    let default_yield = p.default_yield_ms.unwrap_or(5_000);
    let max_yield = p.max_yield_ms.unwrap_or(300_000);
    let max_out = p.max_output_bytes.unwrap_or(20_000);
    let input = json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The command line, run by /bin/sh -c (pipes, &&, redirections work)."
            },
            "side_effects": {
                "type": "array",
                "items": {"type": "string", "enum": SIDE_EFFECTS},
                "minItems": 1,
                "uniqueItems": true,
                "description": "Side-effect categories this command may plausibly have. At least one; use [\"NONE\"] for a command without side effects (NONE is exclusive). Commands declaring a blocked category are refused with status failed_to_start."
            },
            "cwd": {"type": "string", "description": "Working directory (relative paths are resolved against the default cwd). Must lie inside YIELDSHELL_ALLOWED_CWDS when that is set."},
            "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Variables added to (or overriding) the environment."},
            "shell": {"type": "string", "description": "Accepted for compatibility; commands always run with /bin/sh -c."},
            "stdin": {"type": "string", "description": "Text written to stdin right after the command starts."},
            "close_stdin": {"type": "boolean", "default": false, "description": "Close stdin after writing `stdin` (for commands that read to EOF). Leave false to keep `write` possible."},
            "name": {"type": "string", "description": "A label to recognise the process by in ps."},
            "yield_ms": {"type": "integer", "minimum": 0, "maximum": max_yield, "default": default_yield, "description": "How long to wait in the foreground. A command still running then continues in the background and you get its process_id. A command that finishes sooner returns at once."},
            "timeout_ms": {"type": "integer", "minimum": 0, "default": p.default_timeout_ms.unwrap_or(0), "description": "Kill the whole process tree after this long (0: no limit)."},
            "max_output_bytes": {"type": "integer", "minimum": 1, "maximum": max_out, "default": max_out, "description": "Most bytes of stdout and of stderr in the response (the latest output is shown)."}
        },
        "required": ["command", "side_effects"],
        "additionalProperties": true
    });
    let description = format!(
        "Run a shell command. Fast commands return their output and exit code directly (status completed). \
         A command still running after yield_ms (default {default_yield} ms) keeps running in the background and the \
         response has status backgrounded, its process_id and the output so far: then use read (with since_seq = next_seq) \
         for new output, wait to block until it exits, write for stdin and stop to end it. Processes outlive this MCP \
         session. Statuses: completed, backgrounded, timed_out, stopped, failed_to_start (with error), failed."
    );
    tool(
        "exec",
        "Run a shell command",
        description,
        input,
        output_schema::<ExecView, ErrorBody>(),
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

fn parse(shim: &Shim, args: &Args) -> Result<pb::ExecRequest, ArgError> {
    let command = args.string("command")?;
    let side_effects = args.string_list("side_effects")?.unwrap_or_default();
    let env = args
        .string_map("env")?
        .into_iter()
        .map(|(k, v)| pb::EnvVar {
            name: k.into_bytes(),
            value: v.into_bytes(),
        })
        .collect();
    Ok(pb::ExecRequest {
        session_id: shim.session.id().to_string(),
        command: command.into_bytes(),
        side_effects,
        cwd: args.opt_string("cwd")?.map(String::into_bytes),
        env,
        stdin: args.opt_string("stdin")?.map(String::into_bytes),
        close_stdin: args.opt_bool("close_stdin")?.unwrap_or(false),
        name: args.opt_string("name")?,
        yield_ms: args.opt_u64("yield_ms")?,
        timeout_ms: args.opt_u64("timeout_ms")?,
        max_output_bytes: args.opt_u64("max_output_bytes")?,
        shell: args.opt_string("shell")?,
        process_id: None,
    })
}

async fn exec_once(shim: &Shim, req: &pb::ExecRequest) -> Result<pb::ExecResponse, CallToolResult> {
    shim.session
        .call(|mut c| {
            let req = req.clone();
            async move { c.exec(req).await }
        })
        .await
        .map_err(|e| {
            let (msg, kind) = describe(&e);
            respond_with(&ExecView::failed_to_start(msg, kind))
        })
}

pub(super) async fn call(
    shim: &Arc<Shim>,
    args: &Args<'_>,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let req = match parse(shim, args) {
        Ok(r) => r,
        Err(e) => return respond_with(&ExecView::failed_to_start(e.0, "invalid_argument")),
    };
    let p = &shim.config.policy;
    let yield_ms = req
        .yield_ms
        .unwrap_or(p.default_yield_ms.unwrap_or(5_000))
        .min(p.max_yield_ms.unwrap_or(300_000));
    let heartbeat = HEARTBEAT.as_millis() as u64;
    let progress = Progress::from_request(ctx, Some(yield_ms)).filter(|_| yield_ms > heartbeat);
    let Some(progress) = progress else {
        return match exec_once(shim, &req).await {
            Ok(r) => respond_with(&ExecView::from(&r)),
            Err(e) => e,
        };
    };

    // With a progress token and a long yield: yield after one heartbeat, then wait in slices,
    // reporting progress in between. To the agent this is the same exec: it returns as soon as
    // the command ends, or as backgrounded once `yield_ms` has passed.
    let first = match exec_once(
        shim,
        &pb::ExecRequest {
            yield_ms: Some(heartbeat),
            ..req.clone()
        },
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return e,
    };
    if first.status != pb::ExecStatus::Backgrounded as i32 {
        return respond_with(&ExecView::from(&first));
    }
    let Some(info) = first.process.clone() else {
        return respond_with(&ExecView::from(&first));
    };
    let id = info.process_id.clone();
    let mut latest = first.output.clone().unwrap_or_default();
    let mut latest_info = info;
    loop {
        progress
            .send("running", last_line(&latest.stdout, &latest.stderr))
            .await;
        let waited = progress.elapsed().as_millis() as u64;
        if waited >= yield_ms {
            break;
        }
        let slice = (yield_ms - waited).min(heartbeat);
        let wait = pb::WaitRequest {
            session_id: shim.session.id().to_string(),
            process_id: id.clone(),
            timeout_ms: Some(slice),
            max_output_bytes: req.max_output_bytes,
            ..Default::default()
        };
        let resp = tokio::select! {
            r = shim.session.call(|mut c| {
                let wait = wait.clone();
                async move { c.wait(wait).await }
            }) => r,
            _ = ctx.ct.cancelled() => break,
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                let (msg, kind) = describe(&e);
                let mut v = ExecView::of_process(&latest_info, &latest, "backgrounded", "");
                v.error = Some(msg);
                v.error_kind = Some(kind.to_string());
                return respond_with(&v);
            }
        };
        latest = resp.output.clone().unwrap_or_default();
        latest_info = resp.process.clone().unwrap_or_default();
        if resp.result == pb::WaitResult::Exited as i32 {
            let status = views::process_status_name(latest_info.status);
            let message = if latest_info.descendants_running > 0 {
                views::descendants_message(&id, latest_info.descendants_running, latest.next_seq)
            } else {
                String::new()
            };
            return respond_with(&ExecView::of_process(
                &latest_info,
                &latest,
                status,
                &message,
            ));
        }
        tokio::time::sleep(Duration::ZERO).await;
    }
    let message = views::backgrounded_message(&id, yield_ms, latest.next_seq);
    respond_with(&ExecView::of_process(
        &latest_info,
        &latest,
        "backgrounded",
        &message,
    ))
}
