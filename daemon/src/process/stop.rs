//! A stop in progress (`stop`, `timeout_ms`): the tree gets the signal, is polled until it is
//! gone, gets SIGKILL after the grace period, and new forks are caught by periodic rescans.
//!
//! Each process gets the stop's signal once: the group first (one `killpg` reaches the shell and
//! everything that stayed in its group), then the marked processes outside it, and later only
//! processes the rescans have not seen before — a second SIGTERM means "force" to many programs.
//! SIGKILL, once escalated, is sent to everything found each time.

use std::collections::HashSet;
use std::time::Duration;

use super::tree::Signal;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::tree::{self, Identity, ProcessTree};
use super::{StopOutcome, StopReason};

/// How often a stop checks whether the tree is gone.
pub(super) const STOP_POLL: Duration = Duration::from_millis(2);
/// How often a stop rescans for processes forked since it began.
pub(super) const STOP_RESCAN: Duration = Duration::from_millis(100);
/// After SIGKILL, how long to wait for processes that cannot die (uninterruptible sleep).
pub(super) const KILL_GIVE_UP: Duration = Duration::from_secs(10);

/// What a stop interrupted, which decides how its end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interrupted {
    /// The shell was running: the stop decides the status (`stopped`, `timed_out`), and the result
    /// settles once the output is complete.
    Run,
    /// The shell had exited on its own and its output was draining: the status stays
    /// `completed`, and the result settles once the output is complete.
    Drain,
    /// The result had settled (descendants lingered): the stop only takes the tree down.
    Settled {
        /// The marker sweep before letting go has run already.
        swept: bool,
    },
}

/// How a [`StopRun::tick`] left the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tick {
    /// Something is still alive: tick again at `next_tick`.
    Continue,
    /// The shell has exited and nothing of the tree is left.
    Gone,
    /// Processes survived SIGKILL for [`KILL_GIVE_UP`].
    GaveUp,
}

/// The state of one stop.
#[derive(Debug)]
pub(super) struct StopRun {
    /// The first signal.
    signal: Signal,
    /// Why the stop runs.
    pub reason: StopReason,
    /// What it interrupted.
    pub interrupted: Interrupted,
    /// When SIGKILL follows.
    kill_at: Instant,
    /// SIGKILL has been sent.
    pub escalated: bool,
    /// When to stop waiting for processes that survive SIGKILL.
    give_up_at: Option<Instant>,
    /// The processes outside the group found by the last scan, polled until they are gone.
    members: Vec<Identity>,
    /// Every process that got `signal` already: a rescan signals only new forks.
    signalled: HashSet<Identity>,
    /// When the actor calls [`StopRun::tick`] next.
    pub next_tick: Instant,
    /// When the next rescan for new forks runs.
    next_rescan: Instant,
    /// Everyone to answer once the stop is over.
    pub waiters: Vec<oneshot::Sender<StopOutcome>>,
}

impl StopRun {
    /// Sends `signal` to the group `pgid` and to the marked processes outside it, and returns the
    /// stop that follows them. When the result had settled already and nothing at all is left,
    /// there is nothing to stop: the waiters come back, to be told so.
    #[allow(clippy::too_many_arguments)] // one call site; a builder would only rename them
    pub(super) async fn begin<T: ProcessTree>(
        tree: &T,
        pgid: i32,
        process_id: &str,
        signal: Signal,
        grace: Duration,
        reason: StopReason,
        interrupted: Interrupted,
        waiters: Vec<oneshot::Sender<StopOutcome>>,
    ) -> Result<StopRun, Vec<oneshot::Sender<StopOutcome>>> {
        // The group first: one syscall reaches the shell and everything that stayed in its group
        // at once, instead of after the /proc scan below (milliseconds on a busy machine). Each
        // process gets the signal once: only those outside the group are signalled one by one.
        let group_alive = tree.signal_group(pgid, Some(signal));
        let id = process_id.to_string();
        let (in_group, members) = tree::off_runtime(tree, move |t| t.split_tree(pgid, &id)).await;
        // "Nothing counted" is not "nothing running": descendants outside the group are found
        // only by the sweep above (RELIABILITY F13, F15), so only an empty sweep ends here.
        let settled = matches!(interrupted, Interrupted::Settled { .. });
        if settled && !group_alive && members.is_empty() {
            return Err(waiters);
        }
        tree.signal_members(&members, signal);
        if !matches!(signal, Signal::SIGKILL | Signal::SIGCONT) {
            tree.signal_tree(Some(pgid), &members, Signal::SIGCONT);
        }
        let now = Instant::now();
        tracing::debug!(%process_id, ?signal, ?reason, members = members.len(), "stopping");
        let signalled = in_group.iter().chain(&members).copied().collect();
        Ok(StopRun {
            signal,
            reason,
            interrupted,
            kill_at: now + grace,
            escalated: signal == Signal::SIGKILL,
            give_up_at: (signal == Signal::SIGKILL).then(|| now + KILL_GIVE_UP),
            members,
            signalled,
            next_tick: now + STOP_POLL,
            next_rescan: now + STOP_RESCAN,
            waiters,
        })
    }

    /// A further stop while this one runs: its caller is answered with this one, and SIGKILL
    /// asked for now is sent at the next tick.
    pub(super) fn join(&mut self, signal: Signal, reply: Option<oneshot::Sender<StopOutcome>>) {
        self.waiters.extend(reply);
        if signal == Signal::SIGKILL && !self.escalated {
            self.kill_at = Instant::now();
        }
    }

    /// What the waiters are told: `gone` is whether the tree is gone because of this stop.
    pub(super) fn outcome(&self, gone: bool) -> StopOutcome {
        StopOutcome {
            stopped: gone,
            escalated: self.escalated,
        }
    }

    /// One poll: escalates after the grace, rescans for new forks, and checks whether the tree
    /// is gone (which needs the shell's exit status, `exit_seen`).
    pub(super) async fn tick<T: ProcessTree>(
        &mut self,
        tree: &T,
        pgid: i32,
        process_id: &str,
        exit_seen: bool,
    ) -> Tick {
        let now = Instant::now();
        let current = if self.escalated {
            Signal::SIGKILL
        } else {
            self.signal
        };
        if !self.escalated && now >= self.kill_at {
            self.escalated = true;
            self.give_up_at = Some(now + KILL_GIVE_UP);
            let id = process_id.to_string();
            self.members = tree::off_runtime(tree, move |t| t.find_tree(pgid, &id)).await;
            tree.signal_tree(Some(pgid), &self.members, Signal::SIGKILL);
            self.next_rescan = now + STOP_RESCAN;
        } else if now >= self.next_rescan {
            let id = process_id.to_string();
            let found = tree::off_runtime(tree, move |t| t.find_tree(pgid, &id)).await;
            if current == Signal::SIGKILL {
                tree.signal_tree(Some(pgid), &found, current);
            } else {
                let fresh = self.signal_fresh(tree, &found, current);
                if current != Signal::SIGCONT {
                    tree.signal_members(&fresh, Signal::SIGCONT);
                }
            }
            self.members = found;
            self.next_rescan = now + STOP_RESCAN;
        }
        let group_alive = tree.signal_group(pgid, None);
        let members_alive = self.members.iter().any(|m| tree.is_alive(*m));
        if exit_seen && !group_alive && !members_alive {
            // Looks gone: one more look catches anything forked since the last scan (with the
            // group empty, only escapees can be left, under the daemon's adopted children).
            let id = process_id.to_string();
            let rest = tree::off_runtime(tree, move |t| t.find_escapees(&id)).await;
            if rest.is_empty() {
                return Tick::Gone;
            }
            if current == Signal::SIGKILL {
                tree.signal_members(&rest, current);
            } else {
                self.signal_fresh(tree, &rest, current);
            }
            self.members = rest;
        }
        if let Some(give_up) = self.give_up_at
            && now >= give_up
        {
            tracing::error!(%process_id, "processes survived SIGKILL for {KILL_GIVE_UP:?} (uninterruptible?); giving up");
            return Tick::GaveUp;
        }
        self.next_tick = now + STOP_POLL;
        Tick::Continue
    }

    /// Sends `signal` to those of `found` that have not had it yet (a second SIGTERM means
    /// "force" to many programs) and returns them.
    fn signal_fresh<T: ProcessTree>(
        &mut self,
        tree: &T,
        found: &[Identity],
        signal: Signal,
    ) -> Vec<Identity> {
        let fresh: Vec<Identity> = found
            .iter()
            .filter(|m| !self.signalled.contains(m))
            .copied()
            .collect();
        tree.signal_members(&fresh, signal);
        self.signalled.extend(fresh.iter().copied());
        fresh
    }
}
