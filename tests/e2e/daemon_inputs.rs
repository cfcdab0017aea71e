//! Issue 16 items 10, 12 and 13: every input of `exec`, `write`, `wait` and `stop` is bounded
//! (out of range is `invalid_argument` naming the field), stdin never holds a call past its
//! time, a large environment costs linear time, and the command line and name are redacted
//! like output.

use std::time::{Duration, Instant};

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::helper::{TIMEOUT, TestDaemon, eventually, exec_req};

/// More than a pipe buffer holds, so a process that does not read leaves the writer blocked.
const UNREAD_STDIN: usize = 200 * 1024;

fn invalid_argument_naming(kind: ErrorKind, message: &str, field: &str) {
    assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
    assert!(message.contains(field), "names {field}: {message}");
}

#[tokio::test]
async fn exec_yields_on_time_while_its_stdin_is_not_being_read() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let started = Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(vec![b'x'; UNREAD_STDIN]),
            yield_ms: Some(300),
            ..exec_req("sleep 60")
        })
        .await;
    let took = started.elapsed();
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    // The stdin writer gives up after 10 s; the yield is 300 ms. Before the fix the exec
    // waited for the writer.
    assert!(took < Duration::from_secs(5), "exec took {took:?}");
    let id = r.process.expect("process").process_id;
    c.stop(&id, "SIGKILL", 0).await.expect("stop");
}

#[tokio::test]
async fn a_write_behind_a_blocked_write_fails_fast_with_stdin_busy() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg("sleep 60").await;
    let blocked = {
        let c = d.session();
        let id = id.clone();
        tokio::spawn(async move { c.write(&id, &vec![b'x'; UNREAD_STDIN], false).await })
    };
    // A small write may still land before the big one; once the big one blocks, the next is
    // refused at once, while the big one is still pending (before the fix it queued behind it
    // and answered only when the first gave up).
    let status = eventually("a write to be refused as busy", || async {
        c.write(&id, b"y", false).await.err()
    })
    .await;
    assert!(!blocked.is_finished(), "the first write is still pending");
    assert_eq!(
        ErrorKind::of_status(&status),
        ErrorKind::StdinBusy,
        "{status:?}"
    );
    assert!(status.message().contains("still waiting"), "{status:?}");
    c.stop(&id, "SIGKILL", 0).await.expect("stop");
    let first = tokio::time::timeout(TIMEOUT, blocked)
        .await
        .expect("the blocked write ends with the process")
        .expect("join");
    assert!(first.is_err(), "a process that never read: {first:?}");
}

#[tokio::test]
async fn exec_stdin_comes_before_a_later_write() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(b"first ".to_vec()),
            yield_ms: Some(0),
            ..exec_req("cat")
        })
        .await;
    let id = r.process.expect("process").process_id;
    c.write(&id, b"second\n", true).await.expect("write");
    c.wait_exit(&id).await;
    let (out, _) = c.read_all(&id, 1 << 20).await;
    assert_eq!(out, b"first second\n");
}

#[tokio::test]
async fn out_of_range_numbers_are_refused_naming_the_field() {
    let d = TestDaemon::start().await;
    let c = d.session();
    for (field, req) in [
        (
            "yield_ms",
            pb::ExecRequest {
                yield_ms: Some(u64::MAX),
                ..exec_req("true")
            },
        ),
        (
            "timeout_ms",
            pb::ExecRequest {
                timeout_ms: Some(u64::MAX),
                ..exec_req("true")
            },
        ),
        (
            "stdin",
            pb::ExecRequest {
                stdin: Some(vec![b'x'; 8 * 1024 * 1024 + 1]),
                ..exec_req("true")
            },
        ),
    ] {
        let r = c.exec_with(req).await;
        assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{field}");
        let kind = ErrorKind::parse(&r.error_kind).expect("kind");
        invalid_argument_naming(kind, &r.error, field);
    }
    assert!(
        c.list(pb::Scope::All, true).await.is_empty(),
        "nothing started"
    );

    let id = c.spawn_bg("sleep 60").await;
    let started = Instant::now();
    let s = c.stop(&id, "SIGTERM", u64::MAX).await.expect_err("refused");
    invalid_argument_naming(ErrorKind::of_status(&s), s.message(), "force_after_ms");
    assert!(started.elapsed() < TIMEOUT, "answered at once");
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            timeout_ms: Some(u64::MAX),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    invalid_argument_naming(ErrorKind::of_status(&w), w.message(), "timeout_ms");
    // The largest accepted grace still works, and the process is still there to stop.
    let stopped = c.stop(&id, "SIGTERM", 600_000).await.expect("stop");
    assert!(stopped.stopped, "{stopped:?}");
}

#[tokio::test]
async fn a_large_environment_costs_linear_time_and_stalls_no_other_client() {
    const VARS: usize = 50_000;
    let d = TestDaemon::start().await;
    let c = d.session();
    let mut env: Vec<pb::EnvVar> = (0..VARS)
        .map(|i| pb::EnvVar {
            name: format!("V{i}").into_bytes(),
            value: b"1".to_vec(),
        })
        .collect();
    // A later entry of the same name wins.
    env.push(pb::EnvVar {
        name: format!("V{}", VARS - 1).into_bytes(),
        value: b"last".to_vec(),
    });
    let exec = {
        let c = d.session();
        let command = format!("echo $V0 $V{}", VARS - 1);
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c
                .exec_with(pb::ExecRequest {
                    env,
                    yield_ms: Some(TIMEOUT.as_millis() as u64),
                    ..exec_req(&command)
                })
                .await;
            (r, started.elapsed())
        })
    };
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    while !exec.is_finished() {
        let started = Instant::now();
        c.list(pb::Scope::All, true).await;
        slowest = slowest.max(started.elapsed());
        answered += 1;
    }
    let (r, took) = exec.await.expect("join");
    println!(
        "exec with {VARS} variables: {took:?}; {answered} lists meanwhile, slowest {slowest:?}"
    );
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stdout, b"1 last\n");
    // Before the fix (a linear search per variable) this took many seconds at full CPU.
    assert!(took < TIMEOUT, "exec took {took:?}");
    assert!(slowest < Duration::from_secs(5), "a list took {slowest:?}");

    let too_many: Vec<pb::EnvVar> = (0..=100_000)
        .map(|i| pb::EnvVar {
            name: format!("V{i}").into_bytes(),
            value: Vec::new(),
        })
        .collect();
    let r = c
        .exec_with(pb::ExecRequest {
            env: too_many,
            ..exec_req("true")
        })
        .await;
    let kind = ErrorKind::parse(&r.error_kind).expect("kind");
    invalid_argument_naming(kind, &r.error, "env");
}

#[tokio::test]
async fn the_command_and_name_are_stored_and_shown_redacted_but_run_as_sent() {
    let d = TestDaemon::start().await;
    let secret = "s3cr3t-token-value-0123456789";
    let c = d.session_with(&[("MY_API_TOKEN", secret)]);
    let out = d.dir.path().join("received");
    let r = c
        .exec_with(pb::ExecRequest {
            name: Some(format!("deploy with {secret}")),
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req(&format!("printf %s '{secret}' > '{}'", out.display()))
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    // The process got the real value.
    assert_eq!(std::fs::read_to_string(&out).expect("output file"), secret);
    let info = r.process.expect("process");
    let id = info.process_id.clone();
    let shown = |p: &pb::ProcessInfo| {
        let command = String::from_utf8_lossy(&p.command).into_owned();
        assert!(!command.contains(secret), "{command}");
        assert!(!p.name.contains(secret), "{}", p.name);
        assert_eq!(p.name, "deploy with [REDACTED:MY_API_TOKEN]");
        assert!(
            command.contains("printf %s '[REDACTED:MY_API_TOKEN]'"),
            "{command}"
        );
    };
    shown(&info);
    let listed = c.list(pb::Scope::All, true).await;
    shown(listed.iter().find(|p| p.process_id == id).expect("listed"));
    shown(&c.read_since(&id, 1, 1024).await.process.expect("process"));
    let record = d.state.join("procs").join(&id).join("record.json");
    let text = eventually("the final record", || async {
        let text = std::fs::read_to_string(&record).ok()?;
        text.contains("\"completed\"").then_some(text)
    })
    .await;
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("[REDACTED:MY_API_TOKEN]"), "{text}");

    // A secret of the exec's own overlay is redacted from its command too.
    let r = c
        .exec_with(pb::ExecRequest {
            env: vec![pb::EnvVar {
                name: b"DB_PASSWORD".to_vec(),
                value: b"hunter2hunter2".to_vec(),
            }],
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req("test \"$DB_PASSWORD\" = hunter2hunter2 && echo same")
        })
        .await;
    assert_eq!(r.output.expect("output").stdout, b"same\n");
    let command = r.process.expect("process").command;
    assert_eq!(
        String::from_utf8_lossy(&command),
        "test \"$DB_PASSWORD\" = [REDACTED:DB_PASSWORD] && echo same"
    );
}
