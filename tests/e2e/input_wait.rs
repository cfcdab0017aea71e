//! "Input wanted" in pipe mode (issue 12, item 3; ARCHITECTURE.md, "Terminal processes"): `exec` yields early when the
//! command blocks reading its stdin, `read`/`wait`/`ps` say `waiting_for_input`,
//! `wait(for_input)` returns `input_wanted`, and the jobs profile's `interact` ends its settle
//! window on it. Real processes reach the blocked state themselves; nothing sleeps and hopes.
//! The detector reads `/proc`, so these run on Linux only.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{
    TestDaemon, eventually, eventually_blocking, exec_req, json as parse_json, run,
};
use crate::mcp::{Mcp, body, is_error, text_of};

/// The yield the early returns are measured against.
const LONG_YIELD_MS: u64 = 15_000;
/// What "well before the yield" means on a slow, shared machine.
const EARLY: Duration = Duration::from_secs(10);

async fn waiting(c: &crate::helper::Client, id: &str) -> Option<bool> {
    c.read(pb::ReadRequest {
        process_id: id.into(),
        max_output_bytes: Some(1),
        ..Default::default()
    })
    .await
    .expect("read")
    .process
    .expect("process")
    .waiting_for_input
}

#[tokio::test]
async fn exec_returns_early_when_the_command_reads_its_stdin_and_completes_after_a_write() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let started = Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(LONG_YIELD_MS),
            ..exec_req("echo 'name?'; read answer; echo got $answer")
        })
        .await;
    let took = started.elapsed();
    eprintln!("exec returned after {took:?}");
    assert!(
        took < EARLY,
        "exec waited {took:?} of its {LONG_YIELD_MS} ms"
    );
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    let p = r.process.expect("process");
    assert_eq!(p.waiting_for_input, Some(true), "{p:?}");
    assert_eq!(r.output.expect("output").stdout, b"name?\n");
    c.write(&p.process_id, b"yes\n", false)
        .await
        .expect("write");
    let w = c.wait_exit(&p.process_id).await;
    assert_eq!(w.output.expect("output").stdout, b"name?\ngot yes\n");
    let info = w.process.expect("process");
    assert_eq!(info.exit_code, Some(0));
    assert_eq!(info.waiting_for_input, None, "ended: not judged");
}

#[tokio::test]
async fn a_pipeline_blocked_in_cat_is_waiting_in_read_ps_and_yieldctl_ps() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg("sh -c 'cat | wc -l'").await;
    eventually("the pipeline to wait for input", || async {
        (waiting(&c, &id).await == Some(true)).then_some(())
    })
    .await;
    let listed = c.list(pb::Scope::All, true).await;
    let entry = listed.iter().find(|p| p.process_id == id).expect("listed");
    assert_eq!(entry.waiting_for_input, Some(true));

    let ps = parse_json(&run(d.yieldctl().args(["--json", "ps"])));
    let entry = ps["processes"]
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .expect("listed")
        .clone();
    assert_eq!(entry["waiting_for_input"], true, "{entry}");
    let human = run(d.yieldctl().args(["ps"]));
    let table = String::from_utf8_lossy(&human.stdout).into_owned();
    eprintln!("{table}");
    let row = table
        .lines()
        .find(|l| l.contains(&id))
        .expect("a row for the process");
    assert!(row.contains("running[input]"), "{table}");

    c.write(&id, b"a\nb\n", true).await.expect("write");
    let w = c.wait_exit(&id).await;
    assert_eq!(
        String::from_utf8_lossy(&w.output.expect("output").stdout).trim(),
        "2"
    );
}

#[tokio::test]
async fn busy_and_sleeping_processes_are_not_waiting_for_input() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let dir = d.dir.path();
    let busy_gate = dir.join("busy-started");
    let sleep_gate = dir.join("sleep-started");
    let busy = c
        .spawn_bg(&format!(
            "touch {}; while :; do echo busy; done",
            busy_gate.display()
        ))
        .await;
    let sleeper = c
        .spawn_bg(&format!("touch {}; sleep 60", sleep_gate.display()))
        .await;
    // A sleeping command must not end an exec early either: it waits out its yield.
    let started = Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(1_500),
            ..exec_req("sleep 60")
        })
        .await;
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32);
    assert_ne!(r.process.expect("process").waiting_for_input, Some(true));
    eventually_blocking("both commands to start", || {
        (busy_gate.exists() && sleep_gate.exists()).then_some(())
    });
    for _ in 0..5 {
        assert_eq!(waiting(&c, &busy).await, Some(false), "busy");
        assert_eq!(waiting(&c, &sleeper).await, Some(false), "sleeping");
    }
    let w = c
        .wait(pb::WaitRequest {
            process_id: sleeper.clone(),
            timeout_ms: Some(1_000),
            for_input: true,
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::DeadlineReached as i32);
    for id in [busy, sleeper] {
        c.stop(&id, "KILL", 0).await.expect("stop");
    }
}

#[tokio::test]
async fn wait_for_input_returns_input_wanted_and_yieldctl_wait_for_input_too() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg("read first; echo got $first; read second; echo got $second")
        .await;
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            timeout_ms: Some(30_000),
            for_input: true,
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::InputWanted as i32, "{w:?}");
    assert_eq!(w.process.expect("process").waiting_for_input, Some(true));

    c.write(&id, b"one\n", false).await.expect("write");
    let out = run(d
        .yieldctl()
        .args(["wait", "--for-input", "--timeout-ms", "30000", &id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("waiting for input"), "{said}");
    let out = run(d.yieldctl().args([
        "--json",
        "wait",
        "--for-input",
        "--timeout-ms",
        "30000",
        &id,
    ]));
    let v = parse_json(&out);
    assert_eq!(v["wait_result"], "input_wanted", "{v}");
    assert_eq!(v["stdout"], "got one\n", "{v}");

    // Once it has exited, for_input waits end as exits do.
    c.write(&id, b"two\n", false).await.expect("write");
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            timeout_ms: Some(30_000),
            for_input: true,
            ..Default::default()
        })
        .await
        .expect("wait");
    // Between the two writes it may be seen waiting again only if "two" was not read yet; it
    // was written before this wait, so the wait ends with the exit.
    assert_eq!(w.result, pb::WaitResult::Exited as i32, "{w:?}");
    assert_eq!(w.output.expect("output").stdout, b"got one\ngot two\n");
}

#[tokio::test]
async fn exec_stdin_that_is_consumed_is_not_reported_and_closed_stdin_never_is() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(b"hi\n".to_vec()),
            yield_ms: Some(LONG_YIELD_MS),
            ..exec_req("read x; echo got $x")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stdout, b"got hi\n");
    assert_eq!(r.process.expect("process").waiting_for_input, None);

    // Input that runs out: once it is consumed the command waits for more, and says so.
    let started = Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            stdin: Some(b"1\n".to_vec()),
            yield_ms: Some(LONG_YIELD_MS),
            ..exec_req("read a; echo a=$a; read b; echo b=$b")
        })
        .await;
    assert!(started.elapsed() < EARLY);
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stdout, b"a=1\n");
    let p = r.process.expect("process");
    assert_eq!(p.waiting_for_input, Some(true));
    c.stop(&p.process_id, "KILL", 0).await.expect("stop");

    // With stdin closed the command reads EOF: it runs to its end (or its yield), never "waits".
    let r = c
        .exec_with(pb::ExecRequest {
            close_stdin: true,
            yield_ms: Some(LONG_YIELD_MS),
            ..exec_req("cat; echo eof")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stdout, b"eof\n");
}

#[tokio::test]
async fn mcp_exec_and_wait_say_waiting_for_input() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let started = Instant::now();
    let r = mcp
        .call(
            "exec",
            json!({
                "command": "printf 'Continue? [y/N] '; read answer; echo \"answer: $answer\"",
                "side_effects": ["NONE"],
                "yield_ms": LONG_YIELD_MS,
            }),
        )
        .await;
    assert!(started.elapsed() < EARLY);
    eprintln!("MCP exec: {}", text_of(&r));
    let b = body(&r);
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert_eq!(b["waiting_for_input"], true, "{b}");
    assert_eq!(b["stdout"], "Continue? [y/N] ");
    let id = b["process_id"].as_str().expect("id").to_string();
    let b = body(
        &mcp.call(
            "wait",
            json!({"process_id": id, "for_input": true, "timeout_ms": 30_000}),
        )
        .await,
    );
    assert_eq!(b["wait_result"], "input_wanted", "{b}");
    assert_eq!(b["waiting_for_input"], true, "{b}");
    let r = mcp
        .call("write", json!({"process_id": id, "input": "y\n"}))
        .await;
    assert!(!is_error(&r), "{}", text_of(&r));
    let b = body(&mcp.call("wait", json!({"process_id": id})).await);
    assert_eq!(b["wait_result"], "exited", "{b}");
    assert_eq!(b["stdout"], "Continue? [y/N] answer: y\n");
    assert!(
        b.get("waiting_for_input").is_none(),
        "omitted when false: {b}"
    );
    mcp.close().await;
}

#[tokio::test]
async fn interact_ends_its_window_when_the_job_waits_for_input_again() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start_profile(&d, "jobs", &[]).await;
    let r = mcp
        .call("execute", json!({"command": "cat > /dev/null"}))
        .await;
    let id = body(&r)["job_id"].as_str().expect("job_id").to_string();
    let c = d.session();
    eventually("the job to read its stdin", || async {
        (waiting(&c, &id).await == Some(true)).then_some(())
    })
    .await;
    // Silent, it takes the input and waits for more: the window ends then, not after the
    // 2 s first-output wait.
    let started = Instant::now();
    let b = body(
        &mcp.call("interact", json!({"job_id": id, "input": "x"}))
            .await,
    );
    let took = started.elapsed();
    eprintln!("interact on a silent reader took {took:?}");
    assert_eq!(b, json!({"stdout": "", "stderr": ""}));
    assert!(
        took < Duration::from_millis(1_900),
        "interact waited out its first-output window ({took:?})"
    );
    mcp.call("kill", json!({"job_id": id})).await;
    mcp.close().await;
}

/// A dev server that reads keyboard shortcuts from its stdin (nodemon's `rs`) while it starts
/// its child is running, not waiting for input: `exec(until)` returns at its line, not early.
#[tokio::test]
#[ignore = "needs node: run .ci/test-extra"]
async fn a_dev_server_reading_shortcuts_from_stdin_is_not_waiting_for_input() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let script = "const cp = require('child_process');\
        cp.spawn('sleep', ['600'], {stdio: ['ignore', 'pipe', 'pipe']});\
        process.stdin.on('data', () => {});\
        setTimeout(() => require('net').createServer().listen(0, '127.0.0.1', function () {\
          console.log('ready ' + this.address().port); }), 1000);";
    let r = c
        .exec_with(pb::ExecRequest {
            until: Some("^ready ".into()),
            yield_ms: Some(30_000),
            ..exec_req(&format!("exec node -e \"{script}\""))
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    let line = String::from_utf8_lossy(&r.matched_line).into_owned();
    assert!(
        line.starts_with("ready "),
        "returned before its line: {r:?}"
    );
    let p = r.process.expect("process");
    assert_ne!(p.waiting_for_input, Some(true), "{p:?}");
    let port = line.trim().trim_start_matches("ready ");
    assert_eq!(p.listening, [format!("127.0.0.1:{port}")], "{p:?}");
    c.stop(&p.process_id, "SIGTERM", 2_000).await.expect("stop");
}
