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

/// The structured body of a result, checking it equals the JSON in the text block.
pub fn body(r: &CallToolResult) -> Value {
    let structured = r.structured_content.clone().expect("structuredContent");
    let text = r
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .expect("a text block");
    let parsed: Value = serde_json::from_str(&text).expect("text block is JSON");
    assert_eq!(parsed, structured, "text and structured content differ");
    structured
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
