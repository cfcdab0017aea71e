//! Issue 25 item 11: `read` with `grep` returns only the output lines that match a regex, each
//! with its `seq` and `context` lines around it, searched over the whole retained log (the
//! spool included), so finding the error in a 200k-line build log is one small call. Through a
//! real MCP client and `yieldctl read --grep`; bad patterns get clear errors.

use serde_json::{Value, json};
use yieldshell_proto::pb;

use crate::helper::{TestDaemon, exec_req, run};
use crate::mcp::{Mcp, body, is_error, text_of};

/// A 200,000-line build log with one error line (line 123,456) and, right after it, a warning on
/// stderr (stdout is flushed first, so the warning follows the error in the log).
const BUILD_LOG: &str = "seq 1 200000 | awk '$1 == 123456 { print \"error[E0308]: mismatched types at src/lib.rs:\" $1; fflush(); print \"warning: 1 error emitted\" > \"/dev/stderr\"; next } { print \"   Compiling crate_\" $1 \" v0.1.0\" }'";

async fn run_build_log(mcp: &Mcp) -> String {
    let r = body(
        &mcp.call(
            "exec",
            json!({"command": BUILD_LOG, "side_effects": ["NONE"], "yield_ms": 50000}),
        )
        .await,
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["stdout_lines"], 200_000);
    r["process_id"].as_str().expect("id").to_string()
}

/// The texts of an answer's lines, `(text, context, stderr)`.
fn texts(b: &Value) -> Vec<(String, bool, bool)> {
    b["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| {
            (
                l["text"].as_str().expect("text").to_string(),
                l["context"] == json!(true),
                l["stderr"] == json!(true),
            )
        })
        .collect()
}

#[tokio::test]
async fn mcp_grep_finds_the_error_in_a_200k_line_log_in_one_small_answer() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let id = run_build_log(&mcp).await;
    // What an agent asks: the error and the warning, a line of context each.
    let r = mcp
        .call(
            "read",
            json!({"process_id": id, "grep": "^error|^warning", "context": 1}),
        )
        .await;
    assert!(!is_error(&r), "{}", text_of(&r));
    let b = body(&r);
    let text = text_of(&r);
    println!("{} bytes: {text}", text.len());
    assert!(text.len() < 600, "{} bytes: {text}", text.len());
    let found = texts(&b);
    let error = "error[E0308]: mismatched types at src/lib.rs:123456";
    assert!(
        found.contains(&(error.to_string(), false, false)),
        "{found:?}"
    );
    assert!(
        found.contains(&("warning: 1 error emitted".to_string(), false, true)),
        "{found:?}"
    );
    assert!(
        found.contains(&("   Compiling crate_123455 v0.1.0".to_string(), true, false)),
        "{found:?}"
    );
    assert!(b.get("stdout").is_none() && b.get("stderr").is_none());
    assert_eq!(b["has_more"], false);
    assert_eq!(b["truncated"], false);
    assert_eq!(b["status"], "completed");
    // The stdout lines alone, in order, with their context.
    let out = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "grep": "^error", "context": 2, "streams": "stdout"}),
        )
        .await,
    );
    assert_eq!(
        texts(&out),
        [
            ("   Compiling crate_123454 v0.1.0", true),
            ("   Compiling crate_123455 v0.1.0", true),
            (error, false),
            ("   Compiling crate_123457 v0.1.0", true),
            ("   Compiling crate_123458 v0.1.0", true),
        ]
        .map(|(t, c)| (t.to_string(), c, false))
    );
    // The seq is an address: a read from it shows the line and what follows.
    let seq = out["lines"][2]["seq"].as_u64().expect("seq");
    let at = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "since_seq": seq, "max_output_bytes": error.len() + 1}),
        )
        .await,
    );
    assert_eq!(at["stdout"], format!("{error}\n"));
    // Searching on from next_seq finds nothing more.
    let again = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "grep": "^error", "since_seq": b["next_seq"]}),
        )
        .await,
    );
    assert_eq!(again["lines"], json!([]));
    assert_eq!(again["has_more"], false);
    // streams narrows the search.
    let only_err = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "grep": "error", "streams": "stderr"}),
        )
        .await,
    );
    assert_eq!(
        texts(&only_err),
        [("warning: 1 error emitted".to_string(), false, true)]
    );
    mcp.close().await;
}

/// The answer is bounded by `max_output_bytes`, and `next_seq` goes on exactly after what it
/// returned: following it finds every match once.
#[tokio::test]
async fn mcp_grep_pages_by_next_seq_and_finds_every_match_once() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let r = body(
        &mcp.call(
            "exec",
            json!({"command": "seq 1 100000", "side_effects": ["NONE"], "yield_ms": 30000}),
        )
        .await,
    );
    let id = r["process_id"].as_str().expect("id").to_string();
    let (mut found, mut since, mut calls) = (Vec::new(), 1u64, 0);
    loop {
        let b = body(
            &mcp.call(
                "read",
                json!({"process_id": id, "grep": "77$", "since_seq": since, "max_output_bytes": 200}),
            )
            .await,
        );
        calls += 1;
        let lines = b["lines"].as_array().expect("lines").clone();
        let bytes: usize = lines
            .iter()
            .map(|l| l["text"].as_str().unwrap_or("").len())
            .sum();
        assert!(bytes <= 200, "{bytes}");
        found.extend(
            lines
                .iter()
                .map(|l| l["text"].as_str().expect("text").to_string()),
        );
        since = b["next_seq"].as_u64().expect("next_seq");
        if b["has_more"] != json!(true) {
            break;
        }
    }
    let want: Vec<String> = (1..=100_000u64)
        .filter(|i| i % 100 == 77)
        .map(|i| i.to_string())
        .collect();
    assert_eq!(found, want);
    assert!(calls > 1, "the cap made it page");
    mcp.close().await;
}

#[tokio::test]
async fn bad_grep_arguments_are_clear_tool_errors() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let r = body(
        &mcp.call(
            "exec",
            json!({"command": "echo hi", "side_effects": ["NONE"], "yield_ms": 30000}),
        )
        .await,
    );
    let id = r["process_id"].as_str().expect("id").to_string();
    let cases: [(Value, &str); 4] = [
        (
            json!({"grep": "error("}),
            "grep is not a valid regular expression",
        ),
        (
            json!({"grep": "x", "context": 21}),
            "context must be between 0 and 20",
        ),
        (
            json!({"grep": "x", "tail_lines": 5}),
            "tail_lines is for the latest",
        ),
        (
            json!({"grep": "a".repeat(5000)}),
            "grep is 5000 bytes long; a pattern may be at most 4096",
        ),
    ];
    for (args, want) in cases {
        let mut call = json!({"process_id": id});
        for (k, v) in args.as_object().expect("object") {
            call[k] = v.clone();
        }
        let r = mcp.call("read", call).await;
        assert!(is_error(&r), "{args}");
        let b = body(&r);
        assert_eq!(b["error_kind"], "invalid_argument", "{args}: {b}");
        assert!(
            b["error"].as_str().expect("error").contains(want),
            "{args}: {}",
            b["error"]
        );
    }
    // An empty pattern is no search: the output as usual.
    let plain = body(
        &mcp.call("read", json!({"process_id": id, "grep": ""}))
            .await,
    );
    assert_eq!(plain["stdout"], "hi\n");
    mcp.close().await;
}

#[tokio::test]
async fn yieldctl_read_grep_prints_matches_like_grep() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            ..exec_req("seq 1 200000")
        })
        .await;
    let id = r.process.expect("process").process_id;
    let out = run(d
        .yieldctl()
        .args(["read", &id, "--grep", "^15000[01]$", "-C", "1"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Lines 1..=9 take 2 bytes each, 10..=99 3, … 10000..=99999 6, 100000.. 7.
    let start = |n: u64| -> u64 {
        let digits = |i: u64| i.to_string().len() as u64 + 1;
        (1..n).map(digits).sum::<u64>() + 1
    };
    let want = format!(
        "{}-149999\n{}:150000\n{}:150001\n{}-150002\n",
        start(149_999),
        start(150_000),
        start(150_001),
        start(150_002)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    // Every match, across as many searches as it takes (20,000 lines end in 0 or 5 … 0).
    let out = run(d.yieldctl().args(["read", &id, "--grep", "0$"]));
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout)
        .expect("utf8")
        .lines()
        .collect();
    assert_eq!(lines.len(), 20_000);
    assert!(lines.iter().all(|l| l.ends_with('0') && l.contains(':')));
    // --max-count stops there; no match exits 1 (as grep); a bad pattern is a usage error.
    let out = run(d.yieldctl().args(["read", &id, "--grep", "5$", "-m", "3"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split(':').nth(1).unwrap_or(""))
            .collect::<Vec<_>>(),
        ["5", "15", "25"]
    );
    let out = run(d.yieldctl().args(["read", &id, "--grep", "nothing"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let out = run(d.yieldctl().args(["read", &id, "--grep", "("]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("grep is not a valid regular expression"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // --json prints the MCP body of one search.
    let out = run(d
        .yieldctl()
        .args(["--json", "read", &id, "--grep", "^199999$"]));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["lines"],
        json!([{"seq": start(199_999), "text": "199999"}])
    );
}

/// A terminal process's lines are searched and shown as its text, escape sequences removed.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn grep_on_a_terminal_process_matches_its_text() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let r = body(
        &mcp.call(
            "exec",
            json!({
                "command": "seq 1 40000 | sed 's/^31337$/\\x1b[1;31mFAILED\\x1b[0m test 31337/'",
                "side_effects": ["NONE"],
                "yield_ms": 30000,
                "tty": true
            }),
        )
        .await,
    );
    assert_eq!(r["status"], "completed", "{r}");
    let id = r["process_id"].as_str().expect("id").to_string();
    let b = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "grep": "^FAILED test \\d+$"}),
        )
        .await,
    );
    let lines = b["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{b}");
    assert_eq!(lines[0]["text"], "FAILED test 31337");
    let raw = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "grep": "FAILED", "raw": true}),
        )
        .await,
    );
    assert!(
        raw["lines"][0]["text"]
            .as_str()
            .expect("text")
            .starts_with("\u{1b}[1;31mFAILED"),
        "{raw}"
    );
    mcp.close().await;
}
