//! The MCP server: tool listing and dispatch, server info and instructions.
//!
//! The shim holds no process state. It keeps one daemon [`Session`] (connected lazily on the
//! first tool call, which also starts the daemon if needed), so `initialize` and `tools/list`
//! are answered even when no daemon can be reached. Which tools it serves is its
//! [profile](crate::profile).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use yieldshell_proto::client::{self, ConnectOptions, Session};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::SessionConfig;

use crate::profile::{Profile, ProfileSettings};
use crate::{jobs, shell, tools};

/// How long `initialize` spends looking for this project's running processes.
const INSTRUCTIONS_LOOKUP: Duration = Duration::from_millis(500);

/// The shim's state: its daemon session, its configuration, its tool list.
pub struct Shim {
    /// The daemon session all tools use.
    pub session: Arc<Session>,
    /// The validated session configuration (defaults shown in the schemas).
    pub config: SessionConfig,
    /// The profile served, with its settings.
    pub settings: ProfileSettings,
    tools: Vec<Tool>,
    instructions: Mutex<String>,
}

/// The handler rmcp drives (a cheap handle on the shared [`Shim`]).
#[derive(Clone)]
pub struct Handler(pub Arc<Shim>);

const USAGE: &str = "YieldShell runs shell commands for you. Call exec with the command and its side_effects \
(use [\"NONE\"] for read-only commands). Fast commands return their output and exit code at once. A command still \
running after yield_ms keeps running in the background and you get a process_id: use read with since_seq=next_seq \
for new output (nothing is repeated or lost), wait to block until it exits (at most 55 s per call; `until` waits \
for an output line such as a server's \"listening on\"), write to answer prompts, stop to end it with its whole \
tree. Processes survive restarts of this MCP server: ps lists this project's processes (scope=all for every one), \
cleanup removes old records. Prefer exec over re-running a command that is still running in the background.";

const JOBS_USAGE: &str = "Runs shell commands as background jobs. execute starts one (through /bin/sh -c) and returns \
its job_id at once; status says running, completed, failed or killed; tail shows the last lines and output everything \
kept; interact writes a line to its stdin and returns the output that follows; kill ends it with every process it \
started; list shows the jobs of this project, also those an earlier session started.";

impl Shim {
    /// A shim serving the default profile for `config`, connecting with `opts`.
    pub fn new(config: SessionConfig, opts: ConnectOptions) -> Arc<Shim> {
        Shim::with_profile(config, opts, ProfileSettings::Default)
    }

    /// A shim serving the profile of `settings` (see [`crate::profile::configure`]).
    pub fn with_profile(
        config: SessionConfig,
        opts: ConnectOptions,
        settings: ProfileSettings,
    ) -> Arc<Shim> {
        let session = Arc::new(Session::new(opts, &config));
        let usage = match &settings {
            ProfileSettings::Default => USAGE.to_string(),
            ProfileSettings::Jobs(_) => JOBS_USAGE.to_string(),
            ProfileSettings::Shell(s) => shell::definition(s)
                .description
                .map(|d| d.into_owned())
                .unwrap_or_default(),
        };
        let mut shim = Shim {
            session,
            config,
            settings,
            tools: Vec::new(),
            instructions: Mutex::new(usage),
        };
        shim.tools = match &shim.settings {
            ProfileSettings::Default => tools::definitions(&shim),
            ProfileSettings::Jobs(_) => jobs::definitions(),
            ProfileSettings::Shell(s) => vec![shell::definition(s)],
        };
        Arc::new(shim)
    }

    /// The profile served.
    pub fn profile(&self) -> Profile {
        self.settings.profile()
    }

    /// The tool definitions.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    fn instructions(&self) -> String {
        self.instructions
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Refreshes the instructions with this project's running processes, if a daemon already
    /// runs (it is not started just for this).
    async fn refresh_instructions(&self) {
        let lookup = async {
            let mut conn = client::connect(self.session.options()).await.ok()?;
            let mut open = self
                .config
                .open_request(self.session.id(), &self.session.options().client_name);
            open.client_name = self.session.options().client_name.clone();
            conn.client.open_session(open).await.ok()?;
            let list = conn
                .client
                .list(pb::ListRequest {
                    session_id: self.session.id().to_string(),
                    include_completed: false,
                    limit: 20,
                    scope: pb::Scope::Project as i32,
                })
                .await
                .ok()?
                .into_inner();
            Some(list)
        };
        let Ok(Some(list)) = tokio::time::timeout(INSTRUCTIONS_LOOKUP, lookup).await else {
            return;
        };
        let text = instructions_with(&list);
        if let Ok(mut s) = self.instructions.lock() {
            *s = text;
        }
    }
}

/// The usage text plus a list of the project's running processes.
pub fn instructions_with(list: &pb::ListResponse) -> String {
    if list.processes.is_empty() {
        return USAGE.to_string();
    }
    let mut text = format!(
        "{USAGE}\n\nStill running in this project (started earlier; use read/wait/stop with these ids):"
    );
    for p in &list.processes {
        let cmd: String = String::from_utf8_lossy(&p.command)
            .chars()
            .take(120)
            .collect();
        text.push_str(&format!(
            "\n- {} (pid {}, running {}s{}): {}",
            p.process_id,
            p.pid.unwrap_or_default(),
            p.duration_ms / 1000,
            if p.name.is_empty() {
                String::new()
            } else {
                format!(", name {:?}", p.name)
            },
            cmd
        ));
    }
    if list.matched as usize > list.processes.len() {
        text.push_str(&format!(
            "\n- … and {} more (ps lists them)",
            list.matched as usize - list.processes.len()
        ));
    }
    text
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("mcp-yieldshell", yieldshell_proto::VERSION)
                    .with_title("YieldShell"),
            )
            .with_instructions(self.0.instructions())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        // Only the default profile's instructions list running processes (by their ids).
        if self.0.profile() == Profile::Default {
            self.0.refresh_instructions().await;
        }
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.0.tools().to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0.tools().iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let empty = serde_json::Map::new();
        let args = request.arguments.as_ref().unwrap_or(&empty);
        let result = match &self.0.settings {
            ProfileSettings::Default => tools::call(&self.0, &request.name, args, &context).await,
            ProfileSettings::Jobs(_) => jobs::call(&self.0, &request.name, args).await,
            ProfileSettings::Shell(s) => {
                shell::call(&self.0, s, &request.name, args, &context).await
            }
        };
        match result {
            Some(result) => Ok(result.into()),
            None => Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}; this server has: {}",
                    request.name,
                    self.0
                        .tools()
                        .iter()
                        .map(|t| t.name.as_ref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            )),
        }
    }
}
