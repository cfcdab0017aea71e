//! `/proc` inspection: process identities (pid and start time), processes marked with a managed
//! process's id, zombies, descriptors, resident memory, live daemons by socket, and process
//! holders by state directory.

use std::path::{Path, PathBuf};

use super::poll::eventually;

/// A process identity read from `/proc`: pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pid {
    /// Process id.
    pub pid: i32,
    /// Start time (clock ticks after boot).
    pub start: u64,
}

/// The fields of `/proc/<pid>/stat` the tests look at.
struct Stat {
    /// One letter: `R`, `S`, `Z` (zombie), `X` (dead) …
    state: u8,
    ppid: i32,
    /// Clock ticks after boot: with the pid, an identity that survives pid reuse.
    start: u64,
}

impl Stat {
    /// Reads `/proc/<pid>/stat`; `None` once the process is gone. The command name may hold
    /// spaces and parentheses, so fields are counted from the last `)`.
    fn of(pid: i32) -> Option<Stat> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut f = s[s.rfind(')')? + 1..].split_whitespace();
        let state = *f.next()?.as_bytes().first()?;
        let ppid = f.next()?.parse().ok()?;
        // starttime is field 22; state was field 3 and ppid field 4.
        let start = f.nth(17)?.parse().ok()?;
        Some(Stat { state, ppid, start })
    }

    fn live(&self) -> bool {
        self.state != b'Z' && self.state != b'X'
    }
}

/// Every pid under `/proc` now (processes may end while the caller looks at them).
fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
}

impl Pid {
    /// Parses `ready <pid> <start>` lines printed by the testbin.
    pub fn all_from_ready_lines(text: &str) -> Vec<Pid> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("ready ")?.split_whitespace();
                Some(Pid {
                    pid: w.next()?.parse().ok()?,
                    start: w.next()?.parse().ok()?,
                })
            })
            .collect()
    }

    /// The identity of a live process now.
    pub fn of(pid: i32) -> Option<Pid> {
        let stat = Stat::of(pid)?;
        stat.live().then_some(Pid {
            pid,
            start: stat.start,
        })
    }

    /// Whether this very process (same start time) is alive and not a zombie.
    pub fn alive(&self) -> bool {
        Stat::of(self.pid).is_some_and(|s| s.start == self.start && s.live())
    }
}

/// Live processes whose environment carries `YIELDSHELL_PROCESS_ID=<id>` (a managed process and
/// every descendant that kept its environment).
pub fn marked_processes(process_id: &str) -> Vec<i32> {
    let needle = format!("YIELDSHELL_PROCESS_ID={process_id}").into_bytes();
    all_pids()
        .filter(|pid| {
            Stat::of(*pid).is_some_and(|s| s.live())
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == needle.as_slice()))
        })
        .collect()
}

/// Open descriptors of a process (`/proc/<pid>/fd`).
pub fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of a process in KiB (`VmRSS`).
pub fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Peak resident memory of a process in KiB (`VmHWM`, the kernel's high-water mark).
pub fn hwm_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Zombies whose parent is `parent`.
pub fn zombies_of(parent: i32) -> Vec<i32> {
    all_pids()
        .filter(|pid| Stat::of(*pid).is_some_and(|s| s.state == b'Z' && s.ppid == parent))
        .collect()
}

/// Waits (bounded) until `parent` has no zombie children: the reaper collects them on SIGCHLD,
/// so one may be seen for an instant.
pub async fn assert_no_zombies(parent: i32) {
    eventually("no zombies of the daemon", || async {
        zombies_of(parent).is_empty().then_some(())
    })
    .await;
}

/// Live `yieldshelld` processes serving `socket` (found by their command line).
pub fn daemon_pids_for(socket: &Path) -> Vec<i32> {
    let needle = socket.display().to_string();
    all_pids()
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Pid::of(*pid).is_some()
                && args.first().is_some_and(|a| a.ends_with("yieldshelld"))
                && args.contains(&needle)
        })
        .collect()
}

/// Live process holders (`yieldshelld hold`) working in a process directory under `state`
/// (each works in its process's directory), with that directory.
pub fn holders_in(state: &Path) -> Vec<(Pid, PathBuf)> {
    let Ok(procs) = std::fs::canonicalize(state.join("procs")) else {
        return Vec::new();
    };
    all_pids()
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            if cmdline.split(|b| *b == 0).nth(1) != Some(&b"hold"[..]) {
                return None;
            }
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            cwd.starts_with(&procs).then_some((Pid::of(pid)?, cwd))
        })
        .collect()
}

/// Live launchers (`yieldshell-lnch`: the shells forked ahead by idle holders) waiting in a
/// spare directory under `state` (their working directory is there).
pub fn idle_launchers_in(state: &Path) -> Vec<i32> {
    waiting_in_spares(state, "yieldshell-lnch")
}

/// Live idle holders (`yieldshell-hold`) waiting in a spare directory under `state`.
pub fn idle_holders_in(state: &Path) -> Vec<i32> {
    waiting_in_spares(state, "yieldshell-hold")
}

/// Processes named `comm` whose working directory is under `<state>/spare`.
fn waiting_in_spares(state: &Path, comm: &str) -> Vec<i32> {
    let Ok(spare) = std::fs::canonicalize(state.join("spare")) else {
        return Vec::new();
    };
    all_pids()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm)
                && std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(&spare))
        })
        .collect()
}

/// What a process's descriptor `fd` is (`/proc/<pid>/fd/<fd>`: a path, or `pipe:[inode]`).
pub fn fd_target(pid: i32, fd: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()
}

/// What every open descriptor of a process is (see [`fd_target`]).
pub fn fd_targets(pid: i32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}
