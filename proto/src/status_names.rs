//! Lowercase names of the control plane's status enums (`running`, `backgrounded`, …), as the
//! JSON bodies, `yieldctl`'s tables and the daemon's own messages spell them.
//!
//! Kept outside the `views` feature because the daemon needs them too, and the daemon does not
//! compile the JSON views (serde, schemars).

use crate::pb;

/// Lowercase status name of a process (`running`, `completed`, `stopped`, `timed_out`, `failed`,
/// `lost`).
pub fn process_status_name(status: i32) -> &'static str {
    match pb::ProcessStatus::try_from(status).unwrap_or(pb::ProcessStatus::Unspecified) {
        pb::ProcessStatus::Running => "running",
        pb::ProcessStatus::Completed => "completed",
        pb::ProcessStatus::Stopped => "stopped",
        pb::ProcessStatus::TimedOut => "timed_out",
        pb::ProcessStatus::Failed => "failed",
        pb::ProcessStatus::Lost => "lost",
        pb::ProcessStatus::Unspecified => "unknown",
    }
}

/// Lowercase status name of an `exec` outcome.
pub fn exec_status_name(status: i32) -> &'static str {
    match pb::ExecStatus::try_from(status).unwrap_or(pb::ExecStatus::Unspecified) {
        pb::ExecStatus::Completed => "completed",
        pb::ExecStatus::Backgrounded => "backgrounded",
        pb::ExecStatus::TimedOut => "timed_out",
        pb::ExecStatus::Stopped => "stopped",
        pb::ExecStatus::FailedToStart => "failed_to_start",
        pb::ExecStatus::Failed => "failed",
        pb::ExecStatus::Lost => "lost",
        pb::ExecStatus::Unspecified => "unknown",
    }
}
