//! `execute`, `list`, `status`, `output`, `tail` and `kill`: one or two control-plane calls each.

use yieldshell_proto::client::ClientError;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::ids::is_client_process_id;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::ENV_ALLOW_COMMANDS;
use yieldshell_proto::views::{format_unix_ms, text};

use super::config::{ENV_ALLOWED_COMMANDS, READ_PAGE_BYTES};
use super::{
    ExecuteOutput, JobSummary, KillOutput, ListOutput, ProcessOutput, StatusOutput, ToolError,
    job_status,
};
use crate::args::Args;
use crate::context::{Context, describe, env_var_set};

/// `tail`'s default line count (the spec's).
pub const DEFAULT_TAIL_LINES: u64 = 50;
/// Largest `lines` `tail` accepts (the spec's).
pub const MAX_TAIL_LINES: u64 = 1000;
/// Grace before `kill` escalates to SIGKILL: the original server's 5 s.
const KILL_GRACE_MS: u64 = 5_000;
/// Side effects every job declares: the spec has no such notion, and `UNKNOWN` says exactly
/// that (it is not blocked by default; `MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS` can block it).
const SIDE_EFFECTS: &str = "UNKNOWN";
/// Most pages one `output` reads. The daemon keeps at most 64 MiB of output per process
/// (`MAX_RING_BYTES`) and every page but the last moves at least [`READ_PAGE_BYTES`] forward,
/// so this reads everything retained, while a job flooding faster than we read cannot keep the
/// loop going for ever.
const MAX_PAGES: usize = 72;

/// A bad argument, worded as the original server's pydantic validation would be.
fn invalid(message: impl std::fmt::Display) -> ToolError {
    ToolError(format!("Invalid parameter: {message}"))
}

/// The required `job_id`. An id that is not a lowercase UUID names no job.
pub(crate) fn job_id(args: &Args) -> Result<String, ToolError> {
    let id = args.string("job_id").map_err(invalid)?;
    if is_client_process_id(&id) {
        Ok(id)
    } else {
        Err(ToolError::not_found(&id))
    }
}

/// Turns a failed call into the original's messages: unknown ids are `Job <id> not found`.
/// A one-byte latest view of job `id`: where its log stands (`next_seq`) and where the ring
/// starts (`retained_from_seq`), with its state. `what` names the tool in an error.
pub(crate) async fn latest_window(
    ctx: &Context,
    id: &str,
    what: &str,
) -> Result<pb::ReadResponse, ToolError> {
    ctx.session
        .read(pb::ReadRequest {
            process_id: id.to_string(),
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await
        .map_err(|e| call_error(&e, id, what))
}

pub(crate) fn call_error(e: &ClientError, job_id: &str, what: &str) -> ToolError {
    if e.kind() == ErrorKind::UnknownProcess {
        return ToolError::not_found(job_id);
    }
    let (message, _) = describe(e);
    ToolError(format!("Failed to {what}: {message}"))
}

/// The job's state, without its output.
pub(crate) async fn info(
    ctx: &Context,
    job_id: &str,
    what: &str,
) -> Result<pb::ProcessInfo, ToolError> {
    let r = ctx
        .session
        .read(pb::ReadRequest {
            process_id: job_id.to_string(),
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await
        .map_err(|e| call_error(&e, job_id, what))?;
    Ok(r.process.unwrap_or_default())
}

/// Everything retained from `since` on, paged forward so each byte comes exactly once.
pub(crate) async fn collect_since(
    ctx: &Context,
    job_id: &str,
    since: u64,
) -> Result<(Vec<u8>, Vec<u8>), ClientError> {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut seq = since.max(1);
    for _ in 0..MAX_PAGES {
        let r = ctx
            .session
            .read(pb::ReadRequest {
                process_id: job_id.to_string(),
                since_seq: Some(seq),
                max_output_bytes: Some(READ_PAGE_BYTES),
                ..Default::default()
            })
            .await?;
        let out = r.output.unwrap_or_default();
        stdout.extend_from_slice(&out.stdout);
        stderr.extend_from_slice(&out.stderr);
        if !out.has_more || out.next_seq <= seq {
            break;
        }
        seq = out.next_seq;
    }
    Ok((stdout, stderr))
}

fn process_output(stdout: &[u8], stderr: &[u8]) -> ProcessOutput {
    ProcessOutput {
        stdout: text(stdout).0,
        stderr: text(stderr).0,
    }
}

/// Maps an `exec` refusal onto the original's messages. The session's own limit is worded as
/// the original words it, naming the number the user set (`MCP_BG_MAX_JOBS`), not the
/// `YIELDSHELL_*` variable it became.
pub(crate) fn refusal(resp: &pb::ExecResponse, max_jobs: u32, allow_var: &str) -> ToolError {
    let kind = ErrorKind::parse(&resp.error_kind);
    let prefix = match kind {
        Some(ErrorKind::CommandDenied | ErrorKind::InvalidArgument) => "Invalid command",
        Some(ErrorKind::LimitReached) if resp.error.starts_with("this session") => {
            return ToolError(format!(
                "Job limit reached: Maximum concurrent jobs limit ({max_jobs}) reached"
            ));
        }
        Some(ErrorKind::LimitReached) => "Job limit reached",
        _ => "Failed to execute command",
    };
    ToolError(format!(
        "{prefix}: {}",
        in_profile_terms(&resp.error, allow_var)
    ))
}

/// A daemon message in the words of a profile's user: the daemon names the `YIELDSHELL_*`
/// variable a setting became (`YIELDSHELL_ALLOW_COMMANDS`), the user set the profile's own
/// (`allow_var`, e.g. `MCP_BG_ALLOWED_COMMANDS`).
pub(crate) fn in_profile_terms(message: &str, allow_var: &str) -> String {
    message.replace(ENV_ALLOW_COMMANDS, allow_var)
}

/// The allowlist variable a jobs-profile user set: `MCP_BG_ALLOWED_COMMANDS`, unless only
/// `YIELDSHELL_ALLOW_COMMANDS` is set.
fn allow_var(ctx: &Context) -> &'static str {
    if env_var_set(&ctx.config, ENV_ALLOWED_COMMANDS).is_some()
        || env_var_set(&ctx.config, ENV_ALLOW_COMMANDS).is_none()
    {
        ENV_ALLOWED_COMMANDS
    } else {
        ENV_ALLOW_COMMANDS
    }
}

pub(crate) async fn execute(ctx: &Context, args: &Args<'_>) -> Result<ExecuteOutput, ToolError> {
    let command = args
        .opt_string("command")
        .map_err(invalid)?
        .ok_or_else(|| invalid("missing required parameter command"))?;
    if command.trim().is_empty() {
        return Err(ToolError("Invalid command: Command cannot be empty".into()));
    }
    start(ctx, command.into_bytes(), None).await
}

/// Starts `line` as a new job under a fresh UUID; `name` is what `list` shows instead of the line
/// (the `mcp-background-job` profile runs a rewritten line but lists the command as given).
pub(crate) async fn start(
    ctx: &Context,
    line: Vec<u8>,
    name: Option<String>,
) -> Result<ExecuteOutput, ToolError> {
    let job_id = uuid::Uuid::new_v4().to_string();
    let req = pb::ExecRequest {
        command: line,
        side_effects: vec![SIDE_EFFECTS.to_string()],
        name,
        // Return as soon as the job is registered: every job runs in the background.
        yield_ms: Some(0),
        process_id: Some(job_id.clone()),
        ..Default::default()
    };
    let resp = ctx
        .session
        .exec(req)
        .await
        .map_err(|e| ToolError(format!("Failed to execute command: {}", describe(&e).0)))?;
    let Some(process) = resp.process.as_ref() else {
        return Err(refusal(
            &resp,
            ctx.config.policy.max_processes.unwrap_or_default(),
            allow_var(ctx),
        ));
    };
    if process.process_id != job_id {
        // A daemon older than client-chosen ids ignored ours. Its process would be a job nobody
        // can address, so end it and say what to restart.
        let stop = pb::StopRequest {
            process_id: process.process_id.clone(),
            signal: "SIGKILL".into(),
            force_after_ms: Some(0),
            ..Default::default()
        };
        let _ = ctx.session.stop(stop).await;
        return Err(ToolError(
            "Failed to execute command: the running yieldshelld is too old for the jobs profile \
             (it ignores client-chosen job ids); restart it with `yieldctl daemon stop`"
                .into(),
        ));
    }
    Ok(ExecuteOutput { job_id })
}

pub(crate) async fn list(ctx: &Context) -> Result<ListOutput, ToolError> {
    let jobs = list_as(ctx, |p| JobSummary {
        job_id: p.process_id.clone(),
        status: job_status(p),
        command: String::from_utf8_lossy(&p.command).into_owned(),
        started: format_unix_ms(p.started_at_unix_ms),
    })
    .await?;
    Ok(ListOutput { jobs })
}

/// The project's jobs (processes with a client-chosen id), each summarised by `summary`: the one
/// listing behind both jobs profiles, which word a job differently.
pub(crate) async fn list_as<T>(
    ctx: &Context,
    summary: impl Fn(&pb::ProcessInfo) -> T,
) -> Result<Vec<T>, ToolError> {
    let req = pb::ListRequest {
        include_completed: true,
        limit: 0,
        scope: pb::Scope::Project as i32,
        ..Default::default()
    };
    let resp = ctx
        .session
        .list(req)
        .await
        .map_err(|e| ToolError(format!("Failed to list jobs: {}", describe(&e).0)))?;
    Ok(resp
        .processes
        .iter()
        .filter(|p| is_client_process_id(&p.process_id))
        .map(summary)
        .collect())
}

pub(crate) async fn status(ctx: &Context, args: &Args<'_>) -> Result<StatusOutput, ToolError> {
    let id = job_id(args)?;
    let p = info(ctx, &id, "get job status").await?;
    Ok(StatusOutput {
        status: job_status(&p),
    })
}

pub(crate) async fn output(ctx: &Context, args: &Args<'_>) -> Result<ProcessOutput, ToolError> {
    let id = job_id(args)?;
    // The original returns its bounded buffer (`MCP_BG_MAX_OUTPUT_SIZE`, the session's ring):
    // page from where the ring starts, not from the spool's older bytes, which forward reads
    // would otherwise include.
    let kept_from = latest_window(ctx, &id, "get job output")
        .await?
        .output
        .map_or(1, |o| o.retained_from_seq);
    let (stdout, stderr) = collect_since(ctx, &id, kept_from)
        .await
        .map_err(|e| call_error(&e, &id, "get job output"))?;
    Ok(process_output(&stdout, &stderr))
}

pub(crate) async fn tail(ctx: &Context, args: &Args<'_>) -> Result<ProcessOutput, ToolError> {
    let id = job_id(args)?;
    let lines = args
        .opt_u64("lines")
        .map_err(invalid)?
        .unwrap_or(DEFAULT_TAIL_LINES);
    if !(1..=MAX_TAIL_LINES).contains(&lines) {
        return Err(invalid(format!(
            "lines must be between 1 and {MAX_TAIL_LINES}, not {lines}"
        )));
    }
    // Each stream's own last lines, as the original keeps one buffer per stream.
    let mut texts = Vec::with_capacity(2);
    for streams in [pb::Streams::Stdout, pb::Streams::Stderr] {
        let r = ctx
            .session
            .read(pb::ReadRequest {
                process_id: id.clone(),
                max_output_bytes: Some(READ_PAGE_BYTES),
                streams: streams as i32,
                tail_lines: Some(lines as u32),
                ..Default::default()
            })
            .await
            .map_err(|e| call_error(&e, &id, "tail job output"))?;
        let out = r.output.unwrap_or_default();
        texts.push(match streams {
            pb::Streams::Stderr => out.stderr,
            _ => out.stdout,
        });
    }
    Ok(process_output(&texts[0], &texts[1]))
}

pub(crate) async fn kill(ctx: &Context, args: &Args<'_>) -> Result<KillOutput, ToolError> {
    let id = args.string("job_id").map_err(invalid)?;
    let answer = |s: &str| Ok(KillOutput { status: s.into() });
    if !is_client_process_id(&id) {
        return answer("not_found");
    }
    let req = pb::StopRequest {
        process_id: id.clone(),
        signal: "SIGTERM".into(),
        force_after_ms: Some(KILL_GRACE_MS),
        ..Default::default()
    };
    match ctx.session.stop(req).await {
        Ok(r) if r.stopped => answer("killed"),
        Ok(r) if r.error_kind == ErrorKind::ProcessExited.as_str() => answer("already_terminated"),
        Ok(r) => Err(ToolError(format!("Failed to kill job: {}", r.error))),
        Err(e) if e.kind() == ErrorKind::UnknownProcess => answer("not_found"),
        Err(e) => Err(ToolError(format!("Failed to kill job: {}", describe(&e).0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_variables_of_the_profile() {
        let refused = |kind: ErrorKind, error: &str| pb::ExecResponse {
            error: error.to_string(),
            error_kind: kind.as_str().to_string(),
            ..Default::default()
        };
        let r = refusal(
            &refused(
                ErrorKind::CommandDenied,
                "program \"rm\" is not in YIELDSHELL_ALLOW_COMMANDS (allowed: ls)",
            ),
            10,
            ENV_ALLOWED_COMMANDS,
        );
        assert_eq!(
            r.0,
            "Invalid command: program \"rm\" is not in MCP_BG_ALLOWED_COMMANDS (allowed: ls)"
        );
        let r = refusal(
            &refused(
                ErrorKind::LimitReached,
                "this session already runs 2 processes (YIELDSHELL_MAX_PROCESSES=2); stop one",
            ),
            2,
            ENV_ALLOWED_COMMANDS,
        );
        assert_eq!(
            r.0,
            "Job limit reached: Maximum concurrent jobs limit (2) reached"
        );
    }
}
