//! The typed control-plane client: one session, one method per RPC, with the waits and reads
//! the tests repeat (`wait_exit`, `read_all`, `ready_pids`) built on them.

use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

use super::poll::{TIMEOUT, eventually};
use super::procfs::Pid;

/// A control-plane client bound to one session.
pub struct Client {
    pub session: Session,
}

/// An exec request with `NONE` side effects.
pub fn exec_req(command: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        command: command.as_bytes().to_vec(),
        side_effects: vec!["NONE".into()],
        ..Default::default()
    }
}

impl Client {
    pub fn id(&self) -> String {
        self.session.id().to_string()
    }

    pub async fn exec_with(&self, mut req: pb::ExecRequest) -> pb::ExecResponse {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.exec(req).await }
            })
            .await
            .expect("exec rpc")
    }

    /// Runs a command with a yield long enough for anything quick.
    pub async fn exec(&self, command: &str) -> pb::ExecResponse {
        self.exec_with(pb::ExecRequest {
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req(command)
        })
        .await
    }

    /// Starts a command and returns at once (yield 0): a background process id.
    pub async fn spawn_bg(&self, command: &str) -> String {
        let r = self
            .exec_with(pb::ExecRequest {
                yield_ms: Some(0),
                ..exec_req(command)
            })
            .await;
        r.process.expect("process").process_id
    }

    pub async fn read(&self, mut req: pb::ReadRequest) -> Result<pb::ReadResponse, tonic::Status> {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.read(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn read_since(&self, id: &str, since: u64, max: u64) -> pb::ReadResponse {
        self.read(pb::ReadRequest {
            process_id: id.into(),
            since_seq: Some(since),
            max_output_bytes: Some(max),
            ..Default::default()
        })
        .await
        .expect("read")
    }

    pub async fn wait(&self, mut req: pb::WaitRequest) -> Result<pb::WaitResponse, tonic::Status> {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.wait(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    /// Waits (bounded by [`TIMEOUT`]) until the process has settled.
    pub async fn wait_exit(&self, id: &str) -> pb::WaitResponse {
        let r = self
            .wait(pb::WaitRequest {
                process_id: id.into(),
                timeout_ms: Some(TIMEOUT.as_millis() as u64),
                ..Default::default()
            })
            .await
            .expect("wait");
        assert_eq!(
            r.result,
            pb::WaitResult::Exited as i32,
            "process did not exit in time"
        );
        r
    }

    pub async fn stop(
        &self,
        id: &str,
        signal: &str,
        force_after_ms: u64,
    ) -> Result<pb::StopResponse, tonic::Status> {
        let req = pb::StopRequest {
            session_id: self.id(),
            process_id: id.into(),
            signal: signal.into(),
            force_after_ms: Some(force_after_ms),
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.stop(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn write(
        &self,
        id: &str,
        input: &[u8],
        eof: bool,
    ) -> Result<pb::WriteResponse, tonic::Status> {
        let req = pb::WriteRequest {
            session_id: self.id(),
            process_id: id.into(),
            input: input.to_vec(),
            eof,
            ..Default::default()
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.write(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn list(&self, scope: pb::Scope, include_completed: bool) -> Vec<pb::ProcessInfo> {
        let req = pb::ListRequest {
            session_id: self.id(),
            include_completed,
            limit: 0,
            scope: scope as i32,
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.list(req).await }
            })
            .await
            .expect("list")
            .processes
    }

    /// Reads everything from seq 1 by following `next_seq` with the given page size.
    pub async fn read_all(&self, id: &str, page: u64) -> (Vec<u8>, Vec<u8>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut seq = 1;
        loop {
            let r = self.read_since(id, seq, page).await;
            let o = r.output.expect("output");
            assert!(!o.truncated, "unexpected gap at seq {seq}");
            out.extend_from_slice(&o.stdout);
            err.extend_from_slice(&o.stderr);
            seq = o.next_seq;
            if !o.has_more {
                return (out, err);
            }
        }
    }

    /// Polls `read` until the process's stdout holds `n` testbin `ready` lines.
    pub async fn ready_pids(&self, id: &str, n: usize) -> Vec<Pid> {
        eventually("testbin ready lines", || async {
            let (out, _) = self.read_all(id, 1 << 20).await;
            let pids = Pid::all_from_ready_lines(&String::from_utf8_lossy(&out));
            (pids.len() >= n).then_some(pids)
        })
        .await
    }
}

fn rpc_status(e: yieldshell_proto::client::ClientError) -> tonic::Status {
    match e {
        yieldshell_proto::client::ClientError::Rpc(s) => s,
        other => panic!("unexpected client error: {other}"),
    }
}
