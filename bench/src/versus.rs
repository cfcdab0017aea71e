//! `--versus DIR`: this build's daemon against another build's (DIR holds its `yieldshelld`),
//! both running at once and measured in one pass with interleaved, paired samples.
//!
//! On a shared or virtual machine the floor moves between runs by more than the differences a
//! change makes (runs of one build minutes apart differed by 50%), so comparing two runs says
//! little. Here every round times one `exec true` on each daemon back to back, in alternating
//! order, and the figure is the median of the per-round differences: whatever slows the machine
//! during a round slows both samples of it. Throughput alternates short blocks the same way.
//! Both daemons are driven by this build's client over the control plane (the protocol is
//! versioned, so an older daemon answers the same calls); the MCP shim is left out. `ps` over a
//! hundred running processes is paired the same way, its calls paced so that each pays for its
//! `/proc` checks.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

use crate::Opts;
use crate::servers::{Bench, own_bin_dir};
use crate::stats::{Summary, nearest_rank};
use crate::terminal::exec;

/// Iteration counts.
struct Counts {
    rounds: usize,
    blocks: usize,
    clients: usize,
    execs_per_client: usize,
    starts: usize,
    /// Processes kept running while `ps` is timed, and rounds of it.
    ps_running: usize,
    ps_rounds: usize,
}

impl Counts {
    fn new(quick: bool) -> Counts {
        if quick {
            Counts {
                rounds: 40,
                blocks: 2,
                clients: 4,
                execs_per_client: 10,
                starts: 20,
                ps_running: 20,
                ps_rounds: 20,
            }
        } else {
            Counts {
                rounds: 600,
                blocks: 4,
                clients: 20,
                execs_per_client: 25,
                starts: 200,
                ps_running: 100,
                ps_rounds: 150,
            }
        }
    }
}

/// Percentiles of signed differences in milliseconds (a [`Summary`] is of durations).
pub fn spread(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| nearest_rank(&ms, q);
    json!({"n": ms.len(), "p25_ms": at(0.25), "p50_ms": at(0.5), "p75_ms": at(0.75)})
}

async fn exec_true(s: &Session) -> anyhow::Result<Duration> {
    let (took, r) = exec(s, "true", false, 30_000).await?;
    if r.status != pb::ExecStatus::Completed as i32 {
        bail!("`true` did not complete: {r:?}");
    }
    Ok(took)
}

/// `clients` sessions each running `execs` `exec true` one after another, all at once: execs/s.
async fn many_clients(sessions: &[Arc<Session>], execs: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for s in sessions {
        let s = s.clone();
        tasks.spawn(async move {
            for _ in 0..execs {
                exec_true(&s).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((sessions.len() * execs) as f64 / started.elapsed().as_secs_f64())
}

/// `n` processes started at once in the background (`yield_ms` 0): starts/s until the last
/// answer; then they are stopped.
async fn start_rate(s: &Arc<Session>, n: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let s = s.clone();
        tasks.spawn(async move { exec(&s, "sleep 600", false, 0).await });
    }
    let mut ids = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        let (_, r) = done??;
        ids.push(r.process.map(|p| p.process_id).unwrap_or_default());
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    kill_all(s, ids).await?;
    Ok(rate)
}

/// How far apart the timed `ps` calls are: more than the daemon reuses a check's answers (100 ms)
/// and its pass over `/proc` (250 ms), so each call pays for the checks of every running process,
/// as an agent's `ps` seconds apart does.
const PS_PACE: Duration = Duration::from_millis(300);

/// Starts `n` `sleep 600` in the background and returns their ids.
async fn start_sleepers(s: &Session, n: usize) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let (_, r) = exec(s, "sleep 600", false, 0).await?;
        ids.push(r.process.map(|p| p.process_id).unwrap_or_default());
    }
    Ok(ids)
}

/// One `ps` listing every running process (`scope: all`).
async fn ps_all(s: &Session) -> anyhow::Result<Duration> {
    let req = pb::ListRequest {
        session_id: s.id().to_string(),
        scope: pb::Scope::All as i32,
        include_completed: false,
        limit: 5000,
    };
    let started = Instant::now();
    s.call(|mut c| {
        let req = req.clone();
        async move { c.list(req).await }
    })
    .await?;
    Ok(started.elapsed())
}

/// Stops the processes `ids` of `s` at once (SIGKILL).
async fn kill_all(s: &Session, ids: Vec<String>) -> anyhow::Result<()> {
    for id in ids {
        let stop = pb::StopRequest {
            session_id: s.id().to_string(),
            process_id: id,
            signal: "SIGKILL".into(),
            force_after_ms: Some(0),
        };
        s.call(|mut c| {
            let stop = stop.clone();
            async move { c.stop(stop).await }
        })
        .await?;
    }
    Ok(())
}

/// `rounds` paired samples of `call` on `[base, ours]`, each round `pace` after the last, one call
/// to each side back to back: the samples of each side and the per-round differences (ours −
/// base, in ms). Which side goes first alternates, so neither always runs on the other's warm
/// caches.
pub async fn paired<F, Fut>(
    sides: &[Arc<Session>; 2],
    rounds: usize,
    pace: Duration,
    call: F,
) -> anyhow::Result<([Vec<Duration>; 2], Vec<f64>)>
where
    F: Fn(Arc<Session>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    let mut samples = [Vec::with_capacity(rounds), Vec::with_capacity(rounds)];
    let mut diffs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut took = [Duration::ZERO; 2];
        for side in order {
            took[side] = call(sides[side].clone()).await?;
        }
        diffs.push((took[1].as_secs_f64() - took[0].as_secs_f64()) * 1000.0);
        for side in 0..2 {
            samples[side].push(took[side]);
        }
    }
    Ok((samples, diffs))
}

/// Runs the paired comparison against the build in `base_dir` and prints JSON.
pub async fn run(opts: &Opts, base_dir: &Path) -> anyhow::Result<()> {
    let c = Counts::new(opts.quick);
    if !base_dir.join("yieldshelld").is_file() {
        bail!("{} holds no yieldshelld", base_dir.display());
    }
    let base = Bench::setup_in(base_dir.to_path_buf(), &opts.venv, true)
        .await
        .context("starting the base build's daemon")?;
    let ours = Bench::setup_in(own_bin_dir()?, &opts.venv, true).await?;
    let sides = [
        Arc::new(base.control_session("bench-base")?),
        Arc::new(ours.control_session("bench-ours")?),
    ];
    for s in &sides {
        for _ in 0..20 {
            exec_true(s).await?;
        }
    }

    eprintln!("exec latency, {} paired rounds…", c.rounds);
    let (samples, diffs) = paired(&sides, c.rounds, Duration::ZERO, |s| async move {
        exec_true(&s).await
    })
    .await?;

    eprintln!(
        "many clients, {} blocks of {}×{} execs each…",
        c.blocks, c.clients, c.execs_per_client
    );
    let mut throughput = [Vec::new(), Vec::new()];
    let client_sessions: Vec<Vec<Arc<Session>>> = [&base, &ours]
        .iter()
        .map(|b| {
            (0..c.clients)
                .map(|i| {
                    b.control_session(&format!("bench-client-{i}"))
                        .map(Arc::new)
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .collect::<anyhow::Result<_>>()?;
    for block in 0..c.blocks {
        let order = if block % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            throughput[side].push(many_clients(&client_sessions[side], c.execs_per_client).await?);
        }
    }

    eprintln!("start rate, {} blocks of {} starts…", c.blocks, c.starts);
    let mut starts = [Vec::new(), Vec::new()];
    for block in 0..c.blocks {
        let order = if block % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            starts[side].push(start_rate(&sides[side], c.starts).await?);
        }
    }

    eprintln!(
        "ps over {} running processes, {} paired rounds {} ms apart…",
        c.ps_running,
        c.ps_rounds,
        PS_PACE.as_millis()
    );
    let mut sleepers = Vec::new();
    for s in &sides {
        sleepers.push(start_sleepers(s, c.ps_running).await?);
    }
    let (ps_samples, ps_diffs) =
        paired(
            &sides,
            c.ps_rounds,
            PS_PACE,
            |s| async move { ps_all(&s).await },
        )
        .await?;
    for (s, ids) in sides.iter().zip(sleepers) {
        kill_all(s, ids).await?;
    }

    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let doc = json!({
        "base": base_dir.display().to_string(),
        "exec_true_ms": {
            "base": Summary::of(&samples[0]),
            "ours": Summary::of(&samples[1]),
            "ours_minus_base_paired": spread(diffs),
        },
        "many_clients_exec_per_s": {
            "clients": c.clients,
            "base": throughput[0], "ours": throughput[1],
            "base_median": median(&throughput[0]), "ours_median": median(&throughput[1]),
        },
        "ps_all_running_ms": {
            "running": c.ps_running,
            "base": Summary::of(&ps_samples[0]),
            "ours": Summary::of(&ps_samples[1]),
            "ours_minus_base_paired": spread(ps_diffs),
        },
        "start_rate_per_s": {
            "starts": c.starts,
            "base": starts[0], "ours": starts[1],
            "base_median": median(&starts[0]), "ours_median": median(&starts[1]),
        },
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    let path = opts.json.with_file_name("versus.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    eprintln!("results written to {}", path.display());
    Ok(())
}
