//! docs/RELIABILITY.md security: the socket is never reachable by others (S1), planted symlinks are
//! refused or not followed (S3), managed processes get nothing of the daemon (S4). S2 (another
//! uid) is `daemon_lifecycle::another_user_is_refused`; S5 is `cargo deny` in `.ci/run`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use yieldshell_proto::pb;

use crate::helper::{
    TestDaemon, bin, eventually, eventually_blocking, exec_req, require_root, testbin,
};

/// Runs `yieldshelld` on `socket`/`state` until it exits; returns (success, stderr).
fn daemon_exits(socket: &std::path::Path, state: &std::path::Path) -> (bool, String) {
    let mut child = std::process::Command::new(bin("yieldshelld"))
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon");
    let status = eventually_blocking("the daemon to refuse", || child.try_wait().ok().flatten());
    let out = child.wait_with_output().expect("output");
    (
        status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What is testable about the creation race: (1) deterministically, the socket's directory is
/// ours and 0700 *before* the socket exists, so no other user can reach the path at any moment
/// (connecting needs search permission on the directory); (2) the socket itself already has no
/// group/other bits at the first instant a watcher can see it, although the daemon inherited
/// umask 000 — it sets its own umask before `bind`. (2) can only catch a regression
/// probabilistically (the window before a `chmod` is microseconds), hence the rounds.
#[cfg(target_os = "linux")] // inotify
#[tokio::test]
async fn s1_the_socket_is_private_from_the_instant_it_appears() {
    use crate::helper::TIMEOUT;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::time::Instant;
    let rounds = crate::helper::size(10, 100);
    let me = nix::unistd::geteuid().as_raw();
    for _ in 0..rounds {
        let d = TestDaemon::unstarted();
        let run = d.socket.parent().expect("dir").to_path_buf();
        std::fs::create_dir(&run).expect("mkdir");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let watcher = Inotify::init(InitFlags::IN_NONBLOCK).expect("inotify");
        watcher
            .add_watch(&run, AddWatchFlags::IN_CREATE)
            .expect("watch");
        let mut cmd = d.command();
        // SAFETY: umask(2) is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::stat::umask(nix::sys::stat::Mode::empty());
                Ok(())
            });
        }
        let mut child = cmd.stderr(Stdio::null()).spawn().expect("daemon");
        let deadline = Instant::now() + TIMEOUT;
        let (sock_mode, dir_meta) = loop {
            let events = watcher.read_events().unwrap_or_default();
            if events
                .iter()
                .any(|e| e.name.as_deref() == d.socket.file_name())
            {
                let dir = std::fs::symlink_metadata(&run).expect("dir");
                let sock = std::fs::symlink_metadata(&d.socket).expect("socket");
                break (sock.mode(), dir);
            }
            assert!(Instant::now() < deadline, "the socket never appeared");
            std::thread::yield_now();
        };
        assert_eq!(dir_meta.mode() & 0o777, 0o700, "directory mode");
        assert_eq!(dir_meta.uid(), me, "directory owner");
        assert_eq!(
            sock_mode & 0o077,
            0,
            "socket mode {:o} when it appeared",
            sock_mode & 0o777
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        // Bounded: a daemon that let this SIGTERM go (it once came while the daemon set up its
        // signal listeners, see the daemon's `shutdown_signals`) fails here, not hangs CI.
        let deadline = Instant::now() + TIMEOUT;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon ran on for {TIMEOUT:?} after a SIGTERM sent as its socket appeared"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// S1's other half: a pre-existing socket directory of another owner is refused, even with
/// mode 0700 (arranging a directory owned by another uid needs root).
#[test]
#[ignore = "needs root: run .ci/test-extra as root"]
fn s1_a_socket_directory_owned_by_another_user_is_refused() {
    require_root("create a socket directory owned by another uid (65534)");
    let d = TestDaemon::unstarted();
    let run = d.socket.parent().expect("dir");
    std::fs::create_dir(run).expect("mkdir");
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    nix::unistd::chown(run, Some(65534.into()), Some(65534.into())).expect("chown");
    let (ok, err) = daemon_exits(&d.socket, &d.state);
    assert!(
        !ok && err.contains("unsafe permissions") && err.contains("65534"),
        "{err}"
    );
}

#[tokio::test]
async fn s3_symlinks_planted_at_the_socket_state_lock_record_and_process_paths_are_not_followed() {
    let base = TestDaemon::new_dir();
    let victim = base.path().join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    let intact = || assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
    let private = |p: &std::path::Path| {
        std::fs::create_dir_all(p).expect("mkdir");
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    };

    // The socket path is a symlink (to a stale socket elsewhere): refused, left alone.
    let run = base.path().join("run");
    private(&run);
    let elsewhere = base.path().join("elsewhere.sock");
    drop(std::os::unix::net::UnixListener::bind(&elsewhere).expect("bind"));
    let link = run.join("d.sock");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    let (ok, err) = daemon_exits(&link, &base.path().join("state1"));
    assert!(!ok && err.contains("not a socket"), "{err}");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    assert!(elsewhere.exists());

    // The socket's directory is a symlink: refused.
    let real = base.path().join("real-run");
    private(&real);
    let run_link = base.path().join("run-link");
    std::os::unix::fs::symlink(&real, &run_link).expect("symlink");
    let (ok, err) = daemon_exits(&run_link.join("d.sock"), &base.path().join("state2"));
    assert!(!ok && err.contains("symbolic link"), "{err}");

    // The state directory is a symlink: refused.
    let real_state = base.path().join("real-state");
    private(&real_state);
    let state_link = base.path().join("state-link");
    std::os::unix::fs::symlink(&real_state, &state_link).expect("symlink");
    let (ok, err) = daemon_exits(&run.join("s3.sock"), &state_link);
    assert!(!ok, "a symlinked state dir was accepted: {err}");
    assert!(
        std::fs::read_dir(&real_state)
            .expect("dir")
            .next()
            .is_none()
    );

    // The lock file is a symlink to a victim: refused, the victim is not truncated.
    let state = base.path().join("state3");
    private(&state);
    std::os::unix::fs::symlink(&victim, state.join("yieldshelld.lock")).expect("symlink");
    let (ok, err) = daemon_exits(&run.join("s3.sock"), &state);
    assert!(!ok && err.contains("lock"), "{err}");
    intact();

    // A record's temp file is a symlink: replaced, not followed; the record is still written.
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    c.ready_pids(&id, 1).await;
    let dir = d.state.join("procs").join(&id);
    // Plant it once the running record (pid and start time) is on disk: the writer is then idle
    // until the stop, and the temp name cannot be taken by a write in flight.
    crate::helper::eventually_blocking("the running record", || {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("record.json")).ok()?).ok()?;
        record["pid"].is_number().then_some(())
    });
    std::os::unix::fs::symlink(&victim, dir.join("record.json.tmp")).expect("symlink");
    assert!(c.stop(&id, "TERM", 2_000).await.expect("stop").stopped);
    intact();
    // Records are written by the record writer shortly after the change (asynchronously).
    crate::helper::eventually_blocking("the stopped record", || {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("record.json")).ok()?).ok()?;
        (record["status"] == "stopped").then_some(())
    });
    intact();

    // A process directory is a symlink (a client-chosen id): refused before anything runs.
    let uuid = "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b";
    let target = base.path().join("target-dir");
    std::fs::create_dir(&target).expect("mkdir");
    std::os::unix::fs::symlink(&target, d.state.join("procs").join(uuid)).expect("symlink");
    let r = c
        .exec_with(pb::ExecRequest {
            process_id: Some(uuid.into()),
            yield_ms: Some(5_000),
            ..exec_req("echo hi")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32);
    assert!(std::fs::read_dir(&target).expect("dir").next().is_none());
}

#[tokio::test]
async fn s4_managed_processes_get_no_daemon_internals_and_only_stdio() {
    let dir = TestDaemon::new_dir();
    let notify = dir.path().join("notify");
    let _notify = std::os::unix::net::UnixDatagram::bind(&notify).expect("notify socket");
    let notify_s = notify.display().to_string();
    let internals = [
        ("NOTIFY_SOCKET", notify_s.as_str()),
        ("LISTEN_FDS", "1"),
        ("LISTEN_PID", "1"),
        ("LISTEN_FDNAMES", "yieldshelld.socket"),
        ("YIELDSHELL_TEST_FAULTS", "actor_panic:NEVER_MATCHES"),
        ("YIELDSHELL_LOG", "info"),
        ("DAEMON_ONLY_SECRET", "s3cr3t-daemon"),
    ];
    let d = TestDaemon::start_with_env(&internals).await;
    let c = d.session();
    let env = c.exec("env").await.output.expect("output").stdout;
    let env = String::from_utf8_lossy(&env);
    for (name, _) in internals {
        assert!(
            !env.lines().any(|l| l.starts_with(&format!("{name}="))),
            "{name} leaked into a managed process"
        );
    }
    let fds = c.exec(&format!("exec {} fds", testbin())).await;
    assert_eq!(fds.output.expect("output").stdout, b"0\n1\n2\n3\n");

    // Socket-activated (systemd passes the listening socket as fd 3): still only fds 0-2.
    let d2 = TestDaemon::unstarted();
    let run = d2.socket.parent().expect("dir");
    std::fs::create_dir(run).expect("mkdir");
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let listener = std::os::unix::net::UnixListener::bind(&d2.socket).expect("bind");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("export LISTEN_PID=$$ LISTEN_FDS=1; exec \"$0\" \"$@\"")
        .arg(bin("yieldshelld"))
        .arg("--socket")
        .arg(&d2.socket)
        .arg("--state-dir")
        .arg(&d2.state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: dup2(2) is async-signal-safe; fd 3 of the child becomes the listening socket
    // (without close-on-exec), as systemd hands it over.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut activated = cmd.spawn().expect("activated daemon");
    eventually("the activated daemon to serve", || async {
        yieldshell_proto::client::connect(&d2.opts()).await.ok()
    })
    .await;
    let c2 = d2.session();
    let fds = c2.exec(&format!("exec {} fds", testbin())).await;
    assert_eq!(fds.output.expect("output").stdout, b"0\n1\n2\n3\n");
    let env = c2.exec("env").await.output.expect("output").stdout;
    assert!(!String::from_utf8_lossy(&env).contains("LISTEN_"));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(activated.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = activated.wait().expect("wait");
    assert!(status.success());
    drop(listener);
}

/// Issue 16 item 11: the state directory is checked like the socket directory. A world-writable
/// one (another uid could replace `procs/` and read or forge records) is refused with the reason
/// and the fix; a fresh one is created 0700, and records and spool files are 0600.
#[tokio::test]
async fn s6_the_state_directory_is_private_and_its_files_are_owner_only() {
    let d = TestDaemon::unstarted();
    std::fs::create_dir(&d.state).expect("mkdir");
    std::fs::set_permissions(&d.state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (ok, err) = daemon_exits(&d.socket, &d.state);
    assert!(
        !ok && err.contains("unsafe permissions") && err.contains("mode 0777"),
        "{err}"
    );

    let d = TestDaemon::start().await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").mode() & 0o777;
    assert_eq!(mode(&d.state), 0o700);
    assert_eq!(mode(&d.state.join("procs")), 0o700);
    let r = d.session().exec("echo hello").await;
    let id = r.process.expect("process").process_id;
    let dir = d.state.join("procs").join(&id);
    let record = dir.join("record.json");
    eventually_blocking("the record to be written", || record.exists().then_some(()));
    assert_eq!(mode(&record), 0o600);
    assert_eq!(mode(&dir.join("out.0")), 0o600);
    assert_eq!(mode(&dir.join("streams")), 0o600);
    assert_eq!(mode(&d.state.join("yieldshelld.lock")), 0o600);
}
