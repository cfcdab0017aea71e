//! `wait(until)` on lines longer than the 64 KiB match window (issue 16, item 15): a match is
//! found anywhere in a line of any length, through the real daemon.

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, testbin};

#[tokio::test]
async fn wait_until_finds_a_match_deep_inside_a_line_far_over_64_kib() {
    let d = TestDaemon::start().await;
    let c = d.session();
    // One 300 KB line: 200 000 x, READY, 100 000 y (the match starts ~195 KiB in, past what a
    // first-64-KiB matcher saw), then the process stays up so only the match can end the wait.
    let id = c
        .spawn_bg(&format!(
            "head -c 200000 /dev/zero | tr '\\0' x; printf READY; head -c 100000 /dev/zero | tr '\\0' y; \
             echo; exec {} ready-sleep 60",
            testbin()
        ))
        .await;
    let w = c
        .wait(pb::WaitRequest {
            process_id: id.clone(),
            until: Some("xREADYy".into()),
            timeout_ms: Some(30_000),
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::Matched as i32, "{w:?}");
    assert_eq!(w.matched_seq, Some(1), "the line's start");
    assert!(w.matched_line.len() <= 64 * 1024);
    assert!(
        w.matched_line.windows(7).any(|s| s == b"xREADYy"),
        "matched_line is the window holding the match"
    );
    // `$` is the end of the line, never the end of a window inside it: `x$` cannot match (the
    // deadline ends that wait whatever the timing), `y$` does.
    let wait_for = |until: &str, timeout_ms| pb::WaitRequest {
        process_id: id.clone(),
        until: Some(until.into()),
        timeout_ms: Some(timeout_ms),
        ..Default::default()
    };
    let w = c.wait(wait_for("x$", 500)).await.expect("wait");
    assert_eq!(w.result, pb::WaitResult::DeadlineReached as i32, "{w:?}");
    let w = c.wait(wait_for("y$", 30_000)).await.expect("wait");
    assert_eq!(w.result, pb::WaitResult::Matched as i32, "{w:?}");
    assert_eq!(w.matched_seq, Some(1));
}
