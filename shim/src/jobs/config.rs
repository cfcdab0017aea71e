//! The Background Job Server's `MCP_BG_*` variables, mapped onto a YieldShell session.
//!
//! | variable | default | becomes |
//! |---|---|---|
//! | `MCP_BG_MAX_JOBS` | 10 | the session's running-process limit |
//! | `MCP_BG_MAX_OUTPUT_SIZE` | `10MB` | the per-job output ring (`10MB`, `512KB`, `1GB` or bytes; units are powers of 1024, as in the original) |
//! | `MCP_BG_JOB_TIMEOUT` | none | default `timeout_ms` (seconds; `0` means none) |
//! | `MCP_BG_ALLOWED_COMMANDS` | all | `YIELDSHELL_ALLOW_COMMANDS` semantics: programs, checked with a shell parser |
//! | `MCP_BG_WORKING_DIR` | the shim's cwd | the default cwd of jobs |
//! | `MCP_BG_CLEANUP_INTERVAL` | 300 | validated and otherwise ignored: the daemon keeps ended jobs (see `docs/DECISIONS.md`) |
//!
//! A set `MCP_BG_*` variable wins over its `YIELDSHELL_*` counterpart; an unset one falls back to
//! the `YIELDSHELL_*` variable if that is set, else to the spec's default above.

use std::path::PathBuf;
use std::time::Duration;

use yieldshell_proto::session_config::{
    ConfigError, ENV_DEFAULT_TIMEOUT_MS, ENV_MAX_BUFFER_BYTES, ENV_MAX_OUTPUT_BYTES,
    ENV_MAX_PROCESSES, SessionConfig, parse_command_list,
};

use crate::context::env_var_set;

/// Most concurrently running jobs.
pub const ENV_MAX_JOBS: &str = "MCP_BG_MAX_JOBS";
/// Output kept per job.
pub const ENV_MAX_OUTPUT_SIZE: &str = "MCP_BG_MAX_OUTPUT_SIZE";
/// Default job timeout, seconds.
pub const ENV_JOB_TIMEOUT: &str = "MCP_BG_JOB_TIMEOUT";
/// Cleanup interval, seconds (accepted, not used).
pub const ENV_CLEANUP_INTERVAL: &str = "MCP_BG_CLEANUP_INTERVAL";
/// Allowed programs, comma-separated.
pub const ENV_ALLOWED_COMMANDS: &str = "MCP_BG_ALLOWED_COMMANDS";
/// Where jobs run.
pub const ENV_WORKING_DIR: &str = "MCP_BG_WORKING_DIR";

/// The spec's job limit.
pub const DEFAULT_MAX_JOBS: u32 = 10;
/// The spec's output buffer per job.
pub const DEFAULT_MAX_OUTPUT_SIZE: u64 = 10 * 1024 * 1024;
/// The spec's cleanup interval.
pub const DEFAULT_CLEANUP_INTERVAL: Duration = Duration::from_secs(300);
/// Bytes per stream one control-plane read returns; `output` pages through a job's log in reads
/// of this size, so no single message approaches the gRPC size limit however large the ring is.
pub const READ_PAGE_BYTES: u64 = 1024 * 1024;

/// What the jobs profile needs beyond the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsSettings {
    /// The output kept per job, as configured (the daemon caps rings at 64 MiB).
    pub max_output_size: u64,
    /// `MCP_BG_CLEANUP_INTERVAL`, kept only to be reported.
    pub cleanup_interval: Duration,
}

fn invalid(variable: &'static str, value: &str, reason: &str) -> ConfigError {
    ConfigError {
        variable,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// Parses a size: bytes, or a number with `B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB` or `G`/`GB`/`GiB`
/// (case-insensitive, powers of 1024 as the original server counts `MB`).
pub fn parse_size(value: &str) -> Option<u64> {
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(factor)
}

fn seconds(variable: &'static str, value: &str) -> Result<u64, ConfigError> {
    value
        .parse::<u64>()
        .map_err(|_| invalid(variable, value, "expected a whole number of seconds"))
}

/// Applies the `MCP_BG_*` variables (and the spec's defaults) to `config`.
pub fn apply(config: &mut SessionConfig) -> Result<JobsSettings, ConfigError> {
    let yieldshell_set = |name: &str| env_var_set(config, name).is_some();

    let max_jobs = match env_var_set(config, ENV_MAX_JOBS) {
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(invalid(
                    ENV_MAX_JOBS,
                    &v,
                    "expected a whole number, at least 1",
                ));
            }
        },
        None if yieldshell_set(ENV_MAX_PROCESSES) => None,
        None => Some(DEFAULT_MAX_JOBS),
    };
    let max_output_size = match env_var_set(config, ENV_MAX_OUTPUT_SIZE) {
        Some(v) => match parse_size(&v) {
            Some(n) if n >= 1 => Some(n),
            _ => {
                return Err(invalid(
                    ENV_MAX_OUTPUT_SIZE,
                    &v,
                    "expected a size such as 10MB, 512KB or a number of bytes",
                ));
            }
        },
        None if yieldshell_set(ENV_MAX_BUFFER_BYTES) => None,
        None => Some(DEFAULT_MAX_OUTPUT_SIZE),
    };
    let timeout_ms = match env_var_set(config, ENV_JOB_TIMEOUT) {
        Some(v) => Some(seconds(ENV_JOB_TIMEOUT, &v)?.saturating_mul(1000)),
        None if yieldshell_set(ENV_DEFAULT_TIMEOUT_MS) => None,
        // The spec's default is no timeout.
        None => Some(0),
    };
    let cleanup_interval = match env_var_set(config, ENV_CLEANUP_INTERVAL) {
        Some(v) => Duration::from_secs(seconds(ENV_CLEANUP_INTERVAL, &v)?),
        None => DEFAULT_CLEANUP_INTERVAL,
    };
    let allowed = env_var_set(config, ENV_ALLOWED_COMMANDS).map(|v| parse_command_list(&v));
    let working_dir = env_var_set(config, ENV_WORKING_DIR).map(PathBuf::from);
    let page_configured = yieldshell_set(ENV_MAX_OUTPUT_BYTES);

    let p = &mut config.policy;
    if let Some(n) = max_jobs {
        p.max_processes = Some(n);
    }
    if let Some(n) = max_output_size {
        p.max_buffer_bytes = Some(n);
    }
    if let Some(ms) = timeout_ms {
        p.default_timeout_ms = Some(ms);
    }
    if let Some(list) = allowed {
        p.allow_commands = list;
    }
    // `output` pages with reads of READ_PAGE_BYTES; a smaller per-response cap (the default
    // profile's 20 kB) would only mean more round trips. An explicit setting is respected.
    if !page_configured {
        p.max_output_bytes = Some(READ_PAGE_BYTES);
    }
    if let Some(dir) = working_dir {
        config.default_cwd = dir;
    }
    Ok(JobsSettings {
        max_output_size: config
            .policy
            .max_buffer_bytes
            .unwrap_or(DEFAULT_MAX_OUTPUT_SIZE),
        cleanup_interval,
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::Path;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<(SessionConfig, JobsSettings), ConfigError> {
        let env = pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let mut c = SessionConfig::from_vars(env, Path::new("/w")).expect("base config");
        let s = apply(&mut c)?;
        Ok((c, s))
    }

    #[test]
    fn defaults_follow_the_spec() {
        let (c, s) = config(&[]).expect("config");
        assert_eq!(c.policy.max_processes, Some(10));
        assert_eq!(c.policy.max_buffer_bytes, Some(10 * 1024 * 1024));
        assert_eq!(c.policy.default_timeout_ms, Some(0));
        assert!(c.policy.allow_commands.is_empty());
        assert_eq!(c.default_cwd, PathBuf::from("/w"));
        assert_eq!(s.cleanup_interval, Duration::from_secs(300));
    }

    #[test]
    fn variables_map_onto_the_session() {
        let (c, s) = config(&[
            (ENV_MAX_JOBS, "3"),
            (ENV_MAX_OUTPUT_SIZE, "512KB"),
            (ENV_JOB_TIMEOUT, "90"),
            (ENV_ALLOWED_COMMANDS, "ls, npm ,cat"),
            (ENV_WORKING_DIR, "/srv/app"),
            (ENV_CLEANUP_INTERVAL, "60"),
        ])
        .expect("config");
        assert_eq!(c.policy.max_processes, Some(3));
        assert_eq!(c.policy.max_buffer_bytes, Some(512 * 1024));
        assert_eq!(s.max_output_size, 512 * 1024);
        assert_eq!(c.policy.default_timeout_ms, Some(90_000));
        assert_eq!(c.policy.allow_commands, ["ls", "npm", "cat"]);
        assert_eq!(c.default_cwd, PathBuf::from("/srv/app"));
        assert_eq!(s.cleanup_interval, Duration::from_secs(60));
    }

    #[test]
    fn yieldshell_variables_apply_when_the_spec_variable_is_unset() {
        let (c, _) = config(&[
            (ENV_MAX_PROCESSES, "4"),
            (ENV_MAX_BUFFER_BYTES, "4096"),
            (ENV_DEFAULT_TIMEOUT_MS, "1500"),
        ])
        .expect("config");
        assert_eq!(c.policy.max_processes, Some(4));
        assert_eq!(c.policy.max_buffer_bytes, Some(4096));
        assert_eq!(c.policy.default_timeout_ms, Some(1500));
        let (c, _) = config(&[(ENV_MAX_PROCESSES, "4"), (ENV_MAX_JOBS, "2")]).expect("config");
        assert_eq!(c.policy.max_processes, Some(2));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            (ENV_MAX_JOBS, "0"),
            (ENV_MAX_JOBS, "many"),
            (ENV_MAX_OUTPUT_SIZE, "10XB"),
            (ENV_MAX_OUTPUT_SIZE, "0"),
            (ENV_JOB_TIMEOUT, "-5"),
            (ENV_CLEANUP_INTERVAL, "soon"),
        ] {
            let err = config(&[(var, value)]).expect_err(value);
            assert_eq!(err.variable, var);
        }
    }

    #[test]
    fn sizes_accept_units_and_bytes() {
        assert_eq!(parse_size("10MB"), Some(10 * 1024 * 1024));
        assert_eq!(parse_size("10mb"), Some(10 * 1024 * 1024));
        assert_eq!(parse_size("512KB"), Some(512 * 1024));
        assert_eq!(parse_size("2 GiB"), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("1048576"), Some(1_048_576));
        assert_eq!(parse_size("7B"), Some(7));
        assert_eq!(parse_size("MB"), None);
        assert_eq!(parse_size("1.5MB"), None);
        assert_eq!(parse_size("99999999999999999999GB"), None);
    }
}
