//! The daemon's only reaper: it owns every `waitpid` (docs/RELIABILITY.md).
//!
//! The daemon's children are the per-process holders (`holder`), which reap their own trees; a
//! holder that dies leaves its orphans to the daemon, a child subreaper (Linux), so those come
//! to us and must be reaped at once too. A `waitpid(-1)` loop would steal the exit statuses that
//! a per-child waiter (tokio's `Child::wait`) expects, so the daemon never uses tokio's process
//! API: it spawns through this reaper, which dispatches every exit status by pid.
//!
//! The race between "child exits" and "we register it" is closed by doing both under one lock:
//! [`Reaper::spawn`] forks and records the pid while holding the waiter map, and
//! [`Reaper::reap`] calls `waitpid` only while holding it. The lock is also what lets std's own
//! `spawn` reap a child whose `exec` failed without us racing it.

use std::collections::HashMap;
use std::io;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use tokio::sync::oneshot;

pub use crate::status::ExitHow;

/// Dispatches exit statuses of our children by pid.
#[derive(Debug, Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<i32, oneshot::Sender<ExitHow>>>,
}

impl Reaper {
    /// Starts the reaper task on the current tokio runtime.
    pub fn start() -> io::Result<Arc<Reaper>> {
        let reaper = Arc::new(Reaper::default());
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let task_reaper = reaper.clone();
        tokio::spawn(async move {
            // SIGCHLD coalesces; a slow tick is a safety net for anything that slipped between a
            // signal and the loop below.
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = sigchld.recv() => {}
                    _ = tick.tick() => {}
                }
                task_reaper.reap();
            }
        });
        Ok(reaper)
    }

    /// Spawns `cmd` and registers its pid before any exit can be reaped.
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<(Child, oneshot::Receiver<ExitHow>)> {
        self.spawn_with(|| {
            let child = cmd.spawn()?;
            let pid = child.id() as i32;
            Ok((child, pid))
        })
    }

    /// Runs `start` (which creates a child and returns it with its pid) under the reaper's lock,
    /// then registers the pid: no exit can be reaped in between, and a spawn routine that reaps
    /// its own failed child (std, glibc's `posix_spawn`) is never raced.
    pub fn spawn_with<T>(
        &self,
        start: impl FnOnce() -> io::Result<(T, i32)>,
    ) -> io::Result<(T, oneshot::Receiver<ExitHow>)> {
        let mut waiters = self.lock();
        let (child, pid) = start()?;
        let (tx, rx) = oneshot::channel();
        waiters.insert(pid, tx);
        Ok((child, rx))
    }

    /// Whether `pid` is a child this reaper waits for (spawned by us and not yet reaped), as
    /// opposed to an adopted orphan.
    pub fn waits_for(&self, pid: i32) -> bool {
        self.lock().contains_key(&pid)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<ExitHow>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reaps every exited child: ours get their status delivered, adopted orphans are simply
    /// collected so they never linger as zombies.
    pub fn reap(&self) {
        let mut waiters = self.lock();
        loop {
            let (pid, how) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitHow::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, ExitHow::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break, // ECHILD: no children left
            };
            if let Some(tx) = waiters.remove(&pid.as_raw()) {
                let _ = tx.send(how);
            } else {
                tracing::trace!(pid = pid.as_raw(), ?how, "reaped adopted descendant");
            }
        }
    }
}

/// Turns the daemon into a child subreaper, so orphaned descendants of managed processes are
/// re-parented to it (and can be found and reaped) instead of to init.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Subreapers exist only on Linux; elsewhere orphans go to init.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn subreaper_flag_reads_back() {
        // Runs in the test process; the flag only changes who adopts orphans of this process.
        super::become_subreaper().expect("prctl");
        assert!(nix::sys::prctl::get_child_subreaper().expect("prctl"));
    }
}
