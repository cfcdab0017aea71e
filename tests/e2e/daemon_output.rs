//! The output model: sequence numbers, paging, the ring, stream filters, bytes, waits.

use yieldshell_proto::pb;
use yieldshell_tests::{bad_utf8_bytes, flood_byte};

use crate::helper::{TestDaemon, exec_req, run, testbin};

fn expected_flood(n: u64) -> Vec<u8> {
    (0..n).map(flood_byte).collect()
}

#[tokio::test]
async fn incremental_reads_by_next_seq_lose_and_repeat_nothing_even_when_capped() {
    let d = TestDaemon::start().await;
    // Ring larger than the output, so nothing is evicted.
    let c = d.session_with(&[("YIELDSHELL_MAX_BUFFER_BYTES", "1000000")]);
    let r = c
        .exec(&format!("{} flood 200000; echo tail >&2", testbin()))
        .await;
    let id = r.process.expect("process").process_id;
    for page in [997u64, 4096, 20_000] {
        let (out, err) = c.read_all(&id, page).await;
        assert_eq!(out.len(), 200_000, "page {page}");
        assert!(
            out == expected_flood(200_000),
            "stdout differs with page {page}"
        );
        assert_eq!(err, b"tail\n");
    }
    // One-byte pages over a short output still return every byte once.
    let small = c.exec("echo a; echo b >&2; printf 'é€'").await;
    let small_id = small.process.expect("process").process_id;
    let (out, err) = c.read_all(&small_id, 1).await;
    assert_eq!(out, "a\né€".as_bytes());
    assert_eq!(err, b"b\n");
    // A page that ends exactly at the end reports no more.
    let last = c.read_since(&id, 200_006, 10).await.output.expect("output");
    assert!(!last.has_more);
    assert!(last.stdout.is_empty() && last.stderr.is_empty());
}

/// Without a spool (`spool_max_bytes = 0`) the ring is all there is: a read from an evicted
/// `since_seq` says so once and starts at the oldest byte kept. (With a spool, the evicted bytes
/// come from disk: `read_spool`.)
#[tokio::test]
async fn ring_eviction_sets_truncated_once_and_resumes_at_the_oldest_byte() {
    let d = TestDaemon::start_configured(&[], "spool_max_bytes = 0\n").await;
    let c = d.session_with(&[("YIELDSHELL_MAX_BUFFER_BYTES", "1000")]);
    let r = c.exec(&format!("{} flood 5000", testbin())).await;
    let id = r.process.expect("process").process_id;
    let first = c.read_since(&id, 1, 100_000).await.output.expect("output");
    assert!(first.truncated, "bytes 1..4000 were evicted");
    assert_eq!(first.first_seq, 4001);
    assert_eq!(first.stdout, expected_flood(5000)[4000..].to_vec());
    let again = c
        .read_since(&id, first.next_seq, 100_000)
        .await
        .output
        .expect("output");
    assert!(
        !again.truncated,
        "truncated must be set once, not on the next read"
    );
    assert!(again.stdout.is_empty());
    // The latest view never exceeds the cap and says earlier bytes exist.
    let latest = c
        .read(pb::ReadRequest {
            process_id: id.clone(),
            max_output_bytes: Some(100),
            ..Default::default()
        })
        .await
        .expect("read")
        .output
        .expect("output");
    assert_eq!(latest.stdout, expected_flood(5000)[4900..].to_vec());
    assert!(latest.truncated);
    assert_eq!(latest.next_seq, 5001);
}

#[tokio::test]
async fn stream_filters_return_only_that_stream_and_still_advance() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c.exec("echo o1; echo e1 >&2; echo o2; echo e2 >&2").await;
    let id = r.process.expect("process").process_id;
    for (streams, want_out, want_err) in [
        (pb::Streams::Stdout, &b"o1\no2\n"[..], &b""[..]),
        (pb::Streams::Stderr, &b""[..], &b"e1\ne2\n"[..]),
        (pb::Streams::Both, &b"o1\no2\n"[..], &b"e1\ne2\n"[..]),
    ] {
        let o = c
            .read(pb::ReadRequest {
                process_id: id.clone(),
                since_seq: Some(1),
                streams: streams as i32,
                ..Default::default()
            })
            .await
            .expect("read")
            .output
            .expect("output");
        assert_eq!(o.stdout, want_out, "{streams:?}");
        assert_eq!(o.stderr, want_err, "{streams:?}");
        assert_eq!(o.next_seq, 13);
    }
}

#[tokio::test]
async fn tail_lines_returns_the_last_lines() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c.exec("for i in 1 2 3 4 5; do echo line$i; done").await;
    let id = r.process.expect("process").process_id;
    let o = c
        .read(pb::ReadRequest {
            process_id: id,
            tail_lines: Some(2),
            ..Default::default()
        })
        .await
        .expect("read")
        .output
        .expect("output");
    assert_eq!(o.stdout, b"line4\nline5\n");
}

#[tokio::test]
async fn non_utf8_output_is_byte_exact_over_grpc_and_through_yieldctl_read() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c.exec(&format!("exec {} bad-utf8", testbin())).await;
    let id = r.process.expect("process").process_id;
    let (out, _) = c.read_all(&id, 7_000).await;
    assert!(out == bad_utf8_bytes(), "gRPC bytes differ");
    let cli = run(d.yieldctl().args(["read", &id]));
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(cli.stdout == bad_utf8_bytes(), "yieldctl read bytes differ");
}

#[tokio::test]
async fn wait_returns_on_exit_and_a_deadline_leaves_the_process_running() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 60", testbin()))
        .await;
    let pid = c.ready_pids(&id, 1).await[0];
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            timeout_ms: Some(200),
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::DeadlineReached as i32);
    assert_eq!(
        w.process.expect("process").status,
        pb::ProcessStatus::Running as i32
    );
    assert!(pid.alive(), "an expired wait must not kill");

    let quick = c.spawn_bg("read line; echo got $line").await;
    c.write(&quick, b"x\n", false).await.expect("write");
    let w = c.wait_exit(&quick).await;
    let p = w.process.expect("process");
    assert_eq!(p.status, pb::ProcessStatus::Completed as i32);
    assert_eq!(w.output.expect("output").stdout, b"got x\n");
}

#[tokio::test]
async fn a_descendant_holding_the_pipes_does_not_hang_wait_and_its_output_is_kept() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate file");
    let cmd = format!(
        "echo leader; (while [ -e {g} ]; do sleep 0.05; done; echo late) & exit 0",
        g = gate.display()
    );
    let r = c.exec(&cmd).await;
    // The leader exited: exec returns (no hang) and says descendants still run.
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    let p = r.process.expect("process");
    assert_eq!(p.exit_code, Some(0));
    assert!(
        p.descendants_running >= 1,
        "descendants_running = {}",
        p.descendants_running
    );
    let w = c.wait_exit(&p.process_id).await;
    assert_eq!(w.result, pb::WaitResult::Exited as i32);
    // Release the descendant: its later output is still captured.
    std::fs::remove_file(&gate).expect("open gate");
    crate::helper::eventually("late output", || async {
        let (out, _) = c.read_all(&p.process_id, 1000).await;
        (out == b"leader\nlate\n").then_some(())
    })
    .await;
}

#[tokio::test]
async fn wait_until_matches_a_line_printed_before_the_call() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!(
            "echo booting; echo listening on 8080; exec {} ready-sleep 60",
            testbin()
        ))
        .await;
    c.ready_pids(&id, 1).await;
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            until: Some("listening on \\d+".into()),
            timeout_ms: Some(30_000),
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::Matched as i32);
    assert_eq!(w.matched_line, b"listening on 8080");
    assert_eq!(w.matched_seq, Some(9));
    let bad = c
        .wait(pb::WaitRequest {
            process_id: id,
            until: Some("(".into()),
            ..Default::default()
        })
        .await
        .expect_err("bad regex");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn exec_response_shows_the_latest_output_capped() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            max_output_bytes: Some(10),
            yield_ms: Some(30_000),
            ..exec_req("printf '0123456789abcdefghij'")
        })
        .await;
    let o = r.output.expect("output");
    assert_eq!(o.stdout, b"abcdefghij");
    assert!(o.truncated);
    assert_eq!((o.first_seq, o.next_seq), (11, 21));
}
