//! The MCP floor: an rmcp stdio server with one `echo` tool that does nothing else. A round trip
//! to it is what the client, the transport and the SDK cost before any work happens.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            return Ok(ListToolsResult::with_all_items(vec![]));
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            Cow::Borrowed("echo"),
            Cow::Borrowed("Returns its arguments"),
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        Ok(CallToolResult::structured(args).into())
    }
}

/// Serves the echo tool on stdio until stdin closes.
pub fn serve() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let service = Echo.serve(rmcp::transport::stdio_pipes()).await?;
        service.waiting().await?;
        Ok(())
    })
}
