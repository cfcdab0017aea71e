//! `mcp-yieldshell --profile shell` end to end, through a real MCP client over stdio:
//! mcp-shell-server's `shell_execute`, its response and refusal shapes, and attempts to get a
//! program past `ALLOW_COMMANDS`.

use serde_json::{Value, json};

use crate::helper::{Pid, TestDaemon, testbin};
use crate::mcp::{Mcp, body, is_error};

async fn shell(d: &TestDaemon, vars: &[(&str, &str)]) -> Mcp {
    Mcp::start_profile(d, "shell", vars).await
}

/// Runs `shell_execute`; returns (isError, body).
async fn exec(mcp: &Mcp, args: Value) -> (bool, Value) {
    let r = mcp.call("shell_execute", args).await;
    (is_error(&r), body(&r))
}

/// Asserts a refusal in the original's shape, with `message` as the error.
#[track_caller]
fn assert_refused(result: &(bool, Value), message: &str) {
    let (error, b) = result;
    assert!(*error, "not an error: {b}");
    assert_eq!(
        b,
        &json!({"error": message, "status": 1, "stdout": "", "stderr": message, "execution_time": 0.0})
    );
}

#[tokio::test]
async fn one_tool_named_and_shaped_like_the_original() {
    let d = TestDaemon::start().await;
    let mcp = shell(&d, &[("ALLOW_COMMANDS", "ls, cat ,echo")]).await;
    let tools = mcp.tools().await;
    assert_eq!(tools.len(), 1);
    let t = &tools[0];
    assert_eq!(t.name, "shell_execute");
    assert_eq!(t.input_schema["required"], json!(["command"]));
    assert_eq!(t.input_schema["properties"]["command"]["type"], "array");
    for p in ["stdin", "directory", "timeout"] {
        assert!(t.input_schema["properties"].get(p).is_some(), "{p}");
    }
    assert_eq!(t.input_schema["properties"]["timeout"]["default"], 30);
    let description = t.description.as_deref().unwrap_or_default();
    assert!(
        description.contains("Allowed commands: ls, cat, echo"),
        "{description}"
    );
    assert!(t.output_schema.is_some());
    mcp.close().await;
}

#[tokio::test]
async fn runs_commands_with_status_stdin_directory_and_operators() {
    let d = TestDaemon::start().await;
    let sub = d.dir.path().join("sub dir");
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::write(sub.join("file.txt"), "content\n").expect("write");
    let mcp = shell(&d, &[("ALLOWED_COMMANDS", "echo, cat, pwd, ls, sh, wc")]).await;

    let (error, b) = exec(&mcp, json!({"command": ["echo", "hello"]})).await;
    assert!(!error);
    assert_eq!(b["stdout"], "hello\n");
    assert_eq!(b["stderr"], "");
    assert_eq!(b["status"], 0);
    assert!(
        b["execution_time"].as_f64().is_some_and(|t| t >= 0.0),
        "{b}"
    );
    assert!(b.get("error").is_none(), "error only when failed: {b}");

    // A non-zero exit is a result, not a failure.
    let (error, b) = exec(
        &mcp,
        json!({"command": ["sh", "-c", "echo bad >&2; exit 3"]}),
    )
    .await;
    assert!(!error);
    assert_eq!(
        (b["status"].clone(), b["stderr"].clone()),
        (json!(3), json!("bad\n"))
    );
    assert!(b.get("error").is_none());

    let (_, b) = exec(&mcp, json!({"command": ["cat"], "stdin": "Hello, World!"})).await;
    assert_eq!(b["stdout"], "Hello, World!");
    // Without stdin a reader gets EOF at once instead of waiting for its timeout.
    let (_, b) = exec(&mcp, json!({"command": ["wc", "-c"]})).await;
    assert_eq!(b["stdout"].as_str().map(str::trim), Some("0"));

    let (_, b) = exec(
        &mcp,
        json!({"command": ["pwd"], "directory": sub.to_str().expect("utf8")}),
    )
    .await;
    let canonical = std::fs::canonicalize(&sub).expect("canonical");
    assert_eq!(b["stdout"], format!("{}\n", canonical.display()));
    let (_, b) = exec(
        &mcp,
        json!({"command": ["cat", "file.txt"], "directory": "sub dir"}),
    )
    .await;
    assert_eq!(b["stdout"], "content\n");
    let (error, b) = exec(
        &mcp,
        json!({"command": ["ls"], "directory": "/no/such/dir"}),
    )
    .await;
    assert!(error && b["status"] == 1, "{b}");

    // Operators as their own elements join allowed commands.
    let (_, b) = exec(
        &mcp,
        json!({"command": ["echo", "a b", "|", "wc", "-w", "&&", "echo", "then", ";", "echo", "last"]}),
    )
    .await;
    let out = b["stdout"].as_str().expect("stdout");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["2", "then", "last"]
    );
    let (_, b) = exec(
        &mcp,
        json!({"command": ["sh", "-c", "exit 1", "||", "echo", "fallback"]}),
    )
    .await;
    assert_eq!(b["stdout"], "fallback\n");
    mcp.close().await;
}

#[tokio::test]
async fn a_timeout_kills_the_whole_tree() {
    let d = TestDaemon::start().await;
    let mcp = shell(&d, &[("ALLOW_COMMANDS", "sh")]).await;
    let script = format!(
        "{} ready-sleep 600 & {} ready-sleep 600",
        testbin(),
        testbin()
    );
    let started = std::time::Instant::now();
    let (error, b) = exec(&mcp, json!({"command": ["sh", "-c", script], "timeout": 1})).await;
    assert!(error, "{b}");
    assert_eq!(b["error"], "Command timed out after 1 seconds");
    assert_eq!(b["status"], -1);
    assert!(
        b["stderr"]
            .as_str()
            .expect("stderr")
            .ends_with("Command timed out after 1 seconds")
    );
    let pids = Pid::all_from_ready_lines(b["stdout"].as_str().expect("stdout"));
    assert_eq!(pids.len(), 2, "{b}");
    assert!(
        pids.iter().all(|p| !p.alive()),
        "the timeout left processes behind"
    );
    assert!(started.elapsed() < crate::helper::TIMEOUT);
    mcp.close().await;
}

#[tokio::test]
async fn every_refusal_and_bypass_attempt() {
    let d = TestDaemon::start().await;
    let victim = d.dir.path().join("victim");
    std::fs::write(&victim, "still here").expect("victim");
    let mcp = shell(&d, &[("ALLOW_COMMANDS", "echo,ls,cat")]).await;

    // Shell syntax inside an argument is text: printed, never run.
    for text in [
        "a; rm -rf victim",
        "a && rm victim",
        "a || rm victim",
        "a | rm victim",
        "$(rm victim)",
        "`rm victim`",
        "'; rm victim; '",
        "a\nrm victim",
        "> victim",
    ] {
        let (error, b) = exec(&mcp, json!({"command": ["echo", text]})).await;
        assert!(!error, "{text}: {b}");
        assert_eq!(b["stdout"], format!("{text}\n"), "{text}");
        assert!(victim.exists(), "{text} removed the victim");
    }
    assert_eq!(
        std::fs::read_to_string(&victim).expect("read"),
        "still here"
    );

    // Programs outside the list, wherever they stand.
    for (argv, program) in [
        (json!(["rm", "-rf", "victim"]), "rm"),
        (json!(["ls", "&&", "rm", "victim"]), "rm"),
        (json!(["ls", ";", "rm", "victim"]), "rm"),
        (json!(["ls", "||", "rm", "victim"]), "rm"),
        (json!(["ls", "|", "xargs", "rm"]), "xargs"),
        (json!(["/bin/rm", "victim"]), "/bin/rm"),
        (json!(["env", "rm", "victim"]), "env"),
        (json!(["$(rm victim)"]), "$(rm victim)"),
        (json!(["`rm victim`"]), "`rm victim`"),
        (json!(["ls;rm", "victim"]), "ls;rm"),
    ] {
        let result = exec(&mcp, json!({"command": argv})).await;
        assert_refused(&result, &format!("Command not allowed: {program}"));
    }
    assert!(victim.exists());

    // Malformed requests.
    for (args, message) in [
        (json!({"command": []}), "No command provided"),
        (json!({"command": "ls -l"}), "'command' must be an array"),
        (
            json!({"command": ["ls", "&&"]}),
            "Empty command after shell operator: &&",
        ),
        (
            json!({"command": ["|", "ls"]}),
            "Empty command before shell operator: |",
        ),
        (
            json!({"command": ["ls"], "timeout": 0}),
            "'timeout' must be greater than 0",
        ),
    ] {
        let result = exec(&mcp, args.clone()).await;
        assert_refused(&result, message);
    }
    mcp.close().await;

    // Only `ls` allowed: absolute paths are not their basename, either way round.
    let only_ls = shell(&d, &[("ALLOW_COMMANDS", "ls")]).await;
    for program in ["/bin/rm", "/bin/ls", "rm"] {
        let result = exec(&only_ls, json!({"command": [program, "victim"]})).await;
        assert_refused(&result, &format!("Command not allowed: {program}"));
    }
    let (error, b) = exec(&only_ls, json!({"command": ["ls", "victim"]})).await;
    assert!(!error && b["stdout"] == "victim\n", "{b}");
    only_ls.close().await;

    // No ALLOW_COMMANDS at all: everything is refused.
    let none = shell(&d, &[]).await;
    for argv in [json!(["ls"]), json!(["echo", "hi"])] {
        let result = exec(&none, json!({"command": argv})).await;
        assert_refused(
            &result,
            "No commands are allowed. Please set ALLOW_COMMANDS environment variable.",
        );
    }
    none.close().await;
    assert!(victim.exists());
}
