//! How long a client waits for the daemon before it calls it unresponsive.
//!
//! A stopped (`kill -STOP`) or hung daemon still accepts connections — the kernel queues them on
//! the listening socket — so without deadlines every client call would block for ever. The rules:
//!
//! - **connect + handshake** (`Hello`): [`Deadlines::connect`], a few seconds: a healthy daemon
//!   answers in milliseconds.
//! - **unary calls the daemon answers at once** (`OpenSession`, `List`, `Read`, `Write`,
//!   `Cleanup`, `Status`, `Shutdown`): [`Deadlines::rpc`].
//! - **long polls** carry their own duration: `Wait` with `timeout_ms`, `Exec` with its yield,
//!   `Stop` with its grace before SIGKILL. Their deadline is that duration plus [`Deadlines::rpc`]
//!   as the margin. A `Wait` without `timeout_ms` (wait for ever) is sent in slices of
//!   [`WAIT_SLICE`], each with its deadline, so a daemon that stops answering is noticed within
//!   one slice even then.
//! - **`Follow` streams**: [`Deadlines::rpc`] for the stream to start (the daemon answers with
//!   headers at once), then none: a quiet process is not a hung daemon, and a follower must be
//!   able to sit on a silent process for hours.

use std::time::Duration;

use crate::pb;
use crate::session_config;

/// Deadline of connecting and the `Hello` handshake.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Deadline of a unary call the daemon answers at once, and the margin added to long polls.
/// Generous: a daemon busy with floods still answers these in well under a second.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(20);

/// Longest single `Wait` a client sends for a wait without `timeout_ms`; it waits again until
/// the process settles.
pub const WAIT_SLICE: Duration = Duration::from_secs(60);

/// The grace between SIGTERM and SIGKILL of a `Stop` that names none (the seed's default), in
/// milliseconds: the one definition the daemon's `stop`, the shim's cancelled calls and tasks,
/// and the clients' deadlines share. A `Stop` may take that long before it answers.
pub const STOP_GRACE_DEFAULT_MS: u64 = 3_000;
/// The longest grace a `Stop` may ask for (longer would outlive any client's request timeout);
/// the daemon refuses more with `invalid_argument`.
pub const STOP_GRACE_MAX_MS: u64 = 600_000;
const DEFAULT_FORCE_AFTER: Duration = Duration::from_millis(STOP_GRACE_DEFAULT_MS);
const MAX_FORCE_AFTER: Duration = Duration::from_millis(STOP_GRACE_MAX_MS);

/// The deadlines of one client (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Connect and handshake.
    pub connect: Duration,
    /// A unary call; also the margin added to a long poll's own duration.
    pub rpc: Duration,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            connect: DEFAULT_CONNECT_TIMEOUT,
            rpc: DEFAULT_RPC_TIMEOUT,
        }
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

impl Deadlines {
    /// A call that may legitimately take `poll` before the daemon answers.
    pub fn long_poll(&self, poll: Duration) -> Duration {
        poll.saturating_add(self.rpc)
    }

    /// An `Exec`: the yield it asks for (else the session's default), never more than the
    /// session's largest yield. Without a session default the daemon's may be anything up to the
    /// largest, so that bounds it.
    pub fn exec(&self, req: &pb::ExecRequest, policy: Option<&pb::SessionPolicy>) -> Duration {
        let max_yield = policy
            .and_then(|p| p.max_yield_ms)
            .unwrap_or(session_config::DEFAULT_MAX_YIELD_MS);
        let yield_ms = req
            .yield_ms
            .or_else(|| policy.and_then(|p| p.default_yield_ms))
            .unwrap_or(max_yield)
            .min(max_yield);
        self.long_poll(ms(yield_ms))
    }

    /// A `Wait` of `timeout_ms` (the caller slices waits without one, see [`WAIT_SLICE`]).
    pub fn wait(&self, timeout_ms: u64) -> Duration {
        self.long_poll(ms(timeout_ms))
    }

    /// A `Stop`: the grace before SIGKILL, as the daemon clamps it.
    pub fn stop(&self, req: &pb::StopRequest) -> Duration {
        let grace = req
            .force_after_ms
            .map_or(DEFAULT_FORCE_AFTER, ms)
            .min(MAX_FORCE_AFTER);
        self.long_poll(grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_polls_get_their_own_duration_plus_the_rpc_margin() {
        let d = Deadlines {
            connect: Duration::from_secs(1),
            rpc: Duration::from_secs(2),
        };
        let exec = |yield_ms, default, max| {
            let policy = pb::SessionPolicy {
                default_yield_ms: default,
                max_yield_ms: max,
                ..Default::default()
            };
            let req = pb::ExecRequest {
                yield_ms,
                ..Default::default()
            };
            d.exec(&req, Some(&policy))
        };
        assert_eq!(exec(Some(100), None, None), ms(2_100));
        assert_eq!(exec(None, Some(5_000), None), ms(7_000));
        assert_eq!(exec(Some(900_000), None, Some(60_000)), ms(62_000));
        assert_eq!(
            exec(None, None, None),
            ms(session_config::DEFAULT_MAX_YIELD_MS + 2_000)
        );
        assert_eq!(d.wait(500), ms(2_500));
        let stop = |force_after_ms| {
            d.stop(&pb::StopRequest {
                force_after_ms,
                ..Default::default()
            })
        };
        assert_eq!(stop(None), ms(5_000));
        assert_eq!(stop(Some(u64::MAX)), ms(602_000));
        assert_eq!(d.long_poll(Duration::MAX), Duration::MAX);
    }
}
