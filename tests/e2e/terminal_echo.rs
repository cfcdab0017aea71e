//! Issue 25 item 4: on a terminal, `write` with `until` answers with what the program printed
//! after the input, not with the terminal's echo of the input. `echo DONE` typed into a shell
//! used to "match" `DONE` at once, from its own echo, before the command ran. A program reading
//! with echo off (a password) echoes nothing, and its answer is matched as before.
#![cfg(target_os = "linux")]

use serde_json::{Value, json};

use crate::helper::{TestDaemon, json as json_of, run};
use crate::mcp::{Mcp, body};

/// Starts `command` on a terminal through MCP and waits for `prompt` (a partial line).
async fn tty_at_prompt(mcp: &Mcp, command: &str, prompt: &str) -> String {
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": command, "side_effects": ["NONE"], "tty": true,
                   "env": {"PS1": "prompt> "}, "until": prompt, "yield_ms": 30000}),
        )
        .await,
    );
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert!(b["matched_line"].is_string(), "no prompt: {b}");
    b["process_id"].as_str().expect("id").to_string()
}

async fn write(mcp: &Mcp, id: &str, args: Value) -> Value {
    let mut call = json!({"process_id": id, "timeout_ms": 30000});
    for (k, v) in args.as_object().expect("object") {
        call[k] = v.clone();
    }
    body(&mcp.call("write", call).await)
}

#[tokio::test]
async fn write_until_on_a_terminal_matches_the_output_not_the_echo_of_the_input() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let id = tty_at_prompt(&mcp, "exec sh -i", "^prompt> $").await;
    // The shell's terminal echoes `echo DONE` at once; the answer is the line the command printed.
    let w = write(
        &mcp,
        &id,
        json!({"input": "echo DONE", "newline": true, "until": "DONE"}),
    )
    .await;
    assert_eq!(w["wait_result"], "matched", "{w}");
    assert_eq!(w["matched_line"], "DONE", "{w}");
    // Two lines typed ahead: both echoes are passed over, whatever order the output comes in.
    let w = write(
        &mcp,
        &id,
        json!({"input": "echo one\necho DONE-2", "newline": true, "until": "DONE-2"}),
    )
    .await;
    assert_eq!(w["wait_result"], "matched", "{w}");
    let line = w["matched_line"].as_str().expect("matched_line");
    assert!(line.ends_with("DONE-2") && !line.contains("echo"), "{w}");
    // With echo off (a password), nothing is echoed: the first line ending so is the answer.
    let w = write(
        &mcp,
        &id,
        json!({"input": "stty -echo; echo ready; read x; stty echo; echo \"got $x\"",
               "newline": true, "until": "^ready$"}),
    )
    .await;
    assert_eq!(w["wait_result"], "matched", "{w}");
    let w = write(
        &mcp,
        &id,
        json!({"input": "SECRET", "newline": true, "until": "SECRET"}),
    )
    .await;
    assert_eq!(w["wait_result"], "matched", "{w}");
    assert_eq!(w["matched_line"], "got SECRET", "{w}");
    // yieldctl's write --until is the same call.
    let out = run(d.yieldctl().args([
        "--json",
        "write",
        &id,
        "echo DONE-3",
        "--newline",
        "--until",
        "DONE-3",
    ]));
    let v = json_of(&out);
    assert_eq!(v["matched_line"], "DONE-3", "{v}");
    mcp.close().await;
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn write_until_in_a_python_repl_on_a_terminal_waits_for_the_answer() {
    crate::helper::require_tool("python3", "python3");
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let id = tty_at_prompt(&mcp, "exec python3 -q", "^>>> $").await;
    // The case: `print('DONE')` matched by `DONE` returned the REPL's echo.
    let w = write(
        &mcp,
        &id,
        json!({"input": "print('DONE')", "keys": ["Enter"], "until": "DONE"}),
    )
    .await;
    assert_eq!(w["wait_result"], "matched", "{w}");
    assert_eq!(w["matched_line"], "DONE", "{w}");
    mcp.close().await;
}
