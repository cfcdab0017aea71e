//! `mcp-yieldshell` entry point: validate the configuration, then serve MCP on stdio until the
//! client closes stdin.

use clap::Parser;
use rmcp::ServiceExt;
use yieldshell_proto::client::ConnectOptions;
use yieldshell_proto::session_config::SessionConfig;

/// Stdio MCP server for YieldShell (configured by YIELDSHELL_* variables; see the README).
#[derive(Debug, Parser)]
#[command(name = "mcp-yieldshell", version)]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _cli = Cli::parse();
    // A bad configuration fails here, before anything is started (DESIGN §2).
    let config = match SessionConfig::from_process_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-yieldshell: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-yieldshell: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let shim =
        mcp_yieldshell::server::Shim::new(config, ConnectOptions::from_env("mcp-yieldshell"));
    let result = runtime.block_on(async move {
        let service = mcp_yieldshell::server::Handler(shim)
            .serve(rmcp::transport::stdio_pipes())
            .await?;
        service.waiting().await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // stdout carries only JSON-RPC; problems go to stderr.
            eprintln!("mcp-yieldshell: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
