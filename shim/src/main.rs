//! `mcp-yieldshell` entry point: pick the profile, validate the configuration, then serve MCP on
//! stdio until the client closes stdin.

use clap::Parser;
use mcp_yieldshell::profile::{self, Profile};
use mcp_yieldshell::stdio_transport::StdioTransport;
use rmcp::ServiceExt;
use yieldshell_proto::client::ConnectOptions;
use yieldshell_proto::session_config::SessionConfig;

/// Stdio MCP server for YieldShell (configured by YIELDSHELL_* variables; see the README).
#[derive(Debug, Parser)]
#[command(name = "mcp-yieldshell", version = yieldshell_proto::VERSION_WITH_PROTOCOL)]
struct Cli {
    /// Tool set to serve: default (YieldShell's), mcp-background-job and mcp-shell-server (the
    /// published packages of those names), jobs and shell (the specifications of the MCP
    /// Background Job Server and of MCP Shell Server).
    #[arg(long, value_enum, env = profile::ENV_PROFILE, default_value_t = Profile::Default)]
    profile: Profile,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A bad configuration fails here, before anything is started (README, "How it fits together").
    let configured = SessionConfig::from_process_env().and_then(|mut config| {
        let settings = profile::configure(cli.profile, &mut config)?;
        Ok((config, settings))
    });
    let (config, settings) = match configured {
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
    let tools = profile::tool_set(
        settings,
        config,
        ConnectOptions::from_env(&cli.profile.client_name()),
    );
    let result = runtime.block_on(async move {
        // rmcp's pipes (non-blocking on Linux) under our framing, which answers every request
        // whose id it can read (stdio_transport).
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        let handler = mcp_yieldshell::server::Handler::new(tools);
        let transport = StdioTransport::with_tasks(stdin, stdout, handler.task_wire());
        let service = match handler.serve(transport).await {
            Ok(s) => s,
            // stdin closed before (or during) `initialize`: the client went away, which ends
            // the shim like any other EOF — exit 0, not an error (RELIABILITY B7).
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
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
