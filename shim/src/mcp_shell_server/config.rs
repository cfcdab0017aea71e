//! The variables of the published `mcp-shell-server` 1.1.14, mapped onto a YieldShell session.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `ALLOW_COMMANDS`, `ALLOWED_COMMANDS` | *(none)* | comma lists of program names, merged |
//! | `ALLOW_PATTERNS` | *(none)* | comma list of regexes a program name may match whole |
//! | `MCP_SHELL_DEFAULT_TIMEOUT_SECONDS` | 30 | `timeout` when a call names none |
//! | `MCP_SHELL_MAX_TIMEOUT_SECONDS` | 300 | larger `timeout`s are lowered to this |
//! | `MCP_SHELL_OUTPUT_LIMIT_BYTES` | 1048576 | most bytes per stream; more ends the command |
//! | `MCP_SHELL_SAFE_PATH` | `/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin` | the `PATH` commands get |
//! | `MCP_SHELL_CHILD_ENV_ALLOWLIST` | *(none)* | further variables commands inherit, by exact name |
//!
//! Commands get a minimal environment, as in the package: `PATH` (the safe one) plus the
//! variables the allowlist names, taken from the server's environment. So the session's
//! environment is replaced by exactly that.
//!
//! Where the package logs a warning and falls back to a default (a timeout of `soon`, an unsafe
//! pattern), this profile fails at startup naming the variable, as every profile does.

use std::ffi::OsString;
use std::path::Path;

use regex::Regex;
use yieldshell_proto::session_config::{ConfigError, ENV_MAX_BUFFER_BYTES, SessionConfig};

use crate::context::{env_var, env_var_set};
use crate::mcp_background_job::command_line::find_program;

/// Extra yield beyond a timeout: the daemon's SIGTERM→SIGKILL grace and the output drain.
pub const SLACK_MS: u64 = 30_000;
/// The full path a program name resolves to in `path` (configure time: names only).
pub fn resolve(program: &str, path: &str) -> Option<String> {
    if program.contains('/') {
        return None;
    }
    find_program(program, Some(path), Path::new("/"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Allowed program names.
pub const ENV_ALLOW_COMMANDS: &str = "ALLOW_COMMANDS";
/// Alias of [`ENV_ALLOW_COMMANDS`], merged with it.
pub const ENV_ALLOWED_COMMANDS: &str = "ALLOWED_COMMANDS";
/// Regexes a program name may match.
pub const ENV_ALLOW_PATTERNS: &str = "ALLOW_PATTERNS";
/// Default timeout, seconds.
pub const ENV_DEFAULT_TIMEOUT: &str = "MCP_SHELL_DEFAULT_TIMEOUT_SECONDS";
/// Largest timeout, seconds.
pub const ENV_MAX_TIMEOUT: &str = "MCP_SHELL_MAX_TIMEOUT_SECONDS";
/// Most bytes per stream.
pub const ENV_OUTPUT_LIMIT: &str = "MCP_SHELL_OUTPUT_LIMIT_BYTES";
/// The `PATH` of commands.
pub const ENV_SAFE_PATH: &str = "MCP_SHELL_SAFE_PATH";
/// Variables commands inherit.
pub const ENV_CHILD_ENV_ALLOWLIST: &str = "MCP_SHELL_CHILD_ENV_ALLOWLIST";

/// The package's `PATH` for commands.
pub const DEFAULT_SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
/// The package's default timeout.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The package's largest timeout.
pub const DEFAULT_MAX_TIMEOUT_SECS: u64 = 300;
/// The package's output limit per stream.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1024 * 1024;

/// What the profile needs beyond the session.
#[derive(Debug, Clone)]
pub struct ShellServerSettings {
    /// Allowed program names, in the order first named.
    pub allowed: Vec<String>,
    /// Allowed name patterns, anchored to match a whole name.
    pub patterns: Vec<Regex>,
    /// The patterns as written, for the tool description.
    pub pattern_sources: Vec<String>,
    /// Timeout when the call names none, seconds.
    pub default_timeout_secs: u64,
    /// Largest timeout, seconds.
    pub max_timeout_secs: u64,
    /// Most bytes per stream.
    pub output_limit: u64,
    /// The `PATH` commands get and programs are looked up in.
    pub path: String,
}

fn invalid(variable: &'static str, value: &str, reason: &str) -> ConfigError {
    ConfigError {
        variable,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn positive(config: &SessionConfig, name: &'static str, default: u64) -> Result<u64, ConfigError> {
    match env_var_set(config, name) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(invalid(name, &v, "expected a whole number, at least 1")),
        },
    }
}

fn comma_list(value: Option<String>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A variable name the package accepts in its allowlist: letters, digits and `_`.
fn valid_env_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Reads the variables, replaces the session environment with the commands' minimal one and
/// applies the limits.
pub fn apply(config: &mut SessionConfig) -> Result<ShellServerSettings, ConfigError> {
    let mut allowed: Vec<String> = Vec::new();
    for name in [ENV_ALLOW_COMMANDS, ENV_ALLOWED_COMMANDS] {
        for program in comma_list(env_var(config, name)) {
            if !allowed.contains(&program) {
                allowed.push(program);
            }
        }
    }
    let pattern_sources = comma_list(env_var(config, ENV_ALLOW_PATTERNS));
    let mut patterns = Vec::with_capacity(pattern_sources.len());
    for source in &pattern_sources {
        // The package refuses patterns that could match shell syntax.
        if source
            .chars()
            .any(|c| c.is_whitespace() || ";&|<>`".contains(c))
        {
            return Err(invalid(
                ENV_ALLOW_PATTERNS,
                source,
                "unsafe allowed command pattern (whitespace or ;&|<>`)",
            ));
        }
        let anchored = Regex::new(&format!("^(?:{source})$"))
            .map_err(|e| invalid(ENV_ALLOW_PATTERNS, source, &format!("not a regex: {e}")))?;
        patterns.push(anchored);
    }
    let max_timeout_secs = positive(config, ENV_MAX_TIMEOUT, DEFAULT_MAX_TIMEOUT_SECS)?;
    let default_timeout_secs =
        positive(config, ENV_DEFAULT_TIMEOUT, DEFAULT_TIMEOUT_SECS)?.min(max_timeout_secs);
    let output_limit = positive(config, ENV_OUTPUT_LIMIT, DEFAULT_OUTPUT_LIMIT)?;
    let path = env_var(config, ENV_SAFE_PATH)
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SAFE_PATH.to_string());
    let inherited = comma_list(env_var(config, ENV_CHILD_ENV_ALLOWLIST));

    let mut child_env: Vec<(OsString, OsString)> = vec![("PATH".into(), path.clone().into())];
    for key in inherited.iter().filter(|k| valid_env_key(k)) {
        if let Some((_, value)) = config.env.iter().find(|(k, _)| k == key.as_str()) {
            let value = value.clone();
            child_env.retain(|(k, _)| k != key.as_str());
            child_env.push((key.into(), value));
        }
    }
    let ring_configured = env_var_set(config, ENV_MAX_BUFFER_BYTES).is_some();

    config.env = child_env;
    let p = &mut config.policy;
    // The daemon re-checks every line with its shell parser against the names, also as the
    // full paths this profile runs them by. Patterns cannot be listed in advance, so with
    // ALLOW_PATTERNS set the profile's own argv check is the only one.
    p.allow_commands = if patterns.is_empty() {
        let mut names = allowed.clone();
        for program in &allowed {
            if let Some(full) = resolve(program, &path) {
                names.push(full);
            }
        }
        names
    } else {
        Vec::new()
    };
    // One byte over the limit is how a command is known to have exceeded it.
    p.max_output_bytes = Some(output_limit + 1);
    if !ring_configured {
        p.max_buffer_bytes = Some(2 * (output_limit + 1));
    }
    // A call blocks until its command ends; the yield must outlast the longest timeout.
    p.max_yield_ms = Some(max_timeout_secs.saturating_mul(1000) + SLACK_MS);
    Ok(ShellServerSettings {
        allowed,
        patterns,
        pattern_sources,
        default_timeout_secs,
        max_timeout_secs,
        output_limit,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names_resolve_on_the_path_and_paths_do_not() {
        assert!(resolve("sh", "/usr/bin:/bin").is_some());
        assert_eq!(resolve("nosuchprog", "/usr/bin:/bin"), None);
        assert_eq!(resolve("/bin/sh", "/usr/bin:/bin"), None);
    }

    fn config(pairs: &[(&str, &str)]) -> Result<(SessionConfig, ShellServerSettings), ConfigError> {
        let env = pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let mut c = SessionConfig::from_vars(env, Path::new("/w")).expect("base config");
        let s = apply(&mut c)?;
        Ok((c, s))
    }

    #[test]
    fn commands_get_a_minimal_environment() {
        let (c, s) = config(&[
            ("ALLOW_COMMANDS", "ls, cat"),
            ("ALLOWED_COMMANDS", "cat,grep"),
            ("HOME", "/root"),
            ("API_TOKEN", "x"),
            ("LANG", "C.UTF-8"),
            (ENV_CHILD_ENV_ALLOWLIST, "LANG, bad-key ,MISSING"),
        ])
        .expect("config");
        assert_eq!(s.allowed, ["ls", "cat", "grep"]);
        assert_eq!(s.path, DEFAULT_SAFE_PATH);
        let env: Vec<(String, String)> = c
            .env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect();
        assert_eq!(
            env,
            [
                ("PATH".to_string(), DEFAULT_SAFE_PATH.to_string()),
                ("LANG".to_string(), "C.UTF-8".to_string())
            ]
        );
        assert!(c.policy.allow_commands.iter().any(|n| n == "ls"));
        assert_eq!(c.policy.max_output_bytes, Some(DEFAULT_OUTPUT_LIMIT + 1));
    }

    #[test]
    fn safe_path_patterns_and_limits_are_read() {
        let (c, s) = config(&[
            (ENV_SAFE_PATH, "/opt/bin:/bin"),
            (ENV_ALLOW_PATTERNS, "^g.*, l[sl]"),
            (ENV_OUTPUT_LIMIT, "64"),
            (ENV_DEFAULT_TIMEOUT, "500"),
            (ENV_MAX_TIMEOUT, "60"),
        ])
        .expect("config");
        assert_eq!(s.path, "/opt/bin:/bin");
        assert_eq!(c.env[0].1, OsString::from("/opt/bin:/bin"));
        assert!(s.patterns[1].is_match("ls") && !s.patterns[1].is_match("lsx"));
        assert!(c.policy.allow_commands.is_empty(), "patterns: no re-check");
        assert_eq!((s.default_timeout_secs, s.max_timeout_secs), (60, 60));
        assert_eq!(s.output_limit, 64);
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            (ENV_ALLOW_PATTERNS, "a b"),
            (ENV_ALLOW_PATTERNS, "a;b"),
            (ENV_ALLOW_PATTERNS, "("),
            (ENV_OUTPUT_LIMIT, "0"),
            (ENV_MAX_TIMEOUT, "soon"),
        ] {
            let err = config(&[(var, value)]).expect_err(value);
            assert_eq!(err.variable, var, "{value}");
        }
    }
}
