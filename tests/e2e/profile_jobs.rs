//! `mcp-yieldshell --profile jobs` end to end, through a real MCP client over stdio: the MCP
//! Background Job Server's seven tools, their statuses, errors and configuration, and jobs seen
//! from `yieldctl`.

use std::process::Stdio;

use serde_json::json;

use crate::helper::{Pid, TestDaemon, bin, eventually, json as parse_json, run, testbin};
use crate::mcp::{Mcp, body, gate, is_error, shim_command, text_of};

async fn jobs(d: &TestDaemon, vars: &[(&str, &str)]) -> Mcp {
    Mcp::start_profile(d, "jobs", vars).await
}

async fn execute(mcp: &Mcp, command: &str) -> String {
    let r = mcp.call("execute", json!({"command": command})).await;
    assert!(!is_error(&r), "execute {command:?}: {}", text_of(&r));
    let b = body(&r);
    assert_eq!(b.as_object().map(|o| o.len()), Some(1), "{b}");
    b["job_id"].as_str().expect("job_id").to_string()
}

async fn status(mcp: &Mcp, id: &str) -> String {
    let b = body(&mcp.call("status", json!({"job_id": id})).await);
    b["status"].as_str().expect("status").to_string()
}

/// Polls `status` until the job is no longer running.
async fn ended(mcp: &Mcp, id: &str) -> String {
    eventually("the job to end", || async {
        let s = status(mcp, id).await;
        (s != "running").then_some(s)
    })
    .await
}

fn is_uuid_v4(id: &str) -> bool {
    let b = id.as_bytes();
    yieldshell_proto::ids::is_client_process_id(id)
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

#[tokio::test]
async fn tools_have_the_specs_names_parameters_and_annotations() {
    let d = TestDaemon::start().await;
    let mcp = jobs(&d, &[]).await;
    let tools = mcp.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "execute", "list", "status", "output", "tail", "kill", "interact"
        ]
    );
    let tool = |n: &str| tools.iter().find(|t| t.name == n).expect("tool").clone();
    let required = |n: &str| tool(n).input_schema.get("required").cloned();
    assert_eq!(required("execute"), Some(json!(["command"])));
    assert_eq!(required("list"), Some(json!([])));
    for n in ["status", "output", "tail", "kill"] {
        assert_eq!(required(n), Some(json!(["job_id"])), "{n}");
    }
    assert_eq!(required("interact"), Some(json!(["job_id", "input"])));
    let lines = tool("tail").input_schema["properties"]["lines"].clone();
    assert_eq!(
        (
            lines["default"].clone(),
            lines["minimum"].clone(),
            lines["maximum"].clone()
        ),
        (json!(50), json!(1), json!(1000))
    );
    let hints = |n: &str| {
        let a = tool(n).annotations.expect("annotations");
        (
            a.read_only_hint,
            a.destructive_hint,
            a.idempotent_hint,
            a.open_world_hint,
        )
    };
    let (t, f) = (Some(true), Some(false));
    assert_eq!(hints("execute"), (f, f, f, None));
    for n in ["list", "status", "output", "tail"] {
        assert_eq!(hints(n), (t, f, t, None), "{n}");
    }
    assert_eq!(hints("kill"), (f, t, f, None));
    assert_eq!(hints("interact"), (f, f, f, None));
    for t in &tools {
        assert!(
            t.output_schema.is_some(),
            "{} lacks an outputSchema",
            t.name
        );
    }
    // The profile can also come from the environment.
    let by_env = Mcp::start(&d, &[("YIELDSHELL_PROFILE", "jobs")]).await;
    assert_eq!(by_env.tools().await.len(), 7);
    assert!(by_env.tools().await.iter().any(|t| t.name == "interact"));
    by_env.close().await;
    mcp.close().await;
}

#[tokio::test]
async fn every_status_output_and_the_kill_answers() {
    let d = TestDaemon::start().await;
    let mcp = jobs(&d, &[]).await;
    // completed, through /bin/sh -c: pipes and && work.
    let id = execute(
        &mcp,
        "echo out; echo err >&2; printf 'a\\nb\\n' | wc -l && echo piped",
    )
    .await;
    assert!(is_uuid_v4(&id), "{id}");
    assert_eq!(ended(&mcp, &id).await, "completed");
    let b = body(&mcp.call("output", json!({"job_id": id})).await);
    assert_eq!(b, json!({"stdout": "out\n2\npiped\n", "stderr": "err\n"}));
    assert_eq!(
        body(&mcp.call("kill", json!({"job_id": id})).await),
        json!({"status": "already_terminated"})
    );

    // failed: a non-zero exit.
    let failed = execute(&mcp, "echo nope >&2; exit 3").await;
    assert_eq!(ended(&mcp, &failed).await, "failed");

    // running, then killed with its whole tree.
    let cmd = format!(
        "{} ready-sleep 600 & {} ready-sleep 600",
        testbin(),
        testbin()
    );
    let running = execute(&mcp, &cmd).await;
    assert_eq!(status(&mcp, &running).await, "running");
    let pids = eventually("two ready lines", || async {
        let b = body(&mcp.call("output", json!({"job_id": running})).await);
        let pids = Pid::all_from_ready_lines(b["stdout"].as_str().unwrap_or_default());
        (pids.len() == 2).then_some(pids)
    })
    .await;
    assert_eq!(
        body(&mcp.call("kill", json!({"job_id": running})).await),
        json!({"status": "killed"})
    );
    assert!(
        pids.iter().all(|p| !p.alive()),
        "kill left processes behind"
    );
    assert_eq!(status(&mcp, &running).await, "killed");
    assert_eq!(
        body(&mcp.call("kill", json!({"job_id": running})).await),
        json!({"status": "already_terminated"})
    );

    // Unknown ids: kill says not_found, the other tools fail naming the job.
    let unknown = "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b";
    for id in [unknown, "not-a-job"] {
        assert_eq!(
            body(&mcp.call("kill", json!({"job_id": id})).await),
            json!({"status": "not_found"})
        );
        for tool in ["status", "output", "tail"] {
            let r = mcp.call(tool, json!({"job_id": id})).await;
            assert!(is_error(&r), "{tool}");
            assert_eq!(text_of(&r), format!("Job {id} not found"), "{tool}");
        }
        let r = mcp
            .call("interact", json!({"job_id": id, "input": "x"}))
            .await;
        assert_eq!(text_of(&r), format!("Job {id} not found"));
    }
    // A process of the default tools is not a job.
    let proc_id = {
        let default = Mcp::start(&d, &[]).await;
        let b = body(
            &default
                .call("exec", json!({"command": "true", "side_effects": ["NONE"]}))
                .await,
        );
        default.close().await;
        b["process_id"].as_str().expect("id").to_string()
    };
    let r = mcp.call("status", json!({"job_id": proc_id})).await;
    assert_eq!(text_of(&r), format!("Job {proc_id} not found"));

    // Bad arguments are tool errors, not protocol errors.
    let r = mcp.call("execute", json!({"command": "  "})).await;
    assert_eq!(text_of(&r), "Invalid command: Command cannot be empty");
    let r = mcp.call("status", json!({})).await;
    assert!(
        is_error(&r) && text_of(&r).contains("job_id"),
        "{}",
        text_of(&r)
    );
    mcp.close().await;

    // failed: a timeout (MCP_BG_JOB_TIMEOUT) kills the job.
    let timed = jobs(&d, &[("MCP_BG_JOB_TIMEOUT", "1")]).await;
    let id = execute(&timed, "sleep 600").await;
    assert_eq!(status(&timed, &id).await, "running");
    assert_eq!(ended(&timed, &id).await, "failed");
    timed.close().await;
}

#[tokio::test]
async fn tail_returns_each_streams_last_lines_and_validates_lines() {
    let d = TestDaemon::start().await;
    let mcp = jobs(&d, &[]).await;
    let id = execute(
        &mcp,
        "i=1; while [ $i -le 120 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done",
    )
    .await;
    assert_eq!(ended(&mcp, &id).await, "completed");
    let lines = |from: u32, to: u32, prefix: &str| -> String {
        (from..=to).map(|i| format!("{prefix}{i}\n")).collect()
    };
    let b = body(&mcp.call("tail", json!({"job_id": id})).await);
    assert_eq!(b["stdout"], lines(71, 120, "out"));
    assert_eq!(b["stderr"], lines(71, 120, "err"));
    let b = body(&mcp.call("tail", json!({"job_id": id, "lines": 3})).await);
    assert_eq!(
        b,
        json!({"stdout": lines(118, 120, "out"), "stderr": lines(118, 120, "err")})
    );
    let b = body(&mcp.call("tail", json!({"job_id": id, "lines": 1})).await);
    assert_eq!(b["stdout"], "out120\n");
    let b = body(&mcp.call("tail", json!({"job_id": id, "lines": 1000})).await);
    assert_eq!(b["stdout"], lines(1, 120, "out"));
    for bad in [json!(0), json!(1001), json!(-1), json!("many"), json!(2.5)] {
        let r = mcp.call("tail", json!({"job_id": id, "lines": bad})).await;
        assert!(is_error(&r), "lines={bad}");
        let text = text_of(&r);
        assert!(
            text.starts_with("Invalid parameter:") && text.contains("lines"),
            "lines={bad}: {text}"
        );
    }
    mcp.close().await;
}

#[tokio::test]
async fn interact_returns_the_output_that_follows_the_input() {
    let d = TestDaemon::start().await;
    let mcp = jobs(&d, &[]).await;
    let cat = execute(&mcp, "cat").await;
    let b = body(
        &mcp.call("interact", json!({"job_id": cat, "input": "hello"}))
            .await,
    );
    assert_eq!(b, json!({"stdout": "hello\n", "stderr": ""}));
    // Only what follows this input, not the earlier answer.
    let b = body(
        &mcp.call("interact", json!({"job_id": cat, "input": "one\ntwo\n"}))
            .await,
    );
    assert_eq!(b["stdout"], "one\ntwo\n");
    assert_eq!(status(&mcp, &cat).await, "running");
    mcp.call("kill", json!({"job_id": cat})).await;

    let reader = execute(&mcp, "sh -c 'read x; echo got $x; echo done >&2'").await;
    let b = body(
        &mcp.call("interact", json!({"job_id": reader, "input": "world"}))
            .await,
    );
    assert_eq!(b, json!({"stdout": "got world\n", "stderr": "done\n"}));
    assert_eq!(ended(&mcp, &reader).await, "completed");
    let r = mcp
        .call("interact", json!({"job_id": reader, "input": "again"}))
        .await;
    assert!(is_error(&r));
    assert_eq!(
        text_of(&r),
        format!("Job {reader} is not running and cannot accept input")
    );

    // A job that stays silent answers with empty output once the first-output wait is over.
    let silent = execute(&mcp, "cat > /dev/null").await;
    let b = body(
        &mcp.call("interact", json!({"job_id": silent, "input": "x"}))
            .await,
    );
    assert_eq!(b, json!({"stdout": "", "stderr": ""}));
    mcp.call("kill", json!({"job_id": silent})).await;
    mcp.close().await;
}

#[tokio::test]
async fn jobs_are_listed_and_visible_to_yieldctl_and_later_sessions() {
    let d = TestDaemon::start().await;
    let mcp = jobs(&d, &[]).await;
    let (gate_path, wait_gate) = gate(d.dir.path(), "g");
    let running = execute(&mcp, &wait_gate).await;
    let done = execute(&mcp, "echo hi").await;
    assert_eq!(ended(&mcp, &done).await, "completed");
    // A process of the default tools in the same project is not a job.
    let default = Mcp::start(&d, &[]).await;
    default
        .call("exec", json!({"command": "true", "side_effects": ["NONE"]}))
        .await;
    default.close().await;

    let b = body(&mcp.call("list", json!({})).await);
    let listed = b["jobs"].as_array().expect("jobs").clone();
    assert_eq!(listed.len(), 2, "{b}");
    // Newest first, the spec's four fields and nothing else.
    assert_eq!(listed[0]["job_id"], done.as_str());
    assert_eq!(listed[1]["job_id"], running.as_str());
    assert_eq!(listed[0]["status"], "completed");
    assert_eq!(listed[1]["status"], "running");
    assert_eq!(listed[0]["command"], "echo hi");
    for job in &listed {
        let keys: Vec<&str> = job
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 4, "{job}");
        let started = job["started"].as_str().expect("started");
        assert!(
            started.len() >= 20 && started.ends_with('Z') && started.as_bytes()[10] == b'T',
            "not ISO 8601 UTC: {started}"
        );
    }

    // yieldctl shows the job under its job id.
    let out = run(d.yieldctl().args(["--json", "ps"]));
    let ps = parse_json(&out);
    let ids: Vec<&str> = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p["process_id"].as_str())
        .collect();
    assert!(ids.contains(&running.as_str()) && ids.contains(&done.as_str()));
    let out = run(d.yieldctl().args(["ps"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&running));
    let out = run(d.yieldctl().args(["read", &done]));
    assert_eq!(out.stdout, b"hi\n");

    // A new session of the jobs profile (an editor restart) still sees and controls them.
    mcp.close().await;
    let again = jobs(&d, &[]).await;
    let b = body(&again.call("list", json!({})).await);
    assert_eq!(b["jobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(status(&again, &running).await, "running");
    std::fs::remove_file(&gate_path).expect("open gate");
    assert_eq!(ended(&again, &running).await, "completed");
    again.close().await;
}

#[tokio::test]
async fn configuration_variables_shape_the_session() {
    let d = TestDaemon::start().await;
    let mcp = jobs(
        &d,
        &[
            ("MCP_BG_MAX_JOBS", "1"),
            ("MCP_BG_MAX_OUTPUT_SIZE", "1KB"),
            ("MCP_BG_ALLOWED_COMMANDS", &format!("cat, {}", testbin())),
            ("MCP_BG_CLEANUP_INTERVAL", "60"),
        ],
    )
    .await;
    // MCP_BG_MAX_OUTPUT_SIZE: the ring keeps the latest 1024 bytes.
    let flood = execute(&mcp, &format!("{} flood 5000", testbin())).await;
    assert_eq!(ended(&mcp, &flood).await, "completed");
    let b = body(&mcp.call("output", json!({"job_id": flood})).await);
    let expected: String = (5000 - 1024..5000u64)
        .map(|i| char::from(yieldshell_tests::flood_byte(i)))
        .collect();
    assert_eq!(b["stdout"], expected);
    // MCP_BG_MAX_JOBS: one running job at a time.
    let cat = execute(&mcp, "cat").await;
    let r = mcp.call("execute", json!({"command": "cat"})).await;
    assert!(is_error(&r));
    assert!(
        text_of(&r).starts_with("Job limit reached:"),
        "{}",
        text_of(&r)
    );
    mcp.call("kill", json!({"job_id": cat})).await;
    // MCP_BG_ALLOWED_COMMANDS: programs outside the list are refused, wherever they hide.
    for command in ["rm -rf x", "cat $(rm x)", "cat | sh"] {
        let r = mcp.call("execute", json!({"command": command})).await;
        assert!(is_error(&r), "{command}");
        assert!(
            text_of(&r).starts_with("Invalid command:"),
            "{command}: {}",
            text_of(&r)
        );
    }
    mcp.close().await;

    // Bad values fail at startup, naming the variable; stdout stays clean.
    for (var, value) in [
        ("MCP_BG_MAX_OUTPUT_SIZE", "ten megs"),
        ("MCP_BG_MAX_JOBS", "0"),
    ] {
        let out = shim_command(&d, &[(var, value)])
            .arg("--profile")
            .arg("jobs")
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{var}");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains(var));
    }
    let out = std::process::Command::new(bin("mcp-yieldshell"))
        .args(["--profile", "nope"])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("jobs"));
}
