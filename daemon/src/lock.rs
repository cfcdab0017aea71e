//! The single-instance lock: an exclusive `flock` on `<state_dir>/yieldshelld.lock`, held for the
//! daemon's whole life.
//!
//! The kernel releases it when the daemon dies, even by SIGKILL, so a stale lock cannot exist
//! (unlike a pid file). The descriptor is close-on-exec (std opens files that way), so a managed
//! process never inherits it and cannot keep a dead daemon "alive" (docs/RELIABILITY.md).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Held while the daemon runs.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another daemon holds it.
    #[error("another yieldshelld (pid {pid}) already runs with state directory {}", dir.display())]
    Held {
        /// Its pid, as it wrote it.
        pid: String,
        /// The state directory.
        dir: PathBuf,
    },
    /// The lock file could not be used.
    #[error("using lock file {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl InstanceLock {
    /// Takes the lock in `state_dir` without waiting, and writes our pid into it.
    pub fn acquire(state_dir: &Path) -> Result<InstanceLock, LockError> {
        let path = state_dir.join("yieldshelld.lock");
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        // Never through a planted symlink: the lock file is truncated and written below
        // (RELIABILITY S3).
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW).mode(0o600);
        }
        let mut file = options.open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(LockError::Held {
                    pid: pid.trim().to_string(),
                    dir: state_dir.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(InstanceLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_in_the_same_dir_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = InstanceLock::acquire(dir.path()).expect("first");
        let err = InstanceLock::acquire(dir.path()).expect_err("second");
        assert!(err.to_string().contains("already runs"), "{err}");
        drop(first);
        InstanceLock::acquire(dir.path()).expect("after release");
    }
}
