//! The members of managed processes' sessions (Linux), from one pass over `/proc/<pid>/stat` of
//! the whole machine, shared by every check for [`SNAPSHOT_TTL`].
//!
//! A managed process's tree, for what the daemon reports about it while it runs (whether it
//! waits for input, which ports it listens on), is its shell and every live process in the
//! shell's session or process group (the shell leads both). Linux keeps no index by session, so
//! finding them means reading every `stat`; a daemon asked about many processes at once (agents
//! polling `read`, `ps`) does that a few times a second at most, instead of once per call. A
//! member forked within the window is missed by the checks of that window; the next pass finds
//! it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::tree::{self, ProcStat};

/// Live processes as (pid, session, process group), from one pass over `/proc`.
#[derive(Debug)]
pub struct Snapshot {
    taken: Instant,
    processes: Vec<(i32, i32, i32)>,
}

impl Snapshot {
    /// Every live process of the pass that is in the session or group of a leader `is_leader`
    /// accepts (leaders themselves excluded), with that leader: `(pid, leader)`.
    pub fn members(&self, is_leader: impl Fn(i32) -> bool) -> impl Iterator<Item = (i32, i32)> {
        self.processes
            .iter()
            .filter_map(move |&(pid, session, pgrp)| {
                if is_leader(pid) {
                    None
                } else if is_leader(session) {
                    Some((pid, session))
                } else if is_leader(pgrp) {
                    Some((pid, pgrp))
                } else {
                    None
                }
            })
    }
}

/// The last pass.
static SNAPSHOT: Mutex<Option<Arc<Snapshot>>> = Mutex::new(None);

/// How long a pass is reused.
const SNAPSHOT_TTL: Duration = Duration::from_millis(250);

/// Forgets a pass taken before `instant`: a process started after it has none of its members in
/// it (a check that must see such a process's tree calls this first).
pub fn expire_before(instant: Instant) {
    let mut snap = SNAPSHOT.lock().unwrap_or_else(|e| e.into_inner());
    if snap.as_ref().is_some_and(|s| s.taken < instant) {
        *snap = None;
    }
}

/// Takes a pass over `/proc` that another reader took (the CPU and memory sampler,
/// [`super::resources`], reads every `stat` too) when it is newer than the last one: then one
/// pass serves both. `processes` are the live ones, as (pid, session, process group).
pub fn offer(taken: Instant, processes: Vec<(i32, i32, i32)>) {
    let mut snap = SNAPSHOT.lock().unwrap_or_else(|e| e.into_inner());
    if snap.as_ref().is_none_or(|s| s.taken < taken) {
        *snap = Some(Arc::new(Snapshot { taken, processes }));
    }
}

/// A pass at most [`SNAPSHOT_TTL`] old; `None` when `/proc` cannot be read. Blocking.
pub fn snapshot() -> Option<Arc<Snapshot>> {
    let fresh = |s: &Arc<Snapshot>| s.taken.elapsed() < SNAPSHOT_TTL;
    if let Some(s) = SNAPSHOT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|s| fresh(s))
    {
        return Some(s.clone());
    }
    // Scanned without the lock: concurrent checks may scan twice, never wait on each other.
    let taken = Instant::now();
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = tree::read_stat(pid).filter(ProcStat::is_alive) {
            processes.push((pid, stat.session, stat.pgrp));
        }
    }
    let snap = Arc::new(Snapshot { taken, processes });
    *SNAPSHOT.lock().unwrap_or_else(|e| e.into_inner()) = Some(snap.clone());
    Some(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_found_by_session_then_group_and_leaders_are_not_members() {
        let snap = Snapshot {
            taken: Instant::now(),
            processes: vec![
                (10, 10, 10), // a leader
                (11, 10, 10), // its child
                (12, 10, 12), // a pipeline of its own group, same session
                (20, 5, 10),  // another session, in the leader's group
                (30, 30, 30), // unrelated
            ],
        };
        let mut found: Vec<_> = snap.members(|p| p == 10).collect();
        found.sort_unstable();
        assert_eq!(found, vec![(11, 10), (12, 10), (20, 10)]);
        assert_eq!(snap.members(|p| p == 99).count(), 0);
    }
}
