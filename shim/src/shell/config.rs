//! mcp-shell-server's variables, mapped onto a YieldShell session.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `ALLOW_COMMANDS`, `ALLOWED_COMMANDS` | *(none: every command is refused)* | comma list of programs, spaces around names allowed; both variables are read and merged, as the original does |
//! | `MCP_SHELL_DEFAULT_TIMEOUT_SECONDS` | 30 | `timeout` when a call names none |
//! | `MCP_SHELL_MAX_TIMEOUT_SECONDS` | 300 | larger `timeout`s are lowered to this |
//!
//! The allowlist also becomes the session's `allow_commands`, so the daemon re-checks every line
//! with its shell parser. Output is capped at [`OUTPUT_LIMIT_BYTES`] per stream (the original's
//! 1 MiB); the latest bytes are kept.

use yieldshell_proto::session_config::{
    ConfigError, ENV_MAX_BUFFER_BYTES, SessionConfig, parse_command_list,
};

use crate::context::{env_var, env_var_set};

/// The allowlist.
pub const ENV_ALLOW_COMMANDS: &str = "ALLOW_COMMANDS";
/// Alias of [`ENV_ALLOW_COMMANDS`].
pub const ENV_ALLOWED_COMMANDS: &str = "ALLOWED_COMMANDS";
/// Default timeout, seconds.
pub const ENV_DEFAULT_TIMEOUT: &str = "MCP_SHELL_DEFAULT_TIMEOUT_SECONDS";
/// Largest timeout, seconds.
pub const ENV_MAX_TIMEOUT: &str = "MCP_SHELL_MAX_TIMEOUT_SECONDS";

/// The original's default timeout.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The original's largest timeout.
pub const DEFAULT_MAX_TIMEOUT_SECS: u64 = 300;
/// Most bytes of each stream a response carries (the original's cap).
pub const OUTPUT_LIMIT_BYTES: u64 = 1024 * 1024;
/// The ring holding a command's interleaved output: both streams at their cap.
const RING_BYTES: u64 = 2 * OUTPUT_LIMIT_BYTES;
/// Extra yield beyond the timeout: the daemon's SIGTERM→SIGKILL grace (2 s by default) and the
/// output drain must fit before the call returns.
pub const TIMEOUT_SLACK_MS: u64 = 30_000;

/// What the shell profile needs beyond the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellSettings {
    /// Programs a command may name (empty: nothing runs).
    pub allowed: Vec<String>,
    /// Timeout when the call names none, seconds.
    pub default_timeout_secs: u64,
    /// Largest timeout, seconds.
    pub max_timeout_secs: u64,
}

fn positive_secs(
    config: &SessionConfig,
    name: &'static str,
    default: u64,
) -> Result<u64, ConfigError> {
    match env_var_set(config, name) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(ConfigError {
                variable: name,
                value: v,
                reason: "expected a whole number of seconds, at least 1".into(),
            }),
        },
    }
}

/// Reads the shell profile's variables and applies them to `config`.
pub fn apply(config: &mut SessionConfig) -> Result<ShellSettings, ConfigError> {
    let mut allowed = Vec::new();
    for name in [ENV_ALLOW_COMMANDS, ENV_ALLOWED_COMMANDS] {
        for program in env_var(config, name)
            .map(|v| parse_command_list(&v))
            .unwrap_or_default()
        {
            if !allowed.contains(&program) {
                allowed.push(program);
            }
        }
    }
    let max_timeout_secs = positive_secs(config, ENV_MAX_TIMEOUT, DEFAULT_MAX_TIMEOUT_SECS)?;
    // As in the original, a default above the maximum is lowered to it.
    let default_timeout_secs =
        positive_secs(config, ENV_DEFAULT_TIMEOUT, DEFAULT_TIMEOUT_SECS)?.min(max_timeout_secs);

    let ring_configured = env_var_set(config, ENV_MAX_BUFFER_BYTES).is_some();

    let p = &mut config.policy;
    p.allow_commands = allowed.clone();
    p.max_output_bytes = Some(OUTPUT_LIMIT_BYTES);
    if !ring_configured {
        p.max_buffer_bytes = Some(RING_BYTES);
    }
    // A call blocks until its command ends; the yield must outlast the longest timeout.
    p.max_yield_ms = Some(max_timeout_secs.saturating_mul(1000) + TIMEOUT_SLACK_MS);
    Ok(ShellSettings {
        allowed,
        default_timeout_secs,
        max_timeout_secs,
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<(SessionConfig, ShellSettings), ConfigError> {
        let env = pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let mut c = SessionConfig::from_vars(env, Path::new("/w")).expect("base config");
        let s = apply(&mut c)?;
        Ok((c, s))
    }

    #[test]
    fn both_allowlist_variables_merge_with_spaces_trimmed() {
        let (c, s) = config(&[
            (ENV_ALLOW_COMMANDS, "ls,  cat  , echo"),
            (ENV_ALLOWED_COMMANDS, "ls ,grep"),
        ])
        .expect("config");
        assert_eq!(s.allowed, ["ls", "cat", "echo", "grep"]);
        assert_eq!(c.policy.allow_commands, s.allowed);
        assert_eq!((s.default_timeout_secs, s.max_timeout_secs), (30, 300));
        assert_eq!(c.policy.max_output_bytes, Some(OUTPUT_LIMIT_BYTES));
        assert_eq!(c.policy.max_yield_ms, Some(330_000));
    }

    #[test]
    fn no_allowlist_means_nothing_is_allowed() {
        let (_, s) = config(&[]).expect("config");
        assert!(s.allowed.is_empty());
        let (_, s) = config(&[(ENV_ALLOW_COMMANDS, " , ")]).expect("config");
        assert!(s.allowed.is_empty());
    }

    #[test]
    fn timeouts_are_validated_and_the_default_never_exceeds_the_maximum() {
        let (_, s) =
            config(&[(ENV_DEFAULT_TIMEOUT, "600"), (ENV_MAX_TIMEOUT, "60")]).expect("config");
        assert_eq!((s.default_timeout_secs, s.max_timeout_secs), (60, 60));
        let err = config(&[(ENV_MAX_TIMEOUT, "0")]).expect_err("zero");
        assert_eq!(err.variable, ENV_MAX_TIMEOUT);
        let err = config(&[(ENV_DEFAULT_TIMEOUT, "soon")]).expect_err("word");
        assert_eq!(err.variable, ENV_DEFAULT_TIMEOUT);
    }
}
