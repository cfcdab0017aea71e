//! `Write`, `Stop`, `List` and `Cleanup`.

use std::path::Path;
use std::time::{Duration, SystemTime};

use yieldshell_proto::deadlines::{STOP_GRACE_DEFAULT_MS, STOP_GRACE_MAX_MS};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::DEFAULT_CLEANUP_OLDER_THAN_MS;

use super::{ControlService, MAX_WRITE_BYTES, at_most};
use crate::process::{
    ManagedProcess, ProcState, Status, StopOutcome, StopReason, live_facts, resources, signal_name,
    terminal, tree,
};
use crate::sandbox::Grant;
use crate::session::Session;
use crate::status::ExitHow;

pub(super) async fn write(
    svc: &ControlService,
    caller: Option<&Grant>,
    req: pb::WriteRequest,
) -> Result<pb::WriteResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let proc = svc.lookup(&session, &req.process_id)?;
    // Input is what a wider-sandboxed process (a shell, a REPL) would run for a sandboxed one.
    if !super::caller::may_act_on(caller, &proc) {
        return Err(super::caller::denied("write"));
    }
    if req.input.len() > MAX_WRITE_BYTES {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "input is {} bytes; at most {MAX_WRITE_BYTES} bytes per write",
            req.input.len()
        )));
    }
    let mut req = req;
    terminal_input(&proc, &mut req)?;
    if req.until.as_deref().is_some_and(|u| !u.is_empty()) {
        return super::output::write_until(svc, &proc, session.policy.max_output_bytes, req).await;
    }
    // A resize alone writes nothing.
    if req.input.is_empty() && !req.eof && (req.cols.is_some() || req.rows.is_some()) {
        return Ok(pb::WriteResponse {
            ok: true,
            process: Some(proc.info()),
            ..Default::default()
        });
    }
    match proc.write_stdin(req.input, req.eof).await {
        Ok(n) => Ok(pb::WriteResponse {
            ok: true,
            bytes_written: n as u64,
            ..Default::default()
        }),
        // The answer echoes the process id already: the message does not repeat it.
        Err(e) => Err(e.kind.status(e.message)),
    }
}

/// Terminal mode's parts of a `write` (ARCHITECTURE.md, "Terminal processes"): the named `keys` are appended to `input`
/// (every name is checked before anything is written), and `cols`/`rows` resize the terminal
/// now. Both are refused for a process on pipes.
fn terminal_input(proc: &ManagedProcess, req: &mut pb::WriteRequest) -> Result<(), tonic::Status> {
    let resize = req.cols.is_some() || req.rows.is_some();
    let Some(term) = proc.terminal.as_ref() else {
        if !req.keys.is_empty() || resize {
            return Err(ErrorKind::InvalidArgument.status(
                "the process runs on pipes, not a terminal: keys, cols and rows need a process started with tty=true (send text with input)",
            ));
        }
        return Ok(());
    };
    for name in &req.keys {
        let bytes = term.key_bytes(name).ok_or_else(|| {
            ErrorKind::InvalidArgument.status(format!(
                "unknown key {name:?}; keys are {} (case-insensitive)",
                terminal::KEY_NAMES
            ))
        })?;
        req.input.extend_from_slice(&bytes);
    }
    if req.input.len() > MAX_WRITE_BYTES {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "input and keys are {} bytes; at most {MAX_WRITE_BYTES} bytes per write",
            req.input.len()
        )));
    }
    if resize {
        let now = term.size().unwrap_or(terminal::DEFAULT_SIZE);
        let size = terminal::requested_size(req.cols, req.rows, now)
            .map_err(|m| ErrorKind::InvalidArgument.status(m))?;
        term.resize(size).map_err(|e| {
            ErrorKind::ProcessExited.status(format!("resizing the terminal failed: {e}"))
        })?;
    }
    Ok(())
}

/// `completed, exit code 3`, `stopped, SIGTERM`: the status a client is told, and how its shell
/// ended.
fn describe_end(state: &ProcState) -> String {
    let status = state.status().as_str();
    match state.exit() {
        Some(ExitHow::Code(c)) => format!("{status}, exit code {c}"),
        Some(ExitHow::Signal(s)) => format!("{status}, {}", signal_name(s)),
        None => status.to_string(),
    }
}

pub(super) async fn stop(
    svc: &ControlService,
    caller: Option<&Grant>,
    req: pb::StopRequest,
) -> Result<pb::StopResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let proc = svc.lookup(&session, &req.process_id)?;
    if !super::caller::may_act_on(caller, &proc) {
        return Err(super::caller::denied("stop"));
    }
    let name = if req.signal.trim().is_empty() {
        "SIGTERM"
    } else {
        req.signal.as_str()
    };
    let signal = tree::parse_signal(name).ok_or_else(|| {
        ErrorKind::InvalidArgument.status(format!(
            "unknown signal {name:?}; use a name such as SIGTERM, TERM, SIGINT, SIGHUP, SIGKILL (with or without SIG) or a signal number"
        ))
    })?;
    at_most("force_after_ms", req.force_after_ms, STOP_GRACE_MAX_MS)
        .map_err(|m| ErrorKind::InvalidArgument.status(m))?;
    let grace_ms = req.force_after_ms.unwrap_or(STOP_GRACE_DEFAULT_MS);
    let outcome = proc
        .stop(signal, Duration::from_millis(grace_ms), StopReason::Request)
        .await;
    let mut resp = pb::StopResponse {
        signal: signal.as_str().to_string(),
        ..Default::default()
    };
    match outcome {
        StopOutcome::Stopped { escalated } => {
            resp.stopped = true;
            resp.escalated = escalated;
        }
        StopOutcome::Incomplete { survivors } => {
            resp.escalated = true;
            resp.error = format!(
                "not stopped: {} process{} of its tree survived SIGKILL for {} s (uninterruptible \
                 sleep, or another user's); the daemon keeps killing them and the process is \
                 not recorded as stopped until they are gone (see `ps` and the daemon log)",
                survivors,
                if survivors == 1 { "" } else { "es" },
                tree::KILL_GIVE_UP.as_secs()
            );
            resp.error_kind = ErrorKind::StopIncomplete.as_str().into();
        }
        StopOutcome::AlreadyEnded => {
            // Nothing was signalled: the answer says how the process ended (its own signal, if
            // a signal ended it), not the signal this call asked for.
            let state = proc.state().reported();
            resp.signal = state
                .exit()
                .and_then(ExitHow::signal)
                .map(signal_name)
                .unwrap_or_default();
            resp.error = format!(
                "process {} had already ended ({}); nothing was running to stop",
                proc.facts.id,
                describe_end(&state)
            );
            resp.error_kind = ErrorKind::ProcessExited.as_str().into();
        }
    }
    resp.process = Some(proc.info());
    Ok(resp)
}

/// The running process an identical exec would duplicate (`crate::process::twins`): the same
/// key and sandbox grant, in the session's project and scope, one the caller may act on.
pub(super) fn running_twin(
    svc: &ControlService,
    session: &Session,
    caller: Option<&Grant>,
    key: crate::process::twins::TwinKey,
    grant: Option<&Grant>,
) -> Option<std::sync::Arc<ManagedProcess>> {
    // `None`: unsandboxed, as a process without a confinement.
    let same_grant = |p: &ManagedProcess| p.facts.sandbox.as_ref().map(|c| &c.grant) == grant;
    scoped(svc, session, pb::Scope::Project as i32)
        .ok()?
        .filter(|p| p.facts.twin == Some(key) && p.is_running())
        .filter(|p| same_grant(p) && super::caller::may_act_on(caller, p))
        // The newest, should several be (started before reuse existed, or by yieldctl).
        .max_by_key(|p| p.facts.started_at)
}

/// Whether `p` belongs to the session's project: started by the session, or running inside the
/// session's default cwd (after resolving symlinks).
fn in_project(session: &Session, project_root: Option<&Path>, p: &ManagedProcess) -> bool {
    p.facts.session_id == session.id
        || project_root.is_some_and(|root| p.facts.cwd.starts_with(root))
}

fn scoped<'a>(
    svc: &'a ControlService,
    session: &'a Session,
    scope: i32,
) -> Result<impl Iterator<Item = std::sync::Arc<ManagedProcess>> + 'a, tonic::Status> {
    let all_scope = match pb::Scope::try_from(scope) {
        Ok(pb::Scope::All) => true,
        Ok(pb::Scope::Project) => false,
        Err(_) => return Err(ErrorKind::InvalidArgument.status("scope must be project or all")),
    };
    let root = std::fs::canonicalize(&session.default_cwd).ok();
    Ok(svc
        .daemon
        .registry
        .all()
        .into_iter()
        .filter(move |p| session.policy.cwd_allowed(&p.facts.cwd))
        .filter(move |p| all_scope || in_project(session, root.as_deref(), p)))
}

pub(super) async fn list(
    svc: &ControlService,
    req: pb::ListRequest,
) -> Result<pb::ListResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let mut procs: Vec<_> = scoped(svc, &session, req.scope)?
        .filter(|p| req.include_completed || p.is_running())
        .collect();
    procs.sort_by(|a, b| {
        b.facts
            .started_at
            .cmp(&a.facts.started_at)
            .then_with(|| b.facts.id.cmp(&a.facts.id))
    });
    let matched = u32::try_from(procs.len()).unwrap_or(u32::MAX);
    if req.limit > 0 {
        procs.truncate(req.limit as usize);
    }
    let mut processes: Vec<_> = procs.iter().map(|p| p.info()).collect();
    live_facts::annotate(
        live_facts::Freshness::Reused,
        procs.iter().map(|p| &**p).zip(processes.iter_mut()),
    )
    .await;
    resources::annotate(&svc.daemon, processes.iter_mut()).await;
    Ok(pb::ListResponse { processes, matched })
}

pub(super) fn cleanup(
    svc: &ControlService,
    caller: Option<&Grant>,
    req: pb::CleanupRequest,
) -> Result<pb::CleanupResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let completed_age = Duration::from_millis(
        req.completed_older_than_ms
            .unwrap_or(DEFAULT_CLEANUP_OLDER_THAN_MS),
    );
    let stopped_age = Duration::from_millis(
        req.stopped_older_than_ms
            .unwrap_or(DEFAULT_CLEANUP_OLDER_THAN_MS),
    );
    let now = SystemTime::now();
    let mut removed_ids = Vec::new();
    for p in scoped(svc, &session, req.scope)? {
        let state = p.state();
        // Only finished results with nothing left running: a record whose descendants still run
        // is what `stop` needs to find them.
        // Not one left for a daemon that speaks its holder's protocol, which needs its record.
        if !state.finished() {
            continue;
        }
        let threshold = if state.status() == Status::Completed {
            completed_age
        } else {
            stopped_age
        };
        let ended = state.ended_at().unwrap_or(p.facts.started_at);
        if now.duration_since(ended).unwrap_or_default() < threshold {
            continue;
        }
        // A sandboxed caller cleans up only processes no freer than itself.
        if !super::caller::may_act_on(caller, &p) {
            continue;
        }
        svc.daemon.forget(&p.facts.id);
        removed_ids.push(p.facts.id.clone());
    }
    Ok(pb::CleanupResponse {
        removed: u32::try_from(removed_ids.len()).unwrap_or(u32::MAX),
        removed_ids,
    })
}
