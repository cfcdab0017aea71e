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

    /// The tools whose calls may become tasks (listed with `execution.taskSupport: "optional"`
    /// to 2025-11-25 clients). None by default.
    fn task_tools(&self) -> &[&'static str] {
        &[]
    }
}

/// How a call may become an MCP task (README, "MCP Tasks"). Each protocol revision has its own
/// wire; what a tool does differs only in how long it blocks first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskMode {
    /// Answered inline: no task was asked for — including the `io.modelcontextprotocol/tasks`
    /// extension declared on a session that predates it (its wire exists on 2026-07-28 only).
    Inline,
    /// The extension (SEP-2663) on a 2026-07-28 request: the call blocks as it would, and a
    /// process still running when it would yield becomes the task.
    AfterWindow,
    /// A 2025-11-25 task-augmented call (`params.task`): the answer is a task at once, so the
    /// call starts its process and returns without blocking.
    AtOnce,
}

/// The marker the server puts in a request's extensions for a 2025-11-25 task-augmented call
/// (rmcp does not model `params.task`; see [`crate::tasks::legacy`]).
#[derive(Debug, Clone, Copy)]
pub struct TaskAugmented;

/// The first protocol revision whose requests carry the tasks extension (SEP-2663).
pub const TASKS_EXTENSION_SINCE: &str = "2026-07-28";

/// How this request may become a task. The extension counts only on a request of the
/// 2026-07-28 era (its `_meta` names that protocol version, and carries the client's
/// capabilities): a 2025-era client that declares it at `initialize` speaks a wire it cannot
/// read, as the official tasks library also holds, and gets the classic answer.
pub fn task_mode(request: &RequestContext<RoleServer>) -> TaskMode {
    if request.extensions.get::<TaskAugmented>().is_some() {
        return TaskMode::AtOnce;
    }
    let modern = request
        .meta
        .protocol_version()
        .is_some_and(|v| v.as_str() >= TASKS_EXTENSION_SINCE);
    let declared = request
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks());
    if modern && declared {
        TaskMode::AfterWindow
    } else {
        TaskMode::Inline
    }
}

/// Whether the call may become a task (either wire, see [`task_mode`]): a tool whose call may
/// outlive its window answers [`still_running`] only then.
pub fn task_requested(request: &RequestContext<RoleServer>) -> bool {
    task_mode(request) != TaskMode::Inline
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
