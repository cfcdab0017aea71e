//! `yieldctl daemon restart` (ARCHITECTURE.md, "Who owns what"): the daemon is replaced by the one found the usual way
//! and every running process is kept — same pids, output continuing with no gap.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use yieldshell_proto::pb;

use crate::helper::{
    Pid, TestDaemon, eventually, eventually_blocking, heavy_lock, run, testbin, ticks,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_restart_keeps_a_hundred_processes_with_their_pids_and_output() {
    let _heavy = heavy_lock().await;
    const N: usize = 100;
    // Auto-started by `daemon start`, so the fixture stops whichever daemon runs at the end.
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let c = d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "200")]);
    let tb = testbin();
    let mut ids = Vec::with_capacity(N);
    for _ in 0..N {
        ids.push(c.spawn_bg(&format!("exec {tb} tick 100")).await);
    }
    let before = c.list(pb::Scope::All, false).await;
    let old_daemon = d.status().await.pid;
    let pids: Vec<(String, u32)> = ids
        .iter()
        .map(|id| {
            let p = before.iter().find(|p| p.process_id == *id).expect("listed");
            (id.clone(), p.pid.expect("pid"))
        })
        .collect();
    let alive: Vec<Pid> = pids
        .iter()
        .map(|(_, pid)| Pid::of(*pid as i32).expect("running"))
        .collect();

    let restarted = run(d.yieldctl().args(["daemon", "restart"]));
    let said = String::from_utf8_lossy(&restarted.stderr).into_owned();
    println!("{said}");
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(
        said.contains(&format!("{N} running process(es) kept")),
        "{said}"
    );

    let c = d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "200")]);
    assert_ne!(d.status().await.pid, old_daemon, "a new daemon serves");
    let after = c.list(pb::Scope::All, false).await;
    for (id, pid) in &pids {
        let p = after
            .iter()
            .find(|p| p.process_id == *id)
            .unwrap_or_else(|| panic!("{id} listed"));
        assert_eq!(p.status, pb::ProcessStatus::Running as i32, "{id}");
        assert_eq!(p.pid, Some(*pid), "{id} is the same process");
    }
    assert!(alive.iter().all(Pid::alive), "no process was restarted");
    // Each goes on printing, and its output has every line across the restart.
    for id in &ids {
        let seen = ticks(&c.read_all(id, 1 << 20).await.0).len();
        let numbers = eventually("output after the restart", || async {
            let n = ticks(&c.read_all(id, 1 << 20).await.0);
            (n.len() >= seen + 2).then_some(n)
        })
        .await;
        assert_eq!(
            numbers,
            (0..numbers.len() as u64).collect::<Vec<_>>(),
            "{id}: no line lost or repeated"
        );
    }
}

/// A service manager's reload (`ExecReload=/bin/kill -USR1 $MAINPID` in the systemd unit): the
/// daemon exits with status 75, which the unit restarts on, and its process runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_exits_with_status_75_leaving_processes_for_the_next_daemon() {
    // The first daemon is this test's own child (its exit status is the point); the next one
    // is started by a client, and the fixture stops it at the end.
    let d = TestDaemon::unstarted();
    std::fs::write(d.dir.path().join("config.toml"), "").expect("config");
    let mut first = d
        .command()
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("daemon");
    let opts = d.opts();
    eventually("the daemon to answer", || {
        let opts = opts.clone();
        async move { yieldshell_proto::client::connect(&opts).await.ok() }
    })
    .await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    let pid = c.ready_pids(&id, 1).await[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .expect("SIGUSR1");
    let status = tokio::task::block_in_place(|| first.wait()).expect("exit status");
    assert_eq!(status.code(), Some(75), "{status:?}");
    assert!(pid.alive(), "the process outlived its daemon");
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let listed = d.session().list(pb::Scope::All, false).await;
    let p = listed
        .iter()
        .find(|p| p.process_id == id)
        .expect("re-adopted");
    assert_eq!(p.status, pb::ProcessStatus::Running as i32);
    assert_eq!(p.pid, Some(pid.pid as u32));
}

/// Issue 29, item 10: two `yieldctl daemon restart` at once. The one that reaches the daemon
/// second finds it already going away (its socket closed, or a call cut off) and used to exit
/// 3 (`another yieldshelld already runs`, or a lost connection); it now waits for the first
/// restart and succeeds. Rounds, because which one loses is the machines' choice; the process
/// is kept throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_restarts_at_once_both_succeed_and_keep_the_processes() {
    let _heavy = heavy_lock().await;
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    let pid = c.ready_pids(&id, 1).await[0];
    for round in 0..8 {
        let restart = || {
            d.yieldctl()
                .args(["daemon", "restart"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("yieldctl")
        };
        let (first, second) = (restart(), restart());
        let outputs = tokio::task::block_in_place(|| {
            [first, second].map(|child| child.wait_with_output().expect("wait"))
        });
        for out in outputs {
            assert!(
                out.status.success(),
                "round {round}: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert!(pid.alive(), "the process outlived every restart");
    let listed = d.session().list(pb::Scope::All, false).await;
    let p = listed.iter().find(|p| p.process_id == id).expect("listed");
    assert_eq!(p.status, pb::ProcessStatus::Running as i32);
    assert_eq!(p.pid, Some(pid.pid as u32));
}

/// The deterministic half of the race above: a daemon on its way out has closed its socket
/// but still holds its instance lock (held here by the test). `daemon restart` finds no
/// daemon, starts one, which exits finding the lock taken; the restart then waits for the lock
/// to be let go instead of failing, and starts the daemon once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_waits_for_a_daemon_still_holding_the_state_directory() {
    let d = TestDaemon::unstarted();
    std::fs::create_dir_all(&d.state).expect("state dir");
    std::fs::set_permissions(&d.state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(d.state.join("yieldshelld.lock"))
        .expect("lock file");
    lock.lock().expect("flock");
    let mut restart = d
        .yieldctl()
        .args(["daemon", "restart"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("yieldctl");
    // The daemon it started has met the lock and exited.
    let start_log = d.socket.with_file_name("yieldshelld.start.log");
    eventually_blocking("the started daemon to find the lock taken", || {
        let log = std::fs::read_to_string(&start_log).unwrap_or_default();
        log.contains("already runs").then_some(())
    });
    assert!(
        restart.try_wait().expect("try_wait").is_none(),
        "the restart gave up while the old daemon still held the state directory: {}",
        String::from_utf8_lossy(&restart.wait_with_output().expect("output").stderr)
    );
    drop(lock);
    let out = tokio::task::block_in_place(|| restart.wait_with_output()).expect("wait");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {said}", out.status);
    assert!(said.contains("started"), "{said}");
    assert!(d.status().await.pid > 0, "a daemon answers");
}
