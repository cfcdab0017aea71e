//! The `read` and `wait` tools.

use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::DEFAULT_MAX_OUTPUT_BYTES;
use yieldshell_proto::views::{ProcessErrorView, ReadView, StreamSelection, WaitView};

use super::{
    MAX_BLOCKING_MS, arg_error, output_schema, process_error, respond, respond_with, tool,
};
use crate::args::{ArgError, Args};
use crate::context::{Context, describe};
use crate::progress::{Progress, SettleSpec, Settled, run_until_settled};

/// Largest `tail_lines`.
const MAX_TAIL_LINES: u64 = 100_000;
/// Most `context` lines around a `grep` match (the daemon's bound).
const MAX_CONTEXT: u64 = 20;

pub(super) fn read_definition(ctx: &Context) -> Tool {
    let max_out = ctx
        .config
        .policy
        .max_output_bytes
        .unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
    // Within the tool list's 5,000 bytes: bounds the daemon enforces anyway (and answers with
    // the range) are left out of the schema, except the output cap, which is the session's.
    let input = json!({
        "type": "object",
        "properties": {
            "process_id": {"type": "string"},
            "since_seq": {"type": "integer", "description": "Go on from a next_seq; omit: latest."},
            "tail_lines": {"type": "integer", "description": "Latest N lines."},
            "streams": {"type": "string", "enum": ["both", "stdout", "stderr"]},
            "max_output_bytes": {"type": "integer", "maximum": max_out, "description": "Per stream."},
            "screen": {"type": "boolean", "description": "tty: rendered screen."},
            "raw": {"type": "boolean"},
            "grep": {"type": "string", "description": "Regex: only matching lines, with seq (whole log)."},
            "context": {"type": "integer", "description": "grep: lines around each."}
        },
        "required": ["process_id"]
    });
    tool(
        "read",
        "Read a process's output",
        "A process's output (latest, by since_seq, or grep), status and exit code.".to_string(),
        input,
        output_schema::<ReadView, ProcessErrorView>(),
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

fn streams_arg(args: &Args) -> Result<StreamSelection, ArgError> {
    Ok(args
        .opt_enum("streams", &["both", "stdout", "stderr"])?
        .and_then(StreamSelection::parse)
        .unwrap_or(StreamSelection::Both))
}

pub(super) async fn read(ctx: &Context, args: &Args<'_>) -> CallToolResult {
    let id = args
        .opt_string("process_id")
        .ok()
        .flatten()
        .unwrap_or_default();
    let parsed = (|| -> Result<pb::ReadRequest, ArgError> {
        let process_id = args.string("process_id")?;
        let streams = streams_arg(args)?;
        let tail_lines = args.opt_u64("tail_lines")?;
        if tail_lines.is_some_and(|n| n == 0 || n > MAX_TAIL_LINES) {
            return Err(ArgError(format!(
                "tail_lines must be between 1 and {MAX_TAIL_LINES}"
            )));
        }
        let grep = args.opt_string("grep")?.filter(|g| !g.is_empty());
        let context = args.opt_u64("context")?;
        if context.is_some_and(|n| n > MAX_CONTEXT) {
            return Err(ArgError(format!(
                "context must be between 0 and {MAX_CONTEXT}"
            )));
        }
        if grep.is_some() && tail_lines.is_some() {
            return Err(ArgError(
                "grep searches forward from since_seq (default 1); tail_lines is for the \
                 latest output without grep"
                    .to_string(),
            ));
        }
        Ok(pb::ReadRequest {
            process_id,
            grep,
            context: context.map(|n| n as u32),
            since_seq: args.opt_u64("since_seq")?.map(|s| s.max(1)),
            max_output_bytes: args.opt_u64("max_output_bytes")?,
            streams: streams.to_pb() as i32,
            tail_lines: tail_lines.map(|n| n as u32),
            screen: args.opt_bool("screen")?.unwrap_or(false),
            raw: args.opt_bool("raw")?.unwrap_or(false),
            ..Default::default()
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return respond(Value::Object(arg_error(&e, Some(&id)))),
    };
    let streams = streams_arg(args).unwrap_or(StreamSelection::Both);
    match ctx.session.read(req.clone()).await {
        Ok(r) => respond_with(
            &ReadView::new(
                &r.process.unwrap_or_default(),
                &r.output.unwrap_or_default(),
                streams,
            )
            .with_screen(r.screen.as_ref())
            .with_search(r.search.as_ref()),
        ),
        Err(e) => {
            let (msg, kind) = describe(&e);
            respond(Value::Object(process_error(&req.process_id, &msg, kind)))
        }
    }
}

pub(super) fn wait_definition(ctx: &Context) -> Tool {
    let max_out = ctx
        .config
        .policy
        .max_output_bytes
        .unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
    let input = json!({
        "type": "object",
        "properties": {
            "process_id": {"type": "string"},
            "timeout_ms": {"type": "integer", "maximum": MAX_BLOCKING_MS, "default": 30_000},
            "until": {"type": "string", "description": "Regex: return once an output line matches."},
            "since_seq": {"type": "integer", "default": 1, "description": "Where until starts matching."},
            "max_output_bytes": {"type": "integer", "maximum": max_out, "description": "Per stream."},
            "for_input": {"type": "boolean", "description": "Also return once it waits for stdin."}
        },
        "required": ["process_id"]
    });
    tool(
        "wait",
        "Wait for a process",
        // read's fields and wait_result: the output schema says so.
        "Block until it exits, a line matches until, or timeout_ms (then it runs on).".to_string(),
        input,
        output_schema::<WaitView, ProcessErrorView>(),
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

pub(super) async fn wait(
    ctx: &Context,
    args: &Args<'_>,
    request: &RequestContext<RoleServer>,
) -> CallToolResult {
    let id = args
        .opt_string("process_id")
        .ok()
        .flatten()
        .unwrap_or_default();
    let parsed = (|| -> Result<(pb::WaitRequest, u64), ArgError> {
        let process_id = args.string("process_id")?;
        let timeout = args
            .opt_u64("timeout_ms")?
            .unwrap_or(30_000)
            .min(MAX_BLOCKING_MS);
        let until = args.opt_string("until")?.filter(|u| !u.is_empty());
        Ok((
            pb::WaitRequest {
                process_id,
                until,
                since_seq: args.opt_u64("since_seq")?.map(|s| s.max(1)),
                max_output_bytes: args.opt_u64("max_output_bytes")?,
                streams: pb::Streams::Both as i32,
                for_input: args.opt_bool("for_input")?.unwrap_or(false),
                ..Default::default()
            },
            timeout,
        ))
    })();
    let (req, timeout) = match parsed {
        Ok(r) => r,
        Err(e) => return respond(Value::Object(arg_error(&e, Some(&id)))),
    };
    let process_id = req.process_id.clone();
    let started = Instant::now();
    let progress = Progress::for_call(request, timeout);
    let spec = SettleSpec {
        request,
        progress: progress.as_ref(),
        what: "waiting",
        wait: req,
        budget_ms: timeout,
        started,
    };
    match run_until_settled(&ctx.session, spec, None).await {
        Settled::Done(resp) | Settled::OutOfTime(resp) => respond_with(&WaitView::from(&resp)),
        Settled::Cancelled(_) => respond(Value::Object(process_error(
            &process_id,
            "the wait was cancelled by the client",
            "invalid_argument",
        ))),
        Settled::Failed(e, _) => {
            let (msg, kind) = describe(&e);
            respond(Value::Object(process_error(&process_id, &msg, kind)))
        }
    }
}
