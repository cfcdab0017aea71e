//! Redaction of what a terminal renders (issue 29, item 8; README, "Security model"). The holder
//! redacts the raw bytes, but a secret printed in pieces — a colour change mid-token, the tail
//! drawn first and the head over it after a `\r`, a cursor move between the pieces — is whole
//! again once a terminal renders it: in the escape-free text of answers, on the screen, to a
//! `grep` or an `until`. Every rendering is redacted again, through the real shim, `yieldctl`
//! and a daemon that re-adopts the process.
#![cfg(target_os = "linux")]

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{Client, TestDaemon, eventually, exec_req, json, run};
use crate::mcp::{Mcp, body};

/// The secret: its variable's name matches the default `YIELDSHELL_REDACT_ENV_REGEX`.
const NAME: &str = "DEPLOY_TOKEN";
const SECRET: &str = "sk-ABCDEFGHIJKLMNOP0123";
const HEAD: &str = "sk-ABCDEFGH";
const TAIL: &str = "IJKLMNOP0123";
const MASK: &str = "[REDACTED:DEPLOY_TOKEN]";

/// Prints the secret three times, never whole in the raw bytes: a colour change between its
/// pieces (on a 40-column terminal the head ends the first row and the tail wraps onto the
/// next), the tail first and the head over the line after a `\r`, and a cursor move between
/// them. `then` runs after.
fn pieces(then: &str) -> String {
    format!(
        r"printf '%28s {HEAD}\033[31m{TAIL}\033[0m\n' one; printf 'two ...........{TAIL} end\rtwo {HEAD}\n'; printf 'three \033[11C{TAIL} end\033[1Gthree {HEAD}\n'; {then}"
    )
}

/// The screen the pieces render to, secrets masked: the first one's mask is cut where the row
/// wraps, as the secret was.
const SCREEN: &str = "                         one [REDACTED:D\nEPLOY_TOKEN]\ntwo [REDACTED:DEPLOY_TOKEN] end\nthree [REDACTED:DEPLOY_TOKEN] end";

/// Whether `text` shows the secret, whole or as its two pieces on adjacent rows of a screen.
fn shows_secret(text: &str) -> bool {
    text.contains(SECRET) || text.contains(&format!("{HEAD}\n{TAIL}"))
}

#[tokio::test]
async fn mcp_a_secret_a_terminal_puts_together_is_redacted_in_exec_read_screen_grep_and_wait() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[(NAME, SECRET)]).await;
    let ran = body(
        &mcp.call(
            "exec",
            json!({"command": pieces("true"), "side_effects": ["NONE"], "tty": true,
                   "cols": 40, "rows": 8, "yield_ms": 60_000}),
        )
        .await,
    );
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let id = ran["process_id"].as_str().expect("process_id").to_string();
    // The text answers show: the first two put the secret together (the third's cursor move
    // does not, in text without escapes).
    let stdout = ran["stdout"].as_str().expect("stdout");
    assert!(!shows_secret(stdout), "exec: {stdout:?}");
    assert_eq!(stdout.matches(MASK).count(), 2, "exec: {stdout:?}");

    let read = body(
        &mcp.call("read", json!({"process_id": id, "since_seq": 1}))
            .await,
    );
    let text = read["stdout"].as_str().expect("stdout");
    assert!(!shows_secret(text), "read: {text:?}");
    assert_eq!(text.matches(MASK).count(), 2, "read: {text:?}");

    let screen = body(
        &mcp.call("read", json!({"process_id": id, "screen": true}))
            .await,
    );
    let shown = screen["screen"].as_str().expect("screen");
    assert!(!shows_secret(shown), "screen: {shown:?}");
    assert_eq!(shown, SCREEN, "{screen}");

    // A search neither finds the secret nor prints it.
    let found = body(
        &mcp.call("read", json!({"process_id": id, "grep": "ABCDEFGHIJ"}))
            .await,
    );
    assert_eq!(found["lines"], json!([]), "{found}");
    let masked = body(
        &mcp.call("read", json!({"process_id": id, "grep": "REDACTED"}))
            .await,
    );
    assert_eq!(
        masked["lines"].as_array().map(Vec::len),
        Some(2),
        "{masked}"
    );
    assert!(!shows_secret(&masked.to_string()), "{masked}");

    // Nor does an `until`: the wait ends with the process, unmatched, and shows no secret.
    let waited = body(
        &mcp.call(
            "wait",
            json!({"process_id": id, "until": "ABCDEFGHIJ", "timeout_ms": 60_000}),
        )
        .await,
    );
    assert_ne!(waited["wait_result"], "matched", "{waited}");
    assert!(!shows_secret(&waited.to_string()), "{waited}");
    mcp.close().await;
}

#[tokio::test]
async fn yieldctl_read_screen_follow_grep_and_wait_show_no_secret_a_terminal_put_together() {
    let d = TestDaemon::start().await;
    let yieldctl = || {
        let mut c = d.yieldctl();
        c.env(NAME, SECRET);
        c
    };
    let ran = json(&run(yieldctl().args([
        "--json",
        "exec",
        "--tty",
        "--cols",
        "40",
        "--rows",
        "8",
        "--yield-ms",
        "60000",
        "--",
        &pieces("true"),
    ])));
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let id = ran["process_id"].as_str().expect("id").to_string();
    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();

    let read = run(yieldctl().args(["read", &id]));
    assert!(read.status.success(), "{read:?}");
    assert!(!shows_secret(&text(&read)), "read: {:?}", text(&read));
    assert_eq!(text(&read).matches(MASK).count(), 2, "{:?}", text(&read));

    let screen = run(yieldctl().args(["read", "--screen", &id]));
    assert!(screen.status.success(), "{screen:?}");
    assert_eq!(text(&screen).trim_end(), SCREEN);

    // The process has ended: a follow prints its whole output and returns.
    let followed = run(yieldctl().args(["read", "--follow", &id]));
    assert!(followed.status.success(), "{followed:?}");
    assert!(
        !shows_secret(&text(&followed)),
        "follow: {:?}",
        text(&followed)
    );
    assert_eq!(
        text(&followed).matches(MASK).count(),
        2,
        "{:?}",
        text(&followed)
    );

    let grep = run(yieldctl().args(["read", "--grep", "ABCDEFGHIJ", &id]));
    assert_eq!(grep.status.code(), Some(1), "no match: {grep:?}");
    assert!(!shows_secret(&text(&grep)), "{grep:?}");

    let waited = run(yieldctl().args(["wait", &id]));
    assert!(!shows_secret(&text(&waited)), "wait: {:?}", text(&waited));
}

async fn screen_text(c: &Client, id: &str) -> String {
    c.read(pb::ReadRequest {
        process_id: id.into(),
        max_output_bytes: Some(1),
        screen: true,
        ..Default::default()
    })
    .await
    .expect("read")
    .screen
    .expect("screen")
    .text
}

#[tokio::test]
async fn a_re_adopting_daemon_still_redacts_the_terminals_screen_and_text() {
    let mut d = TestDaemon::start().await;
    let c = d.session_with(&[(NAME, SECRET)]);
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            cols: Some(40),
            rows: Some(8),
            yield_ms: Some(0),
            // It waits for a line on its terminal, so it runs on across the crash.
            ..exec_req(&pieces("read line"))
        })
        .await;
    let id = r.process.expect("process").process_id;
    eventually("the pieces on the screen", || async {
        let s = screen_text(&c, &id).await;
        s.starts_with(SCREEN).then_some(())
    })
    .await;
    // The next daemon knows the secret only from the holder it re-adopts.
    d.kill9();
    d.spawn().await;
    let c = d.session();
    let s = screen_text(&c, &id).await;
    assert!(s.starts_with(SCREEN), "re-adopted screen: {s:?}");
    let text = String::from_utf8_lossy(
        &c.read_since(&id, 1, 1 << 20)
            .await
            .output
            .expect("output")
            .stdout,
    )
    .into_owned();
    assert!(!shows_secret(&text), "re-adopted text: {text:?}");
    assert_eq!(text.matches(MASK).count(), 2, "{text:?}");
    c.write(&id, b"\n", false)
        .await
        .expect("the line it waits for");
    assert_eq!(
        c.wait_exit(&id).await.process.expect("process").exit_code,
        Some(0)
    );
}

#[tokio::test]
async fn yieldctl_follow_of_a_running_terminal_shows_no_secret_its_pieces_put_together() {
    use std::io::BufRead;
    let d = TestDaemon::start().await;
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    let yieldctl = || {
        let mut c = d.yieldctl();
        c.env(NAME, SECRET);
        c
    };
    let started = json(&run(yieldctl().args([
        "--json",
        "exec",
        "--tty",
        "--yield-ms",
        "0",
        "--",
        &format!(
            "echo ready; while [ -e {} ]; do sleep 0.01; done; {}",
            gate.display(),
            pieces("true")
        ),
    ])));
    let id = started["process_id"].as_str().expect("id").to_string();
    let mut follow = yieldctl()
        .args(["read", "--follow", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("yieldctl read --follow");
    let mut lines = std::io::BufReader::new(follow.stdout.take().expect("stdout")).lines();
    // Once it printed `ready`, the follow is on: the pieces come through the stream.
    let first = lines.next().expect("a line").expect("read");
    assert_eq!(first.trim_end(), "ready");
    std::fs::remove_file(&gate).expect("open the gate");
    let rest: Vec<String> = lines.map(|l| l.expect("read")).collect();
    assert!(follow.wait().expect("yieldctl exit").success());
    // A follow keeps carriage returns: the second line's head is written over its tail there.
    let shown = rest.join("\n");
    assert!(!shows_secret(&shown), "follow: {shown:?}");
    assert_eq!(shown.matches(MASK).count(), 1, "follow: {shown:?}");
}
