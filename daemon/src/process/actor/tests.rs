//! The actor's transitions, driven through a [`FakeTree`] on a paused clock: the shell's exit and
//! the pipes' EOF reach the actor through the same channels the reaper and the readers use, and
//! every signal and scan the actor makes is recorded.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Actor, ActorContext, ActorTiming, Io, Readers, managed};
use crate::limits::RunningCounts;
use crate::output::OutputLog;
use crate::process::stop::STOP_POLL;
use crate::process::tree::Identity;
use crate::process::tree::fake::{Call, FakeProc, FakeTree};
use crate::process::{ManagedProcess, ProcState, ProcessFacts, Status, StopOutcome, StopReason};
use crate::record::{ProcessRecord, RecordStore};
use crate::spawn::reaper::{ExitHow, Reaper};
use crate::status::EndedBy;

const ID: &str = "proc_actortest";
const SHELL: i32 = 1000;
/// Bounds every wait of these tests (virtual time: the clock is paused).
const LIMIT: Duration = Duration::from_secs(120);

const TIMING: ActorTiming = ActorTiming {
    drain_grace: Duration::from_millis(200),
    timeout_grace: Duration::from_millis(2_000),
    shutdown_grace: Duration::from_millis(3_000),
};

struct Harness {
    proc: Arc<ManagedProcess>,
    tree: FakeTree,
    actor: JoinHandle<()>,
    shutdown: CancellationToken,
    store: RecordStore,
    _dir: tempfile::TempDir,
}

fn start(timeout: Option<Duration>) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = RecordStore::open(dir.path()).expect("record store");
    store.create_dir(ID).expect("process dir");
    let (tree, channels) = FakeTree::new(SHELL);
    let facts = ProcessFacts {
        id: ID.into(),
        session_id: "sess_test".into(),
        name: String::new(),
        command: b"fake".to_vec(),
        cwd: dir.path().to_path_buf(),
        started_at: std::time::SystemTime::now(),
        tty: false,
        sandbox: None,
        twin: None,
        timeout: None,
        redactor: None,
    };
    let output = Arc::new(OutputLog::new(1 << 16, None, 0));
    let slot = Arc::new(RunningCounts::default()).take("sess_test");
    let (proc, control_rx, _stdin) = managed(
        Arc::new(facts),
        tree.shell(),
        std::time::Instant::now(),
        output,
        slot,
        None,
        None,
    );
    let eof = channels.eof;
    let join = tokio::spawn(async move {
        let _ = eof.await;
    });
    let aborts = vec![join.abort_handle()];
    let shutdown = CancellationToken::new();
    let ctx = ActorContext {
        timing: TIMING,
        store: store.clone(),
        shutdown: shutdown.clone(),
        detach: CancellationToken::new(),
        reaper: Arc::new(Reaper::default()),
    };
    let actor = Actor::new(
        proc.clone(),
        SHELL,
        tree.clone(),
        ctx,
        control_rx,
        Io {
            readers: Readers { join, aborts },
            stdin_close: CancellationToken::new(),
        },
        timeout.map(|t| Instant::now() + t),
    );
    let actor = tokio::spawn(actor.run(channels.exit));
    Harness {
        proc,
        tree,
        actor,
        shutdown,
        store,
        _dir: dir,
    }
}

impl Harness {
    /// Waits until the result is settled.
    async fn settled(&self) -> ProcState {
        let mut rx = self.proc.subscribe();
        tokio::time::timeout(LIMIT, rx.wait_for(ProcState::settled))
            .await
            .expect("settles in time")
            .expect("actor alive")
            .clone()
    }

    /// Asks for a stop, as the `stop` RPC does, in a task (its answer may take a while).
    fn stop(&self, signal: Signal, grace: Duration) -> JoinHandle<StopOutcome> {
        let proc = self.proc.clone();
        tokio::spawn(async move { proc.stop(signal, grace, StopReason::Request).await })
    }

    /// Waits for the actor to let go.
    async fn ended(self) -> Harness {
        let Harness {
            proc,
            tree,
            actor,
            shutdown,
            store,
            _dir,
        } = self;
        tokio::time::timeout(LIMIT, actor)
            .await
            .expect("actor ends in time")
            .expect("actor did not panic");
        Harness {
            proc,
            tree,
            actor: tokio::spawn(async {}),
            shutdown,
            store,
            _dir,
        }
    }

    /// The record as written.
    fn record(&self) -> ProcessRecord {
        self.store.flush();
        self.store
            .load_all()
            .into_iter()
            .find(|r| r.process_id == ID)
            .expect("record written")
    }

    /// What a client is told now.
    fn reported_status(&self) -> Status {
        self.proc.state().reported().status()
    }
}

async fn answer(stop: JoinHandle<StopOutcome>) -> StopOutcome {
    tokio::time::timeout(LIMIT, stop)
        .await
        .expect("stop answered in time")
        .expect("stop task")
}

fn child(pid: i32) -> FakeProc {
    FakeProc::child(pid)
}

fn stubborn(pid: i32) -> FakeProc {
    FakeProc {
        ignores_term: true,
        ..FakeProc::child(pid)
    }
}

/// A double-forked daemon: out of the group, marked, stdio on /dev/null.
fn escapee(pid: i32) -> FakeProc {
    FakeProc {
        in_group: false,
        holds_pipes: false,
        ..FakeProc::child(pid)
    }
}

fn signals(tree: &FakeTree) -> Vec<Call> {
    tree.calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Group(_) | Call::Member(..)))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn natural_exit_with_eof_settles_at_once_and_the_actor_lets_go() {
    let h = start(None);
    let t0 = Instant::now();
    h.tree.exit_shell(0);
    let state = h.settled().await;
    assert_eq!(t0.elapsed(), Duration::ZERO, "no drain grace when EOF came");
    assert_eq!(state.status(), Status::Completed);
    assert_eq!(state.exit(), Some(ExitHow::Code(0)));
    assert_eq!(state.descendants, 0);
    let h = h.ended().await;
    assert!(h.proc.output.end().closed, "the log is closed");
    // Nothing signalled; one marker sweep (the group is empty: only escapees) before letting go.
    assert_eq!(h.tree.calls(), vec![Call::FindEscapees]);
    let r = h.record();
    assert_eq!((r.status.as_str(), r.exit_code), ("completed", Some(0)));
}

#[tokio::test(start_paused = true)]
async fn natural_exit_with_pipes_held_by_a_descendant_settles_after_the_drain_grace() {
    let h = start(None);
    let kid = child(1001);
    h.tree.spawn(kid);
    let t0 = Instant::now();
    h.tree.exit_shell(3);
    // Within the drain grace the exit is known inside, but clients still see `running`.
    tokio::time::sleep(TIMING.drain_grace / 2).await;
    let state = h.proc.state();
    assert!(!state.settled());
    assert_eq!(state.status(), Status::Completed);
    assert_eq!(h.reported_status(), Status::Running);
    assert_eq!(h.proc.info().exit_code, None);
    assert!(h.proc.is_running());

    let state = h.settled().await;
    assert_eq!(t0.elapsed(), TIMING.drain_grace);
    assert_eq!(state.status(), Status::Completed);
    assert_eq!(state.descendants, 1, "descendants_running");
    let info = h.proc.info();
    assert_eq!((info.exit_code, info.descendants_running), (Some(3), 1));
    assert!(!h.proc.is_running());

    // The descendant ends: the next recount sees it, and the actor lets go.
    h.tree.end(kid.id);
    let h = h.ended().await;
    assert_eq!(h.proc.state().descendants, 0);
    assert!(t0.elapsed() >= TIMING.drain_grace + super::DESCENDANT_POLL);
    assert!(signals(&h.tree).is_empty(), "nothing was signalled");
    assert_eq!(h.record().status.as_str(), "completed");
}

#[tokio::test(start_paused = true)]
async fn stop_sends_sigterm_then_escalates_to_sigkill_after_the_grace() {
    let h = start(None);
    let kid = stubborn(1001);
    h.tree.spawn(kid);
    let t0 = Instant::now();
    let grace = Duration::from_secs(1);
    let outcome = answer(h.stop(Signal::SIGTERM, grace)).await;
    assert_eq!(outcome, StopOutcome::Stopped { escalated: true });
    assert!(t0.elapsed() >= grace && t0.elapsed() < grace + Duration::from_millis(50));
    assert!(!h.tree.anything_alive());
    // The group got SIGTERM (with SIGCONT) once, then was frozen (SIGSTOP to the group and to
    // each process found), then SIGKILL; nobody got SIGTERM twice.
    assert_eq!(
        signals(&h.tree),
        vec![
            Call::Group(Signal::SIGTERM),
            Call::Group(Signal::SIGCONT),
            Call::Group(Signal::SIGSTOP),
            Call::Member(kid.id, Signal::SIGSTOP),
            Call::Group(Signal::SIGKILL)
        ]
    );
    let state = h.proc.state();
    assert!(state.settled(), "answered once settled");
    assert_eq!(state.status(), Status::Stopped);
    assert_eq!(state.ended_by().map(EndedBy::as_str), Some("stop"));
    assert_eq!(state.exit(), Some(ExitHow::Signal(Signal::SIGTERM as i32)));
    let h = h.ended().await;
    assert_eq!(h.record().status.as_str(), "stopped");
}

#[tokio::test(start_paused = true)]
async fn stop_ends_without_sigkill_when_the_tree_leaves_during_the_grace() {
    let h = start(None);
    let kid = stubborn(1001);
    h.tree.spawn(kid);
    let t0 = Instant::now();
    let stop = h.stop(Signal::SIGTERM, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stop.is_finished(), "the stubborn child still runs");
    h.tree.end(kid.id);
    let outcome = answer(stop).await;
    assert_eq!(outcome, StopOutcome::Stopped { escalated: false });
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    assert!(
        !signals(&h.tree).contains(&Call::Group(Signal::SIGKILL)),
        "no SIGKILL"
    );
    assert_eq!(h.proc.state().status(), Status::Stopped);
}

#[tokio::test(start_paused = true)]
async fn timeout_stops_the_tree_and_records_timed_out() {
    let timeout = Duration::from_secs(5);
    let h = start(Some(timeout));
    let t0 = Instant::now();
    let state = h.settled().await;
    // SIGTERM at the timeout; the next stop poll finds the tree gone.
    assert_eq!(t0.elapsed(), timeout + STOP_POLL);
    assert_eq!(state.status(), Status::TimedOut);
    assert_eq!(state.ended_by().map(EndedBy::as_str), Some("timeout"));
    assert_eq!(
        signals(&h.tree),
        vec![Call::Group(Signal::SIGTERM), Call::Group(Signal::SIGCONT)]
    );
    let h = h.ended().await;
    assert_eq!(h.record().status.as_str(), "timed_out");
}

#[tokio::test(start_paused = true)]
async fn daemon_shutdown_records_the_exit_as_stopped_by_daemon_shutdown() {
    let h = start(None);
    h.shutdown.cancel();
    // Let the actor see the shutdown, then take the tree down as `tree::stop_all` does.
    tokio::time::sleep(Duration::from_millis(1)).await;
    use crate::process::tree::ProcessTree;
    h.tree.signal_group(SHELL, Some(Signal::SIGTERM));
    let state = h.settled().await;
    assert_eq!(state.status(), Status::Stopped);
    assert_eq!(
        state.ended_by().map(EndedBy::as_str),
        Some("daemon_shutdown")
    );
    assert_eq!(state.exit(), Some(ExitHow::Signal(Signal::SIGTERM as i32)));
    let h = h.ended().await;
    assert_eq!(
        h.record().ended_by.map(EndedBy::as_str),
        Some("daemon_shutdown")
    );
}

#[tokio::test(start_paused = true)]
async fn a_stopped_result_settles_and_is_answered_only_once_the_output_is_complete() {
    let h = start(None);
    // Something outside the tree holds the pipes, so EOF comes after the tree is gone.
    h.tree.hold_pipes_outside();
    let stop = h.stop(Signal::SIGTERM, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!h.tree.anything_alive(), "the tree is gone");
    assert!(!stop.is_finished(), "the answer waits for the output");
    let state = h.proc.state();
    assert_eq!(state.status(), Status::Stopped, "decided inside");
    assert!(!state.settled());
    assert_eq!(h.reported_status(), Status::Running, "not yet told");
    assert!(!h.proc.output.end().closed);

    h.tree.release_pipes_outside();
    let outcome = answer(stop).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { .. }),
        "{outcome:?}"
    );
    assert!(h.proc.output.end().closed, "output complete when answered");
    assert_eq!(h.reported_status(), Status::Stopped);
}

#[tokio::test(start_paused = true)]
async fn a_stopped_result_settles_at_the_reader_cutoff_when_the_pipes_stay_open() {
    let h = start(None);
    h.tree.hold_pipes_outside();
    let t0 = Instant::now();
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_secs(1))).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { .. }),
        "{outcome:?}"
    );
    // The first stop poll finds the tree gone; the readers get the cutoff from then on.
    assert_eq!(t0.elapsed(), STOP_POLL + super::READER_CUTOFF);
    assert!(h.proc.state().settled());
    assert!(h.proc.output.end().closed, "the readers were cut off");
    h.ended().await;
}

#[tokio::test(start_paused = true)]
async fn rescans_signal_only_new_forks_and_each_process_once() {
    let h = start(None);
    let in_group = stubborn(1001);
    h.tree.spawn(in_group);
    let stop = h.stop(Signal::SIGTERM, Duration::from_secs(1));
    // A fork that leaves the group while the stop runs, found by the next rescan.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fork = FakeProc {
        in_group: false,
        ..stubborn(1002)
    };
    h.tree.spawn(fork);
    let outcome = answer(stop).await;
    assert_eq!(outcome, StopOutcome::Stopped { escalated: true });
    let terms = |id: Identity, in_group: bool| {
        h.tree
            .signals_to(id, in_group)
            .into_iter()
            .filter(|s| *s == Signal::SIGTERM)
            .count()
    };
    assert_eq!(terms(in_group.id, true), 1, "{:?}", h.tree.calls());
    assert_eq!(terms(fork.id, false), 1, "{:?}", h.tree.calls());
    assert_eq!(
        h.tree.signals_to(fork.id, false),
        vec![
            Signal::SIGTERM,
            Signal::SIGCONT,
            Signal::SIGSTOP,
            Signal::SIGKILL
        ]
    );
    let rescans = h
        .tree
        .calls()
        .iter()
        .filter(|c| **c == Call::FindTree)
        .count();
    assert!(rescans >= 9, "rescanned every 100 ms: {rescans}");
}

#[tokio::test(start_paused = true)]
async fn stop_of_a_settled_process_with_nothing_left_says_not_stopped() {
    let h = start(None);
    // Pipes held outside the tree keep the actor alive after settling.
    h.tree.hold_pipes_outside();
    h.tree.exit_shell(0);
    let state = h.settled().await;
    assert_eq!(state.status(), Status::Completed);
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_secs(1))).await;
    assert_eq!(outcome, StopOutcome::AlreadyEnded);
    assert_eq!(h.proc.state().status(), Status::Completed, "unchanged");
    // The group probe got the signal (nobody was in it); no process was signalled.
    assert_eq!(signals(&h.tree), vec![Call::Group(Signal::SIGTERM)]);
    assert!(!h.actor.is_finished(), "still reading the held pipes");
    h.tree.release_pipes_outside();
    h.ended().await;
}

#[tokio::test(start_paused = true)]
async fn the_final_sweep_finds_an_escapee_and_keeps_it_stoppable() {
    let h = start(None);
    let daemon = escapee(1001);
    h.tree.spawn(daemon);
    h.tree.exit_shell(0);
    h.settled().await;
    // The sweep before letting go finds the escapee (the cheap group check at the settle could
    // not), and the actor stays.
    let mut rx = h.proc.subscribe();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| s.descendants == 1))
        .await
        .expect("sweep in time")
        .expect("actor alive");
    assert!(!h.actor.is_finished());
    assert_eq!(
        h.tree.calls(),
        vec![Call::FindEscapees],
        "one scan: the sweep"
    );
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_secs(1))).await;
    assert!(
        matches!(outcome, StopOutcome::Stopped { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        h.tree.signals_to(daemon.id, false),
        vec![Signal::SIGTERM],
        "{:?}",
        h.tree.calls()
    );
    let h = h.ended().await;
    let state = h.proc.state();
    assert_eq!(
        (state.status(), state.descendants, state.ended_by()),
        (Status::Completed, 0, None),
        "the reported result stays"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_output_drains_keeps_completed_and_settles_with_the_output() {
    let h = start(None);
    let kid = child(1001);
    h.tree.spawn(kid);
    h.tree.exit_shell(2);
    tokio::time::sleep(TIMING.drain_grace / 4).await;
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_secs(1))).await;
    assert_eq!(outcome, StopOutcome::Stopped { escalated: false });
    let state = h.proc.state();
    assert!(state.settled());
    assert_eq!(
        (state.status(), state.exit(), state.ended_by()),
        (Status::Completed, Some(ExitHow::Code(2)), None)
    );
    assert!(h.proc.output.end().closed);
}

#[tokio::test(start_paused = true)]
async fn a_sigkill_stop_during_a_graceful_one_escalates_at_once_and_both_are_answered() {
    let h = start(None);
    h.tree.spawn(stubborn(1001));
    let t0 = Instant::now();
    let graceful = h.stop(Signal::SIGTERM, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let forced = h.stop(Signal::SIGKILL, Duration::ZERO);
    let both = StopOutcome::Stopped { escalated: true };
    assert_eq!(answer(forced).await, both);
    assert_eq!(answer(graceful).await, both);
    assert!(
        t0.elapsed() < Duration::from_millis(60),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(
        signals(&h.tree)
            .iter()
            .filter(|c| **c == Call::Group(Signal::SIGTERM))
            .count(),
        1,
        "the second stop sends no second SIGTERM"
    );
}

/// A pipe reader that a busy runtime has not run yet looks like pipes held open: once nothing of
/// the tree holds them, the drain waits [`super::EOF_WAIT`] more for EOF instead of settling
/// without the last bytes (the issue-16 race, under load).
#[tokio::test(start_paused = true)]
async fn a_late_eof_after_the_drain_grace_still_comes_before_the_settle() {
    let h = start(None);
    h.tree.hold_pipes_outside();
    let t0 = Instant::now();
    h.tree.exit_shell(3);
    tokio::time::sleep(TIMING.drain_grace + Duration::from_millis(50)).await;
    assert!(!h.proc.state().settled(), "settled before EOF");
    assert_eq!(h.reported_status(), Status::Running);
    h.tree.release_pipes_outside();
    let state = h.settled().await;
    assert_eq!(t0.elapsed(), TIMING.drain_grace + Duration::from_millis(50));
    assert_eq!((state.status(), state.descendants), (Status::Completed, 0));
    assert!(
        h.proc.output.end().closed,
        "the output was complete at the settle"
    );
    h.ended().await;
}

/// When the pipes stay open (something no scan finds holds them), the result settles after the
/// extra wait, and their later output is still read.
#[tokio::test(start_paused = true)]
async fn pipes_held_by_something_unseen_settle_after_the_extra_wait_and_keep_being_read() {
    let h = start(None);
    h.tree.hold_pipes_outside();
    let t0 = Instant::now();
    h.tree.exit_shell(0);
    let state = h.settled().await;
    assert_eq!(t0.elapsed(), TIMING.drain_grace + super::EOF_WAIT);
    assert_eq!(state.status(), Status::Completed);
    assert!(!h.proc.output.end().closed, "still reading");
    h.tree.release_pipes_outside();
    let h = h.ended().await;
    assert!(h.proc.output.end().closed);
}

/// A fork bomb out of the group: every process forks again before each scan unless stopped.
fn breeder(pid: i32) -> FakeProc {
    FakeProc {
        in_group: false,
        holds_pipes: false,
        ignores_term: true,
        breeds: true,
        ..FakeProc::child(pid)
    }
}

#[tokio::test(start_paused = true)]
async fn a_breeding_tree_is_frozen_before_it_is_killed_and_nothing_outruns_the_stop() {
    let h = start(None);
    h.tree.spawn(breeder(1001));
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_millis(300))).await;
    assert_eq!(
        outcome,
        StopOutcome::Stopped { escalated: true },
        "{:?}",
        h.tree.calls()
    );
    assert!(!h.tree.anything_alive());
    // Nothing got SIGKILL before it was stopped (SIGSTOP): a running breeder would have forked.
    let calls = h.tree.calls();
    for (i, call) in calls.iter().enumerate() {
        if let Call::Member(id, Signal::SIGKILL) = call {
            assert!(
                calls[..i].contains(&Call::Member(*id, Signal::SIGSTOP)),
                "{id:?} was killed without being frozen first: {calls:?}"
            );
        }
    }
    assert_eq!(h.proc.state().status(), Status::Stopped);
    assert!(
        h.tree.holder_wakes() > 0,
        "the holder is resumed when a stop begins"
    );
}

#[tokio::test(start_paused = true)]
async fn survivors_of_sigkill_are_reported_and_never_recorded_as_stopped() {
    let h = start(None);
    let stuck = FakeProc {
        unkillable: true,
        ..stubborn(1001)
    };
    h.tree.spawn(stuck);
    let t0 = Instant::now();
    let outcome = answer(h.stop(Signal::SIGTERM, Duration::from_millis(100))).await;
    assert_eq!(outcome, StopOutcome::Incomplete { survivors: 1 });
    assert!(t0.elapsed() >= Duration::from_millis(100) + super::super::stop::KILL_GIVE_UP);
    // The shell died of the stop, its tree did not: still running, not stopped.
    let state = h.proc.state();
    assert_ne!(state.status(), Status::Stopped);
    assert_eq!(h.reported_status(), Status::Running);
    assert!(!state.settled());
    assert_eq!(state.descendants, 1);
    // A second stop waits for them again and is told the same.
    let again = answer(h.stop(Signal::SIGKILL, Duration::ZERO)).await;
    assert_eq!(again, StopOutcome::Incomplete { survivors: 1 });
    assert_ne!(h.proc.state().status(), Status::Stopped);
    // Once they are gone, the stop that went on records the end.
    h.tree.end(stuck.id);
    let state = h.settled().await;
    assert_eq!(state.status(), Status::Stopped);
    assert_eq!(state.descendants, 0);
}
