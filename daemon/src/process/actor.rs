//! The per-process actor: the one task that owns a managed process's lifecycle.
//!
//! # Theory of operation
//! Each process gets three kinds of tasks:
//! - two **pipe readers** (stdout, stderr) that redact and append to the [`OutputLog`] until EOF;
//! - one **stdin writer** that serialises `write` requests, so a process that stops reading its
//!   input blocks only that writer (with a timeout), never the actor;
//! - the **actor**, a `select!` loop over: the exit status from the reaper, the readers finishing,
//!   control messages (stop), the timeout, the drain deadline, stop progress ticks, and daemon
//!   shutdown. Only the actor changes [`ProcState`] and writes the process record.
//!
//! Completion (DESIGN §4): the shell's exit (from the reaper, never from EOF) sets the status;
//! the result is *settled* once both pipes reach EOF, or after a short drain grace when
//! descendants keep them open — then `descendants_running` says so, their later output is still
//! captured, and `stop` still takes them down. A stop or timeout settles only once the whole tree
//! is gone: SIGTERM (plus SIGCONT, so stopped processes can act on it) to the group and to
//! marked escapees, polled every few milliseconds, SIGKILL after the grace period, new forks
//! caught by periodic rescans.
//!
//! The actor ends when the result is settled, the readers are done and no descendant remains.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;
use yieldshell_proto::errors::ErrorKind;

use super::reaper::ExitHow;
use super::spawn::Spawned;
use super::tree::{self, Identity};
use super::{
    Control, ManagedProcess, ProcState, ProcessFacts, Status, StdinWrite, StopOutcome, StopReason,
};
use crate::output::{OutputLog, Stream};
use crate::policy::redact::{RedactStream, Redactor};
use crate::record::RecordStore;

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

/// How often a stop checks whether the tree is gone.
const STOP_POLL: Duration = Duration::from_millis(2);
/// How often a stop rescans for processes forked since it began.
const STOP_RESCAN: Duration = Duration::from_millis(100);
/// After SIGKILL, how long to wait for processes that cannot die (uninterruptible sleep).
const KILL_GIVE_UP: Duration = Duration::from_secs(10);
/// How often descendants of an exited shell are recounted.
const DESCENDANT_POLL: Duration = Duration::from_millis(500);
/// After the tree is gone, how long readers may still drain before they are cut off.
const READER_CUTOFF: Duration = Duration::from_millis(500);
/// How long a write to stdin may block before it is reported as not accepted.
const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process runs before its record gets its pid and start time.
const RUNNING_RECORD_DELAY: Duration = Duration::from_millis(100);
/// Quiet time after which buffered spool bytes are written.
const SPOOL_FLUSH_DELAY: Duration = Duration::from_millis(50);
/// Size of one pipe read.
const READ_BUFFER: usize = 128 * 1024;

/// Everything the actor needs besides the spawned process.
#[derive(Debug, Clone)]
pub struct ActorContext {
    /// Timing knobs.
    pub timing: ActorTiming,
    /// Where the record is written.
    pub store: RecordStore,
    /// Cancelled when the daemon shuts down.
    pub shutdown: CancellationToken,
    /// The daemon's reaper: tells our own children from adopted orphans.
    pub reaper: Arc<super::reaper::Reaper>,
}

/// Starts the readers, the stdin writer and the actor for a spawned process.
pub fn launch(
    facts: ProcessFacts,
    running_slot: crate::registry::RunningSlot,
    spawned: Spawned,
    output: Arc<OutputLog>,
    redactor: Option<Arc<Redactor>>,
    timeout: Option<Duration>,
    ctx: ActorContext,
) -> (Arc<ManagedProcess>, JoinHandle<()>) {
    let started = Instant::now();
    let (control_tx, control_rx) = mpsc::channel(16);
    let (stdin_tx, stdin_rx) = mpsc::channel(16);
    let (state, _) = watch::channel(ProcState::running(spawned.identity));
    let proc = Arc::new(ManagedProcess {
        id: facts.id,
        session_id: facts.session_id,
        name: facts.name,
        command: facts.command,
        cwd: facts.cwd,
        started_at: facts.started_at,
        started,
        output: output.clone(),
        state,
        control: std::sync::Mutex::new(Some(control_tx)),
        stdin: std::sync::Mutex::new(Some(stdin_tx)),
        running_slot: std::sync::Mutex::new(Some(running_slot)),
    });

    let out = tokio::spawn(pump(
        spawned.stdout,
        Stream::Stdout,
        output.clone(),
        redactor.clone(),
    ));
    let err = tokio::spawn(pump(spawned.stderr, Stream::Stderr, output, redactor));
    let reader_aborts = [out.abort_handle(), err.abort_handle()];
    let readers = tokio::spawn(async move {
        let _ = out.await;
        let _ = err.await;
    });
    let stdin_close = CancellationToken::new();
    tokio::spawn(stdin_writer(spawned.stdin, stdin_rx, stdin_close.clone()));

    let actor = Actor {
        proc: proc.clone(),
        pgid: spawned.identity.pid,
        ctx,
        control_rx,
        readers,
        reader_aborts,
        stdin_close,
        timeout_at: timeout.map(|t| started + t),
        exit_seen: false,
        natural_exit: false,
        readers_done: false,
        drain_until: None,
        stop: None,
        descendant_poll: None,
        reader_cutoff: None,
        shutdown_seen: false,
        outside_group: false,
        swept: false,
    };
    let handle = tokio::spawn(actor.run(spawned.exit));
    (proc, handle)
}

async fn pump(
    mut pipe: pipe::Receiver,
    stream: Stream,
    log: Arc<OutputLog>,
    redactor: Option<Arc<Redactor>>,
) {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut redact = redactor.map(RedactStream::new);
    let mut clean = Vec::new();
    // The spool buffers writes (one write per pipe read would make the disk the bottleneck of a
    // flood); when output pauses for SPOOL_FLUSH_DELAY, what is buffered goes to disk, so a
    // daemon crash loses at most that much of a quiet process's output.
    let mut unflushed = false;
    loop {
        let read = if unflushed {
            match tokio::time::timeout(SPOOL_FLUSH_DELAY, pipe.read(&mut buf)).await {
                Ok(r) => r,
                Err(_quiet) => {
                    log.flush_spool();
                    unflushed = false;
                    continue;
                }
            }
        } else {
            pipe.read(&mut buf).await
        };
        match read {
            Ok(0) => break,
            Ok(n) => {
                match redact.as_mut() {
                    Some(r) => {
                        clean.clear();
                        r.push(&buf[..n], &mut clean);
                        log.append(stream, &clean);
                    }
                    None => log.append(stream, &buf[..n]),
                }
                unflushed = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(?stream, "reading process output failed: {e}");
                break;
            }
        }
    }
    if let Some(r) = redact.as_mut() {
        clean.clear();
        r.finish(&mut clean);
        log.append(stream, &clean);
    }
    log.flush_spool();
}

async fn stdin_writer(
    pipe: pipe::Sender,
    mut requests: mpsc::Receiver<StdinWrite>,
    close: CancellationToken,
) {
    let mut pipe = Some(pipe);
    loop {
        let req = tokio::select! {
            r = requests.recv() => match r { Some(r) => r, None => break },
            _ = close.cancelled() => break,
        };
        let Some(p) = pipe.as_mut() else {
            let _ = req.reply.send(Err((
                ErrorKind::StdinClosed,
                "stdin was closed earlier (eof/close_stdin); start the process again to send more input"
                    .into(),
            )));
            continue;
        };
        let result = match tokio::time::timeout(STDIN_WRITE_TIMEOUT, p.write_all(&req.data)).await {
            Ok(Ok(())) => Ok(req.data.len()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Err((
                ErrorKind::ProcessExited,
                "the process no longer reads stdin (it exited or closed its input)".to_string(),
            )),
            Ok(Err(e)) => Err((ErrorKind::Internal, format!("writing stdin failed: {e}"))),
            Err(_) => Err((
                ErrorKind::StdinClosed,
                format!(
                    "stdin did not accept the input within {}s: the process is not reading it",
                    STDIN_WRITE_TIMEOUT.as_secs()
                ),
            )),
        };
        if req.eof || result.is_err() && matches!(&result, Err((ErrorKind::ProcessExited, _))) {
            pipe = None;
        }
        let _ = req.reply.send(result);
    }
}

struct StopRun {
    signal: Signal,
    reason: StopReason,
    kill_at: Instant,
    escalated: bool,
    give_up_at: Option<Instant>,
    members: Vec<Identity>,
    /// Every process that got `signal` already: a rescan signals only new forks, because a
    /// second SIGTERM means "force" to many programs.
    signalled: std::collections::HashSet<Identity>,
    next_tick: Instant,
    next_rescan: Instant,
    waiters: Vec<oneshot::Sender<StopOutcome>>,
}

impl StopRun {
    /// Sends `signal` to those of `found` that have not had it yet (a second SIGTERM means
    /// "force" to many programs) and returns them.
    fn signal_fresh(&mut self, found: &[Identity], signal: Signal) -> Vec<Identity> {
        let fresh: Vec<Identity> = found
            .iter()
            .filter(|m| !self.signalled.contains(m))
            .copied()
            .collect();
        tree::signal_tree(None, &fresh, signal);
        self.signalled.extend(fresh.iter().copied());
        fresh
    }
}

struct Actor {
    proc: Arc<ManagedProcess>,
    pgid: i32,
    ctx: ActorContext,
    control_rx: mpsc::Receiver<Control>,
    readers: JoinHandle<()>,
    reader_aborts: [AbortHandle; 2],
    stdin_close: CancellationToken,
    timeout_at: Option<Instant>,
    exit_seen: bool,
    /// The shell exited before any stop began.
    natural_exit: bool,
    readers_done: bool,
    drain_until: Option<Instant>,
    stop: Option<StopRun>,
    descendant_poll: Option<Instant>,
    reader_cutoff: Option<Instant>,
    shutdown_seen: bool,
    /// Descendants were found outside the process group after the shell exited (a `setsid`
    /// grandchild, a double-forked daemon): from then on only a full sweep counts them.
    outside_group: bool,
    /// The marker sweep before the actor lets its process go has run.
    swept: bool,
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

async fn recv_exit(rx: &mut Option<oneshot::Receiver<ExitHow>>) -> Option<ExitHow> {
    match rx.as_mut() {
        Some(r) => r.await.ok(),
        None => std::future::pending().await,
    }
}

impl Actor {
    fn settled(&self) -> bool {
        self.proc.state.borrow().settled
    }

    fn update(&self, f: impl FnOnce(&mut ProcState)) {
        self.proc.state.send_modify(f);
        self.proc.release_running_slot();
    }

    fn persist(&self) {
        self.ctx.store.save(&self.proc.record());
    }

    async fn run(mut self, exit: oneshot::Receiver<ExitHow>) {
        let mut exit = Some(exit);
        // The `starting` record written before the spawn already lets a restarted daemon find
        // this process (by its marker). The pid and start time follow shortly, once the process
        // has proven to be more than a quick command, so `exec` of `true` pays for no extra write.
        let mut running_record_at = Some(Instant::now() + RUNNING_RECORD_DELAY);
        if crate::faults::actor_should_panic(&self.proc.command) {
            panic!("injected fault: actor panic (YIELDSHELL_TEST_FAULTS)");
        }
        loop {
            let state = self.proc.state();
            if state.settled && self.readers_done && self.stop.is_none() && state.descendants == 0 {
                // One marker sweep before letting go: a daemon that left the group and closed
                // its output is invisible to the cheap group check, and once this actor ends
                // nothing could stop it (RELIABILITY F13 row c′). `exec`/`wait` have returned
                // already, so this costs no latency.
                if !self.swept {
                    self.swept = true;
                    let n = self.count_descendants(true);
                    if n > 0 {
                        self.update(|s| s.descendants = n);
                        self.descendant_poll = Some(Instant::now() + DESCENDANT_POLL);
                        continue;
                    }
                }
                break;
            }
            let may_time_out = !self.exit_seen && self.stop.is_none();
            let needs_shutdown = !self.shutdown_seen
                && (!state.settled || state.descendants > 0 || self.stop.is_some());
            tokio::select! {
                how = recv_exit(&mut exit), if exit.is_some() => {
                    exit = None;
                    self.on_exit(how);
                }
                _ = &mut self.readers, if !self.readers_done => {
                    self.readers_done = true;
                    self.proc.output.close();
                }
                Some(msg) = self.control_rx.recv() => match msg {
                    Control::Stop { signal, grace, reason, reply } => {
                        self.begin_stop(signal, grace, reason, Some(reply));
                    }
                },
                _ = sleep_opt(self.timeout_at), if may_time_out && self.timeout_at.is_some() => {
                    self.timeout_at = None;
                    self.begin_stop(Signal::SIGTERM, self.ctx.timing.timeout_grace, StopReason::Timeout, None);
                }
                _ = sleep_opt(self.drain_until), if self.drain_until.is_some() => {
                    self.drain_until = None;
                    if !self.settled() && self.stop.is_none() {
                        self.settle_natural();
                    }
                }
                _ = sleep_opt(self.stop.as_ref().map(|s| s.next_tick)), if self.stop.is_some() => {
                    self.tick_stop();
                }
                _ = sleep_opt(self.descendant_poll), if self.descendant_poll.is_some() => {
                    self.poll_descendants();
                }
                _ = sleep_opt(self.reader_cutoff), if self.reader_cutoff.is_some() && !self.readers_done => {
                    self.reader_cutoff = None;
                    for a in &self.reader_aborts {
                        a.abort();
                    }
                }
                _ = sleep_opt(running_record_at), if running_record_at.is_some() => {
                    running_record_at = None;
                    if !self.settled() {
                        self.persist();
                    }
                }
                _ = self.ctx.shutdown.cancelled(), if needs_shutdown => {
                    // The daemon stops every tree at once (`tree::stop_all`, one /proc scan per
                    // round for all of them); the actor only records how its process ended.
                    self.shutdown_seen = true;
                }
            }
            if self.exit_seen && self.readers_done && self.stop.is_none() && !self.settled() {
                self.settle_natural();
            }
        }
        self.stdin_close.cancel();
        self.proc.release_channels();
        crate::heap::note_activity();
    }

    fn on_exit(&mut self, how: Option<ExitHow>) {
        self.exit_seen = true;
        // A reaper that vanished cannot happen while the daemon runs; treat it as a kill.
        let how = how.unwrap_or(ExitHow::Signal(Signal::SIGKILL as i32));
        let duration = self.proc.started.elapsed();
        let natural = self.stop.is_none() && !self.shutdown_seen;
        self.natural_exit = natural;
        self.update(|s| {
            s.exit = Some(how);
            s.ended_at = Some(SystemTime::now());
            s.duration = Some(duration);
            if natural {
                s.status = Status::Completed;
            }
        });
        if natural {
            self.drain_until = Some(Instant::now() + self.ctx.timing.drain_grace);
        } else if self.stop.is_none() {
            // Ended by the daemon's shutdown sweep.
            self.update(|s| {
                s.status = Status::Stopped;
                s.ended_by = Some(StopReason::Shutdown.ended_by().to_string());
                s.settled = true;
                s.descendants = 0;
            });
            self.persist();
            self.stdin_close.cancel();
            if !self.readers_done {
                self.reader_cutoff = Some(Instant::now() + READER_CUTOFF);
            }
        }
    }

    /// Counts the descendants still running. Cheap first: an empty process group needs no
    /// /proc scan (the common case of a command that leaves nothing behind) — unless something
    /// outside the group may run: `full` is asked, a pipe is still held open after the drain
    /// grace, or descendants outside the group were seen before (RELIABILITY F13, F15). Once the
    /// group is empty only escapees can remain, and those are looked for under the daemon's
    /// adopted children (`tree::find_escapees`) rather than by reading every process's environ.
    fn count_descendants(&mut self, full: bool) -> u32 {
        let group_alive = killpg(Pid::from_raw(self.pgid), None).is_ok();
        if !group_alive && !full && self.readers_done && !self.outside_group {
            return 0;
        }
        let n = if group_alive {
            tree::find_tree(Some(self.pgid), &self.proc.id).len()
        } else {
            let reaper = &self.ctx.reaper;
            tree::find_escapees(&self.proc.id, |pid| reaper.waits_for(pid)).len()
        };
        if n > 0 && !group_alive {
            self.outside_group = true;
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn settle_natural(&mut self) {
        let descendants = self.count_descendants(false);
        self.update(|s| {
            s.settled = true;
            s.descendants = descendants;
        });
        if descendants > 0 {
            self.descendant_poll = Some(Instant::now() + DESCENDANT_POLL);
        } else {
            self.stdin_close.cancel();
        }
        self.persist();
    }

    fn poll_descendants(&mut self) {
        let n = self.count_descendants(false);
        if n != self.proc.state.borrow().descendants {
            self.update(|s| s.descendants = n);
        }
        if n > 0 {
            self.descendant_poll = Some(Instant::now() + DESCENDANT_POLL);
        } else {
            self.descendant_poll = None;
            self.stdin_close.cancel();
            if !self.readers_done {
                // Nothing of the tree is left, yet a pipe is still open: some unrelated process
                // holds it. Stop waiting for it after a short while.
                self.reader_cutoff = Some(Instant::now() + READER_CUTOFF);
            }
        }
    }

    fn begin_stop(
        &mut self,
        signal: Signal,
        grace: Duration,
        reason: StopReason,
        reply: Option<oneshot::Sender<StopOutcome>>,
    ) {
        if let Some(run) = self.stop.as_mut() {
            run.waiters.extend(reply);
            if signal == Signal::SIGKILL && !run.escalated {
                run.kill_at = Instant::now();
            }
            return;
        }
        let state = self.proc.state();
        // The group first: one syscall reaches the shell and everything that stayed in its group
        // at once, instead of after the /proc scan below (milliseconds on a busy machine). Each
        // process gets the signal once: only those outside the group are signalled one by one.
        let group = Pid::from_raw(self.pgid);
        let group_alive = killpg(group, signal).is_ok();
        let (in_group, members) = tree::split_tree(self.pgid, &self.proc.id);
        // "Nothing counted" is not "nothing running": descendants outside the group are found
        // only by the sweep above (RELIABILITY F13, F15), so only an empty sweep ends here.
        if state.settled && !group_alive && members.is_empty() {
            if let Some(r) = reply {
                let _ = r.send(StopOutcome {
                    stopped: false,
                    escalated: false,
                });
            }
            return;
        }
        tree::signal_tree(None, &members, signal);
        if !matches!(signal, Signal::SIGKILL | Signal::SIGCONT) {
            tree::signal_tree(Some(self.pgid), &members, Signal::SIGCONT);
        }
        let now = Instant::now();
        tracing::debug!(process_id = %self.proc.id, ?signal, ?reason, members = members.len(), "stopping");
        let signalled = in_group.iter().chain(&members).copied().collect();
        self.stop = Some(StopRun {
            signal,
            reason,
            kill_at: now + grace,
            escalated: signal == Signal::SIGKILL,
            give_up_at: (signal == Signal::SIGKILL).then(|| now + KILL_GIVE_UP),
            members,
            signalled,
            next_tick: now + STOP_POLL,
            next_rescan: now + STOP_RESCAN,
            waiters: reply.into_iter().collect(),
        });
        self.drain_until = None;
    }

    fn tick_stop(&mut self) {
        let pgid = self.pgid;
        let id = self.proc.id.clone();
        let exit_seen = self.exit_seen;
        let Some(run) = self.stop.as_mut() else {
            return;
        };
        let now = Instant::now();
        let current = if run.escalated {
            Signal::SIGKILL
        } else {
            run.signal
        };
        if !run.escalated && now >= run.kill_at {
            run.escalated = true;
            run.give_up_at = Some(now + KILL_GIVE_UP);
            run.members = tree::find_tree(Some(pgid), &id);
            tree::signal_tree(Some(pgid), &run.members, Signal::SIGKILL);
            run.next_rescan = now + STOP_RESCAN;
        } else if now >= run.next_rescan {
            run.members = tree::find_tree(Some(pgid), &id);
            if current == Signal::SIGKILL {
                tree::signal_tree(Some(pgid), &run.members, current);
            } else {
                let found = std::mem::take(&mut run.members);
                let fresh = run.signal_fresh(&found, current);
                if current != Signal::SIGCONT {
                    tree::signal_tree(None, &fresh, Signal::SIGCONT);
                }
                run.members = found;
            }
            run.next_rescan = now + STOP_RESCAN;
        }
        let group_alive = killpg(Pid::from_raw(pgid), None).is_ok();
        let members_alive = run.members.iter().any(|m| tree::is_alive(*m));
        if exit_seen && !group_alive && !members_alive {
            // Looks gone: one more look catches anything forked since the last scan (with the
            // group empty, only escapees can be left, under the daemon's adopted children).
            let reaper = &self.ctx.reaper;
            let rest = tree::find_escapees(&id, |pid| reaper.waits_for(pid));
            if rest.is_empty() {
                return self.finish_stop(true);
            }
            if current == Signal::SIGKILL {
                tree::signal_tree(None, &rest, current);
            } else {
                run.signal_fresh(&rest, current);
            }
            run.members = rest;
        }
        if let Some(give_up) = run.give_up_at
            && now >= give_up
        {
            tracing::error!(process_id = %id, "processes survived SIGKILL for {KILL_GIVE_UP:?} (uninterruptible?); giving up");
            return self.finish_stop(false);
        }
        run.next_tick = now + STOP_POLL;
    }

    fn finish_stop(&mut self, gone: bool) {
        let Some(run) = self.stop.take() else {
            return;
        };
        let natural = self.natural_exit;
        let duration = self.proc.started.elapsed();
        self.update(|s| {
            if !natural {
                s.status = match run.reason {
                    StopReason::Timeout => Status::TimedOut,
                    StopReason::Request | StopReason::Shutdown => Status::Stopped,
                };
                s.ended_by = Some(run.reason.ended_by().to_string());
            }
            if s.ended_at.is_none() {
                s.ended_at = Some(SystemTime::now());
                s.duration = Some(duration);
            }
            s.settled = true;
            s.descendants = 0;
        });
        self.persist();
        self.descendant_poll = None;
        self.stdin_close.cancel();
        if !self.readers_done {
            self.reader_cutoff = Some(Instant::now() + READER_CUTOFF);
        }
        for w in run.waiters {
            let _ = w.send(StopOutcome {
                stopped: gone,
                escalated: run.escalated,
            });
        }
    }
}
