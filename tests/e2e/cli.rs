//! `yieldctl` as a user runs it: exit codes, `--json` shapes, byte-exact output, pipes.

use std::io::Read;
use std::process::Stdio;

use crate::helper::{TestDaemon, json, run, testbin};

#[tokio::test]
async fn exec_runs_in_the_foreground_and_mirrors_the_exit_code() {
    let d = TestDaemon::start().await;
    let out = run(d
        .yieldctl()
        .args(["exec", "--", "echo hi; echo oops >&2; exit 3"]));
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(out.stderr, b"oops\n");
}

/// The command is every word from the first one on, its options included; `--` is optional.
#[tokio::test]
async fn exec_takes_the_command_and_its_options_without_a_double_dash() {
    let d = TestDaemon::start().await;
    let out = run(d.yieldctl().args(["exec", "echo", "hi"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"hi\n");
    // Options before the command are yieldctl's; after it, the command's.
    let out = run(d.yieldctl().args([
        "exec",
        "--yield-ms",
        "9000",
        "printf",
        "%s,",
        "--yield-ms",
        "-x",
    ]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"--yield-ms,-x,");
    // One quoted word is still a whole shell command line.
    let out = run(d.yieldctl().args(["exec", "exit 4"]));
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    // After `--`, a word starting with `-` is the command (sh is told where its options end).
    let out = run(d.yieldctl().args(["exec", "--", "-x"]));
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("-x"),
        "{out:?}"
    );
    // A command starting with `-` needs the `--`; without it, a clear usage error.
    let out = run(d.yieldctl().args(["exec", "--no-such-flag"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"),
        "{out:?}"
    );
}

#[tokio::test]
async fn exec_json_has_the_exec_tool_fields() {
    let d = TestDaemon::start().await;
    let out = run(d.yieldctl().args(["--json", "exec", "--", "echo hi"]));
    assert!(out.status.success());
    let v = json(&out);
    for field in [
        "process_id",
        "status",
        "duration_ms",
        "stdout",
        "stderr",
        "truncated",
        "next_seq",
        "exit_code",
        "signal",
        "pid",
        "message",
        "error",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["status"], "completed");
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["next_seq"], 4);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["signal"], serde_json::Value::Null);
}

#[tokio::test]
async fn a_backgrounded_exec_can_be_followed_to_the_end_and_waited_for() {
    let d = TestDaemon::start().await;
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    let cmd = format!(
        "echo one; while [ -e {g} ]; do sleep 0.05; done; echo two; exit 4",
        g = gate.display()
    );
    let out = run(d
        .yieldctl()
        .args(["--json", "exec", "--yield-ms", "100", "--", &cmd]));
    let v = json(&out);
    assert_eq!(v["status"], "backgrounded");
    let id = v["process_id"].as_str().expect("id").to_string();
    let mut follow = d
        .yieldctl()
        .args(["read", &id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("follow");
    std::fs::remove_file(&gate).expect("release");
    let mut followed = Vec::new();
    follow
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut followed)
        .expect("read");
    assert!(follow.wait().expect("wait").success());
    assert_eq!(
        followed, b"one\ntwo\n",
        "follow prints everything once and ends with the process"
    );
    let waited = run(d.yieldctl().args(["wait", &id]));
    assert_eq!(waited.status.code(), Some(4));
}

#[tokio::test]
async fn read_into_a_closed_pipe_exits_zero() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c.exec(&format!("{} flood 3000000", testbin())).await;
    let id = r.process.expect("p").process_id;
    let mut child = d
        .yieldctl()
        .args(["read", &id, "--all"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("read");
    let mut first = [0u8; 10];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("first bytes");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn ps_stop_wait_and_write_have_documented_exit_codes() {
    let d = TestDaemon::start().await;
    let v = json(&run(d.yieldctl().args([
        "--json",
        "exec",
        "--yield-ms",
        "0",
        "--name",
        "sleeper",
        "--",
        "sleep 60",
    ])));
    let id = v["process_id"].as_str().expect("id").to_string();
    let ps = json(&run(d.yieldctl().args(["--json", "ps"])));
    let entry = ps["processes"]
        .as_array()
        .expect("array")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .expect("listed")
        .clone();
    assert_eq!(entry["name"], "sleeper");
    assert_eq!(entry["status"], "running");
    let human = run(d.yieldctl().args(["ps"]));
    assert!(String::from_utf8_lossy(&human.stdout).contains(&id));
    let timed = run(d.yieldctl().args(["wait", &id, "--timeout-ms", "100"]));
    assert_eq!(timed.status.code(), Some(124));
    let stop = json(&run(d.yieldctl().args(["--json", "stop", &id])));
    assert_eq!(stop["stopped"], true);
    let unknown = run(d.yieldctl().args(["--json", "stop", "proc_000000000000"]));
    assert_eq!(unknown.status.code(), Some(1));
    let body = json(&unknown);
    assert_eq!(body["process_id"], "proc_000000000000");
    assert_eq!(body["stopped"], false);
    assert_eq!(body["error_kind"], "unknown_process");
    let w = run(d.yieldctl().args(["--json", "write", &id, "x"]));
    assert_eq!(w.status.code(), Some(1));
    assert_eq!(json(&w)["ok"], false);
}

#[tokio::test]
async fn without_a_daemon_and_autostart_off_the_error_is_clear() {
    let dir = TestDaemon::new_dir();
    let out = run(std::process::Command::new(crate::helper::bin("yieldctl"))
        .args(["ps"])
        .env("YIELDSHELL_SOCKET", dir.path().join("none.sock"))
        .env("YIELDSHELL_NO_AUTOSTART", "1"));
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no yieldshelld answers") && err.contains("YIELDSHELL_NO_AUTOSTART"),
        "{err}"
    );
}

/// `daemon status` never starts a daemon; without one it says how to start it, and names
/// `YIELDSHELL_NO_AUTOSTART` only when that variable is what keeps clients from starting one.
#[tokio::test]
async fn daemon_status_without_a_daemon_names_no_autostart_only_when_it_is_set() {
    let dir = TestDaemon::new_dir();
    let status = |no_autostart: Option<&str>| {
        let mut c = std::process::Command::new(crate::helper::bin("yieldctl"));
        c.args(["daemon", "status"])
            .env("YIELDSHELL_SOCKET", dir.path().join("none.sock"))
            .env_remove("YIELDSHELL_NO_AUTOSTART");
        if let Some(v) = no_autostart {
            c.env("YIELDSHELL_NO_AUTOSTART", v);
        }
        let out = run(&mut c);
        assert_eq!(out.status.code(), Some(3));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let unset = status(None);
    assert!(
        unset.contains("no yieldshelld answers") && unset.contains("yieldctl daemon start"),
        "{unset}"
    );
    assert!(!unset.contains("YIELDSHELL_NO_AUTOSTART"), "{unset}");
    let set = status(Some("1"));
    assert!(set.contains("unset YIELDSHELL_NO_AUTOSTART"), "{set}");
}

#[tokio::test]
async fn read_follow_ends_for_ended_stopped_and_detached_output() {
    let d = TestDaemon::start().await;
    let follow = |id: &str| {
        d.yieldctl()
            .args(["read", id, "--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("follow")
    };
    let finish = |child: std::process::Child| {
        let out = child.wait_with_output().expect("follow ends");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };

    // Already ended: prints everything and returns.
    let done = json(&run(d.yieldctl().args([
        "--json",
        "exec",
        "--",
        "echo done",
    ])));
    let id = done["process_id"].as_str().expect("id");
    assert_eq!(finish(follow(id)), b"done\n");

    // Stopped while followed.
    let v = json(&run(d.yieldctl().args([
        "--json",
        "exec",
        "--yield-ms",
        "0",
        "--",
        "echo up; exec sleep 60",
    ])));
    let id = v["process_id"].as_str().expect("id").to_string();
    let child = follow(&id);
    let stop = run(d.yieldctl().args(["stop", &id]));
    assert!(stop.status.success());
    assert_eq!(finish(child), b"up\n");

    // The shell exited but a background child still holds its output: follow keeps printing
    // that child's output and ends when the child closes it.
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    let cmd = format!(
        "echo a; (while [ -e {g} ]; do sleep 0.05; done; echo late) & echo bg",
        g = gate.display()
    );
    let v = json(&run(d.yieldctl().args(["--json", "exec", "--", &cmd])));
    assert_eq!(v["status"], "completed", "{v}");
    assert!(v["descendants_running"].as_u64() >= Some(1), "{v}");
    let child = follow(v["process_id"].as_str().expect("id"));
    std::fs::remove_file(&gate).expect("release");
    assert_eq!(finish(child), b"a\nbg\nlate\n");
}

#[tokio::test]
async fn daemon_status_and_logs_show_what_a_user_needs() {
    let d = TestDaemon::start().await;
    let out = run(d.yieldctl().args(["daemon", "status"]));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in [
        "yieldshelld ",
        &format!("pid          {}", d.pid()),
        "uptime ",
        &format!("socket       {}", d.socket.display()),
        &format!("state dir    {}", d.state.display()),
        "processes    0 running",
        "memory ",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let v = json(&run(d.yieldctl().args(["--json", "daemon", "status"])));
    assert_eq!(v["pid"], d.pid());
    assert!(v["rss_bytes"].as_u64().expect("rss") > 0, "{v}");

    // `logs --follow` prints the log so far, then new lines as the daemon writes them.
    let mut logs = d
        .yieldctl()
        .args(["daemon", "logs", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("logs --follow");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = logs.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let wait_for = |needle: &str| {
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no log line with {needle:?}: {e}"),
            }
        }
    };
    wait_for("yieldshelld ready");
    let v = json(&run(d.yieldctl().args(["--json", "exec", "--", "true"])));
    let id = v["process_id"].as_str().expect("id");
    wait_for(&format!("started process_id={id}"));
    let _ = logs.kill();
    let _ = logs.wait();
}
