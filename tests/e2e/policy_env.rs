//! `ALLOW_COMMANDS` against the environment and against redirections (issue 16, items 1 and
//! 3), through a real daemon and the MCP `exec` tool: a variable that changes which program
//! runs or what it loads is refused however it is set, a redirection that writes a file is
//! refused before anything runs, and without `ALLOW_COMMANDS` nothing changes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{Client, TestDaemon, exec_req};
use crate::mcp::{Mcp, body, is_error};

const ALLOW_LS_ECHO: (&str, &str) = ("YIELDSHELL_ALLOW_COMMANDS", "ls,echo");

fn var(name: &str, value: &str) -> pb::EnvVar {
    pb::EnvVar {
        name: name.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

async fn run(c: &Client, req: pb::ExecRequest) -> pb::ExecResponse {
    c.exec_with(pb::ExecRequest {
        yield_ms: Some(30_000),
        ..req
    })
    .await
}

/// Asserts that the daemon refused `req` as a command outside the policy, started nothing,
/// and named `what` in its message; returns the message.
#[track_caller]
fn assert_denied(r: &pb::ExecResponse, what: &str) -> String {
    assert_eq!(
        r.status,
        pb::ExecStatus::FailedToStart as i32,
        "not refused: {r:?}"
    );
    assert_eq!(r.error_kind, "command_denied", "{r:?}");
    assert!(r.process.is_none(), "a refused exec created a process");
    assert!(r.error.contains(what), "{what} not named: {}", r.error);
    r.error.clone()
}

/// A directory holding an executable `ls` that creates `marker` when run (with the shell's own
/// redirection: with `PATH` set to that directory, `touch` would not be found).
fn plant_ls(dir: &Path, marker: &Path) -> PathBuf {
    let planted = dir.join("planted");
    std::fs::create_dir(&planted).expect("mkdir");
    let ls = planted.join("ls");
    std::fs::write(&ls, format!("#!/bin/sh\n: > '{}'\n", marker.display())).expect("write");
    std::fs::set_permissions(&ls, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    planted
}

#[tokio::test]
async fn allow_commands_refuses_env_that_changes_which_program_runs() {
    let d = TestDaemon::start().await;
    let marker = d.dir.path().join("planted-ls-ran");
    let planted = plant_ls(d.dir.path(), &marker);
    let planted = planted.to_str().expect("utf-8 temp path");
    let overlay_path = || pb::ExecRequest {
        env: vec![var("PATH", planted)],
        ..exec_req("ls")
    };

    // Without ALLOW_COMMANDS nothing changes: the overlay's PATH picks the planted program,
    // which is what makes the refusals below meaningful.
    let open = run(&d.session(), overlay_path()).await;
    assert_eq!(open.status, pb::ExecStatus::Completed as i32, "{open:?}");
    assert!(
        marker.exists(),
        "the planted ls did not run without a policy"
    );
    std::fs::remove_file(&marker).expect("rm marker");

    // Issue 16 exploit 1a: the planted `ls`, by the overlay and by an inline assignment.
    let c = d.session_with(&[ALLOW_LS_ECHO]);
    let message = assert_denied(&run(&c, overlay_path()).await, "PATH");
    assert!(
        !message.contains(planted),
        "the value was echoed: {message}"
    );
    let inline = format!("PATH={planted} ls");
    assert_denied(&run(&c, exec_req(&inline)).await, "PATH");
    assert!(!marker.exists(), "the planted ls ran under ALLOW_COMMANDS");

    // With `env` and `export` allowed too: quoted names and words split out of an unquoted
    // expansion set PATH just the same under /bin/sh, and are refused.
    let wrappers = d.session_with(&[("YIELDSHELL_ALLOW_COMMANDS", "ls,env,export")]);
    for line in [
        format!("env 'PATH={planted}' ls"),
        format!("export \"PATH={planted}\"; ls"),
        format!("X='1 PATH={planted}'; env A=$X ls"),
        format!("X='1 PATH={planted}'; export \"A\"=$X; ls"),
    ] {
        let r = run(&wrappers, exec_req(&line)).await;
        assert_eq!(
            r.status,
            pb::ExecStatus::FailedToStart as i32,
            "{line}: {r:?}"
        );
        assert_eq!(r.error_kind, "command_denied", "{line}: {r:?}");
    }
    assert!(!marker.exists(), "the planted ls ran under ALLOW_COMMANDS");

    // Issue 16 exploit 1b: LD_PRELOAD makes an allowed `echo` load a library (refused before
    // any library is needed), and other loader and interpreter variables alike.
    let evil = d.dir.path().join("evil.so");
    let evil = evil.to_str().expect("utf-8");
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "IFS",
    ] {
        let req = pb::ExecRequest {
            env: vec![var("LANG", "C"), var(name, evil)],
            ..exec_req("echo hi")
        };
        assert_denied(&run(&c, req).await, name);
    }

    // Variables that only carry data still pass, and reach the command.
    let r = run(
        &c,
        pb::ExecRequest {
            env: vec![var("LANG", "C"), var("GREETING", "hello")],
            ..exec_req("echo \"$GREETING\"")
        },
    )
    .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stdout, b"hello\n");
}

#[tokio::test]
async fn the_mcp_exec_tool_cannot_smuggle_path_past_allow_commands() {
    let d = TestDaemon::start().await;
    let marker = d.dir.path().join("planted-ls-ran");
    let planted = plant_ls(d.dir.path(), &marker);
    let mcp = Mcp::start(&d, &[ALLOW_LS_ECHO]).await;
    let r = mcp
        .call(
            "exec",
            json!({"command": "ls", "side_effects": ["NONE"], "env": {"PATH": planted}}),
        )
        .await;
    assert!(is_error(&r), "not refused: {r:?}");
    let b = body(&r);
    assert_eq!(b["status"], "failed_to_start", "{b}");
    assert_eq!(b["error_kind"], "command_denied", "{b}");
    assert!(
        b["error"].as_str().is_some_and(|e| e.contains("PATH")),
        "{b}"
    );
    assert!(!marker.exists(), "the planted ls ran");
    mcp.close().await;
}

#[tokio::test]
async fn allow_commands_refuses_redirections_that_write_files() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[ALLOW_LS_ECHO]);
    for (i, template) in [
        "echo x > {}",
        "ls >| {}",
        "ls 2>{}",
        "echo a >> {}",
        "ls &>{}",
        "echo x 1<>{}",
        "ls >&{}",
        "echo $(echo x > {})",
        "ls; { echo x; } > {}",
    ]
    .into_iter()
    .enumerate()
    {
        let file = d.dir.path().join(format!("written-{i}"));
        let line = template.replace("{}", file.to_str().expect("utf-8"));
        let r = run(&c, exec_req(&line)).await;
        assert_eq!(
            r.status,
            pb::ExecStatus::FailedToStart as i32,
            "{line}: {r:?}"
        );
        assert_eq!(r.error_kind, "command_denied", "{line}: {r:?}");
        assert!(!file.exists(), "{line} created the file");
    }

    // `/dev/null` and descriptor duplications stay allowed and work.
    let r = run(&c, exec_req("echo gone > /dev/null; ls no-such-file 2>&1")).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    let out = r.output.expect("output");
    assert!(out.stderr.is_empty(), "2>&1 did not merge: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no-such-file"), "{stdout}");
    assert!(!stdout.contains("gone"), "{stdout}");
    let r = run(&c, exec_req("echo kept 1>&2 2>/dev/null")).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(r.output.expect("output").stderr, b"kept\n");

    // Without ALLOW_COMMANDS a redirection writes as before.
    let file = d.dir.path().join("written-freely");
    let line = format!("echo x > {}", file.display());
    let r = run(&d.session(), exec_req(&line)).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    assert_eq!(std::fs::read(&file).expect("written"), b"x\n");
}
