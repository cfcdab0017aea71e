//! Finding, identifying and signalling a managed process's whole tree.
//!
//! Containment (docs/RELIABILITY.md, containment matrix), as implemented:
//! - Every managed command starts in a new session, so the shell and everything it forks share a
//!   process group and a session id equal to the shell's pid: `killpg` reaches them all.
//! - Linux: the holder of a process is the child subreaper of its tree, so every live descendant
//!   of the holder is a member, whatever group or session it moved to and whatever it did to its
//!   environment: a scan follows each process's parent links (`/proc/<pid>/stat`) up to the
//!   holder. A non-dumpable process (`ssh-agent`), whose environment an unprivileged daemon
//!   cannot read, is found so too. The holder's own list of children is the last word on whether
//!   anything is left (a fork-and-exit chain always has a live child of the holder or under one).
//! - Descendants that leave with `setsid`/`setpgid` while no holder is alive to be their
//!   ancestor (it died; recovery after a crash) are found by the marker every managed process
//!   inherits in its environment (`YIELDSHELL_PROCESS_ID=<id>`), read for processes of our uid
//!   from `/proc/<pid>/environ` (Linux) or `sysctl(KERN_PROCARGS2)` (macOS, see
//!   `process/darwin.rs`). Without a live holder, a process that scrubs its environment *and*
//!   leaves the session escapes; that is documented in `docs/RELIABILITY.md`.
//! - A kill freezes the tree first ([`freeze_tree`]): SIGSTOP to every member (and to every
//!   process group a member leads), rescans until a scan finds nobody new, then SIGKILL. A
//!   stopped process cannot fork, so a fork bomb or a fork-and-exit chain cannot outrun it.
//! - Every pid is paired with its start time (Linux: `/proc/<pid>/stat` field 22; macOS:
//!   `proc_pidinfo`) and re-checked before it is signalled, so a recycled pid is never hit.
//! - Linux only: the daemon and each holder are child subreapers, so an orphaned descendant is
//!   re-parented to them and a look for escapees can skip the scan when nothing was adopted.
//!   macOS has no subreaper (orphans go to launchd): that look always scans.
//!
//! On other Unix systems only the process group is reached (no process table is read).
//!
//! The actor reaches all of this through the [`ProcessTree`] trait ([`SystemTree`] here; a fake in
//! the actor's tests), and runs the `/proc` scans on the blocking pool ([`off_runtime`]).

pub use nix::sys::signal::Signal;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;

pub use super::tree_ops::{
    Identity, KILL_GIVE_UP, ProcessTree, freeze_tree, freeze_with, off_runtime,
};
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

/// What attributes a live process to the trees of one scan.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    /// Process groups (and sessions) led by the trees' shells, whose groups may still be theirs
    /// ([`group_may_live`]).
    pub groups: std::collections::HashSet<i32>,
    /// Pids of the trees' live holders: every live descendant of one is a member.
    pub holders: std::collections::HashSet<i32>,
    /// `MARKER_VAR=<id>` entries: a process of our uid whose environment holds one is a member.
    pub markers: std::collections::HashSet<Vec<u8>>,
}

impl Roots {
    /// The roots of one tree: the group `leader_pgid` (if any), the holder (if alive), the
    /// marker of `process_id`.
    pub fn of(leader_pgid: Option<i32>, holder: Option<i32>, process_id: &str) -> Roots {
        Roots {
            groups: leader_pgid.into_iter().collect(),
            holders: holder.into_iter().collect(),
            markers: std::collections::HashSet::from([marker_entry(process_id)]),
        }
    }
}

/// Every live process of the tree: members of the process group or session `leader_pgid`, and
/// processes of our uid carrying the marker of `process_id`.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn find_tree(leader_pgid: Option<i32>, process_id: &str) -> Vec<Identity> {
    find_trees(&Roots::of(leader_pgid, None, process_id))
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

/// One pass over the process table for many trees at once: live processes in any of the
/// `roots`' groups (as process group or session), under any of their live holders, or of our uid
/// carrying any of their markers. A daemon stopping everything at shutdown scans once per round
/// instead of once per process.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn find_trees(roots: &Roots) -> Vec<Identity> {
    scan(roots).into_iter().map(|(id, _)| id).collect()
}

/// The whole tree split in two: members of the process group `leader_pgid` (which `killpg`
/// reaches), and the rest of the tree (`roots` without the group's own membership). A stop
/// signals the group first (one syscall, no waiting), then the outsiders after the scan, and
/// remembers both so nobody gets the same signal twice.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn split_scan(roots: &Roots, leader_pgid: i32) -> (Vec<Identity>, Vec<Identity>) {
    let (inside, outside): (Vec<_>, Vec<_>) = scan(roots)
        .into_iter()
        .partition(|(_, pgrp)| *pgrp == leader_pgid);
    (
        inside.into_iter().map(|(id, _)| id).collect(),
        outside.into_iter().map(|(id, _)| id).collect(),
    )
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

/// How far up its parent links a process is followed to find a holder (a chain deeper than
/// this is not a tree anyone runs; pid reuse between two reads cannot make the walk endless).
#[cfg(any(target_os = "linux", target_os = "macos"))]
const MAX_DEPTH: usize = 4096;

/// One pass over the process table: the members of `roots`, each with its process group.
///
/// Every live process's `stat` is read once (parent, group, session, start time). A process is a
/// member when its group or session is one of the roots' groups, when its parent links lead to
/// one of the live holders (the holder is the tree's child subreaper: nothing of its tree can get
/// out from under it while it lives), or, read last and only for processes not already members,
/// when its environment holds a marker (our uid only; a non-dumpable process's environment is
/// unreadable to anyone but root, which the holder's ancestry makes up for).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn scan(roots: &Roots) -> Vec<(Identity, i32)> {
    use std::collections::HashMap;
    let uid = nix::unistd::getuid().as_raw();
    let me = std::process::id() as i32;
    let Some(pids) = all_pids() else {
        return Vec::new();
    };
    let mut live = Vec::with_capacity(pids.len());
    for pid in pids {
        if pid == me {
            continue;
        }
        if let Some(stat) = read_stat(pid).filter(ProcStat::is_alive) {
            live.push((pid, stat));
        }
    }
    let parents: HashMap<i32, i32> = if roots.holders.is_empty() {
        HashMap::new()
    } else {
        live.iter().map(|(pid, s)| (*pid, s.ppid)).collect()
    };
    let mut under_holder: HashMap<i32, bool> = HashMap::new();
    let mut found = Vec::new();
    for (pid, stat) in &live {
        let member = roots.groups.contains(&stat.pgrp)
            || roots.groups.contains(&stat.session)
            || descends_from_holder(*pid, &roots.holders, &parents, &mut under_holder)
            || (!roots.markers.is_empty()
                && environ_if_owned(*pid, uid)
                    .is_some_and(|env| env.split(|b| *b == 0).any(|e| roots.markers.contains(e))));
        if member {
            let id = Identity {
                pid: *pid,
                start_time: stat.start_time,
            };
            found.push((id, stat.pgrp));
        }
    }
    found
}

/// Whether `pid`'s parent links (`parents`, from one pass) lead to one of `holders`. `memo`
/// keeps the answer for every process on the way, so a pass costs one step per process.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn descends_from_holder(
    pid: i32,
    holders: &std::collections::HashSet<i32>,
    parents: &std::collections::HashMap<i32, i32>,
    memo: &mut std::collections::HashMap<i32, bool>,
) -> bool {
    if holders.is_empty() || holders.contains(&pid) {
        return false;
    }
    let mut path = Vec::new();
    let mut at = pid;
    let answer = loop {
        if let Some(known) = memo.get(&at) {
            break *known;
        }
        if path.len() >= MAX_DEPTH {
            break false;
        }
        path.push(at);
        match parents.get(&at) {
            Some(parent) if holders.contains(parent) => break true,
            Some(parent) if *parent > 1 && !holders.contains(&at) => at = *parent,
            _ => break false,
        }
    };
    for p in path {
        memo.insert(p, answer);
    }
    answer
}

/// Without a process table: the live groups among the roots' groups (each is signalled as a
/// whole anyway).
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn find_trees(roots: &Roots) -> Vec<Identity> {
    roots
        .groups
        .iter()
        .filter(|g| killpg(Pid::from_raw(**g), None).is_ok())
        .map(|g| Identity {
            pid: *g,
            start_time: 0,
        })
        .collect()
}

/// Stops many trees together: SIGTERM (and SIGCONT) to every group and member, SIGKILL to
/// whatever is left after `grace` (frozen first, [`freeze_with`]), until nothing is left
/// (bounded). Blocking. This is the daemon's shutdown (one `/proc` scan per round for all trees,
/// where per-process stops would each scan `/proc` and, for a thousand processes, outlast any
/// shutdown budget), and with no grace the emergency kill of a tree whose actor is gone (its
/// supervisor panicked).
///
/// `leaders` are the shells whose groups (and sessions) are the trees; a group whose leader's pid
/// went to another process is left alone (see [`group_may_live`]), checked before every signal.
/// `holders` are the trees' live holders: every descendant of one is a member, and each is sent
/// SIGCONT every round, since a holder its own command stopped (`kill -STOP $PPID`) reaps
/// nothing and reports nothing until it runs again.
pub fn stop_all(
    leaders: &[Identity],
    holders: &[Identity],
    process_ids: &[String],
    grace: std::time::Duration,
) {
    use std::time::{Duration, Instant};
    let markers: std::collections::HashSet<Vec<u8>> =
        process_ids.iter().map(|id| marker_entry(id)).collect();
    let wake_holders = || {
        for h in holders {
            if is_alive(*h) {
                let _ = kill(Pid::from_raw(h.pid), Signal::SIGCONT);
            }
        }
    };
    // Which groups are still the trees' is decided with each scan (a `/proc` read per leader),
    // and signals go out right after one; the 5 ms polls in between only ask whether any is left.
    let scan = || {
        wake_holders();
        let roots = Roots {
            groups: live_groups(leaders),
            holders: holders
                .iter()
                .filter(|h| is_alive(**h))
                .map(|h| h.pid)
                .collect(),
            markers: markers.clone(),
        };
        let mut members = find_trees(&roots);
        for h in holders {
            for child in live_children(*h).unwrap_or_default() {
                if !members.contains(&child) {
                    members.push(child);
                }
            }
        }
        (roots.groups, members)
    };
    let signal_all = |groups: &std::collections::HashSet<i32>, members: &[Identity], sig| {
        for g in groups {
            let _ = killpg(Pid::from_raw(*g), sig);
        }
        signal_tree(None, members, sig);
    };
    // Freezes every tree at once, then kills: nothing forks away between the scan and the kill.
    let kill_all = || {
        let frozen = freeze_with(
            || scan().1,
            |members| signal_all(&live_groups(leaders), members, Signal::SIGSTOP),
        );
        let groups = live_groups(leaders);
        signal_all(&groups, &frozen, Signal::SIGKILL);
        (groups, frozen)
    };
    let (mut groups, mut members) = scan();
    if grace.is_zero() {
        (groups, members) = kill_all();
    } else {
        signal_all(&groups, &members, Signal::SIGTERM);
        signal_all(&groups, &members, Signal::SIGCONT);
    }
    let mut escalated = grace.is_zero();
    let mut deadline = Instant::now() + if escalated { KILL_GIVE_UP } else { grace };
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
            deadline = now + KILL_GIVE_UP;
            (groups, members) = kill_all();
        } else if escalated && now >= deadline {
            tracing::error!(
                left = members.len(),
                "processes survived SIGKILL at shutdown"
            );
            return;
        } else if now >= next_scan {
            next_scan = now + Duration::from_millis(200);
            if escalated {
                (groups, members) = kill_all();
            } else {
                (groups, members) = scan();
                signal_all(&groups, &members, Signal::SIGTERM);
            }
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
///
/// SIGSTOP, SIGKILL and SIGCONT (which mean the same however often they come) also go to the
/// process group each member leads, if any: a process whose pid is a group's id created that
/// group, and every process in it is its descendant or joined from its session, so the kernel
/// delivers the signal to children forked meanwhile too (a fork racing a group signal is
/// restarted, its child included). For other members `killpg` only finds no such group. They
/// also go to the group each member is in (see the comment there).
pub fn signal_tree(leader_pgid: Option<i32>, members: &[Identity], signal: Signal) {
    if let Some(g) = leader_pgid {
        let _ = killpg(Pid::from_raw(g), signal);
    }
    let to_groups = matches!(signal, Signal::SIGSTOP | Signal::SIGKILL | Signal::SIGCONT);
    let ours = to_groups.then(own_group_and_session);
    for m in members {
        if !is_alive(*m) {
            continue;
        }
        let _ = kill(Pid::from_raw(m.pid), signal);
        if let Some((own_group, own_session)) = ours {
            if Some(m.pid) != leader_pgid {
                let _ = killpg(Pid::from_raw(m.pid), signal);
            }
            // The member's own group too, when another process leads it: a fork-and-exit
            // chain's processes share the group of one long gone, and a group signal stops
            // (or kills) the one alive now and the child it is forking, where a signal to a
            // pid read a moment ago finds that pid gone. Never the daemon's own group or any
            // group of its session (a marked process could have joined one).
            if let Some(stat) = read_stat(m.pid).filter(|s| s.start_time == m.start_time)
                && stat.pgrp > 1
                && stat.pgrp != m.pid
                && Some(stat.pgrp) != leader_pgid
                && stat.pgrp != own_group
                && stat.session != own_session
            {
                let _ = killpg(Pid::from_raw(stat.pgrp), signal);
            }
        }
    }
}

/// The daemon's own process group and session, which a tree's signals never reach.
fn own_group_and_session() -> (i32, i32) {
    (
        nix::unistd::getpgrp().as_raw(),
        nix::unistd::getsid(None).map_or(0, |s| s.as_raw()),
    )
}

/// How managed trees are contained on this platform, for `Status` and the docs.
pub fn containment_name() -> &'static str {
    if cfg!(target_os = "linux") {
        "session+process-group+holder-descendants+freeze+marker-scan"
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

/// How often [`live_children`] reads the holder's list at most before it settles for what it saw.
#[cfg(target_os = "linux")]
const CHILD_LIST_READS: usize = 1000;

/// The live children of `holder` (Linux: `/proc/<pid>/task/<pid>/children`; the holder has one
/// thread). The holder is its tree's subreaper, so the tree is gone exactly when this is empty:
/// a fork-and-exit chain that a scan of the whole table can miss (its one process has always
/// just gone) always has a process here, or under one. `None` when it cannot tell: the holder
/// is gone, or `/proc` lacks the list (and on other systems).
///
/// A list whose children are all dead is read again: a child that was alive when the list was
/// read and died before it was looked at has handed its own children to the holder meanwhile
/// (the kernel re-parents them before the dying process turns zombie), and they are not in the
/// list read before. Empty is said only of an empty list, or of one whose every child was
/// already in a previous list and found dead there; otherwise (the holder keeps gaining
/// children, [`CHILD_LIST_READS`] times) the last list's dead children are returned, which a
/// caller takes for "not gone yet" and looks again.
#[cfg(target_os = "linux")]
fn live_children(holder: Identity) -> Option<Vec<Identity>> {
    let path = format!("/proc/{0}/task/{0}/children", holder.pid);
    let mut dead_before: Vec<i32> = Vec::new();
    let mut last = Vec::new();
    for _ in 0..CHILD_LIST_READS {
        if !is_alive(holder) {
            return None;
        }
        let pids: Vec<i32> = std::fs::read_to_string(&path)
            .ok()?
            .split_ascii_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect();
        let live: Vec<Identity> = pids.iter().copied().filter_map(identify).collect();
        if !live.is_empty() {
            return Some(live);
        }
        if pids.iter().all(|p| dead_before.contains(p)) {
            return Some(Vec::new());
        }
        last = pids
            .iter()
            .map(|p| Identity {
                pid: *p,
                start_time: 0,
            })
            .collect();
        dead_before.extend(pids);
    }
    Some(last)
}

/// Every live descendant of `holder`, walking the kernel's lists of children down from it
/// (`/proc/<pid>/task/<tid>/children` of every thread: a thread's children are listed under it).
/// The cost is the tree's size, not the machine's: a stop on a machine of ten thousand processes
/// does not read ten thousand `stat` files per look. `None` when a list cannot be read (the
/// kernel lacks CONFIG_PROC_CHILDREN, or the holder is gone): the caller scans instead. A process
/// that exits during the walk takes its children's listing with it; they are re-parented to the
/// holder, so the next walk finds them.
#[cfg(target_os = "linux")]
fn holder_descendants(holder: Identity) -> Option<Vec<Identity>> {
    let mut found = Vec::new();
    let mut queue = vec![live_children(holder)?];
    let mut seen = std::collections::HashSet::new();
    while let Some(level) = queue.pop() {
        for child in level {
            if found.len() >= 1 << 20 || !seen.insert(child.pid) {
                continue;
            }
            found.push(child);
            let mut below = Vec::new();
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", child.pid)) {
                for task in tasks.flatten() {
                    if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                        below.extend(
                            list.split_ascii_whitespace()
                                .filter_map(|p| p.parse::<i32>().ok())
                                .filter_map(identify),
                        );
                    }
                }
            }
            queue.push(below);
        }
    }
    Some(found)
}

/// The holder's children cannot be listed here: every look scans.
#[cfg(not(target_os = "linux"))]
fn live_children(_holder: Identity) -> Option<Vec<Identity>> {
    None
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

    /// The holder, while it runs.
    fn live_holder(&self) -> Option<Identity> {
        self.held.map(|(h, _)| h).filter(|h| is_alive(*h))
    }

    /// What a scan of this tree looks for: the group `pgid` (when given and still ours), the
    /// live holder's descendants, the marker.
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    fn roots(&self, pgid: Option<i32>, process_id: &str) -> Roots {
        Roots::of(
            pgid.filter(|g| self.group_is_ours(*g)),
            self.live_holder().map(|h| h.pid),
            process_id,
        )
    }

    /// `found` and the holder's live children not in it (see [`live_children`]).
    fn with_holder_children(&self, mut found: Vec<Identity>) -> Vec<Identity> {
        if let Some((holder, _)) = self.held {
            for child in live_children(holder).unwrap_or_default() {
                if !found.contains(&child) {
                    found.push(child);
                }
            }
        }
        found
    }
}

impl ProcessTree for SystemTree {
    fn signal_group(&self, pgid: i32, signal: Option<Signal>) -> bool {
        self.group_is_ours(pgid) && killpg(Pid::from_raw(pgid), signal).is_ok()
    }

    fn signal_members(&self, members: &[Identity], signal: Signal) {
        signal_tree(None, members, signal);
    }

    fn pause(&self, pgid: i32, members: &[Identity]) {
        if self.group_is_ours(pgid) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGSTOP);
        }
        signal_tree(None, members, Signal::SIGSTOP);
    }

    fn wake_holder(&self) {
        if let Some(holder) = self.live_holder() {
            let _ = kill(Pid::from_raw(holder.pid), Signal::SIGCONT);
        }
    }

    fn is_alive(&self, id: Identity) -> bool {
        is_alive(id)
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    fn find_tree(&self, pgid: i32, process_id: &str) -> Vec<Identity> {
        // With the holder alive, its descendants are the whole tree (it is the subreaper), and
        // walking down from it is much cheaper than reading every process of the machine.
        #[cfg(target_os = "linux")]
        if let Some(found) = self.live_holder().and_then(holder_descendants) {
            return found;
        }
        self.with_holder_children(find_trees(&self.roots(Some(pgid), process_id)))
    }

    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    fn find_tree(&self, pgid: i32, process_id: &str) -> Vec<Identity> {
        find_tree(self.group_is_ours(pgid).then_some(pgid), process_id)
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    fn split_tree(&self, pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
        #[cfg(target_os = "linux")]
        if let Some(found) = self.live_holder().and_then(holder_descendants) {
            let ours = self.group_is_ours(pgid);
            return found
                .into_iter()
                .partition(|m| ours && read_stat(m.pid).is_some_and(|s| s.pgrp == pgid));
        }
        let (inside, outside) = split_scan(&self.roots(Some(pgid), process_id), pgid);
        let outside = self
            .with_holder_children(outside)
            .into_iter()
            .filter(|m| !inside.contains(m))
            .collect();
        (inside, outside)
    }

    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    fn split_tree(&self, pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
        (self.find_tree(pgid, process_id), Vec::new())
    }

    fn known_ended(&self) -> bool {
        self.left_alone
            .as_ref()
            .is_some_and(|a| a.load(std::sync::atomic::Ordering::Acquire))
    }

    fn find_escapees(&self, process_id: &str) -> Vec<Identity> {
        // A live holder is the tree's subreaper: with no live child it has nothing of the tree
        // left (whatever left the group is below it), and no scan is needed. One that was
        // killed left its orphans to the daemon (when it started the holder), which the check
        // below looks at, by marker.
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        if let Some(holder) = self.live_holder() {
            return match live_children(holder) {
                Some(children) if children.is_empty() => Vec::new(),
                #[cfg(target_os = "linux")]
                Some(_) => holder_descendants(holder).unwrap_or_else(|| {
                    self.with_holder_children(find_trees(&self.roots(None, process_id)))
                }),
                _ => self.with_holder_children(find_trees(&self.roots(None, process_id))),
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
