//! Clients against a daemon that misbehaves or a caller that does unusual things (issue 16,
//! items 8, 9 and 14): deadlines on every call when the daemon is stopped (`kill -STOP`),
//! `daemon stop` returning only once the daemon has exited, and `yieldctl` with a stdout closed
//! early, a single selected stream, and environment values that are not UTF-8.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid as NixPid;
use serde_json::json;
use yieldshell_proto::deadlines::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RPC_TIMEOUT};

use crate::helper::{TIMEOUT, TestDaemon, bin, eventually_blocking, json, run};
use crate::mcp::{Mcp, body, is_error};

/// Slack on top of a deadline for process start-up and a loaded machine.
const SLACK: Duration = Duration::from_secs(10);

/// SIGCONTs a stopped daemon when dropped, so a failing assertion never leaves it stopped (its
/// fixture's drop stops it with SIGTERM, which a stopped process does not act on).
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(NixPid::from_raw(self.0), Signal::SIGCONT);
    }
}

/// Runs a prepared command to its end, failing (and killing it) if it takes longer than `bound`.
fn run_within(cmd: &mut Command, bound: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let child: Child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = NixPid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(bound) {
        Ok(out) => (out.expect("output"), started.elapsed()),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("{cmd:?} still blocked after {bound:?}");
        }
    }
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn a_stopped_daemon_makes_every_client_fail_within_its_deadline_naming_the_pid() {
    let d = TestDaemon::start().await;
    let pid = d.pid();
    // A shim that talked to the daemon before it stopped: its next call is on an open
    // connection, so the per-call deadline (not the connect deadline) must end it.
    let connected = Mcp::start(&d, &[]).await;
    assert!(!is_error(&connected.call("ps", json!({})).await));

    kill(NixPid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP");
    let resume = Resume(pid);
    let names_the_pid = |text: &str| {
        assert!(
            text.contains(&format!("pid {pid}")) && text.contains(&format!("kill -CONT {pid}")),
            "the error must name the daemon's pid and how to resume it: {text}"
        );
    };

    let fresh_bound = DEFAULT_CONNECT_TIMEOUT + SLACK;
    let yieldctl = |args: &[&str]| {
        let mut c = d.yieldctl();
        c.args(args);
        c
    };
    let runs = [
        yieldctl(&["ps"]),
        yieldctl(&["--json", "ps"]),
        yieldctl(&["daemon", "status"]),
    ];
    let (yieldctl_runs, fresh_shim, connected_call) = tokio::join!(
        tokio::task::spawn_blocking(move || runs.map(|mut c| {
            let (out, took) = run_within(&mut c, fresh_bound);
            eprintln!(
                "yieldctl {:?}: exit {:?} after {took:?}",
                c.get_args().collect::<Vec<_>>(),
                out.status.code()
            );
            out
        })),
        async {
            let started = Instant::now();
            tokio::time::timeout(2 * fresh_bound, async {
                // `initialize` looks for running processes (bounded too), then the call connects.
                let shim = Mcp::start(&d, &[]).await;
                let r = shim.call("ps", json!({})).await;
                shim.close().await;
                r
            })
            .await
            .map(|r| (r, started.elapsed()))
        },
        async {
            let started = Instant::now();
            tokio::time::timeout(DEFAULT_RPC_TIMEOUT + SLACK, connected.call("ps", json!({})))
                .await
                .map(|r| (r, started.elapsed()))
        },
    );

    let [ps, json_ps, status] = yieldctl_runs.expect("yieldctl runs");
    for out in [&ps, &status] {
        assert_eq!(out.status.code(), Some(3), "{}", stderr_of(out));
        assert!(
            stderr_of(out).contains("did not answer"),
            "{}",
            stderr_of(out)
        );
        names_the_pid(&stderr_of(out));
    }
    assert_eq!(json_ps.status.code(), Some(3), "{}", stderr_of(&json_ps));
    let v = json(&json_ps);
    assert_eq!(v["error_kind"], "daemon_unavailable", "{v}");
    names_the_pid(v["error"].as_str().expect("error"));

    for (what, result) in [
        ("a new shim", fresh_shim),
        ("a connected shim", connected_call),
    ] {
        let (r, took) = result.unwrap_or_else(|_| panic!("{what}'s tool call blocked"));
        let v = body(&r);
        assert!(is_error(&r), "{what}: {v}");
        assert_eq!(v["error_kind"], "daemon_unavailable", "{what}: {v}");
        names_the_pid(v["error"].as_str().expect("error"));
        eprintln!("{what}: daemon_unavailable after {took:?}");
    }

    // Resumed, the daemon answers again and the connected shim reconnects.
    drop(resume);
    let again = connected.call("ps", json!({})).await;
    assert!(!is_error(&again), "{}", body(&again));
    connected.close().await;
}

#[tokio::test]
async fn daemon_stop_returns_only_once_the_daemon_has_exited() {
    // A long shutdown grace and a process that ignores SIGTERM: the daemon closes its socket at
    // once but runs the whole grace before it exits and frees its instance lock.
    let d = TestDaemon::unstarted();
    std::fs::create_dir_all(d.dir.path().join("cfg")).expect("cfg dir");
    let config = d.dir.path().join("cfg").join("config.toml");
    std::fs::write(&config, "shutdown_grace_ms = 3000\n").expect("config");
    let yieldctl = || {
        let mut c = Command::new(bin("yieldctl"));
        c.env("YIELDSHELL_SOCKET", &d.socket)
            .env("YIELDSHELL_STATE_DIR", &d.state)
            .env("YIELDSHELL_CONFIG", &config)
            .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
            .env_remove("YIELDSHELL_NO_AUTOSTART")
            .current_dir(d.dir.path())
            .stdin(Stdio::null());
        c
    };
    let started = json(&run(yieldctl().args([
        "--json",
        "exec",
        "--yield-ms",
        "0",
        "--",
        "trap '' TERM; echo up; sleep 60",
    ])));
    assert_eq!(started["status"], "backgrounded", "{started}");
    let id = started["process_id"].as_str().expect("id").to_string();
    // The trap must be set before the stop, or SIGTERM ends the shell at once.
    eventually_blocking("the trap to be set", || {
        let out = run(yieldctl().args(["read", &id]));
        (out.stdout == b"up\n").then_some(())
    });

    let (stop, took) = run_within(yieldctl().args(["daemon", "stop"]), TIMEOUT);
    assert!(stop.status.success(), "{}", stderr_of(&stop));
    eprintln!("`daemon stop` returned after {took:?}");
    assert!(
        took >= Duration::from_secs(3),
        "`daemon stop` returned after {took:?}, before the 3 s grace was over"
    );
    assert!(
        d.lock_is_free(),
        "`daemon stop` returned while the daemon still held its instance lock"
    );

    // The next command that starts a daemon succeeds right away.
    let next = run(yieldctl().args(["exec", "--", "echo again"]));
    assert!(next.status.success(), "{}", stderr_of(&next));
    assert_eq!(next.stdout, b"again\n");
    d.stop_autostarted();
}

/// Starts `yieldctl` with stdout on a pipe whose reader is already closed: its first write to
/// stdout fails with EPIPE.
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    cmd.stdout(writer).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    child.wait_with_output().expect("wait")
}

#[tokio::test]
async fn a_closed_stdout_exits_zero_for_every_command_and_format() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let done = c.exec("echo hi").await;
    let id = done.process.expect("process").process_id;
    let cases: Vec<Vec<&str>> = vec![
        vec!["exec", "--", "echo hi"],
        vec!["ps"],
        vec!["read", &id],
        vec!["read", &id, "--stream", "stdout", "--all"],
        vec!["read", &id, "--follow"],
        vec!["wait", &id, "--until", "hi"],
        vec!["daemon", "status"],
        vec!["completions", "bash"],
        vec!["man"],
    ];
    for args in &cases {
        for json_flag in [false, true] {
            let mut cmd = d.yieldctl();
            if json_flag {
                cmd.arg("--json");
            }
            cmd.args(args);
            let out = with_closed_stdout(&mut cmd);
            assert_eq!(
                out.status.code(),
                Some(0),
                "yieldctl {}{args:?}: {}",
                if json_flag { "--json " } else { "" },
                stderr_of(&out)
            );
            assert!(
                !stderr_of(&out).contains("panicked"),
                "{args:?}: {}",
                stderr_of(&out)
            );
        }
    }
    for args in [vec!["stop", &id], vec!["cleanup"]] {
        let out = with_closed_stdout(d.yieldctl().arg("--json").args(&args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr_of(&out));
    }
}

#[tokio::test]
async fn a_single_selected_stream_is_the_commands_stdout() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .exec("echo out; echo err >&2")
        .await
        .process
        .expect("process")
        .process_id;
    for extra in [&[][..], &["--follow"][..], &["--tail", "5"][..]] {
        let out = run(d
            .yieldctl()
            .args(["read", &id, "--stream", "stderr"])
            .args(extra));
        assert!(out.status.success(), "{extra:?}: {}", stderr_of(&out));
        assert_eq!(out.stdout, b"err\n", "{extra:?}");
        assert_eq!(stderr_of(&out), "", "{extra:?}");
        let both = run(d.yieldctl().args(["read", &id]).args(extra));
        assert_eq!(both.stdout, b"out\n", "{extra:?}");
        assert_eq!(both.stderr, b"err\n", "{extra:?}");
    }
}

#[tokio::test]
async fn env_values_stdin_and_write_text_travel_as_bytes() {
    let d = TestDaemon::start().await;
    let out = run(d
        .yieldctl()
        .arg("exec")
        .arg("--env")
        .arg(OsStr::from_bytes(b"X=a\xff\xfeb"))
        .arg("--stdin")
        .arg(OsStr::from_bytes(b"in\xff"))
        .args([
            "--close-stdin",
            "--",
            "printf %s \"$X\" | od -An -c; od -An -c",
        ]));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(
        words,
        ["a", "377", "376", "b", "i", "n", "377"],
        "the value and stdin reached the process byte for byte: {text}"
    );
    let not_a_pair = run(d
        .yieldctl()
        .args(["exec", "--env", "NOEQUALS", "--", "true"]));
    assert!(!not_a_pair.status.success());
    assert!(
        stderr_of(&not_a_pair).contains("NAME=VALUE"),
        "{}",
        stderr_of(&not_a_pair)
    );
    let id = json(&run(d.yieldctl().args([
        "--json",
        "exec",
        "--yield-ms",
        "0",
        "--",
        "od -An -c",
    ])))["process_id"]
        .as_str()
        .expect("id")
        .to_string();
    let wrote = run(d
        .yieldctl()
        .args(["write", "--eof", &id])
        .arg(OsStr::from_bytes(b"w\xff")));
    assert!(wrote.status.success(), "{}", stderr_of(&wrote));
    let waited = run(d.yieldctl().args(["wait", &id]));
    assert!(waited.status.success(), "{}", stderr_of(&waited));
    let read = run(d.yieldctl().args(["read", &id]));
    let words: Vec<String> = String::from_utf8_lossy(&read.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(words, ["w", "377"], "write delivered the bytes as given");
}
