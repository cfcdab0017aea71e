//! The gRPC `Control` service: thin handlers over the daemon's state.
//!
//! Handlers validate, look up, then read state or send a control to the process's actor and
//! await the reply. They never hold a lock across an `.await` and never leave half-done state
//! when tonic drops them because the client went away: every side effect happens inside an actor
//! (or, for `exec`, synchronously before the first `.await` that could be cancelled).
//!
//! One file per group of calls: [`exec`] (its start is `crate::process::launch`), [`output`]
//! (read, follow, wait; `read` with `grep` is [`search`]), [`procs`] (write, stop, list, cleanup), [`admin`] (hello, status,
//! sessions, shutdown), [`watch`] (the live table of `yieldctl top`).

mod admin;
mod caller;
mod exec;
mod output;
mod procs;
mod search;
pub mod watch;

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::pb::control_server::Control;

use crate::Daemon;
use crate::output::StreamFilter;
use crate::process::ManagedProcess;
use crate::session::Session;

/// Longest process id accepted (ids are `proc_` + 12 hex digits; leave room for other forms).
const MAX_PROCESS_ID: usize = 64;

/// The service, sharing the daemon state.
#[derive(Debug, Clone)]
pub struct ControlService {
    daemon: Arc<Daemon>,
}

impl ControlService {
    /// A service over `daemon`.
    pub fn new(daemon: Arc<Daemon>) -> ControlService {
        ControlService { daemon }
    }

    /// Finds a process the session may see. Unknown and invisible ids get the same answer, so a
    /// session cannot probe for processes outside its allowed directories.
    fn lookup(&self, session: &Session, id: &str) -> Result<Arc<ManagedProcess>, Status> {
        let unknown = || ErrorKind::UnknownProcess.status(format!("Unknown process_id: {id}"));
        if id.is_empty() || id.len() > MAX_PROCESS_ID {
            return Err(unknown());
        }
        let p = self.daemon.registry.get(id).ok_or_else(unknown)?;
        if !session.policy.cwd_allowed(&p.facts.cwd) {
            return Err(unknown());
        }
        Ok(p)
    }
}

fn stream_filter(v: i32) -> Result<StreamFilter, Status> {
    match pb::Streams::try_from(v) {
        Ok(pb::Streams::Both) => Ok(StreamFilter::Both),
        Ok(pb::Streams::Stdout) => Ok(StreamFilter::Stdout),
        Ok(pb::Streams::Stderr) => Ok(StreamFilter::Stderr),
        Err(_) => {
            Err(ErrorKind::InvalidArgument
                .status("streams must be both, stdout or stderr".to_string()))
        }
    }
}

fn output_to_pb(r: crate::output::ReadResult) -> pb::Output {
    pb::Output {
        stdout: r.stdout,
        stderr: r.stderr,
        first_seq: r.first_seq,
        next_seq: r.next_seq,
        truncated: r.truncated,
        has_more: r.has_more,
        retained_from_seq: r.retained_from,
    }
}

/// Largest per-stream page any read may ask for, whatever the policy says (memory safety).
pub const HARD_MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// Longest time any call may be told to wait or any process to run before its timeout: 30 days.
/// Larger values are refused (`invalid_argument`) rather than clamped, because a deadline
/// computed from them would overflow the clock.
pub const MAX_DURATION_MS: u64 = 30 * 24 * 3_600_000;

/// Largest stdin in one `write` or `exec` (larger requests are refused, `invalid_argument`).
const MAX_WRITE_BYTES: usize = 8 * 1024 * 1024;

/// Refuses `value` above `max` with a message naming the field and its range.
fn at_most(field: &str, value: Option<u64>, max: u64) -> Result<(), String> {
    match value {
        Some(v) if v > max => Err(format!("{field} is {v}; it must be between 0 and {max}")),
        _ => Ok(()),
    }
}

fn clamp_output_bytes(requested: Option<u64>, policy_max: u64) -> usize {
    let max = requested
        .unwrap_or(policy_max)
        .min(policy_max)
        .clamp(1, HARD_MAX_READ_BYTES);
    usize::try_from(max).unwrap_or(usize::MAX)
}

/// Stream type of `Follow`.
pub type FollowStream = Pin<Box<dyn Stream<Item = Result<pb::FollowEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Control for ControlService {
    async fn hello(
        &self,
        req: Request<pb::HelloRequest>,
    ) -> Result<Response<pb::HelloResponse>, Status> {
        admin::hello(self, req.into_inner()).map(Response::new)
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        Ok(Response::new(admin::status(self)))
    }

    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        admin::open_session(self, req.into_inner()).map(Response::new)
    }

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        let caller = caller::grant_of(&self.daemon, &req);
        exec::exec(self, caller, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn read(
        &self,
        req: Request<pb::ReadRequest>,
    ) -> Result<Response<pb::ReadResponse>, Status> {
        output::read(self, req.into_inner())
            .await
            .map(Response::new)
    }

    type FollowStream = FollowStream;

    async fn follow(
        &self,
        req: Request<pb::FollowRequest>,
    ) -> Result<Response<FollowStream>, Status> {
        output::follow(self, req.into_inner()).map(Response::new)
    }

    async fn write(
        &self,
        req: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let caller = caller::grant_of(&self.daemon, &req);
        procs::write(self, caller.as_ref(), req.into_inner())
            .await
            .map(Response::new)
    }

    async fn wait(
        &self,
        req: Request<pb::WaitRequest>,
    ) -> Result<Response<pb::WaitResponse>, Status> {
        output::wait(self, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn stop(
        &self,
        req: Request<pb::StopRequest>,
    ) -> Result<Response<pb::StopResponse>, Status> {
        let caller = caller::grant_of(&self.daemon, &req);
        procs::stop(self, caller.as_ref(), req.into_inner())
            .await
            .map(Response::new)
    }

    async fn list(
        &self,
        req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        procs::list(self, req.into_inner()).await.map(Response::new)
    }

    async fn cleanup(
        &self,
        req: Request<pb::CleanupRequest>,
    ) -> Result<Response<pb::CleanupResponse>, Status> {
        let caller = caller::grant_of(&self.daemon, &req);
        procs::cleanup(self, caller.as_ref(), req.into_inner()).map(Response::new)
    }

    type WatchStream = watch::WatchStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<watch::WatchStream>, Status> {
        watch::watch(self, req.into_inner()).map(Response::new)
    }

    async fn shutdown(
        &self,
        req: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        if caller::grant_of(&self.daemon, &req).is_some() {
            return Err(caller::denied("shutdown"));
        }
        Ok(Response::new(admin::shutdown(self, &req.into_inner())))
    }
}
