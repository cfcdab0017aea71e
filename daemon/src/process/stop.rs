//! A stop in progress (`stop`, `timeout_ms`): the tree gets the signal, is polled until it is
//! gone, gets SIGKILL after the grace period, and new forks are caught by periodic rescans.
//!
//! Each process gets the stop's signal once: the group first (one `killpg` reaches the shell and
//! everything that stayed in its group), then the members outside it, and later only processes
//! the rescans have not seen before — a second SIGTERM means "force" to many programs.
//!
//! SIGKILL is never sent to a tree that is still forking: the tree is frozen first
//! ([`tree::freeze_tree`]: SIGSTOP to everything found, rescans until nothing new appears), then
//! killed, and each later rescan that finds anything freezes and kills again. A fork bomb or a
//! fork-and-exit chain cannot outrun that, where it outran kill-what-you-found.
//!
//! The tree is gone only when the shell has exited, its group is empty and the holder (the
//! tree's subreaper) has no live child. Processes that survive SIGKILL for [`KILL_GIVE_UP`]
//! (uninterruptible sleep, or not ours to signal) are reported (`Tick::GaveUp`) and never
//! recorded as stopped: the stop goes on killing them, more slowly, until they are gone.
//!
//! A holder stopped by its own command (`kill -STOP $PPID`) is resumed when the stop begins and
//! at every rescan ([`ProcessTree::wake_holder`]): stopped, it reaps nothing and reports no exit.

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
/// After SIGKILL, how long to wait for processes that cannot die (uninterruptible sleep) before
/// the stop's callers are told that they survived.
pub(super) const KILL_GIVE_UP: Duration = tree::KILL_GIVE_UP;
/// Once the callers were told, how often the stop still looks for (and kills) the survivors.
pub(super) const SURVIVOR_POLL: Duration = Duration::from_millis(500);

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
    /// Processes survived SIGKILL for [`KILL_GIVE_UP`]: the waiters are told how many are left
    /// (and the stop goes on).
    GaveUp {
        /// Processes of the tree still alive.
        left: usize,
    },
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
        tree.wake_holder();
        let group_alive = tree.signal_group(pgid, Some(signal));
        let id = process_id.to_string();
        let (in_group, mut members) =
            tree::off_runtime(tree, move |t| t.split_tree(pgid, &id)).await;
        // "Nothing counted" is not "nothing running": descendants outside the group are found
        // only by the sweep above (RELIABILITY F13, F15), so only an empty sweep ends here.
        let settled = matches!(interrupted, Interrupted::Settled { .. });
        if settled && !group_alive && members.is_empty() {
            return Err(waiters);
        }
        if signal == Signal::SIGKILL {
            members = freeze_and_kill(tree, pgid, process_id).await;
        } else {
            tree.signal_members(&members, signal);
        }
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
    /// asked for now is sent at the next tick. One that comes after the survivors were reported
    /// waits a new [`KILL_GIVE_UP`] for them (and the tree is frozen and killed again at once).
    pub(super) fn join(&mut self, signal: Signal, reply: Option<oneshot::Sender<StopOutcome>>) {
        let now = Instant::now();
        if reply.is_some() && self.escalated && self.give_up_at.is_none() {
            self.give_up_at = Some(now + KILL_GIVE_UP);
            self.next_rescan = now;
            self.next_tick = now;
        }
        self.waiters.extend(reply);
        if signal == Signal::SIGKILL && !self.escalated {
            self.kill_at = now;
        }
    }

    /// Whether the survivors were reported and nobody waits for this stop any more.
    pub(super) fn gave_up(&self) -> bool {
        self.escalated && self.give_up_at.is_none()
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
            tree.wake_holder();
            self.members = freeze_and_kill(tree, pgid, process_id).await;
            tracing::debug!(%process_id, killed = self.members.len(), late = ?now.saturating_duration_since(self.kill_at), took = ?now.elapsed(), "escalated to SIGKILL");
            self.next_rescan = now + STOP_RESCAN;
        } else if now >= self.next_rescan {
            tree.wake_holder();
            let rescan = if self.gave_up() {
                SURVIVOR_POLL
            } else {
                STOP_RESCAN
            };
            self.next_rescan = now + rescan;
            if current == Signal::SIGKILL {
                self.members = freeze_and_kill(tree, pgid, process_id).await;
            } else {
                let id = process_id.to_string();
                let found = tree::off_runtime(tree, move |t| t.find_tree(pgid, &id)).await;
                let fresh = self.signal_fresh(tree, &found, current);
                if current != Signal::SIGCONT {
                    tree.signal_members(&fresh, Signal::SIGCONT);
                }
                self.members = found;
            }
        }
        let group_alive = tree.signal_group(pgid, None);
        let members_alive = self.members.iter().any(|m| tree.is_alive(*m));
        if exit_seen && !group_alive && !members_alive {
            // Looks gone: one more look catches anything forked since the last scan (with the
            // group empty, only escapees can be left, under the daemon's adopted children).
            let id = process_id.to_string();
            let rest = tree::off_runtime(tree, move |t| t.find_escapees(&id)).await;
            if rest.is_empty() {
                tracing::debug!(%process_id, "tree gone");
                return Tick::Gone;
            }
            if current == Signal::SIGKILL {
                // Found alive after the kill: it was forking (or was missed); freeze it too.
                self.members = freeze_and_kill(tree, pgid, process_id).await;
            } else {
                self.signal_fresh(tree, &rest, current);
                self.members = rest;
            }
        }
        if let Some(give_up) = self.give_up_at
            && now >= give_up
        {
            let left = self
                .members
                .iter()
                .filter(|m| tree.is_alive(**m))
                .count()
                .max(usize::from(group_alive || !exit_seen));
            tracing::error!(%process_id, left, "processes survived SIGKILL for {KILL_GIVE_UP:?} (uninterruptible sleep, or not ours to signal); still trying");
            self.give_up_at = None;
            self.next_tick = now + SURVIVOR_POLL;
            return Tick::GaveUp { left };
        }
        self.next_tick = now
            + if self.gave_up() {
                SURVIVOR_POLL.min(STOP_RESCAN)
            } else {
                STOP_POLL
            };
        Tick::Continue
    }

    /// Takes the waiters to answer now that the survivors were reported.
    pub(super) fn take_waiters(&mut self) -> Vec<oneshot::Sender<StopOutcome>> {
        std::mem::take(&mut self.waiters)
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

/// Freezes the tree ([`tree::freeze_tree`], on the blocking pool: it scans `/proc`), then sends
/// SIGKILL to the group and everything frozen. Returns what was killed.
async fn freeze_and_kill<T: ProcessTree>(tree: &T, pgid: i32, process_id: &str) -> Vec<Identity> {
    let id = process_id.to_string();
    let frozen = tree::off_runtime(tree, move |t| tree::freeze_tree(t, pgid, &id)).await;
    tree.signal_tree(Some(pgid), &frozen, Signal::SIGKILL);
    frozen
}
