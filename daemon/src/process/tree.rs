//! Finding, identifying and signalling a managed process's whole tree.
//!
//! Containment (docs/RELIABILITY.md, containment matrix), as implemented:
//! - Every managed command starts in a new session, so the shell and everything it forks share a
//!   process group and a session id equal to the shell's pid: `killpg` reaches them all.
//! - Descendants that leave with `setsid`/`setpgid` are found by the marker every managed
//!   process inherits in its environment (`YIELDSHELL_PROCESS_ID=<id>`), read for processes of
//!   our uid from `/proc/<pid>/environ` (Linux) or `sysctl(KERN_PROCARGS2)` (macOS, see
//!   `process/darwin.rs`). A process that scrubs its environment *and* leaves the session escapes;
//!   that is documented in `docs/RELIABILITY.md`.
//! - Every pid is paired with its start time (Linux: `/proc/<pid>/stat` field 22; macOS:
//!   `proc_pidinfo`) and re-checked before it is signalled, so a recycled pid is never hit.
//! - Linux only: the daemon and each holder are child subreapers, so an orphaned descendant is
//!   re-parented to them and a look for escapees can skip the marker scan when nothing was
//!   adopted. macOS has no subreaper (orphans go to launchd): that look always scans.
//!
//! On other Unix systems only the process group is reached (no process table is read).
//!
//! The actor reaches all of this through the [`ProcessTree`] trait ([`SystemTree`] here; a fake in
//! the actor's tests), and runs the `/proc` scans on the blocking pool ([`off_runtime`]).

pub use nix::sys::signal::Signal;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;

pub use super::tree_ops::{Identity, ProcessTree, off_runtime};
pub use crate::spawn::MARKER_VAR;
pub use crate::spawn::identity::{
    ProcStat, identify, identify_child, is_alive, parse_stat, read_stat,
};

/// Whether the process group and session that `leader` led may still exist, so signalling the
/// group or matching members by it can only reach its own processes. False once the leader's pid
/// belongs to another process: the kernel hands a pid out again only when no process uses it as
/// a group or session id any more, so the old group is gone, and `killpg` of that number would
/// reach the newcomer's (a `setsid` program that got the pid). A leader that exited leaves
/// its pid free, and the group may live on in its descendants: that is still ours.
pub fn group_may_live(leader: Identity) -> bool {
    match identify(leader.pid) {
        Some(now) => {
            leader.start_time == 0 || now.start_time == 0 || now.start_time == leader.start_time
        }
        None => true,
    }
}

/// The groups among `leaders` that may still be theirs ([`group_may_live`]), by id.
fn live_groups(leaders: &[Identity]) -> std::collections::HashSet<i32> {
    leaders
        .iter()
        .filter(|l| group_may_live(**l))
        .map(|l| l.pid)
        .collect()
}

/// The `MARKER_VAR=<id>` entry to look for.
pub fn marker_entry(process_id: &str) -> Vec<u8> {
    format!("{MARKER_VAR}={process_id}").into_bytes()
}

/// Every live process of the tree: members of the process group or session `leader_pgid`, and
/// processes of our uid carrying the marker of `process_id`.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn find_tree(leader_pgid: Option<i32>, process_id: &str) -> Vec<Identity> {
    let groups: std::collections::HashSet<i32> = leader_pgid.into_iter().collect();
    let markers = std::collections::HashSet::from([marker_entry(process_id)]);
    find_trees(&groups, &markers)
}

/// The final sweep after a process group has emptied: processes carrying the marker of
/// `process_id` that left the group (a daemonizing double fork, `setsid`).
///
/// The daemon is a child subreaper, so once the group is empty every surviving descendant lives
/// under an *adopted* child of the daemon (the topmost survivor's parent died, so it was reparented
/// to us). With no adopted children (only children `is_spawned` recognises) there is nothing to
/// find, and the environ of every process on the machine need not be read: that is the common case,
/// paid after each command. Otherwise (or when `/proc` cannot tell) this is the full marker scan.
#[cfg(target_os = "linux")]
pub fn find_escapees(process_id: &str, is_spawned: impl Fn(i32) -> bool) -> Vec<Identity> {
    match adopted_children_exist(&is_spawned) {
        Some(false) => Vec::new(),
        _ => find_tree(None, process_id),
    }
}

/// Whether the daemon has children it did not spawn: from `/proc/self/task/*/children` where the
/// kernel has it (CONFIG_PROC_CHILDREN), else from the parent pid of every process. `None` when
/// `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn adopted_children_exist(is_spawned: &impl Fn(i32) -> bool) -> Option<bool> {
    let me = std::process::id() as i32;
    let mut from_tasks = Some(false);
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(list) => {
                if list
                    .split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .any(|p| !is_spawned(p))
                {
                    return Some(true);
                }
            }
            Err(_) => {
                from_tasks = None;
                break;
            }
        }
    }
    if from_tasks.is_some() {
        return from_tasks;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = pid_entry(&entry) else {
            continue;
        };
        if read_stat(pid).is_some_and(|s| s.ppid == me && s.is_alive()) && !is_spawned(pid) {
            return Some(true);
        }
    }
    Some(false)
}

/// The pid a `/proc` entry stands for (`None` for `self`, `sys`, …).
#[cfg(target_os = "linux")]
fn pid_entry(entry: &std::fs::DirEntry) -> Option<i32> {
    entry.file_name().to_str()?.parse().ok()
}

/// The final sweep after a process group has emptied (macOS): without a subreaper nothing says
/// whether a descendant left the group, so this is always the full marker scan.
#[cfg(target_os = "macos")]
pub fn find_escapees(process_id: &str, _is_spawned: impl Fn(i32) -> bool) -> Vec<Identity> {
    find_tree(None, process_id)
}

/// Without a process table: nothing outside the group can be found.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn find_escapees(_process_id: &str, _is_spawned: impl Fn(i32) -> bool) -> Vec<Identity> {
    Vec::new()
}

/// One pass over the process table for many trees at once: live processes in any of `groups`
/// (as process group or session) or of our uid carrying any of `markers`. A daemon stopping
/// everything at shutdown scans once per round instead of once per process.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn find_trees(
    groups: &std::collections::HashSet<i32>,
    markers: &std::collections::HashSet<Vec<u8>>,
) -> Vec<Identity> {
    scan(groups, markers)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// The whole tree split in two: members of the process group or session `leader_pgid` (which
/// `killpg` reaches), and the processes carrying the marker of `process_id` outside it. A stop
/// signals the group first (one syscall, no waiting), then the outsiders after the scan, and
/// remembers both so nobody gets the same signal twice.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn split_tree(leader_pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
    let groups = std::collections::HashSet::from([leader_pgid]);
    let markers = std::collections::HashSet::from([marker_entry(process_id)]);
    let (inside, outside): (Vec<_>, Vec<_>) = scan(&groups, &markers)
        .into_iter()
        .partition(|(_, in_group)| *in_group);
    (
        inside.into_iter().map(|(id, _)| id).collect(),
        outside.into_iter().map(|(id, _)| id).collect(),
    )
}

/// Without a process table: the group leader if alive; nothing outside the group can be found.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn split_tree(leader_pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
    (find_tree(Some(leader_pgid), process_id), Vec::new())
}

/// Every pid on the machine: the numeric entries of `/proc`.
#[cfg(target_os = "linux")]
fn all_pids() -> Option<Vec<i32>> {
    Some(
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| pid_entry(&e))
            .collect(),
    )
}

#[cfg(target_os = "macos")]
use super::darwin::all_pids;

/// The environment of `pid` (NUL-separated entries) if the process belongs to `uid`: only our
/// own processes are ours to find (and only theirs can be read).
#[cfg(target_os = "linux")]
fn environ_if_owned(pid: i32, uid: u32) -> Option<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let dir = format!("/proc/{pid}");
    if std::fs::metadata(&dir).ok()?.uid() != uid {
        return None;
    }
    std::fs::read(format!("{dir}/environ")).ok()
}

/// The environment of `pid` (NUL-separated entries) if the process belongs to `uid`.
#[cfg(target_os = "macos")]
fn environ_if_owned(pid: i32, uid: u32) -> Option<Vec<u8>> {
    if super::darwin::uid_of(pid)? != uid {
        return None;
    }
    super::darwin::environ(pid)
}

/// One pass over the process table: members of `groups` (flagged `true`) and processes of our
/// uid carrying one of `markers`.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn scan(
    groups: &std::collections::HashSet<i32>,
    markers: &std::collections::HashSet<Vec<u8>>,
) -> Vec<(Identity, bool)> {
    let uid = nix::unistd::getuid().as_raw();
    let me = std::process::id() as i32;
    let Some(pids) = all_pids() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for pid in pids {
        if pid == me {
            continue;
        }
        let Some(stat) = read_stat(pid) else {
            continue;
        };
        if !stat.is_alive() {
            continue;
        }
        // "In the group" means reached by `killpg` of the leader's group. A descendant that
        // moved to a group of its own (`setpgid`, a job-control shell's job) is still in the
        // leader's session, and a member, but must be signalled one by one.
        let in_group = groups.contains(&stat.pgrp);
        let member = in_group
            || groups.contains(&stat.session)
            || (!markers.is_empty()
                && environ_if_owned(pid, uid)
                    .is_some_and(|env| env.split(|b| *b == 0).any(|e| markers.contains(e))));
        if member {
            let id = Identity {
                pid,
                start_time: stat.start_time,
            };
            found.push((id, in_group));
        }
    }
    found
}

/// Without a process table: the live groups among `groups` (each is signalled as a whole anyway).
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn find_trees(
    groups: &std::collections::HashSet<i32>,
    _markers: &std::collections::HashSet<Vec<u8>>,
) -> Vec<Identity> {
    groups
        .iter()
        .filter(|g| killpg(Pid::from_raw(**g), None).is_ok())
        .map(|g| Identity {
            pid: *g,
            start_time: 0,
        })
        .collect()
}

/// Stops many trees together: SIGTERM (and SIGCONT) to every group and marked process, SIGKILL
/// to whatever is left after `grace`, until nothing is left (bounded). Blocking. This is the
/// daemon's shutdown (one `/proc` scan per round for all trees, where per-process stops would
/// each scan `/proc` and, for a thousand processes, outlast any shutdown budget), and with no
/// grace the emergency kill of a tree whose actor is gone (its supervisor panicked).
///
/// `leaders` are the shells whose groups (and sessions) are the trees; a group whose leader's pid
/// went to another process is left alone (see [`group_may_live`]), checked before every signal.
pub fn stop_all(leaders: &[Identity], process_ids: &[String], grace: std::time::Duration) {
    use std::time::{Duration, Instant};
    let markers: std::collections::HashSet<Vec<u8>> =
        process_ids.iter().map(|id| marker_entry(id)).collect();
    // Which groups are still the trees' is decided with each scan (a `/proc` read per leader),
    // and signals go out right after one; the 5 ms polls in between only ask whether any is left.
    let scan = || {
        let groups = live_groups(leaders);
        let members = find_trees(&groups, &markers);
        (groups, members)
    };
    let signal_all = |groups: &std::collections::HashSet<i32>, members: &[Identity], sig| {
        for g in groups {
            let _ = killpg(Pid::from_raw(*g), sig);
        }
        for m in members {
            if is_alive(*m) {
                let _ = kill(Pid::from_raw(m.pid), sig);
            }
        }
    };
    let (mut groups, mut members) = scan();
    signal_all(&groups, &members, Signal::SIGTERM);
    signal_all(&groups, &members, Signal::SIGCONT);
    let mut escalated = false;
    let mut deadline = Instant::now() + grace;
    let mut next_scan = Instant::now() + Duration::from_millis(200);
    loop {
        let alive = groups
            .iter()
            .any(|g| killpg(Pid::from_raw(*g), None).is_ok())
            || members.iter().any(|m| is_alive(*m));
        if !alive {
            // One full scan catches anything forked since the last one.
            (groups, members) = scan();
            if members.is_empty() {
                return;
            }
        }
        let now = Instant::now();
        if !escalated && now >= deadline {
            escalated = true;
            deadline = now + Duration::from_secs(10);
            (groups, members) = scan();
            signal_all(&groups, &members, Signal::SIGKILL);
        } else if escalated && now >= deadline {
            tracing::error!(
                left = members.len(),
                "processes survived SIGKILL at shutdown"
            );
            return;
        } else if now >= next_scan {
            next_scan = now + Duration::from_millis(200);
            (groups, members) = scan();
            let sig = if escalated {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            signal_all(&groups, &members, sig);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Without a process table: the group leader if it is alive (the group is signalled as a whole
/// anyway).
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn find_tree(leader_pgid: Option<i32>, _process_id: &str) -> Vec<Identity> {
    match leader_pgid {
        Some(g) if killpg(Pid::from_raw(g), None).is_ok() => vec![Identity {
            pid: g,
            start_time: 0,
        }],
        _ => Vec::new(),
    }
}

/// Sends `signal` to the process group (if any) and to every listed member still carrying the
/// same identity. Vanished processes are not an error.
pub fn signal_tree(leader_pgid: Option<i32>, members: &[Identity], signal: Signal) {
    if let Some(g) = leader_pgid {
        let _ = killpg(Pid::from_raw(g), signal);
    }
    for m in members {
        if is_alive(*m) {
            let _ = kill(Pid::from_raw(m.pid), signal);
        }
    }
}

/// How managed trees are contained on this platform, for `Status` and the docs.
pub fn containment_name() -> &'static str {
    if cfg!(target_os = "linux") {
        "session+process-group+subreaper+marker-scan"
    } else if cfg!(target_os = "macos") {
        "session+process-group+marker-scan"
    } else {
        "session+process-group"
    }
}

/// Parses a signal name with or without the `SIG` prefix (`TERM`, `SIGTERM`, `sigkill`) or a
/// number.
pub fn parse_signal(name: &str) -> Option<Signal> {
    let trimmed = name.trim();
    if let Ok(n) = trimmed.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let upper = trimmed.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse::<Signal>().ok()
}

#[cfg(test)]
pub mod fake;

/// The real tree: signals and `/proc` scans. Escapees are looked for under the holder's
/// children (it is the tree's subreaper): anything there but the shell is an adopted orphan.
#[derive(Debug, Clone)]
pub struct SystemTree {
    reaper: std::sync::Arc<crate::spawn::reaper::Reaper>,
    /// The holder and the shell (whose pid is the process group and session of the tree).
    held: Option<(Identity, Identity)>,
    /// Set by the holder's link when the holder said it had no child left after the shell.
    left_alone: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl SystemTree {
    /// The real tree, with the daemon's reaper.
    pub fn new(reaper: std::sync::Arc<crate::spawn::reaper::Reaper>) -> SystemTree {
        SystemTree {
            reaper,
            held: None,
            left_alone: None,
        }
    }

    /// The real tree of a process held by `holder`, whose shell is `shell`.
    /// `left_alone` is the link's flag: set once the holder said it had no child left.
    pub fn held(
        reaper: std::sync::Arc<crate::spawn::reaper::Reaper>,
        holder: Identity,
        shell: Identity,
        left_alone: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> SystemTree {
        SystemTree {
            reaper,
            held: Some((holder, shell)),
            left_alone: Some(left_alone),
        }
    }
}

/// Whether `holder` has children besides `shell` (adopted orphans of the tree); `None` when it
/// cannot tell (`/proc` lacks the list).
#[cfg(target_os = "linux")]
fn holder_adopted(holder: Identity, shell: i32) -> Option<bool> {
    let list = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", holder.pid)).ok()?;
    Some(
        list.split_ascii_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .any(|p| p != shell),
    )
}

impl SystemTree {
    /// Whether the group `pgid` may still be this tree's: false once the shell that led it is
    /// gone and its pid went to another process ([`group_may_live`]).
    fn group_is_ours(&self, pgid: i32) -> bool {
        match self.held {
            Some((_, shell)) if shell.pid == pgid => group_may_live(shell),
            _ => true,
        }
    }
}

impl ProcessTree for SystemTree {
    fn signal_group(&self, pgid: i32, signal: Option<Signal>) -> bool {
        self.group_is_ours(pgid) && killpg(Pid::from_raw(pgid), signal).is_ok()
    }

    fn signal_members(&self, members: &[Identity], signal: Signal) {
        signal_tree(None, members, signal);
    }

    fn is_alive(&self, id: Identity) -> bool {
        is_alive(id)
    }

    fn find_tree(&self, pgid: i32, process_id: &str) -> Vec<Identity> {
        find_tree(self.group_is_ours(pgid).then_some(pgid), process_id)
    }

    fn split_tree(&self, pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
        if self.group_is_ours(pgid) {
            split_tree(pgid, process_id)
        } else {
            (Vec::new(), find_tree(None, process_id))
        }
    }

    fn known_ended(&self) -> bool {
        self.left_alone
            .as_ref()
            .is_some_and(|a| a.load(std::sync::atomic::Ordering::Acquire))
    }

    fn find_escapees(&self, process_id: &str) -> Vec<Identity> {
        // A holder that ended on its own had no child left: all of the tree was below it. One
        // that was killed left its orphans to the daemon (when it started the holder), which
        // the check below looks at.
        #[cfg(target_os = "linux")]
        if let Some((holder, shell)) = self.held
            && is_alive(holder)
        {
            return match holder_adopted(holder, shell.pid) {
                Some(false) => Vec::new(),
                _ => find_tree(None, process_id),
            };
        }
        let reaper = &self.reaper;
        find_escapees(process_id, |pid| reaper.waits_for(pid))
    }
}

#[cfg(test)]
mod tests {
    /// A child that exited but is not reaped yet keeps its identity: its start time, which a
    /// process taking the pid later will not have.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_unreaped_child_is_identified_with_its_start_time() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while super::read_stat(pid).is_some_and(|s| s.state != b'Z') {
            assert!(std::time::Instant::now() < deadline, "never exited");
            std::thread::yield_now();
        }
        assert_eq!(super::identify(pid), None, "a zombie is not alive");
        let id = super::identify_child(pid);
        assert_eq!(id.pid, pid);
        assert_ne!(id.start_time, 0, "the start time is still there");
        child.wait().expect("reap");
    }

    use super::*;

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let line =
            "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(line).expect("parse");
        assert_eq!((s.ppid, s.pgrp, s.session, s.state), (1, 1234, 1234, b'S'));
        assert_eq!(s.start_time, 987654);
        assert_eq!(s.tpgid, -1, "no controlling terminal");
    }

    #[test]
    fn signal_names_with_and_without_prefix() {
        assert_eq!(parse_signal("TERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGKILL"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("sigint"), Some(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("SIGNOPE"), None);
        assert_eq!(parse_signal("999"), None);
        assert_eq!(parse_signal(""), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_group_is_not_ours_once_its_leaders_pid_belongs_to_another_process() {
        let me = identify(std::process::id() as i32).expect("self");
        assert!(group_may_live(me), "its leader still runs");
        assert!(
            !group_may_live(Identity {
                pid: me.pid,
                start_time: me.start_time + 1
            }),
            "the pid went to another process"
        );
        // No process has this pid: the group may live on in the leader's descendants.
        assert!(group_may_live(Identity {
            pid: 0x7fff_fff0,
            start_time: 1
        }));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn identifies_this_process_and_rejects_a_wrong_start_time() {
        let me = std::process::id() as i32;
        let id = identify(me).expect("self");
        assert!(is_alive(id));
        assert!(!is_alive(Identity {
            pid: me,
            start_time: id.start_time + 1
        }));
    }
}
