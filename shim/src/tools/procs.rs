//! The `write`, `stop`, `ps` and `cleanup` tools.

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::DEFAULT_CLEANUP_OLDER_THAN_MS;
use yieldshell_proto::views::{CleanupView, ProcessSummary, PsView, StopView, WriteView};

use super::{ErrorBody, arg_error, output_schema, respond, respond_with, tool};
use crate::args::{ArgError, Args};
use crate::context::{Context, describe};

pub(super) fn write_definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "process_id": {"type": "string", "description": "The process_id from exec or ps."},
            "input": {"type": "string", "description": "Text to write to the process's stdin."},
            "newline": {"type": "boolean", "default": false, "description": "Append \\n (press Enter)."},
            "eof": {"type": "boolean", "default": false, "description": "Close stdin after writing (for commands that read until EOF)."}
        },
        "required": ["process_id", "input"],
        "additionalProperties": true
    });
    tool(
        "write",
        "Write to a process's stdin",
        "Write text to the stdin of a running process (a REPL, a prompt, cat). Then read or wait (e.g. with until) \
         for its answer."
            .to_string(),
        input,
        output_schema::<WriteView, ErrorBody>(),
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
    )
}

pub(super) async fn write(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let id = args
        .opt_string("process_id")
        .ok()
        .flatten()
        .unwrap_or_default();
    let fail = |error: String, kind: &str| {
        respond_with(&WriteView {
            process_id: id.clone(),
            ok: false,
            error: Some(error),
            error_kind: Some(kind.to_string()),
        })
    };
    let parsed = (|| -> Result<pb::WriteRequest, ArgError> {
        let process_id = args.string("process_id")?;
        let mut input = args
            .opt_string("input")?
            .ok_or_else(|| ArgError("missing required parameter input".into()))?
            .into_bytes();
        if args.opt_bool("newline")?.unwrap_or(false) {
            input.push(b'\n');
        }
        Ok(pb::WriteRequest {
            process_id,
            input,
            eof: args.opt_bool("eof")?.unwrap_or(false),
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return fail(e.0, "invalid_argument"),
    };
    match ctx.session.write(req).await {
        Ok(_) => respond_with(&WriteView {
            process_id: id,
            ok: true,
            error: None,
            error_kind: None,
        }),
        Err(e) => {
            let (msg, kind) = describe(&e);
            fail(msg, kind)
        }
    }
}

pub(super) fn stop_definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "process_id": {"type": "string", "description": "The process_id from exec or ps."},
            "signal": {"type": "string", "default": "SIGTERM", "description": "First signal, with or without SIG: SIGTERM, SIGINT, SIGHUP, SIGKILL, … (or a number)."},
            "force_after_ms": {"type": "integer", "minimum": 0, "default": 3000, "description": "Grace period before SIGKILL for whatever is still alive."}
        },
        "required": ["process_id"],
        "additionalProperties": true
    });
    tool(
        "stop",
        "Stop a process tree",
        "Stop a process and its whole tree (children, background jobs, even descendants that started their own \
         session): the signal, then SIGKILL after force_after_ms. Returns once everything is gone, with \
         stopped: true."
            .to_string(),
        input,
        output_schema::<StopView, ErrorBody>(),
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
    )
}

pub(super) async fn stop(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let id = args
        .opt_string("process_id")
        .ok()
        .flatten()
        .unwrap_or_default();
    let fail = |error: String, kind: &str| {
        respond_with(&StopView {
            process_id: id.clone(),
            stopped: false,
            signal: None,
            status: None,
            exit_code: None,
            escalated: false,
            error: Some(error),
            error_kind: Some(kind.to_string()),
        })
    };
    let parsed = (|| -> Result<pb::StopRequest, ArgError> {
        Ok(pb::StopRequest {
            process_id: args.string("process_id")?,
            signal: args
                .opt_string("signal")?
                .unwrap_or_else(|| "SIGTERM".into()),
            force_after_ms: Some(args.opt_u64("force_after_ms")?.unwrap_or(3_000)),
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return fail(e.0, "invalid_argument"),
    };
    match ctx.session.stop(req).await {
        Ok(r) => respond_with(&StopView::from(&r)),
        Err(e) => {
            let (msg, kind) = describe(&e);
            fail(msg, kind)
        }
    }
}

pub(super) fn ps_definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "include_completed": {"type": "boolean", "default": true, "description": "Also list processes that have ended."},
            "limit": {"type": "integer", "minimum": 1, "default": 50, "description": "Most entries (newest started first)."},
            "scope": {"type": "string", "enum": ["project", "all"], "default": "project", "description": "project: processes running inside this session's working directory or started by this session; all: every process of this user."}
        },
        "additionalProperties": true
    });
    tool(
        "ps",
        "List processes",
        "List managed processes, newest first: id, pid, name, command, cwd, status, exit code or signal, times, \
         output sizes. Processes outlive MCP sessions, so this also finds what an earlier session started."
            .to_string(),
        input,
        output_schema::<PsView, ErrorBody>(),
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

fn scope_arg(args: &Args) -> Result<pb::Scope, ArgError> {
    Ok(match args.opt_enum("scope", &["project", "all"])? {
        Some("all") => pb::Scope::All,
        _ => pb::Scope::Project,
    })
}

pub(super) async fn ps(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let parsed = (|| -> Result<pb::ListRequest, ArgError> {
        let limit = args.opt_u64("limit")?.unwrap_or(50);
        if limit == 0 {
            return Err(ArgError("limit must be at least 1".into()));
        }
        Ok(pb::ListRequest {
            include_completed: args.opt_bool("include_completed")?.unwrap_or(true),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            scope: scope_arg(args)? as i32,
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return respond(Value::Object(arg_error(&e, None))),
    };
    match ctx.session.list(req).await {
        Ok(r) => respond_with(&PsView {
            processes: r.processes.iter().map(ProcessSummary::from).collect(),
        }),
        Err(e) => {
            let (msg, kind) = describe(&e);
            respond(json!({"error": msg, "error_kind": kind}))
        }
    }
}

pub(super) fn cleanup_definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "completed_older_than_ms": {"type": "integer", "minimum": 0, "default": DEFAULT_CLEANUP_OLDER_THAN_MS, "description": "Remove completed processes that ended longer ago than this."},
            "stopped_older_than_ms": {"type": "integer", "minimum": 0, "default": DEFAULT_CLEANUP_OLDER_THAN_MS, "description": "Remove stopped, timed-out, failed and lost processes that ended longer ago than this."}
        },
        "additionalProperties": true
    });
    tool(
        "cleanup",
        "Remove old process records",
        "Remove the records (and saved output) of this project's processes that ended long enough ago. Running \
         processes are never touched."
            .to_string(),
        input,
        output_schema::<CleanupView, ErrorBody>(),
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true)
            .open_world(false),
    )
}

pub(super) async fn cleanup(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let parsed = (|| -> Result<pb::CleanupRequest, ArgError> {
        Ok(pb::CleanupRequest {
            completed_older_than_ms: Some(
                args.opt_u64("completed_older_than_ms")?
                    .unwrap_or(DEFAULT_CLEANUP_OLDER_THAN_MS),
            ),
            stopped_older_than_ms: Some(
                args.opt_u64("stopped_older_than_ms")?
                    .unwrap_or(DEFAULT_CLEANUP_OLDER_THAN_MS),
            ),
            scope: pb::Scope::Project as i32,
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return respond(Value::Object(arg_error(&e, None))),
    };
    match ctx.session.cleanup(req).await {
        Ok(r) => respond_with(&CleanupView { removed: r.removed }),
        Err(e) => {
            let (msg, kind) = describe(&e);
            respond(json!({"error": msg, "error_kind": kind}))
        }
    }
}
