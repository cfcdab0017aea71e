//! MCP Tasks as the 2025-11-25 revision defines them (the "core" tasks, experimental there), for
//! the clients of that era — the TypeScript SDK 1.x's `client.experimental.tasks`, among
//! others: `capabilities.tasks` at `initialize`, `execution.taskSupport` in `tools/list`, a
//! `tools/call` with `params.task` answered with a `CreateTaskResult` at once, then `tasks/get`,
//! `tasks/result` (blocks until the task ends), `tasks/cancel` and `tasks/list`.
//!
//! As with the 2026-07-28 extension ([`super`]), the task id **is** the process id and nothing
//! about a task lives in the shim: each answer is looked up through the daemon.
//!
//! rmcp 3.11 models only the 2026-07-28 wire (its `tasks/get` answers that shape and refuses a
//! client that did not declare the extension; it drops `params.task` and has no
//! `capabilities.tasks`), so this wire is carried past it, the way [`super::listen`] carries
//! `taskIds`:
//!
//! 1. the stdio transport shows each incoming line to [`LegacyWire::rewrite_line`]: a 2025-era
//!    request (its `_meta` names no protocol version of 2026-07-28 or later) for one of the five
//!    methods, on a session that negotiated 2025-11-25, gets its method renamed under
//!    [`METHOD_PREFIX`], which rmcp hands to the server's custom-request handler as it is; the
//!    ids of `initialize` and `tools/list` requests are noted;
//! 2. the server answers a renamed request with [`handle`] only when [`LegacyWire::claim`]
//!    confirms the transport renamed it (a client cannot call the prefixed names itself);
//! 3. the transport passes each outgoing response through [`LegacyWire::patch_response`], which
//!    adds `capabilities.tasks` to the `initialize` answer and `execution.taskSupport` to the
//!    tools that may become tasks.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorData as McpError, JsonObject, RequestId, Task,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use yieldshell_proto::pb;

use super::{Looked, look, lookup_error, result_object, session_of, task_of};
use crate::tool_set::{TASKS_EXTENSION_SINCE, TaskAugmented, ToolSet};

/// The protocol revision that introduced these tasks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The prefix a renamed method gets on its way to rmcp (see the module doc).
pub const METHOD_PREFIX: &str = "mcp-yieldshell/2025-11-25/";

/// The methods of this wire.
const METHODS: [&str; 5] = [
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
];

/// The `_meta` key of the text a host may show the model while the task runs.
const IMMEDIATE_RESPONSE_KEY: &str = "io.modelcontextprotocol/model-immediate-response";

/// The `_meta` key that ties a `tasks/result` answer to its task.
const RELATED_TASK_KEY: &str = "io.modelcontextprotocol/related-task";

/// The `_meta` key of a 2026-07-28 request's protocol version.
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// Tasks per `tasks/list` page.
const LIST_PAGE: usize = 100;

/// Longest single daemon `Wait` of a blocking `tasks/result` (it waits again until the end).
const RESULT_SLICE_MS: u64 = 30_000;

/// The 2025-11-25 wire of one shim, shared by its transport and its server handler.
#[derive(Clone)]
pub struct LegacyWire(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    /// Whether the server offers tasks at all (its tool set has a daemon session for them).
    enabled: bool,
    /// The tools listed with `execution.taskSupport: "optional"`.
    task_tools: Vec<String>,
    /// The protocol version the `initialize` answer negotiated.
    negotiated: Option<String>,
    /// `initialize` requests whose answer is still to be patched.
    initialize_ids: HashSet<RequestId>,
    /// `tools/list` requests of this wire whose answer is still to be patched.
    list_ids: HashSet<RequestId>,
    /// Requests the transport renamed and the server has not answered yet.
    renamed: HashSet<RequestId>,
}

impl LegacyWire {
    /// The wire of a server that offers tasks (`enabled`) on `task_tools`.
    pub fn new(enabled: bool, task_tools: &[&str]) -> LegacyWire {
        LegacyWire(Arc::new(Mutex::new(State {
            enabled,
            task_tools: task_tools.iter().map(|t| t.to_string()).collect(),
            ..State::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is one insert or remove: a poisoned lock is still consistent.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the session negotiated the revision that has these tasks.
    fn negotiated_tasks(state: &State) -> bool {
        state.enabled
            && state
                .negotiated
                .as_deref()
                .is_some_and(|v| (PROTOCOL_VERSION..TASKS_EXTENSION_SINCE).contains(&v))
    }

    /// The line to hand rmcp instead of `line` when it is a request of this wire (renamed), and
    /// notes the requests whose answers are patched. `None`: pass the line on as it is.
    pub fn rewrite_line(&self, line: &[u8]) -> Option<Vec<u8>> {
        let has = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
        let candidate = has(b"\"initialize\"")
            || has(b"\"tools/list\"")
            || has(b"\"tasks/")
            || (has(b"\"tools/call\"") && has(b"\"task\""));
        if !candidate {
            return None;
        }
        let mut message: Value = serde_json::from_slice(line).ok()?;
        self.rewrite(&mut message)
            .then(|| serde_json::to_vec(&message).ok())
            .flatten()
    }

    /// [`LegacyWire::rewrite_line`] on a parsed message; `true` when it was renamed.
    fn rewrite(&self, message: &mut Value) -> bool {
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return false;
        };
        let Some(id) = message.get("id").and_then(request_id) else {
            return false;
        };
        let params = message.get("params");
        let modern = params
            .and_then(|p| p.pointer("/_meta"))
            .and_then(|m| m.get(PROTOCOL_VERSION_KEY))
            .and_then(Value::as_str)
            .is_some_and(|v| v >= TASKS_EXTENSION_SINCE);
        let mut state = self.lock();
        if method == "initialize" {
            state.initialize_ids.insert(id);
            return false;
        }
        if modern || !Self::negotiated_tasks(&state) {
            return false;
        }
        if method == "tools/list" {
            state.list_ids.insert(id);
            return false;
        }
        let augmented = method != "tools/call"
            || params
                .and_then(|p| p.get("task"))
                .is_some_and(Value::is_object);
        if !METHODS.contains(&method) || !augmented {
            return false;
        }
        let renamed = format!("{METHOD_PREFIX}{method}");
        state.renamed.insert(id);
        drop(state);
        message["method"] = Value::String(renamed);
        true
    }

    /// Whether a response with this id has something to add (cheap: the transport converts
    /// only those to JSON a second time).
    pub fn patches(&self, id: &RequestId) -> bool {
        let state = self.lock();
        state.initialize_ids.contains(id) || state.list_ids.contains(id)
    }

    /// Adds what rmcp cannot model to the answer of a noted `initialize` or `tools/list`.
    pub fn patch_response(&self, frame: &mut Value) {
        let Some(id) = frame.get("id").and_then(request_id) else {
            return;
        };
        let mut state = self.lock();
        if state.initialize_ids.remove(&id) {
            state.negotiated = frame
                .pointer("/result/protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
            if Self::negotiated_tasks(&state)
                && let Some(capabilities) = frame
                    .pointer_mut("/result/capabilities")
                    .and_then(Value::as_object_mut)
            {
                capabilities.insert(
                    "tasks".into(),
                    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
                );
            }
        } else if state.list_ids.remove(&id)
            && let Some(tools) = frame
                .pointer_mut("/result/tools")
                .and_then(Value::as_array_mut)
        {
            for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                if state.task_tools.iter().any(|t| t == name) {
                    tool.insert("execution".into(), json!({"taskSupport": "optional"}));
                }
            }
        }
    }

    /// Whether the transport renamed request `id` (then forgotten: each is answered once).
    pub fn claim(&self, id: &RequestId) -> bool {
        self.lock().renamed.remove(id)
    }
}

/// Answers a renamed request: `method` is the original method name.
pub async fn handle(
    tools: &dyn ToolSet,
    method: &str,
    params: Option<Value>,
    mut context: RequestContext<RoleServer>,
) -> Result<Value, McpError> {
    let params = params.unwrap_or_else(|| json!({}));
    if method == "tools/call" {
        let params: CallToolRequestParams = serde_json::from_value(params).map_err(|e| {
            McpError::invalid_params(format!("invalid tools/call params: {e}"), None)
        })?;
        context.extensions.insert(TaskAugmented);
        return call(tools, params, &context).await;
    }
    if method == "tasks/list" {
        return list(tools, params.get("cursor")).await;
    }
    let task_id = params
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| McpError::invalid_params(format!("{method} needs a taskId"), None))?;
    match method {
        "tasks/get" => Ok(task_value(&look(tools, task_id).await?.task)),
        "tasks/cancel" => {
            super::cancel(tools, task_id).await?;
            Ok(task_value(&look(tools, task_id).await?.task))
        }
        "tasks/result" => result(tools, task_id, &context).await,
        _ => Err(crate::server::not_supported(method)),
    }
}

/// A task as this revision writes it: the fields at the top level, `ttl` always present
/// (`null`: kept until `cleanup` or retention removes the process), `pollInterval`.
fn task_value(task: &Task) -> Value {
    let mut v = json!({
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": Value::Null,
    });
    if let Some(message) = &task.status_message {
        v["statusMessage"] = Value::String(message.clone());
    }
    if let Some(ms) = task.poll_interval_ms {
        v["pollInterval"] = ms.into();
    }
    v
}

/// The process a tool result started: its body names a `process_id` and carries no `error`.
fn started_process(result: &CallToolResult) -> Option<String> {
    let body = result.structured_content.as_ref()?.as_object()?;
    if body.get("error").is_some_and(|e| !e.is_null()) {
        return None;
    }
    body.get("process_id")?
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

/// A task-augmented `tools/call`: the tool starts its process without blocking and the answer
/// is a `CreateTaskResult` for it, carrying the tool's own first answer for the model. A call
/// that started no process (refused, bad arguments) has no task to give: a JSON-RPC error whose
/// `data` is the tool's body.
async fn call(
    tools: &dyn ToolSet,
    params: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<Value, McpError> {
    // Only the tools listed with `execution.taskSupport` (2025-11-25: "Servers SHOULD return
    // -32601" for the others; a `read`, which names a process too, must not become its task).
    if !tools.task_tools().contains(&params.name.as_ref()) {
        if tools.tools().iter().all(|t| t.name != params.name) {
            return Err(crate::server::unknown_tool(tools, &params.name));
        }
        return Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "{} cannot run as a task (its execution.taskSupport is forbidden); call it \
                 without params.task",
                params.name
            ),
            Some(json!({"tool": params.name})),
        ));
    }
    let empty = JsonObject::new();
    let arguments = params.arguments.as_ref().unwrap_or(&empty);
    let result = tools
        .call(&params.name, arguments, context)
        .await
        .ok_or_else(|| crate::server::unknown_tool(tools, &params.name))?;
    let Some(process_id) = started_process(&result) else {
        let body = result.structured_content.clone().unwrap_or(Value::Null);
        let why = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("it answered without a process");
        return Err(McpError::invalid_params(
            format!(
                "{} started no process, so there is no task: {why}",
                params.name
            ),
            Some(body),
        ));
    };
    let session = session_of(tools)?;
    let state = session
        .read(pb::ReadRequest {
            process_id: process_id.clone(),
            tail_lines: Some(1),
            max_output_bytes: Some(4096),
            streams: pb::Streams::Both as i32,
            ..Default::default()
        })
        .await
        .map_err(|e| lookup_error(&process_id, &e))?;
    let info = state.process.unwrap_or_default();
    let out = state.output.unwrap_or_default();
    // Every task begins `working` (2025-11-25, "Task Status Lifecycle"), even one whose command
    // ended already: the first `tasks/get` says how it ended.
    let mut task = task_of(&info, &out);
    task.status = rmcp::model::TaskStatus::Working;
    task.poll_interval_ms = Some(super::poll_interval_ms(info.duration_ms));
    let first_answer = result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default();
    Ok(json!({
        "task": task_value(&task),
        "_meta": {IMMEDIATE_RESPONSE_KEY: first_answer},
    }))
}

/// `tasks/result`: the tool result once the task has ended, waiting for that (in daemon `Wait`
/// slices, until the client cancels the request).
async fn result(
    tools: &dyn ToolSet,
    task_id: &str,
    context: &RequestContext<RoleServer>,
) -> Result<Value, McpError> {
    let session = session_of(tools)?;
    loop {
        let Looked { ended, .. } = look(tools, task_id).await?;
        if let Some(ended) = ended {
            let mut result = result_object(&super::result_of(tools, &ended));
            // The 2026-07-28 discriminator; this revision's results have none.
            result.remove("resultType");
            result.insert(
                "_meta".into(),
                json!({RELATED_TASK_KEY: {"taskId": task_id}}),
            );
            return Ok(Value::Object(result));
        }
        let wait = session.wait(pb::WaitRequest {
            process_id: task_id.to_string(),
            timeout_ms: Some(RESULT_SLICE_MS),
            ..Default::default()
        });
        tokio::select! {
            answer = wait => { answer.map_err(|e| lookup_error(task_id, &e))?; }
            () = context.ct.cancelled() => {
                return Err(McpError::invalid_request("tasks/result was cancelled", None));
            }
        }
    }
}

/// `tasks/list`: every process the daemon knows (any of them answers `tasks/get`), newest
/// first, [`LIST_PAGE`] a page; the cursor is the number of tasks already listed.
async fn list(tools: &dyn ToolSet, cursor: Option<&Value>) -> Result<Value, McpError> {
    let session = session_of(tools)?;
    let offset = match cursor {
        None | Some(Value::Null) => 0,
        Some(c) => c
            .as_str()
            .and_then(|c| c.parse::<usize>().ok())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("invalid tasks/list cursor {c}: pass the nextCursor of the last page"),
                    None,
                )
            })?,
    };
    let wanted = offset.saturating_add(LIST_PAGE + 1);
    let listed = session
        .list(pb::ListRequest {
            include_completed: true,
            limit: u32::try_from(wanted).unwrap_or(u32::MAX),
            scope: pb::Scope::All as i32,
            ..Default::default()
        })
        .await
        .map_err(|e| {
            McpError::internal_error(
                format!("cannot list tasks: {}", crate::context::describe(&e).0),
                None,
            )
        })?;
    let page: Vec<Value> = listed
        .processes
        .iter()
        .skip(offset)
        .take(LIST_PAGE)
        .map(|info| task_value(&task_of(info, &pb::Output::default())))
        .collect();
    let mut answer = json!({ "tasks": page });
    if listed.processes.len() > offset + LIST_PAGE {
        answer["nextCursor"] = Value::String((offset + LIST_PAGE).to_string());
    }
    Ok(answer)
}

/// A JSON-RPC id (a string or an integer).
fn request_id(v: &Value) -> Option<RequestId> {
    match v {
        Value::String(s) => Some(RequestId::String(s.as_str().into())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_on(version: &str) -> LegacyWire {
        let wire = LegacyWire::new(true, &["exec"]);
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                          "params": {"protocolVersion": version}});
        assert!(wire.rewrite_line(init.to_string().as_bytes()).is_none());
        let mut answer = json!({"jsonrpc": "2.0", "id": 0,
                                "result": {"protocolVersion": version, "capabilities": {"tools": {}}}});
        assert!(wire.patches(&RequestId::Number(0)));
        wire.patch_response(&mut answer);
        wire
    }

    fn renamed(wire: &LegacyWire, message: Value) -> Option<String> {
        let line = wire.rewrite_line(message.to_string().as_bytes())?;
        let v: Value = serde_json::from_slice(&line).expect("json");
        v["method"].as_str().map(str::to_string)
    }

    #[test]
    fn only_a_2025_11_25_session_gets_the_capability_and_its_requests_renamed() {
        let wire = LegacyWire::new(true, &["exec"]);
        let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {}});
        wire.rewrite_line(init.to_string().as_bytes());
        let mut answer = json!({"jsonrpc": "2.0", "id": "i",
                                "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        wire.patch_response(&mut answer);
        assert_eq!(
            answer["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
            json!({})
        );

        let call = |task: Value| {
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                   "params": {"name": "exec", "arguments": {"task": 1}, "task": task}})
        };
        assert_eq!(
            renamed(&wire, call(json!({"ttl": 1000}))).as_deref(),
            Some("mcp-yieldshell/2025-11-25/tools/call")
        );
        assert!(wire.claim(&RequestId::Number(5)));
        assert!(!wire.claim(&RequestId::Number(5)), "claimed once");
        // Without `params.task` (an argument named `task` does not count): a plain call.
        assert_eq!(renamed(&wire, call(Value::Null)), None);
        let get =
            json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {"taskId": "p"}});
        assert_eq!(
            renamed(&wire, get).as_deref(),
            Some("mcp-yieldshell/2025-11-25/tasks/get")
        );
        // A request of the 2026-07-28 era keeps its method (the extension's wire).
        let modern = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
                            "params": {"taskId": "p", "_meta": {PROTOCOL_VERSION_KEY: "2026-07-28"}}});
        assert_eq!(renamed(&wire, modern), None);

        // tools/list: the task tools say they may run as tasks.
        let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"});
        assert_eq!(renamed(&wire, list), None);
        let mut tools = json!({"jsonrpc": "2.0", "id": 8, "result": {"tools": [
            {"name": "exec"}, {"name": "read"}]}});
        wire.patch_response(&mut tools);
        assert_eq!(
            tools["result"]["tools"][0]["execution"],
            json!({"taskSupport": "optional"})
        );
        assert!(tools["result"]["tools"][1].get("execution").is_none());
    }

    #[test]
    fn older_sessions_and_servers_without_tasks_are_left_alone() {
        for version in ["2024-11-05", "2025-03-26", "2025-06-18"] {
            let wire = wire_on(version);
            let get = json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {"taskId": "p"}});
            assert_eq!(renamed(&wire, get), None, "{version}");
        }
        let without = LegacyWire::new(false, &[]);
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
        without.rewrite_line(init.to_string().as_bytes());
        let mut answer = json!({"jsonrpc": "2.0", "id": 0,
                                "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        without.patch_response(&mut answer);
        assert!(answer["result"]["capabilities"].get("tasks").is_none());
    }

    #[test]
    fn a_task_is_written_with_this_revisions_field_names() {
        let task = Task::new("proc_1", rmcp::model::TaskStatus::Working, "a", "b")
            .with_poll_interval_ms(1000)
            .with_status_message("running");
        assert_eq!(
            task_value(&task),
            json!({"taskId": "proc_1", "status": "working", "createdAt": "a", "lastUpdatedAt": "b",
                   "ttl": null, "pollInterval": 1000, "statusMessage": "running"})
        );
    }
}
