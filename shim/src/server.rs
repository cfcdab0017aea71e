//! The MCP server: rmcp's [`ServerHandler`] over the profile's [`ToolSet`].
//!
//! The shim holds no process state. The tool set's daemon session connects lazily on the first
//! tool call (which also starts the daemon if needed), so `initialize` and `tools/list` are
//! answered even when no daemon can be reached.
//!
//! When the tool set offers tasks, the server advertises the tasks extension (2026-07-28) and a
//! `tools/call` that declared it and whose process keeps running is answered with a task
//! ([`crate::tasks`]); a session that began with `initialize` on 2025-11-25 is offered that
//! revision's tasks instead ([`crate::tasks::legacy`]).
//! Methods this server does not implement answer `-32601` saying what it offers instead of
//! rmcp's bare method name.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, DiscoverResult, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::tasks::legacy::{self, LegacyWire};
use crate::tasks::{self, TaskWire, listen::TaskSubscriptions};
use crate::tool_set::{TASKS_EXTENSION_SINCE, ToolSet, task_requested};

/// The handler rmcp drives (a cheap handle on the shared tool set).
#[derive(Clone)]
pub struct Handler {
    tools: Arc<dyn ToolSet>,
    subscriptions: TaskSubscriptions,
    legacy: LegacyWire,
}

impl Handler {
    /// A handler serving `tools`.
    pub fn new(tools: Arc<dyn ToolSet>) -> Handler {
        let offers = tools.task_session().is_some();
        let subscriptions = TaskSubscriptions::new(offers);
        let legacy = LegacyWire::new(offers, tools.task_tools());
        Handler {
            tools,
            subscriptions,
            legacy,
        }
    }

    /// The tasks wire the stdio transport must share
    /// ([`crate::stdio_transport::StdioTransport::with_tasks`]).
    pub fn task_wire(&self) -> TaskWire {
        TaskWire {
            subscriptions: self.subscriptions.clone(),
            legacy: self.legacy.clone(),
        }
    }

    /// Whether this server offers MCP Tasks (its tool set has long calls to turn into tasks).
    fn offers_tasks(&self) -> bool {
        self.tools.task_session().is_some()
    }
}

/// `-32602` for a tool this server does not have, naming those it has.
pub fn unknown_tool(tools: &dyn ToolSet, name: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "unknown tool {name:?}; this server has: {}",
            tools
                .tools()
                .iter()
                .map(|t| t.name.as_ref())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None,
    )
}

/// `-32601` for a method of the tasks extension on a request before its protocol revision
/// (2026-07-28): a session that began with `initialize` has the 2025-11-25 tasks, whose
/// `tasks/get` and `tasks/cancel` answer another shape (`tasks::legacy`) — an older session has
/// none.
fn extension_era(method: &str, context: &RequestContext<RoleServer>) -> Result<(), McpError> {
    let version = context.meta.protocol_version();
    if version
        .as_ref()
        .is_some_and(|v| v.as_str() >= TASKS_EXTENSION_SINCE)
    {
        return Ok(());
    }
    let negotiated = version
        .or_else(|| context.peer.peer_info().map(|i| i.protocol_version.clone()))
        .map_or_else(|| "an older revision".to_string(), |v| v.to_string());
    Err(McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!(
            "{method} of the tasks extension needs protocol {TASKS_EXTENSION_SINCE}; this session \
             uses {negotiated}"
        ),
        Some(serde_json::json!({"method": method})),
    ))
}

/// `-32601` for a method this server does not implement, saying what it offers instead.
pub fn not_supported(method: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("{method} is not supported: this server offers tools (and tasks) only"),
        Some(serde_json::json!({"method": method})),
    )
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.offers_tasks() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        InitializeResult::new(capabilities)
            .with_server_info(
                Implementation::new("mcp-yieldshell", yieldshell_proto::VERSION)
                    .with_title("YieldShell"),
            )
            .with_instructions(self.tools.instructions())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        self.tools.refresh_instructions().await;
        let mut result = self.negotiate_initialize(&request)?;
        // `initialize` exists only before 2026-07-28, where the tasks extension is not active:
        // such a session is offered the 2025-11-25 tasks instead (`tasks::legacy` adds
        // `capabilities.tasks`).
        if let Some(extensions) = result.capabilities.extensions.as_mut() {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        Ok(result)
    }

    /// The 2026-07-28 era's handshake: the same instructions as `initialize`, brought up to date
    /// the same way (the project's running processes).
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        self.tools.refresh_instructions().await;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.tools().to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.tools().iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let empty = serde_json::Map::new();
        let args = request.arguments.as_ref().unwrap_or(&empty);
        let Some(result) = self.tools.call(&request.name, args, &context).await else {
            return Err(unknown_tool(self.tools.as_ref(), &request.name));
        };
        // A process still running becomes a task — only for a 2026-07-28 request that declared
        // the extension (rmcp refuses a task answer to any other, and such a client gets exactly
        // the classic answer; 2025-11-25 tasks come through `on_custom_request`).
        if self.offers_tasks()
            && task_requested(&context)
            && tasks::eligible(args)
            && let Some(process_id) = tasks::running_process(&result)
        {
            return Ok(CallToolResponse::Task(
                tasks::create(self.tools.as_ref(), &process_id).await?,
            ));
        }
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        extension_era("tasks/get", &context)?;
        tasks::detailed(self.tools.as_ref(), &request.task_id)
            .await
            .map(GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        extension_era("tasks/cancel", &context)?;
        tasks::cancel(self.tools.as_ref(), &request.task_id).await
    }

    async fn update_task(
        &self,
        _request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        extension_era("tasks/update", &context)?;
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            "tasks/update is not supported: this server's tasks never ask for input",
            Some(serde_json::json!({"method": "tasks/update"})),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // Streams are for task status only (their `taskIds` are handled outside rmcp's filter,
        // see `tasks::listen`); rmcp's own categories are never sent.
        self.offers_tasks().then(SubscriptionFilter::new)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.subscriptions.serve(&self.tools, context).await;
        Ok(())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Err(not_supported("completion/complete"))
    }

    // Logging is deprecated (SEP-2577), but 2025-era clients still send `logging/setLevel`.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(not_supported("logging/setLevel"))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        Err(not_supported("prompts/get"))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Err(not_supported("prompts/list"))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Err(not_supported("resources/list"))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Err(not_supported("resources/templates/list"))
    }

    async fn read_resource(
        &self,
        _request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        Err(not_supported("resources/read"))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        // The 2025-11-25 tasks wire, renamed by the transport (and only then: a client cannot
        // reach it by sending the prefixed name).
        if let Some(method) = request.method.strip_prefix(legacy::METHOD_PREFIX)
            && self.legacy.claim(&context.id)
        {
            return legacy::handle(self.tools.as_ref(), method, request.params, context)
                .await
                .map(CustomResult);
        }
        Err(not_supported(&request.method))
    }
}
