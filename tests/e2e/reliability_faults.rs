//! docs/RELIABILITY.md, the daemon side: shutdown (F2), crash churn and corrupt records (F7), what
//! sits at the socket path (F8), racing daemons and the lock (F9), many short processes (F14),
//! a recycled pid in a record (F18).

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use yieldshell_proto::pb;

use crate::helper::{
    Pid, TIMEOUT, TestDaemon, assert_no_zombies, bin, eventually, eventually_blocking, fd_count,
    marked_processes, size, testbin,
};

/// Reads `state/procs/<id>/record.json`.
fn record(d: &TestDaemon, id: &str) -> serde_json::Value {
    let raw = std::fs::read(d.state.join("procs").join(id).join("record.json")).expect("record");
    serde_json::from_slice(&raw).expect("record parses")
}

// Multi-threaded: the test's own connection must keep answering the daemon's HTTP/2 goodbye while
// `terminate` blocks, as a live client would (an unresponsive one costs at most 2 s more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_sigterm_sends_term_then_kill_to_every_tree_and_exits_zero_with_socket_and_lock_freed() {
    const GRACE: Duration = Duration::from_millis(1000);
    let mut d = TestDaemon::start_configured(&[], "shutdown_grace_ms = 1000\n").await;
    let c = d.session();
    let tb = testbin();
    let trap = d.dir.path().join("trap.log");
    let ids = [
        c.spawn_bg(&format!("exec {tb} ready-sleep 600")).await,
        c.spawn_bg(&format!("{tb} ready-sleep 600 & {tb} setsid 600 & wait"))
            .await,
        c.spawn_bg(&format!("exec {tb} trap-term {} 600", trap.display()))
            .await,
    ];
    let mut pids = Vec::new();
    for (id, n) in ids.iter().zip([1, 2, 1]) {
        pids.extend(c.ready_pids(id, n).await);
    }
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| d.terminate()).expect("exit status");
    let took = started.elapsed();
    println!("F2: the daemon exited {status:?} {took:?} after SIGTERM (grace {GRACE:?})");
    assert!(status.success(), "{status:?}");
    // The trapping process held out for the whole grace, then was killed.
    assert!(took >= GRACE, "SIGKILL came before the grace ran out");
    assert!(
        took < GRACE + Duration::from_secs(3),
        "shutdown took {took:?}"
    );
    // SIGTERM first (repeated by the stop's rescans), never anything it could catch after.
    let trapped = std::fs::read_to_string(&trap).expect("trap log");
    assert!(
        trapped.starts_with("TERM\n") && trapped.lines().all(|l| l == "TERM"),
        "{trapped:?}"
    );
    for p in &pids {
        assert!(!p.alive(), "{p:?} survived the shutdown");
    }
    for id in &ids {
        assert!(marked_processes(id).is_empty(), "{id} left processes");
        let r = record(&d, id);
        assert_eq!(r["status"], "stopped", "{r}");
        assert_eq!(r["ended_by"], "daemon_shutdown", "{r}");
    }
    assert!(!d.socket.exists(), "socket not removed");
    assert!(d.lock_is_free(), "the instance lock is still held");
}

/// A small deterministic generator (xorshift64), so a failing run can be replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Records of the state dir: every `record.json` must parse (atomic writes leave no torn file)
/// and nothing may have been moved aside.
fn check_records(d: &TestDaemon) -> Vec<String> {
    let mut ids = Vec::new();
    for dir in std::fs::read_dir(d.state.join("procs"))
        .expect("procs")
        .flatten()
    {
        for f in std::fs::read_dir(dir.path()).expect("dir").flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            assert!(
                !name.contains("corrupt"),
                "a record was moved aside: {name}"
            );
        }
        let id = dir.file_name().to_string_lossy().into_owned();
        // A directory is created just before its first record is queued; a crash in between
        // leaves a directory without a record, which recovery lists as lost (record_missing).
        if dir.path().join("record.json").exists() {
            record(d, &id);
        }
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn f7_kill_9_at_random_points_of_heavy_churn_never_leaves_a_torn_record_or_a_leftover() {
    let _heavy = crate::helper::heavy_lock().await;
    let rounds = size(8, 200);
    let seed = 0x5EED_F7F7_u64;
    println!("F7: {rounds} crash rounds, seed {seed:#x}");
    let mut rng = Rng(seed);
    let mut d = TestDaemon::start().await;
    let tb = testbin();
    for round in 0..rounds {
        let before = std::fs::read_dir(d.state.join("procs"))
            .expect("procs")
            .count();
        // Churn: quick commands, background ones and stops, on two sessions at once, until the
        // daemon dies under them.
        let churn = |seed: u64| {
            let c = d.session();
            let tb = tb.clone();
            async move {
                let mut rng = Rng(seed | 1);
                let mut bg = Vec::new();
                loop {
                    let result = match rng.next() % 4 {
                        0 => c
                            .session
                            .call(|mut cl| {
                                let req = pb::ExecRequest {
                                    session_id: c.id(),
                                    yield_ms: Some(30_000),
                                    ..crate::helper::exec_req("echo churn")
                                };
                                async move { cl.exec(req).await }
                            })
                            .await
                            .map(|_| ()),
                        1 | 2 => c
                            .session
                            .call(|mut cl| {
                                let req = pb::ExecRequest {
                                    session_id: c.id(),
                                    yield_ms: Some(0),
                                    ..crate::helper::exec_req(&format!("exec {tb} ready-sleep 600"))
                                };
                                async move { cl.exec(req).await }
                            })
                            .await
                            .map(|r| bg.extend(r.process.map(|p| p.process_id))),
                        _ => match bg.pop() {
                            Some(id) => c
                                .session
                                .call(|mut cl| {
                                    let req = pb::StopRequest {
                                        session_id: c.id(),
                                        process_id: id.clone(),
                                        signal: "TERM".into(),
                                        force_after_ms: Some(1000),
                                    };
                                    async move { cl.stop(req).await }
                                })
                                .await
                                .map(|_| ()),
                            None => Ok(()),
                        },
                    };
                    if result.is_err() {
                        return; // the daemon died under us: expected
                    }
                }
            }
        };
        let workers = [
            tokio::spawn(churn(rng.next())),
            tokio::spawn(churn(rng.next())),
        ];
        // The crash point: after a random number of new records.
        let target = before + 1 + usize::try_from(rng.next() % 12).expect("small");
        eventually("churn to reach the crash point", || async {
            (std::fs::read_dir(d.state.join("procs")).ok()?.count() >= target).then_some(())
        })
        .await;
        d.kill9();
        for w in workers {
            let _ = w.await;
        }
        let ids = check_records(&d);
        d.spawn().await;
        // Recovery ran before the daemon served: what its holder kept is re-adopted and listed
        // running; nothing else of the old generation runs.
        let listed = d.session().list(pb::Scope::All, true).await;
        for id in &ids {
            let adopted = listed
                .iter()
                .any(|p| p.process_id == *id && p.status == pb::ProcessStatus::Running as i32);
            assert!(
                adopted || marked_processes(id).is_empty(),
                "round {round}: {id} left processes"
            );
        }
        assert_eq!(
            listed.len(),
            ids.len(),
            "round {round}: every record is loaded"
        );
        assert!(
            listed
                .iter()
                .all(|p| p.status != pb::ProcessStatus::Running as i32
                    || !ids.contains(&p.process_id)
                    || p.pid.is_some()),
        );
    }
    assert_no_zombies(d.pid()).await;
}

#[tokio::test]
async fn f7_a_corrupt_or_empty_record_is_moved_aside_and_the_daemon_starts_clean() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let ids: Vec<String> = [
        c.exec("echo one").await,
        c.exec("echo two").await,
        c.exec("echo three").await,
    ]
    .into_iter()
    .map(|r| r.process.expect("process").process_id)
    .collect();
    d.terminate();
    let path = |id: &str| d.state.join("procs").join(id).join("record.json");
    std::fs::write(path(&ids[0]), b"{\"format\": 1, \"process_id\": \"trunc").expect("corrupt");
    std::fs::write(path(&ids[1]), b"").expect("empty");
    d.spawn().await;
    let listed: Vec<String> = d
        .session()
        .list(pb::Scope::All, true)
        .await
        .into_iter()
        .map(|p| p.process_id)
        .collect();
    // The intact record loads as it was; the two unreadable ones are moved aside, their
    // processes swept by marker, and listed as lost so `ps` shows what happened.
    assert_eq!(listed.len(), 3, "{listed:?}");
    let all = d.session().list(pb::Scope::All, true).await;
    for p in &all {
        if p.process_id == ids[2] {
            assert_eq!(p.status, pb::ProcessStatus::Completed as i32);
        } else {
            assert_eq!(p.status, pb::ProcessStatus::Lost as i32);
            assert_eq!(p.lost_reason.as_deref(), Some("record_missing"));
        }
    }
    for id in &ids[..2] {
        let aside: Vec<String> = std::fs::read_dir(d.state.join("procs").join(id))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            aside.iter().any(|n| n.starts_with("record.json.corrupt-")),
            "{aside:?}"
        );
    }
    let logs: String = std::fs::read_dir(d.state.join("logs"))
        .expect("logs")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(logs.contains("does not parse"), "no error logged");
}

/// Runs a daemon on `socket` with a fresh state dir; returns its output once it exits.
fn daemon_on(socket: &std::path::Path, state: &std::path::Path) -> std::process::Output {
    let mut child = std::process::Command::new(bin("yieldshelld"))
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn daemon");
    let status = eventually_blocking("the daemon to exit", || child.try_wait().ok().flatten());
    let mut out = child.wait_with_output().expect("output");
    out.status = status;
    out
}

#[tokio::test]
async fn f8_whatever_sits_at_the_socket_path_is_replaced_only_when_it_is_a_dead_socket() {
    // (a) a dead socket file: removed and bound.
    let dir = TestDaemon::new_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let dead = run.join("d.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).expect("bind"));
    assert!(dead.exists());
    let mut d = TestDaemon::unstarted();
    d.socket = dead.clone();
    d.state = dir.path().join("state-a");
    let mut a = std::process::Command::new(bin("yieldshelld"))
        .arg("--socket")
        .arg(&dead)
        .arg("--state-dir")
        .arg(&d.state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("daemon");
    eventually("the daemon to serve on the old path", || async {
        yieldshell_proto::client::connect(&d.opts()).await.ok()
    })
    .await;

    // (b) a live socket of another daemon: exit != 0, untouched, still answering.
    let out = daemon_on(&dead, &dir.path().join("state-b"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already answers"));
    assert!(yieldshell_proto::client::connect(&d.opts()).await.is_ok());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = a.wait();

    // (c) a regular file and (d) a directory: exit != 0 with an error, nothing deleted.
    let file = run.join("file.sock");
    std::fs::write(&file, b"keep me").expect("file");
    let out = daemon_on(&file, &dir.path().join("state-c"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert_eq!(std::fs::read(&file).expect("kept"), b"keep me");
    let sub = run.join("dir.sock");
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::write(sub.join("inside"), b"x").expect("file");
    let out = daemon_on(&sub, &dir.path().join("state-d"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert!(sub.join("inside").exists());

    // (e) longer than sun_path: a clear "path too long".
    let long = run.join("x".repeat(120));
    let out = daemon_on(&long, &dir.path().join("state-e"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("path too long"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn f9_ten_racing_daemons_leave_one_and_a_killed_winner_frees_its_lock_at_once() {
    let d = TestDaemon::unstarted();
    let started = Instant::now();
    let mut children: Vec<_> = (0..10)
        .map(|_| {
            std::process::Command::new(bin("yieldshelld"))
                .arg("--socket")
                .arg(&d.socket)
                .arg("--state-dir")
                .arg(&d.state)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("daemon")
        })
        .collect();
    // Nine exit with an error; the one left serves.
    let mut losers = Vec::new();
    eventually_blocking("nine daemons to exit", || {
        for (i, c) in children.iter_mut().enumerate() {
            if !losers.iter().any(|(j, _)| *j == i)
                && let Ok(Some(status)) = c.try_wait()
            {
                losers.push((i, (status, started.elapsed())));
            }
        }
        (losers.len() >= 9).then_some(())
    });
    let slowest = losers
        .iter()
        .map(|(_, (_, t))| *t)
        .max()
        .unwrap_or_default();
    println!("F9: 9 of 10 racing daemons exited; the last after {slowest:?}");
    assert!(slowest < Duration::from_secs(10), "losers took {slowest:?}");
    for (_, (status, _)) in &losers {
        assert!(!status.success(), "a losing daemon exited 0");
    }
    let winner = (0..10)
        .find(|i| !losers.iter().any(|(j, _)| j == i))
        .expect("a winner");
    let mut winner = children.swap_remove(winner);
    eventually("the winner to serve", || async {
        yieldshell_proto::client::connect(&d.opts()).await.ok()
    })
    .await;
    // A managed process, then the winner dies by SIGKILL: the lock is free at once, although
    // the orphaned process still runs (it never inherited the lock descriptor).
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    let orphan = c.ready_pids(&id, 1).await[0];
    let fds = c.exec(&format!("exec {} fds", testbin())).await;
    assert_eq!(fds.output.expect("output").stdout, b"0\n1\n2\n3\n");
    let _ = winner.kill();
    let _ = winner.wait();
    // Free without any sweep. Not necessarily in the same instant: the exec above makes the
    // daemon start a spare holder for its pool, and a child caught between its fork and its exec
    // holds a copy of the daemon's descriptors (the lock's too) until that exec closes them.
    eventually_blocking("the lock to be free after its daemon died", || {
        d.lock_is_free().then_some(())
    });
    assert!(orphan.alive(), "the orphan is gone before any sweep");
    // The next daemon takes it over (and stops it with everything else when it is stopped).
    let mut next = TestDaemon::unstarted();
    next.socket = d.socket.clone();
    next.state = d.state.clone();
    let mut again = next
        .command()
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("daemon");
    eventually("the next daemon to serve", || async {
        yieldshell_proto::client::connect(&d.opts()).await.ok()
    })
    .await;
    // Its holder kept it: the next daemon re-adopts it (ARCHITECTURE.md, "Who owns what").
    assert!(orphan.alive(), "the process did not survive its daemon");
    let listed = d.session().list(pb::Scope::All, false).await;
    assert!(
        listed
            .iter()
            .any(|p| p.process_id == id && p.status == pb::ProcessStatus::Running as i32),
        "re-adopted: {listed:?}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(again.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = again.wait();
}

#[tokio::test]
async fn f14_many_short_processes_some_leaving_orphans_get_exact_exit_codes_and_leave_nothing() {
    let _heavy = crate::helper::heavy_lock().await;
    let n = size(200, 1000);
    let d = TestDaemon::start().await;
    let c = std::sync::Arc::new(d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "1000")]));
    c.exec("true").await;
    d.idle_holders_ready().await;
    let daemon = d.pid();
    let base_fds = fd_count(daemon);
    let tb = testbin();
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..8 {
        let c = c.clone();
        let tb = tb.clone();
        workers.push(tokio::spawn(async move {
            let mut mismatches = Vec::new();
            for i in (w..n).step_by(8) {
                let code = (i % 256) as i32;
                // Every tenth leaves an orphaned grandchild behind (re-parented to the daemon,
                // the subreaper, whose reaper must not lose the shell's status to it).
                let command = if i % 10 == 0 {
                    format!("( {tb} exit 3 & ); exec {tb} exit {code}")
                } else {
                    format!("exec {tb} exit {code}")
                };
                let r = c.exec(&command).await;
                let p = r.process.expect("process");
                if p.exit_code != Some(code) || p.status != pb::ProcessStatus::Completed as i32 {
                    mismatches.push((i, p.exit_code, p.status));
                }
            }
            mismatches
        }));
    }
    let mut mismatches = Vec::new();
    for w in workers {
        mismatches.extend(w.await.expect("worker"));
    }
    let took = started.elapsed();
    println!("F14: {n} short processes in {took:?}");
    assert!(mismatches.is_empty(), "wrong exit statuses: {mismatches:?}");
    assert_no_zombies(daemon).await;
    let fds = eventually("descriptors back to the baseline", || async {
        let now = fd_count(daemon);
        (now <= base_fds).then_some(now)
    })
    .await;
    println!("F14: daemon descriptors {base_fds} before, {fds} after");
    assert!(took < TIMEOUT * 4);
}

#[tokio::test]
async fn f18_a_recorded_pid_now_owned_by_another_process_is_not_signalled() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    c.ready_pids(&id, 1).await;
    d.terminate();
    // An unrelated process of the same user, not started by the daemon (no marker).
    let mut stranger = std::process::Command::new(testbin())
        .args(["ready-sleep", "600"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("stranger");
    let me = eventually_blocking("the stranger's identity", || Pid::of(stranger.id() as i32));
    // The record claims the stranger's pid with another start time, as after pid reuse.
    let path = d.state.join("procs").join(&id).join("record.json");
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("record")).expect("parse");
    r["status"] = "running".into();
    r["pid"] = me.pid.into();
    r["start_time"] = (me.start + 1).into();
    r["ended_at_ms"] = serde_json::Value::Null;
    r["ended_by"] = serde_json::Value::Null;
    std::fs::write(&path, serde_json::to_vec(&r).expect("json")).expect("write");
    // As a daemon from before process holders left it: no exit file tells how it ended.
    let _ = std::fs::remove_file(d.state.join("procs").join(&id).join("exit"));
    d.spawn().await;
    assert!(me.alive(), "the daemon signalled an unrelated process");
    let p = d
        .session()
        .list(pb::Scope::All, true)
        .await
        .into_iter()
        .find(|p| p.process_id == id)
        .expect("listed");
    assert_eq!(p.status, pb::ProcessStatus::Lost as i32);
    assert_eq!(p.lost_reason.as_deref(), Some("identity_mismatch"));
    let _ = stranger.kill();
    let _ = stranger.wait();
}
