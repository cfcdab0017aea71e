//! Profiles: which server `mcp-yieldshell` impersonates.
//!
//! One binary, one daemon, one engine — five tool sets, so existing client configurations of
//! other shell servers can point at `mcp-yieldshell` with only the command line changed:
//!
//! | profile | tools | drop-in for |
//! |---|---|---|
//! | `default` | `exec`, `read`, `write`, `wait`, `stop`, `ps`, `cleanup` | the original YieldShell MCP server |
//! | `jobs` | `execute`, `list`, `status`, `output`, `tail`, `kill`, `interact` | the MCP Background Job Server ([`crate::jobs`]) |
//! | `shell` | `shell_execute` | mcp-shell-server's specification ([`crate::shell`]) |
//! | `mcp-background-job` | `execute_command`, `list_jobs`, … | the published `mcp-background-job` 0.1.2 ([`crate::mcp_background_job`]) |
//! | `mcp-shell-server` | `shell_execute` | the published `mcp-shell-server` 1.1.14 ([`crate::mcp_shell_server`]) |
//!
//! `jobs` and `shell` follow the specifications the packages were written from; the two named
//! after the packages answer as the published versions do, so a client configured for
//! `uvx mcp-background-job` or `uvx mcp-shell-server` changes only its command.
//!
//! The profile comes from `--profile` or `YIELDSHELL_PROFILE`. Each profile reads its own
//! variables (`MCP_BG_*`, `ALLOW_COMMANDS`, …) on top of the `YIELDSHELL_*` ones and turns them
//! into the session it opens with the daemon; a bad value fails at startup, naming the variable.
//!
//! This module is the only place that branches on the profile: [`tool_set`] builds the profile's
//! [`ToolSet`], and everything after that goes through the trait.

use std::sync::Arc;

use yieldshell_proto::client::ConnectOptions;
use yieldshell_proto::session_config::{ConfigError, SessionConfig};

use crate::context::Context;
use crate::jobs::JobsTools;
use crate::mcp_background_job::BackgroundJobTools;
use crate::mcp_shell_server::ShellServerTools;
use crate::shell::ShellTools;
use crate::tool_set::ToolSet;
use crate::tools::DefaultTools;
use crate::{jobs, mcp_shell_server, shell};

/// Variable selecting the profile when `--profile` is not given.
pub const ENV_PROFILE: &str = "YIELDSHELL_PROFILE";

/// Which tool set the shim serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Profile {
    /// YieldShell's own seven tools.
    #[default]
    Default,
    /// The seven tools of the MCP Background Job Server's specification (JSON answers).
    Jobs,
    /// The single synchronous tool of MCP Shell Server's specification (JSON answers).
    Shell,
    /// The published `mcp-background-job` 0.1.2's seven tools.
    McpBackgroundJob,
    /// The published `mcp-shell-server` 1.1.14's `shell_execute`.
    McpShellServer,
}

impl Profile {
    /// The name used on the command line and in `YIELDSHELL_PROFILE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Jobs => "jobs",
            Profile::Shell => "shell",
            Profile::McpBackgroundJob => "mcp-background-job",
            Profile::McpShellServer => "mcp-shell-server",
        }
    }

    /// The client name this shim reports to the daemon (its handshake and log).
    pub fn client_name(self) -> String {
        match self {
            Profile::Default => "mcp-yieldshell".to_string(),
            other => format!("mcp-yieldshell --profile {}", other.as_str()),
        }
    }
}

/// A profile with its validated settings.
#[derive(Debug, Clone)]
pub enum ProfileSettings {
    /// The default tools (their settings live in the session config).
    Default,
    /// The jobs profile.
    Jobs(jobs::config::JobsSettings),
    /// The shell profile.
    Shell(shell::config::ShellSettings),
    /// The `mcp-background-job` profile (the `MCP_BG_*` variables, as the jobs profile reads them).
    McpBackgroundJob(jobs::config::JobsSettings),
    /// The `mcp-shell-server` profile.
    McpShellServer(mcp_shell_server::config::ShellServerSettings),
}

impl ProfileSettings {
    /// Which profile these settings belong to.
    pub fn profile(&self) -> Profile {
        match self {
            ProfileSettings::Default => Profile::Default,
            ProfileSettings::Jobs(_) => Profile::Jobs,
            ProfileSettings::Shell(_) => Profile::Shell,
            ProfileSettings::McpBackgroundJob(_) => Profile::McpBackgroundJob,
            ProfileSettings::McpShellServer(_) => Profile::McpShellServer,
        }
    }
}

/// Applies a profile's own variables to the session built from the `YIELDSHELL_*` ones.
pub fn configure(
    profile: Profile,
    config: &mut SessionConfig,
) -> Result<ProfileSettings, ConfigError> {
    Ok(match profile {
        Profile::Default => ProfileSettings::Default,
        Profile::Jobs => ProfileSettings::Jobs(jobs::config::apply(config)?),
        Profile::Shell => ProfileSettings::Shell(shell::config::apply(config)?),
        Profile::McpBackgroundJob => {
            ProfileSettings::McpBackgroundJob(jobs::config::apply(config)?)
        }
        Profile::McpShellServer => {
            ProfileSettings::McpShellServer(mcp_shell_server::config::apply(config)?)
        }
    })
}

/// The tool set a profile serves, over a session configured by [`configure`].
pub fn tool_set(
    settings: ProfileSettings,
    config: SessionConfig,
    opts: ConnectOptions,
) -> Arc<dyn ToolSet> {
    let ctx = Context::new(config, opts);
    match settings {
        ProfileSettings::Default => Arc::new(DefaultTools::new(ctx)),
        ProfileSettings::Jobs(_) => Arc::new(JobsTools::new(ctx)),
        ProfileSettings::Shell(s) => Arc::new(ShellTools::new(ctx, s)),
        ProfileSettings::McpBackgroundJob(_) => Arc::new(BackgroundJobTools::new(ctx)),
        ProfileSettings::McpShellServer(s) => Arc::new(ShellServerTools::new(ctx, s)),
    }
}
