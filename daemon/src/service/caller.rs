//! Who is calling: a client that runs inside a sandboxed managed process (`yieldctl exec` from a
//! sandboxed command, an MCP shim it started) gets at most that process's sandbox, for what it
//! starts and for what it may do to other processes (README, "Sandbox": no way out through us).
//!
//! The peer's pid comes from the socket (`SO_PEERCRED`). A sandboxed command always has
//! `no_new_privs` and seccomp filters (`crate::sandbox::linux`), so a peer without them (one read
//! of `/proc/<pid>/status`) is not inside any sandbox of ours and costs nothing more. One with them
//! is followed up its parents to the holder or shell of a managed process (every descendant of a
//! managed command stays below its holder, the tree's child subreaper, `setsid` and double forks
//! included): that process's sandbox applies. A confined peer found under no managed process (its
//! holder died, or another tool sandboxed it) gets the narrowest sandbox, read-only and offline.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::Request;

use crate::Daemon;
use crate::process::ManagedProcess;
use crate::sandbox::{Files, Grant, Network};

/// How far up the parent chain a confined peer is followed.
const MAX_DEPTH: usize = 256;

/// The sandbox the client of `req` is held to; `None` when it runs inside no sandbox.
pub fn grant_of<T>(d: &Daemon, req: &Request<T>) -> Option<Grant> {
    let pid = peer_pid(req)?;
    grant_of_pid(d, pid)
}

#[cfg(unix)]
fn peer_pid<T>(req: &Request<T>) -> Option<i32> {
    req.extensions()
        .get::<crate::listener::ConnectionInfo>()
        .and_then(|i| i.peer.peer_cred)
        .and_then(|c| c.pid())
}

/// Windows has no sandbox, so no sandboxed caller.
#[cfg(not(unix))]
fn peer_pid<T>(_req: &Request<T>) -> Option<i32> {
    None
}

/// The sandbox the process `pid` is held to (see the module doc).
pub fn grant_of_pid(d: &Daemon, pid: i32) -> Option<Grant> {
    // More confined than the daemon: `no_new_privs` the daemon lacks, or more seccomp filters
    // (ours adds several to whatever another tool's sandbox, or the service manager, gave both).
    #[cfg(target_os = "linux")]
    let more_confined = crate::sandbox::linux::more_confined_than_me(pid)?;
    // Only Linux sandboxes through the kernel's `no_new_privs` and seccomp; elsewhere (macOS's
    // Seatbelt) a sandboxed client cannot be told from the outside.
    #[cfg(not(target_os = "linux"))]
    let more_confined = false;
    if !more_confined {
        return None;
    }
    let mut roots: HashMap<i32, Arc<ManagedProcess>> = HashMap::new();
    for p in d.registry.all() {
        if !p.is_running() {
            continue;
        }
        if let Some(h) = p.holder {
            roots.insert(h.pid, p.clone());
        }
        if let Some(shell) = p.state().identity {
            roots.insert(shell.pid, p.clone());
        }
    }
    let me = std::process::id() as i32;
    let mut at = pid;
    for _ in 0..MAX_DEPTH {
        if let Some(p) = roots.get(&at) {
            return Some(
                p.facts
                    .sandbox
                    .as_ref()
                    .map_or_else(narrowest, |c| c.grant.clone()),
            );
        }
        match crate::spawn::identity::read_stat(at) {
            Some(stat) if stat.ppid > 1 && stat.ppid != me => at = stat.ppid,
            _ => break,
        }
    }
    Some(narrowest())
}

/// What a confined caller of unknown origin may do.
fn narrowest() -> Grant {
    Grant {
        files: Files::ReadOnly,
        network: Network::Off,
    }
}

/// Whether a caller held to `caller` may act on `target` (write to it, stop it, clean it up):
/// only on a process no freer than itself.
pub fn may_act_on(caller: Option<&Grant>, target: &ManagedProcess) -> bool {
    let Some(caller) = caller else {
        return true;
    };
    let target = target
        .facts
        .sandbox
        .as_ref()
        .map_or_else(Grant::unrestricted, |c| c.grant.clone());
    target.within(caller)
}

/// The refusal of a sandboxed caller that asked for more than its sandbox allows.
pub fn denied(what: &str) -> tonic::Status {
    yieldshell_proto::errors::ErrorKind::SandboxDenied.status(format!(
        "{what}: this client runs inside a sandboxed command, which may not act on a process \
         with a wider sandbox than its own (or stop the daemon)"
    ))
}
