//! Profiles: which server `mcp-yieldshell` impersonates.
//!
//! One binary, one daemon, one engine — three tool sets, so existing client configurations of
//! other shell servers can point at `mcp-yieldshell` with only the command line changed:
//!
//! | profile | tools | drop-in for |
//! |---|---|---|
//! | `default` | `exec`, `read`, `write`, `wait`, `stop`, `ps`, `cleanup` | the original YieldShell MCP server |
//! | `jobs` | `execute`, `list`, `status`, `output`, `tail`, `kill`, `interact` | the MCP Background Job Server ([`crate::jobs`]) |
//! | `shell` | `shell_execute` | mcp-shell-server ([`crate::shell`]) |
//!
//! The profile comes from `--profile` or `YIELDSHELL_PROFILE`. Each profile reads its own
//! variables (`MCP_BG_*`, `ALLOW_COMMANDS`, …) on top of the `YIELDSHELL_*` ones and turns them
//! into the session it opens with the daemon; a bad value fails at startup, naming the variable.

use yieldshell_proto::session_config::{ConfigError, SessionConfig};

use crate::{jobs, shell};

/// Variable selecting the profile when `--profile` is not given.
pub const ENV_PROFILE: &str = "YIELDSHELL_PROFILE";

/// Which tool set the shim serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Profile {
    /// YieldShell's own seven tools.
    #[default]
    Default,
    /// The Background Job Server's seven tools.
    Jobs,
    /// mcp-shell-server's single synchronous tool.
    Shell,
}

impl Profile {
    /// The name used on the command line and in `YIELDSHELL_PROFILE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Jobs => "jobs",
            Profile::Shell => "shell",
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
}

impl ProfileSettings {
    /// Which profile these settings belong to.
    pub fn profile(&self) -> Profile {
        match self {
            ProfileSettings::Default => Profile::Default,
            ProfileSettings::Jobs(_) => Profile::Jobs,
            ProfileSettings::Shell(_) => Profile::Shell,
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
    })
}

/// Looks a variable up in a session's environment snapshot (the shim's own environment).
pub(crate) fn lookup(config: &SessionConfig, name: &str) -> Option<String> {
    config
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.to_string_lossy().into_owned())
}

/// Like [`lookup`], but a value of only spaces counts as unset.
pub(crate) fn lookup_set(config: &SessionConfig, name: &str) -> Option<String> {
    lookup(config, name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}
