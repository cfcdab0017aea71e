//! Managed processes: the handle everyone shares, and the actor that owns each process.
//!
//! A [`ManagedProcess`] is the only way anything outside [`actor`] touches a process: it carries
//! the immutable facts (id, command, cwd, session), the shared [`OutputLog`], a `watch` of the
//! process's [`ProcState`] and the channels to the actor (controls) and the stdin writer. RPC
//! handlers read state and output, and send controls; they never signal or wait on anything
//! themselves, so a client that disconnects mid-call leaves nothing half-done.

pub mod actor;
#[cfg(any(target_os = "macos", test))]
pub mod darwin;
#[cfg(unix)]
mod exec_line;
pub mod input_wait;
mod io;
#[cfg(windows)]
pub mod job;
pub mod launch;
mod lifecycle;
pub mod listening;
pub mod live_facts;
pub mod resources;
#[cfg(target_os = "linux")]
pub mod sessions;
mod stop;
pub mod terminal;
#[cfg(unix)]
pub mod tree;
/// Windows: a managed process's tree is its Job Object.
#[cfg(windows)]
#[path = "tree_windows.rs"]
pub mod tree;
mod tree_ops;
pub mod twins;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::error::Error;
use crate::output::OutputLog;
use crate::policy::redact::Redactor;
use crate::record::{ProcessRecord, RECORD_FORMAT, RecordBytes};
pub use crate::status::{EndedBy, LostReason, RecordStatus, Status};
use crate::status::{ExitHow, unix_ms};
pub use lifecycle::{End, EndStatus, Life, ProcState};
use tree::{Identity, Signal};

/// Why a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A client called `stop`.
    Request,
    /// `timeout_ms` fired.
    Timeout,
    /// The daemon is shutting down.
    Shutdown,
    /// The holder died without reporting the exit: what is left of the tree is killed.
    HolderLost,
}

impl StopReason {
    /// The status a stop for this reason ends a running process with.
    fn end_status(self) -> EndStatus {
        match self {
            StopReason::Request => EndStatus::Stopped(EndedBy::Stop),
            StopReason::Timeout => EndStatus::TimedOut,
            StopReason::Shutdown => EndStatus::Stopped(EndedBy::DaemonShutdown),
            // Not an end of the process's own: `lost`, with its reason.
            StopReason::HolderLost => EndStatus::Lost(LostReason::HolderDied),
        }
    }
}

/// How a stop went, as its callers are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The tree is gone because of this stop.
    Stopped {
        /// SIGKILL had to be sent.
        escalated: bool,
    },
    /// The callers are answered without the tree being gone: processes of it survived SIGKILL
    /// (so it was sent) for `KILL_GIVE_UP` (uninterruptible sleep, or not ours to signal). The
    /// stop goes on; the process is not recorded as stopped.
    Incomplete {
        /// Processes of the tree still alive (at least one).
        survivors: usize,
    },
    /// Nothing was running to stop: the process had ended (its actor is done, or its tree was
    /// found gone just before), or nothing at all was left of a settled process's tree.
    AlreadyEnded,
}

/// A control for the actor.
#[derive(Debug)]
pub enum Control {
    /// Signal the tree, escalate to SIGKILL after `grace`, reply once it is gone.
    Stop {
        /// First signal.
        signal: Signal,
        /// Time before SIGKILL.
        grace: Duration,
        /// Why.
        reason: StopReason,
        /// Answered when the tree is gone (or nothing was running).
        reply: oneshot::Sender<StopOutcome>,
    },
}

/// A request to the stdin writer.
#[derive(Debug)]
pub struct StdinWrite {
    /// Bytes to write.
    pub data: Vec<u8>,
    /// Close stdin afterwards.
    pub eof: bool,
    /// Bytes written, or why not.
    pub reply: oneshot::Sender<Result<usize, Error>>,
}

/// The answer to a queued stdin write: bytes written, or why not.
pub type StdinAnswer = oneshot::Receiver<Result<usize, Error>>;

/// A managed process, shared by the registry, the actor and RPC handlers.
#[derive(Debug)]
pub struct ManagedProcess {
    /// What never changes: id, session, name, command, cwd, start.
    pub facts: Arc<ProcessFacts>,
    /// Monotonic start, for durations.
    pub started: Instant,
    /// Output log.
    pub output: Arc<OutputLog>,
    state: watch::Sender<ProcState>,
    // Released when the actor ends: an idle channel still holds its slot block (kilobytes), and
    // the daemon keeps up to a thousand ended processes.
    control: std::sync::Mutex<Option<mpsc::Sender<Control>>>,
    stdin: std::sync::Mutex<Option<mpsc::Sender<StdinWrite>>>,
    running_slot: std::sync::Mutex<Option<crate::limits::RunningSlot>>,
    /// Terminal mode (ARCHITECTURE.md, "Terminal processes"): the PTY master and the rendered screen; `None` on pipes.
    pub terminal: Option<Arc<terminal::Terminal>>,
    /// Its holder (`None`: restored from a record, or on Windows): a client whose process runs
    /// under it is this process's descendant, and gets no more than its sandbox.
    pub holder: Option<Identity>,
    /// Sandboxed and failed: the denial its output showed, once settled (`sandbox::denials`).
    pub denied: std::sync::OnceLock<String>,
    /// Cancels its allowlist proxy (when it has one) once its actor has let go.
    pub proxy_stop: std::sync::Mutex<Option<tokio_util::sync::CancellationToken>>,
}

/// What never changes about a process: shared by its handle, its actor and its records.
#[derive(Debug)]
pub struct ProcessFacts {
    /// Stable id (`proc_…`, or a client-chosen UUID).
    pub id: String,
    /// Session that started it.
    pub session_id: String,
    /// Optional human name.
    pub name: String,
    /// Command line.
    pub command: Vec<u8>,
    /// Resolved working directory.
    pub cwd: PathBuf,
    /// Wall-clock start.
    pub started_at: SystemTime,
    /// It runs on a terminal: kept in the record, so an ended terminal process restored by a
    /// later daemon (its terminal gone) still says so and reads as a terminal shows it.
    pub tty: bool,
    /// What it may do when it runs sandboxed (README, "Sandbox"); `None`: unsandboxed.
    pub sandbox: Option<Arc<crate::sandbox::Confinement>>,
    /// What makes an identical `exec` its twin, when it was started by one that may be reused
    /// ([`twins`]); `None`: never reused.
    pub twin: Option<twins::TwinKey>,
    /// `timeout_ms`, counted from `started_at`: the record keeps the deadline it makes, so a
    /// daemon that re-adopts the process re-arms it.
    pub timeout: Option<Duration>,
    /// Its secrets (`None`: none, or restored from a record, which keeps none): a terminal's
    /// rendering (screen, text without escapes) can put back together a secret the raw bytes
    /// had apart (`"sk-AB\e[31mCD…"`), so every rendering is redacted again.
    pub redactor: Option<Arc<Redactor>>,
}

impl ProcessFacts {
    /// The facts a record keeps (of a process an earlier daemon started).
    pub fn from_record(record: &ProcessRecord) -> ProcessFacts {
        ProcessFacts {
            id: record.process_id.clone(),
            session_id: record.session_id.clone(),
            name: record.name.clone(),
            command: record.command.to_bytes(),
            cwd: PathBuf::from(yieldshell_proto::session_config::bytes_os(
                &record.cwd.to_bytes(),
            )),
            started_at: SystemTime::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(record.started_at_ms).unwrap_or(0)),
            tty: record.tty,
            sandbox: record
                .sandbox
                .as_ref()
                .map(|s| Arc::new(crate::sandbox::Confinement::from_record(s))),
            twin: record.twin.as_deref().and_then(twins::TwinKey::from_hex),
            timeout: record.timeout_at_ms.map(|at| {
                Duration::from_millis(u64::try_from(at - record.started_at_ms).unwrap_or(0))
            }),
            // A record keeps no secret; a live holder gives them back (`recovery`).
            redactor: None,
        }
    }

    /// The record queued before the spawn: the command and directory, no pid yet.
    pub fn starting_record(&self) -> ProcessRecord {
        ProcessRecord {
            status: RecordStatus::Starting,
            ..self.record(&ProcState::starting())
        }
    }

    /// The persisted form of these facts in `state`.
    pub fn record(&self, state: &ProcState) -> ProcessRecord {
        ProcessRecord {
            format: RECORD_FORMAT,
            process_id: self.id.clone(),
            session_id: self.session_id.clone(),
            name: self.name.clone(),
            command: RecordBytes::from_bytes(&self.command),
            cwd: RecordBytes::from_bytes(&yieldshell_proto::session_config::path_bytes(&self.cwd)),
            // The decided status, also before it is settled: a record is written then only when
            // the daemon leaves the process to its holder, and says how it ended.
            status: state.status().into(),
            pid: state.identity.map(|i| i.pid),
            start_time: state.identity.map(|i| i.start_time),
            exit_code: state.exit().and_then(ExitHow::code),
            signal: state.exit().and_then(ExitHow::signal),
            started_at_ms: unix_ms(self.started_at),
            ended_at_ms: state.ended_at().map(unix_ms),
            duration_ms: state
                .duration()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ended_by: state.ended_by(),
            lost_reason: state.lost_reason(),
            tty: self.tty,
            sandbox: self.sandbox.as_ref().map(|s| s.to_record()),
            twin: self.twin.map(twins::TwinKey::to_hex),
            timeout_at_ms: self.timeout.map(|t| {
                unix_ms(self.started_at)
                    .saturating_add(i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
            }),
        }
    }
}

/// `SIGKILL`-style name of a signal number.
pub fn signal_name(n: i32) -> String {
    Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("SIG{n}"))
}

impl ManagedProcess {
    /// Restores a process from a record of an earlier daemon: ended, with its spooled output.
    pub fn restored(record: &ProcessRecord, state: ProcState, output: Arc<OutputLog>) -> Self {
        // The monotonic start of another daemon's process is unknowable; durations of restored
        // processes come from the record instead.
        let started = Instant::now();
        let (state, _) = watch::channel(state);
        ManagedProcess {
            facts: Arc::new(ProcessFacts::from_record(record)),
            started,
            output,
            state,
            control: std::sync::Mutex::new(None),
            stdin: std::sync::Mutex::new(None),
            running_slot: std::sync::Mutex::new(None),
            // An ended process's terminal is gone with it.
            terminal: None,
            holder: None,
            denied: std::sync::OnceLock::new(),
            proxy_stop: std::sync::Mutex::new(None),
        }
    }

    /// Whether it runs (or ran) on a terminal. Its output is then read as a terminal shows it,
    /// also once it ended and a later daemon restored it without the terminal.
    pub fn on_terminal(&self) -> bool {
        self.terminal.is_some() || self.facts.tty
    }

    /// Gives back the process's place in the running counts once it has left `running`.
    pub(crate) fn release_running_slot(&self) {
        if self.state.borrow().status() != Status::Running {
            self.running_slot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
        }
    }

    /// Drops the channels to the actor, which has ended: later stops and writes see an ended
    /// process, as they would through a closed channel.
    pub(crate) fn release_channels(&self) {
        self.control
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.terminal.as_ref() {
            t.release();
        }
        if let Some(stop) = self
            .proxy_stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            stop.cancel();
        }
    }

    /// Current state.
    pub fn state(&self) -> ProcState {
        self.state.borrow().clone()
    }

    /// Subscribes to state changes.
    pub fn subscribe(&self) -> watch::Receiver<ProcState> {
        self.state.subscribe()
    }

    /// Whether the process is reported as running (see [`ProcState::reported`]): the shell (or
    /// its tree, after a stop) has not ended yet, or its output is not complete yet.
    pub fn is_running(&self) -> bool {
        self.state.borrow().reported_running()
    }

    /// Asks the actor to stop the tree; [`StopOutcome::AlreadyEnded`] when the actor has
    /// finished (nothing is left to stop).
    pub async fn stop(&self, signal: Signal, grace: Duration, reason: StopReason) -> StopOutcome {
        let asked = async {
            let control = self
                .control
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()?;
            let (reply, rx) = oneshot::channel();
            control
                .send(Control::Stop {
                    signal,
                    grace,
                    reason,
                    reply,
                })
                .await
                .ok()?;
            rx.await.ok()
        };
        asked.await.unwrap_or(StopOutcome::AlreadyEnded)
    }

    /// Writes to stdin (and closes it on `eof`).
    pub async fn write_stdin(&self, data: Vec<u8>, eof: bool) -> Result<usize, Error> {
        let written = self.queue_stdin(data, eof)?;
        written.await.map_err(|_| self.stdin_ended())?
    }

    /// Hands a write to the stdin writer without waiting for it; the receiver answers once it
    /// is written (or why not). Synchronous, so that nothing sent later (a `write` after an
    /// `exec` that carried `stdin`) can overtake it.
    ///
    /// On a terminal `eof` sends the EOF character (`VEOF`, Ctrl-D) after `data` instead of
    /// closing anything: a terminal's input has no end, its line discipline makes one.
    pub fn queue_stdin(&self, mut data: Vec<u8>, mut eof: bool) -> Result<StdinAnswer, Error> {
        if let Some(t) = self.terminal.as_ref()
            && eof
        {
            data.push(t.modes().map_or(4, |m| m.eof_char));
            eof = false;
        }
        let stdin = self
            .stdin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| self.stdin_ended())?;
        let (reply, rx) = oneshot::channel();
        // The writer answers every request that arrives while it is blocked (`stdin_busy`), so
        // the queue is full only under a burst of concurrent writes: they are refused the same way.
        stdin
            .try_send(StdinWrite { data, eof, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Error::new(
                    ErrorKind::StdinBusy,
                    "too many writes to stdin at once; retry",
                ),
                mpsc::error::TrySendError::Closed(_) => self.stdin_ended(),
            })?;
        Ok(rx)
    }

    // Write errors do not name the process: every answer to a write echoes its id.
    fn stdin_ended(&self) -> Error {
        Error::new(
            ErrorKind::ProcessExited,
            "the process has ended; its stdin is closed",
        )
    }

    /// Run time so far, or in total once ended.
    pub fn duration(&self, state: &ProcState) -> Duration {
        state.duration().unwrap_or_else(|| self.started.elapsed())
    }

    /// The control-plane description, as of now.
    pub fn info(&self) -> pb::ProcessInfo {
        self.info_of(&self.state())
    }

    /// How answers show its output when it runs on a terminal: the text without escape
    /// sequences, redacted again (`terminal::TextRendering`); `None` on pipes.
    pub fn text_rendering(&self) -> Option<terminal::TextRendering> {
        self.on_terminal()
            .then(|| terminal::TextRendering::new(self.facts.redactor.clone()))
    }

    /// Output text as answers give it (a matched line): rendered for a terminal process.
    pub fn answer_text(&self, text: Vec<u8>) -> Vec<u8> {
        match self.text_rendering() {
            Some(r) => r.text(&text),
            None => text,
        }
    }

    /// `out` as answers give it: for a terminal process, the rendered text
    /// (`terminal::TextRendering`) unless `raw`; sequence numbers stay those of the raw log.
    pub fn answer_output(&self, mut out: pb::Output, raw: bool) -> pb::Output {
        if let Some(r) = self.text_rendering().filter(|_| !raw) {
            out.stdout = r.text(&out.stdout);
        }
        out
    }

    /// The control-plane description of `state` (read earlier, so that a response can take the
    /// state before the output it also carries: then the output is at least as new as the
    /// status says). Reports the state as [`ProcState::reported`] does.
    pub fn info_of(&self, state: &ProcState) -> pb::ProcessInfo {
        let state = state.reported();
        let (out, err) = self.output.totals();
        let size = self.terminal.as_ref().and_then(|t| t.size());
        let (spool_dropped, _) = self.output.spool_health();
        pb::ProcessInfo {
            process_id: self.facts.id.clone(),
            pid: state.identity.map(|i| i.pid as u32),
            name: self.facts.name.clone(),
            command: self.facts.command.clone(),
            cwd: yieldshell_proto::session_config::path_bytes(&self.facts.cwd),
            status: state.status().to_pb() as i32,
            exit_code: state.exit().and_then(ExitHow::code),
            signal: state.exit().and_then(ExitHow::signal).map(signal_name),
            started_at_unix_ms: unix_ms(self.facts.started_at),
            ended_at_unix_ms: state.ended_at().map(unix_ms),
            duration_ms: u64::try_from(self.duration(&state).as_millis()).unwrap_or(u64::MAX),
            stdout_bytes: out.bytes,
            stderr_bytes: err.bytes,
            stdout_lines: out.lines,
            stderr_lines: err.lines,
            descendants_running: state.descendants,
            session_id: self.facts.session_id.clone(),
            lost_reason: state.lost_reason().map(|r| r.as_str().to_string()),
            ended_by: state.ended_by().map(|e| e.as_str().to_string()),
            spool_dropped_bytes: spool_dropped,
            // These need `/proc` checks off the runtime: the RPC handlers add them
            // (`live_facts`).
            waiting_for_input: None,
            listening: Vec::new(),
            tty: self.on_terminal(),
            // While something runs on it (one ioctl on the master): the terminal edits lines
            // but does not echo them, as a password prompt sets it (`getpass`, `ssh`, `sudo`).
            // A program in raw mode (a REPL's line editor, a full-screen program) turns echo
            // off too, but draws its own: that is not reported.
            echo_off: self
                .terminal
                .as_ref()
                .filter(|_| state.status() == Status::Running)
                .and_then(|t| t.modes())
                .map(|m| m.echo_off && m.canonical),
            cols: size.map_or(0, |s| u32::from(s.cols)),
            rows: size.map_or(0, |s| u32::from(s.rows)),
            // From the sampler's last pass (`resources`): the RPC handlers add them.
            cpu_percent: None,
            rss_bytes: None,
            sandbox: self
                .facts
                .sandbox
                .as_ref()
                .map(|s| s.to_pb(self.denied.get().map(String::as_str))),
        }
    }

    /// Marks the process lost after its supervising actor died (a bug): the caller has already
    /// killed its tree. Nothing else will ever update this process again.
    pub fn mark_supervisor_lost(&self) {
        let duration = self.started.elapsed();
        self.state.send_modify(|s| {
            // An end decided already keeps its time and exit; its status becomes this one.
            let end = s.end().copied().unwrap_or(End {
                status: EndStatus::Completed,
                exit: None,
                at: SystemTime::now(),
                duration,
            });
            s.life = Life::Ended {
                end: End {
                    status: EndStatus::Lost(LostReason::SupervisorPanic),
                    ..end
                },
                settled: true,
            };
            s.descendants = 0;
        });
        self.release_running_slot();
        self.output.close();
    }

    /// The persisted form of the current state.
    pub fn record(&self) -> ProcessRecord {
        self.facts.record(&self.state())
    }
}

/// A fresh process id: `proc_` and 12 hex digits of a random UUID.
pub fn new_process_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("proc_{}", &u[..12])
}
