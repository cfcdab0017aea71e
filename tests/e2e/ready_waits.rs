//! Ready-waits (README, "An agent session", issue 11 item 2): `exec(until)` returns at the first matching output
//! line with the process still running, `write(until)` returns a REPL's answer in one call — both
//! through the real shim and daemon, and through `yieldctl`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helper::{TestDaemon, eventually, json as json_of, require_tool};
use crate::mcp::{Mcp, body, is_error};

/// A "server" that prints its URL only once the test removes `gate`; `started` tells the test it
/// is waiting there.
fn gated_server(d: &TestDaemon) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let (gate, wait) = crate::mcp::gate(d.dir.path(), "gate");
    let started = d.dir.path().join("started");
    let command = format!(
        "echo booting; touch {started}; {wait}; \
         echo 'listening on http://127.0.0.1:8080'; exec sleep 600",
        started = started.display(),
    );
    (gate, started, command)
}

#[tokio::test]
async fn exec_until_returns_at_the_url_line_while_the_server_keeps_running() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let (gate, started, command) = gated_server(&d);
    let began = Instant::now();
    let (r, ()) = tokio::join!(
        mcp.call(
            "exec",
            json!({"command": command, "side_effects": ["NONE"], "until": "listening on", "yield_ms": 60_000}),
        ),
        async {
            eventually("the server to wait at its gate", || async {
                started.exists().then_some(())
            })
            .await;
            std::fs::remove_file(&gate).expect("open the gate");
        }
    );
    let elapsed = began.elapsed();
    assert!(!is_error(&r), "{r:?}");
    let b = body(&r);
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert_eq!(b["matched_line"], "listening on http://127.0.0.1:8080");
    let stdout = b["stdout"].as_str().expect("stdout");
    assert!(
        stdout.starts_with("booting\nlistening on http://127.0.0.1:8080"),
        "{stdout}"
    );
    // It returned at the line, far before the yield time.
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    let id = b["process_id"].as_str().expect("id").to_string();
    let read = body(&mcp.call("read", json!({"process_id": id})).await);
    assert_eq!(
        read["status"], "running",
        "the server keeps running: {read}"
    );
    let stop = body(&mcp.call("stop", json!({"process_id": id})).await);
    assert_eq!(stop["stopped"], true);
    mcp.close().await;
}

#[tokio::test]
async fn exec_until_with_progress_matches_after_the_first_heartbeat_too() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let (gate, _started, command) = gated_server(&d);
    // With a progress token the shim waits in slices; the line comes only after a progress
    // notification went out, so the match is found by a later slice.
    let (r, ()) = tokio::join!(
        mcp.call_with_progress(
            "exec",
            json!({"command": command, "side_effects": ["NONE"], "until": "listening on", "yield_ms": 60_000}),
        ),
        async {
            eventually("a progress notification", || async {
                (!mcp.progress().is_empty()).then_some(())
            })
            .await;
            std::fs::remove_file(&gate).expect("open the gate");
        }
    );
    let b = body(&r);
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert_eq!(b["matched_line"], "listening on http://127.0.0.1:8080");
    let id = b["process_id"].as_str().expect("id");
    let stop = body(&mcp.call("stop", json!({"process_id": id})).await);
    assert_eq!(stop["stopped"], true, "it was still running");
    mcp.close().await;
}

#[tokio::test]
async fn exec_until_without_a_match_returns_at_yield_ms_or_at_exit() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    // Still running at yield_ms: backgrounded, nothing matched.
    let began = Instant::now();
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo up; exec sleep 600", "side_effects": ["NONE"], "until": "never printed", "yield_ms": 400}),
        )
        .await,
    );
    assert!(began.elapsed() >= Duration::from_millis(400));
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert_eq!(b["matched_line"], Value::Null);
    assert_eq!(b["stdout"], "up\n");
    let id = b["process_id"].as_str().expect("id");
    mcp.call("stop", json!({"process_id": id})).await;
    // Exits first: completed at once with its exit code, the yield time not waited out.
    let began = Instant::now();
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo one; echo two; exit 3", "side_effects": ["NONE"], "until": "never printed", "yield_ms": 60_000}),
        )
        .await,
    );
    assert!(began.elapsed() < Duration::from_secs(30));
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["exit_code"], 3);
    assert_eq!(b["stdout"], "one\ntwo\n");
    assert_eq!(b["matched_line"], Value::Null);
    mcp.close().await;
}

#[tokio::test]
async fn an_invalid_until_is_refused_before_anything_runs_or_is_written() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let marker = d.dir.path().join("ran");
    let r = mcp
        .call(
            "exec",
            json!({"command": format!("touch {}", marker.display()), "side_effects": ["NONE"], "until": "(unclosed"}),
        )
        .await;
    assert!(is_error(&r));
    let b = body(&r);
    assert_eq!(b["status"], "failed_to_start");
    assert_eq!(b["error_kind"], "invalid_argument");
    assert!(b["error"].as_str().expect("error").contains("until"), "{b}");
    assert!(!marker.exists(), "nothing ran");
    // write: refused before the input reaches the process.
    let cat = body(
        &mcp.call(
            "exec",
            json!({"command": "cat", "side_effects": ["NONE"], "yield_ms": 0}),
        )
        .await,
    );
    let id = cat["process_id"].as_str().expect("id");
    let r = mcp
        .call(
            "write",
            json!({"process_id": id, "input": "lost?\n", "until": "["}),
        )
        .await;
    assert!(is_error(&r));
    let b = body(&r);
    assert_eq!(b["error_kind"], "invalid_argument");
    assert_eq!(b["ok"], false);
    let echoed = body(
        &mcp.call(
            "write",
            json!({"process_id": id, "input": "kept\n", "until": "kept"}),
        )
        .await,
    );
    assert_eq!(
        echoed["stdout"], "kept\n",
        "the refused input was never written"
    );
    mcp.call("stop", json!({"process_id": id})).await;
    mcp.close().await;
}

#[tokio::test]
async fn write_until_returns_the_answer_printed_right_after_the_write() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    // cat answers the moment the input arrives, before the call could start looking: the wait
    // counts from the write's position, so the answer is still found — and output from before
    // the write is not part of it.
    let cat = body(
        &mcp.call(
            "exec",
            json!({"command": "echo before; exec cat", "side_effects": ["NONE"], "until": "before"}),
        )
        .await,
    );
    let id = cat["process_id"].as_str().expect("id");
    for word in ["hello", "again"] {
        let r = mcp
            .call(
                "write",
                json!({"process_id": id, "input": word, "newline": true, "until": format!("^{word}$")}),
            )
            .await;
        assert!(!is_error(&r), "{r:?}");
        let b = body(&r);
        assert_eq!(b["wait_result"], "matched", "{b}");
        assert_eq!(b["matched_line"], word);
        assert_eq!(b["stdout"], format!("{word}\n"));
        assert_eq!(b["status"], "running");
        assert!(b["next_seq"].as_u64().is_some());
    }
    // Without a match: timeout_ms ends the wait, the process runs on.
    let b = body(
        &mcp.call(
            "write",
            json!({"process_id": id, "input": "x\n", "until": "never", "timeout_ms": 300}),
        )
        .await,
    );
    assert_eq!(b["wait_result"], "deadline_reached", "{b}");
    assert_eq!(b["stdout"], "x\n");
    // eof: cat exits, which ends the wait too.
    let b = body(
        &mcp.call(
            "write",
            json!({"process_id": id, "input": "", "eof": true, "until": "never"}),
        )
        .await,
    );
    assert_eq!(b["wait_result"], "exited", "{b}");
    assert_eq!(b["exit_code"], 0);
    mcp.close().await;
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_python_repl_takes_one_write_until_per_exchange() {
    require_tool("python3", "python3");
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let repl = body(
        &mcp.call(
            "exec",
            json!({"command": "python3 -u -q -i", "side_effects": ["NONE"], "until": ">>> "}),
        )
        .await,
    );
    assert_eq!(repl["matched_line"], ">>> ", "{repl}");
    let id = repl["process_id"].as_str().expect("id");
    for (expr, answer) in [("2+2", "4"), ("6*7", "42")] {
        let b = body(
            &mcp.call(
                "write",
                json!({"process_id": id, "input": expr, "newline": true, "until": format!("^{answer}$")}),
            )
            .await,
        );
        assert_eq!(b["wait_result"], "matched", "{b}");
        assert_eq!(b["matched_line"], answer, "{b}");
        // Python may write the newline after the answer separately; a line still without its
        // newline matches once nothing more is pending (as prompts do), so that newline may end
        // this answer or start the next one.
        assert_eq!(b["stdout"].as_str().map(str::trim), Some(answer), "{b}");
    }
    let b = body(
        &mcp.call(
            "write",
            json!({"process_id": id, "input": "exit()", "newline": true, "until": "never"}),
        )
        .await,
    );
    assert_eq!(b["wait_result"], "exited", "{b}");
    assert_eq!(b["status"], "completed");
    mcp.close().await;
}

#[tokio::test]
async fn yieldctl_exec_until_and_write_until() {
    let d = TestDaemon::start().await;
    let (gate, started, command) = gated_server(&d);
    let mut exec = d.yieldctl();
    exec.args([
        "--json",
        "exec",
        "--side-effects",
        "NONE",
        "--yield-ms",
        "60000",
        "--until",
        "listening on",
        "--",
        &command,
    ]);
    let exec = std::thread::spawn(move || exec.output().expect("yieldctl exec"));
    eventually("the server to wait at its gate", || async {
        started.exists().then_some(())
    })
    .await;
    std::fs::remove_file(&gate).expect("open the gate");
    let out = tokio::task::spawn_blocking(move || exec.join().expect("join"))
        .await
        .expect("join");
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out);
    assert_eq!(v["status"], "backgrounded", "{v}");
    assert_eq!(v["matched_line"], "listening on http://127.0.0.1:8080");
    let server = v["process_id"].as_str().expect("id").to_string();

    // write --until: the answer on stdout, in one call.
    let out = d
        .yieldctl()
        .args([
            "--json",
            "exec",
            "--side-effects",
            "NONE",
            "--yield-ms",
            "0",
            "--",
            "exec cat",
        ])
        .output()
        .expect("yieldctl exec");
    let cat = json_of(&out)["process_id"]
        .as_str()
        .expect("id")
        .to_string();
    let out = d
        .yieldctl()
        .args(["write", &cat, "ping", "--newline", "--until", "^ping$"])
        .output()
        .expect("yieldctl write");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"ping\n");
    let out = d
        .yieldctl()
        .args([
            "write",
            &cat,
            "pong",
            "--newline",
            "--until",
            "never",
            "--timeout",
            "200",
        ])
        .output()
        .expect("yieldctl write");
    assert_eq!(out.stdout, b"pong\n");
    assert!(!out.status.success(), "no match is not success: {out:?}");
    for id in [server, cat] {
        let s = d.yieldctl().args(["stop", &id]).output().expect("stop");
        assert!(s.status.success(), "{s:?}");
    }
}
