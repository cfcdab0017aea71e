//! A client session's context — environment, default cwd and policy — read from the client's
//! own environment (README, "Configuration").
//!
//! Clients validate everything here before connecting, so a bad configuration fails at startup
//! with a message naming the variable (and, for side effects, listing the valid values) instead
//! of surfacing later as a refused command. The daemon re-checks what it receives.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::pb;

/// Default cwd for commands (else the client's cwd).
pub const ENV_DEFAULT_CWD: &str = "YIELDSHELL_DEFAULT_CWD";
/// Allowed cwd roots, separated like `PATH`.
pub const ENV_ALLOWED_CWDS: &str = "YIELDSHELL_ALLOWED_CWDS";
/// Most bytes one response returns per stream.
pub const ENV_MAX_OUTPUT_BYTES: &str = "YIELDSHELL_MAX_OUTPUT_BYTES";
/// In-memory output ring per process.
pub const ENV_MAX_BUFFER_BYTES: &str = "YIELDSHELL_MAX_BUFFER_BYTES";
/// Running processes one session may have.
pub const ENV_MAX_PROCESSES: &str = "YIELDSHELL_MAX_PROCESSES";
/// Default `yield_ms`.
pub const ENV_DEFAULT_YIELD_MS: &str = "YIELDSHELL_DEFAULT_YIELD_MS";
/// Largest `yield_ms`.
pub const ENV_MAX_YIELD_MS: &str = "YIELDSHELL_MAX_YIELD_MS";
/// Default `timeout_ms` (0: none).
pub const ENV_DEFAULT_TIMEOUT_MS: &str = "YIELDSHELL_DEFAULT_TIMEOUT_MS";
/// Commands matching this regex are refused.
pub const ENV_DENY_COMMAND_REGEX: &str = "YIELDSHELL_DENY_COMMAND_REGEX";
/// Only commands matching this regex are allowed.
pub const ENV_ALLOW_COMMAND_REGEX: &str = "YIELDSHELL_ALLOW_COMMAND_REGEX";
/// Names of variables whose values are redacted from output.
pub const ENV_REDACT_ENV_REGEX: &str = "YIELDSHELL_REDACT_ENV_REGEX";
/// Declared side effects that are refused.
pub const ENV_BLOCKED_SIDE_EFFECTS: &str = "MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS";
/// Programs every simple command must name (comma list).
pub const ENV_ALLOW_COMMANDS: &str = "YIELDSHELL_ALLOW_COMMANDS";

/// Seed default of `YIELDSHELL_MAX_OUTPUT_BYTES`.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 20_000;
/// Seed default of `YIELDSHELL_MAX_BUFFER_BYTES`.
pub const DEFAULT_MAX_BUFFER_BYTES: u64 = 262_144;
/// Seed default of `YIELDSHELL_MAX_PROCESSES`.
pub const DEFAULT_MAX_PROCESSES: u32 = 50;
/// Seed default of `YIELDSHELL_DEFAULT_YIELD_MS`.
pub const DEFAULT_YIELD_MS: u64 = 5_000;
/// Seed default of `YIELDSHELL_MAX_YIELD_MS`.
pub const DEFAULT_MAX_YIELD_MS: u64 = 300_000;
/// Seed default of `cleanup`'s `completed_older_than_ms` and `stopped_older_than_ms` (1 h).
pub const DEFAULT_CLEANUP_OLDER_THAN_MS: u64 = 3_600_000;
/// Seed default of `YIELDSHELL_DEFAULT_TIMEOUT_MS` (no limit).
pub const DEFAULT_TIMEOUT_MS: u64 = 0;
/// Seed default of `YIELDSHELL_REDACT_ENV_REGEX`.
pub const DEFAULT_REDACT_ENV_REGEX: &str = "TOKEN|KEY|SECRET|PASSWORD";
/// Seed default of `MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS`.
pub const DEFAULT_BLOCKED_SIDE_EFFECTS: [&str; 2] =
    ["MODIFIES_PROTECTED_FILES", "BREAKS_OPERATING_SYSTEM"];

/// Every side-effect category an `exec` may declare, in the seed's order.
pub const SIDE_EFFECTS: [&str; 19] = [
    "NONE",
    "MODIFIES_WORKSPACE_FILES",
    "MODIFIES_PROTECTED_FILES",
    "MODIFIES_OUTSIDE_WORKSPACE",
    "DELETES_FILES",
    "INSTALLS_DEPENDENCIES",
    "CHANGES_SYSTEM_CONFIGURATION",
    "BREAKS_OPERATING_SYSTEM",
    "AFFECTS_PRODUCTION_SERVICES",
    "STOPS_OR_RESTARTS_SERVICES",
    "EXPOSES_SECRETS",
    "CREATES_SECURITY_RISK",
    "CHANGES_NETWORK_CONFIGURATION",
    "MAKES_NETWORK_REQUESTS",
    "RUNS_PRIVILEGED_COMMANDS",
    "USES_DESTRUCTIVE_GIT_OPERATION",
    "CONSUMES_SIGNIFICANT_RESOURCES",
    "OTHER",
    "UNKNOWN",
];

/// A configuration variable with a value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid {variable}={value:?}: {reason}")]
pub struct ConfigError {
    /// The variable's name.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong, and what would be right.
    pub reason: String,
}

/// Everything a client sends when it opens a session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The client's whole environment: commands run with it, not with the daemon's.
    pub env: Vec<(OsString, OsString)>,
    /// Where commands run when `exec` names no cwd.
    pub default_cwd: PathBuf,
    /// The session's policy, every field filled in.
    pub policy: pb::SessionPolicy,
}

impl SessionConfig {
    /// Reads this process's environment and cwd.
    pub fn from_process_env() -> Result<SessionConfig, ConfigError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        SessionConfig::from_vars(std::env::vars_os().collect(), &cwd)
    }

    /// Builds a session from explicit variables and a fallback cwd (tests use this).
    pub fn from_vars(
        env: Vec<(OsString, OsString)>,
        cwd: &Path,
    ) -> Result<SessionConfig, ConfigError> {
        let lookup = |name: &str| -> Option<String> {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let default_cwd = lookup(ENV_DEFAULT_CWD)
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| cwd.to_path_buf());

        let allowed_cwds = env
            .iter()
            .find(|(k, _)| k == ENV_ALLOWED_CWDS)
            .map(|(_, v)| {
                std::env::split_paths(v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .map(|p| path_bytes(&p))
                    .collect()
            })
            .unwrap_or_default();

        let u64_var = |name: &'static str, default: u64| -> Result<u64, ConfigError> {
            match lookup(name).map(|v| v.trim().to_string()) {
                None => Ok(default),
                Some(v) if v.is_empty() => Ok(default),
                Some(v) => v.parse::<u64>().map_err(|_| ConfigError {
                    variable: name,
                    value: v,
                    reason: "expected a non-negative integer".into(),
                }),
            }
        };
        let regex_var = |name: &'static str| -> Result<Option<String>, ConfigError> {
            match lookup(name) {
                None => Ok(None),
                Some(v) if v.is_empty() => Ok(None),
                Some(v) => match regex::Regex::new(&v) {
                    Ok(_) => Ok(Some(v)),
                    Err(e) => Err(ConfigError {
                        variable: name,
                        value: v,
                        reason: format!("not a valid regular expression: {e}"),
                    }),
                },
            }
        };

        let max_processes = u64_var(ENV_MAX_PROCESSES, u64::from(DEFAULT_MAX_PROCESSES))?;
        let max_processes = u32::try_from(max_processes).map_err(|_| ConfigError {
            variable: ENV_MAX_PROCESSES,
            value: max_processes.to_string(),
            reason: "too large".into(),
        })?;
        let max_output_bytes = u64_var(ENV_MAX_OUTPUT_BYTES, DEFAULT_MAX_OUTPUT_BYTES)?;
        let max_buffer_bytes = u64_var(ENV_MAX_BUFFER_BYTES, DEFAULT_MAX_BUFFER_BYTES)?;
        for (name, value) in [
            (ENV_MAX_OUTPUT_BYTES, max_output_bytes),
            (ENV_MAX_BUFFER_BYTES, max_buffer_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError {
                    variable: name,
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                });
            }
        }

        let blocked = match lookup(ENV_BLOCKED_SIDE_EFFECTS) {
            None => DEFAULT_BLOCKED_SIDE_EFFECTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(v) => parse_side_effect_list(&v).map_err(|reason| ConfigError {
                variable: ENV_BLOCKED_SIDE_EFFECTS,
                value: v.clone(),
                reason,
            })?,
        };

        let redact = match lookup(ENV_REDACT_ENV_REGEX) {
            None => Some(DEFAULT_REDACT_ENV_REGEX.to_string()),
            Some(_) => regex_var(ENV_REDACT_ENV_REGEX)?,
        };

        let sandbox = match lookup(crate::sandbox_settings::ENV_SANDBOX) {
            None => None,
            Some(v) => Some(
                crate::sandbox_settings::SandboxMode::parse(&v)
                    .map_err(|reason| ConfigError {
                        variable: crate::sandbox_settings::ENV_SANDBOX,
                        value: v.clone(),
                        reason,
                    })?
                    .as_str()
                    .to_string(),
            ),
        };
        let sandbox_network = match lookup(crate::sandbox_settings::ENV_SANDBOX_NETWORK) {
            None => None,
            Some(v) => Some(
                crate::sandbox_settings::NetworkSetting::parse(&v)
                    .map_err(|reason| ConfigError {
                        variable: crate::sandbox_settings::ENV_SANDBOX_NETWORK,
                        value: v.clone(),
                        reason,
                    })?
                    .to_text(),
            ),
        };

        let policy = pb::SessionPolicy {
            blocked_side_effects: Some(pb::SideEffectList { names: blocked }),
            deny_command_regex: regex_var(ENV_DENY_COMMAND_REGEX)?,
            allow_command_regex: regex_var(ENV_ALLOW_COMMAND_REGEX)?,
            allowed_cwds,
            allow_commands: lookup(ENV_ALLOW_COMMANDS)
                .map(|v| parse_command_list(&v))
                .unwrap_or_default(),
            max_output_bytes: Some(max_output_bytes),
            max_buffer_bytes: Some(max_buffer_bytes),
            max_processes: Some(max_processes),
            default_yield_ms: Some(u64_var(ENV_DEFAULT_YIELD_MS, DEFAULT_YIELD_MS)?),
            max_yield_ms: Some(u64_var(ENV_MAX_YIELD_MS, DEFAULT_MAX_YIELD_MS)?),
            default_timeout_ms: Some(u64_var(ENV_DEFAULT_TIMEOUT_MS, DEFAULT_TIMEOUT_MS)?),
            // An empty value turns redaction off; unset keeps the default.
            redact_env_regex: Some(redact.unwrap_or_default()),
            sandbox,
            sandbox_network,
        };
        Ok(SessionConfig {
            env,
            default_cwd,
            policy,
        })
    }

    /// The `OpenSession` request for this configuration.
    pub fn open_request(&self, session_id: &str, client_name: &str) -> pb::OpenSessionRequest {
        pb::OpenSessionRequest {
            session_id: session_id.to_string(),
            client_name: client_name.to_string(),
            client_version: crate::VERSION.to_string(),
            env: self
                .env
                .iter()
                .map(|(k, v)| pb::EnvVar {
                    name: os_bytes(k),
                    value: os_bytes(v),
                })
                .collect(),
            default_cwd: path_bytes(&self.default_cwd),
            policy: Some(self.policy.clone()),
        }
    }
}

/// Parses a comma-separated side-effect list: names are case-sensitive, whitespace is trimmed,
/// empty entries are ignored (so `,` clears the list). Unknown names are an error that lists
/// every valid value.
pub fn parse_side_effect_list(value: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !SIDE_EFFECTS.contains(&name) {
            return Err(format!(
                "unknown side effect {name:?}; valid values: {}",
                SIDE_EFFECTS.join(", ")
            ));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// Parses a comma list of program names, trimming spaces around each (`"ls ,echo, cat"`).
pub fn parse_command_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// The raw bytes of an OS string (lossy on platforms where that is not defined).
pub fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        s.as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        s.to_string_lossy().into_owned().into_bytes()
    }
}

/// The raw bytes of a path.
pub fn path_bytes(p: &Path) -> Vec<u8> {
    os_bytes(p.as_os_str())
}

/// The OS string for raw bytes (the inverse of [`os_bytes`]).
pub fn bytes_os(b: &[u8]) -> OsString {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b).to_os_string()
    }
    #[cfg(not(unix))]
    {
        OsString::from(String::from_utf8_lossy(b).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn defaults_follow_the_seed() {
        let c = SessionConfig::from_vars(vars(&[]), Path::new("/w")).expect("config");
        assert_eq!(c.default_cwd, PathBuf::from("/w"));
        let p = &c.policy;
        assert_eq!(p.max_output_bytes, Some(20_000));
        assert_eq!(p.max_buffer_bytes, Some(262_144));
        assert_eq!(p.max_processes, Some(50));
        assert_eq!(p.default_yield_ms, Some(5_000));
        assert_eq!(p.max_yield_ms, Some(300_000));
        assert_eq!(p.default_timeout_ms, Some(0));
        assert_eq!(
            p.blocked_side_effects.as_ref().map(|l| l.names.clone()),
            Some(vec![
                "MODIFIES_PROTECTED_FILES".to_string(),
                "BREAKS_OPERATING_SYSTEM".to_string()
            ])
        );
        assert_eq!(
            p.redact_env_regex.as_deref(),
            Some("TOKEN|KEY|SECRET|PASSWORD")
        );
    }

    #[test]
    fn unknown_side_effect_fails_listing_valid_values() {
        let err = SessionConfig::from_vars(
            vars(&[(ENV_BLOCKED_SIDE_EFFECTS, "DELETES_FILES, NOPE")]),
            Path::new("/"),
        )
        .expect_err("accepted");
        let msg = err.to_string();
        assert!(msg.contains(ENV_BLOCKED_SIDE_EFFECTS), "{msg}");
        assert!(
            msg.contains("NOPE") && msg.contains("MAKES_NETWORK_REQUESTS"),
            "{msg}"
        );
    }

    #[test]
    fn a_lone_comma_clears_the_block_list() {
        let c = SessionConfig::from_vars(vars(&[(ENV_BLOCKED_SIDE_EFFECTS, ",")]), Path::new("/"))
            .expect("config");
        assert_eq!(
            c.policy.blocked_side_effects.map(|l| l.names),
            Some(Vec::<String>::new())
        );
    }

    #[test]
    fn bad_regex_and_bad_number_name_their_variable() {
        let err = SessionConfig::from_vars(vars(&[(ENV_DENY_COMMAND_REGEX, "(")]), Path::new("/"))
            .expect_err("accepted");
        assert!(err.to_string().contains(ENV_DENY_COMMAND_REGEX));
        let err = SessionConfig::from_vars(vars(&[(ENV_MAX_PROCESSES, "many")]), Path::new("/"))
            .expect_err("accepted");
        assert!(err.to_string().contains(ENV_MAX_PROCESSES));
    }

    #[test]
    fn sandbox_settings_are_checked_and_sent_normalised() {
        let c = SessionConfig::from_vars(
            vars(&[
                (crate::sandbox_settings::ENV_SANDBOX, "Workspace-Write"),
                (
                    crate::sandbox_settings::ENV_SANDBOX_NETWORK,
                    "allow:PyPI.org",
                ),
            ]),
            Path::new("/"),
        )
        .expect("config");
        assert_eq!(c.policy.sandbox.as_deref(), Some("workspace-write"));
        assert_eq!(c.policy.sandbox_network.as_deref(), Some("allow:pypi.org"));
        let err = SessionConfig::from_vars(
            vars(&[(crate::sandbox_settings::ENV_SANDBOX, "jail")]),
            Path::new("/"),
        )
        .expect_err("accepted");
        assert!(err.to_string().contains("YIELDSHELL_SANDBOX"), "{err}");
        assert!(err.to_string().contains("read-only"), "{err}");
    }

    #[test]
    fn command_list_trims_spaces() {
        assert_eq!(
            parse_command_list("ls ,echo,  cat  ,"),
            vec!["ls", "echo", "cat"]
        );
    }

    #[test]
    fn allowed_cwds_split_like_path() {
        let c = SessionConfig::from_vars(vars(&[(ENV_ALLOWED_CWDS, "/a/b:/c")]), Path::new("/"))
            .expect("config");
        assert_eq!(
            c.policy.allowed_cwds,
            vec![b"/a/b".to_vec(), b"/c".to_vec()]
        );
    }
}
