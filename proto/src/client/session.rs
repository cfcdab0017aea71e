//! A client [`Session`]: the context sent with `OpenSession`, one method per RPC with the
//! deadline of that call (see [`crate::deadlines`]), and a connection that is re-established —
//! daemon started again if need be, session reopened — after the daemon restarts.

use std::time::Duration;

use super::{Client, ClientError, ConnectOptions, connect, connect_or_start, unary, within};
use crate::deadlines;
use crate::errors::ErrorKind;
use crate::pb;
use crate::session_config::SessionConfig;

/// A client session: the context sent with `OpenSession`, and a connection that is re-established
/// (daemon started again if need be, session reopened) after the daemon restarts.
#[derive(Debug)]
pub struct Session {
    opts: ConnectOptions,
    open: pb::OpenSessionRequest,
    conn: tokio::sync::Mutex<Option<Client>>,
}

impl Session {
    /// A new session with a fresh id; nothing is sent until the first call.
    pub fn new(opts: ConnectOptions, config: &SessionConfig) -> Session {
        let id = uuid::Uuid::new_v4().to_string();
        let open = config.open_request(&id, &opts.client_name);
        Session {
            opts,
            open,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The session id to put in every request.
    pub fn id(&self) -> &str {
        &self.open.session_id
    }

    /// The connection options.
    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    async fn open_session(&self, client: &mut Client) -> Result<(), ClientError> {
        unary(
            &self.opts,
            "OpenSession",
            client.open_session(self.open.clone()),
        )
        .await?;
        Ok(())
    }

    /// A connected client with this session open, connecting (and starting the daemon) first if
    /// needed.
    pub async fn client(&self) -> Result<Client, ClientError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let mut conn = connect_or_start(&self.opts).await?;
        self.open_session(&mut conn.client).await?;
        *guard = Some(conn.client.clone());
        Ok(conn.client)
    }

    /// Forgets the connection, so the next call reconnects.
    pub async fn reset(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs one RPC within [`Deadlines::rpc`](deadlines::Deadlines::rpc). A daemon that forgot the session (it restarted)
    /// gets it reopened and the call is retried once — safe, because an unknown session is
    /// refused before anything happens. A connection that cannot be re-established (the daemon
    /// is gone) never delivered the request: the call connects afresh, starting the daemon as
    /// usual, and sends it once more. A connection that broke during the call, or a daemon that
    /// does not answer in time, is reported and forgotten (the request may have been delivered,
    /// so it is never resent); the next call reconnects.
    pub async fn call<T, F, Fut>(&self, rpc: F) -> Result<T, ClientError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_within("a request", self.opts.deadlines.rpc, rpc)
            .await
    }

    /// [`call`](Self::call) with the deadline of the call `what` (see [`crate::deadlines`]).
    pub async fn call_within<T, F, Fut>(
        &self,
        what: &str,
        deadline: Duration,
        rpc: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut result = self.call_once_reopening(what, deadline, &rpc).await;
        if let Err(ClientError::NotDelivered(_)) = &result {
            // The daemon went away since the last call (it was stopped or restarted) and the
            // request never reached anyone: connect afresh (starting the daemon if allowed,
            // reopening the session) and send it once more.
            self.reset().await;
            result = self.call_once_reopening(what, deadline, &rpc).await;
        }
        if let Err(
            ClientError::ConnectionLost(_)
            | ClientError::NotDelivered(_)
            | ClientError::Unresponsive { .. },
        ) = &result
        {
            self.reset().await;
        }
        result
    }

    async fn call_once_reopening<T, F, Fut>(
        &self,
        what: &str,
        deadline: Duration,
        rpc: &F,
    ) -> Result<T, ClientError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut client = self.client().await?;
        let mut reopened = false;
        loop {
            match within(&self.opts, what, deadline, rpc(client.clone())).await {
                Err(ClientError::Rpc(status))
                    if !reopened && ErrorKind::of_status(&status) == ErrorKind::UnknownSession =>
                {
                    reopened = true;
                    self.open_session(&mut client).await?;
                }
                other => return other,
            }
        }
    }

    /// Starts a command (`Exec`). The request's `session_id` is set to this session's.
    pub async fn exec(&self, mut req: pb::ExecRequest) -> Result<pb::ExecResponse, ClientError> {
        req.session_id = self.id().to_string();
        let deadline = self.opts.deadlines.exec(&req, self.open.policy.as_ref());
        self.call_within("Exec", deadline, |mut c| {
            let req = req.clone();
            async move { c.exec(req).await }
        })
        .await
    }

    /// Reads a window of a process's output (`Read`).
    pub async fn read(&self, mut req: pb::ReadRequest) -> Result<pb::ReadResponse, ClientError> {
        req.session_id = self.id().to_string();
        self.call_within("Read", self.opts.deadlines.rpc, |mut c| {
            let req = req.clone();
            async move { c.read(req).await }
        })
        .await
    }

    /// Streams a process's output as it comes (`Follow`). The stream must start within
    /// [`Deadlines::rpc`](deadlines::Deadlines::rpc); after that it has no deadline (a quiet process is not a hang).
    pub async fn follow(
        &self,
        mut req: pb::FollowRequest,
    ) -> Result<tonic::Streaming<pb::FollowEvent>, ClientError> {
        req.session_id = self.id().to_string();
        self.call_within("Follow", self.opts.deadlines.rpc, |mut c| {
            let req = req.clone();
            async move { c.follow(req).await }
        })
        .await
    }

    /// Writes to a process's stdin (`Write`).
    /// With `until` it waits for the answer too, at most `timeout_ms` (default
    /// [`deadlines::WAIT_SLICE`]).
    pub async fn write(&self, mut req: pb::WriteRequest) -> Result<pb::WriteResponse, ClientError> {
        req.session_id = self.id().to_string();
        let deadline = if req.until.as_deref().is_some_and(|u| !u.is_empty()) {
            let timeout_ms = *req.timeout_ms.get_or_insert(
                u64::try_from(deadlines::WAIT_SLICE.as_millis()).unwrap_or(u64::MAX),
            );
            self.opts.deadlines.wait(timeout_ms)
        } else {
            self.opts.deadlines.rpc
        };
        self.call_within("Write", deadline, |mut c| {
            let req = req.clone();
            async move { c.write(req).await }
        })
        .await
    }

    /// Blocks until a process exits, an output line matches, or the timeout passes (`Wait`).
    /// Without `timeout_ms` it waits in slices of [`deadlines::WAIT_SLICE`], each with its
    /// deadline, until the process settles — the same answer as one unbounded `Wait`.
    pub async fn wait(&self, mut req: pb::WaitRequest) -> Result<pb::WaitResponse, ClientError> {
        req.session_id = self.id().to_string();
        if let Some(timeout_ms) = req.timeout_ms {
            return self.wait_once(req, timeout_ms).await;
        }
        let slice_ms = u64::try_from(deadlines::WAIT_SLICE.as_millis()).unwrap_or(u64::MAX);
        loop {
            let slice = pb::WaitRequest {
                timeout_ms: Some(slice_ms),
                ..req.clone()
            };
            let resp = self.wait_once(slice, slice_ms).await?;
            if resp.result != pb::WaitResult::DeadlineReached as i32 {
                return Ok(resp);
            }
        }
    }

    async fn wait_once(
        &self,
        req: pb::WaitRequest,
        timeout_ms: u64,
    ) -> Result<pb::WaitResponse, ClientError> {
        let deadline = self.opts.deadlines.wait(timeout_ms);
        self.call_within("Wait", deadline, |mut c| {
            let req = req.clone();
            async move { c.wait(req).await }
        })
        .await
    }

    /// Stops a process tree (`Stop`).
    pub async fn stop(&self, mut req: pb::StopRequest) -> Result<pb::StopResponse, ClientError> {
        req.session_id = self.id().to_string();
        let deadline = self.opts.deadlines.stop(&req);
        self.call_within("Stop", deadline, |mut c| {
            let req = req.clone();
            async move { c.stop(req).await }
        })
        .await
    }

    /// Lists managed processes (`List`).
    pub async fn list(&self, mut req: pb::ListRequest) -> Result<pb::ListResponse, ClientError> {
        req.session_id = self.id().to_string();
        self.call_within("List", self.opts.deadlines.rpc, |mut c| {
            let req = req.clone();
            async move { c.list(req).await }
        })
        .await
    }

    /// Streams the table of processes and its changes (`Watch`). The stream must start within
    /// [`Deadlines::rpc`](deadlines::Deadlines::rpc); after that it has no deadline.
    pub async fn watch(
        &self,
        mut req: pb::WatchRequest,
    ) -> Result<tonic::Streaming<pb::WatchEvent>, ClientError> {
        req.session_id = self.id().to_string();
        self.call_within("Watch", self.opts.deadlines.rpc, |mut c| {
            let req = req.clone();
            async move { c.watch(req).await }
        })
        .await
    }

    /// Removes records of ended processes (`Cleanup`).
    pub async fn cleanup(
        &self,
        mut req: pb::CleanupRequest,
    ) -> Result<pb::CleanupResponse, ClientError> {
        req.session_id = self.id().to_string();
        self.call_within("Cleanup", self.opts.deadlines.rpc, |mut c| {
            let req = req.clone();
            async move { c.cleanup(req).await }
        })
        .await
    }

    /// Lists this session's project processes only when a daemon already runs: connects without
    /// starting one, opens the session, lists. `None` when no daemon answers or any step fails
    /// (for optional extras, such as the MCP instructions, that must not start a daemon).
    pub async fn list_if_running(&self, mut req: pb::ListRequest) -> Option<pb::ListResponse> {
        let mut conn = connect(&self.opts).await.ok()?;
        self.open_session(&mut conn.client).await.ok()?;
        req.session_id = self.id().to_string();
        unary(&self.opts, "List", conn.client.list(req)).await.ok()
    }
}
