//! The `exec` tool.

use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::json;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_YIELD_MS, DEFAULT_YIELD_MS, SIDE_EFFECTS,
};
use yieldshell_proto::views::{self, ExecView};

use super::{ErrorBody, MAX_BLOCKING_MS, output_schema, respond_with, tool};
use crate::args::{ArgError, Args};
use crate::context::{Context, describe};
use crate::progress::{Progress, SettleSpec, Settled, backgrounded, run_until_settled};
use crate::tool_set::{TaskMode, task_mode};

/// What `shell` does here: nothing on Unix (every command runs with `/bin/sh -c`); on Windows it
/// picks PowerShell over `cmd.exe`.
const SHELL_DESCRIPTION: &str = if cfg!(windows) {
    "pwsh or powershell: PowerShell; else cmd.exe."
} else {
    "Ignored: /bin/sh."
};

pub(super) fn definition(ctx: &Context) -> Tool {
    let p = &ctx.config.policy;
    let default_yield = p.default_yield_ms.unwrap_or(DEFAULT_YIELD_MS);
    // The blocking part of a call is capped like `wait`'s (MCP clients time out at 60 s).
    let max_yield = p
        .max_yield_ms
        .unwrap_or(DEFAULT_MAX_YIELD_MS)
        .min(MAX_BLOCKING_MS);
    let max_out = p.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
    let input = json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Run by /bin/sh -c."},
            "side_effects": {
                "type": "array",
                "items": {"type": "string", "enum": SIDE_EFFECTS},
                "minItems": 1,
                "uniqueItems": true,
                "description": "What it may do; [\"NONE\"] if harmless."
            },
            "until": {"type": "string", "description": "Regex: return at a matching output line (a server's URL); it runs on."},
            "yield_ms": {"type": "integer", "maximum": max_yield, "default": default_yield},
            "stdin": {"type": "string"},
            "shell": {"type": "string", "description": SHELL_DESCRIPTION},
            "close_stdin": {"type": "boolean"},
            "cwd": {"type": "string"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "name": {"type": "string"},
            "timeout_ms": {"type": "integer", "default": p.default_timeout_ms.unwrap_or(0), "description": "Then kill it (0: never)."},
            "max_output_bytes": {"type": "integer", "minimum": 1, "maximum": max_out, "default": max_out},
            "tty": {"type": "boolean", "description": "PTY: REPLs, prompts, TUIs."},
            "cols": {"type": "integer"},
            "rows": {"type": "integer"}
        },
        "required": ["command", "side_effects"]
    });
    let description = format!(
        "Run a shell command: its output and exit code, or after yield_ms (default {default_yield}, \
         max {max_yield}) a process_id; an identical one still running is returned (reused)."
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

fn parse(args: &Args) -> Result<pb::ExecRequest, ArgError> {
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
        until: args.opt_string("until")?.filter(|u| !u.is_empty()),
        tty: args.opt_bool("tty")?.unwrap_or(false),
        cols: opt_u32(args, "cols")?,
        rows: opt_u32(args, "rows")?,
        // An agent that re-runs a command still running gets that process, not a second copy
        // (README, "Tools": duplicate starts).
        reuse_running: true,
        ..Default::default()
    })
}

/// An optional integer parameter that fits a u32 (a terminal's size).
pub(super) fn opt_u32(args: &Args, name: &str) -> Result<Option<u32>, ArgError> {
    args.opt_u64(name)?
        .map(|v| u32::try_from(v).map_err(|_| ArgError(format!("{name} is too large"))))
        .transpose()
}

async fn exec_once(
    ctx: &Context,
    req: pb::ExecRequest,
) -> Result<pb::ExecResponse, CallToolResult> {
    ctx.session.exec(req).await.map_err(|e| {
        let (msg, kind) = describe(&e);
        respond_with(&ExecView::failed_to_start(msg, kind))
    })
}

/// The body of an exec that waited in slices: `state` is the latest wait answer, `settled`
/// whether the process ended.
fn sliced_view(state: &pb::WaitResponse, settled: bool) -> ExecView {
    let info = state.process.clone().unwrap_or_default();
    let out = state.output.clone().unwrap_or_default();
    // A ready-wait that matched is not an end: the process runs on in the background.
    let matched = state.result == pb::WaitResult::Matched as i32;
    let settled = settled && !matched;
    let status = if settled {
        views::process_status_name(info.status)
    } else {
        views::exec_status_name(pb::ExecStatus::Backgrounded as i32)
    };
    let message = views::exec_hint(status, &info, out.next_seq);
    let mut view = ExecView::of_process(&info, &out, status, message);
    if matched {
        view.matched_line = Some(String::from_utf8_lossy(&state.matched_line).into_owned());
    }
    view
}

/// The first slice of an `exec` (one `Exec` call, which cannot be cut short: only its answer
/// names the process): short, so a cancelled call stops its command within about this long;
/// the rest of the yield is waited in `Wait` slices, which a cancellation ends at once.
const FIRST_SLICE_MS: u64 = 1_000;

/// Grace of the `stop` a cancelled call sends before SIGKILL: the `stop` tool's default.
const CANCEL_FORCE_AFTER_MS: u64 = yieldshell_proto::deadlines::STOP_GRACE_DEFAULT_MS;

/// How long this call blocks: its `yield_ms` (else the session default), never past the
/// session's largest yield nor [`MAX_BLOCKING_MS`] — MCP clients give up on a request after
/// 60 s, and an answer they dropped would leave the agent without the process id.
fn blocking_ms(ctx: &Context, requested: Option<u64>) -> u64 {
    let p = &ctx.config.policy;
    requested
        .unwrap_or(p.default_yield_ms.unwrap_or(DEFAULT_YIELD_MS))
        .min(p.max_yield_ms.unwrap_or(DEFAULT_MAX_YIELD_MS))
        .min(MAX_BLOCKING_MS)
}

/// Stops the tree of a call the client cancelled (README, "Tools": what Esc means to a person).
/// Best effort: a process that ended meanwhile has nothing to stop.
async fn stop_cancelled(ctx: &Context, process_id: &str) {
    let req = pb::StopRequest {
        process_id: process_id.to_string(),
        signal: "SIGTERM".into(),
        force_after_ms: Some(CANCEL_FORCE_AFTER_MS),
        ..Default::default()
    };
    let _ = ctx.session.stop(req).await;
}

/// The answer to a cancelled call, which the client no longer reads (rmcp drops it); it says
/// what happened, for the logs.
fn cancelled_view(state: &pb::WaitResponse) -> ExecView {
    let mut view = sliced_view(state, false);
    view.status = views::process_status_name(pb::ProcessStatus::Stopped as i32).to_string();
    view.message = Some("The call was cancelled: the command was stopped.".into());
    view
}

pub(super) async fn call(
    ctx: &Context,
    args: &Args<'_>,
    request: &RequestContext<RoleServer>,
) -> CallToolResult {
    let req = match parse(args) {
        Ok(r) => r,
        Err(e) => return respond_with(&ExecView::failed_to_start(e.0, "invalid_argument")),
    };
    // A 2025-11-25 task is answered at once: start the command and hand its id to the task.
    let yield_ms = if task_mode(request) == TaskMode::AtOnce {
        0
    } else {
        blocking_ms(ctx, req.yield_ms)
    };
    let started = Instant::now();
    let progress = Progress::for_call(request, yield_ms);
    let max_output_bytes = req.max_output_bytes;
    let until = req.until.clone();
    let first = match exec_once(
        ctx,
        pb::ExecRequest {
            yield_ms: Some(yield_ms.min(FIRST_SLICE_MS)),
            ..req
        },
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(info) = first.process.as_ref() else {
        return respond_with(&ExecView::from(&first));
    };
    let running = first.status == pb::ExecStatus::Backgrounded as i32;
    // A reused process was started by an earlier exec and already had its yield: this call
    // answers with it and, cancelled or not, leaves it alone.
    if running && !first.reused && request.ct.is_cancelled() {
        stop_cancelled(ctx, &info.process_id).await;
        return respond_with(&cancelled_view(&backgrounded(&first)));
    }
    // Ended, reused, matched, waiting for input, or its whole yield spent: the daemon's answer
    // is the call's (the same reasons to yield early as in the daemon's own exec).
    if !running
        || first.reused
        || first.matched_seq.is_some()
        || info.waiting_for_input == Some(true)
        || yield_ms <= FIRST_SLICE_MS
    {
        return respond_with(&ExecView::from(&first));
    }

    // The rest of the yield in slices (of one heartbeat, reporting progress in between, when
    // the client sent a progress token). To the agent this is the same exec: it returns as soon
    // as the command ends, or as backgrounded once `yield_ms` has passed.
    let spec = SettleSpec {
        request,
        progress: progress.as_ref(),
        what: "running",
        wait: pb::WaitRequest {
            process_id: info.process_id.clone(),
            max_output_bytes,
            // The ready-wait goes on over the whole log, so a line printed during the first
            // slice still counts.
            until,
            since_seq: Some(1),
            for_input: true,
            ..Default::default()
        },
        budget_ms: yield_ms,
        started,
    };
    match run_until_settled(&ctx.session, spec, Some(backgrounded(&first))).await {
        Settled::Done(state) => {
            let settled = state.result != pb::WaitResult::InputWanted as i32;
            respond_with(&sliced_view(&state, settled))
        }
        Settled::OutOfTime(state) => respond_with(&sliced_view(&state, false)),
        // Nobody waits for the answer any more, and no answer will carry the process id:
        // the command is stopped, as the shell profile does and as Esc does in a terminal.
        Settled::Cancelled(state) => {
            stop_cancelled(ctx, &info.process_id).await;
            let state = if state.process.is_some() {
                state
            } else {
                backgrounded(&first)
            };
            respond_with(&cancelled_view(&state))
        }
        Settled::Failed(e, state) => {
            let (msg, kind) = describe(&e);
            let mut v = sliced_view(&state, false);
            v.message = None;
            v.error = Some(msg);
            v.error_kind = Some(kind.to_string());
            respond_with(&v)
        }
    }
}
