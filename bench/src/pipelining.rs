//! What one client that pipelines calls and does not read the answers costs (issue 29 item 9):
//! the daemon's and the shim's peak resident memory under the load.
//!
//! Daemon: a hand-written HTTP/2 client (a gRPC library reads its socket whatever the
//! application does) opens a window wide enough for every answer, pipelines `reads` `Read`
//! calls of 8 MB on a 9 MB output, waits, then reads everything. Shim: an MCP client writes
//! `initialize` and `shim_reads` default `read` tool calls to the shim's stdin without reading
//! stdout, waits, then reads every answer. Each figure is the process's `VmHWM` over the run.
//! `yieldshell-bench --pipelining` prints one JSON document; it asserts nothing.

use std::io::{BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::Context;
use prost::Message;
use serde_json::json;
use yieldshell_proto::pb;

use crate::Opts;
use crate::servers::{Bench, Kind, peak_rss, rss};

const OUTPUT_BYTES: u64 = 9 * 1024 * 1024;
const READ_BYTES: u64 = 8 * 1024 * 1024;
const MAX_WINDOW: u32 = 0x7fff_ffff;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `count` `Read` calls on one connection, after a preface whose windows never hold an
/// answer back (RFC 9113; header fields literal, RFC 7541 §6.2.2).
fn pipelined_reads(count: usize, req: &pb::ReadRequest) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let mut settings = vec![0x00, 0x04];
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    out.extend(frame(0x4, 0, 0, &settings));
    out.extend(frame(0x8, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
    let mut headers = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/yieldshell.v1.Control/Read"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        headers.push(0x00);
        headers.push(name.len() as u8);
        headers.extend_from_slice(name.as_bytes());
        headers.push(value.len() as u8);
        headers.extend_from_slice(value.as_bytes());
    }
    let message = req.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message);
    for i in 0..count {
        let stream = 2 * i as u32 + 1;
        out.extend(frame(0x1, 0x4, stream, &headers));
        out.extend(frame(0x0, 0x1, stream, &body));
    }
    out
}

/// Reads until `count` streams have ended; the answer bytes received.
fn drain(conn: &mut UnixStream, count: usize) -> anyhow::Result<u64> {
    let (mut ended, mut bytes) = (0, 0u64);
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    while ended < count {
        conn.read_exact(&mut head)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        payload.resize(len, 0);
        conn.read_exact(&mut payload)?;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
        anyhow::ensure!(kind != 0x7, "the daemon closed the connection");
        if kind == 0 {
            bytes += len as u64;
        }
        if (kind == 0 || kind == 1) && stream != 0 && flags & 0x1 != 0 {
            ended += 1;
        }
    }
    Ok(bytes)
}

/// The daemon under `reads` pipelined 8 MB reads: its peak memory and how long the other
/// client's read took meanwhile.
async fn daemon_figures(bench: &Bench, reads: usize) -> anyhow::Result<serde_json::Value> {
    let max = READ_BYTES.to_string();
    let vars = [("YIELDSHELL_MAX_OUTPUT_BYTES", max.as_str())];
    let s = bench.control_session_with("bench-pipelining", &vars)?;
    let other = bench.control_session_with("bench-other", &vars)?;
    let (_, r) = crate::terminal::exec(
        &s,
        &format!("head -c {OUTPUT_BYTES} /dev/zero | tr '\\0' x"),
        false,
        60_000,
    )
    .await?;
    let id = r.process.context("process")?.process_id;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = bench.daemon_pid;
    crate::servers::reset_peak(pid);
    let before = rss(pid);
    let req = pb::ReadRequest {
        session_id: s.id().to_string(),
        process_id: id.clone(),
        since_seq: Some(1),
        max_output_bytes: Some(READ_BYTES),
        ..Default::default()
    };
    let mut conn = UnixStream::connect(&bench.socket)?;
    let bytes = pipelined_reads(reads, &req);
    let writer = {
        let mut conn = conn.try_clone()?;
        std::thread::spawn(move || conn.write_all(&bytes))
    };
    // Long enough for every call the daemon takes to be built.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t = Instant::now();
    let other_req = pb::ReadRequest {
        session_id: other.id().to_string(),
        process_id: id,
        since_seq: Some(1),
        max_output_bytes: Some(READ_BYTES),
        ..Default::default()
    };
    other
        .call(|mut c| {
            let r = other_req.clone();
            async move { c.read(r).await }
        })
        .await?;
    let other_ms = t.elapsed().as_secs_f64() * 1e3;
    let held = rss(pid);
    let received = tokio::task::spawn_blocking(move || drain(&mut conn, reads)).await??;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    Ok(json!({
        "pipelined_reads": reads,
        "read_bytes": READ_BYTES,
        "output_bytes": OUTPUT_BYTES,
        "daemon_rss_before_mb": before as f64 / 1e6,
        "daemon_rss_during_mb": held as f64 / 1e6,
        "daemon_peak_mb": peak_rss(pid) as f64 / 1e6,
        "daemon_rss_after_mb": rss(pid) as f64 / 1e6,
        "other_clients_read_ms": other_ms,
        "answer_bytes_received": received,
    }))
}

/// The shim under `reads` pipelined default `read` tool calls whose answers are not read.
async fn shim_figures(bench: &Bench, reads: usize) -> anyhow::Result<serde_json::Value> {
    let s = bench.control_session("bench-shim-target")?;
    let (_, r) = crate::terminal::exec(&s, "seq 1 200000", false, 60_000).await?;
    let id = r.process.context("process")?.process_id;
    let mut cmd = bench.command(Kind::Ours).into_std();
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut shim = cmd.spawn().context("starting the shim")?;
    let pid = shim.id();
    let mut stdin = shim.stdin.take().context("stdin")?;
    let stdout = shim.stdout.take().context("stdout")?;
    let mut lines = vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for i in 1..=reads {
        lines.push(json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "read", "arguments": {"process_id": id, "since_seq": 1}}}));
    }
    let mut text = Vec::new();
    for l in &lines {
        serde_json::to_writer(&mut text, l)?;
        text.push(b'\n');
    }
    // stdin stays open until the peak is read: at EOF the shim exits, and its figures with it.
    let writer = std::thread::spawn(move || stdin.write_all(&text).map(|()| stdin));
    // Long enough for the shim to read what it will read and answer what it will answer.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let held = rss(pid);
    let answered = tokio::task::spawn_blocking(move || {
        let mut n = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("\"id\"") {
                n += 1;
            }
            if n > reads {
                break;
            }
        }
        n
    })
    .await?;
    let peak = peak_rss(pid);
    drop(writer.join());
    let _ = shim.kill();
    let _ = shim.wait();
    Ok(json!({
        "pipelined_reads": reads,
        "shim_rss_during_mb": held as f64 / 1e6,
        "shim_peak_mb": peak as f64 / 1e6,
        "answered": answered,
    }))
}

/// Runs both measurements and prints (and writes) their JSON.
pub async fn run(opts: &Opts) -> anyhow::Result<()> {
    let (daemon_reads, shim_reads) = if opts.quick {
        (64, 5_000)
    } else {
        (400, 50_000)
    };
    let bench = Bench::setup(&opts.venv, true).await?;
    eprintln!("daemon: {daemon_reads} pipelined 8 MB reads…");
    let daemon = daemon_figures(&bench, daemon_reads).await?;
    eprintln!("shim: {shim_reads} pipelined reads…");
    let shim = shim_figures(&bench, shim_reads).await?;
    let doc = json!({"daemon": daemon, "shim": shim});
    println!("{}", serde_json::to_string_pretty(&doc)?);
    let path = opts.json.with_file_name("pipelining.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    eprintln!("results written to {}", path.display());
    Ok(())
}
