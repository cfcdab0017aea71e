//! Per-session policy (README, "Security model"): what a session may run, where, and how much.
//!
//! Checks run in a fixed order — declared side effects, then command rules, then the working
//! directory, then limits — and each refusal names the rule that refused, so an agent (or its
//! user) knows what to change. The daemon's config file supplies a floor that sessions can
//! tighten but never loosen ([`PolicyFloor`]).

pub mod command_names;
pub mod redact;
pub mod risky_env;

#[cfg(test)]
mod env_properties;

use std::path::{Path, PathBuf};

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::{self as sc, SIDE_EFFECTS};

/// Why a request was refused: the daemon's one error type, under the name the policy speaks.
pub use crate::error::Error as Refusal;

/// Daemon-wide minimums from the config file.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFloor {
    /// Always blocked, whatever sessions say.
    #[serde(default)]
    pub blocked_side_effects: Vec<String>,
    /// Always refused.
    pub deny_command_regex: Option<String>,
    /// Sessions may only use cwds inside these roots.
    #[serde(default)]
    pub allowed_cwds: Vec<PathBuf>,
    /// Upper bound for a session's `max_processes`.
    pub max_processes: Option<u32>,
    /// Upper bound for a session's `max_yield_ms`.
    pub max_yield_ms: Option<u64>,
    /// Upper bound for a session's `max_output_bytes`.
    pub max_output_bytes: Option<u64>,
    /// Upper bound for a session's `max_buffer_bytes`.
    pub max_buffer_bytes: Option<u64>,
    /// The sandbox every command gets at least (`off`, `declared`, `workspace-write`,
    /// `read-only`): a session's mode narrows it, never widens it.
    pub sandbox: Option<String>,
    /// The network every command gets at most (`declared`, `off`, `on`, `allow:HOST,…`).
    pub sandbox_network: Option<String>,
}

/// Hard ceiling on the per-process ring, whatever anyone configures (memory safety).
pub const MAX_RING_BYTES: u64 = 64 * 1024 * 1024;

/// A session's policy, compiled.
#[derive(Debug, Clone)]
pub struct Policy {
    blocked_side_effects: Vec<String>,
    deny: Vec<(regex::bytes::Regex, &'static str)>,
    allow: Option<regex::bytes::Regex>,
    allowed_cwds: Vec<PathBuf>,
    allow_commands: Vec<String>,
    /// Most bytes per stream in one response.
    pub max_output_bytes: u64,
    /// Ring size per process.
    pub max_buffer_bytes: u64,
    /// Running processes this session may have.
    pub max_processes: u32,
    /// Default yield.
    pub default_yield_ms: u64,
    /// Yield ceiling.
    pub max_yield_ms: u64,
    /// Default timeout (0: none).
    pub default_timeout_ms: u64,
    /// Names of variables whose values are redacted.
    pub redact_env: Option<regex::Regex>,
    /// The session's sandbox settings.
    pub sandbox: crate::sandbox::SandboxSettings,
    /// The daemon's floor for them (config file).
    pub sandbox_floor: crate::sandbox::SandboxSettings,
}

fn compile_bytes_regex(pattern: &str, variable: &str) -> Result<regex::bytes::Regex, String> {
    regex::bytes::Regex::new(pattern).map_err(|e| format!("invalid {variable}: {e}"))
}

/// Resolves symlinks where the path exists; otherwise keeps it as given (it then cannot contain
/// any existing, resolved cwd unless it is a true prefix).
fn resolve_root(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Policy {
    /// Compiles what a session sent, applying defaults and the daemon's floor.
    pub fn compile(p: &pb::SessionPolicy, floor: &PolicyFloor) -> Result<Policy, String> {
        let mut blocked: Vec<String> = match &p.blocked_side_effects {
            Some(list) => list.names.clone(),
            None => sc::DEFAULT_BLOCKED_SIDE_EFFECTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        for name in blocked.iter().chain(&floor.blocked_side_effects) {
            if !SIDE_EFFECTS.contains(&name.as_str()) {
                return Err(format!(
                    "unknown side effect {name:?} in the block list; valid values: {}",
                    SIDE_EFFECTS.join(", ")
                ));
            }
        }
        for name in &floor.blocked_side_effects {
            if !blocked.contains(name) {
                blocked.push(name.clone());
            }
        }
        let mut deny = Vec::new();
        if let Some(d) = p.deny_command_regex.as_deref().filter(|s| !s.is_empty()) {
            deny.push((
                compile_bytes_regex(d, sc::ENV_DENY_COMMAND_REGEX)?,
                sc::ENV_DENY_COMMAND_REGEX,
            ));
        }
        if let Some(d) = floor
            .deny_command_regex
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            deny.push((
                compile_bytes_regex(d, "deny_command_regex")?,
                "the daemon's deny_command_regex",
            ));
        }
        let allow = p
            .allow_command_regex
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|a| compile_bytes_regex(a, sc::ENV_ALLOW_COMMAND_REGEX))
            .transpose()?;
        let redact_env = p
            .redact_env_regex
            .clone()
            .unwrap_or_else(|| sc::DEFAULT_REDACT_ENV_REGEX.to_string());
        let redact_env = if redact_env.is_empty() {
            None
        } else {
            Some(
                regex::Regex::new(&redact_env)
                    .map_err(|e| format!("invalid {}: {e}", sc::ENV_REDACT_ENV_REGEX))?,
            )
        };

        let session_roots: Vec<PathBuf> = p
            .allowed_cwds
            .iter()
            .map(|b| resolve_root(Path::new(&sc::bytes_os(b))))
            .collect();
        let floor_roots: Vec<PathBuf> =
            floor.allowed_cwds.iter().map(|r| resolve_root(r)).collect();
        let allowed_cwds = if floor_roots.is_empty() {
            session_roots
        } else if session_roots.is_empty() {
            floor_roots
        } else {
            // Tighten only: keep the session's roots that lie inside a floor root.
            session_roots
                .into_iter()
                .filter(|r| floor_roots.iter().any(|f| r.starts_with(f)))
                .collect::<Vec<_>>()
        };
        if allowed_cwds.is_empty() && (!p.allowed_cwds.is_empty() && !floor.allowed_cwds.is_empty())
        {
            return Err(
                "none of the session's allowed cwds lies inside the daemon's allowed_cwds".into(),
            );
        }

        let sandbox = crate::sandbox::SandboxSettings::parse(
            p.sandbox.as_deref(),
            p.sandbox_network.as_deref(),
        )?;
        let sandbox_floor = crate::sandbox::SandboxSettings::parse(
            floor.sandbox.as_deref(),
            floor.sandbox_network.as_deref(),
        )
        .map_err(|e| format!("the config file's [policy] sandbox: {e}"))?;
        let cap = |v: u64, limit: Option<u64>| limit.map_or(v, |l| v.min(l));
        Ok(Policy {
            sandbox,
            sandbox_floor,
            blocked_side_effects: blocked,
            deny,
            allow,
            allowed_cwds,
            allow_commands: p.allow_commands.clone(),
            max_output_bytes: cap(
                p.max_output_bytes.unwrap_or(sc::DEFAULT_MAX_OUTPUT_BYTES),
                floor.max_output_bytes,
            )
            .max(1),
            max_buffer_bytes: cap(
                p.max_buffer_bytes.unwrap_or(sc::DEFAULT_MAX_BUFFER_BYTES),
                floor.max_buffer_bytes,
            )
            .clamp(1, MAX_RING_BYTES),
            max_processes: floor
                .max_processes
                .map_or(p.max_processes.unwrap_or(sc::DEFAULT_MAX_PROCESSES), |l| {
                    p.max_processes.unwrap_or(sc::DEFAULT_MAX_PROCESSES).min(l)
                }),
            default_yield_ms: p.default_yield_ms.unwrap_or(sc::DEFAULT_YIELD_MS),
            max_yield_ms: cap(
                p.max_yield_ms.unwrap_or(sc::DEFAULT_MAX_YIELD_MS),
                floor.max_yield_ms,
            ),
            default_timeout_ms: p.default_timeout_ms.unwrap_or(sc::DEFAULT_TIMEOUT_MS),
            redact_env,
        })
    }

    /// Checks the declared side effects: at least one, all known, `NONE` alone, none blocked.
    pub fn check_side_effects(&self, declared: &[String]) -> Result<(), Refusal> {
        let invalid = |m: String| Refusal::new(ErrorKind::InvalidArgument, m);
        if declared.is_empty() {
            return Err(invalid(format!(
                "side_effects must list at least one category (use [\"NONE\"] for a command without side effects); valid values: {}",
                SIDE_EFFECTS.join(", ")
            )));
        }
        for d in declared {
            if !SIDE_EFFECTS.contains(&d.as_str()) {
                return Err(invalid(format!(
                    "unknown side effect {d:?}; valid values: {}",
                    SIDE_EFFECTS.join(", ")
                )));
            }
        }
        if declared.len() > 1 && declared.iter().any(|d| d == "NONE") {
            return Err(invalid(
                "NONE is exclusive: it cannot be combined with other side effects".to_string(),
            ));
        }
        let blocked: Vec<&str> = declared
            .iter()
            .filter(|d| self.blocked_side_effects.contains(d))
            .map(String::as_str)
            .collect();
        if !blocked.is_empty() {
            return Err(Refusal::new(
                ErrorKind::SideEffectBlocked,
                format!(
                    "blocked side effect {} (configured in {}); the command was not run",
                    blocked.join(", "),
                    sc::ENV_BLOCKED_SIDE_EFFECTS
                ),
            ));
        }
        Ok(())
    }

    /// Checks an `exec`'s command against the deny/allow regexes and `ALLOW_COMMANDS`, and,
    /// with `ALLOW_COMMANDS` set, its environment overlay against [`risky_env`]. The command
    /// line is parsed on a parser thread ([`command_names::inspect`]), never on the caller's.
    /// Messages never echo the command or a value (they may hold secrets); they name the rule
    /// and, for the overlay, the variable.
    pub async fn check_exec(&self, command: &[u8], overlay: &[pb::EnvVar]) -> Result<(), Refusal> {
        if let Some(line) = self.check_command_text(command)? {
            self.judge(command_names::inspect(line.to_string()).await)?;
        }
        self.check_overlay(overlay)
    }

    /// [`Policy::check_exec`] without an overlay, blocking the calling thread while the line
    /// is parsed: for tests and synchronous callers, never for async code.
    pub fn check_command(&self, command: &[u8]) -> Result<(), Refusal> {
        match self.check_command_text(command)? {
            Some(line) => self.judge(command_names::inspect_blocking(line)),
            None => Ok(()),
        }
    }

    /// The checks that need no parse; returns the line when `ALLOW_COMMANDS` needs one.
    fn check_command_text<'a>(&self, command: &'a [u8]) -> Result<Option<&'a str>, Refusal> {
        let denied = |m: String| Refusal::new(ErrorKind::CommandDenied, m);
        if command.contains(&0) {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                "command contains a NUL byte",
            ));
        }
        if command.iter().all(u8::is_ascii_whitespace) {
            return Err(Refusal::new(ErrorKind::InvalidArgument, "command is empty"));
        }
        for (re, source) in &self.deny {
            if re.is_match(command) {
                return Err(denied(format!("command matches {source}")));
            }
        }
        if let Some(allow) = &self.allow
            && !allow.is_match(command)
        {
            return Err(denied(format!(
                "command does not match {}",
                sc::ENV_ALLOW_COMMAND_REGEX
            )));
        }
        if self.allow_commands.is_empty() {
            return Ok(None);
        }
        std::str::from_utf8(command).map(Some).map_err(|_| {
            denied(format!(
                "command is not valid UTF-8, so {} cannot be checked",
                sc::ENV_ALLOW_COMMANDS
            ))
        })
    }

    /// Applies `ALLOW_COMMANDS` to what the parser found: every program listed, and no
    /// redirection that writes a file.
    fn judge(
        &self,
        inspection: Result<command_names::Inspection, command_names::CommandParseError>,
    ) -> Result<(), Refusal> {
        let denied = |m: String| Refusal::new(ErrorKind::CommandDenied, m);
        let inspection = inspection.map_err(|e| {
            denied(format!(
                "{e}; {} requires a command it can check",
                sc::ENV_ALLOW_COMMANDS
            ))
        })?;
        for program in inspection.programs {
            if !self.allow_commands.contains(&program) {
                return Err(denied(format!(
                    "program {program:?} is not in {} (allowed: {})",
                    sc::ENV_ALLOW_COMMANDS,
                    self.allow_commands.join(", ")
                )));
            }
        }
        if let Some(operator) = inspection.file_writes.first() {
            return Err(denied(format!(
                "redirection `{operator}` writes a file, which {} does not allow; only \
                 `>/dev/null`, descriptor duplications such as `2>&1`, and input \
                 redirections (`<`, `<<`, `<<<`) are allowed",
                sc::ENV_ALLOW_COMMANDS
            )));
        }
        Ok(())
    }

    /// With `ALLOW_COMMANDS` set, refuses an overlay variable that may change which program
    /// runs or what it loads ([`risky_env::why_risky`]), naming it (never its value).
    pub fn check_overlay(&self, overlay: &[pb::EnvVar]) -> Result<(), Refusal> {
        if self.allow_commands.is_empty() {
            return Ok(());
        }
        for var in overlay {
            let name = String::from_utf8_lossy(&var.name);
            if let Some(why) = risky_env::why_risky(&name) {
                return Err(Refusal::new(
                    ErrorKind::CommandDenied,
                    format!(
                        "environment variable {name} cannot be set while {} is set: {why}, so \
                         it may change which program runs or what it loads; set it in the \
                         client's own environment instead",
                        sc::ENV_ALLOW_COMMANDS
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Resolves the working directory (relative to `default_cwd`), following symlinks, and
    /// checks it exists, is a directory and lies inside the allowed roots.
    pub fn resolve_cwd(
        &self,
        requested: Option<&Path>,
        default_cwd: &Path,
    ) -> Result<PathBuf, Refusal> {
        let denied = |m: String| Refusal::new(ErrorKind::CwdDenied, m);
        let wanted = match requested {
            Some(p) if p.is_absolute() => p.to_path_buf(),
            Some(p) => default_cwd.join(p),
            None => default_cwd.to_path_buf(),
        };
        let resolved = std::fs::canonicalize(&wanted).map_err(|e| {
            denied(format!(
                "working directory {} cannot be used: {e}",
                wanted.display()
            ))
        })?;
        if !resolved.is_dir() {
            return Err(denied(format!(
                "working directory {} is not a directory",
                wanted.display()
            )));
        }
        if !self.cwd_allowed(&resolved) {
            return Err(denied(format!(
                "working directory {} (resolved: {}) is outside {} ({})",
                wanted.display(),
                resolved.display(),
                sc::ENV_ALLOWED_CWDS,
                self.allowed_cwds
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            )));
        }
        Ok(resolved)
    }

    /// Where the grant of a command declaring `declared` comes from: the session's settings,
    /// narrowed by the daemon's floor; the workspace is the allowed cwd roots, else
    /// `default_cwd` (resolved). The caller's own sandbox is added by the handler.
    pub fn sandbox_origin(
        &self,
        declared: &[String],
        default_cwd: &Path,
    ) -> crate::sandbox::Origin {
        crate::sandbox::Origin {
            settings: self.sandbox.clone(),
            floor: self.sandbox_floor.clone(),
            caller: None,
            workspace: crate::sandbox::workspace_of(&self.allowed_cwds, default_cwd),
            declared: declared.to_vec(),
        }
    }

    /// Whether a resolved cwd lies inside the allowed roots (component-wise: `/a/b` does not
    /// admit `/a/bc`). With no roots configured, everything is allowed.
    pub fn cwd_allowed(&self, resolved: &Path) -> bool {
        self.allowed_cwds.is_empty() || self.allowed_cwds.iter().any(|r| resolved.starts_with(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(p: pb::SessionPolicy) -> Policy {
        Policy::compile(&p, &PolicyFloor::default()).expect("compile")
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn side_effects_rules() {
        let p = policy(pb::SessionPolicy::default());
        assert!(p.check_side_effects(&strings(&["NONE"])).is_ok());
        assert_eq!(
            p.check_side_effects(&[]).expect_err("empty").kind,
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            p.check_side_effects(&strings(&["NONE", "DELETES_FILES"]))
                .expect_err("NONE mixed")
                .kind,
            ErrorKind::InvalidArgument
        );
        let blocked = p
            .check_side_effects(&strings(&["BREAKS_OPERATING_SYSTEM"]))
            .expect_err("blocked by default");
        assert_eq!(blocked.kind, ErrorKind::SideEffectBlocked);
        assert!(blocked.message.contains("BREAKS_OPERATING_SYSTEM"));
        assert!(
            p.check_side_effects(&strings(&["bogus"]))
                .expect_err("unknown")
                .message
                .contains("MAKES_NETWORK_REQUESTS")
        );
    }

    #[test]
    fn floor_adds_blocked_side_effects_that_a_session_cannot_clear() {
        let floor = PolicyFloor {
            blocked_side_effects: strings(&["DELETES_FILES"]),
            ..PolicyFloor::default()
        };
        let session = pb::SessionPolicy {
            blocked_side_effects: Some(pb::SideEffectList { names: vec![] }),
            ..Default::default()
        };
        let p = Policy::compile(&session, &floor).expect("compile");
        assert!(p.check_side_effects(&strings(&["DELETES_FILES"])).is_err());
    }

    #[test]
    fn deny_and_allow_regexes_do_not_echo_the_command() {
        let p = policy(pb::SessionPolicy {
            deny_command_regex: Some("rm -rf".into()),
            allow_command_regex: Some("^(echo|rm)".into()),
            ..Default::default()
        });
        let r = p.check_command(b"rm -rf /secret-path").expect_err("denied");
        assert_eq!(r.kind, ErrorKind::CommandDenied);
        assert!(!r.message.contains("secret-path"));
        assert!(p.check_command(b"echo hi").is_ok());
        assert!(p.check_command(b"ls").is_err());
    }

    #[test]
    fn allow_commands_checks_every_program() {
        let p = policy(pb::SessionPolicy {
            allow_commands: strings(&["echo", "ls"]),
            ..Default::default()
        });
        assert!(p.check_command(b"echo a && ls | echo b").is_ok());
        let r = p
            .check_command(b"echo $(rm -rf x)")
            .expect_err("substitution");
        assert!(r.message.contains("\"rm\""), "{}", r.message);
        assert!(p.check_command(b"echo 'unterminated").is_err());
        assert!(p.check_command(b"/bin/ls").is_err());
    }

    fn env(name: &str, value: &str) -> pb::EnvVar {
        pb::EnvVar {
            name: name.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        }
    }

    #[tokio::test]
    async fn allow_commands_refuses_risky_overlay_variables_by_name() {
        let p = policy(pb::SessionPolicy {
            allow_commands: strings(&["ls", "echo"]),
            ..Default::default()
        });
        for name in [
            "PATH",
            "LD_PRELOAD",
            "BASH_ENV",
            "NODE_OPTIONS",
            "ld_library_path",
        ] {
            let r = p
                .check_exec(b"ls", &[env("LANG", "C"), env(name, "/secret-dir")])
                .await
                .expect_err(name);
            assert_eq!(r.kind, ErrorKind::CommandDenied, "{name}");
            assert!(r.message.contains(name), "{}", r.message);
            assert!(!r.message.contains("secret-dir"), "{}", r.message);
        }
        assert!(
            p.check_exec(b"echo hi", &[env("LANG", "C"), env("RUST_LOG", "debug")])
                .await
                .is_ok()
        );
        // The command is checked too, before the overlay.
        let r = p
            .check_exec(b"rm x", &[env("LANG", "C")])
            .await
            .expect_err("rm");
        assert!(r.message.contains("\"rm\""), "{}", r.message);
    }

    #[tokio::test]
    async fn without_allow_commands_overlays_and_redirections_are_unchecked() {
        let p = policy(pb::SessionPolicy::default());
        assert!(
            p.check_exec(
                b"ls > f 2>>g",
                &[env("PATH", "/x"), env("LD_PRELOAD", "x.so")]
            )
            .await
            .is_ok()
        );
        assert!(p.check_command(b"PATH=/x ls >| f").is_ok());
    }

    #[test]
    fn allow_commands_refuses_redirections_that_write_files() {
        let p = policy(pb::SessionPolicy {
            allow_commands: strings(&["ls", "echo"]),
            ..Default::default()
        });
        for (line, operator) in [
            ("echo x > secret-file", "`>`"),
            ("ls >| secret-file", "`>|`"),
            ("ls 2>secret-file", "`2>`"),
            ("echo a >> secret-file", "`>>`"),
        ] {
            let r = p.check_command(line.as_bytes()).expect_err(line);
            assert_eq!(r.kind, ErrorKind::CommandDenied, "{line}");
            assert!(r.message.contains(operator), "{line}: {}", r.message);
            assert!(!r.message.contains("secret-file"), "{}", r.message);
        }
        let r = p.check_command(b"ls &>f").expect_err("&>");
        assert_eq!(r.kind, ErrorKind::CommandDenied);
        for line in ["ls > /dev/null", "ls 2>&1", "echo x 2>/dev/null 1>&2"] {
            assert!(p.check_command(line.as_bytes()).is_ok(), "{line}");
        }
    }

    #[test]
    fn cwd_containment_is_by_component_after_symlinks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("a/b");
        let sibling = tmp.path().join("a/bc");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::create_dir_all(&sibling).expect("mkdir");
        std::os::unix::fs::symlink(&sibling, root.join("escape")).expect("symlink");
        let p = policy(pb::SessionPolicy {
            allowed_cwds: vec![root.to_string_lossy().as_bytes().to_vec()],
            ..Default::default()
        });
        assert!(p.resolve_cwd(None, &root).is_ok());
        let err = p.resolve_cwd(Some(&sibling), &root).expect_err("sibling");
        assert_eq!(err.kind, ErrorKind::CwdDenied);
        assert!(p.resolve_cwd(Some(Path::new("escape")), &root).is_err());
        assert!(p.resolve_cwd(Some(Path::new("missing")), &root).is_err());
    }
}
