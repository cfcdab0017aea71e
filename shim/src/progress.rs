//! MCP progress notifications for long blocking calls (`exec` until it yields, `wait`).
//!
//! Sent only when the client asked for them with a progress token. Blocking calls are cut into
//! slices of at most [`HEARTBEAT`]; after each slice the shim sends a notification with the time
//! waited and the latest output line, which also keeps clients that reset their request timeout
//! on progress from giving up.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};

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

    /// Time since the call started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sends one notification: seconds waited so far, and what the process printed last.
    pub async fn send(&self, what: &str, last_line: Option<String>) {
        let secs = self.elapsed().as_secs_f64();
        let mut p = ProgressNotificationParam::new(self.token.clone(), secs);
        p.total = self.total_secs;
        p.message = Some(match last_line {
            Some(l) => format!("{what} for {secs:.0}s; last output: {l}"),
            None => format!("{what} for {secs:.0}s; no output yet"),
        });
        // A client that went away is noticed by the request itself; nothing to do here.
        let _ = self.peer.notify_progress(p).await;
    }
}
