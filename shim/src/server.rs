//! The MCP server: rmcp's [`ServerHandler`] over the profile's [`ToolSet`].
//!
//! The shim holds no process state. The tool set's daemon session connects lazily on the first
//! tool call (which also starts the daemon if needed), so `initialize` and `tools/list` are
//! answered even when no daemon can be reached.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::tool_set::ToolSet;

/// The handler rmcp drives (a cheap handle on the shared tool set).
#[derive(Clone)]
pub struct Handler(pub Arc<dyn ToolSet>);

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
        self.0.refresh_instructions().await;
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
        match self.0.call(&request.name, args, &context).await {
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
