//! `Exec`: validate ([`admit`]: every check, and the start it asks for), look up (an identical
//! running process is the answer), forward (the start is `process::launch`'s), then the yield
//! wait ([`yield_wait`]) and the answer ([`answer`]) — all in the daemon, so a fast command
//! returns the moment it has exited and drained, and a slow one is already a managed background
//! process when the yield time runs out. With `until` the yield wait also ends at the first
//! output line that matches (a ready-wait), using `wait(until)`'s matcher.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::ids::is_client_process_id;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::{bytes_os, os_bytes};

use super::output::{LineMatcher, outcome_fields, until_matcher, wait_until_match};
use super::{
    ControlService, MAX_DURATION_MS, MAX_WRITE_BYTES, at_most, clamp_output_bytes, output_to_pb,
};
use crate::output::{ReadQuery, StreamFilter};
use crate::policy::Refusal;
use crate::policy::redact::Redactor;
use crate::process::terminal::TermSize;
use crate::process::twins::{self, TwinKey};
use crate::process::{ManagedProcess, ProcState, Status, input_wait, launch, live_facts, terminal};
use crate::session::{Session, check_env_size};

fn refused(r: Refusal) -> pb::ExecResponse {
    pb::ExecResponse {
        status: pb::ExecStatus::FailedToStart as i32,
        error: r.message,
        error_kind: r.kind.as_str().to_string(),
        output: Some(pb::Output {
            first_seq: 1,
            next_seq: 1,
            retained_from_seq: 1,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Longest process `name`.
const MAX_NAME_BYTES: usize = 4096;

/// Refuses what is out of range before anything looks at the request: every numeric field has
/// a documented range (docs/RELIABILITY.md, "Input ranges"), and sizes are bounded so no request
/// makes the daemon work for long while other clients wait.
fn check_ranges(req: &pb::ExecRequest, default_timeout_ms: u64) -> Result<(), Refusal> {
    let invalid = |message: String| Refusal {
        kind: ErrorKind::InvalidArgument,
        message,
    };
    at_most("yield_ms", req.yield_ms, MAX_DURATION_MS).map_err(invalid)?;
    match req.timeout_ms {
        Some(_) => at_most("timeout_ms", req.timeout_ms, MAX_DURATION_MS),
        None => at_most(
            "timeout_ms (the session's default timeout)",
            Some(default_timeout_ms),
            MAX_DURATION_MS,
        ),
    }
    .map_err(invalid)?;
    let stdin = req.stdin.as_ref().map_or(0, Vec::len);
    if stdin > MAX_WRITE_BYTES {
        return Err(invalid(format!(
            "stdin is {stdin} bytes; at most {MAX_WRITE_BYTES} bytes (send more with write)"
        )));
    }
    check_env_size("env", req.env.iter().map(|v| (&v.name[..], &v.value[..]))).map_err(invalid)?;
    let name = req.name.as_ref().map_or(0, String::len);
    if name > MAX_NAME_BYTES {
        return Err(invalid(format!(
            "name is {name} bytes; at most {MAX_NAME_BYTES}"
        )));
    }
    Ok(())
}

/// The session environment with the overlay applied (overlay wins; a later overlay entry wins
/// over an earlier one). Linear: one hash lookup per variable, whatever the sizes.
fn merged_env(
    session: &Session,
    overlay: &[pb::EnvVar],
) -> Result<Vec<(OsString, OsString)>, Refusal> {
    // The overlay by name, in first-seen order; each value is taken once it has been placed.
    let mut values: Vec<(OsString, Option<OsString>)> = Vec::with_capacity(overlay.len());
    let mut position: HashMap<OsString, usize> = HashMap::with_capacity(overlay.len());
    for var in overlay {
        if var.name.is_empty()
            || var.name.contains(&b'=')
            || var.name.contains(&0)
            || var.value.contains(&0)
        {
            return Err(Refusal {
                kind: ErrorKind::InvalidArgument,
                message: format!(
                    "invalid environment variable {:?}: names must be non-empty without '=' or NUL, values without NUL",
                    String::from_utf8_lossy(&var.name)
                ),
            });
        }
        let name = bytes_os(&var.name);
        let value = Some(bytes_os(&var.value));
        match position.get(&name) {
            Some(&i) => values[i].1 = value,
            None => {
                position.insert(name.clone(), values.len());
                values.push((name, value));
            }
        }
    }
    let mut env = Vec::with_capacity(session.env.len() + values.len());
    for (name, value) in session.env.iter() {
        // The first session entry of a name takes the overlay's value, as a linear search would.
        let replaced = position
            .get(name.as_os_str())
            .and_then(|&i| values[i].1.take());
        env.push((name.clone(), replaced.unwrap_or_else(|| value.clone())));
    }
    env.extend(
        values
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    Ok(env)
}

/// The client-chosen process id, if the request names one (empty counts as none).
fn requested_id(req: &pb::ExecRequest) -> Option<&str> {
    req.process_id.as_deref().filter(|id| !id.is_empty())
}

fn exec_status(status: Status) -> pb::ExecStatus {
    match status {
        Status::Running => pb::ExecStatus::Backgrounded,
        Status::Completed => pb::ExecStatus::Completed,
        Status::Stopped => pb::ExecStatus::Stopped,
        Status::TimedOut => pb::ExecStatus::TimedOut,
        Status::Failed => pb::ExecStatus::Failed,
        Status::Lost => pb::ExecStatus::Lost,
    }
}

pub(super) async fn exec(
    svc: &ControlService,
    caller: Option<crate::sandbox::Grant>,
    mut req: pb::ExecRequest,
) -> Result<pb::ExecResponse, tonic::Status> {
    let d = &svc.daemon;
    let session = d.sessions.get(&req.session_id)?;
    if d.shutdown.is_cancelled() {
        return Err(ErrorKind::ShuttingDown.status("yieldshelld is shutting down"));
    }
    // Validate: nothing runs for a request refused here.
    let admitted = match admit(&session, caller.as_ref(), &req).await {
        Ok(a) => a,
        Err(r) => return Ok(refused(r)),
    };
    // Look up: an identical exec whose process still runs in this project is answered with
    // that process. The key's lock is held until the new process is registered (in the start's
    // task), so an identical exec arriving meanwhile finds it.
    let twin = admitted.start.twin.filter(|_| req.reuse_running);
    let twin_guard = match twin {
        Some(key) => Some(d.twin_starts.lock(key).await),
        None => None,
    };
    if let Some(key) = twin
        && let Some(running) = super::procs::running_twin(
            svc,
            &session,
            caller.as_ref(),
            key,
            admitted.start.sandbox.as_ref().map(|(g, _)| g),
        )
    {
        return Ok(reused(&running, admitted.max_out, admitted.yield_ms).await);
    }
    // Forward: the start (`process::launch`) in a task of its own, registration included, so a
    // client that vanishes while it is awaited leaves a registered process, never a half-started
    // one; then the yield wait and the answer.
    let (daemon, session_for_start) = (svc.daemon.clone(), session.clone());
    let started = tokio::spawn(async move {
        let started = launch::start(&daemon, &session_for_start, admitted.start).await;
        drop(twin_guard);
        started
    })
    .await;
    let proc = match started {
        Ok(Ok(p)) => p,
        Ok(Err(r)) => return Ok(refused(r)),
        Err(e) => {
            return Err(ErrorKind::Internal.status(format!("starting the process failed: {e}")));
        }
    };
    // From here on a vanished client leaves the process registered and running in the
    // background: every `.await` before came before anything started or could not be cut short.
    let waited = yield_wait(svc, &proc, &mut req, admitted.until, admitted.yield_ms).await;
    Ok(answer(svc, &proc, waited, admitted.max_out, admitted.yield_ms).await)
}

/// A request that passed every check: what to start, and how the exec waits and answers.
struct Admitted {
    start: launch::StartRequest,
    /// The ready-wait's matcher (`until`), compiled before anything runs.
    until: Option<LineMatcher>,
    yield_ms: u64,
    max_out: usize,
}

/// Every check of an `exec`, in the order README's "Security model" gives (side effects,
/// command policy, cwd, limits; the spawn's own come in `process::launch`), and the start it
/// asks for: the environment, the terminal, the sandbox's grant, the redactor, the deadlines.
async fn admit(
    session: &Session,
    caller: Option<&crate::sandbox::Grant>,
    req: &pb::ExecRequest,
) -> Result<Admitted, Refusal> {
    let policy = &session.policy;
    if let Some(id) = requested_id(req)
        && !is_client_process_id(id)
    {
        return Err(Refusal {
            kind: ErrorKind::InvalidArgument,
            message: format!(
                "process_id {id:?} is not a lowercase UUID (such as 0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b); omit it to get a daemon-chosen id"
            ),
        });
    }
    check_ranges(req, policy.default_timeout_ms)?;
    #[cfg(windows)]
    if req.tty {
        return Err(Refusal {
            kind: ErrorKind::InvalidArgument,
            message: "terminal mode (tty) is unsupported on Windows: processes run on pipes \
                      (ConPTY support is planned); run without tty"
                .to_string(),
        });
    }
    // A ready-wait's pattern is compiled before anything runs, so a bad one starts nothing.
    // It is rendered as a terminal shows it once the process (and its secrets) exists.
    let until = match req.until.as_deref().filter(|u| !u.is_empty()) {
        Some(pattern) => Some(until_matcher(pattern).map_err(|message| Refusal {
            kind: ErrorKind::InvalidArgument,
            message,
        })?),
        None => None,
    };
    policy.check_side_effects(&req.side_effects)?;
    policy.check_exec(&req.command, &req.env).await?;
    let requested_cwd = req
        .cwd
        .as_ref()
        .filter(|c| !c.is_empty())
        .map(|c| PathBuf::from(bytes_os(c)));
    let cwd = policy.resolve_cwd(requested_cwd.as_deref(), &session.default_cwd)?;
    let mut env = merged_env(session, &req.env)?;
    let terminal = terminal_of(req)?;
    // What the declaration grants (README, "Sandbox"), narrowed by the daemon's floor and by the
    // sandbox of the client that asks, when it runs inside one.
    let mut origin = policy.sandbox_origin(&req.side_effects, &session.default_cwd);
    origin.caller = caller.cloned();
    let grant = origin.grant();
    let sandbox = (!grant.is_unrestricted()).then_some((grant, origin));
    #[cfg(windows)]
    if sandbox.is_some() {
        return Err(Refusal::new(
            ErrorKind::SandboxUnavailable,
            "the sandbox is not available on Windows (YIELDSHELL_SANDBOX is not off for this \
             session): the command did not run",
        ));
    }
    // A program on a terminal looks at TERM to decide how to draw; the emulator is an xterm.
    if terminal.is_some() && !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), "xterm-256color".into()));
    }
    // A documented cap, not a refusal: the session's max_yield_ms (itself never above
    // MAX_DURATION_MS here, whatever the session sent).
    let yield_ms = req
        .yield_ms
        .unwrap_or(policy.default_yield_ms)
        .min(policy.max_yield_ms)
        .min(MAX_DURATION_MS);
    let timeout = match req.timeout_ms.unwrap_or(policy.default_timeout_ms) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    };
    let max_out = clamp_output_bytes(req.max_output_bytes, policy.max_output_bytes);
    // The session's own secrets are found once per session; only an overlay with secrets of
    // its own needs a redactor built for this one command.
    let redactor = if req.env.is_empty() {
        session.redactor()
    } else {
        let env_bytes: Vec<(Vec<u8>, Vec<u8>)> = env
            .iter()
            .map(|(k, v)| (os_bytes(k), os_bytes(v)))
            .collect();
        policy.redact_env.as_ref().and_then(|names| {
            Redactor::from_env(
                names,
                env_bytes.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
            )
        })
    };
    let twin = twins::has_twin_key(req).then(|| {
        TwinKey::of(
            &req.command,
            &cwd,
            req.name.as_deref().unwrap_or_default(),
            req.tty,
            &req.env,
        )
    });
    Ok(Admitted {
        start: launch::StartRequest {
            wanted_id: requested_id(req).map(str::to_string),
            name: req.name.clone().unwrap_or_default(),
            command: req.command.clone(),
            cwd,
            env,
            redactor,
            timeout,
            sandbox,
            terminal,
            shell: req.shell.clone(),
            twin,
        },
        until,
        yield_ms,
        max_out,
    })
}

/// How the yield wait ended.
struct Waited {
    /// The command waits for input (it stopped at a prompt before its yield ran out).
    for_input: bool,
    /// The line `until` matched, and its sequence number.
    matched_line: Vec<u8>,
    matched_seq: Option<u64>,
}

/// The yield wait: queues the initial stdin, then waits until the process settles, `until`
/// matches, the command wants input, the yield runs out or the daemon shuts down.
async fn yield_wait(
    svc: &ControlService,
    proc: &Arc<ManagedProcess>,
    req: &mut pb::ExecRequest,
    until: Option<LineMatcher>,
    yield_ms: u64,
) -> Waited {
    let d = &svc.daemon;
    let mut state_rx = proc.subscribe();
    // Settles once the initial stdin has been written: only then may the command be said to wait
    // for input (before, the input it waits for is on its way).
    let (stdin_written, stdin_settled) = tokio::sync::oneshot::channel::<()>();
    let mut stdin_written = Some(stdin_written);
    if req.stdin.as_ref().is_some_and(|s| !s.is_empty()) || req.close_stdin {
        // Queued now (so a later `write` cannot overtake it) but awaited elsewhere: a process
        // that does not read its input must not hold the exec past its yield.
        let data = req.stdin.take().unwrap_or_default();
        let id = proc.facts.id.clone();
        let done = stdin_written.take();
        match proc.queue_stdin(data, req.close_stdin) {
            Ok(written) => {
                tokio::spawn(async move {
                    if let Ok(Err(e)) = written.await {
                        // A command that exits without reading its input is not an error of exec.
                        tracing::debug!(process_id = %id, kind = %e.kind, "initial stdin not fully written: {}", e.message);
                    } else if let Some(done) = done {
                        let _ = done.send(());
                    }
                });
            }
            Err(e) => {
                tracing::debug!(process_id = %id, kind = %e.kind, "initial stdin not written: {}", e.message);
            }
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(yield_ms);
    let input_wanted = input_wanted(proc, stdin_written, stdin_settled, req.close_stdin);
    let mut waited = Waited {
        for_input: false,
        matched_line: Vec::new(),
        matched_seq: None,
    };
    let mut until = until.map(|m| m.on_terminal(proc.text_rendering()));
    match until.as_mut() {
        None => tokio::select! {
            _ = state_rx.wait_for(ProcState::settled) => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = d.shutdown.cancelled() => {}
            _ = input_wanted => waited.for_input = true,
        },
        // The yield wait with a ready-wait: the same matching loop as `wait(until)`, over the
        // whole log from its first byte. An exit ends it too, once the output is drained; so
        // does a command that stops to wait for input (it will not print the line unasked).
        Some(matcher) => tokio::select! {
            outcome = wait_until_match(
                proc,
                matcher,
                1,
                StreamFilter::Both,
                Some(deadline),
                &d.shutdown,
            ) => {
                (_, waited.matched_line, waited.matched_seq) = outcome_fields(outcome);
            }
            _ = input_wanted => waited.for_input = true,
        },
    }
    waited
}

/// The `exec` answer once the yield wait ended: the process as it is now, its output, and the
/// live facts a client acts on (a prompt, a listening port).
async fn answer(
    svc: &ControlService,
    proc: &Arc<ManagedProcess>,
    waited: Waited,
    max_out: usize,
    yield_ms: u64,
) -> pb::ExecResponse {
    let d = &svc.daemon;
    crate::answer_budget::reserve(crate::answer_budget::answer_bytes(
        max_out,
        StreamFilter::Both,
    ))
    .await;
    let mut resp = pb::ExecResponse {
        matched_line: proc.answer_text(waited.matched_line),
        matched_seq: waited.matched_seq,
        ..respond(proc, max_out, yield_ms)
    };
    if let Some(info) = resp.process.as_mut() {
        if Duration::from_millis(yield_ms) >= input_wait::EXEC_FIRST_CHECK {
            // A shorter yield (a start in the background) leaves the command no time to reach a
            // prompt or bind a port: it is not checked, so starting many costs no `/proc` reads.
            // A command that printed its `until` line is checked however young.
            let freshness = if resp.matched_seq.is_some() {
                live_facts::Freshness::Now
            } else {
                live_facts::Freshness::Reused
            };
            live_facts::annotate(freshness, [(&**proc, &mut *info)]).await;
        }
        if waited.for_input && info.status == pb::ProcessStatus::Running as i32 {
            info.waiting_for_input = Some(true);
        }
    }
    if resp.status == pb::ExecStatus::Backgrounded as i32 {
        // The caller is about to hold a process id it relies on across daemon restarts: the
        // record the next daemon re-adopts the process by must be on disk first (it is queued
        // write-behind; a `kill -9` in between left the process "lost, record missing").
        d.store.persisted().await;
    }
    // After the answer is ready, so starting the next idle holder does not delay it.
    #[cfg(unix)]
    d.holders.refill_later();
    resp
}

/// Resolves when the command waits for input (ARCHITECTURE.md, "Terminal processes": `exec` yields early then), never when
/// its stdin was closed or its initial stdin is not written yet. `unsent` is the sender of
/// `written` when the exec had no stdin to write.
async fn input_wanted(
    proc: &ManagedProcess,
    unsent: Option<tokio::sync::oneshot::Sender<()>>,
    written: tokio::sync::oneshot::Receiver<()>,
    close_stdin: bool,
) {
    if unsent.is_none() && written.await.is_err() {
        // Not all written (the command exited, or stdin broke): nothing to wait for.
        return std::future::pending().await;
    }
    match proc.state().identity {
        Some(shell) if !close_stdin => {
            input_wait::until_waiting(shell, input_wait::EXEC_FIRST_CHECK).await
        }
        _ => std::future::pending().await,
    }
}

/// The terminal an `exec` asks for (`tty`, with `cols`/`rows` or the default size); sizes
/// given without `tty` are refused rather than ignored.
fn terminal_of(req: &pb::ExecRequest) -> Result<Option<TermSize>, Refusal> {
    let invalid = |message: String| Refusal {
        kind: ErrorKind::InvalidArgument,
        message,
    };
    if !req.tty {
        if req.cols.is_some() || req.rows.is_some() {
            return Err(invalid(
                "cols/rows size a terminal: pass tty=true with them".to_string(),
            ));
        }
        return Ok(None);
    }
    terminal::requested_size(req.cols, req.rows, terminal::DEFAULT_SIZE)
        .map(Some)
        .map_err(invalid)
}

/// The answer to an exec whose identical twin still runs: that process as it is now, its latest
/// output and live facts (a dev server's address), `reused`. Nothing waits: the command already
/// had its yield.
async fn reused(proc: &ManagedProcess, max_out: usize, yield_ms: u64) -> pb::ExecResponse {
    crate::answer_budget::reserve(crate::answer_budget::answer_bytes(
        max_out,
        StreamFilter::Both,
    ))
    .await;
    let mut resp = respond(proc, max_out, yield_ms);
    resp.reused = true;
    if let Some(info) = resp.process.as_mut() {
        live_facts::annotate(live_facts::Freshness::Reused, [(proc, info)]).await;
    }
    resp
}

fn respond(proc: &ManagedProcess, max_out: usize, yield_ms: u64) -> pb::ExecResponse {
    // State first, output second (the state is settled only once the output is complete).
    let state = proc.state();
    let process = proc.info_of(&state);
    let status = if state.settled() {
        exec_status(state.status())
    } else {
        pb::ExecStatus::Backgrounded
    };
    let out = proc.output.read(&ReadQuery {
        since: None,
        max_bytes: max_out,
        streams: StreamFilter::Both,
        tail_lines: None,
    });
    // Facts only (status, process, next_seq, descendants, yield_ms): each front end phrases its
    // own hint from them, naming its own commands. `message` stays empty.
    pb::ExecResponse {
        status: status as i32,
        process: Some(process),
        output: Some(proc.answer_output(output_to_pb(out), false)),
        yield_ms,
        ..Default::default()
    }
}
