//! `mcp-yieldshell --profile mcp-shell-server` end to end, through a real MCP client over
//! stdio: the published `mcp-shell-server` 1.1.14's plain-text answers and `Error executing
//! command: …` errors, its operators, redirections and pipelines, its minimal child environment
//! and safe PATH, and its output limit.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::helper::TestDaemon;
use crate::mcp::{Mcp, is_error};

async fn published(d: &TestDaemon, vars: &[(&str, &str)]) -> Mcp {
    Mcp::start_profile(d, "mcp-shell-server", vars).await
}

/// Every text block of a result, and whether it is an error.
fn texts(r: &CallToolResult) -> (bool, Vec<String>) {
    let t = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    (is_error(r), t)
}

async fn exec(mcp: &Mcp, args: Value) -> (bool, Vec<String>) {
    texts(&mcp.call("shell_execute", args).await)
}

/// Asserts an error result with exactly this text.
#[track_caller]
fn assert_error(got: &(bool, Vec<String>), message: &str) {
    assert_eq!(got, &(true, vec![message.to_string()]));
}

#[tokio::test]
async fn answers_are_plain_stripped_text_and_failures_are_errors() {
    let d = TestDaemon::start().await;
    let mcp = published(&d, &[("ALLOW_COMMANDS", "echo,ls,printf,cat,sh")]).await;
    let tools = mcp.tools().await;
    assert_eq!(tools.len(), 1);
    assert!(
        tools[0].output_schema.is_none(),
        "text answers have no schema"
    );
    assert!(
        tools[0]
            .description
            .as_deref()
            .unwrap_or_default()
            .contains("Allowed commands: echo, ls, printf, cat, sh\nAllowed patterns: \n"),
        "{:?}",
        tools[0].description
    );

    assert_eq!(
        exec(&mcp, json!({"command": ["echo", "hello world"]})).await,
        (false, vec!["hello world".to_string()])
    );
    assert_eq!(
        exec(
            &mcp,
            json!({"command": ["cat"], "stdin": "  from stdin\n\n"})
        )
        .await,
        (false, vec!["from stdin".to_string()])
    );
    // No output, no text block; empty elements are dropped first.
    assert_eq!(
        exec(&mcp, json!({"command": ["", "printf", "", "%s", ""]})).await,
        (false, vec![])
    );
    assert_error(
        &exec(&mcp, json!({"command": ["rm", "x"]})).await,
        "Error executing command: Command not allowed: rm",
    );
    assert_error(
        &exec(&mcp, json!({"command": ["sh", "-c", "id"]})).await,
        "Error executing command: Command rejected by default security policy: sh",
    );
    assert_error(
        &exec(&mcp, json!({"command": ["echo", "a", ";", "ls"]})).await,
        "Error executing command: Unexpected shell operator: ;",
    );
    assert_error(
        &exec(&mcp, json!({"command": ["ls", "/nonexistent-here"]})).await,
        "Error executing command: Command failed with exit status 2\nstderr:\nls: cannot access '/nonexistent-here': No such file or directory",
    );
    assert_error(
        &exec(&mcp, json!({"command": ["ls"], "directory": ""})).await,
        "Error executing command: Directory cannot be empty",
    );
    let missing = d.dir.path().join("missing");
    assert_error(
        &exec(&mcp, json!({"command": ["ls"], "directory": missing})).await,
        &format!(
            "Error executing command: Directory does not exist: {}",
            missing.display()
        ),
    );
    assert_error(
        &exec(&mcp, json!({"command": ["ls"], "timeout": 0})).await,
        "Input validation error: 0 is less than the minimum of 1",
    );
    let r = mcp.call("no_such_tool", json!({})).await;
    assert_error(
        &texts(&r),
        "Error executing command: Unknown tool: no_such_tool",
    );
    mcp.close().await;
}

#[tokio::test]
async fn a_missing_program_fails_to_start_and_commands_get_a_minimal_environment() {
    let d = TestDaemon::start().await;
    let mcp = published(
        &d,
        &[
            ("ALLOW_COMMANDS", "printenv,nosuchprog"),
            ("MCP_SHELL_CHILD_ENV_ALLOWLIST", "SHOWN_TO_COMMANDS"),
            ("SHOWN_TO_COMMANDS", "yes"),
            ("HIDDEN_FROM_COMMANDS", "secret-value"),
        ],
    )
    .await;
    assert_error(
        &exec(&mcp, json!({"command": ["nosuchprog"]})).await,
        "Error executing command: Failed to create process: [Errno 2] No such file or directory: 'nosuchprog'",
    );
    let (error, out) = exec(&mcp, json!({"command": ["printenv"]})).await;
    assert!(!error);
    let vars: Vec<&str> = out[0].lines().collect();
    assert!(
        vars.contains(&"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"),
        "{vars:?}"
    );
    assert!(vars.contains(&"SHOWN_TO_COMMANDS=yes"), "{vars:?}");
    assert!(
        !vars
            .iter()
            .any(|v| v.contains("HIDDEN_FROM_COMMANDS") || v.starts_with("HOME=")),
        "{vars:?}"
    );
    mcp.close().await;
}

#[tokio::test]
async fn redirections_stay_in_the_directory_and_pipelines_run_stage_by_stage() {
    let d = TestDaemon::start().await;
    let work = d.dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    std::fs::write(work.join("input.txt"), "b\na\n").expect("write");
    let mcp = published(&d, &[("ALLOW_COMMANDS", "echo,sort,cat,tr,ls")]).await;
    let dir = work.to_str().expect("utf-8");

    let r = exec(
        &mcp,
        json!({"command": ["sort", "<", "input.txt", ">", "sorted.txt"], "directory": dir}),
    )
    .await;
    assert_eq!(r, (false, vec![]));
    assert_eq!(
        std::fs::read_to_string(work.join("sorted.txt")).expect("read"),
        "a\nb\n"
    );
    assert_error(
        &exec(
            &mcp,
            json!({"command": ["cat", "<", "../x"], "directory": dir}),
        )
        .await,
        "Error executing command: Redirection target cannot contain parent traversal",
    );
    assert_error(
        &exec(
            &mcp,
            json!({"command": ["echo", "x", ">", "/tmp/x"], "directory": dir}),
        )
        .await,
        "Error executing command: Redirection target must be relative to the working directory",
    );
    // A pipeline's output is not stripped, as in the package.
    assert_eq!(
        exec(
            &mcp,
            json!({"command": ["echo", "hello", "|", "tr", "a-z", "A-Z"], "directory": dir})
        )
        .await,
        (false, vec!["HELLO\n".to_string()])
    );
    // A failing stage fails the pipeline with its stderr.
    assert_error(
        &exec(
            &mcp,
            json!({"command": ["ls", "nothing-here", "|", "cat"], "directory": dir}),
        )
        .await,
        "Error executing command: ls: cannot access 'nothing-here': No such file or directory",
    );
    mcp.close().await;
}

#[tokio::test]
async fn the_output_limit_and_the_timeout_end_the_command() {
    let d = TestDaemon::start().await;
    let mcp = published(
        &d,
        &[
            ("ALLOW_COMMANDS", "yes,sleep,seq"),
            ("MCP_SHELL_OUTPUT_LIMIT_BYTES", "100"),
        ],
    )
    .await;
    let started = std::time::Instant::now();
    assert_error(
        &exec(&mcp, json!({"command": ["yes"], "timeout": 20})).await,
        "Error executing command: stdout exceeded output limit of 100 bytes",
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "an endless output is cut at the limit, not at the timeout"
    );
    assert_eq!(
        exec(&mcp, json!({"command": ["seq", "1", "3"]})).await,
        (false, vec!["1\n2\n3".to_string()])
    );
    assert_error(
        &exec(&mcp, json!({"command": ["sleep", "30"], "timeout": 1})).await,
        "Error executing command: Command timed out after 1 seconds",
    );
    mcp.close().await;
}

#[tokio::test]
async fn a_signal_is_minus_its_number_in_both_shell_profiles() {
    let d = TestDaemon::start().await;
    // The specification's profile: the JSON status is -9, and no shell reports "Killed".
    let mcp = Mcp::start_profile(&d, "shell", &[("ALLOW_COMMANDS", "sh")]).await;
    let r = mcp
        .call(
            "shell_execute",
            json!({"command": ["sh", "-c", "kill -9 $$"]}),
        )
        .await;
    let b = r.structured_content.clone().expect("structured");
    assert_eq!(b["status"], -9, "{b}");
    assert_eq!(b["stderr"], "", "{b}");
    mcp.close().await;
    // The package's profile refuses sh, so kill itself is what gets killed here.
    let mcp = published(&d, &[("ALLOW_COMMANDS", "kill")]).await;
    assert_error(
        &exec(&mcp, json!({"command": ["kill", "-9", "0"]})).await,
        "Error executing command: Command terminated by signal 9",
    );
    mcp.close().await;
}
