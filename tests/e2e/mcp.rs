//! Helpers to drive the built `mcp-yieldshell` binary with a real MCP client (rmcp's, over
//! stdio), and with raw JSON-RPC lines for protocol-robustness cases.

#![allow(dead_code)] // each test module uses a different subset

use std::path::Path;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, NumberOrString, ProgressNotificationParam,
    ProgressToken, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value};

use crate::helper::{TestDaemon, bin};

/// Client handler that records progress notifications.
#[derive(Clone, Default)]
pub struct Recorder {
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().expect("lock").push(params);
    }
}

/// A connected MCP client over the shim's stdio.
pub struct Mcp {
    pub service: RunningService<RoleClient, Recorder>,
    pub recorder: Recorder,
}

/// The shim command for a daemon, with extra environment.
pub fn shim_command(d: &TestDaemon, vars: &[(&str, &str)]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bin("mcp-yieldshell"));
    c.env("YIELDSHELL_SOCKET", &d.socket)
        .env("YIELDSHELL_STATE_DIR", &d.state)
        .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .current_dir(d.dir.path());
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// The shim command serving `profile` (`--profile jobs`, …).
pub fn profile_command(
    d: &TestDaemon,
    profile: &str,
    vars: &[(&str, &str)],
) -> tokio::process::Command {
    let mut c = shim_command(d, vars);
    c.arg("--profile").arg(profile);
    c
}

impl Mcp {
    /// Starts the shim against `d` and completes the MCP handshake.
    pub async fn start(d: &TestDaemon, vars: &[(&str, &str)]) -> Mcp {
        Mcp::start_command(shim_command(d, vars)).await
    }

    /// Starts the shim serving `profile` and completes the MCP handshake.
    pub async fn start_profile(d: &TestDaemon, profile: &str, vars: &[(&str, &str)]) -> Mcp {
        Mcp::start_command(profile_command(d, profile, vars)).await
    }

    /// The listed tools.
    pub async fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.service
            .peer()
            .list_all_tools()
            .await
            .expect("tools/list")
    }

    /// The names `tools/list` gives.
    pub async fn tool_names(&self) -> Vec<String> {
        self.tools()
            .await
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// Starts a prepared shim command.
    pub async fn start_command(cmd: tokio::process::Command) -> Mcp {
        let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn mcp-yieldshell");
        let recorder = Recorder::default();
        let service = recorder
            .clone()
            .serve(transport)
            .await
            .expect("MCP handshake");
        Mcp { service, recorder }
    }

    /// Calls a tool; returns the result (protocol errors panic).
    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        self.try_call(name, args).await.expect("tools/call")
    }

    /// Calls a tool; protocol errors are returned.
    pub async fn try_call(
        &self,
        name: &str,
        args: Value,
    ) -> Result<CallToolResult, rmcp::ServiceError> {
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(object(args));
        self.service.peer().call_tool(params).await
    }

    /// Calls a tool with a progress token.
    pub async fn call_with_progress(&self, name: &str, args: Value) -> CallToolResult {
        let mut params = CallToolRequestParams::new(name.to_string()).with_arguments(object(args));
        params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
            NumberOrString::Number(7),
        )));
        self.service
            .peer()
            .call_tool(params)
            .await
            .expect("tools/call")
    }

    /// Progress notifications received so far.
    pub fn progress(&self) -> Vec<ProgressNotificationParam> {
        self.recorder.progress.lock().expect("lock").clone()
    }

    /// The server's instructions.
    pub fn instructions(&self) -> String {
        self.service
            .peer_info()
            .and_then(|i| i.instructions.clone())
            .unwrap_or_default()
    }

    /// Closes stdin and waits for the shim to exit.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}

/// The structured body of a result, checking the text block is its lean copy (see
/// [`assert_lean_copy`]).
pub fn body(r: &CallToolResult) -> Value {
    let structured = r.structured_content.clone().expect("structuredContent");
    let text = r
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .expect("a text block");
    let mut parsed: Value = serde_json::from_str(&text).expect("text block is JSON");
    // The text does not echo back the process_id the call named (the model wrote it).
    if parsed.get("process_id").is_none()
        && let (Some(t), Some(id)) = (parsed.as_object_mut(), structured.get("process_id"))
    {
        t.insert("process_id".into(), id.clone());
    }
    assert_lean_copy(&parsed, &structured, "");
    structured
}

/// Whether the text block may leave a field out (README, "An agent session", lean answers): `null`, `false`,
/// `""`, `ok` (which `isError` repeats), a zero count, and `first_seq: 1`. Never `exit_code: 0`.
pub fn uninformative(key: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b || key == "ok",
        Value::String(s) => s.is_empty(),
        Value::Number(n) => {
            let zero = n.as_u64() == Some(0);
            (zero
                && (key.ends_with("_lines")
                    || key.ends_with("_bytes")
                    || key == "descendants_running"))
                || (key == "first_seq" && n.as_u64() == Some(1))
        }
        _ => false,
    }
}

/// Asserts `text` is `structured` minus uninformative fields, recursively: every field it has
/// is the structured one, and every field it lacks carries no information.
pub fn assert_lean_copy(text: &Value, structured: &Value, at: &str) {
    match (text, structured) {
        (Value::Object(t), Value::Object(s)) => {
            for k in t.keys() {
                assert!(s.contains_key(k), "{at}.{k} is in the text only");
            }
            for (k, v) in s {
                match t.get(k) {
                    Some(tv) => assert_lean_copy(tv, v, &format!("{at}.{k}")),
                    None => assert!(
                        uninformative(k, v),
                        "{at}.{k} = {v} carries information but the text block omits it"
                    ),
                }
            }
        }
        (Value::Array(t), Value::Array(s)) => {
            assert_eq!(t.len(), s.len(), "{at}: lengths differ");
            for (i, (tv, sv)) in t.iter().zip(s).enumerate() {
                assert_lean_copy(tv, sv, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(text, structured, "{at}: text and structured content differ"),
    }
}

/// The text of a result's first text block (all an error of the jobs profile carries).
pub fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .expect("a text block")
}

/// Whether the result is flagged as an error.
pub fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

/// A file that gates a command: the command loops while it exists.
pub fn gate(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
    let path = dir.join(name);
    std::fs::write(&path, b"").expect("gate");
    let wait = format!("while [ -e {} ]; do sleep 0.02; done", path.display());
    (path, wait)
}

/// The shim as a `std` command (for raw JSON-RPC over its pipes).
pub fn shim_std_command(d: &TestDaemon, vars: &[(&str, &str)]) -> std::process::Command {
    let mut c = std::process::Command::new(bin("mcp-yieldshell"));
    c.env("YIELDSHELL_SOCKET", &d.socket)
        .env("YIELDSHELL_STATE_DIR", &d.state)
        .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .current_dir(d.dir.path());
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// One line the shim printed: a JSON-RPC frame, or what was not one.
type Frame = Result<Value, String>;

/// A shim driven with raw JSON-RPC lines over pipes, as an MCP client (an editor) drives it.
/// Every line it prints is checked to be a JSON-RPC 2.0 frame.
pub struct RawShim {
    /// The shim process.
    pub child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    frames: std::sync::mpsc::Receiver<Frame>,
    next_id: u64,
}

impl RawShim {
    /// Starts `cmd` with piped stdio and completes the MCP handshake.
    pub fn start(cmd: std::process::Command) -> RawShim {
        let mut shim = RawShim::spawn(cmd);
        let id = shim.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        shim.response(id);
        shim.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        shim
    }

    /// Starts `cmd` with piped stdio, without any handshake (the 2026-07-28 era has none, and a
    /// test may want its own `initialize`).
    pub fn spawn(mut cmd: std::process::Command) -> RawShim {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-yieldshell");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, frames) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let frame = serde_json::from_str::<Value>(&line)
                    .ok()
                    .filter(|v| v["jsonrpc"] == "2.0")
                    .ok_or(line);
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        RawShim {
            stdin: child.stdin.take(),
            child,
            frames,
            next_id: 1,
        }
    }

    /// The shim's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Writes one frame.
    pub fn send(&mut self, v: &Value) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{v}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .expect("write to the shim");
    }

    /// Writes raw bytes (a partial frame, say).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .expect("write to the shim");
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        id
    }

    /// Sends a `tools/call`; returns its id.
    pub fn call_async(&mut self, name: &str, args: Value) -> u64 {
        self.request(
            "tools/call",
            serde_json::json!({"name": name, "arguments": args}),
        )
    }

    /// Calls a tool and returns the response frame.
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        let id = self.call_async(name, args);
        self.response(id)
    }

    /// The response to request `id` (notifications are skipped), within [`crate::helper::TIMEOUT`].
    pub fn response(&mut self, id: u64) -> Value {
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(Ok(v)) if v["id"] == id => return v,
                Ok(Ok(_)) => {}
                Ok(Err(line)) => panic!("the shim printed a non-JSON-RPC line: {line:?}"),
                Err(e) => panic!("no response to request {id}: {e}"),
            }
        }
    }

    /// The responses to requests `ids`, in that order, whatever order they come in (other
    /// frames are skipped), within [`crate::helper::TIMEOUT`].
    pub fn responses(&mut self, ids: &[u64]) -> Vec<Value> {
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        let mut found: Vec<Option<Value>> = vec![None; ids.len()];
        while found.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(Ok(v)) => {
                    if let Some(i) = ids.iter().position(|id| v["id"] == *id) {
                        found[i] = Some(v);
                    }
                }
                Ok(Err(line)) => panic!("the shim printed a non-JSON-RPC line: {line:?}"),
                Err(e) => panic!("no responses to all of {ids:?}: {e}"),
            }
        }
        found.into_iter().flatten().collect()
    }

    /// The next frame for which `wanted` holds (others are skipped), within
    /// [`crate::helper::TIMEOUT`]: a notification, say.
    pub fn frame_where(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(Ok(v)) if wanted(&v) => return v,
                Ok(Ok(_)) => {}
                Ok(Err(line)) => panic!("the shim printed a non-JSON-RPC line: {line:?}"),
                Err(e) => panic!("no frame with {what}: {e}"),
            }
        }
    }

    /// Closes the shim's stdin; returns how long until its stdout reached EOF, and its exit
    /// status. Every frame printed meanwhile must be JSON-RPC.
    pub fn close(mut self) -> (std::time::Duration, std::process::ExitStatus) {
        let started = std::time::Instant::now();
        drop(self.stdin.take());
        let deadline = started + crate::helper::TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(Ok(_)) => {}
                Ok(Err(line)) => panic!("the shim printed a non-JSON-RPC line: {line:?}"),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the shim's stdout did not reach EOF")
                }
            }
        }
        let eof = started.elapsed();
        let status = crate::helper::eventually_blocking("the shim to exit", || {
            self.child.try_wait().ok().flatten()
        });
        (eof, status)
    }

    /// SIGKILLs the shim and reaps it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The structured body of a raw `tools/call` response.
pub fn raw_body(frame: &Value) -> Value {
    frame["result"]["structuredContent"].clone()
}
