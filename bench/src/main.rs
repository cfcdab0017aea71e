//! `yieldshell-bench`: YieldShell measured side by side with the original Python server
//! (`mcp-yieldshell` 1.1.2 from PyPI, installed into a throwaway virtualenv by this program) and
//! with the machine's floor, in one run, through one real MCP client (rmcp over stdio).
//!
//! Run from the workspace root: `cargo run --release -p yieldshell-bench` (see
//! `docs/BENCHMARKS.md`). It prints a table and writes JSON. Benchmarks are not tests: nothing
//! here asserts; targets are reported as met or missed.

mod agent_cost;
mod echo;
mod measure;
mod pipelining;
mod report;
mod sandbox;
mod servers;
mod stats;
mod terminal;
mod versus;
mod viewers;

use std::path::PathBuf;

use clap::Parser;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(name = "yieldshell-bench", version)]
pub struct Opts {
    /// Fewer iterations and the small sizes only (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Skip the original Python server (no virtualenv, no network).
    #[arg(long)]
    pub no_original: bool,
    /// Also run the 1 GiB flood against the original server (slow).
    #[arg(long)]
    pub full: bool,
    /// Where to write the JSON results.
    #[arg(long, default_value = "target/bench/results.json")]
    pub json: PathBuf,
    /// Where the virtualenv with the original server is kept between runs.
    #[arg(long, default_value = "target/bench/venv")]
    pub venv: PathBuf,
    /// Only the agent-cost mode: six everyday jobs scripted as an agent would do them (calls,
    /// text bytes read, seconds), YieldShell beside the original; prints a Markdown table. Byte
    /// counts do not depend on the build: debug binaries are fine.
    #[arg(long)]
    pub agent_cost: bool,
    /// Only terminal mode (ARCHITECTURE.md, "Terminal processes"): exec latency on a PTY beside pipes, flood throughput
    /// through a PTY, and prompt-to-waiting_for_input latency; prints JSON.
    #[arg(long)]
    pub terminal: bool,
    /// Only the paired comparison: this build's daemon against the one in this directory
    /// (another build's `target/release`), both running at once, `exec` latency measured in
    /// interleaved rounds (median of per-round differences), then many-clients throughput and
    /// start rate in alternating blocks; prints JSON.
    #[arg(long, value_name = "DIR")]
    pub versus: Option<PathBuf>,
    /// Only the sandbox's cost: `exec true` sandboxed (each kind of sandbox, with and without
    /// namespaces) paired with unsandboxed rounds; prints JSON.
    #[arg(long)]
    pub sandbox: bool,
    /// Only the viewers' load (`yieldctl top`): the daemon's CPU time per second and memory with
    /// 1,000 processes running and 0, 1 and 10 `Watch` streams open; prints JSON.
    #[arg(long)]
    pub viewers: bool,
    /// Only one client's pipelining (issue 29 item 9): the daemon's and the shim's peak memory
    /// while a client pipelines reads without reading the answers; prints JSON.
    #[arg(long)]
    pub pipelining: bool,
    /// Agent-cost mode: how long the scripted test run takes, in seconds.
    #[arg(long, default_value_t = 20)]
    pub test_run_seconds: u32,
    /// Internal: serve a one-tool echo MCP server on stdio (the MCP floor).
    #[arg(long, hide = true)]
    pub echo_server: bool,
}

fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    if opts.echo_server {
        return echo::serve();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if opts.agent_cost {
        return runtime.block_on(agent_cost::run(&opts));
    }
    if let Some(base) = &opts.versus {
        return runtime.block_on(versus::run(&opts, base));
    }
    if opts.terminal {
        return runtime.block_on(terminal::run(&opts));
    }
    if opts.sandbox {
        return runtime.block_on(sandbox::run(&opts));
    }
    if opts.pipelining {
        return runtime.block_on(pipelining::run(&opts));
    }
    if opts.viewers {
        return runtime.block_on(viewers::run(&opts));
    }
    runtime.block_on(measure::run_all(&opts))
}
