//! `mcp-yieldshell --profile mcp-background-job` end to end, through a real MCP client over
//! stdio: the published `mcp-background-job` 0.1.2's tool names, its shell-less commands, its
//! error texts and its output as lines; and the signal fixes every profile shares (a program
//! killed by a signal reports the signal, a job killed from outside is `killed`).

use serde_json::{Value, json};

use crate::helper::{TestDaemon, eventually};
use crate::mcp::{Mcp, body, is_error, text_of};

async fn published(d: &TestDaemon, vars: &[(&str, &str)]) -> Mcp {
    Mcp::start_profile(d, "mcp-background-job", vars).await
}

/// Starts `command`; returns the job id.
async fn execute(mcp: &Mcp, command: &str) -> String {
    let r = mcp
        .call("execute_command", json!({"command": command}))
        .await;
    assert!(!is_error(&r), "execute {command:?}: {}", text_of(&r));
    body(&r)["job_id"].as_str().expect("job_id").to_string()
}

/// The text of a refused `execute_command`.
async fn refusal(mcp: &Mcp, command: &str) -> String {
    let r = mcp
        .call("execute_command", json!({"command": command}))
        .await;
    assert!(is_error(&r), "{command:?} was not refused: {}", text_of(&r));
    text_of(&r)
}

/// Polls `status_tool` until the job is no longer running; returns its status.
async fn ended(mcp: &Mcp, status_tool: &str, id: &str) -> String {
    eventually("the job to end", || async {
        let b = body(&mcp.call(status_tool, json!({"job_id": id})).await);
        let s = b["status"].as_str().expect("status").to_string();
        (s != "running").then_some(s)
    })
    .await
}

#[tokio::test]
async fn tools_carry_the_published_names_and_parameters() {
    let d = TestDaemon::start().await;
    let mcp = published(&d, &[]).await;
    let tools = mcp.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "list_jobs",
            "get_job_status",
            "get_job_output",
            "tail_job_output",
            "execute_command",
            "interact_with_job",
            "kill_job"
        ]
    );
    let schema = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .map(|t| Value::Object((*t.input_schema).clone()))
            .expect("tool")
    };
    assert_eq!(schema("execute_command")["required"], json!(["command"]));
    assert_eq!(
        schema("interact_with_job")["required"],
        json!(["job_id", "input"])
    );
    assert_eq!(
        schema("tail_job_output")["properties"]["lines"]["maximum"],
        1000
    );
    assert_eq!(mcp.instructions(), "");
    mcp.close().await;
}

#[tokio::test]
async fn commands_run_without_a_shell_and_output_comes_as_lines() {
    let d = TestDaemon::start().await;
    let mcp = published(&d, &[]).await;

    // shlex words, one program: the | and $HOME are arguments of echo.
    let id = execute(&mcp, "echo a | tr a b $HOME").await;
    assert_eq!(ended(&mcp, "get_job_status", &id).await, "completed");
    let out = body(&mcp.call("get_job_output", json!({"job_id": id})).await);
    assert_eq!(out, json!({"stdout": "a | tr a b $HOME", "stderr": ""}));

    // echo is /bin/echo, as with Popen: backslashes stay.
    let id = execute(&mcp, "echo 'a\\nb'").await;
    ended(&mcp, "get_job_status", &id).await;
    let out = body(&mcp.call("get_job_output", json!({"job_id": id})).await);
    assert_eq!(out["stdout"], "a\\nb");

    // Lines joined by \n, without the last newline; tail takes each stream's last lines.
    let id = execute(&mcp, "seq 1 5").await;
    ended(&mcp, "get_job_status", &id).await;
    let out = body(&mcp.call("get_job_output", json!({"job_id": id})).await);
    assert_eq!(out["stdout"], "1\n2\n3\n4\n5");
    let tail = body(
        &mcp.call("tail_job_output", json!({"job_id": id, "lines": 2}))
            .await,
    );
    assert_eq!(tail, json!({"stdout": "4\n5", "stderr": ""}));

    // list shows the command as given and the start time as pydantic writes it.
    let list = body(&mcp.call("list_jobs", json!({})).await);
    let job = list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_id"] == id.as_str())
        .expect("listed")
        .clone();
    assert_eq!(job["command"], "seq 1 5");
    assert_eq!(job["status"], "completed");
    let started = job["started"].as_str().expect("started");
    assert!(
        started.ends_with('Z')
            && (started.len() == "2026-12-01T14:21:51.310000Z".len()
                || started.len() == "2026-12-01T14:21:51Z".len()),
        "{started}"
    );
    mcp.close().await;
}

#[tokio::test]
async fn refusals_use_the_published_words() {
    let d = TestDaemon::start().await;
    let mcp = published(&d, &[("MCP_BG_MAX_JOBS", "1")]).await;
    assert_eq!(
        refusal(&mcp, "nosuchprog --flag").await,
        "Failed to execute command: [Errno 2] No such file or directory: 'nosuchprog'"
    );
    assert_eq!(
        refusal(&mcp, "echo 'abc").await,
        "Invalid command: No closing quotation"
    );
    assert_eq!(
        refusal(&mcp, "rm -rf /tmp/x/").await,
        "Invalid command: Command contains dangerous pattern and is not allowed: rm -rf /tmp/x/"
    );
    assert_eq!(
        refusal(&mcp, "  ").await,
        "Invalid command: Command cannot be empty"
    );
    let id = execute(&mcp, "sleep 30").await;
    assert_eq!(
        refusal(&mcp, "sleep 30").await,
        "Job limit reached: Maximum concurrent jobs limit (1) reached"
    );
    let r = mcp.call("kill_job", json!({"job_id": id})).await;
    assert_eq!(body(&r), json!({"status": "killed"}));
    let r = mcp.call("get_job_status", json!({"job_id": "nope"})).await;
    assert!(is_error(&r));
    assert_eq!(text_of(&r), "Job nope not found");
    mcp.close().await;
}

#[tokio::test]
async fn refusals_name_the_variable_the_user_set() {
    let d = TestDaemon::start().await;
    for (profile, tool) in [
        ("mcp-background-job", "execute_command"),
        ("jobs", "execute"),
    ] {
        let mcp = Mcp::start_profile(&d, profile, &[("MCP_BG_ALLOWED_COMMANDS", "echo")]).await;
        let r = mcp.call(tool, json!({"command": "rm x"})).await;
        assert!(is_error(&r), "{profile}");
        let text = text_of(&r);
        assert!(
            text.starts_with("Invalid command: ")
                && text.contains("MCP_BG_ALLOWED_COMMANDS")
                && !text.contains("YIELDSHELL_"),
            "{profile}: {text}"
        );
        mcp.close().await;
    }
}

#[tokio::test]
async fn a_job_killed_from_outside_is_killed_in_both_job_profiles() {
    let d = TestDaemon::start().await;
    for (profile, execute_tool, status_tool) in [
        ("mcp-background-job", "execute_command", "get_job_status"),
        ("jobs", "execute", "status"),
    ] {
        let mcp = Mcp::start_profile(&d, profile, &[]).await;
        for signal in ["KILL", "TERM"] {
            let command = format!("sh -c 'kill -{signal} $$'");
            let r = mcp.call(execute_tool, json!({"command": command})).await;
            let id = body(&r)["job_id"].as_str().expect("job_id").to_string();
            assert_eq!(
                ended(&mcp, status_tool, &id).await,
                "killed",
                "{profile}: {command}"
            );
        }
        mcp.close().await;
    }
}

#[tokio::test]
async fn a_program_killed_by_a_signal_reports_the_signal_not_137() {
    let d = TestDaemon::start().await;
    let c = d.session();
    // One plain command: the daemon execs it, so the signal ends the process it watches.
    let id = c.spawn_bg("sh -c 'kill -9 $$'").await;
    let p = c.wait_exit(&id).await.process.expect("process");
    assert_eq!(p.signal.as_deref(), Some("SIGKILL"), "{p:?}");
    assert_eq!(p.exit_code, None);
    // A compound line keeps its shell, whose own exit status is what ends it.
    let id = c.spawn_bg("true; sh -c 'kill -9 $$'").await;
    let p = c.wait_exit(&id).await.process.expect("process");
    assert_eq!(p.exit_code, Some(137), "{p:?}");
}
