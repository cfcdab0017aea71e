//! The MCP Tasks wire, as raw JSON-RPC lines through the built shim (README, "MCP Tasks"): the
//! extension (`resultType: "task"`) only on a 2026-07-28 request (no handshake, every request
//! carries its `_meta`) that declares it — a session that began with `initialize` keeps the
//! classic answer even when it declares it; `server/discover` lists the project's running
//! processes as `initialize` does; `subscriptions/listen` with `taskIds` pushes
//! `notifications/tasks`; `-32601` says what is not supported. The 2025-11-25 tasks are in
//! `mcp_tasks_2025`.

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

/// A shim after an `initialize` of `version` that declares (or not) the extension; returns the
/// `initialize` answer too.
fn start_initialized(d: &TestDaemon, version: &str, tasks: bool) -> (RawShim, Value) {
    let mut shim = RawShim::spawn(shim_std_command(d, &[]));
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    let id = shim.request(
        "initialize",
        json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}),
    );
    let init = shim.response(id);
    shim.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    (shim, init)
}

fn exec_args(command: &str) -> Value {
    json!({"command": command, "side_effects": ["NONE"], "yield_ms": 100})
}

#[test]
fn a_session_that_began_with_initialize_gets_the_classic_answer_even_when_it_declares_the_extension()
 {
    // The MCP Inspector CLI's default mode: 2025-11-25, the extension declared at initialize.
    // The extension's wire exists on 2026-07-28 only; a 2025 client cannot read a
    // `resultType: "task"` answer and would never learn the process id.
    let d = TestDaemon::unstarted();
    let (gate, wait) = gate(d.dir.path(), "hold");
    for version in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        let (mut shim, init) = start_initialized(&d, version, true);
        let capabilities = &init["result"]["capabilities"];
        assert!(
            capabilities["extensions"].get(TASKS).is_none(),
            "{version}: the extension is not offered: {init}"
        );
        // The revision's own tasks instead, from 2025-11-25 on.
        assert_eq!(
            capabilities["tasks"].is_object(),
            version == "2025-11-25",
            "{version}: {init}"
        );
        let frame = shim.call("exec", exec_args(&wait));
        let result = &frame["result"];
        assert!(result.get("resultType").is_none(), "{version}: {frame}");
        assert!(result.get("taskId").is_none(), "{version}: {frame}");
        let body = &result["structuredContent"];
        assert_eq!(body["status"], "backgrounded", "{version}: {frame}");
        assert!(
            body["process_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("proc_")),
            "{version}: {frame}"
        );
        assert!(
            result["content"][0]["text"].is_string(),
            "{version}: {frame}"
        );
        // The extension's tasks/get is refused: it is not this session's wire.
        if version != "2025-11-25" {
            let id = shim.request("tasks/get", json!({"taskId": body["process_id"]}));
            let refused = shim.response(id);
            assert!(refused.get("error").is_some(), "{version}: {refused}");
        }
        shim.close();
    }
    std::fs::remove_file(&gate).expect("open the gate");
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
