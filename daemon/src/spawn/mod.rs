//! The lower room of process starting, which knows nothing of holders or managed processes:
//! the shell's spawn ([`shell`], re-exported here), pseudo-terminals ([`pty`]), the identity of
//! a process (pid and start time, [`identity`]) and the daemon's reaper ([`reaper`]). The holder
//! (`crate::holder`) starts shells with it; the daemon's process handling (`crate::process`)
//! builds on both: `process → holder → spawn`, never back.

pub mod identity;
pub mod pty;
#[cfg(unix)]
pub mod reaper;
#[cfg(unix)]
mod shell;

#[cfg(unix)]
pub use shell::*;

/// The environment variable carrying a process's YieldShell id (its marker): every managed
/// command gets it, and descendants that leave the process group are found by it.
pub const MARKER_VAR: &str = "YIELDSHELL_PROCESS_ID";
