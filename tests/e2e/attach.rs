//! `yieldctl attach` as a person uses it (issue 12, item 4; ARCHITECTURE.md, "Terminal processes"): a real terminal, from a
//! terminal multiplexer (tmux, on its own server socket in the test's temp dir), typing keys with
//! `send-keys` and reading what the person sees with `capture-pane`. Each wait polls the pane
//! against one generous timeout.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, bin, eventually, eventually_blocking, json, require_tool, run};

/// A tmux server of its own with one window running a plain `sh`, in which the test types
/// commands. The server is killed on drop.
struct Pane {
    tmux: PathBuf,
    socket: PathBuf,
}

impl Pane {
    /// A 100×30 window whose shell reaches the test daemon the way `TestDaemon::yieldctl` does.
    fn open(d: &TestDaemon) -> Pane {
        let tmux = require_tool("tmux", "tmux");
        let pane = Pane {
            tmux,
            socket: d.dir.path().join("tmux.sock"),
        };
        let ctl_dir = bin("yieldctl")
            .parent()
            .expect("bin dir")
            .display()
            .to_string();
        let path = format!(
            "{ctl_dir}:{}",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let env = [
            ("YIELDSHELL_SOCKET", d.socket.display().to_string()),
            ("YIELDSHELL_STATE_DIR", d.state.display().to_string()),
            ("YIELDSHELL_NO_AUTOSTART", "1".into()),
            ("PATH", path),
            ("PS1", "$ ".into()),
            ("TERM", "xterm-256color".into()),
        ];
        let mut cmd = pane.command();
        cmd.args(["new-session", "-d", "-x", "100", "-y", "30", "-c"])
            .arg(d.dir.path());
        // Through env(1): tmux's own `-e` does not reliably override PATH for the first window.
        cmd.arg("env");
        for (k, v) in &env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg("sh");
        let out = run(&mut cmd);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // `$ `, or `# ` for root (dash keeps its own prompt for root).
        pane.wait_for("the shell's prompt", |s| s.trim_end().ends_with(['$', '#']));
        pane
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.tmux);
        c.arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .stdin(Stdio::null());
        c
    }

    /// Types a line into the pane (the text literally, then Enter).
    fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    /// `tmux send-keys` with these arguments (key names like `C-]`, or `-l TEXT`).
    fn keys(&self, args: &[&str]) {
        let out = run(self.command().args(["send-keys", "-t", "0"]).args(args));
        assert!(out.status.success(), "send-keys {args:?}");
    }

    /// What the pane shows now (with its scrollback).
    fn text(&self) -> String {
        let out = run(self
            .command()
            .args(["capture-pane", "-p", "-J", "-S", "-200", "-t", "0"]));
        assert!(out.status.success(), "capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the pane until `check` holds; on timeout the failure shows the pane.
    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually_blocking(what, || {
                last = self.text();
                check(&last).then(|| last.clone())
            })
        }));
        match found {
            Ok(text) => text,
            Err(_) => panic!("timed out waiting for {what}; the pane shows:\n{last}"),
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether a line of the pane starts with `text` (a line the shell printed, not the command line
/// typed, which starts with the prompt).
fn said(pane_text: &str, text: &str) -> bool {
    pane_text.lines().any(|l| l.starts_with(text))
}

/// Starts `command` in the background through `yieldctl exec` and returns its id.
fn exec_background(d: &TestDaemon, args: &[&str], command: &str) -> String {
    let out = run(d
        .yieldctl()
        .args(["--json", "exec", "--yield-ms", "200"])
        .args(args)
        .args(["--", command]));
    let v = json(&out);
    assert_eq!(v["status"], "backgrounded", "{v}");
    v["process_id"].as_str().expect("id").to_string()
}

/// The whole log of a process, escape sequences removed (a terminal process's default).
async fn log_of(d: &TestDaemon, id: &str) -> String {
    let r = d
        .session()
        .read(pb::ReadRequest {
            process_id: id.into(),
            since_seq: Some(1),
            ..Default::default()
        })
        .await
        .expect("read");
    String::from_utf8_lossy(&r.output.expect("output").stdout).into_owned()
}

async fn is_running(d: &TestDaemon, id: &str) -> bool {
    let r = d
        .session()
        .read(pb::ReadRequest {
            process_id: id.into(),
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await
        .expect("read");
    r.process.expect("process").status == pb::ProcessStatus::Running as i32
}

/// After a detach the person's terminal is back in its normal mode: line editing and echo on.
fn assert_terminal_mode_restored(pane: &Pane) {
    pane.type_line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo");
    // stty lists icanon before echo: once an echo flag shows, both have.
    let text = pane.wait_for("stty's answer", |s| {
        s.lines().any(|l| l.trim() == "echo" || l.trim() == "-echo")
    });
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert!(
        lines.contains(&"icanon") && lines.contains(&"echo"),
        "canonical mode and echo are on again:\n{text}"
    );
    assert!(
        !lines.contains(&"-icanon") && !lines.contains(&"-echo"),
        "{text}"
    );
}

#[tokio::test]
#[ignore = "needs tmux and python3: run .ci/test-extra"]
async fn a_person_types_into_a_terminal_repl_and_detaches_leaving_it_running() {
    let d = TestDaemon::start().await;
    let id = exec_background(&d, &["--tty", "--cols", "80", "--rows", "24"], "python3 -q");
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}"));
    pane.wait_for("python's prompt on the attached screen", |s| {
        s.contains(">>>")
    });
    pane.keys(&["-l", "6*7"]);
    pane.keys(&["Enter"]);
    pane.wait_for("the answer", |s| s.lines().any(|l| l.trim() == "42"));
    pane.keys(&["C-]"]);
    let after = pane.wait_for("the detach message", |s| {
        s.contains(&format!("detached from {id} (still running)"))
    });
    assert!(after.contains("42"), "{after}");
    assert_terminal_mode_restored(&pane);

    assert!(
        is_running(&d, &id).await,
        "{id} still runs after the detach"
    );
    let ps = run(d.yieldctl().args(["ps"]));
    let table = String::from_utf8_lossy(&ps.stdout).into_owned();
    let row = table
        .lines()
        .find(|l| l.starts_with(id.as_str()))
        .expect("listed");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells[2].starts_with("running"), "{row}");
    assert_eq!(cells[3], "tty", "{table}");
    // What the person typed (the terminal's echo) and the answer are in the log for the agent.
    let log = eventually("the log to hold the session", || async {
        let log = log_of(&d, &id).await;
        (log.contains("6*7") && log.contains("42")).then_some(log)
    })
    .await;
    assert!(log.contains(">>>"), "{log}");
    run(d.yieldctl().args(["stop", &id]));
}

#[tokio::test]
#[ignore = "needs tmux and python3: run .ci/test-extra"]
async fn the_program_gets_the_persons_window_size_and_its_changes() {
    let d = TestDaemon::start().await;
    let id = exec_background(&d, &["--tty", "--cols", "40", "--rows", "10"], "python3 -q");
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}"));
    pane.wait_for("python's prompt", |s| s.contains(">>>"));
    let ask = "import os; print('size', *os.get_terminal_size())";
    pane.type_line(ask);
    pane.wait_for("the size at attach (the pane's 100x30)", |s| {
        said(s, "size 100 30")
    });
    let out = run(pane
        .command()
        .args(["resize-window", "-t", "0", "-x", "90", "-y", "20"]));
    assert!(out.status.success(), "resize-window");
    // yieldctl gets SIGWINCH and resizes the process's terminal: the daemon reports it, and
    // the program then sees it.
    eventually("the daemon to report the new size", || async {
        let r = d
            .session()
            .read(pb::ReadRequest {
                process_id: id.clone(),
                max_output_bytes: Some(1),
                ..Default::default()
            })
            .await
            .expect("read");
        let p = r.process.expect("process");
        (p.cols == 90 && p.rows == 20).then_some(())
    })
    .await;
    pane.type_line(ask);
    pane.wait_for("the new size", |s| said(s, "size 90 20"));
    pane.keys(&["C-]"]);
    pane.wait_for("the detach", |s| said(s, "detached from"));
    run(d.yieldctl().args(["stop", &id]));
}

/// The pid of `yieldctl attach` running in the pane's shell.
fn attach_pid(pane: &Pane) -> i32 {
    let out = run(pane
        .command()
        .args(["list-panes", "-t", "0", "-F", "#{pane_pid}"]));
    let shell: i32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pane pid");
    eventually_blocking("yieldctl to run in the pane", || {
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().find_map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == "yieldctl").then(|| pid.parse().ok())?
        })
    })
}

#[tokio::test]
#[ignore = "needs tmux and python3: run .ci/test-extra"]
async fn sigterm_to_an_attached_yieldctl_restores_the_terminal_and_leaves_the_process() {
    let d = TestDaemon::start().await;
    let id = exec_background(&d, &["--tty"], "python3 -q");
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}; echo \"attach exit $?\""));
    pane.wait_for("python's prompt", |s| s.contains(">>>"));
    let pid = attach_pid(&pane);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill");
    let text = pane.wait_for("yieldctl to leave", |s| said(s, "attach exit "));
    assert!(said(&text, "attach exit 143"), "{text}");
    assert!(
        text.contains(&format!("detached from {id} (still running)")),
        "{text}"
    );
    assert_terminal_mode_restored(&pane);
    assert!(is_running(&d, &id).await);
    run(d.yieldctl().args(["stop", &id]));
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn attach_ends_with_the_process_and_its_exit_code() {
    let d = TestDaemon::start().await;
    let id = exec_background(&d, &["--tty"], "printf 'code? '; read code; exit \"$code\"");
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}; echo \"attach exit $?\""));
    pane.wait_for("the prompt", |s| s.contains("code?"));
    pane.type_line("7");
    pane.wait_for("the end", |s| said(s, "attach exit 7"));
    let text = pane.text();
    assert!(
        text.contains(&format!("{id} completed (exit code 7)")),
        "{text}"
    );
    assert_terminal_mode_restored(&pane);
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn a_person_types_lines_into_a_pipe_process_and_ctrl_c_detaches() {
    let d = TestDaemon::start().await;
    let id = exec_background(
        &d,
        &[],
        "echo ready; while read line; do echo \"got $line\"; done",
    );
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}; echo \"attach exit $?\""));
    pane.wait_for("the banner and the last output", |s| {
        s.contains(&format!("attached to {id}")) && s.contains("ready")
    });
    pane.type_line("hello there");
    pane.wait_for("the process's answer", |s| s.contains("got hello there"));
    pane.keys(&["C-c"]);
    let text = pane.wait_for("the detach", |s| said(s, "attach exit "));
    assert!(
        text.contains(&format!("detached from {id} (still running)")),
        "{text}"
    );
    assert!(text.contains("attach exit 0"), "{text}");
    assert!(is_running(&d, &id).await, "Ctrl-C did not reach {id}");

    // Ctrl-D detaches too, and leaves stdin open: the process still answers a later write.
    pane.type_line(&format!("yieldctl attach {id}; echo \"second exit $?\""));
    pane.wait_for("the second banner", |s| {
        s.matches(&format!("attached to {id}")).count() == 2
    });
    pane.keys(&["C-d"]);
    pane.wait_for("the second detach", |s| said(s, "second exit 0"));
    assert!(is_running(&d, &id).await);
    let wrote = run(d.yieldctl().args(["write", "--newline", &id, "later"]));
    assert!(wrote.status.success());
    eventually("the answer to a later write", || async {
        log_of(&d, &id).await.contains("got later").then_some(())
    })
    .await;
    assert_terminal_mode_restored(&pane);
    run(d.yieldctl().args(["stop", &id]));
}

#[tokio::test]
async fn attach_without_a_terminal_says_so_and_fails() {
    let d = TestDaemon::start().await;
    let id = exec_background(&d, &[], "read line");
    let out = run(d.yieldctl().args(["attach", &id]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(err.contains(&format!("yieldctl write {id}")), "{err}");
    run(d.yieldctl().args(["stop", &id]));
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn attach_to_an_ended_process_says_how_it_ended() {
    let d = TestDaemon::start().await;
    let out = json(&run(d.yieldctl().args(["--json", "exec", "--", "exit 3"])));
    let id = out["process_id"].as_str().expect("id").to_string();
    let pane = Pane::open(&d);
    pane.type_line(&format!("yieldctl attach {id}; echo \"attach exit $?\""));
    let text = pane.wait_for("the refusal", |s| said(s, "attach exit "));
    assert!(
        text.contains(&format!("{id} is not running (exit code 3)")),
        "{text}"
    );
    assert!(text.contains("attach exit 1"), "{text}");
}
