//! [`ToolSet`]: what a profile provides — its tool definitions, its instructions, and a way to
//! run one of its tools. [`crate::server`] answers MCP through whichever tool set
//! [`crate::profile`] built, so no code outside `profile` branches on the profile.
//!
//! A tool set whose long calls may outlive the request opts in to MCP Tasks ([`crate::tasks`])
//! by handing out its daemon [`Session`] ([`ToolSet::task_session`]); the task layer then needs
//! nothing else from it but, optionally, its own rendering of a finished task's result.

use std::future::Future;
use std::pin::Pin;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use rmcp::service::RequestContext;
use serde_json::json;
use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

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

    /// The daemon session through which this tool set's calls may become MCP tasks (a call
    /// still running when it would yield answers with a task, see [`crate::tasks`]). `None`
    /// (the default): its calls always answer inline and the tasks extension is not offered.
    fn task_session(&self) -> Option<&Session> {
        None
    }

    /// The tool result a finished task carries, rendered as this tool set's long call renders a
    /// process that ended (`ended` is a `Wait` answer for it). `None` (the default): the `wait`
    /// body of the default profile, which is what a task of `exec` completes with.
    fn task_result(&self, ended: &pb::WaitResponse) -> Option<CallToolResult> {
        let _ = ended;
        None
    }
}

/// Whether a request declared the MCP tasks extension: in the `initialize` capabilities (2025
/// era) or in the request's own `_meta` client capabilities (2026-07-28 era); rmcp reads both.
/// A tool whose call may outlive its window answers [`still_running`] only then.
pub fn task_requested(request: &RequestContext<RoleServer>) -> bool {
    request
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// How long a call that becomes a task once it outlives a window waits for its process before
/// answering with the task (the shell profile's `shell_execute`; `exec` keeps its `yield_ms`).
pub const TASK_WINDOW_MS: u64 = 5_000;

/// The answer of a tool whose process is still running, for a request that
/// [`task_requested`]: the minimal body the server turns into a task (see
/// [`crate::tasks::running_process`]).
pub fn still_running(process_id: &str) -> CallToolResult {
    CallToolResult::structured(json!({"status": "backgrounded", "process_id": process_id}))
}
