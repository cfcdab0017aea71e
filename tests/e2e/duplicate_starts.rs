//! Duplicate starts (README, "Tools": `exec`; issue 25 item 10): an agent that re-runs a command
//! still running gets that process (`reused: true`, its latest output) instead of a second copy;
//! a different name, directory or environment starts another; so does the same command once the
//! first has ended. Through a real MCP client over the built shim.

use serde_json::{Value, json};

use crate::helper::{TestDaemon, run, testbin};
use crate::mcp::{Mcp, body};

fn exec(command: &str, extra: Value) -> Value {
    let mut args = json!({"command": command, "side_effects": ["NONE"], "yield_ms": 0});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        args[k] = v;
    }
    args
}

/// The running processes whose command is `command`, as `ps` lists them.
async fn running(mcp: &Mcp, command: &str) -> Vec<String> {
    let ps = body(&mcp.call("ps", json!({"scope": "all"})).await);
    ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["command"] == command && p["status"] == "running")
        .map(|p| p["process_id"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test]
async fn an_identical_exec_returns_the_running_process_instead_of_a_second_copy() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let tb = testbin();
    let command = format!("{tb} tick 100000");
    let first = body(&mcp.call("exec", exec(&command, json!({}))).await);
    assert_eq!(first["status"], "backgrounded", "{first}");
    assert_eq!(
        first.get("reused"),
        None,
        "a new process is not reused: {first}"
    );
    let id = first["process_id"].clone();

    let again = body(
        &mcp.call("exec", exec(&command, json!({"yield_ms": 60_000})))
            .await,
    );
    assert_eq!(again["process_id"], id, "{again}");
    assert_eq!(again["reused"], true, "{again}");
    assert_eq!(again["status"], "backgrounded", "{again}");
    let message = again["message"].as_str().unwrap_or_default();
    assert!(message.contains("Already running"), "{message}");
    assert!(
        again["duration_ms"].as_u64().is_some_and(|ms| ms < 60_000),
        "a reused process had its yield already: the call does not wait another: {again}"
    );
    assert_eq!(running(&mcp, &command).await, [id.as_str().expect("id")]);

    // Whatever differs in what runs starts another: a name, a directory, the environment.
    let sub = d.dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    for extra in [
        json!({"name": "second"}),
        json!({"cwd": sub.display().to_string()}),
        json!({"env": {"PORT": "1"}}),
        json!({"tty": true}),
    ] {
        let other = body(&mcp.call("exec", exec(&command, extra.clone())).await);
        assert_eq!(other["status"], "backgrounded", "{extra}: {other}");
        assert_ne!(other["process_id"], id, "{extra}: {other}");
        assert_eq!(other.get("reused"), None, "{extra}: {other}");
        // Repeated, each of those is reused in its turn.
        let twin = body(&mcp.call("exec", exec(&command, extra.clone())).await);
        assert_eq!(twin["process_id"], other["process_id"], "{extra}: {twin}");
        assert_eq!(twin["reused"], true, "{extra}: {twin}");
    }
    assert_eq!(running(&mcp, &command).await.len(), 5);

    // Input for the command is meant for a new process: never reused.
    let with_stdin = body(
        &mcp.call("exec", exec(&command, json!({"stdin": "x\n"})))
            .await,
    );
    assert_ne!(with_stdin["process_id"], id, "{with_stdin}");

    // Once the first has ended, the same exec starts it again.
    let stopped = body(&mcp.call("stop", json!({"process_id": id})).await);
    assert_eq!(stopped["stopped"], true, "{stopped}");
    let fresh = body(&mcp.call("exec", exec(&command, json!({}))).await);
    assert_ne!(fresh["process_id"], id, "{fresh}");
    assert_eq!(fresh.get("reused"), None, "{fresh}");
    mcp.close().await;
}

#[tokio::test]
async fn identical_execs_at_once_start_one_process() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let tb = testbin();
    let command = format!("{tb} tick 100000");
    let call = || mcp.call("exec", exec(&command, json!({})));
    let (a, b, c, e) = tokio::join!(call(), call(), call(), call());
    let answers: Vec<Value> = [a, b, c, e].iter().map(body).collect();
    let ids: std::collections::HashSet<_> = answers
        .iter()
        .map(|a| a["process_id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let reused = answers.iter().filter(|a| a["reused"] == true).count();
    assert_eq!(reused, 3, "{answers:?}");
    assert_eq!(running(&mcp, &command).await.len(), 1);
    mcp.close().await;
}

/// `yieldctl exec` starts what a person types, every time; an agent's identical `exec` then
/// finds the process the person started.
#[tokio::test]
async fn yieldctl_always_starts_and_an_agents_exec_reuses_what_it_started() {
    let d = TestDaemon::start().await;
    let tb = testbin();
    let command = format!("{tb} tick 100000");
    let start = || {
        let out = run(d
            .yieldctl()
            .args([
                "--json",
                "exec",
                "--yield-ms",
                "0",
                "--side-effects",
                "NONE",
                "--",
            ])
            .arg(&command)
            .current_dir(d.dir.path()));
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v["process_id"].as_str().expect("id").to_string()
    };
    let (a, b) = (start(), start());
    assert_ne!(a, b, "yieldctl starts a second copy when asked to");
    let mcp = Mcp::start(&d, &[]).await;
    let agent = body(&mcp.call("exec", exec(&command, json!({}))).await);
    assert_eq!(agent["reused"], true, "{agent}");
    assert_eq!(agent["process_id"], b, "the newest copy: {agent}");
    mcp.close().await;
}

/// A process re-adopted by a later daemon is still recognised (its record keeps the digest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_process_is_reused_after_a_daemon_restart() {
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let tb = testbin();
    let command = format!("{tb} tick 100000");
    let mcp = Mcp::start(&d, &[]).await;
    let first = body(
        &mcp.call("exec", exec(&command, json!({"env": {"A": "1"}})))
            .await,
    );
    mcp.close().await;
    let restarted = run(d.yieldctl().args(["daemon", "restart"]));
    assert!(restarted.status.success(), "{restarted:?}");
    let mcp = Mcp::start(&d, &[]).await;
    let again = body(
        &mcp.call("exec", exec(&command, json!({"env": {"A": "1"}})))
            .await,
    );
    assert_eq!(again["process_id"], first["process_id"], "{again}");
    assert_eq!(again["reused"], true, "{again}");
    let other = body(
        &mcp.call("exec", exec(&command, json!({"env": {"A": "2"}})))
            .await,
    );
    assert_ne!(other["process_id"], first["process_id"], "{other}");
    mcp.close().await;
}
