//! `exec`, `write` and the environment a managed process gets.

use std::time::{Duration, Instant};

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::helper::{TestDaemon, exec_req, testbin};

#[tokio::test]
async fn fast_command_completes_with_output_and_exit_code() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let started = Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            // A long yield: a fast command must not wait it out.
            yield_ms: Some(60_000),
            ..exec_req("echo out; echo err >&2; exit 7")
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "exec waited out its yield"
    );
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    let p = r.process.expect("process");
    assert!(p.process_id.starts_with("proc_"));
    assert_eq!(p.exit_code, Some(7));
    assert_eq!(p.signal, None);
    let o = r.output.expect("output");
    assert_eq!(o.stdout, b"out\n");
    assert_eq!(o.stderr, b"err\n");
    assert_eq!(o.next_seq, 9, "8 bytes of output, numbered from 1");
    assert!(!o.truncated);
    assert_eq!((p.stdout_lines, p.stderr_lines), (1, 1));
}

#[tokio::test]
async fn slow_command_backgrounds_with_a_snapshot_and_keeps_running() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(300),
            ..exec_req(&format!("echo first; exec {} ready-sleep 60", testbin()))
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32);
    let p = r.process.expect("process");
    assert!(p.pid.is_some());
    // The daemon returns facts only (front ends phrase the hints): the yield it used, no text.
    assert_eq!(r.yield_ms, 300);
    assert!(r.message.is_empty(), "{}", r.message);
    let o = r.output.expect("output");
    assert!(o.stdout.starts_with(b"first\n"), "{:?}", o.stdout);
    let pids = c.ready_pids(&p.process_id, 1).await;
    assert!(pids[0].alive());
    let running = c.list(pb::Scope::Project, false).await;
    assert!(
        running
            .iter()
            .any(|x| x.process_id == p.process_id && x.status == pb::ProcessStatus::Running as i32)
    );
}

#[tokio::test]
async fn commands_get_the_session_environment_overlay_cwd_and_marker() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("SESSION_ONLY_VAR", "from-session")]);
    let sub = d.dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    let r = c
        .exec_with(pb::ExecRequest {
            env: vec![pb::EnvVar {
                name: b"OVERLAY".to_vec(),
                value: b"over".to_vec(),
            }],
            cwd: Some(b"sub".to_vec()),
            yield_ms: Some(30_000),
            ..exec_req("echo $SESSION_ONLY_VAR $OVERLAY $YIELDSHELL_PROCESS_ID; pwd")
        })
        .await;
    let p = r.process.expect("process");
    let out = String::from_utf8(r.output.expect("output").stdout).expect("utf8");
    let expected_cwd = std::fs::canonicalize(&sub).expect("canon");
    assert_eq!(
        out,
        format!(
            "from-session over {}\n{}\n",
            p.process_id,
            expected_cwd.display()
        )
    );
}

#[tokio::test]
async fn managed_processes_inherit_only_stdio_and_a_clean_signal_state() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let fds = c.exec(&format!("exec {} fds", testbin())).await;
    assert_eq!(
        fds.output.expect("output").stdout,
        b"0\n1\n2\n3\n",
        "fd 3 is the /proc/self/fd listing itself"
    );
    // grep, not the Rust testbin: Rust's runtime ignores SIGPIPE in its own processes.
    let sig = c
        .exec("exec grep -E '^Sig(Ign|Blk)' /proc/self/status")
        .await;
    let text = String::from_utf8(sig.output.expect("output").stdout).expect("utf8");
    assert!(text.contains("SigIgn:\t0000000000000000"), "{text}");
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
}

/// This process's umask (from `/proc/self/status`: reading it with umask(2) would change it
/// for a moment under the other tests' threads).
fn own_umask() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("Umask line");
    line.trim().to_string()
}

#[tokio::test]
async fn commands_run_under_the_users_umask_not_the_daemons_private_one() {
    // The daemon (started by this test) has this process's umask; its holders work under 077
    // for their own files, which a command must not inherit: a build would make every file
    // private.
    let d = TestDaemon::start().await;
    let c = d.session();
    let want = own_umask();
    for tty in [false, true] {
        let r = c
            .exec_with(pb::ExecRequest {
                tty,
                yield_ms: Some(30_000),
                ..exec_req("umask")
            })
            .await;
        let out = String::from_utf8(r.output.expect("output").stdout).expect("utf8");
        assert_eq!(out.trim(), want, "tty={tty}");
    }
}

#[tokio::test]
async fn write_reaches_stdin_and_eof_ends_cat() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg("cat").await;
    let w = c.write(&id, b"hello ", false).await.expect("write");
    assert!(w.ok);
    c.write(&id, b"cat\n", true).await.expect("write with eof");
    let r = c.wait_exit(&id).await;
    let p = r.process.expect("process");
    assert_eq!(p.exit_code, Some(0));
    let (out, _) = c.read_all(&id, 1000).await;
    assert_eq!(out, b"hello cat\n");
    // stdin is closed now: a further write is refused with its own kind.
    let err = c
        .write(&id, b"more", false)
        .await
        .expect_err("write after eof");
    let kind = ErrorKind::of_status(&err);
    assert!(
        matches!(kind, ErrorKind::StdinClosed | ErrorKind::ProcessExited),
        "{kind}: {}",
        err.message()
    );
}

#[tokio::test]
async fn exec_stdin_with_close_stdin_feeds_commands_that_read_to_eof() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(b"b\na\n".to_vec()),
            close_stdin: true,
            yield_ms: Some(30_000),
            ..exec_req("sort")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    assert_eq!(r.output.expect("output").stdout, b"a\nb\n");
}

#[tokio::test]
async fn unknown_ids_get_a_clear_not_found() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let err = c
        .read(pb::ReadRequest {
            process_id: "proc_doesnotexist".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown id");
    assert_eq!(ErrorKind::of_status(&err), ErrorKind::UnknownProcess);
    assert!(err.message().contains("proc_doesnotexist"));
    let err = c
        .stop("proc_nope", "TERM", 100)
        .await
        .expect_err("unknown id");
    assert_eq!(ErrorKind::of_status(&err), ErrorKind::UnknownProcess);
}

#[tokio::test]
async fn a_timeout_kills_the_tree_and_reports_timed_out() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            timeout_ms: Some(2_000),
            yield_ms: Some(0),
            ..exec_req(&format!("{} ready-sleep 60 & wait", testbin()))
        })
        .await;
    let id = r.process.expect("process").process_id;
    // Gate on the grandchild being up, so the assertion below is about a real process.
    let pids = c.ready_pids(&id, 1).await;
    let w = c.wait_exit(&id).await;
    let p = w.process.expect("process");
    assert_eq!(p.status, pb::ProcessStatus::TimedOut as i32);
    assert_eq!(p.exit_code, None);
    assert!(p.signal.is_some());
    assert_eq!(p.ended_by.as_deref(), Some("timeout"));
    assert!(
        !pids[0].alive(),
        "grandchild {:?} survived the timeout",
        pids[0]
    );
}

#[tokio::test]
async fn a_client_may_choose_the_process_id_once_and_only_as_a_uuid() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let id = "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b";
    let chosen = |command: &str, id: &str| pb::ExecRequest {
        process_id: Some(id.to_string()),
        yield_ms: Some(30_000),
        ..exec_req(command)
    };
    let r = c.exec_with(chosen("echo chosen", id)).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    assert_eq!(r.process.expect("process").process_id, id);
    let read = c.read_since(id, 1, 1024).await;
    assert_eq!(read.output.expect("output").stdout, b"chosen\n");
    // Taken ids and other forms are refused before anything runs.
    for bad in [
        id,
        "proc_1a2b3c4d5e6f",
        "../escape",
        "0F8E2C1A-5B7D-4E3F-9A1B-2C3D4E5F6A7B",
    ] {
        let r = c.exec_with(chosen("echo again", bad)).await;
        assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{bad}");
        assert_eq!(r.error_kind, ErrorKind::InvalidArgument.as_str(), "{bad}");
        assert!(r.process.is_none());
    }
    // An empty id means "choose one for me", as before the field existed.
    let r = c.exec_with(chosen("true", "")).await;
    assert!(r.process.expect("process").process_id.starts_with("proc_"));
    // The id survives a daemon restart (it names the record) and stays taken.
    d.terminate();
    d.spawn().await;
    let c = d.session();
    let listed = c.list(pb::Scope::All, true).await;
    assert!(listed.iter().any(|p| p.process_id == id));
    let r = c.exec_with(chosen("true", id)).await;
    assert_eq!(r.error_kind, ErrorKind::InvalidArgument.as_str());
}
