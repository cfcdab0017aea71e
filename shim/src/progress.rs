//! Long blocking calls (`exec` until it yields, `wait`, `shell_execute`): MCP progress
//! notifications, and [`run_until_settled`], the one loop that waits on a process in slices.
//!
//! Notifications are sent only when the client asked for them with a progress token. Blocking
//! calls are then cut into slices of at most [`HEARTBEAT`]; after each slice the shim sends a
//! notification with the time waited and the latest output line, which also keeps clients that
//! reset their request timeout on progress from giving up.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use yieldshell_proto::client::{ClientError, Session};
use yieldshell_proto::pb;

/// Longest gap between two notifications (DESIGN asks for at most 10 s).
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// A progress reporter bound to one request.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    started: Instant,
    total_secs: Option<f64>,
}

impl Progress {
    /// A reporter when the request carries a progress token; `total_ms` is the longest the call
    /// may block.
    pub fn from_request(
        ctx: &RequestContext<RoleServer>,
        total_ms: Option<u64>,
    ) -> Option<Progress> {
        let token = ctx.meta.get_progress_token()?;
        Some(Progress {
            peer: ctx.peer.clone(),
            token,
            started: Instant::now(),
            total_secs: total_ms.map(|ms| ms as f64 / 1000.0),
        })
    }

    /// A reporter for a call that may block `budget_ms`: only when the request carries a progress
    /// token and the call may outlast one [`HEARTBEAT`] (shorter calls need no heartbeat).
    pub fn for_call(ctx: &RequestContext<RoleServer>, budget_ms: u64) -> Option<Progress> {
        Progress::from_request(ctx, Some(budget_ms)).filter(|_| budget_ms > heartbeat_ms())
    }

    /// Time since the call started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sends one notification: seconds waited so far, and what the process printed last.
    pub async fn send(&self, what: &str, last_line: Option<String>) {
        let secs = self.elapsed().as_secs_f64();
        let mut p =
            ProgressNotificationParam::new(self.token.clone(), clamped(secs, self.total_secs));
        p.total = self.total_secs;
        p.message = Some(match last_line {
            Some(l) => format!("{what} for {secs:.0}s; last output: {l}"),
            None => format!("{what} for {secs:.0}s; no output yet"),
        });
        // A client that went away is noticed by the request itself; nothing to do here.
        let _ = self.peer.notify_progress(p).await;
    }
}

/// The progress value to report: the seconds waited, never past the total (the last slice ends
/// a little after the budget, and clients show `progress / total` as a fraction).
fn clamped(secs: f64, total: Option<f64>) -> f64 {
    match total {
        Some(total) => secs.min(total),
        None => secs,
    }
}

/// [`HEARTBEAT`] in milliseconds, as the control plane counts.
pub fn heartbeat_ms() -> u64 {
    u64::try_from(HEARTBEAT.as_millis()).unwrap_or(u64::MAX)
}

/// Latest non-empty output line (for progress messages), at most 200 characters.
pub fn last_line(stdout: &[u8], stderr: &[u8]) -> Option<String> {
    let pick = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.chars().take(200).collect::<String>())
    };
    pick(stdout).or_else(|| pick(stderr))
}

/// The state after an `exec` that backgrounded, as the first slice of [`run_until_settled`]:
/// its process and output, with the wait result `deadline_reached` (it has not settled).
pub fn backgrounded(resp: &pb::ExecResponse) -> pb::WaitResponse {
    pb::WaitResponse {
        process: resp.process.clone(),
        output: resp.output.clone(),
        result: pb::WaitResult::DeadlineReached as i32,
        ..Default::default()
    }
}

/// One wait on a process, and how it ended. Every variant carries the latest state seen (an
/// empty response only when no slice answered at all).
#[derive(Debug)]
pub enum Settled {
    /// The process exited, or the wait's `until` matched.
    Done(pb::WaitResponse),
    /// The budget passed first; the process keeps running.
    OutOfTime(pb::WaitResponse),
    /// The client cancelled the request.
    Cancelled(pb::WaitResponse),
    /// A `Wait` call failed.
    Failed(ClientError, pb::WaitResponse),
}

/// What [`run_until_settled`] waits for.
pub struct SettleSpec<'a> {
    /// The request being answered (its cancellation ends the loop).
    pub request: &'a RequestContext<RoleServer>,
    /// The reporter; without one the loop waits in a single slice of the whole budget.
    pub progress: Option<&'a Progress>,
    /// What the notifications say the process is doing (`running`, `waiting`).
    pub what: &'a str,
    /// The `Wait` to repeat; its `timeout_ms` is set to each slice.
    pub wait: pb::WaitRequest,
    /// The longest the whole call may block, counted from `started`.
    pub budget_ms: u64,
    /// When the call started (before a first slice the caller ran itself, such as `exec`).
    pub started: Instant,
}

/// Waits on a process in slices until it settles (exits, or `until` matches), the budget passes,
/// the client cancels or a call fails. With a progress reporter, slices last at most one
/// [`HEARTBEAT`] and a notification follows each slice that did not settle; without one, the
/// rest of the budget is one slice. `first` is the state after a slice the caller ran itself
/// (an `exec` after its first, short slice); with `None` the loop starts with a `Wait`. A
/// cancellation ends the loop at once (a `Wait` can be dropped; the process is untouched).
pub async fn run_until_settled(
    session: &Session,
    spec: SettleSpec<'_>,
    first: Option<pb::WaitResponse>,
) -> Settled {
    let slice_max = if spec.progress.is_some() {
        heartbeat_ms()
    } else {
        spec.budget_ms
    };
    let elapsed_ms = || u64::try_from(spec.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut latest = first;
    loop {
        if let Some(state) = latest.take() {
            if state.result != pb::WaitResult::DeadlineReached as i32 {
                return Settled::Done(state);
            }
            if elapsed_ms() >= spec.budget_ms {
                return Settled::OutOfTime(state);
            }
            if let Some(progress) = spec.progress {
                let out = state.output.clone().unwrap_or_default();
                progress
                    .send(spec.what, last_line(&out.stdout, &out.stderr))
                    .await;
            }
            latest = Some(state);
        }
        let slice = spec.budget_ms.saturating_sub(elapsed_ms()).min(slice_max);
        let wait = pb::WaitRequest {
            timeout_ms: Some(slice),
            ..spec.wait.clone()
        };
        let answer = tokio::select! {
            r = session.wait(wait) => r,
            _ = spec.request.ct.cancelled() => {
                return Settled::Cancelled(latest.unwrap_or_default());
            }
        };
        match answer {
            Ok(resp) => latest = Some(resp),
            Err(e) => return Settled::Failed(e, latest.unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_never_passes_its_total() {
        assert_eq!(clamped(5.502, Some(5.5)), 5.5);
        assert_eq!(clamped(2.0, Some(5.5)), 2.0);
        assert_eq!(clamped(7.0, None), 7.0);
    }
}
