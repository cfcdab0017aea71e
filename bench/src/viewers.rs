//! What live viewers (`yieldctl top`) cost the daemon (issue 28): with 1,000 processes running,
//! the daemon's CPU time per second of wall time and its memory with 0, 1 and 10 `Watch`
//! streams open, each read as fast as it comes (as `top` reads it), and what each viewer
//! receives (events and bytes per second).
//!
//! A tenth of the processes print a line every second (dev servers, watchers), the rest sleep;
//! so the stream carries output changes and CPU/memory figures as well as the table. The
//! daemon's CPU time is read from `/proc/<pid>/stat` (user + system) over a window after the
//! viewers settled. `yieldshell-bench --viewers` prints one JSON document; like the other
//! modes it asserts nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use yieldshell_proto::pb;

use crate::Opts;
use crate::servers::{Bench, rss};

/// The daemon's CPU time so far (user + system), in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("stat")? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] is field 3; utime and stime are fields 14 and 15.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// Clock ticks per second.
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Counts of what one viewer received.
#[derive(Default)]
struct Received {
    events: AtomicU64,
    bytes: AtomicU64,
}

/// One measured window with `viewers` streams open.
async fn window(
    bench: &Bench,
    viewers: usize,
    settle: Duration,
    length: Duration,
) -> anyhow::Result<serde_json::Value> {
    let mut tasks = Vec::new();
    let mut counts = Vec::new();
    for i in 0..viewers {
        let session = bench.control_session(&format!("bench-viewer-{i}"))?;
        let received = Arc::new(Received::default());
        counts.push(received.clone());
        let mut stream = session
            .watch(pb::WatchRequest {
                scope: pb::Scope::All as i32,
                include_completed: true,
                ..Default::default()
            })
            .await?;
        tasks.push(tokio::spawn(async move {
            // Kept alive with the stream.
            let _session = session;
            while let Ok(Some(ev)) = stream.message().await {
                received.events.fetch_add(1, Ordering::Relaxed);
                let bytes = prost::Message::encoded_len(&ev) as u64;
                received.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(settle).await;
    let before_events: Vec<(u64, u64)> = counts
        .iter()
        .map(|c| {
            (
                c.events.load(Ordering::Relaxed),
                c.bytes.load(Ordering::Relaxed),
            )
        })
        .collect();
    let ticks = ticks_per_second();
    let cpu_before = cpu_ticks(bench.daemon_pid)?;
    let t = Instant::now();
    tokio::time::sleep(length).await;
    let cpu_after = cpu_ticks(bench.daemon_pid)?;
    let wall = t.elapsed().as_secs_f64();
    let rss_mib = rss(bench.daemon_pid) as f64 / 1048576.0;
    let per_viewer: Vec<(f64, f64)> = counts
        .iter()
        .zip(before_events)
        .map(|(c, (e0, b0))| {
            (
                (c.events.load(Ordering::Relaxed) - e0) as f64 / wall,
                (c.bytes.load(Ordering::Relaxed) - b0) as f64 / wall,
            )
        })
        .collect();
    for t in tasks {
        t.abort();
    }
    let cpu_ms_per_s = (cpu_after - cpu_before) as f64 / ticks * 1000.0 / wall;
    let n = per_viewer.len().max(1) as f64;
    Ok(json!({
        "viewers": viewers,
        "daemon_cpu_ms_per_s": (cpu_ms_per_s * 10.0).round() / 10.0,
        "daemon_rss_mib": (rss_mib * 10.0).round() / 10.0,
        // `0.0 +`: an empty sum is -0.0.
        "events_per_s_per_viewer": 0.0 + (per_viewer.iter().map(|v| v.0).sum::<f64>() / n * 10.0).round() / 10.0,
        "kib_per_s_per_viewer": 0.0 + (per_viewer.iter().map(|v| v.1).sum::<f64>() / n / 1024.0 * 10.0).round() / 10.0,
    }))
}

/// Runs the viewer-load measurement and prints it.
pub async fn run(opts: &Opts) -> anyhow::Result<()> {
    let (processes, settle, length) = if opts.quick {
        (100, Duration::from_secs(2), Duration::from_secs(3))
    } else {
        (1000, Duration::from_secs(3), Duration::from_secs(10))
    };
    let bench = Bench::setup(&opts.venv, true).await?;
    let s = bench.control_session("bench-viewers")?;
    eprintln!("starting {processes} processes…");
    for i in 0..processes {
        let command = if i % 10 == 0 {
            "while :; do echo tick; sleep 1; done"
        } else {
            "sleep 3600"
        };
        crate::terminal::exec(&s, command, false, 0).await?;
    }
    // Quiet first: the starts' own work (records, holders' refill) is over.
    tokio::time::sleep(settle * 2).await;
    let mut rows = Vec::new();
    for viewers in [0, 1, 10] {
        eprintln!("{viewers} viewer(s)…");
        rows.push(window(&bench, viewers, settle, length).await?);
    }
    let doc = json!({
        "running_processes": processes,
        "printing_each_second": processes / 10,
        "window_s": length.as_secs(),
        "windows": rows,
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    let path = opts.json.with_file_name("viewers.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    eprintln!("results written to {}", path.display());
    Ok(())
}
