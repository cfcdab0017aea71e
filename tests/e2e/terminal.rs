//! Terminal mode (issue 12; ARCHITECTURE.md, "Terminal processes"): real processes under a real PTY. `exec(tty=true)` runs
//! the command as its terminal's session, answers carry text without escape sequences, the
//! rendered screen and cursor come with `read(screen=true)`, named keys, EOF and resize go
//! through `write`, and a password typed at a prompt with echo off is recorded nowhere.
//! Everything is polled with one generous timeout; nothing sleeps and hopes.
#![cfg(target_os = "linux")]

use yieldshell_proto::pb;

use crate::helper::{Client, Pid, TestDaemon, eventually, exec_req, marked_processes};

/// Starts `command` on a terminal of `cols`×`rows` in the background.
async fn spawn_tty(c: &Client, command: &str, cols: u32, rows: u32) -> String {
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            cols: Some(cols),
            rows: Some(rows),
            yield_ms: Some(0),
            ..exec_req(command)
        })
        .await;
    assert!(r.error.is_empty(), "{r:?}");
    let p = r.process.expect("process");
    assert!(p.tty, "{p:?}");
    p.process_id
}

async fn read_req(c: &Client, req: pb::ReadRequest) -> pb::ReadResponse {
    c.read(req).await.expect("read")
}

/// The whole output so far, as answers give it (escape-free) or raw.
async fn text(c: &Client, id: &str, raw: bool) -> String {
    let r = read_req(
        c,
        pb::ReadRequest {
            process_id: id.into(),
            since_seq: Some(1),
            max_output_bytes: Some(1 << 20),
            raw,
            ..Default::default()
        },
    )
    .await;
    String::from_utf8_lossy(&r.output.expect("output").stdout).into_owned()
}

async fn screen(c: &Client, id: &str) -> pb::Screen {
    read_req(
        c,
        pb::ReadRequest {
            process_id: id.into(),
            max_output_bytes: Some(1),
            screen: true,
            ..Default::default()
        },
    )
    .await
    .screen
    .expect("screen")
}

/// Polls until the escape-free output contains `needle`; returns it.
async fn until_text(c: &Client, id: &str, needle: &str) -> String {
    eventually(&format!("{needle:?} in the output of {id}"), || async {
        let t = text(c, id, false).await;
        t.contains(needle).then_some(t)
    })
    .await
}

async fn write_req(c: &Client, req: pb::WriteRequest) -> Result<pb::WriteResponse, tonic::Status> {
    let req = pb::WriteRequest {
        session_id: c.id(),
        ..req
    };
    c.session
        .call(|mut cl| {
            let req = req.clone();
            async move { cl.write(req).await }
        })
        .await
        .map_err(|e| match e {
            yieldshell_proto::client::ClientError::Rpc(s) => s,
            other => panic!("write transport: {other}"),
        })
}

async fn keys(c: &Client, id: &str, input: &str, keys: &[&str]) {
    write_req(
        c,
        pb::WriteRequest {
            process_id: id.into(),
            input: input.as_bytes().to_vec(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            ..Default::default()
        },
    )
    .await
    .expect("write keys");
}

#[tokio::test]
async fn a_tty_command_has_its_terminal_and_size() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            cols: Some(91),
            rows: Some(27),
            ..exec_req("tty; stty size; test -t 0 && test -t 1 && test -t 2 && echo all-tty")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{r:?}");
    let out = String::from_utf8_lossy(&r.output.expect("output").stdout).into_owned();
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert!(out.contains("27 91\n"), "{out:?}");
    assert!(out.contains("all-tty"), "{out:?}");
    assert!(!out.contains('\r'), "answers read like text: {out:?}");
    let p = r.process.expect("process");
    assert!(p.tty);
    assert_eq!((p.cols, p.rows), (91, 27), "the size it ended with");
    // The raw bytes are what the terminal got (ONLCR made every newline CR LF).
    let raw = text(&c, &p.process_id, true).await;
    assert!(raw.contains("27 91\r\n"), "{raw:?}");
}

#[tokio::test]
async fn sizes_are_checked_and_pipes_refuse_terminal_controls() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            cols: Some(0),
            ..exec_req("true")
        })
        .await;
    assert_eq!(r.error_kind, "invalid_argument", "{r:?}");
    let id = c.spawn_bg("cat").await;
    let e = write_req(
        &c,
        pb::WriteRequest {
            process_id: id.clone(),
            keys: vec!["Enter".into()],
            ..Default::default()
        },
    )
    .await
    .expect_err("keys on a pipe");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("tty=true"), "{e:?}");
    let e = write_req(
        &c,
        pb::WriteRequest {
            process_id: id.clone(),
            cols: Some(80),
            ..Default::default()
        },
    )
    .await
    .expect_err("resize of a pipe");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    c.write(&id, b"", true).await.expect("eof");
    c.wait_exit(&id).await;
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn python_repl_under_a_terminal_answers_takes_ctrl_c_and_exits_on_eof() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(&c, "exec python3 -q", 100, 30).await;
    until_text(&c, &id, ">>> ").await;
    keys(&c, &id, "6*7", &["Enter"]).await;
    until_text(&c, &id, "42\n").await;
    // An unknown key is refused before anything is written.
    let e = write_req(
        &c,
        pb::WriteRequest {
            process_id: id.clone(),
            input: b"1+1".to_vec(),
            keys: vec!["Enter".into(), "NoSuchKey".into()],
            ..Default::default()
        },
    )
    .await
    .expect_err("unknown key");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("NoSuchKey"), "{e:?}");
    keys(&c, &id, "while True: pass", &["Enter", "Enter"]).await;
    // The loop runs once the empty continuation line was read.
    until_text(&c, &id, "... \n").await;
    keys(&c, &id, "", &["C-c"]).await;
    until_text(&c, &id, "KeyboardInterrupt").await;
    let out = text(&c, &id, false).await;
    assert!(
        !out.contains("1+1"),
        "the refused write wrote nothing: {out:?}"
    );
    // The REPL goes on after the traceback. (A statement in between matters: CPython exits by
    // SIGINT when the last statement it ran was interrupted.)
    until_text(&c, &id, "KeyboardInterrupt\n>>> ").await;
    keys(&c, &id, "7*8", &["Enter"]).await;
    until_text(&c, &id, "56\n>>> ").await;
    c.write(&id, b"", true).await.expect("eof");
    let w = c.wait_exit(&id).await;
    let out = text(&c, &id, false).await;
    let p = w.process.expect("process");
    assert_eq!(p.exit_code, Some(0), "{out:?} {p:?}");
}

#[tokio::test]
async fn the_screen_shows_text_where_cursor_moves_put_it() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(
        &c,
        r"printf '\033[2J\033[5;10HX\033[1;1Htop\033[3;4Hmid'; read x",
        40,
        12,
    )
    .await;
    let s = eventually("the drawing on the screen", || async {
        let s = screen(&c, &id).await;
        s.text.contains("mid").then_some(s)
    })
    .await;
    let rows: Vec<&str> = s.text.split('\n').collect();
    assert_eq!(rows[0], "top", "{s:?}");
    assert_eq!(rows[2], "   mid", "{s:?}");
    assert_eq!(rows[4], "         X", "{s:?}");
    assert_eq!((s.cursor_row, s.cursor_col), (2, 6), "{s:?}");
    assert_eq!((s.cols, s.rows), (40, 12));
    let end = text(&c, &id, true).await.len() as u64 + 1;
    assert_eq!(s.seq, end, "the screen reflects the whole log");
    assert!(!s.formatted.is_empty());
    c.write(&id, b"\n", false).await.expect("write");
    c.wait_exit(&id).await;
}

#[tokio::test]
async fn a_resize_reaches_a_winch_trap() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(
        &c,
        "trap 'stty size' WINCH; echo ready; while :; do sleep 0.05; done",
        80,
        24,
    )
    .await;
    until_text(&c, &id, "ready").await;
    write_req(
        &c,
        pb::WriteRequest {
            process_id: id.clone(),
            cols: Some(132),
            rows: Some(50),
            ..Default::default()
        },
    )
    .await
    .expect("resize");
    until_text(&c, &id, "50 132").await;
    let info = read_req(
        &c,
        pb::ReadRequest {
            process_id: id.clone(),
            screen: true,
            ..Default::default()
        },
    )
    .await;
    let p = info.process.expect("process");
    assert_eq!((p.cols, p.rows), (132, 50));
    let s = info.screen.expect("screen");
    assert_eq!((s.cols, s.rows), (132, 50));
    c.stop(&id, "SIGTERM", 1000).await.expect("stop");
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_password_prompt_waits_with_echo_off_and_the_password_is_recorded_nowhere() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(
        &c,
        "python3 -c \"import getpass; p = getpass.getpass('Password: '); print('length', len(p))\"",
        80,
        24,
    )
    .await;
    let p = eventually("the prompt to wait for input", || async {
        let r = read_req(
            &c,
            pb::ReadRequest {
                process_id: id.clone(),
                ..Default::default()
            },
        )
        .await;
        let p = r.process.expect("process");
        (p.waiting_for_input == Some(true)).then_some(p)
    })
    .await;
    assert_eq!(p.echo_off, Some(true), "{p:?}");
    const SECRET: &str = "hunter2-correct-horse";
    keys(&c, &id, SECRET, &["Enter"]).await;
    let w = c.wait_exit(&id).await;
    assert_eq!(w.process.expect("process").exit_code, Some(0));
    let shown = until_text(&c, &id, "length 21").await;
    assert!(!shown.contains(SECRET), "{shown:?}");
    assert!(!text(&c, &id, true).await.contains(SECRET));
    // Nor in any file of the process's directory (the spool).
    let dir = d.state.join("procs").join(&id);
    for entry in std::fs::read_dir(&dir).expect("process dir").flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{} holds the password",
            entry.path().display()
        );
    }
}

#[tokio::test]
async fn stop_takes_down_a_terminal_process_tree() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(
        &c,
        "sh -c 'trap \"\" HUP TERM; sleep 300 & echo child; wait' ; echo never",
        80,
        24,
    )
    .await;
    until_text(&c, &id, "child").await;
    let members = eventually("the shell, its child and grandchild", || async {
        let m = marked_processes(&id);
        (m.len() >= 3).then_some(m)
    })
    .await;
    let s = c.stop(&id, "SIGTERM", 500).await.expect("stop");
    assert!(s.stopped, "{s:?}");
    for pid in members {
        assert!(
            Pid::of(pid).is_none_or(|p| !p.alive()),
            "{pid} survived the stop"
        );
    }
    assert!(marked_processes(&id).is_empty());
    crate::helper::assert_no_zombies(d.pid()).await;
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_terminal_process_survives_a_daemon_crash_readable_and_writable() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(&c, "exec python3 -q", 80, 24).await;
    until_text(&c, &id, ">>> ").await;
    keys(&c, &id, "6*7", &["Enter"]).await;
    until_text(&c, &id, "42").await;
    d.kill9();
    d.spawn().await;
    let c = d.session();
    let s = eventually("the re-adopted screen", || async {
        let s = screen(&c, &id).await;
        s.text.contains("42").then_some(s)
    })
    .await;
    assert!(s.text.contains(">>> 6*7"), "{s:?}");
    keys(&c, &id, "7*8", &["Enter"]).await;
    until_text(&c, &id, "56").await;
    c.write(&id, b"", true).await.expect("eof");
    assert_eq!(
        c.wait_exit(&id).await.process.expect("process").exit_code,
        Some(0)
    );
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn exec_on_a_terminal_yields_early_at_a_password_prompt() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let started = std::time::Instant::now();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            yield_ms: Some(15_000),
            ..exec_req("python3 -c \"import getpass; getpass.getpass('Passphrase: ')\"")
        })
        .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "exec waited {:?} of its 15 s",
        started.elapsed()
    );
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    let p = r.process.expect("process");
    assert_eq!(p.waiting_for_input, Some(true), "{p:?}");
    assert_eq!(p.echo_off, Some(true), "{p:?}");
    assert_eq!(r.output.expect("output").stdout, b"Passphrase: ");
    // wait(for_input) answers at once for a process that waits already.
    let w = c
        .wait(pb::WaitRequest {
            process_id: p.process_id.clone(),
            for_input: true,
            timeout_ms: Some(15_000),
            ..Default::default()
        })
        .await
        .expect("wait");
    assert_eq!(w.result, pb::WaitResult::InputWanted as i32, "{w:?}");
    c.stop(&p.process_id, "SIGTERM", 1000).await.expect("stop");
}

/// REPLs with a line editor wait for a key in a readiness wait, not a read: GNU readline
/// (Python's REPL) in `pselect6` on the terminal, Node's REPL in `epoll_pwait` with the terminal
/// among its event sources. `exec` still yields at their prompt, and says they wait for input.
#[tokio::test]
#[ignore = "needs python3 and node: run .ci/test-extra"]
async fn exec_on_a_terminal_yields_early_at_a_line_editors_prompt() {
    let d = TestDaemon::start().await;
    let c = d.session();
    for (command, prompt) in [("exec python3 -q", ">>> "), ("exec node", "> ")] {
        let started = std::time::Instant::now();
        let r = c
            .exec_with(pb::ExecRequest {
                tty: true,
                yield_ms: Some(15_000),
                ..exec_req(command)
            })
            .await;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{command}: exec waited {:?} of its 15 s",
            started.elapsed()
        );
        assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
        let p = r.process.expect("process");
        assert_eq!(p.waiting_for_input, Some(true), "{command}: {p:?}");
        // A line editor's raw mode draws its own echo: not a password prompt.
        assert_eq!(p.echo_off, Some(false), "{command}: {p:?}");
        let id = p.process_id;
        until_text(&c, &id, prompt).await;
        // Answered, it computes and prompts again: waiting once more.
        keys(&c, &id, "6*7", &["Enter"]).await;
        until_text(&c, &id, "42").await;
        let w = c
            .wait(pb::WaitRequest {
                process_id: id.clone(),
                for_input: true,
                timeout_ms: Some(15_000),
                ..Default::default()
            })
            .await
            .expect("wait");
        assert_eq!(
            w.result,
            pb::WaitResult::InputWanted as i32,
            "{command}: {w:?}"
        );
        c.stop(&id, "SIGTERM", 1000).await.expect("stop");
    }
}

/// A server under a terminal waits in a readiness wait too, but on its socket: it never reads
/// as waiting for input.
#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_server_polling_its_socket_under_a_terminal_is_not_waiting_for_input() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            until: Some("^serving".into()),
            yield_ms: Some(30_000),
            ..exec_req(
                "exec python3 -c \"import socket, select\n\
                 s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                 print('serving', flush=True)\n\
                 while True: select.select([s], [], [])\"",
            )
        })
        .await;
    let id = r.process.expect("process").process_id;
    // Judged (not absent) and never waiting: its stdin is the terminal, which it never watches.
    let judged = eventually("a judgement on the server", || async {
        let r = c
            .read(pb::ReadRequest {
                process_id: id.clone(),
                ..Default::default()
            })
            .await
            .expect("read");
        r.process.and_then(|p| p.waiting_for_input)
    })
    .await;
    assert!(!judged, "a server is not a prompt");
    c.stop(&id, "SIGTERM", 1000).await.expect("stop");
}

#[tokio::test]
async fn follow_strips_escapes_unless_raw() {
    use tokio_stream::StreamExt;
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            tty: true,
            ..exec_req(r"printf '\033[1;32mgreen\033[0m done\n'")
        })
        .await;
    let id = r.process.expect("process").process_id;
    let follow = |raw: bool| {
        let req = pb::FollowRequest {
            session_id: c.id(),
            process_id: id.clone(),
            raw,
            ..Default::default()
        };
        let c = &c;
        async move {
            let mut stream = c
                .session
                .call(|mut cl| {
                    let req = req.clone();
                    async move { cl.follow(req).await }
                })
                .await
                .expect("follow");
            let mut data = Vec::new();
            while let Some(ev) = stream.next().await {
                let ev = ev.expect("event");
                if ev.ended.is_some() {
                    break;
                }
                data.extend_from_slice(&ev.data);
            }
            String::from_utf8(data).expect("utf-8")
        }
    };
    assert_eq!(follow(false).await, "green done\r\n");
    assert_eq!(follow(true).await, "\x1b[1;32mgreen\x1b[0m done\r\n");
}

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn the_mcp_tools_run_a_repl_on_a_terminal() {
    use serde_json::json;

    use crate::mcp::{Mcp, body};
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "exec python3 -q", "side_effects": ["NONE"], "tty": true,
                   "cols": 60, "rows": 10, "yield_ms": 0}),
        )
        .await,
    );
    assert_eq!(b["tty"], true, "{b}");
    let id = b["process_id"].as_str().expect("process_id").to_string();
    let prompt = eventually("the REPL's prompt on the screen", || async {
        let b = body(
            &mcp.call("read", json!({"process_id": id, "screen": true}))
                .await,
        );
        (b["screen"].as_str() == Some(">>>")).then_some(b)
    })
    .await;
    assert_eq!(prompt["cursor"], json!([0, 4]), "{prompt}");
    // Its line editor turned echo off in raw mode and echoes itself: not a password prompt.
    assert!(prompt.get("echo_off").is_none(), "{prompt}");
    let w = body(
        &mcp.call(
            "write",
            json!({"process_id": id, "input": "6*7", "keys": ["Enter"], "until": "^42$"}),
        )
        .await,
    );
    // Matched as the line reads (the terminal wrote "42\r\n"), and shown so.
    assert_eq!(w["wait_result"], "matched", "{w}");
    assert_eq!(w["matched_line"], "42", "{w}");
    assert!(w["stdout"].as_str().expect("stdout").contains("42"), "{w}");
    let bad = body(
        &mcp.call("write", json!({"process_id": id, "keys": ["Hyper"]}))
            .await,
    );
    assert_eq!(bad["error_kind"], "invalid_argument", "{bad}");
    let end = body(
        &mcp.call("write", json!({"process_id": id, "eof": true}))
            .await,
    );
    assert_eq!(end["ok"], true, "{end}");
    let done = body(&mcp.call("wait", json!({"process_id": id})).await);
    assert_eq!(done["exit_code"], 0, "{done}");
    mcp.close().await;
}

#[tokio::test]
async fn an_ended_terminal_process_still_reads_as_one_after_a_daemon_restart() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let id = spawn_tty(&c, r"printf '\033[1mbold\033[0m done\n'", 80, 24).await;
    assert_eq!(
        c.wait_exit(&id).await.process.expect("process").exit_code,
        Some(0)
    );
    // A graceful stop keeps the records of ended processes; the next daemon restores this one
    // without its terminal.
    assert!(d.terminate().expect("daemon exit status").success());
    d.spawn().await;
    let c = d.session();
    let listed = c.list(pb::Scope::All, true).await;
    let p = listed
        .iter()
        .find(|p| p.process_id == id)
        .expect("restored");
    assert!(p.tty, "still says it ran on a terminal: {p:?}");
    assert_eq!(text(&c, &id, false).await, "bold done\n");
    assert!(text(&c, &id, true).await.contains("\u{1b}[1m"));
    let refused = c
        .read(pb::ReadRequest {
            process_id: id.clone(),
            screen: true,
            ..Default::default()
        })
        .await
        .expect_err("no screen is kept");
    assert!(
        refused.message().contains("ran on a terminal"),
        "{refused:?}"
    );
}
