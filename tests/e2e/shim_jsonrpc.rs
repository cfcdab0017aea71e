//! The shim's JSON-RPC framing through the built binary over real pipes (issue 16, item 15):
//! a request whose `id` can be read always gets an answer with that `id`, even when the line
//! does not decode (a lone surrogate escape, invalid UTF-8, the wrong shape, over the size
//! limit), and the session goes on serving; a line that is not JSON and has no `id` gets no
//! answer. Replies come in the order the lines were sent, so "the next frame" is exact: a stray
//! reply to a line that should get none would show up as the next frame.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};

use serde_json::{Value, json};

use crate::helper::{TIMEOUT, TestDaemon, bin, eventually_blocking};

/// The shim with its stdin and a thread reading its stdout line by line.
struct Pipes {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Pipes {
    /// Starts the shim with no daemon (auto-start off): `initialize` and `tools/list` need
    /// none, and a tool call answers `daemon_unavailable`.
    fn start(d: &TestDaemon) -> Pipes {
        let mut child = std::process::Command::new(bin("mcp-yieldshell"))
            .env("YIELDSHELL_SOCKET", &d.socket)
            .env("YIELDSHELL_STATE_DIR", &d.state)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .current_dir(d.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-yieldshell");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut pipes = Pipes {
            stdin: child.stdin.take(),
            child,
            lines,
        };
        pipes.send(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        );
        assert_eq!(pipes.next_frame()["id"], 1);
        pipes.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        pipes
    }

    /// Writes `line` and a newline.
    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(line)
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush())
            .expect("write to the shim");
    }

    /// The next line the shim prints, parsed as a JSON-RPC 2.0 frame, within [`TIMEOUT`].
    fn next_frame(&mut self) -> Value {
        let line = match self.lines.recv_timeout(TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!("no frame from the shim within {TIMEOUT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the shim closed its stdout"),
        };
        let frame: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the shim printed a non-JSON line ({e}): {line:?}"));
        assert_eq!(frame["jsonrpc"], "2.0", "{frame}");
        frame
    }

    /// The next frame must be a JSON-RPC error for `id` with `code`.
    fn expect_error(&mut self, id: Value, code: i64) -> Value {
        let frame = self.next_frame();
        assert_eq!(frame["id"], id, "{frame}");
        assert_eq!(frame["error"]["code"], code, "{frame}");
        frame
    }

    /// A `tools/list` must still be answered with the tools.
    fn expect_serving(&mut self, id: u64) {
        self.send(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#).as_bytes());
        let frame = self.next_frame();
        assert_eq!(frame["id"], id, "{frame}");
        let tools = frame["result"]["tools"].as_array().expect("tools");
        assert!(tools.iter().any(|t| t["name"] == "exec"), "{frame}");
    }

    /// Closes stdin; the shim must exit 0 (EOF ends it like any client going away).
    fn close(mut self) {
        drop(self.stdin.take());
        let status =
            eventually_blocking("the shim to exit", || self.child.try_wait().ok().flatten());
        assert_eq!(status.code(), Some(0));
    }
}

#[test]
fn a_request_that_does_not_decode_gets_an_error_with_its_id_and_the_session_goes_on() {
    let d = TestDaemon::unstarted();
    let mut shim = Pipes::start(&d);

    // A lone surrogate escape in a tool argument: valid framing, not valid JSON text.
    shim.send(
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo \udcff","side_effects":["NONE"]}}}"#,
    );
    let e = shim.expect_error(json!(2), -32700);
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not valid JSON")),
        "{e}"
    );
    shim.expect_serving(3);

    // Invalid UTF-8 inside a string, with the id last (as the TypeScript SDK orders members).
    let mut line =
        br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"exec","arguments":{"command":"echo "#
            .to_vec();
    line.extend_from_slice(b"\xff\xfe");
    line.extend_from_slice(br#"","side_effects":["NONE"]}},"id":"utf8"}"#);
    shim.send(&line);
    shim.expect_error(json!("utf8"), -32700);

    // Well-formed JSON of the wrong shape: params that are not an object, a method that is not
    // a string.
    shim.send(br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":5}"#);
    shim.expect_error(json!(4), -32602);
    shim.send(br#"{"jsonrpc":"2.0","id":5,"method":42}"#);
    shim.expect_error(json!(5), -32600);

    // Over the 16 MiB message limit: dropped unread (never buffered), but answered; the id
    // may come after the 17 MiB.
    let mut big =
        br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"exec","arguments":{"command":""#
            .to_vec();
    big.resize(big.len() + 17 * 1024 * 1024, b'x');
    big.extend_from_slice(br#"","side_effects":["NONE"]}},"id":6}"#);
    shim.send(&big);
    let e = shim.expect_error(json!(6), -32600);
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("16 MiB")),
        "{e}"
    );

    shim.expect_serving(7);
    // A real tool call still reaches the tool (which says the daemon is not there).
    shim.send(
        br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"ps","arguments":{}}}"#,
    );
    let r = shim.next_frame();
    assert_eq!(r["id"], 8);
    assert_eq!(
        r["result"]["structuredContent"]["error_kind"], "daemon_unavailable",
        "{r}"
    );
    shim.close();
}

#[test]
fn a_line_that_is_not_json_and_has_no_id_gets_no_answer() {
    let d = TestDaemon::unstarted();
    let mut shim = Pipes::start(&d);
    // Ignored as the official SDKs do: replying to garbage can start an error storm with a
    // peer that echoes it. The next frame is the answer to the request that follows.
    shim.send(b"{this is not json");
    shim.send(b"\x01\x02garbage \xff");
    shim.send(br#"{"method":"tools/call","params":{"arguments":{"command":"\udcff"}}}"#);
    shim.send(b"");
    shim.expect_serving(2);
    shim.close();
}
