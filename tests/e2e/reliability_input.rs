//! docs/RELIABILITY.md bad inputs B1–B8, through gRPC, through `yieldctl` and through the MCP shim.
//! (The basics live elsewhere: B1 byte-exact gRPC and `yieldctl read` in `daemon_output`, B6
//! unknown ids and signals in `daemon_exec`/`daemon_stop`, B7 malformed JSON-RPC in `shim`.)

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_tests::bad_utf8_bytes;

use crate::helper::{
    Latencies, TIMEOUT, TestDaemon, eventually, exec_req, fd_count, json, run, size, testbin,
};
use crate::mcp::{Mcp, RawShim, body, is_error, raw_body, shim_std_command};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test]
async fn b1_non_utf8_output_is_exact_for_follow_and_lossy_flagged_json_for_mcp_and_cli() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .exec(&format!("exec {} bad-utf8", testbin()))
        .await
        .process
        .expect("process")
        .process_id;
    // `read --follow` into a file: byte for byte.
    let follow = run(d.yieldctl().args(["read", &id, "--follow"]));
    assert!(follow.status.success());
    assert!(follow.stdout == bad_utf8_bytes(), "follow bytes differ");
    // `--json`: valid JSON, replacement characters, and `lossy` says so.
    let v = json(&run(d
        .yieldctl()
        .args(["--json", "read", &id, "--since", "1"])));
    assert_eq!(v["lossy"], true, "{v}");
    assert!(v["stdout"].as_str().expect("text").contains('\u{fffd}'));
    // MCP: valid JSON text (the rmcp client parses it), lossy, never a decode error.
    let mcp = Mcp::start(&d, &[]).await;
    for (tool, args) in [
        (
            "read",
            json!({"process_id": id, "since_seq": 1, "max_output_bytes": 20000}),
        ),
        ("wait", json!({"process_id": id, "timeout_ms": 1000})),
        (
            "exec",
            json!({"command": format!("exec {} bad-utf8", testbin()), "side_effects": ["NONE"]}),
        ),
    ] {
        let r = mcp.call(tool, args).await;
        assert!(!is_error(&r), "{tool}");
        let b = body(&r);
        assert_eq!(b["lossy"], true, "{tool}: {b}");
        assert!(b["stdout"].as_str().expect("text").contains('\u{fffd}'));
    }
    mcp.close().await;
}

#[tokio::test]
async fn b2_0xff_bytes_in_argv_cwd_and_env_reach_the_child_exactly() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let dir = d.dir.path().join(std::ffi::OsStr::from_bytes(b"dir-\xff"));
    std::fs::create_dir(&dir).expect("mkdir");
    let mut command = format!("exec {} hex-echo VAR ", testbin()).into_bytes();
    command.extend_from_slice(b"a\xffb");
    let r = c
        .exec_with(pb::ExecRequest {
            command: command.clone(),
            cwd: Some(b"dir-\xff".to_vec()),
            env: vec![pb::EnvVar {
                name: b"VAR".to_vec(),
                value: b"v\xff".to_vec(),
            }],
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req("")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
    let canon = std::fs::canonicalize(&dir).expect("canon");
    assert_eq!(
        String::from_utf8(r.output.expect("output").stdout).expect("hex is text"),
        format!(
            "arg 61ff62\ncwd {}\nenv 76ff\n",
            hex(canon.as_os_str().as_bytes())
        )
    );
    let p = r.process.expect("process");
    assert_eq!(p.command, command, "the record keeps the exact bytes");
    // `ps` shows an escaped, printable form; `--json` stays valid JSON.
    let ps = run(d.yieldctl().args(["ps", "--color", "never"]));
    assert!(ps.status.success());
    assert!(
        std::str::from_utf8(&ps.stdout).is_ok(),
        "ps printed raw bytes"
    );
    assert!(!ps.stdout.contains(&0xff));
    json(&run(d.yieldctl().args(["--json", "ps"])));
    // `yieldctl exec` passes a non-UTF-8 argument through unchanged.
    let mut arg = format!("exec {} hex-echo NONE ", testbin()).into_bytes();
    arg.extend_from_slice(b"\xfe\xff");
    let out = run(d
        .yieldctl()
        .arg("exec")
        .arg("--")
        .arg(std::ffi::OsStr::from_bytes(&arg)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("arg feff\n"));
}

#[tokio::test]
async fn b3_escape_sequences_in_names_and_commands_are_escaped_in_ps_and_raw_in_read() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            name: Some("\x1b[31mred\x1b[0m".into()),
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req("printf '\\033[2Jcleared\\n' # \x1b]0;title\x07")
        })
        .await;
    let id = r.process.expect("process").process_id;
    for color in ["never", "always"] {
        let ps = run(d.yieldctl().args(["ps", "--color", color]));
        let text = String::from_utf8(ps.stdout).expect("utf8");
        let line = text.lines().find(|l| l.contains(&id)).expect("listed");
        // Our own colours (always) are `\x1b[..m` around the status; the user's bytes never
        // appear raw: no ESC followed by `]` or `[2J`/`[31m` of the name.
        assert!(
            !line.contains("\x1b]0;") && !line.contains("\x1b[2J"),
            "{line:?}"
        );
        assert!(!line.contains("\x1b[31mred"), "{line:?}");
        assert!(line.contains("\\x1b"), "{line:?}");
    }
    let out = run(d.yieldctl().args(["read", &id]));
    assert_eq!(out.stdout, b"\x1b[2Jcleared\n", "read emits the raw bytes");
}

#[tokio::test]
async fn b4_huge_arguments_and_extreme_read_positions_get_clear_answers() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_MAX_BUFFER_BYTES", "1000")]);
    // 10 MiB command line: decoded (under the 16 MiB request limit), refused by exec(2).
    let huge = format!("echo {}", "x".repeat(10 << 20));
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(5_000),
            ..exec_req(&huge)
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32);
    assert_eq!(r.error_kind, ErrorKind::SpawnFailed.as_str(), "{}", r.error);
    assert!(
        r.error.contains("too long") || r.error.contains("E2BIG"),
        "{}",
        r.error
    );
    // Over the request limit: refused by the transport before the daemon allocates for it.
    let over = format!("echo {}", "x".repeat(20 << 20));
    let err = c
        .session
        .call(|mut cl| {
            let req = pb::ExecRequest {
                session_id: c.id(),
                ..exec_req(&over)
            };
            async move { cl.exec(req).await }
        })
        .await
        .expect_err("20 MiB request");
    println!("B4: a 20 MiB request: {err}");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::InvalidArgument | ErrorKind::LimitReached | ErrorKind::Internal
        ) || err.to_string().contains("too large"),
        "{err}"
    );
    // 100k environment variables: a clear answer either way.
    let env: Vec<pb::EnvVar> = (0..100_000)
        .map(|i| pb::EnvVar {
            name: format!("V{i}").into_bytes(),
            value: b"x".to_vec(),
        })
        .collect();
    let r = c
        .exec_with(pb::ExecRequest {
            env,
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req("echo $V99999")
        })
        .await;
    println!("B4: 100k variables: status {} {}", r.status, r.error);
    match pb::ExecStatus::try_from(r.status) {
        Ok(pb::ExecStatus::Completed) => assert_eq!(r.output.expect("o").stdout, b"x\n"),
        Ok(pb::ExecStatus::FailedToStart) => assert!(!r.error.is_empty()),
        other => panic!("unexpected {other:?}"),
    }
    // Read positions: u64::MAX bytes, past the end, before the ring start, zero.
    let id = c
        .exec(&format!("{} flood 5000", testbin()))
        .await
        .process
        .expect("p")
        .process_id;
    let read = |since: Option<u64>, max: Option<u64>| {
        let c = &c;
        let id = id.clone();
        async move {
            c.read(pb::ReadRequest {
                process_id: id,
                since_seq: since,
                max_output_bytes: max,
                ..Default::default()
            })
            .await
            .expect("read")
            .output
            .expect("output")
        }
    };
    let o = read(Some(4001), Some(u64::MAX)).await;
    assert_eq!(o.stdout.len(), 1000, "clamped to what is there");
    let o = read(Some(u64::MAX), None).await;
    assert!(o.stdout.is_empty() && !o.has_more);
    assert_eq!(o.next_seq, 5001);
    // Bytes the ring evicted come from the spool.
    let o = read(Some(1), Some(10)).await;
    assert!(!o.truncated, "the spool has the evicted bytes");
    assert_eq!((o.first_seq, o.next_seq), (1, 11));
    let o = read(Some(0), Some(10)).await;
    assert!(!o.truncated && o.first_seq == 1);
    // The same through yieldctl and MCP.
    let out = run(d
        .yieldctl()
        .args(["--json", "read", &id, "--since", &u64::MAX.to_string()]));
    assert!(out.status.success());
    assert_eq!(json(&out)["next_seq"], 5001);
    let mcp = Mcp::start(&d, &[]).await;
    let b = body(
        &mcp.call(
            "read",
            json!({"process_id": id, "since_seq": u64::MAX, "max_output_bytes": u64::MAX}),
        )
        .await,
    );
    assert_eq!(b["next_seq"], 5001);
    mcp.close().await;
    assert!(d.status().await.pid > 0, "the daemon is fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b5_garbage_http1_and_idle_connections_are_dropped_and_their_descriptors_reclaimed() {
    let d = TestDaemon::start_configured(&[], "handshake_timeout_ms = 1000\n").await;
    let daemon = d.pid();
    let mut raw = d.raw().await;
    d.idle_holders_ready().await;
    let base = fd_count(daemon);
    let talk = |bytes: Vec<u8>| {
        let socket = d.socket.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
            s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
            let _ = s.write_all(&bytes);
            // The daemon answers (an HTTP/2 GOAWAY, say) and closes; read until it does.
            let mut sink = Vec::new();
            match s.read_to_end(&mut sink) {
                Ok(_) => Ok(sink.len()),
                // Closed with unread input left: a reset is a close too.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(sink.len()),
                Err(e) => Err(e),
            }
        })
    };
    let mut state = 0x1234_5678_9abc_def0u64;
    let random: Vec<u8> = (0..65_536)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    let r = talk(random).await.expect("join");
    assert!(r.is_ok(), "random bytes: the daemon did not close: {r:?}");
    let r = talk(b"GET / HTTP/1.1\r\nHost: yieldshelld\r\n\r\n".to_vec())
        .await
        .expect("join");
    assert!(r.is_ok(), "HTTP/1.1: the daemon did not close: {r:?}");
    // Idle connections that never say anything.
    let n = size(200, 1000);
    let idle: Vec<_> = (0..n)
        .map(|_| std::os::unix::net::UnixStream::connect(&d.socket).expect("connect"))
        .collect();
    let mut lat = Latencies::default();
    for _ in 0..50 {
        let t = Instant::now();
        raw.status(pb::StatusRequest::default())
            .await
            .expect("status");
        lat.push(t.elapsed());
    }
    println!(
        "B5: with {n} idle connections open, Status {}",
        lat.summary()
    );
    assert!(lat.pct(99.0) < Duration::from_millis(500));
    // The handshake deadline closes them all; the descriptors come back.
    let started = Instant::now();
    eventually("idle connections to be closed", || async {
        (fd_count(daemon) <= base).then_some(())
    })
    .await;
    println!(
        "B5: {n} idle connections closed within {:?}",
        started.elapsed()
    );
    for mut s in idle {
        // The daemon's HTTP/2 settings, then EOF (or a reset): the connection is closed.
        let mut sink = Vec::new();
        s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        let r = s.read_to_end(&mut sink);
        assert!(
            r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "still open: {r:?}"
        );
    }
    raw.status(pb::StatusRequest::default())
        .await
        .expect("status");
}

#[tokio::test]
async fn b6_unknown_ids_ended_processes_bad_signals_and_closed_stdin_through_every_client() {
    let d = TestDaemon::start().await;
    let c = d.session();
    // gRPC codes.
    let unknown = "proc_000000000000";
    let err = c
        .wait(pb::WaitRequest {
            process_id: unknown.into(),
            ..Default::default()
        })
        .await
        .expect_err("wait");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = c.write(unknown, b"x", false).await.expect_err("write");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let mut raw = d.raw().await;
    let err = raw
        .follow(pb::FollowRequest {
            session_id: c.id(),
            process_id: unknown.into(),
            ..Default::default()
        })
        .await
        .expect_err("follow");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let id = c.spawn_bg("cat").await;
    let err = c.stop(&id, "999", 100).await.expect_err("signal 999");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    c.write(&id, b"", true).await.expect("close stdin");
    c.wait_exit(&id).await;

    // yieldctl: documented exit codes (1 refused, 2 usage, 0 when the goal already holds).
    for args in [
        vec!["read", unknown],
        vec!["wait", unknown],
        vec!["stop", unknown],
        vec!["write", unknown, "x"],
    ] {
        let out = run(d.yieldctl().args(&args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(unknown),
            "{args:?}"
        );
    }
    let v = json(&run(d.yieldctl().args(["--json", "read", unknown])));
    assert_eq!(v["error_kind"], "unknown_process");
    for _ in 0..2 {
        let out = run(d.yieldctl().args(["stop", &id]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "stop of an ended process: goal holds"
        );
    }
    for sig in ["0", "999", "SIGNOPE"] {
        let out = run(d.yieldctl().args(["stop", &id, "--signal", sig]));
        assert_eq!(out.status.code(), Some(2), "signal {sig}");
    }
    let out = run(d.yieldctl().args(["write", &id, "late"]));
    assert_eq!(out.status.code(), Some(1));

    // MCP: tool results with their own kinds.
    let mcp = Mcp::start(&d, &[]).await;
    for (tool, args, kind) in [
        ("wait", json!({"process_id": unknown}), "unknown_process"),
        (
            "write",
            json!({"process_id": id, "input": "late"}),
            "process_exited",
        ),
        (
            "stop",
            json!({"process_id": id, "signal": "0"}),
            "invalid_argument",
        ),
        (
            "stop",
            json!({"process_id": id, "signal": "999"}),
            "invalid_argument",
        ),
        ("stop", json!({"process_id": id}), "process_exited"),
        ("stop", json!({"process_id": id}), "process_exited"),
    ] {
        let b = body(&mcp.call(tool, args.clone()).await);
        assert_eq!(b["process_id"], args["process_id"], "{tool} {args}");
        assert_eq!(b["error_kind"], kind, "{tool} {args}: {b}");
        if tool == "write" {
            // The body carries the id; the message does not repeat it.
            let error = b["error"].as_str().unwrap_or_default();
            assert!(!error.contains(id.as_str()), "{error}");
            assert!(error.contains("ended"), "{error}");
        }
    }
    mcp.close().await;
}

#[test]
fn b7_stdin_closed_mid_frame_ends_the_shim_cleanly_with_only_json_rpc_on_stdout() {
    let d = TestDaemon::unstarted();
    let mut shim = RawShim::start(shim_std_command(&d, &[("YIELDSHELL_NO_AUTOSTART", "1")]));
    let r = shim.call("ps", json!({}));
    assert_eq!(raw_body(&r)["error_kind"], "daemon_unavailable");
    // Half a frame, then EOF.
    shim.send_raw(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ps","argu"#);
    let (eof, status) = shim.close();
    assert_eq!(status.code(), Some(0));
    assert!(eof < TIMEOUT);
    // Nothing panicked, and logs go to stderr only.
    let mut child = shim_std_command(&d, &[("YIELDSHELL_NO_AUTOSTART", "1")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("shim");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"par")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    for line in out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("JSON-RPC");
        assert_eq!(v["jsonrpc"], "2.0");
    }
}

#[tokio::test]
async fn b8_odd_commands_not_found_closed_stdout_stdin_readers_self_pgid_and_self_stop() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    // Not found: recorded as an exit (127), no hang.
    let r = c.exec("definitely-not-a-command-yieldshell").await;
    let p = r.process.expect("process");
    assert_eq!(p.exit_code, Some(127));
    assert!(String::from_utf8_lossy(&r.output.expect("o").stderr).contains("not found"));
    // stdout closed at once: EOF on it, stderr still captured.
    let r = c.exec("exec >&-; echo still-here >&2").await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    assert_eq!(r.output.expect("o").stderr, b"still-here\n");
    // A stdin reader: stdin is a pipe kept open for `write` (README, "Tools"), so it waits for input;
    // `close_stdin` gives it EOF at once.
    let id = c.spawn_bg("read x; echo got:$x").await;
    c.write(&id, b"hi\n", false).await.expect("write");
    assert_eq!(
        c.wait_exit(&id).await.output.expect("o").stdout,
        b"got:hi\n"
    );
    let r = c
        .exec_with(pb::ExecRequest {
            close_stdin: true,
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req("read x; echo got:$x")
        })
        .await;
    assert_eq!(r.output.expect("o").stdout, b"got:\n");
    // A child that moves itself to its own process group is still stopped (F13 row b).
    let id = c.spawn_bg(&format!("{tb} setpgid 600 & wait")).await;
    let moved = c.ready_pids(&id, 1).await[0];
    let r = c.stop(&id, "TERM", 2_000).await.expect("stop");
    assert!(r.stopped && !moved.alive());
    // One that stops itself (SIGSTOP): SIGTERM comes with SIGCONT, so no SIGKILL is needed.
    let id = c.spawn_bg(&format!("exec {tb} stop-self")).await;
    let stopped = c.ready_pids(&id, 1).await[0];
    eventually("the process to be stopped", || async {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", stopped.pid)).ok()?;
        (s[s.rfind(')')? + 2..].starts_with('T')).then_some(())
    })
    .await;
    let started = Instant::now();
    let r = c.stop(&id, "TERM", 5_000).await.expect("stop");
    assert!(r.stopped && !r.escalated, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(!stopped.alive());
}

/// Arbitrary JSON, biased towards what models send by mistake.
fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        prop::sample::select(vec![
            "",
            "NONE",
            "echo hi",
            "proc_000000000000",
            "-1",
            "both",
            "KILL"
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// B7 fuzzing through the real binary: every tool of every profile, given arbitrary argument
/// objects (with no daemon behind, so valid ones end in `daemon_unavailable`), answers each with
/// a tool result — never a protocol error, a crash or a hang — and exits 0 at the end. Cases per
/// profile: `PROPTEST_CASES` (default 48).
#[test]
fn b7_every_tool_of_every_profile_answers_arbitrary_arguments_with_a_result() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let d = TestDaemon::unstarted();
    for (profile, extra) in [
        ("default", None),
        ("jobs", None),
        ("shell", Some(("ALLOW_COMMANDS", "echo,ls"))),
        ("mcp-background-job", None),
        ("mcp-shell-server", Some(("ALLOW_COMMANDS", "echo,ls"))),
    ] {
        let mut vars = vec![("YIELDSHELL_NO_AUTOSTART", "1")];
        vars.extend(extra);
        let mut cmd = shim_std_command(&d, &vars);
        cmd.args(["--profile", profile]);
        let shim = std::cell::RefCell::new(RawShim::start(cmd));
        let listed = shim.borrow_mut().request("tools/list", json!({}));
        let tools: Vec<String> = shim.borrow_mut().response(listed)["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_string())
            .collect();
        let args = prop::collection::btree_map(
            prop_oneof![
                prop::sample::select(vec![
                    "command",
                    "side_effects",
                    "process_id",
                    "job_id",
                    "since_seq",
                    "max_output_bytes",
                    "streams",
                    "yield_ms",
                    "timeout_ms",
                    "timeout",
                    "env",
                    "stdin",
                    "input",
                    "signal",
                    "until",
                    "lines",
                    "limit",
                    "scope",
                    "directory",
                ])
                .prop_map(str::to_string),
                "[a-z_]{1,10}",
            ],
            json_value(),
            0..6,
        );
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&(prop::sample::select(tools), args), |(tool, args)| {
                let args: serde_json::Map<_, _> = args.into_iter().collect();
                let r = shim
                    .borrow_mut()
                    .call(&tool, serde_json::Value::Object(args.clone()));
                prop_assert!(
                    r.get("result").is_some() && r.get("error").is_none(),
                    "{profile} {tool} {args:?}: {r}"
                );
                prop_assert!(
                    !r["result"]["content"].as_array().is_none_or(Vec::is_empty),
                    "{r}"
                );
                Ok(())
            })
            .expect("property");
        let (_, status) = shim.into_inner().close();
        assert_eq!(status.code(), Some(0), "{profile}");
    }
}
