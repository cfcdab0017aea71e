//! The `/proc` reader behind [`check_many`](super::check_many): a live process as a
//! [`ProcessView`] (its fd links, memory, `fdinfo`), the input endpoint on a shell's fd 0, and
//! one pass over the members of every shell's session. Linux only: nowhere else does a process
//! show what it is blocked in.

use std::collections::{HashMap, HashSet};

use super::judge::{InputEndpoint, ProcessView, Verdict, combine, judge};
use super::proc_text::{fdinfo_readable, parse_pipe_link};
use super::readiness::{FDINFO_MAX_BYTES, MAX_WATCHED};
use crate::process::sessions;
use crate::process::tree::{self, Identity, ProcStat};

/// The fds of a live process, read on demand, and what its `stat` said.
struct ProcFds(i32, Option<ProcStat>);

impl ProcessView for ProcFds {
    fn link(&self, fd: u64) -> Option<String> {
        let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.0)).ok()?;
        Some(link.to_string_lossy().into_owned())
    }

    fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        // Opening `mem` takes the same ptrace access as reading `syscall`, which the caller
        // already had; the process may have left the wait since (then the bytes are stale,
        // and the two checks in a row of an `exec` tell a passing state from a prompt).
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.0)).ok()?;
        let mut bytes = vec![0; len];
        mem.read_exact_at(&mut bytes, addr).ok()?;
        Some(bytes)
    }

    fn holds_more_than_once(&self, link: &str) -> Option<bool> {
        let mut seen = 0;
        for (n, entry) in std::fs::read_dir(format!("/proc/{}/fd", self.0))
            .ok()?
            .flatten()
            .enumerate()
        {
            // A program with this many fds is no prompt; do not read them all.
            if n >= MAX_WATCHED {
                return None;
            }
            if std::fs::read_link(entry.path()).is_ok_and(|l| l.as_os_str() == link) {
                seen += 1;
                if seen > 1 {
                    return Some(true);
                }
            }
        }
        Some(false)
    }

    fn in_foreground(&self) -> Option<bool> {
        self.1.map(|stat| stat.pgrp == stat.tpgid)
    }

    fn fdinfo(&self, fd: u64) -> Option<(String, bool)> {
        use std::io::Read;
        let file = std::fs::File::open(format!("/proc/{}/fdinfo/{fd}", self.0)).ok()?;
        let mut text = String::new();
        file.take(FDINFO_MAX_BYTES + 1)
            .read_to_string(&mut text)
            .ok()?;
        if text.len() as u64 <= FDINFO_MAX_BYTES {
            return Some((text, false));
        }
        // Cut: keep whole lines only.
        text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
        Some((text, true))
    }

    fn readable_pipes(&self) -> Option<Vec<String>> {
        use std::os::unix::fs::FileTypeExt;
        let mut pipes = Vec::new();
        for entry in std::fs::read_dir(format!("/proc/{}/fd", self.0))
            .ok()?
            .flatten()
        {
            let link = std::fs::read_link(entry.path()).ok()?;
            let link = link.to_string_lossy().into_owned();
            let pipe = parse_pipe_link(&link).is_some()
                || (link.starts_with('/')
                    && std::fs::metadata(entry.path()).is_ok_and(|m| m.file_type().is_fifo()));
            if !pipe {
                continue;
            }
            let info = std::fs::read_to_string(format!(
                "/proc/{}/fdinfo/{}",
                self.0,
                entry.file_name().to_string_lossy()
            ))
            .ok()?;
            if fdinfo_readable(&info)? {
                pipes.push(link);
            }
        }
        Some(pipes)
    }
}

/// Judges `pid` by rule 2 alone (`wchan` and its readable pipes), as when `syscall` is
/// closed to us: the unit tests run it where `syscall` is open.
#[cfg(test)]
pub(super) fn judge_without_syscall(pid: i32, endpoint: &InputEndpoint) -> Verdict {
    let stat = tree::read_stat(pid);
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok();
    let state = stat.map_or(b'?', |s| s.state);
    judge(state, None, wchan.as_deref(), &ProcFds(pid, stat), endpoint)
}

/// The endpoint on the shell's fd 0, if it is a pipe or a terminal.
pub(super) fn endpoint_of(shell: i32) -> Option<InputEndpoint> {
    let link = ProcFds(shell, None).link(0)?;
    if link.starts_with("/dev/pts/") {
        return Some(InputEndpoint::Terminal { path: link });
    }
    let inode = parse_pipe_link(&link)?;
    Some(InputEndpoint::Pipe { inode })
}

fn judge_pid(pid: i32, stat: &ProcStat, endpoint: &InputEndpoint) -> Verdict {
    if stat.state != b'S' {
        return Verdict::NotWaiting;
    }
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok();
    let wchan = match syscall {
        Some(_) => None,
        None => std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok(),
    };
    judge(
        stat.state,
        syscall.as_deref(),
        wchan.as_deref(),
        &ProcFds(pid, Some(*stat)),
        endpoint,
    )
}

/// See [`check_many`](super::check_many).
pub fn check_many(shells: &[Identity]) -> Vec<Option<bool>> {
    // Each shell: its endpoint and its own verdict; a shell found waiting needs no scan.
    let mut pending: HashMap<i32, (InputEndpoint, Vec<Verdict>)> = HashMap::new();
    let mut answers: Vec<Option<bool>> = vec![None; shells.len()];
    for (i, shell) in shells.iter().enumerate() {
        let Some(endpoint) = endpoint_of(shell.pid) else {
            continue;
        };
        // Read after the link, so the link was this shell's and not a recycled pid's.
        let Some(stat) =
            tree::read_stat(shell.pid).filter(|s| s.is_alive() && s.start_time == shell.start_time)
        else {
            continue;
        };
        match judge_pid(shell.pid, &stat, &endpoint) {
            Verdict::Waiting => answers[i] = Some(true),
            v => {
                pending.insert(shell.pid, (endpoint, vec![v]));
            }
        }
    }
    if !pending.is_empty() {
        scan_members(&mut pending);
    }
    for (i, shell) in shells.iter().enumerate() {
        if let Some((_, verdicts)) = pending.remove(&shell.pid) {
            answers[i] = combine(verdicts);
        }
    }
    answers
}

/// Judges every live member of a pending shell's session or group.
fn scan_members(pending: &mut HashMap<i32, (InputEndpoint, Vec<Verdict>)>) {
    let Some(snap) = sessions::snapshot() else {
        for (_, verdicts) in pending.values_mut() {
            verdicts.push(Verdict::Unknown);
        }
        return;
    };
    let leaders: HashSet<i32> = pending.keys().copied().collect();
    for (pid, leader) in snap.members(|p| leaders.contains(&p)) {
        // The state now, not as of the snapshot.
        let Some(stat) = tree::read_stat(pid).filter(ProcStat::is_alive) else {
            continue;
        };
        if let Some((endpoint, verdicts)) = pending.get_mut(&leader) {
            verdicts.push(judge_pid(pid, &stat, endpoint));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::proc_text::{SyscallState, parse_syscall};
    use super::super::readiness::readiness_wait;
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_shell_reading_its_stdin_pipe_is_found_waiting() {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read answer; echo \"got $answer\""])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let shell = tree::identify(child.id() as i32).expect("identity");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while check_many(&[shell]) != vec![Some(true)] {
            assert!(std::time::Instant::now() < deadline, "never seen waiting");
            std::thread::yield_now();
        }
        // The same pid with another start time is another process: never judged.
        let recycled = Identity {
            start_time: shell.start_time + 1,
            ..shell
        };
        assert_eq!(check_many(&[recycled, shell]), vec![None, Some(true)]);
        // Rule 2 (wchan and the readable pipes), used where `syscall` is closed to us, sees it
        // too.
        let endpoint = endpoint_of(shell.pid).expect("a pipe on fd 0");
        assert_eq!(
            judge_without_syscall(shell.pid, &endpoint),
            Verdict::Waiting
        );
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"yes\n").expect("write");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.stdout, b"got yes\n");
    }

    /// `python3 -c "import os, select, socket, sys; PROGRAM"` with its stdin and stdout on
    /// pipes, leading a process group of its own as a managed shell does, and its identity.
    #[cfg(target_os = "linux")]
    fn python(program: &str) -> (std::process::Child, Identity) {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("python3")
            .args(["-c", &format!("import os, select, socket, sys\n{program}")])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3 (installed by .ci/test-extra)");
        let shell = tree::identify(child.id() as i32).expect("identity");
        (child, shell)
    }

    /// Rule 3 on real processes: Python waiting for its stdin pipe in `select`, `poll` and
    /// `epoll` (the interest lists read from its memory and its epoll fd's fdinfo).
    #[cfg(target_os = "linux")]
    #[test]
    #[ignore = "needs python3: run .ci/test-extra"]
    fn real_readiness_waits_on_the_stdin_pipe_are_found_waiting() {
        use std::io::Write;
        let waits = [
            "select.select([sys.stdin], [], [])",
            "p = select.poll(); p.register(0, select.POLLIN); p.poll()",
            "e = select.epoll(); e.register(0, select.EPOLLIN); e.poll()",
            // Watching another pipe (its own) and the input: still the input it would take.
            "r, w = os.pipe(); select.select([r, sys.stdin], [], [])",
        ];
        for wait in waits {
            let (mut child, shell) = python(&format!("{wait}\nprint(sys.stdin.readline())"));
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while check_many(&[shell]) != vec![Some(true)] {
                assert!(std::time::Instant::now() < deadline, "{wait}: never seen");
                std::thread::yield_now();
            }
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"yes\n").expect("write");
            drop(stdin);
            let out = child.wait_with_output().expect("wait");
            assert_eq!(out.stdout, b"yes\n\n", "{wait}");
        }
    }

    /// And a readiness wait on something else is not a wait for input: Python sleeping in
    /// `select` on a pipe of its own, its stdin untouched; or a server watching its listening
    /// socket beside its stdin (as dev servers reading keyboard shortcuts do).
    #[cfg(target_os = "linux")]
    #[test]
    #[ignore = "needs python3: run .ci/test-extra"]
    fn real_readiness_waits_on_other_work_are_not_waiting() {
        let programs = [
            "r, w = os.pipe()\nprint('in', flush=True)\nselect.select([r], [], [])",
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
             print('in', flush=True)\nselect.select([s, sys.stdin], [], [])",
        ];
        for program in programs {
            let (mut child, shell) = python(program);
            let mut line = [0u8; 3];
            std::io::Read::read_exact(child.stdout.as_mut().expect("stdout"), &mut line)
                .expect("in");
            // Now it is in (or about to enter) the select: seen as a wait that is not for
            // input, never as waiting. Until its syscall shows the select, it reads as running
            // or as another syscall: also "not waiting".
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let syscall = std::fs::read_to_string(format!("/proc/{}/syscall", shell.pid))
                    .unwrap_or_default();
                let in_wait = parse_syscall(&syscall).is_some_and(|s| {
                    matches!(s, SyscallState::Blocked { nr, args } if readiness_wait(nr, &args).is_some())
                });
                assert_eq!(check_many(&[shell]), vec![Some(false)], "{program}");
                if in_wait {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "never in select");
                std::thread::yield_now();
            }
            child.kill().expect("kill");
            child.wait().expect("reap");
        }
    }
}
