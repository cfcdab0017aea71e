//! Terminal mode's figures (issue 12; ARCHITECTURE.md, "Terminal processes"), over the control plane (no MCP in between):
//! `exec` latency on a PTY beside pipes, flood throughput through a PTY beside pipes, and how
//! long it takes from a prompt to `waiting_for_input` (the early return of an `exec` whose
//! command reads its input right after printing the prompt).
//!
//! `yieldshell-bench --terminal` prints one JSON document (and writes it beside the main
//! results); like the other modes it asserts nothing.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;
use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

use crate::Opts;
use crate::servers::Bench;
use crate::stats::Summary;

/// Iterations and sizes.
struct Counts {
    execs: usize,
    floods: usize,
    flood_bytes: u64,
    prompts: usize,
}

impl Counts {
    fn new(quick: bool) -> Counts {
        if quick {
            Counts {
                execs: 10,
                floods: 2,
                flood_bytes: 2_000_000,
                prompts: 3,
            }
        } else {
            Counts {
                execs: 200,
                floods: 5,
                flood_bytes: 100_000_000,
                prompts: 20,
            }
        }
    }
}

/// One `exec`, timed from the call to its answer.
pub async fn exec(
    s: &Session,
    command: &str,
    tty: bool,
    yield_ms: u64,
) -> anyhow::Result<(Duration, pb::ExecResponse)> {
    let req = pb::ExecRequest {
        session_id: s.id().to_string(),
        command: command.as_bytes().to_vec(),
        side_effects: vec!["NONE".into()],
        yield_ms: Some(yield_ms),
        tty,
        max_output_bytes: Some(1024),
        ..Default::default()
    };
    let t = Instant::now();
    let r = s
        .call(|mut c| {
            let req = req.clone();
            async move { c.exec(req).await }
        })
        .await?;
    Ok((t.elapsed(), r))
}

/// `exec` answers timed over `n` runs of `command` (the first few are warm-up).
async fn exec_latency(s: &Session, command: &str, tty: bool, n: usize) -> anyhow::Result<Summary> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 3 {
        let (took, r) = exec(s, command, tty, 30_000).await?;
        if r.status != pb::ExecStatus::Completed as i32 {
            bail!("{command} (tty {tty}) did not complete: {r:?}");
        }
        if i >= 3 {
            samples.push(took);
        }
    }
    Ok(Summary::of(&samples))
}

/// MB/s of a flood of `bytes` through the process's output, exec to settled answer.
async fn flood(s: &Session, bytes: u64, tty: bool, n: usize) -> anyhow::Result<f64> {
    let command = format!("head -c {bytes} /dev/zero | tr '\\0' 'x'");
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let (took, r) = exec(s, &command, tty, 300_000).await?;
        let got = r.process.as_ref().map_or(0, |p| p.stdout_bytes);
        if r.status != pb::ExecStatus::Completed as i32 || got < bytes {
            bail!(
                "flood (tty {tty}) ended with {got} of {bytes} bytes: {:?}",
                r.status
            );
        }
        samples.push(took);
    }
    Ok(bytes as f64 / 1e6 / (Summary::of(&samples).p50_ms / 1000.0))
}

/// From the prompt to the early `exec` answer that says `waiting_for_input`: the exec's time
/// minus the time the same command takes to print its prompt and exit (the spawn's share).
async fn input_wait(s: &Session, tty: bool, n: usize) -> anyhow::Result<Summary> {
    let baseline = exec_latency(s, "printf 'answer? '", tty, n).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let (took, r) = exec(s, "printf 'answer? '; read x", tty, 30_000).await?;
        let p = r.process.unwrap_or_default();
        if p.waiting_for_input != Some(true) {
            bail!("the prompt (tty {tty}) was not detected: {p:?}");
        }
        samples.push(took.saturating_sub(Duration::from_secs_f64(baseline.p50_ms / 1000.0)));
        let stop = pb::StopRequest {
            session_id: s.id().to_string(),
            process_id: p.process_id.clone(),
            signal: "SIGKILL".into(),
            force_after_ms: Some(0),
        };
        s.call(|mut c| {
            let stop = stop.clone();
            async move { c.stop(stop).await }
        })
        .await?;
    }
    Ok(Summary::of(&samples))
}

/// Runs the terminal-mode measurements and prints them.
pub async fn run(opts: &Opts) -> anyhow::Result<()> {
    let c = Counts::new(opts.quick);
    let bench = Bench::setup(&opts.venv, true).await?;
    let s = bench.control_session("bench-terminal")?;
    eprintln!("exec latency, pipes and terminal…");
    let pipe_exec = exec_latency(&s, "true", false, c.execs).await?;
    let tty_exec = exec_latency(&s, "true", true, c.execs).await?;
    eprintln!("flood throughput…");
    let pipe_flood = flood(&s, c.flood_bytes, false, c.floods).await?;
    let tty_flood = flood(&s, c.flood_bytes, true, c.floods).await?;
    eprintln!("input-wait detection…");
    let pipe_prompt = input_wait(&s, false, c.prompts).await?;
    let tty_prompt = input_wait(&s, true, c.prompts).await?;
    let doc = json!({
        "exec_true_ms": {"pipes": pipe_exec, "tty": tty_exec},
        "flood_mb_per_s": {"bytes": c.flood_bytes, "pipes": pipe_flood, "tty": tty_flood},
        "prompt_to_waiting_for_input_ms": {"pipes": pipe_prompt, "tty": tty_prompt},
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    let path = opts.json.with_file_name("terminal.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    eprintln!("results written to {}", path.display());
    Ok(())
}
