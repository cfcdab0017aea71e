//! Daemon configuration: paths from the command line and environment, limits and the policy
//! floor from an optional TOML file.
//!
//! The daemon reads only location variables (`YIELDSHELL_SOCKET`, `YIELDSHELL_STATE_DIR`,
//! `YIELDSHELL_CONFIG`) from its own environment — never policy: policy always comes with each
//! client session (README, "How it fits together"). The file can only tighten sessions (see
//! [`PolicyFloor`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::policy::PolicyFloor;
use crate::process::actor::ActorTiming;

/// Why the config file cannot be used. Its cause is kept as the error's source: the daemon's
/// startup error prints the whole chain.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or not the daemon's keys.
    #[error("invalid config file {}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser says (with line and column).
        #[source]
        source: toml::de::Error,
    },
    /// Its policy floor does not compile (a bad regex or side-effect name).
    #[error("invalid config file {}: {message}", path.display())]
    Floor {
        /// The file.
        path: PathBuf,
        /// What is wrong, as the policy words it.
        message: String,
    },
}

/// Contents of the config file; every field is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Running processes across all sessions (default 1000).
    pub max_running_processes: Option<u32>,
    /// On-disk spool per process (default 64 MiB); the newest output is kept; 0 disables it.
    pub spool_max_bytes: Option<u64>,
    /// How long to keep draining output after a shell exits while descendants hold its pipes
    /// (default 200 ms).
    pub drain_grace_ms: Option<u64>,
    /// SIGTERM→SIGKILL grace when `timeout_ms` fires (default 2000 ms).
    pub timeout_grace_ms: Option<u64>,
    /// SIGTERM→SIGKILL grace when the daemon shuts down (default 3000 ms).
    pub shutdown_grace_ms: Option<u64>,
    /// Ended records kept before the oldest are removed automatically (default 1000).
    pub max_ended_records: Option<u32>,
    /// A connection that sends nothing for this long after connecting is closed (default
    /// 10000 ms).
    pub handshake_timeout_ms: Option<u64>,
    /// Floor for every session's policy.
    #[serde(default)]
    pub policy: PolicyFloor,
}

impl FileConfig {
    /// Global running-process limit.
    pub fn max_running_processes(&self) -> u32 {
        self.max_running_processes.unwrap_or(1000)
    }

    /// Spool cap per process.
    pub fn spool_max_bytes(&self) -> u64 {
        self.spool_max_bytes.unwrap_or(64 * 1024 * 1024)
    }

    /// Ended records kept.
    pub fn max_ended_records(&self) -> usize {
        self.max_ended_records.unwrap_or(1000) as usize
    }

    /// How long a new connection may stay silent.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms.unwrap_or(10_000))
    }

    /// Actor timing.
    pub fn timing(&self) -> ActorTiming {
        ActorTiming {
            drain_grace: Duration::from_millis(self.drain_grace_ms.unwrap_or(200)),
            timeout_grace: Duration::from_millis(self.timeout_grace_ms.unwrap_or(2_000)),
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms.unwrap_or(3_000)),
        }
    }

    /// Reads the file; a missing file is an empty config, a malformed one is an error naming it.
    pub fn load(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
        let Some(path) = path else {
            return Ok(FileConfig::default());
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileConfig::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let cfg: FileConfig = toml::from_str(&text).map_err(|source| ConfigError::Syntax {
            path: path.to_path_buf(),
            source,
        })?;
        // Compile the floor once now, so a bad regex or side-effect name fails at startup.
        crate::policy::Policy::compile(&Default::default(), &cfg.policy).map_err(|message| {
            ConfigError::Floor {
                path: path.to_path_buf(),
                message,
            }
        })?;
        Ok(cfg)
    }
}

/// Everything the daemon needs to start.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Socket to serve on.
    pub socket: PathBuf,
    /// State directory.
    pub state_dir: PathBuf,
    /// Config file used (if any).
    pub config_file: Option<PathBuf>,
    /// Its contents.
    pub file: FileConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its causes, as the daemon's startup error prints them.
    fn chain(e: &dyn std::error::Error) -> String {
        let mut text = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        text
    }

    #[test]
    fn unknown_keys_and_bad_floors_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "max_running = 3\n").expect("write");
        let e = FileConfig::load(Some(&p)).expect_err("unknown key");
        assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
        // The parser's word stays the error's source, not a string inside its message.
        assert!(!e.to_string().contains("max_running"), "{e}");
        assert!(chain(&e).contains("max_running"), "{}", chain(&e));
        std::fs::write(&p, "[policy]\nblocked_side_effects = [\"NOPE\"]\n").expect("write");
        let e = FileConfig::load(Some(&p)).expect_err("bad name");
        assert!(matches!(e, ConfigError::Floor { .. }), "{e:?}");
        assert!(e.to_string().contains("NOPE"), "{e}");
        // A file that cannot be read: the io error is the source.
        let e = FileConfig::load(Some(dir.path())).expect_err("a directory");
        assert!(
            matches!(&e, ConfigError::Read { source, .. } if source.kind() != std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        std::fs::write(
            &p,
            "max_running_processes = 3\n[policy]\nmax_processes = 2\n",
        )
        .expect("write");
        let c = FileConfig::load(Some(&p)).expect("valid");
        assert_eq!(c.max_running_processes(), 3);
        assert_eq!(c.policy.max_processes, Some(2));
        assert!(FileConfig::load(Some(&dir.path().join("missing.toml"))).is_ok());
    }
}
