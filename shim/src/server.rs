//! The MCP server: rmcp's [`ServerHandler`] over the profile's [`ToolSet`].
//!
//! The shim holds no process state. The tool set's daemon session connects lazily on the first
//! tool call (which also starts the daemon if needed), so `initialize` and `tools/list` are
//! answered even when no daemon can be reached.
//!
//! When the tool set offers tasks, the server advertises the tasks extension and a `tools/call`
//! that declared it and whose process keeps running is answered with a task ([`crate::tasks`]).
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

use crate::tasks::{self, listen::TaskSubscriptions};
use crate::tool_set::{ToolSet, task_requested};

/// The handler rmcp drives (a cheap handle on the shared tool set).
#[derive(Clone)]
pub struct Handler {
    tools: Arc<dyn ToolSet>,
    subscriptions: TaskSubscriptions,
}

impl Handler {
    /// A handler serving `tools`.
    pub fn new(tools: Arc<dyn ToolSet>) -> Handler {
        let subscriptions = TaskSubscriptions::new(tools.task_session().is_some());
        Handler {
            tools,
            subscriptions,
        }
    }

    /// The task subscriptions the stdio transport must share
    /// ([`crate::stdio_transport::StdioTransport::with_task_subscriptions`]).
    pub fn task_subscriptions(&self) -> TaskSubscriptions {
        self.subscriptions.clone()
    }

    /// Whether this server offers MCP Tasks (its tool set has long calls to turn into tasks).
    fn offers_tasks(&self) -> bool {
        self.tools.task_session().is_some()
    }
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
        self.negotiate_initialize(&request)
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
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}; this server has: {}",
                    request.name,
                    self.tools
                        .tools()
                        .iter()
                        .map(|t| t.name.as_ref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        };
        // A process still running becomes a task — only for a request that declared the
        // extension (rmcp refuses a task answer to any other, and such a client gets exactly
        // the classic answer).
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
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        tasks::detailed(self.tools.as_ref(), &request.task_id)
            .await
            .map(GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        tasks::cancel(self.tools.as_ref(), &request.task_id).await
    }

    async fn update_task(
        &self,
        _request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(not_supported(&request.method))
    }
}
