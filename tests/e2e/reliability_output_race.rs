//! An ended status comes only with complete output (issue 16, item 2).
//!
//! A client that reads a background process by `next_seq` and stops at the first status that is
//! no longer `running` must already hold every byte up to EOF: the last output of a failing
//! command is usually its error message. Before the fix, the shell's exit set `completed` while
//! the pipe readers still held its last bytes, so about one such loop in 200 (one in 20 under
//! load) ended with an empty read and lost the output.
//!
//! Several workers run the loop at once, which is also the load that widens the race. Half of the
//! runs watch the status through `read` itself, half through `ps` (`list`) and then read once.

use std::sync::Arc;
use std::time::Instant;

use yieldshell_proto::pb;

use crate::helper::{Client, TIMEOUT, TestDaemon};

/// Runs of the repro in total, spread over [`WORKERS`].
const RUNS: usize = 300;
/// Concurrent clients, each with its own run loop.
const WORKERS: usize = 10;
/// Prints its last output right before failing, after a short delay so a reader is polling.
const COMMAND: &str = "sleep 0.1; printf x; exit 3";

/// What one run saw at the first non-running status: everything read so far, and the process.
struct Ending {
    how: &'static str,
    seen: Vec<u8>,
    process: pb::ProcessInfo,
}

/// Polls `read(since_seq = next_seq)` until the status is no longer `running`.
async fn end_through_read(c: &Client, id: &str, mut seq: u64, give_up: Instant) -> Ending {
    let mut seen = Vec::new();
    loop {
        let r = c.read_since(id, seq, 1 << 20).await;
        let out = r.output.expect("output");
        seen.extend_from_slice(&out.stdout);
        seen.extend_from_slice(&out.stderr);
        seq = out.next_seq;
        let process = r.process.expect("process");
        if process.status != pb::ProcessStatus::Running as i32 && !out.has_more {
            return Ending {
                how: "read",
                seen,
                process,
            };
        }
        assert!(
            Instant::now() < give_up,
            "{id} did not end within {TIMEOUT:?}"
        );
    }
}

/// Polls `ps` until the process is listed as no longer running, then reads once from `seq`.
async fn end_through_ps(c: &Client, id: &str, seq: u64, give_up: Instant) -> Ending {
    loop {
        let listed = c.list(pb::Scope::All, true).await;
        let p = listed
            .into_iter()
            .find(|p| p.process_id == id)
            .expect("the process is listed");
        if p.status != pb::ProcessStatus::Running as i32 {
            let r = c.read_since(id, seq, 1 << 20).await;
            let out = r.output.expect("output");
            let mut seen = out.stdout;
            seen.extend_from_slice(&out.stderr);
            return Ending {
                how: "ps",
                seen,
                process: p,
            };
        }
        assert!(
            Instant::now() < give_up,
            "{id} did not end within {TIMEOUT:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_ended_status_always_comes_with_the_complete_output() {
    let d = TestDaemon::start().await;
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let c = Arc::new(d.session());
        workers.push(tokio::spawn(async move {
            let mut wrong = Vec::new();
            for i in (w..RUNS).step_by(WORKERS) {
                let r = c
                    .exec_with(pb::ExecRequest {
                        yield_ms: Some(0),
                        ..crate::helper::exec_req(COMMAND)
                    })
                    .await;
                let id = r.process.expect("process").process_id;
                // What the exec already returned counts: a loaded machine may take longer than
                // the command's delay to answer it, and then the output comes with the exec.
                let out = r.output.expect("output");
                let (seq, mut given) = (out.next_seq, out.stdout);
                given.extend_from_slice(&out.stderr);
                let give_up = Instant::now() + TIMEOUT;
                let mut end = if i % 2 == 0 {
                    end_through_read(&c, &id, seq, give_up).await
                } else {
                    end_through_ps(&c, &id, seq, give_up).await
                };
                given.append(&mut end.seen);
                end.seen = given;
                let complete = end.seen == b"x"
                    && end.process.exit_code == Some(3)
                    && end.process.status == pb::ProcessStatus::Completed as i32;
                if !complete {
                    wrong.push(format!(
                        "run {i} ({}): output {:?}, status {}, exit code {:?}",
                        end.how,
                        String::from_utf8_lossy(&end.seen),
                        end.process.status,
                        end.process.exit_code
                    ));
                }
            }
            wrong
        }));
    }
    let mut wrong = Vec::new();
    for w in workers {
        wrong.extend(w.await.expect("worker"));
    }
    println!("{RUNS} runs in {:?}", started.elapsed());
    assert!(
        wrong.is_empty(),
        "{} of {RUNS} runs reported an ended status before their output was complete:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
