//! `mcp-yieldshell` end to end, through a real MCP client over stdio: the tool contract of
//! README, "Tools", error shapes, progress, instructions, restarts, protocol robustness.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::helper::{Pid, TestDaemon, bin, eventually, marked_processes, testbin};

use crate::mcp::{Mcp, body, gate, is_error, shim_command};

#[tokio::test]
async fn tools_list_describes_the_whole_contract() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let info = mcp.service.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().expect("server info").name,
        "mcp-yieldshell"
    );
    assert!(mcp.instructions().contains("exec"));
    let tools = mcp
        .service
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        ["exec", "read", "write", "wait", "stop", "ps", "cleanup"]
    );
    let by_name = |n: &str| tools.iter().find(|t| t.name == n).expect("tool").clone();
    let required = |n: &str| -> Vec<String> {
        by_name(n)
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(required("exec"), ["command", "side_effects"]);
    assert_eq!(required("read"), ["process_id"]);
    assert_eq!(required("write"), ["process_id", "input"]);
    assert_eq!(required("wait"), ["process_id"]);
    assert_eq!(required("stop"), ["process_id"]);
    assert!(required("ps").is_empty() && required("cleanup").is_empty());
    let exec = by_name("exec");
    let props = exec.input_schema.get("properties").expect("properties");
    let effects = props["side_effects"]["items"]["enum"]
        .as_array()
        .expect("enum");
    assert_eq!(effects.len(), 19);
    assert!(
        effects.contains(&json!("NONE"))
            && effects.contains(&json!("USES_DESTRUCTIVE_GIT_OPERATION"))
    );
    for p in [
        "cwd",
        "env",
        "shell",
        "stdin",
        "close_stdin",
        "name",
        "yield_ms",
        "timeout_ms",
        "max_output_bytes",
    ] {
        assert!(props.get(p).is_some(), "exec lacks {p}");
    }
    assert_eq!(props["yield_ms"]["default"], 5000);
    // The blocking part is capped like `wait`'s, under MCP clients' 60 s request timeout, and
    // the tool says so (the session's larger max_yield_ms does not lift it).
    assert_eq!(props["yield_ms"]["maximum"], 55000);
    assert!(
        exec.description
            .as_ref()
            .is_some_and(|d| d.contains("max 55000")),
        "{:?}",
        exec.description
    );
    let read_props = by_name("read")
        .input_schema
        .get("properties")
        .cloned()
        .expect("props");
    assert_eq!(
        read_props["streams"]["enum"],
        json!(["both", "stdout", "stderr"])
    );
    assert_eq!(
        by_name("wait").input_schema["properties"]["timeout_ms"]["default"],
        30000
    );
    assert_eq!(
        by_name("stop").input_schema["properties"]["signal"]["default"],
        "SIGTERM"
    );
    assert_eq!(
        by_name("ps").input_schema["properties"]["limit"]["default"],
        50
    );
    for t in &tools {
        assert!(
            t.output_schema.is_some(),
            "{} lacks an outputSchema",
            t.name
        );
        assert!(t.description.as_ref().is_some_and(|d| d.len() > 40));
    }
    let ann = |n: &str| by_name(n).annotations.expect("annotations");
    for n in ["read", "ps", "wait"] {
        assert_eq!(ann(n).read_only_hint, Some(true), "{n}");
    }
    for n in ["stop", "cleanup"] {
        assert_eq!(ann(n).destructive_hint, Some(true), "{n}");
    }
    assert_eq!(ann("exec").open_world_hint, Some(true));
    mcp.close().await;
}

#[tokio::test]
async fn an_agent_session_exec_yields_read_pages_by_next_seq_and_stop_ends_it() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    // Fast command: everything at once.
    let r = mcp
        .call(
            "exec",
            json!({"command": "echo hi; echo err >&2; exit 2", "side_effects": ["NONE"]}),
        )
        .await;
    assert!(!is_error(&r));
    let b = body(&r);
    for field in [
        "process_id",
        "status",
        "duration_ms",
        "stdout",
        "stderr",
        "truncated",
        "next_seq",
        "exit_code",
        "pid",
    ] {
        assert!(b.get(field).is_some(), "exec response lacks {field}: {b}");
    }
    // Fields without a value are left out (the output schema says optional, not nullable).
    for absent in ["signal", "message", "error"] {
        assert!(b.get(absent).is_none(), "{absent} has no value here: {b}");
    }
    assert_eq!(b["status"], "completed");
    assert_eq!(
        (
            b["stdout"].clone(),
            b["stderr"].clone(),
            b["exit_code"].clone()
        ),
        (json!("hi\n"), json!("err\n"), json!(2))
    );
    assert_eq!(b["next_seq"], 8);

    // Slow command: yields with a process id and a hint.
    let (gate_path, wait_gate) = gate(d.dir.path(), "g1");
    let cmd = format!(
        "echo one; {wait_gate}; echo two; exec {} ready-sleep 600",
        testbin()
    );
    let r = mcp
        .call(
            "exec",
            json!({"command": cmd, "side_effects": ["NONE"], "yield_ms": 300}),
        )
        .await;
    let b = body(&r);
    assert_eq!(b["status"], "backgrounded");
    let id = b["process_id"].as_str().expect("id").to_string();
    assert!(b["message"].as_str().expect("message").contains("read("));
    assert!(b["pid"].is_u64());
    let first = b["stdout"].as_str().expect("stdout").to_string();
    let mut next = b["next_seq"].as_u64().expect("next_seq");
    std::fs::remove_file(&gate_path).expect("open gate");
    // Read by next_seq until the ready line shows: nothing repeated, nothing lost.
    let mut rest = first.clone();
    let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
    // Until a whole `ready <pid> <start>` line has arrived (7-byte pages split it).
    while Pid::all_from_ready_lines(&rest).is_empty() || !rest.ends_with('\n') {
        assert!(
            std::time::Instant::now() < deadline,
            "no ready line: {rest:?}"
        );
        let r = mcp
            .call(
                "read",
                json!({"process_id": id, "since_seq": next, "max_output_bytes": 7}),
            )
            .await;
        let b = body(&r);
        rest.push_str(b["stdout"].as_str().unwrap_or_default());
        next = b["next_seq"].as_u64().expect("next_seq");
        assert_eq!(b["status"], "running");
        if !b["has_more"].as_bool().unwrap_or(false) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    assert!(rest.starts_with("one\ntwo\nready "), "{rest:?}");
    let pid = Pid::all_from_ready_lines(&rest)[0];
    let r = mcp.call("stop", json!({"process_id": id})).await;
    let b = body(&r);
    assert_eq!(b["stopped"], true);
    assert_eq!(b["status"], "stopped");
    assert!(!pid.alive());
    let r = mcp.call("ps", json!({})).await;
    let procs = body(&r)["processes"].as_array().expect("array").clone();
    let entry = procs
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .expect("listed");
    for field in [
        "process_id",
        "pid",
        "command",
        "cwd",
        "status",
        "signal",
        "started_at",
        "ended_at",
        "duration_ms",
        "stdout_bytes",
        "stderr_bytes",
    ] {
        assert!(entry.get(field).is_some(), "ps entry lacks {field}");
    }
    assert_eq!(entry["status"], "stopped");
    assert_eq!(entry["signal"], "SIGTERM");
    // Without a value, left out: no name was given, and a signal ended it.
    for absent in ["name", "exit_code"] {
        assert!(entry.get(absent).is_none(), "{absent}: {entry}");
    }
    mcp.close().await;
}

#[tokio::test]
async fn error_bodies_echo_the_id_keep_the_tool_flag_and_name_the_kind() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let r = mcp
        .call("read", json!({"process_id": "proc_unknown0000"}))
        .await;
    assert!(is_error(&r));
    let b = body(&r);
    assert_eq!(b["process_id"], "proc_unknown0000");
    assert_eq!(b["error_kind"], "unknown_process");
    assert!(
        b["error"]
            .as_str()
            .expect("error")
            .contains("proc_unknown0000")
    );
    let b = body(
        &mcp.call("stop", json!({"process_id": "proc_unknown0000"}))
            .await,
    );
    assert_eq!(
        (b["stopped"].clone(), b["error_kind"].clone()),
        (json!(false), json!("unknown_process"))
    );
    let b = body(
        &mcp.call(
            "write",
            json!({"process_id": "proc_unknown0000", "input": "x"}),
        )
        .await,
    );
    assert_eq!(
        (b["ok"].clone(), b["process_id"].clone()),
        (json!(false), json!("proc_unknown0000"))
    );
    // Bad arguments are tool results too, not JSON-RPC errors.
    for (tool, args, needle) in [
        ("exec", json!({"command": "true"}), "side_effects"),
        (
            "exec",
            json!({"command": "true", "side_effects": []}),
            "NONE",
        ),
        (
            "exec",
            json!({"command": "true", "side_effects": ["NOPE"]}),
            "MAKES_NETWORK_REQUESTS",
        ),
        ("exec", json!({"side_effects": ["NONE"]}), "command"),
        (
            "exec",
            json!({"command": "true", "side_effects": ["NONE"], "yield_ms": -5}),
            "yield_ms",
        ),
        (
            "read",
            json!({"process_id": "proc_x", "streams": "stdin"}),
            "both, stdout, stderr",
        ),
        ("ps", json!({"limit": "lots"}), "limit"),
        ("stop", json!({"process_id": 7}), "process_id"),
    ] {
        let r = mcp.call(tool, args.clone()).await;
        assert!(is_error(&r), "{tool} {args} was not an error");
        let b = body(&r);
        assert!(
            b["error"].as_str().expect("error").contains(needle),
            "{tool} {args}: {b}"
        );
        if tool == "exec" {
            assert_eq!(b["status"], "failed_to_start");
            assert_eq!(b["process_id"], Value::Null);
        }
    }
    // Stop on an exited process: its own clear message.
    let id = body(
        &mcp.call("exec", json!({"command": "true", "side_effects": ["NONE"]}))
            .await,
    )["process_id"]
        .clone();
    let b = body(
        &mcp.call("stop", json!({"process_id": id, "signal": "NOPE"}))
            .await,
    );
    assert_eq!(b["error_kind"], "invalid_argument");
    let b = body(&mcp.call("stop", json!({"process_id": id})).await);
    assert_eq!(b["stopped"], false);
    assert_eq!(b["error_kind"], "process_exited");
    // It says how the process ended, not the signal it was asked to send: `true` exited 0.
    assert_eq!(b["signal"], Value::Null, "{b}");
    assert_eq!(b["exit_code"], 0, "{b}");
    // Unknown tools are protocol errors.
    assert!(mcp.try_call("nope", json!({})).await.is_err());
    mcp.close().await;
}

#[tokio::test]
async fn policy_rules_refuse_through_the_shim_with_failed_to_start() {
    let d = TestDaemon::start().await;
    let project = d.dir.path().join("project");
    std::fs::create_dir(&project).expect("mkdir");
    let project_s = project.display().to_string();
    let mcp = Mcp::start(
        &d,
        &[
            ("YIELDSHELL_ALLOWED_CWDS", project_s.as_str()),
            ("YIELDSHELL_DEFAULT_CWD", project_s.as_str()),
            ("YIELDSHELL_ALLOW_COMMANDS", "echo,cat"),
            ("YIELDSHELL_DENY_COMMAND_REGEX", "forbidden"),
            ("MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS", "DELETES_FILES"),
            ("SERVICE_TOKEN", "tok-1234567890-secret"),
        ],
    )
    .await;
    for (args, kind) in [
        (
            json!({"command": "echo hi", "side_effects": ["DELETES_FILES"]}),
            "side_effect_blocked",
        ),
        (
            json!({"command": "echo forbidden", "side_effects": ["NONE"]}),
            "command_denied",
        ),
        (
            json!({"command": "echo hi; rm -rf /", "side_effects": ["NONE"]}),
            "command_denied",
        ),
        (
            json!({"command": "echo hi", "side_effects": ["NONE"], "cwd": "/"}),
            "cwd_denied",
        ),
    ] {
        let r = mcp.call("exec", args.clone()).await;
        assert!(is_error(&r));
        let b = body(&r);
        assert_eq!(b["status"], "failed_to_start", "{args}");
        assert_eq!(b["error_kind"], kind, "{args}: {b}");
    }
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo $SERVICE_TOKEN | cat", "side_effects": ["NONE"]}),
        )
        .await,
    );
    assert_eq!(b["status"], "completed");
    assert_eq!(b["stdout"], "[REDACTED:SERVICE_TOKEN]\n");
    mcp.close().await;
}

#[tokio::test]
async fn commands_run_in_the_client_environment_not_the_daemons() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[("ONLY_IN_CLIENT", "client-value")]).await;
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo $ONLY_IN_CLIENT; pwd", "side_effects": ["NONE"]}),
        )
        .await,
    );
    let cwd = std::fs::canonicalize(d.dir.path()).expect("canon");
    assert_eq!(b["stdout"], format!("client-value\n{}\n", cwd.display()));
    mcp.close().await;
}

#[tokio::test]
async fn wait_until_tail_lines_and_ps_scope() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let cmd = format!(
        "for i in 1 2 3; do echo line$i; done; echo listening on 8080; exec {} ready-sleep 600",
        testbin()
    );
    let id = body(
        &mcp.call(
            "exec",
            json!({"command": cmd, "side_effects": ["NONE"], "yield_ms": 0}),
        )
        .await,
    )["process_id"]
        .clone();
    let b = body(
        &mcp.call(
            "wait",
            json!({"process_id": id, "until": "listening on \\d+", "timeout_ms": 30000}),
        )
        .await,
    );
    assert_eq!(b["wait_result"], "matched");
    assert_eq!(b["matched_line"], "listening on 8080");
    for field in [
        "first_seq",
        "descendants_running",
        "next_seq",
        "truncated",
        "status",
    ] {
        assert!(b.get(field).is_some(), "wait lacks {field}");
    }
    let b = body(
        &mcp.call("read", json!({"process_id": id, "tail_lines": 2}))
            .await,
    );
    let text = b["stdout"].as_str().expect("stdout");
    assert!(
        text.starts_with("listening on 8080\nready ") || text.starts_with("line3\nlistening"),
        "{text}"
    );
    let b = body(
        &mcp.call("wait", json!({"process_id": id, "timeout_ms": 100}))
            .await,
    );
    assert_eq!(b["wait_result"], "deadline_reached");
    assert_eq!(b["status"], "running");
    // Another project's shim sees it only with scope=all.
    let elsewhere = d.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let other = Mcp::start(
        &d,
        &[("YIELDSHELL_DEFAULT_CWD", elsewhere.to_str().expect("utf8"))],
    )
    .await;
    let ids = |v: Value| -> Vec<Value> {
        v["processes"]
            .as_array()
            .expect("array")
            .iter()
            .map(|p| p["process_id"].clone())
            .collect()
    };
    assert!(!ids(body(&other.call("ps", json!({})).await)).contains(&id));
    assert!(ids(body(&other.call("ps", json!({"scope": "all"})).await)).contains(&id));
    assert!(
        ids(body(
            &mcp.call("ps", json!({"include_completed": false})).await
        ))
        .contains(&id)
    );
    mcp.call("stop", json!({"process_id": id})).await;
    other.close().await;
    mcp.close().await;
}

#[tokio::test]
async fn long_waits_send_progress_notifications_with_the_latest_line() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let (gate_path, wait_gate) = gate(d.dir.path(), "g");
    let cmd = format!("echo working hard; {wait_gate}; echo done");
    let id = body(
        &mcp.call(
            "exec",
            json!({"command": cmd, "side_effects": ["NONE"], "yield_ms": 0}),
        )
        .await,
    )["process_id"]
        .clone();
    let waiting = mcp.call_with_progress("wait", json!({"process_id": id, "timeout_ms": 55000}));
    let opener = async {
        eventually("a progress notification", || async {
            (!mcp.progress().is_empty()).then_some(())
        })
        .await;
        std::fs::remove_file(&gate_path).expect("open gate");
    };
    let (r, ()) = tokio::join!(waiting, opener);
    let b = body(&r);
    assert_eq!(b["wait_result"], "exited");
    assert_eq!(b["stdout"], "working hard\ndone\n");
    let p = mcp.progress();
    let msg = p[0].message.clone().unwrap_or_default();
    assert!(msg.contains("working hard"), "{msg}");
    assert!(p.windows(2).all(|w| w[1].progress >= w[0].progress));

    // exec waiting for its yield also reports progress, and returns when the command ends.
    let before = mcp.progress().len();
    let (gate_path, wait_gate) = gate(d.dir.path(), "g2");
    let exec = mcp.call_with_progress(
        "exec",
        json!({"command": format!("echo compiling; {wait_gate}; echo built"), "side_effects": ["NONE"], "yield_ms": 60000}),
    );
    let opener = async {
        eventually("exec progress", || async {
            (mcp.progress().len() > before).then_some(())
        })
        .await;
        std::fs::remove_file(&gate_path).expect("open gate");
    };
    let (r, ()) = tokio::join!(exec, opener);
    let b = body(&r);
    assert_eq!(b["status"], "completed");
    assert_eq!(b["stdout"], "compiling\nbuilt\n");
    mcp.close().await;
}

/// The `ps` row of the process whose command contains `needle`, once there is one.
async fn ps_row(mcp: &Mcp, needle: &str) -> Option<Value> {
    let listed = body(
        &mcp.call(
            "ps",
            json!({"include_completed": true, "scope": "all", "limit": 500}),
        )
        .await,
    );
    listed["processes"].as_array().and_then(|rows| {
        rows.iter()
            .find(|r| r["command"].as_str().is_some_and(|c| c.contains(needle)))
            .cloned()
    })
}

#[tokio::test]
async fn a_cancelled_exec_stops_its_whole_tree() {
    // `notifications/cancelled` while exec blocks (Esc in an editor, a client's timeout): no
    // answer will ever carry the process id, so the command must not run on unknown. Once
    // right after it started (the call may still be in its first slice) and once after it has
    // run past that slice.
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    for (round, ran_for_ms) in [(1, 0), (2, 1_500)] {
        let started = d.dir.path().join(format!("started-{round}"));
        let command = format!("touch {}; sleep 300 & sleep 300 & wait", started.display());
        let params = rmcp::model::CallToolRequestParams::new("exec").with_arguments(
            json!({"command": command, "side_effects": ["NONE"], "yield_ms": 50_000})
                .as_object()
                .cloned()
                .expect("arguments"),
        );
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        let handle = mcp
            .service
            .peer()
            .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .expect("tools/call sent");
        let row = eventually("the command to start", || async {
            if !started.exists() {
                return None;
            }
            ps_row(&mcp, &started.display().to_string())
                .await
                .filter(|r| r["duration_ms"].as_u64().is_some_and(|ms| ms >= ran_for_ms))
        })
        .await;
        let id = row["process_id"].as_str().expect("process_id").to_string();
        eventually("the whole tree", || async {
            (marked_processes(&id).len() >= 3).then_some(())
        })
        .await;

        handle
            .cancel(Some("the user pressed Esc".into()))
            .await
            .expect("notifications/cancelled");
        let ended = eventually("the command to be stopped", || async {
            ps_row(&mcp, &started.display().to_string())
                .await
                .filter(|r| r["status"] != "running")
        })
        .await;
        assert_eq!(ended["status"], "stopped", "round {round}: {ended}");
        assert_eq!(
            marked_processes(&id),
            Vec::<i32>::new(),
            "round {round}: the whole tree is gone"
        );
    }
    // The session goes on.
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo still here", "side_effects": ["NONE"]}),
        )
        .await,
    );
    assert_eq!(b["stdout"], "still here\n", "{b}");
    mcp.close().await;
}

#[tokio::test]
async fn instructions_list_this_projects_running_processes() {
    let d = TestDaemon::start().await;
    let first = Mcp::start(&d, &[]).await;
    let cmd = format!("exec {} ready-sleep 600", testbin());
    let id = body(&first.call("exec", json!({"command": cmd, "side_effects": ["NONE"], "yield_ms": 0, "name": "devserver"})).await)["process_id"]
        .as_str()
        .expect("id")
        .to_string();
    first.close().await;
    let second = Mcp::start(&d, &[]).await;
    let text = second.instructions();
    assert!(text.contains(&id) && text.contains("devserver"), "{text}");
    second.call("stop", json!({"process_id": id})).await;
    second.close().await;
}

#[tokio::test]
async fn a_killed_shim_leaves_processes_running_and_a_new_one_resumes_reading() {
    let d = TestDaemon::start().await;
    let (gate_path, wait_gate) = gate(d.dir.path(), "g");
    let mut cmd = shim_command(&d, &[]);
    cmd.kill_on_drop(true);
    let first = Mcp::start_command(cmd).await;
    let command = format!(
        "echo before; {wait_gate}; echo after; exec {} ready-sleep 600",
        testbin()
    );
    let b = body(
        &first
            .call(
                "exec",
                json!({"command": command, "side_effects": ["NONE"], "yield_ms": 200}),
            )
            .await,
    );
    let id = b["process_id"].as_str().expect("id").to_string();
    let next = b["next_seq"].as_u64().expect("next_seq");
    assert_eq!(b["stdout"], "before\n");
    // Kill the shim hard (drop kills the child); the process is the daemon's and keeps going.
    drop(first);
    std::fs::remove_file(&gate_path).expect("open gate");
    let second = Mcp::start(&d, &[]).await;
    let listed = body(&second.call("ps", json!({"include_completed": false})).await);
    assert!(
        listed["processes"]
            .as_array()
            .expect("array")
            .iter()
            .any(|p| p["process_id"] == id.as_str())
    );
    let text = eventually("output after the gate", || async {
        let b = body(
            &second
                .call("read", json!({"process_id": id, "since_seq": next}))
                .await,
        );
        let s = b["stdout"].as_str().unwrap_or_default().to_string();
        s.contains("ready ").then_some(s)
    })
    .await;
    assert!(
        text.starts_with("after\nready "),
        "resumed exactly after the old session's next_seq: {text:?}"
    );
    second.call("stop", json!({"process_id": id})).await;
    second.close().await;
}

#[tokio::test]
async fn a_daemon_crash_fails_the_in_flight_call_clearly_and_the_next_call_reconnects() {
    let mut d = TestDaemon::start().await;
    // Auto-start off: when the kill lands before the request has left the shim, the request was
    // never delivered and a shim that may start daemons would resend it to a new one (a wait that
    // then runs its whole timeout). Without auto-start both orders end the call with an error,
    // so the test does not depend on which one the scheduler picks.
    let mcp = Mcp::start(&d, &[("YIELDSHELL_NO_AUTOSTART", "1")]).await;
    let id = body(
        &mcp.call(
            "exec",
            json!({"command": "sleep 600", "side_effects": ["NONE"], "yield_ms": 0}),
        )
        .await,
    )["process_id"]
        .clone();
    let waiting = mcp.call("wait", json!({"process_id": id, "timeout_ms": 55000}));
    let crash = async {
        tokio::task::yield_now().await;
        d.kill9();
    };
    let (r, ()) = tokio::join!(waiting, crash);
    assert!(is_error(&r), "{r:?}");
    let b = body(&r);
    assert_eq!(b["process_id"], id);
    assert_eq!(b["error_kind"], "daemon_unavailable", "{b}");
    assert!(
        b["error"].as_str().expect("error").contains("yieldshelld"),
        "names the daemon: {b}"
    );
    // A new daemon re-adopts the process from its holder; the shim's next call reconnects to it.
    d.spawn().await;
    let b = body(&mcp.call("ps", json!({"scope": "all"})).await);
    let entry = b["processes"]
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["process_id"] == id)
        .cloned()
        .expect("listed");
    assert_eq!(entry["status"], "running");
    // Dropping the daemon stops it gracefully, which ends the process with it.
    mcp.close().await;
}

/// Raw JSON-RPC over the shim's pipes, for inputs a well-behaved client never sends.
#[test]
fn malformed_input_gets_errors_or_is_ignored_and_eof_exits_zero() {
    let dir = TestDaemon::new_dir();
    let mut child = std::process::Command::new(bin("mcp-yieldshell"))
        .env("YIELDSHELL_SOCKET", dir.path().join("none.sock"))
        .env("YIELDSHELL_NO_AUTOSTART", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shim");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |v: &str| {
        stdin.write_all(v.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    };
    let mut recv = || {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read");
        serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line:?}"))
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(recv()["id"], 1);
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Not JSON at all: ignored, as the official SDKs do (no reply, no crash).
    send("{this is not json");
    send("\u{1}\u{2}garbage");
    // JSON of the wrong shape: an Invalid Request error.
    send(r#"{"jsonrpc":"2.0","id":2,"method":42}"#);
    let r = recv();
    assert!(r.get("error").is_some(), "{r}");
    // Unknown tool: a JSON-RPC error naming the tools.
    send(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}"#,
    );
    let r = recv();
    assert_eq!(r["id"], 3);
    assert!(
        r["error"]["message"]
            .as_str()
            .expect("message")
            .contains("exec")
    );
    // Wrong argument types: a tool result with isError.
    send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ps","arguments":{"limit":{"no":1}}}}"#,
    );
    let r = recv();
    assert_eq!(r["result"]["isError"], true);
    // An oversized argument (9 MiB): a clear tool error, not a hang.
    let big = "x".repeat(9 * 1024 * 1024);
    send(&format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"exec","arguments":{{"command":"{big}","side_effects":["NONE"]}}}}}}"#
    ));
    let r = recv();
    assert_eq!(r["id"], 5);
    assert_eq!(
        r["result"]["structuredContent"]["error_kind"],
        "invalid_argument"
    );
    // No daemon and auto-start off: tools answer with daemon_unavailable.
    send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ps","arguments":{}}}"#);
    let r = recv();
    assert_eq!(
        r["result"]["structuredContent"]["error_kind"],
        "daemon_unavailable"
    );
    drop(stdin);
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "the shim must exit 0 when stdin closes"
    );
}

#[test]
fn an_invalid_configuration_fails_at_startup_listing_valid_values() {
    let out = std::process::Command::new(bin("mcp-yieldshell"))
        .env(
            "MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS",
            "DELETES_FILES,NOT_A_THING",
        )
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "nothing but JSON-RPC may reach stdout"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NOT_A_THING") && err.contains("MAKES_NETWORK_REQUESTS"),
        "{err}"
    );
    let out = std::process::Command::new(bin("mcp-yieldshell"))
        .env("YIELDSHELL_ALLOW_COMMAND_REGEX", "(unclosed")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("YIELDSHELL_ALLOW_COMMAND_REGEX"));
}

/// `--help` names every profile for what it is: the two published packages by their names, the
/// two specifications as such.
#[test]
fn help_names_each_profile_for_what_it_is() {
    let out = std::process::Command::new(bin("mcp-yieldshell"))
        .arg("--help")
        .output()
        .expect("mcp-yieldshell --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let summary = help
        .lines()
        .skip_while(|l| !l.contains("--profile"))
        .nth(1)
        .unwrap_or_default()
        .to_string();
    for profile in [
        "default",
        "mcp-background-job",
        "mcp-shell-server",
        "jobs",
        "shell",
    ] {
        assert!(
            help.contains(&format!("- {profile}:")),
            "{profile} missing: {help}"
        );
    }
    assert!(summary.contains("published"), "{summary}");
    assert!(summary.contains("specification"), "{summary}");
    let described = |profile: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(&format!("- {profile}:")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(described("shell").contains("specification"), "{help}");
    assert!(described("jobs").contains("specification"), "{help}");
    assert!(
        described("mcp-shell-server").contains("published"),
        "{help}"
    );
}
