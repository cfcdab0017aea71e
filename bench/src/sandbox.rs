//! `--sandbox`: what the enforced sandbox costs an `exec` (README, "Sandbox"; target: within
//! 0.5 ms of an unsandboxed one). One daemon, `exec true` in an unsandboxed session paired round
//! by round with the same in a sandboxed one (the median of the per-round differences, as
//! `--versus` does), for each kind of sandbox: read-only and offline (`NONE` under `declared`),
//! a workspace with a `.git` kept read-only, and an allowlist with its proxy. Then the same on a
//! daemon that acts as on a machine refusing user namespaces (Landlock and seccomp alone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;
use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

use crate::Opts;
use crate::servers::{Bench, own_bin_dir};
use crate::stats::Summary;
use crate::versus::{paired, spread};

/// One `exec true` declaring `declared`.
async fn exec_true(s: &Session, declared: &str) -> anyhow::Result<Duration> {
    let req = pb::ExecRequest {
        session_id: s.id().to_string(),
        command: b"true".to_vec(),
        side_effects: vec![declared.to_string()],
        yield_ms: Some(30_000),
        ..Default::default()
    };
    let t = Instant::now();
    let r = s
        .call(|mut c| {
            let req = req.clone();
            async move { c.exec(req).await }
        })
        .await?;
    let took = t.elapsed();
    if r.status != pb::ExecStatus::Completed as i32 {
        bail!("`true` did not complete: {r:?}");
    }
    Ok(took)
}

/// The kinds of sandbox measured: a name, the session's network setting, the declaration.
const KINDS: [(&str, &str, &str); 3] = [
    ("read_only_offline", "declared", "NONE"),
    (
        "workspace_git_read_only",
        "declared",
        "MODIFIES_WORKSPACE_FILES",
    ),
    (
        "allowlist_proxy",
        "allow:localhost",
        "MAKES_NETWORK_REQUESTS",
    ),
];

/// Measures one daemon (with or without namespaces).
async fn measure(
    opts: &Opts,
    namespaces: bool,
    rounds: usize,
) -> anyhow::Result<serde_json::Value> {
    let env: &[(&str, &str)] = if namespaces {
        &[]
    } else {
        &[("YIELDSHELL_TEST_FAULTS", "sandbox_namespaces:refused")]
    };
    let bench = Bench::setup_with_env(own_bin_dir()?, &opts.venv, true, env).await?;
    std::fs::create_dir_all(bench.work.join(".git"))?;
    let plain = Arc::new(bench.control_session_with("bench-off", &[])?);
    let mut figures = serde_json::Map::new();
    for (name, network, declared) in KINDS {
        let sandboxed = Arc::new(bench.control_session_with(
            &format!("bench-{name}"),
            &[
                ("YIELDSHELL_SANDBOX", "declared"),
                ("YIELDSHELL_SANDBOX_NETWORK", network),
            ],
        )?);
        for _ in 0..20 {
            exec_true(&plain, declared).await?;
            exec_true(&sandboxed, declared).await?;
        }
        let sides = [plain.clone(), sandboxed];
        let (samples, diffs) = paired(&sides, rounds, Duration::ZERO, |s| async move {
            exec_true(&s, declared).await
        })
        .await?;
        figures.insert(
            name.to_string(),
            json!({
                "off": Summary::of(&samples[0]),
                "sandboxed": Summary::of(&samples[1]),
                "sandboxed_minus_off_paired": spread(diffs),
            }),
        );
    }
    Ok(serde_json::Value::Object(figures))
}

/// Runs the sandbox cost measurement and prints JSON.
pub async fn run(opts: &Opts) -> anyhow::Result<()> {
    let rounds = if opts.quick { 40 } else { 400 };
    eprintln!("sandboxed exec cost, {rounds} paired rounds per kind, with namespaces…");
    let with = measure(opts, true, rounds).await?;
    eprintln!("…and without namespaces (Landlock and seccomp alone)…");
    let without = measure(opts, false, rounds).await?;
    let doc = json!({"namespaces": with, "no_namespaces": without});
    println!("{}", serde_json::to_string_pretty(&doc)?);
    let path = opts.json.with_file_name("sandbox.json");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
    eprintln!("results written to {}", path.display());
    Ok(())
}
