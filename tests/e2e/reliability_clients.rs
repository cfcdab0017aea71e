//! docs/RELIABILITY.md, the client side: clients that vanish mid-call (F3, F4), a daemon restart
//! under a connected shim (F5), concurrent auto-starts (F10), the auto-started daemon's
//! detachment from its shim (F11) and from a killed editor (F12), `read --follow | head` (F16).
//!
//! "Baseline" is the daemon's descriptor count (`/proc/<pid>/fd`) and its live task count (the
//! `tasks` debug metric of `Status`), sampled by an [`Observer`] whose own connection stays open
//! throughout; every `Status` it makes is also a latency sample.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{
    Latencies, Pid, TIMEOUT, TestDaemon, bin, daemon_pids_for, eventually, fd_count, json, rss_kib,
    run, size, testbin,
};
use crate::mcp::{RawShim, raw_body, shim_std_command};

/// Budget for one `Status` call while clients come and go (RELIABILITY asks < 100 ms; this is a
/// debug build on a shared 2-core CI machine).
const STATUS_BUDGET: Duration = Duration::from_millis(500);

/// Samples the daemon's descriptors and tasks over one long-lived connection.
pub struct Observer {
    client: yieldshell_proto::client::Client,
    pid: i32,
    /// Latency of every `Status` call made.
    pub latencies: Latencies,
}

/// Descriptors and tasks of the daemon at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Open descriptors.
    pub fds: usize,
    /// Live runtime tasks (the `Status` call in flight included, always one).
    pub tasks: u64,
}

impl Observer {
    /// Connects to `d`.
    pub async fn new(d: &TestDaemon) -> Observer {
        Observer {
            client: d.raw().await,
            pid: d.status().await.pid as i32,
            latencies: Latencies::default(),
        }
    }

    /// One sample (and one latency measurement).
    pub async fn sample(&mut self) -> Sample {
        let started = Instant::now();
        let s = self
            .client
            .status(pb::StatusRequest::default())
            .await
            .expect("status")
            .into_inner();
        self.latencies.push(started.elapsed());
        Sample {
            fds: fd_count(self.pid),
            tasks: s.tasks,
        }
    }

    /// Samples until two in a row agree (nothing is still winding down).
    pub async fn stable(&mut self) -> Sample {
        let mut last = self.sample().await;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.sample().await;
            if now == last {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon never settled: {now:?}"
            );
            last = now;
        }
    }

    /// Samples until `pred` holds; returns how long that took.
    pub async fn until(&mut self, what: &str, pred: impl Fn(Sample) -> bool) -> Duration {
        let started = Instant::now();
        loop {
            let s = self.sample().await;
            if pred(s) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < TIMEOUT,
                "timed out waiting for {what}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until descriptors and tasks are back to `base`; returns how long that took.
    pub async fn back_to(&mut self, base: Sample) -> Duration {
        self.until("the baseline", |s| {
            s.fds <= base.fds && s.tasks <= base.tasks
        })
        .await
    }

    /// Asserts the `Status` latency budget and prints the figures.
    pub fn check_latency(&self, what: &str) {
        println!("{what}: Status latency {}", self.latencies.summary());
        assert!(
            self.latencies.pct(100.0) < STATUS_BUDGET,
            "{what}: Status took {:?}",
            self.latencies.pct(100.0)
        );
    }
}

/// Waits until `id` has flushed output to its spool (its segment file is open from then on).
async fn spool_open(d: &TestDaemon, id: &str) {
    let segment = d.state.join("procs").join(id).join("out.0");
    eventually("the first spool flush", || async {
        std::fs::metadata(&segment)
            .is_ok_and(|m| m.len() > 0)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn f3_a_shim_killed_mid_call_leaves_no_descriptor_task_or_half_started_process() {
    let d =
        TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", "spawn_delay:SLOW_SPAWN")]).await;
    let c = d.session();
    let tb = testbin();
    let sleeper = c.spawn_bg(&format!("exec {tb} ready-sleep 600")).await;
    // Ticks slower than the spool's 50 ms flush delay, so its spool files are open before the
    // baseline is taken (they would otherwise open at a random later flush).
    let ticker = c.spawn_bg(&format!("exec {tb} tick 60")).await;
    c.ready_pids(&sleeper, 1).await;
    spool_open(&d, &ticker).await;
    let mut obs = Observer::new(&d).await;
    let base = obs.stable().await;
    let no_autostart = [("YIELDSHELL_NO_AUTOSTART", "1")];

    // (a) `wait` on a sleeping process, (b) `wait until` pulling a chatty process's output.
    for (case, args) in [
        ("a", json!({"process_id": sleeper, "timeout_ms": 55000})),
        (
            "b",
            json!({"process_id": ticker, "until": "never matches", "timeout_ms": 55000}),
        ),
    ] {
        let mut shim = RawShim::start(shim_std_command(&d, &no_autostart));
        assert!(raw_body(&shim.call("ps", json!({})))["processes"].is_array());
        let idle = obs.stable().await;
        shim.call_async("wait", args);
        // Gate: the call's stream is inside the daemon.
        obs.until("the wait in flight", |s| s.tasks > idle.tasks)
            .await;
        shim.kill9();
        let back = obs.back_to(base).await;
        println!("F3 ({case}): descriptors and tasks back to baseline {base:?} in {back:?}");
    }

    // (c) `exec` whose spawn is held up (fault injection) right after its `starting` record.
    let mut shim = RawShim::start(shim_std_command(&d, &no_autostart));
    shim.call_async(
        "exec",
        json!({"command": format!("echo SLOW_SPAWN; exec {tb} ready-sleep 600"), "side_effects": ["NONE"], "yield_ms": 0}),
    );
    let procs = d.state.join("procs");
    let id = eventually("a starting record", || async {
        std::fs::read_dir(&procs).ok()?.flatten().find_map(|e| {
            let raw = std::fs::read(e.path().join("record.json")).ok()?;
            let r: serde_json::Value = serde_json::from_slice(&raw).ok()?;
            (r["status"] == "starting").then(|| e.file_name().to_string_lossy().into_owned())
        })
    })
    .await;
    shim.kill9();
    // The daemon keeps answering while that start is held up.
    for _ in 0..5 {
        obs.sample().await;
    }
    // The start runs to completion without its client: registered, listed, running.
    let listed = eventually("the process listed", || async {
        c.list(pb::Scope::All, false)
            .await
            .into_iter()
            .find(|p| p.process_id == id)
    })
    .await;
    assert_eq!(listed.status, pb::ProcessStatus::Running as i32);
    let pid = c.ready_pids(&id, 1).await[0];
    assert!(pid.alive());
    // Never running and unlisted: every live marked process belongs to a listed process.
    let listed_ids: Vec<String> = c
        .list(pb::Scope::All, true)
        .await
        .into_iter()
        .map(|p| p.process_id)
        .collect();
    for dir in std::fs::read_dir(&procs).expect("procs").flatten() {
        let pid_id = dir.file_name().to_string_lossy().into_owned();
        if !crate::helper::marked_processes(&pid_id).is_empty() {
            assert!(listed_ids.contains(&pid_id), "{pid_id} runs unlisted");
        }
    }
    assert!(c.stop(&id, "TERM", 2_000).await.expect("stop").stopped);
    assert!(!pid.alive());
    let back = obs.back_to(base).await;
    println!("F3 (c): back to baseline in {back:?}");
    obs.check_latency("F3");
}

/// Follows `id` over its own connection until `done` is set; checks the data is contiguous
/// (no gap, no repeat). Returns the bytes received.
async fn steady_follower(
    opts: yieldshell_proto::client::ConnectOptions,
    session_id: String,
    id: String,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    let mut client = yieldshell_proto::client::connect(&opts)
        .await
        .expect("connect")
        .client;
    let mut stream = client
        .follow(pb::FollowRequest {
            session_id,
            process_id: id,
            since_seq: Some(1),
            ..Default::default()
        })
        .await
        .expect("follow")
        .into_inner();
    let mut next = 1u64;
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        let ev = tokio::time::timeout(TIMEOUT, stream.message())
            .await
            .expect("the steady follower stalled")
            .expect("follow stream")
            .expect("follow ended early");
        assert_eq!(
            (ev.dropped_from, ev.dropped_to),
            (0, 0),
            "the steady follower saw a gap"
        );
        if !ev.data.is_empty() {
            assert_eq!(ev.seq, next, "the steady follower's data is not contiguous");
            next += ev.data.len() as u64;
        }
    }
    next - 1
}

#[tokio::test]
async fn f4_clients_dropped_mid_follow_and_mid_wait_leak_nothing_and_disturb_no_one() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    let ticker = c.spawn_bg(&format!("exec {tb} tick 60")).await;
    let sleeper = c.spawn_bg(&format!("exec {tb} ready-sleep 600")).await;
    c.ready_pids(&sleeper, 1).await;
    spool_open(&d, &ticker).await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let steady = tokio::spawn(steady_follower(
        d.opts(),
        c.id(),
        ticker.clone(),
        done.clone(),
    ));
    let mut obs = Observer::new(&d).await;
    let daemon = obs.pid;
    let opts = d.opts();
    let session = c.id();

    let round = async |obs: &mut Observer, base: Sample| {
        // follow: the first event arrives, then the connection is dropped.
        let mut client = yieldshell_proto::client::connect(&opts)
            .await
            .expect("connect")
            .client;
        let mut stream = client
            .follow(pb::FollowRequest {
                session_id: session.clone(),
                process_id: ticker.clone(),
                since_seq: Some(1),
                ..Default::default()
            })
            .await
            .expect("follow")
            .into_inner();
        stream.message().await.expect("event").expect("event");
        drop(stream);
        drop(client);
        // wait: the call is in flight (gated on its stream's task), then the connection drops.
        let mut client = yieldshell_proto::client::connect(&opts)
            .await
            .expect("connect")
            .client;
        let call = client.wait(pb::WaitRequest {
            session_id: session.clone(),
            process_id: sleeper.clone(),
            timeout_ms: Some(55_000),
            ..Default::default()
        });
        tokio::pin!(call);
        tokio::select! {
            r = &mut call => panic!("wait returned: {r:?}"),
            _ = obs.until("the wait in flight", |s| s.tasks >= base.tasks + 2) => {}
        }
    };

    for _ in 0..10 {
        let base = obs.stable().await;
        round(&mut obs, base).await;
    }
    let base = obs.stable().await;
    obs.back_to(base).await;
    let rss_before = rss_kib(daemon);
    let iterations = size(100, 1000);
    for _ in 0..iterations {
        round(&mut obs, base).await;
    }
    let back = obs.back_to(base).await;
    // Descriptors and tasks are back; memory must not grow with the number of dropped clients.
    let rss_after = rss_kib(daemon);
    let growth = rss_after.saturating_sub(rss_before);
    println!(
        "F4: {iterations} dropped follow+wait clients; baseline {base:?} regained in {back:?}; RSS {rss_before} KiB -> {rss_after} KiB (+{growth} KiB)"
    );
    assert!(growth < 1024, "RSS grew by {growth} KiB");

    // The same with the real CLI, killed with SIGKILL mid-call.
    for _ in 0..size(5, 50) {
        let mut follow = d
            .yieldctl()
            .args(["read", &ticker, "--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("yieldctl read --follow");
        let mut line = String::new();
        BufReader::new(follow.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("first line");
        assert!(line.starts_with("tick "), "{line:?}");
        let _ = follow.kill();
        let _ = follow.wait();
        let mut wait = d
            .yieldctl()
            .args(["wait", &sleeper])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("yieldctl wait");
        obs.until("the CLI wait in flight", |s| s.tasks >= base.tasks + 2)
            .await;
        let _ = wait.kill();
        let _ = wait.wait();
        obs.back_to(base).await;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let received = steady.await.expect("steady follower");
    assert!(received > 0);
    println!("F4: the steady follower received {received} contiguous bytes");
    obs.check_latency("F4");
}

#[tokio::test]
async fn f5_a_daemon_restart_fails_the_in_flight_call_and_the_next_call_reconnects() {
    let mut d = TestDaemon::start().await;
    let mut shim = RawShim::start(shim_std_command(&d, &[]));
    let b = raw_body(&shim.call(
        "exec",
        json!({"command": format!("exec {} ready-sleep 600", testbin()), "side_effects": ["NONE"], "yield_ms": 0}),
    ));
    let id = b["process_id"].as_str().expect("id").to_string();
    let mut obs = Observer::new(&d).await;
    let idle = obs.stable().await;
    let wait = shim.call_async("wait", json!({"process_id": id, "timeout_ms": 55000}));
    obs.until("the wait in flight", |s| s.tasks > idle.tasks)
        .await;
    drop(obs);
    let restart = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let r = shim.response(wait);
    println!(
        "F5: the in-flight wait failed {:?} after SIGTERM",
        restart.elapsed()
    );
    let status = d.terminate().expect("daemon exit");
    assert!(status.success());
    assert_eq!(r["result"]["isError"], true, "{r}");
    let b = raw_body(&r);
    assert_eq!(b["process_id"], id.as_str());
    assert!(
        b["error"]
            .as_str()
            .expect("error")
            .contains("shutting down"),
        "{b}"
    );
    d.spawn().await;
    // The very next call reconnects to the new daemon and succeeds.
    let r = shim.call("ps", json!({"scope": "all"}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    let entry = raw_body(&r)["processes"]
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(entry["status"], "stopped");
    let (_, status) = shim.close();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn f10_twenty_concurrent_auto_starting_ps_calls_leave_one_daemon_and_a_free_start_lock() {
    let d = TestDaemon::unstarted();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            std::process::Command::new(bin("yieldctl"))
                .args(["--json", "ps"])
                .env("YIELDSHELL_SOCKET", &d.socket)
                .env("YIELDSHELL_STATE_DIR", &d.state)
                .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
                .env_remove("YIELDSHELL_NO_AUTOSTART")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn yieldctl")
        })
        .collect();
    let started = Instant::now();
    for child in clients {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(json(&out)["processes"].is_array());
    }
    println!(
        "F10: 20 auto-starting clients done in {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < TIMEOUT);
    let daemons = daemon_pids_for(&d.socket);
    assert_eq!(daemons.len(), 1, "daemon processes: {daemons:?}");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(d.socket.with_file_name("yieldshelld.start.lock"))
        .expect("start lock");
    assert!(lock.try_lock().is_ok(), "the start lock is still held");
    d.stop_autostarted();
}

/// `/proc/<pid>/fd/<fd>` as a string (`pipe:[123]`, `/dev/null`, …).
fn fd_target(pid: i32, fd: i32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn sid_pgid(pid: i32) -> (i32, i32) {
    let p = nix::unistd::Pid::from_raw(pid);
    (
        nix::unistd::getsid(Some(p)).expect("sid").as_raw(),
        nix::unistd::getpgid(Some(p)).expect("pgid").as_raw(),
    )
}

#[tokio::test]
async fn f11_closing_the_shims_stdin_ends_it_at_once_and_the_auto_started_daemon_is_detached() {
    let d = TestDaemon::unstarted();
    let mut shim = RawShim::start(shim_std_command(&d, &[]));
    let r = shim.call("ps", json!({}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    let daemons = daemon_pids_for(&d.socket);
    assert_eq!(daemons.len(), 1);
    let daemon = daemons[0];
    let shim_pid = shim.pid();
    let me = std::process::id() as i32;
    let (dsid, dpgid) = sid_pgid(daemon);
    for other in [me, shim_pid] {
        let (sid, pgid) = sid_pgid(other);
        assert_ne!(dsid, sid, "the daemon shares a session with {other}");
        assert_ne!(
            dpgid, pgid,
            "the daemon shares a process group with {other}"
        );
    }
    // The daemon's stdio is none of the shim's pipes (an MCP client waits for EOF on them).
    let shim_pipes: Vec<String> = (0..3)
        .map(|fd| fd_target(shim_pid, fd))
        .filter(|t| t.starts_with("pipe:"))
        .collect();
    assert_eq!(shim_pipes.len(), 2, "the shim's stdin and stdout are pipes");
    for fd in 0..3 {
        let target = fd_target(daemon, fd);
        assert!(
            !shim_pipes.contains(&target),
            "daemon fd {fd} is the shim's {target}"
        );
    }
    // The cgroup half of F11 is its own test below (it needs systemd as init).
    let daemon_id = Pid::of(daemon).expect("daemon identity");
    let (eof, status) = shim.close();
    println!("F11: the client saw EOF {eof:?} after closing the shim's stdin");
    assert_eq!(status.code(), Some(0));
    assert!(eof < Duration::from_secs(2), "EOF took {eof:?}");
    assert!(daemon_id.alive(), "the daemon died with its shim");
    d.stop_autostarted();
}

/// F11 on systemd: the auto-started daemon leaves the client's cgroup, so stopping the
/// editor's unit or scope does not take the daemon along. Only systemd (PID 1 with a user
/// manager) puts an editor in a cgroup of its own; a CI container has neither.
#[tokio::test]
#[ignore = "needs systemd as init (PID 1) with a user manager, which CI has not: run it by name on such a machine"]
async fn f11_on_systemd_the_auto_started_daemon_leaves_the_clients_cgroup() {
    assert!(
        std::path::Path::new("/run/systemd/system").exists(),
        "systemd is not the init system here (no /run/systemd/system)"
    );
    let d = TestDaemon::unstarted();
    let mut shim = RawShim::start(shim_std_command(&d, &[]));
    let r = shim.call("ps", json!({}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    let daemons = daemon_pids_for(&d.socket);
    assert_eq!(daemons.len(), 1);
    let cgroup = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let me = std::process::id() as i32;
    assert_ne!(
        cgroup(daemons[0]),
        cgroup(me),
        "the daemon stayed in the client's cgroup"
    );
    let (_, status) = shim.close();
    assert_eq!(status.code(), Some(0));
    d.stop_autostarted();
}

#[tokio::test]
async fn f12_killing_the_editors_whole_session_leaves_the_daemon_and_its_processes_running() {
    let d = TestDaemon::unstarted();
    // The "editor": a session leader whose child is the shim (sh forks for "$0", then exits 0).
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("\"$0\"; exit 0")
        .arg(bin("mcp-yieldshell"))
        .env("YIELDSHELL_SOCKET", &d.socket)
        .env("YIELDSHELL_STATE_DIR", &d.state)
        .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .current_dir(d.dir.path());
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
    }
    let mut shim = RawShim::start(cmd);
    let editor_pid = shim.pid();
    let tb = testbin();
    let ids: Vec<String> = (0..3)
        .map(|n| {
            let b = raw_body(&shim.call(
                "exec",
                json!({"command": format!("echo out-{n}; exec {tb} ready-sleep 600"), "side_effects": ["NONE"], "yield_ms": 0}),
            ));
            b["process_id"].as_str().expect("id").to_string()
        })
        .collect();
    let c = d.session();
    let mut pids = Vec::new();
    for id in &ids {
        pids.extend(c.ready_pids(id, 1).await);
    }
    let daemon = Pid::of(daemon_pids_for(&d.socket)[0]).expect("daemon");
    // Everything of the editor's session: the editor and the shim.
    let session: Vec<Pid> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(*p)))
                .is_ok_and(|s| s.as_raw() == editor_pid)
        })
        .filter_map(Pid::of)
        .collect();
    assert!(session.len() >= 2, "editor and shim: {session:?}");
    assert!(
        !session.iter().any(|p| p.pid == daemon.pid),
        "the daemon is in the editor's session"
    );
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(editor_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    for p in &session {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = shim.child.wait();
    eventually("the editor's session to die", || async {
        session.iter().all(|p| !p.alive()).then_some(())
    })
    .await;
    assert!(daemon.alive(), "the daemon died with the editor");
    for p in &pids {
        assert!(p.alive(), "{p:?} died with the editor");
    }
    // A new shim (the editor restarted) lists them, output intact.
    let mut shim = RawShim::start(shim_std_command(&d, &[]));
    let listed = raw_body(&shim.call("ps", json!({"include_completed": false})));
    for (n, id) in ids.iter().enumerate() {
        assert!(
            listed["processes"]
                .as_array()
                .expect("array")
                .iter()
                .any(|p| p["process_id"] == id.as_str() && p["status"] == "running"),
            "{id} not listed: {listed}"
        );
        let out = raw_body(&shim.call("read", json!({"process_id": id, "since_seq": 1})));
        assert!(
            out["stdout"]
                .as_str()
                .expect("stdout")
                .starts_with(&format!("out-{n}\nready ")),
            "{out}"
        );
        shim.call("stop", json!({"process_id": id}));
    }
    for p in &pids {
        assert!(!p.alive());
    }
    let (_, status) = shim.close();
    assert_eq!(status.code(), Some(0));
    d.stop_autostarted();
}

#[tokio::test]
async fn f16_read_follow_into_a_pipe_closed_after_one_line_exits_zero_quietly() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let ticker = c.spawn_bg(&format!("exec {} tick 5", testbin())).await;
    let mut follow = d
        .yieldctl()
        .args(["read", &ticker, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("yieldctl read --follow");
    // `| head -1`: one line, then the reader goes away.
    let mut line = String::new();
    BufReader::new(follow.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    assert_eq!(line, "tick 0\n");
    let out = follow.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The daemon and the process are unaffected.
    let ps = run(d.yieldctl().args(["--json", "ps"]));
    let entry = json(&ps)["processes"]
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["process_id"] == ticker.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(entry["status"], "running");
}
