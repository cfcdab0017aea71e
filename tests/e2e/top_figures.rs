//! The daemon's side of `yieldctl top` (issue 28): CPU and memory figures of running trees in
//! `ps` (MCP, `yieldctl ps` and `--json`), and the `Watch` stream — the whole table first, then
//! each change pushed — with viewers that read slowly or go away costing nothing lasting.

use std::time::Duration;

use serde_json::json;
use tokio_stream::StreamExt;
use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually, json as parse_json, run};
use crate::mcp::{Mcp, body};

/// `cpu_percent` and `rss_bytes` of `id` in a `--json ps` or MCP `ps` body.
fn figures(ps: &serde_json::Value, id: &str) -> (Option<f64>, Option<u64>) {
    let p = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {ps}"));
    (p["cpu_percent"].as_f64(), p["rss_bytes"].as_u64())
}

#[tokio::test]
async fn ps_shows_a_busy_tree_using_cpu_and_memory_and_an_idle_one_using_none() {
    let d = TestDaemon::start().await;
    let c = d.session();
    // The busy loop is a child in the shell's group; the shell itself only waits.
    let busy = c.spawn_bg("(while :; do :; done) & wait").await;
    let idle = c.spawn_bg("exec sleep 600").await;
    let ended = c.exec("true").await.process.expect("process").process_id;
    let ps = eventually("the busy tree's CPU in yieldctl --json ps", || async {
        let ps = parse_json(&run(d.yieldctl().args(["--json", "ps"])));
        let (cpu, _) = figures(&ps, &busy);
        cpu.is_some_and(|c| c > 10.0).then_some(ps)
    })
    .await;
    let (busy_cpu, busy_rss) = figures(&ps, &busy);
    let (idle_cpu, idle_rss) = figures(&ps, &idle);
    println!("busy {busy_cpu:?}% {busy_rss:?} B, idle {idle_cpu:?}% {idle_rss:?} B");
    assert!(busy_rss.is_some_and(|r| r > 100 * 1024), "{ps}");
    assert_eq!(idle_cpu, Some(0.0), "a sleeping process uses no CPU: {ps}");
    assert!(idle_rss.is_some_and(|r| r > 0), "{ps}");
    assert_eq!(
        figures(&ps, &ended),
        (None, None),
        "no figures once ended: {ps}"
    );

    // The MCP `ps` carries the same fields (structured and in the lean text).
    let mcp = Mcp::start(&d, &[]).await;
    let b = eventually("the busy tree's CPU in MCP ps", || async {
        let b = body(&mcp.call("ps", json!({"scope": "all"})).await);
        figures(&b, &busy).0.is_some_and(|c| c > 10.0).then_some(b)
    })
    .await;
    assert!(figures(&b, &busy).1.is_some_and(|r| r > 0), "{b}");
    mcp.close().await;

    // `yieldctl ps`: CPU and MEM columns.
    let table =
        String::from_utf8(run(d.yieldctl().args(["ps", "--running"])).stdout).expect("utf-8");
    let header = table.lines().next().expect("header");
    assert!(
        header.contains(" CPU ") && header.contains(" MEM "),
        "{table}"
    );
    let idle_row = table
        .lines()
        .find(|l| l.starts_with(&idle))
        .expect("idle row");
    assert!(idle_row.contains("0.0%"), "{table}");
}

/// Reads events until one satisfies `check`, applying each to `rows` (id → row).
async fn until_event(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
    rows: &mut std::collections::HashMap<String, pb::ProcessInfo>,
    what: &str,
    check: impl Fn(&pb::WatchEvent, &std::collections::HashMap<String, pb::ProcessInfo>) -> bool,
) -> pb::WatchEvent {
    let read = async {
        loop {
            let ev = stream
                .next()
                .await
                .expect("the stream ended")
                .expect("an event");
            if ev.reset {
                rows.clear();
            }
            for change in &ev.changes {
                let p = change.process.clone().expect("process");
                rows.insert(p.process_id.clone(), p);
            }
            for id in &ev.removed {
                rows.remove(id);
            }
            if check(&ev, rows) {
                return ev;
            }
        }
    };
    tokio::time::timeout(crate::helper::TIMEOUT, read)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn kinds_of(ev: &pb::WatchEvent, id: &str) -> Vec<i32> {
    ev.changes
        .iter()
        .filter(|c| c.process.as_ref().is_some_and(|p| p.process_id == id))
        .flat_map(|c| c.kinds.clone())
        .collect()
}

#[tokio::test]
async fn watch_sends_the_table_then_pushes_starts_output_ends_figures_and_removals() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let first = c.spawn_bg("exec sleep 600").await;
    let mut stream = c
        .session
        .watch(pb::WatchRequest {
            scope: pb::Scope::All as i32,
            include_completed: true,
            ..Default::default()
        })
        .await
        .expect("watch");
    let mut rows = std::collections::HashMap::new();
    let ev = until_event(&mut stream, &mut rows, "the whole table", |ev, _| ev.reset).await;
    assert!(ev.now_unix_ms > 0);
    assert!(rows.contains_key(&first), "{rows:?}");
    assert_eq!(
        rows[&first].duration_ms, 0,
        "a running row carries no duration (viewers count it)"
    );

    // A process started now is pushed, as started.
    let chatty = c
        .spawn_bg("read line; echo \"got $line\"; read again; exit 3")
        .await;
    let ev = until_event(&mut stream, &mut rows, "the new row", |_, rows| {
        rows.contains_key(&chatty)
    })
    .await;
    assert!(
        kinds_of(&ev, &chatty).contains(&(pb::ChangeKind::Started as i32)),
        "{ev:?}"
    );
    // Its output, as an output change.
    c.write(&chatty, b"hi\n", false).await.expect("write");
    until_event(&mut stream, &mut rows, "the output count", |ev, rows| {
        kinds_of(ev, &chatty).contains(&(pb::ChangeKind::Output as i32))
            && rows[&chatty].stdout_lines == 1
    })
    .await;
    // Its end, with the exit code.
    c.write(&chatty, b"bye\n", false).await.expect("write");
    until_event(&mut stream, &mut rows, "the end", |ev, rows| {
        kinds_of(ev, &chatty).contains(&(pb::ChangeKind::Ended as i32))
            && rows[&chatty].exit_code == Some(3)
    })
    .await;
    // Figures of the running one.
    until_event(&mut stream, &mut rows, "figures", |_, rows| {
        rows[&first].rss_bytes.is_some_and(|r| r > 0) && rows[&first].cpu_percent.is_some()
    })
    .await;
    // A cleanup removes the ended row.
    let removed = c
        .session
        .cleanup(pb::CleanupRequest {
            completed_older_than_ms: Some(0),
            stopped_older_than_ms: Some(0),
            scope: pb::Scope::All as i32,
            ..Default::default()
        })
        .await
        .expect("cleanup");
    assert!(removed.removed_ids.contains(&chatty));
    until_event(&mut stream, &mut rows, "the removal", |ev, _| {
        ev.removed.contains(&chatty)
    })
    .await;
}

#[tokio::test]
async fn a_viewer_that_stops_reading_holds_up_no_one_and_one_that_leaves_leaves_no_task() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let baseline = d.status().await.tasks;
    let watch = || pb::WatchRequest {
        scope: pb::Scope::All as i32,
        include_completed: true,
        ..Default::default()
    };
    // A viewer that never reads, while processes print as fast as they can.
    let stalled = c.session.watch(watch()).await.expect("watch");
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(c.spawn_bg("yes watched | head -c 5000000; sleep 600").await);
    }
    // Another viewer sees every process, with its output up to date, in good time.
    let other = d.session();
    let mut stream = other.session.watch(watch()).await.expect("watch");
    let mut rows = std::collections::HashMap::new();
    until_event(
        &mut stream,
        &mut rows,
        "every row, all output counted",
        |_, rows| {
            ids.iter()
                .all(|id| rows.get(id).is_some_and(|p| p.stdout_bytes == 5_000_000))
        },
    )
    .await;
    // And the daemon answers as usual.
    let listed = tokio::time::timeout(Duration::from_secs(10), c.list(pb::Scope::All, false))
        .await
        .expect("a ps while a viewer is stalled");
    assert!(listed.len() >= ids.len());
    // Viewers that go away leave nothing running in the daemon once the table's builder has
    // had its linger.
    drop(stalled);
    drop(stream);
    for id in &ids {
        let _ = c.stop(id, "SIGKILL", 0).await;
    }
    eventually("the daemon's tasks back to where they were", || async {
        (d.status().await.tasks <= baseline + 2).then_some(())
    })
    .await;
}
