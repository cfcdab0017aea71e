//! Issue 29, item 6: an `exec`'s `timeout_ms` is a deadline the process keeps across daemons. A
//! `daemon restart` or a crash used to forget it, and the re-adopted process ran unbounded;
//! the record now keeps the absolute deadline, the re-adopting daemon re-arms it, and one that
//! passed while no daemon ran fires at once.

use std::time::{Duration, Instant};

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{
    Client, Pid, TestDaemon, eventually, eventually_blocking, exec_req, run, testbin,
};
use crate::mcp::{Mcp, body};

/// The timeout every test here gives: long enough that the daemon it was given to is still
/// running when the test restarts or kills it (asserted: the process is alive then).
const TIMEOUT_MS: u64 = 3_000;

/// Asserts `p` ended as a timeout ends it under one daemon (`daemon_exec.rs`,
/// `a_timeout_kills_the_tree_and_reports_timed_out`), and no earlier than its deadline.
fn assert_timed_out(p: &pb::ProcessInfo) {
    assert_eq!(p.status, pb::ProcessStatus::TimedOut as i32, "{p:?}");
    assert_eq!(p.exit_code, None, "{p:?}");
    assert!(p.signal.is_some(), "{p:?}");
    assert_eq!(p.ended_by.as_deref(), Some("timeout"), "{p:?}");
    assert!(
        p.duration_ms >= TIMEOUT_MS,
        "ended before its deadline: {p:?}"
    );
}

/// Waits until the process's deadline has passed: it is counted from the process's start,
/// which came before `answered` (the moment its `exec` answered). The passing of time is what
/// the test waits for, so this is a sleep, not a poll.
fn wait_past_the_deadline(answered: Instant) {
    let deadline = answered + Duration::from_millis(TIMEOUT_MS + 200);
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
}

/// A background `ready-sleep 600` with [`TIMEOUT_MS`], once it is ready: its id, its process,
/// and when its `exec` answered.
async fn timed_sleeper(c: &Client) -> (String, Pid, Instant) {
    let r = c
        .exec_with(pb::ExecRequest {
            timeout_ms: Some(TIMEOUT_MS),
            yield_ms: Some(0),
            ..exec_req(&format!("exec {} ready-sleep 600", testbin()))
        })
        .await;
    let answered = Instant::now();
    let id = r.process.expect("process").process_id;
    let pid = c.ready_pids(&id, 1).await[0];
    (id, pid, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_still_fires_after_a_daemon_restart() {
    // Auto-started by `daemon start`, so the fixture stops whichever daemon runs at the end.
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let c = d.session();
    let (id, pid, _) = timed_sleeper(&c).await;
    let restarted = run(d.yieldctl().args(["daemon", "restart"]));
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(pid.alive(), "the restart kept the process");

    let c = d.session();
    let w = c.wait_exit(&id).await;
    assert_timed_out(&w.process.expect("process"));
    assert!(!pid.alive(), "{pid:?} outlived its timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_that_passed_while_no_daemon_ran_fires_once_the_process_is_readopted() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let (id, pid, answered) = timed_sleeper(&c).await;
    d.kill9();
    assert!(pid.alive(), "the crash left the process to its holder");
    wait_past_the_deadline(answered);
    assert!(pid.alive(), "nothing timed it out while no daemon ran");

    d.spawn().await;
    let c = d.session();
    let w = c.wait_exit(&id).await;
    assert_timed_out(&w.process.expect("process"));
    assert!(!pid.alive(), "{pid:?} outlived its timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_profile_job_timeout_survives_a_daemon_crash() {
    let mut d = TestDaemon::start().await;
    // MCP_BG_JOB_TIMEOUT is in seconds.
    let secs = (TIMEOUT_MS / 1000).to_string();
    let mcp = Mcp::start_profile(&d, "jobs", &[("MCP_BG_JOB_TIMEOUT", secs.as_str())]).await;
    let gate = d.dir.path().join("job-started");
    let r = mcp
        .call(
            "execute",
            json!({"command": format!("echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 600", gate.display())}),
        )
        .await;
    let answered = Instant::now();
    let job = body(&r)["job_id"].as_str().expect("job_id").to_string();
    let pid: i32 = eventually_blocking("the job to start", || {
        std::fs::read_to_string(&gate).ok()?.trim().parse().ok()
    });
    let alive = || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    d.kill9();
    assert!(alive(), "the crash left the job to its holder");
    wait_past_the_deadline(answered);
    assert!(alive(), "nothing timed it out while no daemon ran");

    d.spawn().await;
    let status = eventually("the job to end", || async {
        let b = body(&mcp.call("status", json!({"job_id": job})).await);
        let s = b["status"].as_str().expect("status").to_string();
        (s != "running").then_some(s)
    })
    .await;
    // What a job timeout gives under one daemon (`profile_jobs.rs`).
    assert_eq!(status, "failed");
    eventually_blocking("the job's process to be gone", || (!alive()).then_some(()));
    mcp.close().await;
}
