//! [`ToolSet`]: what a profile provides — its tool definitions, its instructions, and a way to
//! run one of its tools. [`crate::server`] answers MCP through whichever tool set
//! [`crate::profile`] built, so no code outside `profile` branches on the profile.

use std::future::Future;
use std::pin::Pin;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use rmcp::service::RequestContext;

/// A boxed future that can cross threads (what rmcp's handler futures must be).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The tools one profile serves.
pub trait ToolSet: Send + Sync {
    /// The tool definitions, in listing order.
    fn tools(&self) -> &[Tool];

    /// The `instructions` of the `initialize` answer.
    fn instructions(&self) -> String;

    /// Runs before `initialize` is answered, so a tool set can bring its instructions up to
    /// date (the default profile lists the project's running processes). Nothing by default.
    fn refresh_instructions(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Runs one tool. `None` for a name this tool set does not have (a protocol error, not a
    /// tool result).
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a JsonObject,
        request: &'a RequestContext<RoleServer>,
    ) -> BoxFuture<'a, Option<CallToolResult>>;
}
