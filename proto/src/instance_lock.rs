//! The daemon's instance lock as a client sees it: `<state_dir>/yieldshelld.lock`, an exclusive
//! `flock` the daemon holds for its whole life, with its pid written inside.
//!
//! Clients read it when the daemon cannot tell them itself: the pid of a daemon that does not
//! answer (to name it in the error), and whether a daemon asked to shut down has really exited
//! (the kernel frees the lock only when the process is gone, even if a stopped daemon's socket
//! is already removed).

use std::fs::File;
use std::path::{Path, PathBuf};

/// File name of the instance lock inside the state directory.
pub const LOCK_FILE_NAME: &str = "yieldshelld.lock";

/// Exit status of a `yieldshelld` that found the instance lock held by another daemon
/// (`EX_CANTCREAT`). A client that started it waits for that daemon to let go, since it is
/// usually one on its way out, instead of failing at once.
pub const EXIT_LOCK_HELD: u8 = 73;

/// The instance lock of the daemon using `state_dir`.
pub fn lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join(LOCK_FILE_NAME)
}

/// The pid the daemon wrote into its lock file, if the file exists and holds one. It may be a
/// daemon that has since exited: [`is_held`] says whether one still runs.
pub fn recorded_pid(state_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(lock_path(state_dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether a daemon holds the lock. A missing lock file means none does.
///
/// Probes with a shared lock, released at once. A daemon starting in that instant would find the
/// lock taken and exit, so callers that may race a start should hold the start lock (see
/// [`crate::client`]) while they probe.
pub fn is_held(state_dir: &Path) -> std::io::Result<bool> {
    let file = match File::open(lock_path(state_dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_and_its_pid_are_seen_and_a_released_one_is_free() {
        // No tempfile dependency in this crate: a directory named after this test process.
        let dir = std::env::temp_dir().join(format!("ys-instance-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let dir = Dir(dir);
        assert!(!is_held(dir.path()).expect("no file"));
        assert_eq!(recorded_pid(dir.path()), None);
        std::fs::write(lock_path(dir.path()), "4242\n").expect("write");
        let daemon = File::options()
            .write(true)
            .open(lock_path(dir.path()))
            .expect("open");
        daemon.lock().expect("lock");
        assert!(is_held(dir.path()).expect("probe"));
        assert_eq!(recorded_pid(dir.path()), Some(4242));
        drop(daemon);
        assert!(!is_held(dir.path()).expect("probe"));
    }

    /// Removes the test directory however the test ends.
    struct Dir(PathBuf);

    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
