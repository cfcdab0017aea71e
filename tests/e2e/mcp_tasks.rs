//! MCP Tasks through the built shim and a real daemon, driven by rmcp's client, which implements
//! the tasks extension (README, "An agent session"): a long `exec` becomes a task that completes with the `wait`
//! body; a fast one answers inline; `tasks/cancel` stops the whole tree; a task created by one
//! shim is completed through another; an unknown id is a JSON-RPC error; `shell_execute` becomes
//! a task the same way. Commands are held by gate files, never by sleeps.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    DetailedTask, GetTaskParams, Implementation, ProtocolVersion, TASKS_EXTENSION_ID, TaskPayload,
    TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::helper::{TestDaemon, eventually, marked_processes};
use crate::mcp::{Mcp, gate, profile_command, shim_command};

/// A client that declares the tasks extension at `initialize`.
#[derive(Clone, Default)]
struct TasksClient;

impl ClientHandler for TasksClient {
    fn get_info(&self) -> ClientConfig {
        // (Built from JSON: rmcp's capability builders need features this crate does not use.)
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"extensions": {TASKS_EXTENSION_ID: {}}}))
                .expect("client capabilities");
        ClientConfig::new(capabilities, Implementation::new("tasks-e2e", "0"))
    }
}

type Client = RunningService<RoleClient, TasksClient>;

/// Starts a shim command and opens a 2026-07-28 session (`server/discover`, every request
/// carrying its `_meta`) as a tasks-aware client: the extension's own era.
async fn connect(cmd: tokio::process::Command) -> Client {
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn mcp-yieldshell");
    TasksClient
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("MCP discovery")
}

/// Starts a shim command and completes a 2025-11-25 `initialize` handshake that declares the
/// extension anyway (as the MCP Inspector CLI does).
async fn connect_2025(cmd: tokio::process::Command) -> Client {
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn mcp-yieldshell");
    TasksClient.serve(transport).await.expect("MCP handshake")
}

/// Calls a tool and returns the raw response: a result, or a task.
async fn call(client: &Client, name: &str, args: Value) -> CallToolResponse {
    let Value::Object(arguments) = args else {
        panic!("arguments must be an object")
    };
    client
        .peer()
        .call_tool_once(CallToolRequestParams::new(name.to_string()).with_arguments(arguments))
        .await
        .expect("tools/call")
}

/// The task id of a response that must be a task.
fn task_id(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working, "{created:?}");
            assert!(created.task.poll_interval_ms.is_some(), "{created:?}");
            created.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

async fn get(client: &Client, id: &str) -> DetailedTask {
    client
        .peer()
        .get_task(GetTaskParams::new(id))
        .await
        .expect("tasks/get")
        .task
}

/// Polls `tasks/get` until the task leaves `working`.
async fn settled(client: &Client, id: &str) -> DetailedTask {
    eventually("the task to end", || async {
        let task = get(client, id).await;
        (task.status() != TaskStatus::Working).then_some(task)
    })
    .await
}

/// The `structuredContent` of a completed task's inlined tool result.
fn completed_body(task: &DetailedTask) -> (Value, Option<bool>) {
    let TaskPayload::Completed { result } = &task.payload else {
        panic!("expected a completed task, got {task:?}")
    };
    (
        result
            .get("structuredContent")
            .cloned()
            .expect("structuredContent"),
        result.get("isError").and_then(Value::as_bool),
    )
}

#[tokio::test]
async fn a_long_exec_becomes_a_task_that_completes_with_exit_code_and_output() {
    let d = TestDaemon::start().await;
    let client = connect(shim_command(&d, &[])).await;
    let caps = client
        .peer_info()
        .expect("server info")
        .capabilities
        .clone();
    assert!(
        caps.supports_tasks(),
        "the tasks extension is advertised: {caps:?}"
    );

    let (gate, wait) = gate(d.dir.path(), "hold");
    let command = format!("echo started; {wait}; echo finished; exit 3");
    let id = task_id(
        call(
            &client,
            "exec",
            json!({"command": command, "side_effects": ["NONE"], "yield_ms": 300}),
        )
        .await,
    );
    assert!(id.starts_with("proc_"), "task id = process id: {id}");

    let working = eventually("the first line in the status", || async {
        let task = get(&client, &id).await;
        assert_eq!(task.status(), TaskStatus::Working, "{task:?}");
        let message = task.task.status_message.clone().unwrap_or_default();
        message.contains("last: started").then_some(task)
    })
    .await;
    let message = working.task.status_message.clone().unwrap_or_default();
    assert!(message.starts_with("running for "), "{message}");
    assert_eq!(working.task.poll_interval_ms, Some(1_000), "{working:?}");

    std::fs::remove_file(&gate).expect("open the gate");
    let done = settled(&client, &id).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let (body, is_error) = completed_body(&done);
    // The same body `wait` returns once the process exited; a non-zero exit is a result.
    assert_eq!(is_error, Some(false), "{body}");
    assert_eq!(body["process_id"], id.as_str(), "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["exit_code"], 3, "{body}");
    assert_eq!(body["wait_result"], "exited", "{body}");
    assert!(
        body["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("finished"),
        "{body}"
    );
    assert!(body["next_seq"].as_u64().unwrap_or_default() > 1, "{body}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_fast_exec_answers_inline_even_when_tasks_are_declared() {
    let d = TestDaemon::start().await;
    let client = connect(shim_command(&d, &[])).await;
    let response = call(
        &client,
        "exec",
        json!({"command": "echo quick", "side_effects": ["NONE"], "yield_ms": 10000}),
    )
    .await;
    let CallToolResponse::Complete(result) = response else {
        panic!("expected an inline result, got {response:?}")
    };
    let body = result.structured_content.expect("structuredContent");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["stdout"], "quick\n", "{body}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn cancel_stops_the_whole_tree_and_the_task_ends_cancelled() {
    let d = TestDaemon::start().await;
    let client = connect(shim_command(&d, &[])).await;
    let id = task_id(
        call(
            &client,
            "exec",
            json!({"command": "sleep 300 & sleep 300 & wait", "side_effects": ["NONE"], "yield_ms": 100}),
        )
        .await,
    );
    // The shell and both children carry the process id in their environment.
    let tree = eventually("the tree to start", || async {
        let pids = marked_processes(&id);
        (pids.len() >= 3).then_some(pids)
    })
    .await;

    client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    // `tasks/cancel` returns once the tree is gone, as `stop` does.
    assert_eq!(marked_processes(&id), Vec::<i32>::new(), "was {tree:?}");
    let task = get(&client, &id).await;
    assert_eq!(task.status(), TaskStatus::Cancelled, "{task:?}");

    // A task that ended cannot be cancelled again: a clear error, not a silent ack.
    let again = client
        .peer()
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect_err("cancelling an ended task");
    assert!(again.to_string().contains("already ended"), "{again}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_task_created_by_one_shim_is_completed_through_another() {
    let d = TestDaemon::start().await;
    let (gate, wait) = gate(d.dir.path(), "hold");
    let first = connect(shim_command(&d, &[])).await;
    let id = task_id(
        call(
            &first,
            "exec",
            json!({"command": format!("{wait}; echo from-the-first-shim"), "side_effects": ["NONE"], "yield_ms": 100}),
        )
        .await,
    );
    // The editor restarts the shim: the first one exits, a new process answers for the task.
    first.cancel().await.expect("close the first shim");

    let second = connect(shim_command(&d, &[])).await;
    assert_eq!(get(&second, &id).await.status(), TaskStatus::Working);
    std::fs::remove_file(&gate).expect("open the gate");
    let done = settled(&second, &id).await;
    let (body, _) = completed_body(&done);
    assert_eq!(body["exit_code"], 0, "{body}");
    assert!(
        body["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("from-the-first-shim"),
        "{body}"
    );
    second.cancel().await.expect("close");
}

#[tokio::test]
async fn an_unknown_task_is_a_clear_json_rpc_error() {
    let d = TestDaemon::start().await;
    let client = connect(shim_command(&d, &[])).await;
    let lookup = client
        .peer()
        .get_task(GetTaskParams::new("proc_doesnotexist"))
        .await
        .map(|_| ());
    let cancel = client
        .peer()
        .cancel_task(CancelTaskParams::new("proc_doesnotexist"))
        .await;
    for result in [lookup, cancel] {
        let text = result.expect_err("an unknown task").to_string();
        assert!(
            text.contains("unknown task") && text.contains("-32602"),
            "{text}"
        );
    }
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_client_without_the_extension_gets_the_classic_answer() {
    let d = TestDaemon::start().await;
    let (gate, wait) = gate(d.dir.path(), "hold");
    let mcp = Mcp::start(&d, &[]).await;
    let body = crate::mcp::body(
        &mcp.call(
            "exec",
            json!({"command": wait, "side_effects": ["NONE"], "yield_ms": 100}),
        )
        .await,
    );
    assert_eq!(body["status"], "backgrounded", "{body}");
    std::fs::remove_file(&gate).expect("open the gate");
    mcp.close().await;
}

#[tokio::test]
async fn shell_execute_becomes_a_task_when_it_outlives_its_window() {
    let d = TestDaemon::start().await;
    let (gate, wait) = gate(d.dir.path(), "hold");
    let client = connect(profile_command(&d, "shell", &[("ALLOW_COMMANDS", "sh")])).await;
    let script = format!("{wait}; echo shell-done; exit 4");
    let id = task_id(
        call(
            &client,
            "shell_execute",
            json!({"command": ["sh", "-c", script]}),
        )
        .await,
    );
    std::fs::remove_file(&gate).expect("open the gate");
    let done = settled(&client, &id).await;
    // The task completes with the profile's own body, as the call would have answered.
    let (body, _) = completed_body(&done);
    assert_eq!(body["status"], 4, "{body}");
    assert_eq!(body["stdout"], "shell-done\n", "{body}");
    assert!(body.get("error").is_none(), "{body}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_2025_session_that_declares_the_extension_gets_the_classic_answer() {
    // As the MCP Inspector CLI does: the extension declared at a 2025-11-25 `initialize`. Its
    // wire exists on 2026-07-28 only; the answer must be one this client can read.
    let d = TestDaemon::start().await;
    let (gate, wait) = gate(d.dir.path(), "hold");
    let client = connect_2025(shim_command(&d, &[])).await;
    let caps = client
        .peer_info()
        .expect("server info")
        .capabilities
        .clone();
    assert!(
        !caps.supports_tasks(),
        "the extension is not offered to this session: {caps:?}"
    );
    let response = call(
        &client,
        "exec",
        json!({"command": wait, "side_effects": ["NONE"], "yield_ms": 100}),
    )
    .await;
    let CallToolResponse::Complete(result) = response else {
        panic!("expected the classic answer, got {response:?}")
    };
    let body = result.structured_content.expect("structuredContent");
    assert_eq!(body["status"], "backgrounded", "{body}");
    assert!(
        body["process_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("proc_")),
        "{body}"
    );
    std::fs::remove_file(&gate).expect("open the gate");
    client.cancel().await.expect("close");
}
