//! Launchers (issue 13, Linux): each idle holder forks the shell's process ahead of time, which
//! waits for its spec on a socket the daemon writes to. What a user relies on: a launcher that
//! died while idle never costs an `exec`, a command that cannot start fails with the reason and
//! leaves nothing behind, and the shell looks exactly as a spawned one did (descriptors 0–2 only,
//! its own session and group, default signals, stdin as asked).

use yieldshell_proto::pb;

use crate::helper::{
    Client, TestDaemon, eventually, exec_req, fd_count, holders_in, idle_holders_in,
    idle_launchers_in, zombies_of,
};

/// Pids of the launchers waiting in `<state>/spare`.
fn idle_launchers(d: &TestDaemon) -> Vec<i32> {
    idle_launchers_in(&d.state)
}

/// The idle launchers, once the pool is full (each of its holders has handed its launcher over).
async fn ready_launchers(d: &TestDaemon) -> Vec<i32> {
    d.idle_holders_ready().await;
    let launchers = idle_launchers(d);
    assert!(launchers.len() >= 2, "{launchers:?}");
    launchers
}

/// SIGKILLs each of `pids` (one already gone is fine).
fn kill9(pids: impl IntoIterator<Item = i32>) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Runs `command` and asserts it ran and exited 0 (the exec's error says why not).
async fn exits_zero(c: &Client, command: &str) {
    let r = c.exec(command).await;
    assert_eq!(
        r.process.expect("process").exit_code,
        Some(0),
        "{}",
        r.error
    );
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
    let launchers = ready_launchers(&d).await;
    kill9(launchers.iter().copied());
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
    let fds = eventually("the shell to exec sleep and sleep", || async {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim_end() == "sleep").then_some(())?;
        // Past its start-up, which opens (and closes) locale files: a listing taken then would
        // show them as descriptor 3. Asleep in nanosleep, it holds only what it was given.
        // (`wchan` is "0" on a kernel that does not name it: then, asleep at all.)
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok()?;
        let asleep = wchan.contains("nanosleep")
            || (wchan.trim() == "0" && stat_fields(pid).first().is_some_and(|s| s == "S"));
        asleep.then_some(())?;
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

#[tokio::test]
async fn many_execs_through_launchers_leak_no_descriptor_and_leave_no_zombie() {
    let d = TestDaemon::start().await;
    let c = d.session();
    c.exec("true").await;
    d.idle_holders_ready().await;
    let daemon = d.pid();
    let base = fd_count(daemon);
    // Every way an exec ends on the launcher path: run, cannot run, idle launcher dead, and a
    // terminal (whose holder ends its launcher and spawns the shell itself).
    let too_long = format!("true {}", "x".repeat(200 * 1024));
    for n in 0..200 {
        match n % 50 {
            7 => {
                let r = c.exec(&too_long).await;
                assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{r:?}");
            }
            13 => {
                kill9(idle_launchers(&d));
                exits_zero(&c, "true").await;
            }
            21 => {
                let r = c
                    .exec_with(pb::ExecRequest {
                        tty: true,
                        yield_ms: Some(10_000),
                        ..exec_req("true")
                    })
                    .await;
                assert_eq!(
                    r.process.expect("process").exit_code,
                    Some(0),
                    "{}",
                    r.error
                );
            }
            _ => {
                exits_zero(&c, "true").await;
            }
        }
    }
    d.idle_holders_ready().await;
    eventually(
        "the daemon back to its descriptors, no zombie, no holder of an ended process",
        || async {
            let fds = fd_count(daemon);
            (fds <= base && zombies_of(daemon).is_empty() && holders_in(&d.state).is_empty())
                .then_some(())
        },
    )
    .await;
    // A running process's holder has no zombie either: its launcher was the shell, and a
    // terminal's holder reaped the launcher it ended.
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            yield_ms: Some(0),
            ..exec_req("sleep 60")
        })
        .await;
    let p = r.process.expect("process");
    let holders = eventually("the terminal process's holder", || async {
        let h = holders_in(&d.state);
        (!h.is_empty()).then_some(h)
    })
    .await;
    for (holder, _) in holders {
        assert!(
            zombies_of(holder.pid).is_empty(),
            "zombies under the holder"
        );
    }
    c.stop(&p.process_id, "KILL", 0).await.expect("stop");
    c.wait_exit(&p.process_id).await;
}

#[tokio::test]
async fn a_burst_with_huge_specs_survives_a_daemon_crash_with_every_exit_code() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    // Concurrent execs empty the pool (the later ones get holders started on the spot, with no
    // spare directory and no launcher); every spec is over 64 KiB (a 100 KiB variable), so each
    // is written on the blocking path.
    let big = "b".repeat(100 * 1024);
    let starts: Vec<_> = (0..8)
        .map(|n| {
            let req = pb::ExecRequest {
                env: vec![pb::EnvVar {
                    name: b"BIG".to_vec(),
                    value: big.clone().into_bytes(),
                }],
                yield_ms: Some(0),
                ..exec_req(&format!("echo ${{#BIG}}; read line; exit {}", 10 + n))
            };
            let c = d.session();
            tokio::spawn(async move { c.exec_with(req).await })
        })
        .collect();
    let mut started = Vec::new();
    for s in starts {
        started.push(s.await.expect("exec task"));
    }
    let mut ids = Vec::new();
    for r in &started {
        assert!(r.error.is_empty(), "{r:?}");
        ids.push(r.process.clone().expect("process"));
    }
    for p in &ids {
        eventually("the variable's length printed", || async {
            let (out, _) = c.read_all(&p.process_id, 1 << 20).await;
            (out == b"102400\n").then_some(())
        })
        .await;
    }
    d.kill9();
    d.spawn().await;
    let c = d.session();
    let after = c.list(pb::Scope::All, true).await;
    for (n, p) in ids.iter().enumerate() {
        let now = after
            .iter()
            .find(|q| q.process_id == p.process_id)
            .expect("listed after the crash");
        assert_eq!(now.status, pb::ProcessStatus::Running as i32, "{now:?}");
        assert_eq!(now.pid, p.pid, "the same process");
        c.write(&p.process_id, b"go\n", true).await.expect("write");
        let w = c.wait_exit(&p.process_id).await;
        assert_eq!(w.process.expect("process").exit_code, Some(10 + n as i32));
    }
}

#[tokio::test]
async fn a_cwd_removed_after_validation_fails_the_start_and_leaves_nothing_behind() {
    // The exec pauses (fault injection) after its checks and its process directory, before the
    // launcher gets the spec: the directory goes meanwhile.
    let d = TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", "spawn_delay:CWDGONE")]).await;
    d.idle_holders_ready().await;
    let cwd = tempfile::tempdir().expect("cwd");
    let exec = {
        let c = d.session();
        let req = pb::ExecRequest {
            cwd: Some(cwd.path().as_os_str().as_encoded_bytes().to_vec()),
            yield_ms: Some(10_000),
            ..exec_req("echo CWDGONE")
        };
        tokio::spawn(async move { c.exec_with(req).await })
    };
    eventually("the exec to create its process directory", || async {
        std::fs::read_dir(d.state.join("procs"))
            .ok()?
            .next()
            .is_some()
            .then_some(())
    })
    .await;
    std::fs::remove_dir(cwd.path()).expect("remove the cwd");
    let r = exec.await.expect("exec task");
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{r:?}");
    assert!(r.error.contains("No such file or directory"), "{}", r.error);
    eventually("nothing left of the failed start", || async {
        let left = std::fs::read_dir(d.state.join("procs"))
            .map(|r| r.count())
            .unwrap_or(0);
        (left == 0 && holders_in(&d.state).is_empty()).then_some(())
    })
    .await;
    let c = d.session();
    assert!(c.list(pb::Scope::All, true).await.is_empty());
}

#[tokio::test]
async fn an_idle_holder_killed_leaves_no_launcher_behind_and_costs_no_exec() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let launchers = ready_launchers(&d).await;
    kill9(idle_holders_in(&d.state));
    exits_zero(&c, "echo fine").await;
    // The launchers of the killed holders waited on the daemon's end of their sockets: once the
    // daemon lets those go they exit, and whoever inherited them reaps them.
    eventually("the orphaned launchers to be gone", || async {
        launchers
            .iter()
            .all(|pid| {
                // Gone, or its pid reused; a zombie still shows its name.
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map_or(true, |s| !s.contains("(yieldshell-lnch)"))
            })
            .then_some(())
    })
    .await;
}

/// A daemon that dies between giving the spec to the holder and to its launcher (simulated: the
/// launcher's socket is closed unwritten) leaves a process that never ran: it ends 127, and its
/// stderr, kept by the holder for whoever reads it, says so.
#[tokio::test]
async fn a_launcher_left_without_its_spec_says_the_command_did_not_run() {
    let d =
        TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", "launch_abort:NEVER_RUNS")]).await;
    let c = d.session();
    d.idle_holders_ready().await;
    let witness = d.state.join("ran");
    let r = c
        .exec(&format!("touch '{}' # NEVER_RUNS", witness.display()))
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.process.expect("process").exit_code, Some(127));
    let stderr = String::from_utf8(r.output.expect("output").stderr).expect("utf-8");
    assert!(stderr.contains("it did not run"), "{stderr:?}");
    assert!(!witness.exists(), "the command ran");
    // Other commands run as ever.
    exits_zero(&c, "true").await;
}
