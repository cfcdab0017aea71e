//! The `write`, `stop`, `ps` and `cleanup` tools.

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::DEFAULT_CLEANUP_OLDER_THAN_MS;
use yieldshell_proto::views::{CleanupView, ProcessSummary, PsView, StopView, WriteView};

use super::{ErrorBody, MAX_BLOCKING_MS, arg_error, output_schema, respond, respond_with, tool};
use crate::args::{ArgError, Args};
use crate::context::{Context, describe};

pub(super) fn write_definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "process_id": {"type": "string"},
            "input": {"type": "string"},
            "newline": {"type": "boolean", "description": "Append \\n."},
            "keys": {"type": "array", "items": {"type": "string"}, "description": "tty: Enter Tab Up… F1 C-c"},
            "eof": {"type": "boolean", "description": "Then close stdin."},
            "cols": {"type": "integer"},
            "rows": {"type": "integer"},
            "until": {"type": "string", "description": "Regex: then return the output after it, up to a matching line."},
            "timeout_ms": {"type": "integer", "maximum": MAX_BLOCKING_MS, "default": DEFAULT_WRITE_WAIT_MS}
        },
        "required": ["process_id", "input"]
    });
    tool(
        "write",
        "Write to a process's stdin",
        "Write to a running process's stdin. With until: one call per REPL/prompt exchange."
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

/// How long `write` with `until` waits by default.
const DEFAULT_WRITE_WAIT_MS: u64 = 30_000;

pub(super) async fn write(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let id = args
        .opt_string("process_id")
        .ok()
        .flatten()
        .unwrap_or_default();
    let fail = |error: String, kind: &str| respond_with(&WriteView::failed(&id, error, kind));
    let parsed = (|| -> Result<pb::WriteRequest, ArgError> {
        let process_id = args.string("process_id")?;
        let keys = args.string_list("keys")?.unwrap_or_default();
        let (cols, rows) = (
            super::exec::opt_u32(args, "cols")?,
            super::exec::opt_u32(args, "rows")?,
        );
        let eof = args.opt_bool("eof")?.unwrap_or(false);
        // The schema keeps `input` required (the seed's contract), but a call that sends only
        // keys, a resize or EOF is taken without it.
        let mut input = match args.opt_string("input")? {
            Some(i) => i.into_bytes(),
            None if !keys.is_empty() || cols.is_some() || rows.is_some() || eof => Vec::new(),
            None => return Err(ArgError("missing required parameter input".into())),
        };
        if args.opt_bool("newline")?.unwrap_or(false) {
            input.push(b'\n');
        }
        let until = args.opt_string("until")?.filter(|u| !u.is_empty());
        let timeout_ms = args
            .opt_u64("timeout_ms")?
            .unwrap_or(DEFAULT_WRITE_WAIT_MS)
            .min(MAX_BLOCKING_MS);
        Ok(pb::WriteRequest {
            process_id,
            input,
            keys,
            cols,
            rows,
            eof,
            timeout_ms: until.is_some().then_some(timeout_ms),
            until,
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return fail(e.0, "invalid_argument"),
    };
    match ctx.session.write(req).await {
        Ok(r) => respond_with(&WriteView::written(&id, &r)),
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
            "process_id": {"type": "string"},
            "signal": {"type": "string", "default": "SIGTERM"},
            "force_after_ms": {"type": "integer", "default": 3000, "description": "Then SIGKILL."}
        },
        "required": ["process_id"]
    });
    tool(
        "stop",
        "Stop a process tree",
        "Stop a process and its whole tree; returns once all are gone.".to_string(),
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
            "include_completed": {"type": "boolean", "default": true},
            "limit": {"type": "integer", "minimum": 1, "default": 50},
            "scope": {"type": "string", "enum": ["project", "all"], "default": "project", "description": "all: every process of this user."}
        }
    });
    tool(
        "ps",
        "List processes",
        "List processes, newest first, earlier sessions' too.".to_string(),
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
            "completed_older_than_ms": {"type": "integer", "default": DEFAULT_CLEANUP_OLDER_THAN_MS},
            "stopped_older_than_ms": {"type": "integer", "default": DEFAULT_CLEANUP_OLDER_THAN_MS}
        }
    });
    tool(
        "cleanup",
        "Remove old process records",
        "Remove the records and output of this project's processes that ended that long ago."
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
