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
