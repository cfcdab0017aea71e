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
    pub fn load(path: Option<&Path>) -> Result<FileConfig, String> {
        let Some(path) = path else {
            return Ok(FileConfig::default());
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileConfig::default()),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let cfg: FileConfig = toml::from_str(&text)
            .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        // Compile the floor once now, so a bad regex or side-effect name fails at startup.
        crate::policy::Policy::compile(&Default::default(), &cfg.policy)
            .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
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

    #[test]
    fn unknown_keys_and_bad_floors_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "max_running = 3\n").expect("write");
        assert!(
            FileConfig::load(Some(&p))
                .expect_err("unknown key")
                .contains("max_running")
        );
        std::fs::write(&p, "[policy]\nblocked_side_effects = [\"NOPE\"]\n").expect("write");
        assert!(
            FileConfig::load(Some(&p))
                .expect_err("bad name")
                .contains("NOPE")
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
