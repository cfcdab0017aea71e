//! `yieldctl` on terminal processes (issue 12, item 4; ARCHITECTURE.md, "Terminal processes") without a person's terminal:
//! `exec --tty` (size, escape sequences removed unless `--raw`), `write --key`/`--resize`,
//! `read --screen`, and what `ps` and `exec` say about a process waiting for a password.
#![cfg(target_os = "linux")]

use crate::helper::{TestDaemon, eventually_blocking, json, run};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Starts `command` under a terminal in the background and returns its id.
fn exec_tty_background(d: &TestDaemon, command: &str) -> String {
    let v = json(&run(d.yieldctl().args([
        "--json",
        "exec",
        "--tty",
        "--yield-ms",
        "200",
        "--",
        command,
    ])));
    assert_eq!(v["status"], "backgrounded", "{v}");
    v["process_id"].as_str().expect("id").to_string()
}

#[tokio::test]
async fn exec_tty_runs_on_a_terminal_of_the_size_asked_and_strips_escapes_unless_raw() {
    let d = TestDaemon::start().await;
    let cmd = r"tty; stty size; printf '\033[1mbold\033[0m\n'";
    let out = run(d
        .yieldctl()
        .args(["exec", "--tty", "--cols", "50", "--rows", "7", "--", cmd]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("/dev/pts/"), "{shown}");
    assert!(shown.contains("7 50"), "{shown}");
    assert!(shown.contains("bold"), "{shown}");
    assert!(
        !shown.contains('\x1b'),
        "escape sequences removed: {shown:?}"
    );

    let raw = run(d.yieldctl().args(["exec", "--tty", "--raw", "--", cmd]));
    let raw = text(&raw.stdout);
    assert!(raw.contains("\x1b[1mbold\x1b[0m"), "{raw:?}");
    // Not a terminal here (stdout is a pipe): the default size.
    assert!(raw.contains("40 120"), "{raw:?}");

    let refused = run(d.yieldctl().args(["exec", "--raw", "--", "true"]));
    assert_eq!(refused.status.code(), Some(2), "--raw needs --tty");
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn keys_reach_a_terminal_repl_and_read_screen_shows_the_answer() {
    let d = TestDaemon::start().await;
    let id = exec_tty_background(&d, "python3 -q");
    let screen = |d: &TestDaemon| {
        let out = run(d.yieldctl().args(["read", &id, "--screen"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // Typed before the prompt, the keys would be echoed ahead of it: wait for it.
    eventually_blocking("the prompt", || screen(&d).starts_with(">>>").then_some(()));
    let wrote = run(d.yieldctl().args(["write", &id, "6*7", "--key", "Enter"]));
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
    let shown = eventually_blocking("the answer on the screen", || {
        let shown = screen(&d);
        shown.lines().any(|l| l == "42").then_some(shown)
    });
    assert_eq!(shown, ">>> 6*7\n42\n>>>\n");
    // --json: the read tool's object, with the screen and cursor.
    let v = json(&run(d.yieldctl().args(["--json", "read", &id, "--screen"])));
    assert_eq!(v["screen"], ">>> 6*7\n42\n>>>", "{v}");
    assert_eq!(v["cursor"], serde_json::json!([2, 4]), "{v}");
    assert_eq!(v["tty"], true, "{v}");

    let resized = run(d.yieldctl().args(["write", &id, "--resize", "70x12"]));
    assert!(resized.status.success(), "{}", text(&resized.stderr));
    run(d.yieldctl().args([
        "write",
        &id,
        "import os; print('size', *os.get_terminal_size())",
        "--key",
        "Enter",
    ]));
    eventually_blocking("the new size", || {
        let out = run(d.yieldctl().args(["read", &id]));
        text(&out.stdout).contains("size 70 12").then_some(())
    });

    let bad = run(d.yieldctl().args(["write", &id, "--key", "NoSuchKey"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("NoSuchKey"),
        "{}",
        text(&bad.stderr)
    );
    let bad_size = run(d.yieldctl().args(["write", &id, "--resize", "wide"]));
    assert_eq!(bad_size.status.code(), Some(2));
    assert!(text(&bad_size.stderr).contains("COLSxROWS"));

    let ps = text(&run(d.yieldctl().args(["ps"])).stdout);
    let row = ps.lines().find(|l| l.starts_with(&id)).expect("listed");
    assert_eq!(row.split_whitespace().nth(3), Some("tty"), "{ps}");

    // EOF (Ctrl-D) ends the REPL.
    run(d.yieldctl().args(["write", &id, "--eof"]));
    let waited = run(d.yieldctl().args(["wait", &id]));
    assert_eq!(waited.status.code(), Some(0));
}

#[tokio::test]
async fn read_screen_of_a_pipe_process_says_there_is_none() {
    let d = TestDaemon::start().await;
    let v = json(&run(d.yieldctl().args(["--json", "exec", "--", "echo hi"])));
    let id = v["process_id"].as_str().expect("id");
    let out = run(d.yieldctl().args(["read", id, "--screen"]));
    // The daemon refuses the request (invalid_argument: exit 2) and says why.
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("not a terminal"), "{err}");
    let ps = text(&run(d.yieldctl().args(["ps"])).stdout);
    let row = ps.lines().find(|l| l.starts_with(id)).expect("listed");
    assert_eq!(row.split_whitespace().nth(3), Some("-"), "{ps}");
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_password_prompt_is_named_with_the_attach_command() {
    let d = TestDaemon::start().await;
    let prompt =
        "python3 -c 'import getpass; print(\"ok\" if getpass.getpass()==\"s3cret\" else \"no\")'";
    let out = run(d
        .yieldctl()
        .args(["exec", "--tty", "--yield-ms", "15000", "--", prompt]));
    assert!(out.status.success());
    let hint = text(&out.stderr);
    let id = hint
        .split_whitespace()
        .find(|w| w.starts_with("proc_"))
        .expect("id in the hint")
        .to_string();
    assert!(hint.contains(&format!("yieldctl attach {id}")), "{hint}");
    // exec yields as soon as the program reads; echo goes off around that instant, so the
    // password state is polled rather than expected in that one answer.
    eventually_blocking("ps to show the password prompt", || {
        let ps = text(&run(d.yieldctl().args(["ps"])).stdout);
        let row = ps.lines().find(|l| l.starts_with(&id))?.to_string();
        (row.split_whitespace().nth(2) == Some("running[password]")).then_some(())
    });
    let shown = text(&run(d.yieldctl().args(["read", &id])).stdout);
    assert_eq!(shown, "Password: ");
    let waited = run(d.yieldctl().args(["wait", &id, "--for-input"]));
    assert_eq!(waited.status.code(), Some(0));
    let said = text(&waited.stderr);
    assert!(
        said.contains("echo off") && said.contains(&format!("yieldctl attach {id}")),
        "{said}"
    );
    run(d
        .yieldctl()
        .args(["write", &id, "s3cret", "--key", "Enter"]));
    let waited = run(d.yieldctl().args(["wait", &id]));
    assert_eq!(waited.status.code(), Some(0));
    let log = text(&run(d.yieldctl().args(["read", &id])).stdout);
    assert_eq!(log, "Password: \nok\n", "the password is never echoed");
}
