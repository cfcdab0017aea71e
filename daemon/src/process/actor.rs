//! The per-process actor: the one task that owns a managed process's lifecycle.
//!
//! # Theory of operation
//! Each process gets three kinds of tasks:
//! - the **holder link** (`holder::link`), which appends the holder's output frames (redacted
//!   and spooled by the holder) to the [`OutputLog`] until both streams reach EOF and delivers
//!   the exit status, and one **stdin writer** (module `io`);
//! - the **actor**, a `select!` loop over: the exit status from the holder, the output finishing,
//!   control messages (stop), daemon shutdown, the running record's timer, and the one timer of
//!   its current `Phase`. Only the actor changes [`ProcState`] and writes the process record.
//!
//! # Phases
//! ```text
//! Running   ──shell exits──────────────────▶ Draining   status completed (not yet reported)
//! Running   ──shell exits during shutdown──▶ Closing    status stopped, daemon_shutdown
//! Running   ──stop, timeout────────────────▶ Stopping
//! Draining  ──stop─────────────────────────▶ Stopping   status stays completed
//! Draining  ──EOF, or drain grace over─────▶ Lingering (descendants left) or Settled  [settles]
//! Lingering ──recount finds none───────────▶ Settled
//! Lingering, Settled ──stop────────────────▶ Stopping   stays settled
//! Stopping  ──tree gone─────────────────────▶ Closing   (Settled if it was settled before)
//! Stopping  ──SIGKILL survivors after 10 s──▶ Stopping  callers told; never recorded as stopped
//! Closing   ──EOF, or reader cutoff────────▶ Settled    [settles; stops answered now]
//! Settled   ──readers done, sweep finds none▶ the actor ends
//! Settled   ──sweep finds escapees─────────▶ Lingering
//! ```
//!
//! Completion (README, "Tools"): the shell's exit (from its holder, never from EOF) decides the status,
//! but clients see it only once the result is *settled* (`ManagedProcess::info` reports `running`
//! until then), and a result settles only once the output is complete: both pipes at EOF, or the
//! drain grace over when descendants hold them (then `descendants_running` says so, their later
//! output is still captured, and `stop` still takes them down), or, after a stop, the reader
//! cutoff. So an ended status always comes with the whole output.
//!
//! The actor ends when the result is settled, the readers are done and no descendant remains —
//! after one marker sweep that nothing has slipped out of the group.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::tree::Signal;
#[cfg(unix)]
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
// Tokio's clock, which is the system's except in tests that pause it.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[cfg(unix)]
use super::io::{StdinSink, stdin_writer};
use super::stop::{Interrupted, StopRun, Tick};
#[cfg(unix)]
use super::terminal::MasterWriter;
use super::terminal::Terminal;
#[cfg(unix)]
use super::tree::SystemTree;
use super::tree::{self, Identity, ProcessTree};
use super::{
    Control, End, EndStatus, ManagedProcess, ProcState, ProcessFacts, StdinWrite, StopOutcome,
    StopReason,
};
#[cfg(unix)]
use crate::holder::link::{Held, HolderControl, Link};
use crate::output::OutputLog;
use crate::record::RecordStore;
use crate::status::ExitHow;

/// Timing knobs of the actor (from the daemon config).
#[derive(Debug, Clone, Copy)]
pub struct ActorTiming {
    /// How long to keep draining pipes after the shell exited, when descendants hold them.
    pub drain_grace: Duration,
    /// Grace between SIGTERM and SIGKILL when `timeout_ms` fires.
    pub timeout_grace: Duration,
    /// Grace between SIGTERM and SIGKILL when the daemon shuts down.
    pub shutdown_grace: Duration,
}

/// How often descendants of an exited shell are recounted.
const DESCENDANT_POLL: Duration = Duration::from_millis(500);
/// After the tree is gone, how long readers may still drain before they are cut off.
const READER_CUTOFF: Duration = Duration::from_millis(500);
/// How much longer a drain waits for EOF when the grace is over but nothing of the tree holds
/// the pipes any more: their writers are gone, so EOF is only a read away, and a pipe reader
/// that a busy runtime has not run yet must not let the result settle without its last bytes.
const EOF_WAIT: Duration = Duration::from_secs(2);
/// How long a process runs before its record gets its pid and start time.
const RUNNING_RECORD_DELAY: Duration = Duration::from_millis(100);

/// Everything the actor needs besides the spawned process.
#[derive(Debug, Clone)]
pub struct ActorContext {
    /// Timing knobs.
    pub timing: ActorTiming,
    /// Where the record is written.
    pub store: RecordStore,
    /// Cancelled when the daemon shuts down.
    pub shutdown: CancellationToken,
    /// Cancelled when the daemon leaves its processes to their holders (restart): the actor
    /// records where it is and lets go.
    pub detach: CancellationToken,
    /// The daemon's reaper: tells our own children from adopted orphans.
    #[cfg(unix)]
    pub reaper: Arc<crate::spawn::reaper::Reaper>,
}

/// Starts the holder link, the stdin writer and the actor for a held process: one just
/// started, or one a new daemon re-adopts (`state` then says what was known already).
#[cfg(unix)]
pub fn launch(
    facts: Arc<ProcessFacts>,
    running_slot: crate::limits::RunningSlot,
    held: Held,
    output: Arc<OutputLog>,
    timeout: Option<Duration>,
    ctx: ActorContext,
) -> std::io::Result<(Arc<ManagedProcess>, JoinHandle<()>)> {
    // Run time counts from the wall-clock start: a re-adopted process started under an
    // earlier daemon.
    let age = SystemTime::now()
        .duration_since(facts.started_at)
        .unwrap_or_default();
    let now = std::time::Instant::now();
    let started = now.checked_sub(age).unwrap_or(now);
    let identity = held.shell();
    let link = Link::run(held.sock, output.clone(), &held.hello)?;
    // A terminal process's "stdin" is a duplicate of its PTY master (`spawn::pty`).
    let (stdin, terminal): (Option<StdinSink>, _) = match held.stdin {
        Some(fd) if held.hello.terminal => {
            let term = Arc::new(Terminal::new(fd.try_clone()?, &output));
            super::terminal::spawn_feeder(term.clone(), output.clone());
            (Some(Box::new(MasterWriter::new(fd)?)), Some(term))
        }
        Some(fd) => (Some(Box::new(pipe::Sender::from_owned_fd(fd)?)), None),
        None => (None, None),
    };
    let (proc, control_rx, stdin_rx) = managed(
        facts,
        identity,
        started,
        output,
        running_slot,
        terminal,
        Some(held.holder),
    );
    let control = link.control.clone();
    let output_done = link.output_done;
    let detach = ctx.detach.clone();
    let join = tokio::spawn(async move {
        // Aborted by the reader cutoff: the holder then stops reading the pipes.
        let cut = CutOnDrop(Some(control), detach);
        let _ = output_done.await;
        cut.disarm();
    });
    let aborts = vec![join.abort_handle()];
    let stdin_close = CancellationToken::new();
    let holder = link.control.clone();
    tokio::spawn(stdin_writer(
        stdin,
        stdin_rx,
        stdin_close.clone(),
        move || holder.close_stdin(),
    ));
    let tree = SystemTree::held(
        ctx.reaper.clone(),
        held.holder,
        identity,
        link.left_alone.clone(),
    );
    let actor = Actor::new(
        proc.clone(),
        identity.pid,
        tree,
        ctx,
        control_rx,
        Io {
            readers: Readers { join, aborts },
            stdin_close,
        },
        timeout.map(|t| Instant::from_std(started) + t),
    );
    let handle = tokio::spawn(actor.run(link.exit));
    Ok((proc, handle))
}

/// Tells the holder to stop reading output when dropped armed (the readers were cut off) —
/// but not when the daemon is leaving its processes to their holders: its runtime then drops
/// every task, and the process must keep its output.
#[cfg(unix)]
struct CutOnDrop(Option<HolderControl>, CancellationToken);

#[cfg(unix)]
impl CutOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

#[cfg(unix)]
impl Drop for CutOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take()
            && !self.1.is_cancelled()
        {
            c.close_output();
        }
    }
}

/// The shared handle of a process just spawned, and the receiving ends of its channels.
fn managed(
    facts: Arc<ProcessFacts>,
    identity: Identity,
    started: std::time::Instant,
    output: Arc<OutputLog>,
    running_slot: crate::limits::RunningSlot,
    terminal: Option<Arc<Terminal>>,
    holder: Option<Identity>,
) -> (
    Arc<ManagedProcess>,
    mpsc::Receiver<Control>,
    mpsc::Receiver<StdinWrite>,
) {
    let (control_tx, control_rx) = mpsc::channel(16);
    let (stdin_tx, stdin_rx) = mpsc::channel(16);
    let (state, _) = watch::channel(ProcState::running(identity));
    let proc = Arc::new(ManagedProcess {
        facts,
        started,
        output,
        state,
        control: std::sync::Mutex::new(Some(control_tx)),
        stdin: std::sync::Mutex::new(Some(stdin_tx)),
        running_slot: std::sync::Mutex::new(Some(running_slot)),
        terminal,
        holder,
        denied: std::sync::OnceLock::new(),
        proxy_stop: std::sync::Mutex::new(None),
    });
    (proc, control_rx, stdin_rx)
}

/// The pipe readers, as the actor sees them: one handle that resolves when both reached EOF (or
/// were cut off), and the handles that cut them off.
struct Readers {
    join: JoinHandle<()>,
    aborts: Vec<AbortHandle>,
}

/// The actor's ends of the I/O tasks.
struct Io {
    readers: Readers,
    /// Cancelled when stdin should close (nothing of the tree is left to read it).
    stdin_close: CancellationToken,
}

/// Where a process is in its lifecycle, with the data only that phase needs. See the module doc
/// for the transitions.
#[derive(Debug)]
enum Phase {
    /// The shell runs and nothing has asked it to stop.
    Running {
        /// When `timeout_ms` fires.
        timeout_at: Option<Instant>,
        /// The daemon is shutting down: its `tree::stop_all` takes the tree down, and the
        /// actor records the exit that follows as `stopped` (`daemon_shutdown`).
        shutdown: bool,
    },
    /// The shell exited on its own (`completed`); the output drains until EOF or `until`.
    Draining {
        /// End of the drain grace.
        until: Instant,
        /// The grace was extended once because nothing of the tree held the pipes (see
        /// [`EOF_WAIT`]).
        extended: bool,
    },
    /// A stop or timeout is taking the tree down.
    Stopping(StopRun),
    /// The tree is gone and the status decided, but the readers may still hold its last bytes:
    /// the result settles (and the stops are answered) when they reach EOF or are cut off.
    Closing {
        /// When the readers are cut off; `None` once they were.
        cutoff: Option<Instant>,
        /// Stops to answer once settled, with their answers.
        replies: Vec<(oneshot::Sender<StopOutcome>, StopOutcome)>,
    },
    /// Settled while descendants of the exited shell still run; they are recounted.
    Lingering {
        /// The next recount.
        next_poll: Instant,
        /// The marker sweep before letting go has run already.
        swept: bool,
    },
    /// Settled and nothing of the tree is left; the actor lets go once the readers are done (and
    /// a last marker sweep finds nothing).
    Settled {
        /// When readers that something outside the tree holds open are cut off.
        cutoff: Option<Instant>,
        /// The marker sweep before letting go has run already.
        swept: bool,
    },
    /// The actor has let go (also the placeholder during a transition).
    Done,
}

impl Phase {
    /// Whether the result is final: what [`ProcState::settled`] publishes. It never goes back:
    /// a stop of a settled process keeps it settled.
    fn settled(&self) -> bool {
        match self {
            Phase::Running { .. } | Phase::Draining { .. } | Phase::Closing { .. } => false,
            Phase::Stopping(run) => matches!(run.interrupted, Interrupted::Settled { .. }),
            Phase::Lingering { .. } | Phase::Settled { .. } | Phase::Done => true,
        }
    }

    /// The phase's one timer.
    fn deadline(&self) -> Option<Instant> {
        match self {
            Phase::Running { timeout_at, .. } => *timeout_at,
            Phase::Draining { until, .. } => Some(*until),
            Phase::Stopping(run) => Some(run.next_tick),
            Phase::Closing { cutoff, .. } | Phase::Settled { cutoff, .. } => *cutoff,
            Phase::Lingering { next_poll, .. } => Some(*next_poll),
            Phase::Done => None,
        }
    }
}

/// The actor, generic over the tree operations so its tests can run without real processes.
struct Actor<T: ProcessTree> {
    proc: Arc<ManagedProcess>,
    pgid: i32,
    tree: T,
    ctx: ActorContext,
    control_rx: mpsc::Receiver<Control>,
    /// `None` once both pipes reached EOF (or were cut off) and the log is closed.
    readers: Option<Readers>,
    stdin_close: CancellationToken,
    phase: Phase,
    /// The shell's exit status is still to come.
    exit: Option<oneshot::Receiver<ExitHow>>,
    /// How and when the shell exited while a stop of the running process was taking its tree
    /// down: the stop decides the status once the tree is gone, and the end keeps these.
    shell_exit: Option<ShellExit>,
    /// Descendants were found outside the process group after the shell exited (a `setsid`
    /// grandchild, a double-forked daemon): from then on only a full sweep counts them.
    outside_group: bool,
}

/// How and when the shell exited.
#[derive(Debug, Clone, Copy)]
struct ShellExit {
    how: ExitHow,
    at: SystemTime,
    duration: Duration,
}

impl ShellExit {
    fn end(self, status: EndStatus) -> End {
        End {
            status,
            exit: Some(self.how),
            at: self.at,
            duration: self.duration,
        }
    }
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

async fn recv_exit(rx: &mut Option<oneshot::Receiver<ExitHow>>) -> Option<ExitHow> {
    match rx.as_mut() {
        Some(r) => r.await.ok(),
        None => std::future::pending().await,
    }
}

async fn readers_done(readers: &mut Option<Readers>) {
    match readers.as_mut() {
        Some(r) => {
            let _ = (&mut r.join).await;
        }
        None => std::future::pending().await,
    }
}

impl<T: ProcessTree> Actor<T> {
    /// The actor of `proc`, whose shell leads the process group `pgid`.
    fn new(
        proc: Arc<ManagedProcess>,
        pgid: i32,
        tree: T,
        ctx: ActorContext,
        control_rx: mpsc::Receiver<Control>,
        io: Io,
        timeout_at: Option<Instant>,
    ) -> Actor<T> {
        Actor {
            proc,
            pgid,
            tree,
            ctx,
            control_rx,
            readers: Some(io.readers),
            stdin_close: io.stdin_close,
            phase: Phase::Running {
                timeout_at,
                shutdown: false,
            },
            exit: None,
            shell_exit: None,
            outside_group: false,
        }
    }

    fn update(&self, f: impl FnOnce(&mut ProcState)) {
        self.proc.state.send_modify(f);
        self.proc.release_running_slot();
    }

    fn persist(&self) {
        self.ctx.store.save(&self.proc.record());
    }

    /// Enters a settled phase: publishes the result with the descendants counted, writes the
    /// record. The only place `settled` becomes true.
    fn settle(&mut self, next: Phase, descendants: u32) {
        debug_assert!(next.settled());
        // Before the result is published: the answer that reports the failure names the denial.
        self.note_denial();
        self.update(|s| {
            s.settle();
            s.descendants = descendants;
        });
        self.persist();
        self.phase = next;
    }

    /// A sandboxed command that failed: the denial its last output shows, if any
    /// (`crate::sandbox::denials`), kept for every later answer.
    fn note_denial(&self) {
        let Some(confinement) = self.proc.facts.sandbox.as_ref() else {
            return;
        };
        if !matches!(self.proc.state.borrow().exit(), Some(ExitHow::Code(c)) if c != 0) {
            return;
        }
        let tail = self.proc.output.read(&crate::output::ReadQuery {
            since: None,
            max_bytes: crate::sandbox::denials::TAIL_BYTES,
            streams: crate::output::StreamFilter::Both,
            tail_lines: None,
        });
        let mut text = tail.stdout;
        text.push(b'\n');
        text.extend_from_slice(&tail.stderr);
        if let Some(line) =
            crate::sandbox::denials::explain(confinement, &text, &self.proc.facts.cwd)
        {
            let _ = self.proc.denied.set(line);
        }
    }

    async fn run(mut self, exit: oneshot::Receiver<ExitHow>) {
        self.exit = Some(exit);
        // The `starting` record written before the spawn already lets a restarted daemon find
        // this process (by its marker). The pid and start time follow shortly, once the process
        // has proven to be more than a quick command, so `exec` of `true` pays for no extra write.
        let mut running_record_at = Some(Instant::now() + RUNNING_RECORD_DELAY);
        if crate::faults::actor_should_panic(&self.proc.facts.command) {
            panic!("injected fault: actor panic (YIELDSHELL_TEST_FAULTS)");
        }
        loop {
            debug_assert_eq!(self.phase.settled(), self.proc.state.borrow().settled());
            if let Phase::Settled { swept, .. } = self.phase
                && self.readers.is_none()
            {
                // One marker sweep before letting go: a daemon that left the group and closed
                // its output is invisible to the cheap group check, and once this actor ends
                // nothing could stop it (RELIABILITY F13 row c′). `exec`/`wait` have returned
                // already, so this costs no latency.
                if !swept {
                    let n = self.count_descendants(true).await;
                    if n > 0 {
                        self.update(|s| s.descendants = n);
                        self.phase = Phase::Lingering {
                            next_poll: Instant::now() + DESCENDANT_POLL,
                            swept: true,
                        };
                        continue;
                    }
                }
                self.phase = Phase::Done;
                break;
            }
            let awaits_shutdown = matches!(
                self.phase,
                Phase::Running {
                    shutdown: false,
                    ..
                }
            );
            tokio::select! {
                how = recv_exit(&mut self.exit), if self.exit.is_some() => {
                    self.exit = None;
                    self.on_exit(how).await;
                }
                _ = readers_done(&mut self.readers), if self.readers.is_some() => {
                    self.readers = None;
                    self.proc.output.close();
                    self.on_readers_done().await;
                }
                Some(msg) = self.control_rx.recv() => match msg {
                    Control::Stop { signal, grace, reason, reply } => {
                        self.begin_stop(signal, grace, reason, Some(reply)).await;
                    }
                },
                _ = sleep_opt(self.phase.deadline()) => self.on_deadline().await,
                _ = sleep_opt(running_record_at), if running_record_at.is_some() => {
                    running_record_at = None;
                    // Not once the end is decided (Closing): its record follows with the settle.
                    if !self.phase.settled() && !matches!(self.phase, Phase::Closing { .. }) {
                        self.persist();
                    }
                }
                _ = self.ctx.detach.cancelled() => {
                    // The next daemon re-adopts the process from its holder, starting from this
                    // record (a settled one it only lists).
                    if !self.phase.settled() {
                        self.persist();
                    }
                    tracing::debug!(process_id = %self.proc.facts.id, "left to its holder");
                    break;
                }
                _ = self.ctx.shutdown.cancelled(), if awaits_shutdown => {
                    // The daemon stops every tree at once (`tree::stop_all`, one /proc scan per
                    // round for all of them); the actor only records how its process ended.
                    // Its timeout no longer applies: the process ends by the shutdown, and is
                    // recorded so, not as `timed_out` should the timer fire during the sweep.
                    if let Phase::Running {
                        shutdown,
                        timeout_at,
                    } = &mut self.phase
                    {
                        *shutdown = true;
                        *timeout_at = None;
                    }
                }
            }
        }
        self.stdin_close.cancel();
        self.proc.release_channels();
        crate::heap::note_activity();
    }

    /// The shell's exit status arrived (`None`: the holder died without telling it; whatever is
    /// left of the tree is killed and the process is `lost`).
    async fn on_exit(&mut self, how: Option<ExitHow>) {
        let Some(how) = how else {
            tracing::warn!(process_id = %self.proc.facts.id, "the holder died; stopping what is left of the tree");
            if matches!(self.phase, Phase::Running { .. }) {
                self.begin_stop(
                    Signal::SIGKILL,
                    Duration::ZERO,
                    StopReason::HolderLost,
                    None,
                )
                .await;
            }
            return;
        };
        let exited = ShellExit {
            how,
            at: SystemTime::now(),
            duration: self.proc.started.elapsed(),
        };
        match self.phase {
            Phase::Running {
                shutdown: false, ..
            } => {
                self.update(|s| {
                    s.end_with(exited.end(EndStatus::Completed), false);
                });
                self.phase = Phase::Draining {
                    until: Instant::now() + self.ctx.timing.drain_grace,
                    extended: false,
                };
                if self.readers.is_none() {
                    self.settle_natural().await;
                }
            }
            Phase::Running { shutdown: true, .. } => {
                // Ended by the daemon's shutdown sweep.
                self.update(|s| {
                    s.end_with(exited.end(StopReason::Shutdown.end_status()), false);
                    s.descendants = 0;
                });
                self.stdin_close.cancel();
                self.close(Vec::new());
            }
            // A stop of the running process: it decides the status once the tree is gone.
            Phase::Stopping(_) if self.proc.state.borrow().end().is_none() => {
                self.shell_exit = Some(exited);
            }
            // Its end was decided before the holder told the exit (a stop found the tree gone
            // first, or interrupted the drain): only the exit is added.
            _ => self.update(|s| s.note_late_exit(how)),
        }
    }

    /// Both pipes reached EOF (or were cut off): the output is complete.
    async fn on_readers_done(&mut self) {
        match self.phase {
            Phase::Draining { .. } => self.settle_natural().await,
            Phase::Closing { .. } => self.finish_closing(),
            _ => {}
        }
    }

    /// The current phase's timer fired.
    async fn on_deadline(&mut self) {
        match &mut self.phase {
            Phase::Running { timeout_at, .. } => {
                *timeout_at = None;
                let grace = self.ctx.timing.timeout_grace;
                self.begin_stop(Signal::SIGTERM, grace, StopReason::Timeout, None)
                    .await;
            }
            Phase::Draining { .. } => self.settle_natural().await,
            Phase::Stopping(run) => {
                let exit_seen = self.exit.is_none();
                match run
                    .tick(&self.tree, self.pgid, &self.proc.facts.id, exit_seen)
                    .await
                {
                    Tick::Continue => {}
                    Tick::Gone => self.finish_stop(),
                    Tick::GaveUp { left } => {
                        // Never recorded as stopped while something of it runs: the callers
                        // hear how many survived, the process stays as it was (running, or
                        // settled with its descendants counted), and the stop goes on.
                        let outcome = StopOutcome::Incomplete {
                            survivors: left.max(1),
                        };
                        let replies = run.take_waiters().into_iter().map(|w| (w, outcome));
                        answer(replies.collect());
                        let n = u32::try_from(left).unwrap_or(u32::MAX);
                        self.update(|s| s.descendants = n);
                    }
                }
            }
            Phase::Closing { cutoff, .. } | Phase::Settled { cutoff, .. } => {
                *cutoff = None;
                if let Some(r) = &self.readers {
                    for a in &r.aborts {
                        a.abort();
                    }
                }
            }
            Phase::Lingering { .. } => self.poll_descendants().await,
            Phase::Done => {}
        }
    }

    /// Counts the descendants still running. Cheap first: an empty process group needs no
    /// /proc scan (the common case of a command that leaves nothing behind) — unless something
    /// outside the group may run: `full` is asked, a pipe is still held open after the drain
    /// grace, or descendants outside the group were seen before (RELIABILITY F13, F15). Once the
    /// group is empty only escapees can remain, and those are looked for under the daemon's
    /// adopted children (`find_escapees`) rather than by reading every process's environ.
    async fn count_descendants(&mut self, full: bool) -> u32 {
        if self.tree.known_ended() {
            return 0;
        }
        let group_alive = self.tree.signal_group(self.pgid, None);
        if !group_alive && !full && self.readers.is_none() && !self.outside_group {
            return 0;
        }
        let (pgid, id) = (self.pgid, self.proc.facts.id.clone());
        let n = if group_alive {
            tree::off_runtime(&self.tree, move |t| t.find_tree(pgid, &id).len()).await
        } else {
            tree::off_runtime(&self.tree, move |t| t.find_escapees(&id).len()).await
        };
        if n > 0 && !group_alive {
            self.outside_group = true;
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Settles a natural exit: the output is complete, or the drain grace is over.
    async fn settle_natural(&mut self) {
        let descendants = self.count_descendants(false).await;
        if descendants == 0
            && self.readers.is_some()
            && let Phase::Draining {
                until,
                extended: extended @ false,
            } = &mut self.phase
        {
            *until = Instant::now() + EOF_WAIT;
            *extended = true;
            return;
        }
        let next = if descendants > 0 {
            Phase::Lingering {
                next_poll: Instant::now() + DESCENDANT_POLL,
                swept: false,
            }
        } else {
            self.stdin_close.cancel();
            // Pipes still open here (after the drain grace) are held by something no scan
            // finds; they are read for as long as it holds them, as before the phases were
            // explicit (unlike after a recount or a stop, which cut them off).
            Phase::Settled {
                cutoff: None,
                swept: false,
            }
        };
        self.settle(next, descendants);
    }

    /// When readers still open should be cut off, counted from now.
    fn reader_cutoff(&self) -> Option<Instant> {
        self.readers
            .is_some()
            .then(|| Instant::now() + READER_CUTOFF)
    }

    async fn poll_descendants(&mut self) {
        let Phase::Lingering { swept, .. } = self.phase else {
            return;
        };
        let n = self.count_descendants(false).await;
        if n != self.proc.state.borrow().descendants {
            self.update(|s| s.descendants = n);
        }
        if n > 0 {
            self.phase = Phase::Lingering {
                next_poll: Instant::now() + DESCENDANT_POLL,
                swept,
            };
        } else {
            self.stdin_close.cancel();
            // Nothing of the tree is left, yet a pipe may still be open: some unrelated process
            // holds it. Stop waiting for it after a short while.
            self.phase = Phase::Settled {
                cutoff: self.reader_cutoff(),
                swept,
            };
        }
    }

    async fn begin_stop(
        &mut self,
        signal: Signal,
        grace: Duration,
        reason: StopReason,
        reply: Option<oneshot::Sender<StopOutcome>>,
    ) {
        let interrupted = match &mut self.phase {
            Phase::Stopping(run) => return run.join(signal, reply),
            Phase::Closing { replies, .. } => {
                // The tree was found gone moments ago; the answer comes with the settled result.
                replies.extend(reply.map(|r| (r, StopOutcome::AlreadyEnded)));
                return;
            }
            Phase::Running { .. } => Interrupted::Run,
            Phase::Draining { .. } => Interrupted::Drain,
            Phase::Lingering { swept, .. } | Phase::Settled { swept, .. } => {
                Interrupted::Settled { swept: *swept }
            }
            Phase::Done => return,
        };
        let begun = StopRun::begin(
            &self.tree,
            self.pgid,
            &self.proc.facts.id,
            signal,
            grace,
            reason,
            interrupted,
            reply.into_iter().collect(),
        )
        .await;
        match begun {
            Ok(run) => self.phase = Phase::Stopping(run),
            Err(waiters) => {
                for w in waiters {
                    let _ = w.send(StopOutcome::AlreadyEnded);
                }
            }
        }
    }

    /// The stop is over: the tree is gone.
    fn finish_stop(&mut self) {
        let Phase::Stopping(run) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        let outcome = StopOutcome::Stopped {
            escalated: run.escalated,
        };
        // Only a stop of the running process decides the status: one of a drain keeps
        // `completed`, one of a settled process only took its lingering tree down.
        let end = (run.interrupted == Interrupted::Run).then(|| {
            let status = run.reason.end_status();
            // The end is the shell's, when its holder told it (a lost holder never does).
            match self.shell_exit.take() {
                Some(exited) => exited.end(status),
                None => End {
                    status,
                    exit: None,
                    at: SystemTime::now(),
                    duration: self.proc.started.elapsed(),
                },
            }
        });
        self.update(|s| {
            if let Some(end) = end {
                s.end_with(end, false);
            }
            s.descendants = 0;
        });
        self.stdin_close.cancel();
        let replies = run.waiters.into_iter().map(|w| (w, outcome)).collect();
        match run.interrupted {
            Interrupted::Settled { swept } => {
                // Reported as ended before: the stop only took the lingering tree down.
                let cutoff = self.reader_cutoff();
                self.settle(Phase::Settled { cutoff, swept }, 0);
                answer(replies);
            }
            Interrupted::Run | Interrupted::Drain => self.close(replies),
        }
    }

    /// The tree is gone: settle once the readers have the rest of the output (at once if they
    /// have), answering `replies` then.
    fn close(&mut self, replies: Vec<(oneshot::Sender<StopOutcome>, StopOutcome)>) {
        self.phase = Phase::Closing {
            cutoff: self.reader_cutoff(),
            replies,
        };
        if self.readers.is_none() {
            self.finish_closing();
        }
    }

    fn finish_closing(&mut self) {
        let Phase::Closing { replies, .. } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        self.settle(
            Phase::Settled {
                cutoff: None,
                swept: false,
            },
            0,
        );
        answer(replies);
    }
}

/// Answers stops; a caller that went away meanwhile is no error.
fn answer(replies: Vec<(oneshot::Sender<StopOutcome>, StopOutcome)>) {
    for (w, outcome) in replies {
        let _ = w.send(outcome);
    }
}

#[cfg(test)]
mod tests;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::launch;
