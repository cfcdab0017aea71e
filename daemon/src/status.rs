//! The words a process's end is told in: its lifecycle [`Status`], the [`RecordStatus`] persisted
//! in `record.json` (which adds `starting`), what ended it ([`EndedBy`]) and why it was lost
//! ([`LostReason`]). Typed here once; the wire and the record keep their strings (`as_str`, serde
//! `snake_case`), so neither format changes.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use yieldshell_proto::pb;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitHow {
    /// Exited with a code.
    Code(i32),
    /// Killed by a signal (number; never on Windows).
    Signal(i32),
}

impl ExitHow {
    /// The one the wire and the record keep as two optional fields (`exit_code`, `signal`):
    /// a code wins where a record has both.
    pub fn from_parts(code: Option<i32>, signal: Option<i32>) -> Option<ExitHow> {
        match (code, signal) {
            (Some(c), _) => Some(ExitHow::Code(c)),
            (None, Some(s)) => Some(ExitHow::Signal(s)),
            (None, None) => None,
        }
    }

    /// The exit code, when it exited with one.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitHow::Code(c) => Some(c),
            ExitHow::Signal(_) => None,
        }
    }

    /// The signal number, when a signal killed it.
    pub fn signal(self) -> Option<i32> {
        match self {
            ExitHow::Signal(s) => Some(s),
            ExitHow::Code(_) => None,
        }
    }
}

/// Lifecycle status (README, "Tools": statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Spawned and not yet ended.
    Running,
    /// The shell exited on its own.
    Completed,
    /// Ended by `stop` or by daemon shutdown.
    Stopped,
    /// Ended because `timeout_ms` fired.
    TimedOut,
    /// The daemon failed while running it.
    Failed,
    /// A crashed daemon could not keep it.
    Lost,
}

impl Status {
    /// Record/JSON name.
    pub fn as_str(self) -> &'static str {
        RecordStatus::from(self).as_str()
    }

    /// Control-plane value.
    pub fn to_pb(self) -> pb::ProcessStatus {
        match self {
            Status::Running => pb::ProcessStatus::Running,
            Status::Completed => pb::ProcessStatus::Completed,
            Status::Stopped => pb::ProcessStatus::Stopped,
            Status::TimedOut => pb::ProcessStatus::TimedOut,
            Status::Failed => pb::ProcessStatus::Failed,
            Status::Lost => pb::ProcessStatus::Lost,
        }
    }
}

/// The status a record holds: [`Status`], plus `starting` (queued before the spawn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// Written before the spawn; the process may or may not have started.
    Starting,
    /// See [`Status::Running`].
    Running,
    /// See [`Status::Completed`].
    Completed,
    /// See [`Status::Stopped`].
    Stopped,
    /// See [`Status::TimedOut`].
    TimedOut,
    /// See [`Status::Failed`].
    Failed,
    /// See [`Status::Lost`].
    Lost,
    /// A word this daemon does not know (a newer daemon wrote it): read as lost, never as a
    /// reason to throw the record away.
    #[serde(other)]
    Unknown,
}

impl RecordStatus {
    /// Record name.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Starting => "starting",
            RecordStatus::Running => "running",
            RecordStatus::Completed => "completed",
            RecordStatus::Stopped => "stopped",
            RecordStatus::TimedOut => "timed_out",
            RecordStatus::Failed => "failed",
            RecordStatus::Lost => "lost",
            RecordStatus::Unknown => "unknown",
        }
    }

    /// The lifecycle status it stands for: `starting` was never confirmed to end, so it counts
    /// as running (recovery then looks for the process).
    pub fn status(self) -> Status {
        match self {
            RecordStatus::Starting | RecordStatus::Running => Status::Running,
            RecordStatus::Completed => Status::Completed,
            RecordStatus::Stopped => Status::Stopped,
            RecordStatus::TimedOut => Status::TimedOut,
            RecordStatus::Failed => Status::Failed,
            RecordStatus::Lost | RecordStatus::Unknown => Status::Lost,
        }
    }
}

impl From<Status> for RecordStatus {
    fn from(s: Status) -> RecordStatus {
        match s {
            Status::Running => RecordStatus::Running,
            Status::Completed => RecordStatus::Completed,
            Status::Stopped => RecordStatus::Stopped,
            Status::TimedOut => RecordStatus::TimedOut,
            Status::Failed => RecordStatus::Failed,
            Status::Lost => RecordStatus::Lost,
        }
    }
}

/// What ended a process that did not complete on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// A client called `stop`.
    Stop,
    /// `timeout_ms` fired.
    Timeout,
    /// The daemon shut down.
    DaemonShutdown,
    /// A word this daemon does not know (a newer daemon wrote it).
    #[serde(other)]
    Unknown,
}

impl EndedBy {
    /// Wire/record name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndedBy::Stop => "stop",
            EndedBy::Timeout => "timeout",
            EndedBy::DaemonShutdown => "daemon_shutdown",
            EndedBy::Unknown => "unknown",
        }
    }
}

/// Why a process is `lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostReason {
    /// The daemon that ran it crashed; the next one stopped what was left.
    DaemonCrash,
    /// The recorded pid now belongs to another process: nothing was signalled.
    IdentityMismatch,
    /// A process directory without a readable record (a crash between creating it and writing
    /// the record, or a corrupt record).
    RecordMissing,
    /// Its supervising actor panicked (a bug); the watchdog killed its tree.
    SupervisorPanic,
    /// Its holder died (killed, or crashed) while the process ran; what was left was stopped.
    HolderDied,
    /// Its holder speaks a newer holder protocol than this daemon (a downgrade): it is left
    /// running, its output readable from disk, for a daemon that speaks its protocol. Only ever
    /// in memory: the record keeps saying `running`, so that daemon re-adopts it.
    NewerHolder,
    /// A word this daemon does not know (a newer daemon wrote it).
    #[serde(other)]
    Unknown,
}

impl LostReason {
    /// Wire/record name.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::DaemonCrash => "daemon_crash",
            LostReason::IdentityMismatch => "identity_mismatch",
            LostReason::RecordMissing => "record_missing",
            LostReason::SupervisorPanic => "supervisor_panic",
            LostReason::HolderDied => "holder_died",
            LostReason::NewerHolder => "newer_holder",
            LostReason::Unknown => "unknown",
        }
    }
}

/// The time `ms` milliseconds after the Unix epoch (the epoch itself for a negative `ms`).
pub fn from_unix_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_words_round_trip_and_unknown_words_are_kept_readable() {
        for s in [
            RecordStatus::Starting,
            RecordStatus::Running,
            RecordStatus::Completed,
            RecordStatus::Stopped,
            RecordStatus::TimedOut,
            RecordStatus::Failed,
            RecordStatus::Lost,
        ] {
            let json = serde_json::to_string(&s).expect("json");
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(
                serde_json::from_str::<RecordStatus>(&json).expect("back"),
                s
            );
        }
        let newer: RecordStatus = serde_json::from_str("\"paused\"").expect("unknown word");
        assert_eq!(newer.status(), Status::Lost);
        assert_eq!(
            serde_json::from_str::<EndedBy>("\"daemon_shutdown\"").expect("ended_by"),
            EndedBy::DaemonShutdown
        );
        assert_eq!(
            serde_json::from_str::<LostReason>("\"record_missing\"").expect("reason"),
            LostReason::RecordMissing
        );
        assert_eq!(RecordStatus::Starting.status(), Status::Running);
    }
}
