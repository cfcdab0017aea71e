//! Launchers (issue 13, Linux): each idle holder forks the shell's process ahead of time, which
//! waits for its spec on a socket the daemon writes to. What a user relies on: a launcher that
//! died while idle never costs an `exec`, a command that cannot start fails with the reason and
//! leaves nothing behind, and the shell looks exactly as a spawned one did (descriptors 0–2 only,
//! its own session and group, default signals, stdin as asked).

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually, exec_req, holders_in};

/// Pids of the launchers waiting in `<state>/spare` (their working directory is there).
fn idle_launchers(d: &TestDaemon) -> Vec<i32> {
    let Ok(spare) = std::fs::canonicalize(d.state.join("spare")) else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read_link(format!("/proc/{pid}/cwd"))
                        .is_ok_and(|cwd| cwd.starts_with(&spare))
                        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|c| c.trim_end() == "yieldshell-lnch")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Fields of `/proc/<pid>/stat` after the command name: state is index 0, ppid 1, pgrp 2,
/// session 3.
fn stat_fields(pid: i32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    rest.split_whitespace().map(str::to_string).collect()
}

/// A `/proc/<pid>/status` line's value.
fn status_line(pid: i32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_launcher_killed_while_idle_is_never_handed_to_an_exec() {
    let d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    let launchers = eventually("the idle launchers", || async {
        let l = idle_launchers(&d);
        (l.len() >= 2).then_some(l)
    })
    .await;
    for pid in &launchers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    // Every idle holder lost its launcher: the execs must still run their commands, at once.
    for n in 0..3 {
        let started = std::time::Instant::now();
        let r = c.exec(&format!("echo run{n}")).await;
        assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
        let p = r.process.expect("process");
        assert_eq!(p.exit_code, Some(0), "{p:?}");
        let out = r.output.expect("output");
        assert_eq!(out.stdout, format!("run{n}\n").into_bytes());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "an exec took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_command_that_cannot_start_fails_with_the_reason_and_leaves_nothing_behind() {
    let d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    // One argument over the kernel's 128 KiB limit for a single argument (MAX_ARG_STRLEN):
    // execve fails with E2BIG. The spec is over 64 KiB too (the blocking write path).
    let command = format!("true {}", "x".repeat(200 * 1024));
    let r = c.exec(&command).await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{r:?}");
    assert!(r.error.contains("Argument list too long"), "{}", r.error);
    // Nothing runs for it, no process directory is left, and no process is listed.
    eventually("no holder left in the process directories", || async {
        holders_in(&d.state).is_empty().then_some(())
    })
    .await;
    // The directory is removed by the daemon's record writer, a moment after the answer.
    eventually("the failed process's directory to be removed", || async {
        let left: Vec<_> = std::fs::read_dir(d.state.join("procs"))
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        left.is_empty().then_some(())
    })
    .await;
    assert!(c.list(pb::Scope::All, true).await.is_empty());
    // The daemon's next exec is unaffected.
    let r = c.exec("echo fine").await;
    assert_eq!(r.process.expect("process").exit_code, Some(0));
}

#[tokio::test]
async fn a_launched_shell_keeps_only_its_stdio_leads_its_session_and_has_default_signals() {
    let d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    // `exec` keeps the shell's pid, descriptors and signal state for the sleep.
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(0),
            ..exec_req("exec sleep 60")
        })
        .await;
    let p = r.process.expect("process");
    let pid = p.pid.expect("pid") as i32;
    let fds = eventually("the shell to exec sleep", || async {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim_end() == "sleep").then_some(())?;
        let mut fds: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort();
        Some(fds)
    })
    .await;
    assert_eq!(fds, vec![0, 1, 2], "descriptors of the shell");
    let stat = stat_fields(pid);
    assert_eq!(stat[2], pid.to_string(), "process group");
    assert_eq!(stat[3], pid.to_string(), "session");
    assert_eq!(status_line(pid, "SigBlk:"), "0000000000000000");
    assert_eq!(status_line(pid, "SigIgn:"), "0000000000000000");
    c.stop(&p.process_id, "TERM", 1000).await.expect("stop");
    c.wait_exit(&p.process_id).await;
}

#[tokio::test]
async fn stdin_given_to_a_launched_shell_and_written_later_reaches_it() {
    let d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(b"given\n".to_vec()),
            close_stdin: true,
            ..exec_req("cat")
        })
        .await;
    let p = r.process.expect("process");
    let w = c.wait_exit(&p.process_id).await;
    assert_eq!(w.process.expect("process").exit_code, Some(0));
    let (out, _) = c.read_all(&p.process_id, 1 << 20).await;
    assert_eq!(out, b"given\n");
    let id = c.spawn_bg("cat").await;
    c.write(&id, b"one\n", false).await.expect("write");
    c.write(&id, b"two\n", true).await.expect("write eof");
    let w = c.wait_exit(&id).await;
    assert_eq!(w.process.expect("process").exit_code, Some(0));
    let (out, _) = c.read_all(&id, 1 << 20).await;
    assert_eq!(out, b"one\ntwo\n");
}
