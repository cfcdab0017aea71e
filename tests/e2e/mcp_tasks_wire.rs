//! The MCP Tasks wire, as raw JSON-RPC lines through the built shim (README, "An agent session"): in both eras —
//! 2025 (`initialize`, capabilities declared once) and 2026-07-28 (no handshake, every request
//! carries its `_meta`) — a declared extension turns a long `exec` into `resultType: "task"`, an
//! undeclared one keeps the classic answer byte for byte in shape; `server/discover` lists the
//! project's running processes as `initialize` does; `subscriptions/listen` with `taskIds`
//! pushes `notifications/tasks`; `-32601` says what is not supported.

use serde_json::{Value, json};

use crate::helper::TestDaemon;
use crate::mcp::{RawShim, gate, shim_std_command};

const TASKS: &str = "io.modelcontextprotocol/tasks";
const V2026: &str = "2026-07-28";

/// The `_meta` every 2026-07-28 request carries; `tasks` declares the extension.
fn meta_2026(tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": V2026,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "0"}
    })
}

/// A 2025-era shim whose `initialize` declares (or not) the extension.
fn start_2025(d: &TestDaemon, tasks: bool) -> RawShim {
    let mut shim = RawShim::spawn(shim_std_command(d, &[]));
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    let id = shim.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}),
    );
    let init = shim.response(id);
    assert!(
        init["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "the extension is advertised: {init}"
    );
    shim.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    shim
}

fn exec_args(command: &str) -> Value {
    json!({"command": command, "side_effects": ["NONE"], "yield_ms": 100})
}

#[test]
fn in_the_2025_era_only_a_declared_extension_turns_a_long_exec_into_a_task() {
    let d = TestDaemon::unstarted();
    let (gate, wait) = gate(d.dir.path(), "hold");

    // No extension: the classic answer, and tasks/* are refused with -32021.
    let mut classic = start_2025(&d, false);
    let frame = classic.call("exec", exec_args(&wait));
    let result = &frame["result"];
    assert!(result.get("resultType").is_none(), "{frame}");
    assert_eq!(
        result["structuredContent"]["status"], "backgrounded",
        "{frame}"
    );
    assert!(result["content"][0]["text"].is_string(), "{frame}");
    let id = classic.request(
        "tasks/get",
        json!({"taskId": result["structuredContent"]["process_id"]}),
    );
    let refused = classic.response(id);
    assert_eq!(refused["error"]["code"], -32021, "{refused}");

    // Declared at initialize: the same call answers with a task.
    let mut tasks = start_2025(&d, true);
    let frame = tasks.call("exec", exec_args(&wait));
    let task = &frame["result"];
    assert_eq!(task["resultType"], "task", "{frame}");
    assert_eq!(task["status"], "working", "{frame}");
    let task_id = task["taskId"].as_str().expect("taskId").to_string();
    assert!(task_id.starts_with("proc_"), "{frame}");
    assert!(task["pollIntervalMs"].as_u64().is_some(), "{frame}");
    assert!(task.get("structuredContent").is_none(), "{frame}");

    std::fs::remove_file(&gate).expect("open the gate");
    let done = crate::helper::eventually_blocking("the task to complete", || {
        let id = tasks.request("tasks/get", json!({"taskId": task_id}));
        let frame = tasks.response(id);
        (frame["result"]["status"] == "completed").then_some(frame)
    });
    let body = &done["result"]["result"]["structuredContent"];
    assert_eq!(body["exit_code"], 0, "{done}");
    assert_eq!(body["process_id"], task_id.as_str(), "{done}");
    classic.close();
    tasks.close();
}

#[test]
fn in_the_2026_era_discover_lists_running_processes_and_listen_pushes_the_end_of_a_task() {
    let d = TestDaemon::unstarted();
    let (gate, wait) = gate(d.dir.path(), "hold");
    let mut shim = RawShim::spawn(shim_std_command(&d, &[]));

    // A task, declared per request in `_meta`.
    let id = shim.request(
        "tools/call",
        json!({"name": "exec", "arguments": exec_args(&format!("echo hello; {wait}")), "_meta": meta_2026(true)}),
    );
    let frame = shim.response(id);
    assert_eq!(frame["result"]["resultType"], "task", "{frame}");
    let task_id = frame["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_string();

    // Without the extension in its `_meta`, the same request gets the classic answer.
    let id = shim.request(
        "tools/call",
        json!({"name": "exec", "arguments": exec_args(&wait), "_meta": meta_2026(false)}),
    );
    let classic = shim.response(id);
    assert_eq!(
        classic["result"]["structuredContent"]["status"], "backgrounded",
        "{classic}"
    );

    // discover: the instructions name the running processes, as initialize's do.
    let id = shim.request("server/discover", json!({"_meta": meta_2026(false)}));
    let discovered = shim.response(id);
    let instructions = discovered["result"]["instructions"]
        .as_str()
        .unwrap_or_default();
    assert!(instructions.contains(&task_id), "{discovered}");
    assert!(
        discovered["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "{discovered}"
    );

    // A stream for the task: acknowledged with its id, then told when it ends.
    let listen = shim.request(
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [task_id]}, "_meta": meta_2026(true)}),
    );
    let ack = shim.frame_where("the acknowledgement", |f| {
        f["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task_id]),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen,
        "{ack}"
    );
    std::fs::remove_file(&gate).expect("open the gate");
    let pushed = shim.frame_where("notifications/tasks", |f| {
        f["method"] == "notifications/tasks"
    });
    let params = &pushed["params"];
    assert_eq!(params["taskId"], task_id.as_str(), "{pushed}");
    assert_eq!(params["status"], "completed", "{pushed}");
    assert_eq!(
        params["_meta"]["io.modelcontextprotocol/subscriptionId"], listen,
        "{pushed}"
    );
    let body = &params["result"]["structuredContent"];
    assert_eq!(body["exit_code"], 0, "{pushed}");
    assert!(
        body["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("hello"),
        "{pushed}"
    );
    shim.close();
}

#[test]
fn an_unsupported_method_says_what_is_not_supported() {
    let d = TestDaemon::unstarted();
    let mut shim = RawShim::start(shim_std_command(&d, &[("YIELDSHELL_NO_AUTOSTART", "1")]));
    for method in ["prompts/list", "resources/list", "no/such/method"] {
        let id = shim.request(method, json!({}));
        let frame = shim.response(id);
        assert_eq!(frame["error"]["code"], -32601, "{frame}");
        let message = frame["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            message,
            format!("{method} is not supported: this server offers tools (and tasks) only"),
            "{frame}"
        );
    }
    shim.close();
}
