//! Names for domain errors carried across the control plane.
//!
//! The daemon attaches the kind to every error status as the `ys-error-kind` metadata entry (and to
//! refusals inside `ExecResponse`/`StopResponse` as `error_kind`). Clients map kinds to exit codes
//! and JSON bodies; the human-readable message is for people and may change.

use std::fmt;

/// Metadata key holding the [`ErrorKind`] of an error status.
pub const ERROR_KIND_METADATA: &str = "ys-error-kind";

/// Every domain error the daemon reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No process with that id (or not visible to this session).
    UnknownProcess,
    /// The session id is not open in this daemon (e.g. after a daemon restart): open it again.
    UnknownSession,
    /// The process has ended, so the request cannot apply (write, stop).
    ProcessExited,
    /// The process's stdin was closed earlier.
    StdinClosed,
    /// An earlier write to the process's stdin is still waiting for the process to read it;
    /// retry once that one has been accepted or has failed.
    StdinBusy,
    /// A declared side effect is on the block list.
    SideEffectBlocked,
    /// The command matches the deny regex, misses the allow regex, or names a program outside
    /// `ALLOW_COMMANDS`.
    CommandDenied,
    /// The working directory is missing or outside the allowed roots.
    CwdDenied,
    /// A process limit is reached.
    LimitReached,
    /// A request argument is malformed or out of range.
    InvalidArgument,
    /// The operating system refused to start the command.
    SpawnFailed,
    /// Client and daemon speak incompatible protocol versions.
    ProtocolMismatch,
    /// The caller is not the daemon's user.
    PermissionDenied,
    /// The daemon is shutting down.
    ShuttingDown,
    /// No daemon answers and auto-start is disabled or failed.
    DaemonUnavailable,
    /// A bug or an unexpected operating-system error.
    Internal,
    /// The sandbox the command was granted cannot be enforced on this machine (no Landlock,
    /// Windows): it did not run.
    SandboxUnavailable,
    /// A sandboxed client asked for more than its own sandbox allows (to write to, stop or
    /// clean up a process with a wider sandbox, or to stop the daemon).
    SandboxDenied,
    /// A stop could not end the whole tree: processes of it survived SIGKILL (uninterruptible
    /// sleep, or another user's). The process is not recorded as stopped, and the daemon goes
    /// on killing them.
    StopIncomplete,
}

impl ErrorKind {
    /// Every kind, for round-trip tests and documentation.
    pub const ALL: [ErrorKind; 19] = [
        ErrorKind::UnknownProcess,
        ErrorKind::UnknownSession,
        ErrorKind::ProcessExited,
        ErrorKind::StdinClosed,
        ErrorKind::StdinBusy,
        ErrorKind::SideEffectBlocked,
        ErrorKind::CommandDenied,
        ErrorKind::CwdDenied,
        ErrorKind::LimitReached,
        ErrorKind::InvalidArgument,
        ErrorKind::SpawnFailed,
        ErrorKind::ProtocolMismatch,
        ErrorKind::PermissionDenied,
        ErrorKind::ShuttingDown,
        ErrorKind::DaemonUnavailable,
        ErrorKind::Internal,
        ErrorKind::SandboxUnavailable,
        ErrorKind::SandboxDenied,
        ErrorKind::StopIncomplete,
    ];

    /// Stable snake_case name used on the wire and in JSON error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownProcess => "unknown_process",
            ErrorKind::UnknownSession => "unknown_session",
            ErrorKind::ProcessExited => "process_exited",
            ErrorKind::StdinClosed => "stdin_closed",
            ErrorKind::StdinBusy => "stdin_busy",
            ErrorKind::SideEffectBlocked => "side_effect_blocked",
            ErrorKind::CommandDenied => "command_denied",
            ErrorKind::CwdDenied => "cwd_denied",
            ErrorKind::LimitReached => "limit_reached",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::SpawnFailed => "spawn_failed",
            ErrorKind::ProtocolMismatch => "protocol_mismatch",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::DaemonUnavailable => "daemon_unavailable",
            ErrorKind::Internal => "internal",
            ErrorKind::SandboxUnavailable => "sandbox_unavailable",
            ErrorKind::SandboxDenied => "sandbox_denied",
            ErrorKind::StopIncomplete => "stop_incomplete",
        }
    }

    /// Parses a wire name; unknown names (from a newer daemon) give `None`.
    pub fn parse(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The kind attached to a status, if any. Transport failures (no kind, `Unavailable`) count
    /// as [`ErrorKind::DaemonUnavailable`].
    pub fn of_status(status: &tonic::Status) -> ErrorKind {
        if let Some(kind) = status
            .metadata()
            .get(ERROR_KIND_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(ErrorKind::parse)
        {
            return kind;
        }
        match status.code() {
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown => {
                ErrorKind::DaemonUnavailable
            }
            tonic::Code::PermissionDenied => ErrorKind::PermissionDenied,
            tonic::Code::InvalidArgument => ErrorKind::InvalidArgument,
            tonic::Code::NotFound => ErrorKind::UnknownProcess,
            _ => ErrorKind::Internal,
        }
    }

    /// The gRPC code the daemon uses for this kind.
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            ErrorKind::UnknownProcess => Code::NotFound,
            ErrorKind::UnknownSession
            | ErrorKind::ProcessExited
            | ErrorKind::StdinClosed
            | ErrorKind::StdinBusy
            | ErrorKind::ProtocolMismatch
            | ErrorKind::SandboxUnavailable => Code::FailedPrecondition,
            ErrorKind::SideEffectBlocked | ErrorKind::CommandDenied | ErrorKind::CwdDenied => {
                Code::PermissionDenied
            }
            ErrorKind::PermissionDenied | ErrorKind::SandboxDenied => Code::PermissionDenied,
            ErrorKind::LimitReached => Code::ResourceExhausted,
            ErrorKind::InvalidArgument => Code::InvalidArgument,
            ErrorKind::SpawnFailed | ErrorKind::Internal => Code::Internal,
            ErrorKind::StopIncomplete => Code::Aborted,
            ErrorKind::ShuttingDown | ErrorKind::DaemonUnavailable => Code::Unavailable,
        }
    }

    /// Builds the error status the daemon sends for this kind.
    pub fn status(self, message: impl Into<String>) -> tonic::Status {
        let mut status = tonic::Status::new(self.code(), message);
        status.metadata_mut().insert(
            ERROR_KIND_METADATA,
            tonic::metadata::MetadataValue::from_static(self.as_str()),
        );
        status
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_a_status() {
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::parse(kind.as_str()), Some(kind));
            assert_eq!(ErrorKind::of_status(&kind.status("x")), kind);
        }
    }

    #[test]
    fn a_transport_failure_without_kind_reads_as_daemon_unavailable() {
        let status = tonic::Status::unavailable("connection refused");
        assert_eq!(ErrorKind::of_status(&status), ErrorKind::DaemonUnavailable);
    }
}
