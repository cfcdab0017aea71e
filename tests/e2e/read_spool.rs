//! Issue 25 item 3: a forward `read` (`since_seq`) reaches output that left the in-memory ring,
//! from the spool on disk, for every client: the MCP `read` tool, `yieldctl read` (no `--all`
//! needed) and the Read RPC. `truncated` is set only where bytes are retained nowhere (past the
//! spool's cap), and following `next_seq` returns every byte exactly once, while the process
//! still writes its spool too. Spooled bytes are redacted; a terminal's answers stay
//! escape-free.

use serde_json::{Value, json};
use yieldshell_proto::pb;
use yieldshell_tests::is_flood_at;

use crate::helper::{TIMEOUT, TestDaemon, eventually, exec_req, run, testbin};
use crate::mcp::{Mcp, body};

/// `seq 1 N`'s output.
fn seq_output(n: u64) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// Pages an MCP `read` from `since_seq` 1 by `next_seq` to the end: the text, and each page's
/// body.
async fn mcp_read_all(mcp: &Mcp, id: &str, args: Value) -> (String, Vec<Value>) {
    let mut text = String::new();
    let mut pages = Vec::new();
    let mut seq = 1u64;
    loop {
        let mut call = json!({"process_id": id, "since_seq": seq});
        for (k, v) in args.as_object().expect("object") {
            call[k] = v.clone();
        }
        let b = body(&mcp.call("read", call).await);
        text.push_str(b["stdout"].as_str().expect("stdout"));
        seq = b["next_seq"].as_u64().expect("next_seq");
        let more = b["has_more"] == json!(true);
        pages.push(b);
        if !more {
            return (text, pages);
        }
    }
}

/// The case: `seq 1 100000` prints 588,895 bytes, the ring keeps 256 KiB. MCP `read`
/// from `since_seq: 1` used to start at `first_seq: 326752` (`truncated`); it starts at 1 now,
/// and paging by `next_seq` returns the whole output exactly once.
#[tokio::test]
async fn mcp_read_pages_from_the_start_through_bytes_the_ring_no_longer_holds() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let r = body(
        &mcp.call(
            "exec",
            json!({"command": "seq 1 100000", "side_effects": ["NONE"], "yield_ms": 30000}),
        )
        .await,
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["truncated"], true, "the latest view leaves the start out");
    let id = r["process_id"].as_str().expect("id").to_string();
    let first = body(
        &mcp.call("read", json!({"process_id": id, "since_seq": 1}))
            .await,
    );
    assert_eq!(first["first_seq"], 1, "{}", first["first_seq"]);
    assert_eq!(first["truncated"], false);
    assert!(
        first["stdout"]
            .as_str()
            .expect("stdout")
            .starts_with("1\n2\n3\n"),
        "{}",
        &first["stdout"].as_str().unwrap_or_default()[..40]
    );
    assert_eq!(first["has_more"], true);
    let (all, pages) = mcp_read_all(&mcp, &id, json!({})).await;
    assert!(all == seq_output(100_000), "every byte once, in order");
    assert!(pages.iter().all(|p| p["truncated"] == false));
    // A page from the middle of the evicted part starts exactly there.
    let mid = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "since_seq": 100_001, "max_output_bytes": 12}),
        )
        .await,
    );
    let want = &seq_output(100_000)[100_000..100_012];
    assert_eq!(mid["stdout"], want);
    assert_eq!(mid["first_seq"], 100_001);
    assert_eq!(mid["next_seq"], 100_013);
    mcp.close().await;
}

/// `yieldctl read ID` (no `--all`) prints the whole output and exits 0; before, it printed the
/// ring's part, named the rest "retained nowhere" and exited 5.
#[tokio::test]
async fn yieldctl_read_prints_everything_without_all() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            ..exec_req("seq 1 100000")
        })
        .await;
    let id = r.process.expect("process").process_id;
    for args in [vec!["read", &id], vec!["read", &id, "--since", "1"]] {
        let out = run(d.yieldctl().args(&args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        assert!(out.stdout == seq_output(100_000).as_bytes(), "{args:?}");
    }
    // `--all` is still accepted (scripts use it) and prints the same.
    let out = run(d.yieldctl().args(["read", &id, "--all"]));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout == seq_output(100_000).as_bytes());
}

/// Pages through a running process's output with the Read RPC while its holder is writing the
/// spool: bytes from the spool, then the ring, then the spool again as the ring moves on, each
/// exactly once, never `truncated`.
#[tokio::test]
async fn reads_of_a_running_flood_return_every_byte_once_while_the_spool_grows() {
    let d = TestDaemon::start().await;
    // Pages of up to 1 MiB: a read of a running process costs a look at its process tree.
    let c = d.session_with(&[("YIELDSHELL_MAX_OUTPUT_BYTES", "1048576")]);
    let gate = d.dir.path().join("gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    const FIRST: u64 = 3 << 20;
    const SECOND: u64 = 24 << 20;
    // A first flood, a pause the test controls, then a second flood while the test reads.
    let cmd = format!(
        "{tb} flood {FIRST}; read _ < {gate}; {tb} flood {SECOND}",
        tb = testbin(),
        gate = gate.display()
    );
    let id = c.spawn_bg(&cmd).await;
    eventually("the first flood", || async {
        let o = c
            .read_since(&id, FIRST + 1, 1)
            .await
            .output
            .expect("output");
        (o.next_seq == FIRST + 1).then_some(())
    })
    .await;
    // While it waits: the first flood, from disk and ring.
    let (out, _) = c.read_all(&id, 300_000).await;
    // (Pages of 300,000 bytes: the first ones from disk, the last from the ring.)
    assert_eq!(out.len() as u64, FIRST);
    assert!(is_flood_at(0, &out));
    std::fs::write(&gate, b"go\n").expect("open the gate");
    // While it floods: page on from the start until the end of the second flood.
    let total = FIRST + SECOND;
    let (mut got, mut seq) = (Vec::with_capacity(total as usize), 1u64);
    let deadline = std::time::Instant::now() + TIMEOUT * 2;
    while (got.len() as u64) < total {
        assert!(std::time::Instant::now() < deadline, "at {seq} of {total}");
        let o = c
            .read_since(&id, seq, 1 << 20)
            .await
            .output
            .expect("output");
        assert!(!o.truncated, "a gap at {seq}");
        assert_eq!(o.first_seq, seq);
        got.extend_from_slice(&o.stdout);
        assert_eq!(o.next_seq, seq + o.stdout.len() as u64);
        seq = o.next_seq;
        if o.stdout.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    assert_eq!(got.len() as u64, total);
    assert!(is_flood_at(0, &got[..FIRST as usize]), "first flood");
    assert!(is_flood_at(0, &got[FIRST as usize..]), "second flood");
    c.wait_exit(&id).await;
}

/// A spool whose cap was reached keeps the newest output: a read from the start says so
/// (`truncated`, `first_seq` where the disk's copy begins) and goes on from there; `yieldctl
/// read` prints what is kept, names the missing range and exits 5.
#[tokio::test]
async fn a_spool_past_its_cap_reports_the_missing_start_truthfully() {
    // One 4 MiB segment kept: of 10 MiB, bytes from segment 2's start (8 MiB + 1) remain.
    let d = TestDaemon::start_configured(&[], "spool_max_bytes = 4194304\n").await;
    let c = d.session();
    const TOTAL: u64 = 10 << 20;
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            ..exec_req(&format!("{} flood {TOTAL}", testbin()))
        })
        .await;
    let id = r.process.expect("process").process_id;
    let kept_from = (8 << 20) + 1;
    let o = c.read_since(&id, 1, 1000).await.output.expect("output");
    assert!(o.truncated);
    assert_eq!(o.first_seq, kept_from);
    assert!(is_flood_at(kept_from - 1, &o.stdout) && o.stdout.len() == 1000);
    // Paging on: once truncated, then every kept byte once.
    let (mut got, mut seq) = (Vec::new(), o.next_seq);
    loop {
        let o = c
            .read_since(&id, seq, 1 << 20)
            .await
            .output
            .expect("output");
        assert!(!o.truncated, "only the first page is truncated");
        got.extend_from_slice(&o.stdout);
        seq = o.next_seq;
        if !o.has_more {
            break;
        }
    }
    assert_eq!(got.len() as u64, TOTAL - kept_from + 1 - 1000);
    assert!(is_flood_at(kept_from - 1 + 1000, &got));
    let out = run(d.yieldctl().args(["read", &id]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains(&format!("(seq 1..{kept_from}) are retained nowhere]")),
        "{stderr}"
    );
    assert!(!stderr.contains("--all"), "{stderr}");
    assert_eq!(out.stdout.len() as u64, TOTAL - kept_from + 1);
}

/// What the spool serves is what the holder wrote: redacted. A secret printed far more often
/// than the ring holds is nowhere in a read from the start, through MCP and `yieldctl`.
#[tokio::test]
async fn spooled_output_is_redacted() {
    let d = TestDaemon::start().await;
    let secret = "s3cr3t-token-value-0123456789";
    let mcp = Mcp::start(&d, &[("MY_API_TOKEN", secret)]).await;
    let r = body(
        &mcp.call(
            "exec",
            json!({
                "command": "seq 1 30000 | sed \"s/^/token=$MY_API_TOKEN line /\"",
                "side_effects": ["NONE"],
                "yield_ms": 30000
            }),
        )
        .await,
    );
    assert_eq!(r["status"], "completed", "{r}");
    let id = r["process_id"].as_str().expect("id").to_string();
    let (all, _) = mcp_read_all(&mcp, &id, json!({"max_output_bytes": 20000})).await;
    assert!(!all.contains(secret));
    assert_eq!(all.lines().count(), 30_000);
    assert!(all.starts_with("token=[REDACTED:MY_API_TOKEN] line 1\n"));
    let out = run(d.yieldctl().args(["read", &id]));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    let spooled = std::fs::read(d.state.join("procs").join(&id).join("out.0")).expect("spool");
    assert!(!String::from_utf8_lossy(&spooled).contains(secret));
    mcp.close().await;
}

/// A terminal process's forward pages from the spool are escape-free like the ring's, and
/// `raw` gives the bytes as written.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_terminal_processs_spooled_pages_are_escape_free_unless_raw() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            yield_ms: Some(30_000),
            ..exec_req("seq 1 40000 | sed 's/.*/\\x1b[31m&\\x1b[0m/'")
        })
        .await;
    let p = r.process.expect("process");
    assert!(p.tty);
    let id = p.process_id;
    let read = |raw: bool| {
        let c: &crate::helper::Client = &c;
        let id = id.clone();
        async move {
            c.read(pb::ReadRequest {
                process_id: id,
                since_seq: Some(1),
                max_output_bytes: Some(4096),
                raw,
                ..Default::default()
            })
            .await
            .expect("read")
            .output
            .expect("output")
        }
    };
    let plain = read(false).await;
    assert_eq!((plain.first_seq, plain.truncated), (1, false));
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(text.starts_with("1\n2\n3\n"), "{text:?}");
    let raw = read(true).await;
    assert!(
        raw.stdout.starts_with(b"\x1b[31m1\x1b[0m\r\n"),
        "{:?}",
        String::from_utf8_lossy(&raw.stdout[..40])
    );
}

/// Issue 26 item 7: the holder writes its spool in batches, yet output that pauses is on disk
/// within the quiet time, not only once a batch fills or the process ends: a line printed before
/// a long sleep is in the segment file while the process still sleeps (a holder killed then, or
/// a reader of the disk, finds it).
#[tokio::test]
async fn a_line_before_a_pause_reaches_the_disk_while_the_process_runs() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg("printf 'one short line\\n'; exec sleep 600")
        .await;
    let segment = d.state.join("procs").join(&id).join("out.0");
    eventually("the line on disk", || async {
        std::fs::read(&segment)
            .ok()
            .filter(|b| b.as_slice() == b"one short line\n")
            .map(|_| ())
    })
    .await;
    let listed = c.list(pb::Scope::All, false).await;
    assert!(
        listed
            .iter()
            .any(|p| p.process_id == id && p.status == pb::ProcessStatus::Running as i32),
        "still running once its line is on disk"
    );
    c.stop(&id, "SIGKILL", 0).await.expect("stop");
}

/// Issue 26 item 7: the holder's spool batch is never larger than the daemon's ring, so however
/// small the ring, the bytes it gave up are on disk already. Here a 4 KiB ring and ~108 KB of
/// output that stops before a long sleep: a read from the start, right when the last line has
/// been seen, returns every byte with no gap (with a batch above the ring, the first ~100 KB
/// would still be in the holder's memory until its quiet-time write, and the read would have to
/// report them missing).
#[tokio::test]
async fn with_a_tiny_ring_the_bytes_it_gave_up_are_on_disk_at_once() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_MAX_BUFFER_BYTES", "4096")]);
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            until: Some("^done$".into()),
            ..exec_req("seq 1 20000; echo done; exec sleep 600")
        })
        .await;
    let id = r.process.expect("process").process_id;
    assert!(r.matched_seq.is_some(), "the last line was seen");
    // Pages from seq 1, failing at any page that reports missing bytes.
    let (got, _) = c.read_all(&id, 1 << 20).await;
    assert!(
        got == format!("{}done\n", seq_output(20_000)).into_bytes(),
        "every byte once, in order ({} bytes)",
        got.len()
    );
    c.stop(&id, "SIGKILL", 0).await.expect("stop");
}
