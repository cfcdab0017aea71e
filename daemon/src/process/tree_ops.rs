//! What the actor needs of a managed process's tree on every platform: the [`ProcessTree`] seam
//! (signals and scans), the [`Identity`] of a process (defined with the spawns,
//! `crate::spawn::identity`), and [`off_runtime`] for the slow scans.
//!
//! `tree` implements it for Unix (process groups, `/proc`), `tree_windows` for Windows (a Job
//! Object per process); both re-export these, so the actor and its stops are the same code.

pub use crate::spawn::identity::Identity;

use super::tree::Signal;

/// The operations on a managed process's tree that the actor and its stops use, behind one
/// seam: `tree::SystemTree` does them for real on Unix (`killpg`, `kill`, `/proc`), `tree::JobTree`
/// on Windows (the process's Job Object), and the actor's unit tests use a fake whose process set
/// they control and which records every call.
///
/// The scans (`find_tree`, `split_tree`, `find_escapees`) read `/proc` and may take milliseconds
/// on a busy machine; the actor runs them on the blocking pool (see [`off_runtime`]). The rest are single
/// syscalls or one small `/proc` read, cheap enough for the actor's task.
pub trait ProcessTree: Clone + Send + Sync + 'static {
    /// Sends `signal` to the process group `pgid`, or with `None` only checks it. Whether the
    /// group has a member.
    fn signal_group(&self, pgid: i32, signal: Option<Signal>) -> bool;

    /// Sends `signal` to each of `members` still alive with the same identity.
    fn signal_members(&self, members: &[Identity], signal: Signal);

    /// Stops the group `pgid` and each of `members` where it is (SIGSTOP, also to any group a
    /// member leads), so that none of them can fork or exit on its own while the tree is being
    /// killed ([`freeze_tree`]). Windows: nothing (a job is terminated whole, at once).
    fn pause(&self, pgid: i32, members: &[Identity]);

    /// Resumes the tree's holder (SIGCONT) in case its own command stopped it: a stopped holder
    /// reaps nothing and reports no exit, so a stop would wait for it in vain. Nothing where there
    /// is no holder.
    fn wake_holder(&self) {}

    /// Whether this exact process (pid and start time) is still alive.
    fn is_alive(&self, id: Identity) -> bool;

    /// Every live process of the tree: the group `pgid` and the processes marked `process_id`.
    fn find_tree(&self, pgid: i32, process_id: &str) -> Vec<Identity>;

    /// The tree split in two: the members of the group `pgid`, and the marked processes outside
    /// it.
    fn split_tree(&self, pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>);

    /// Marked processes left once the group is empty (they left it).
    fn find_escapees(&self, process_id: &str) -> Vec<Identity>;

    /// Whether the whole tree is known to have ended without looking: its holder reaped the
    /// shell and had no child left (every orphan of the tree would be its child). Spares the
    /// signal and the `/proc` reads a quick command would otherwise cost.
    fn known_ended(&self) -> bool {
        false
    }

    /// The group `pgid` (if any) and then each listed member get `signal`.
    fn signal_tree(&self, pgid: Option<i32>, members: &[Identity], signal: Signal) {
        if let Some(g) = pgid {
            self.signal_group(g, Some(signal));
        }
        self.signal_members(members, signal);
    }
}

/// After SIGKILL, how long to wait for processes that cannot die (uninterruptible sleep) before
/// saying that they survived.
pub const KILL_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// At most this many scans freeze a tree: a scan finds what was forked before the previous
/// round's SIGSTOP, so a tree of depth `n` holds still after about `n` rounds; past the bound
/// whatever was found is killed anyway and the stop's later rescans freeze the rest.
pub const FREEZE_ROUNDS: usize = 64;

/// Freezes a tree: pauses whatever `find` finds, and finds again until a scan finds nobody that
/// was not paused already (nothing is forking any more: a paused process cannot fork, and a fork
/// that raced its pause shows up in the next scan). Returns everything found (paused), ready to
/// be killed. Blocking: `find` reads `/proc`.
pub fn freeze_with(
    mut find: impl FnMut() -> Vec<Identity>,
    mut pause: impl FnMut(&[Identity]),
) -> Vec<Identity> {
    let mut frozen: Vec<Identity> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let started = std::time::Instant::now();
    for round in 0..FREEZE_ROUNDS {
        let found = find();
        let fresh: Vec<Identity> = found.iter().copied().filter(|m| seen.insert(*m)).collect();
        // The first round pauses even an empty find: the group may have members a scan of a
        // moment ago did not see yet.
        if fresh.is_empty() && round > 0 {
            tracing::debug!(rounds = round + 1, processes = found.len(), took = ?started.elapsed(), "tree frozen");
            return found;
        }
        pause(&fresh);
        frozen.extend(fresh);
    }
    tracing::warn!(
        processes = frozen.len(),
        "the tree still grew after {FREEZE_ROUNDS} rounds of SIGSTOP; killing what was found"
    );
    frozen
}

/// [`freeze_with`] on one tree: the group `pgid` and the members of `process_id`.
pub fn freeze_tree<T: ProcessTree>(tree: &T, pgid: i32, process_id: &str) -> Vec<Identity> {
    freeze_with(
        || tree.find_tree(pgid, process_id),
        |members| tree.pause(pgid, members),
    )
}

/// Runs a `/proc` scan of `tree` on the blocking pool, off the runtime's workers: a scan reads
/// two files per process of the machine, and many stops at once (a session stopping its fifty
/// processes) would otherwise stall every RPC on those workers. A panic in the scan is resumed
/// in the caller, the actor, whose watchdog then takes the tree down.
pub async fn off_runtime<T: ProcessTree, R: Send + 'static>(
    tree: &T,
    f: impl FnOnce(&T) -> R + Send + 'static,
) -> R {
    let tree = tree.clone();
    match tokio::task::spawn_blocking(move || f(&tree)).await {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
