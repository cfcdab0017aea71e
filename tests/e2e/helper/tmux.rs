//! A real terminal for tests of what a person sees: a tmux server of its own (socket in the
//! test's temp dir), one window running a plain `sh`, keys typed with `send-keys`, the screen
//! read with `capture-pane`, terminal state (alternate screen, cursor) asked with `display`.
//! Every wait polls the pane against one generous timeout. The server is killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::poll::eventually_blocking;
use super::prerequisites::require_tool;
use super::{bin, run};

/// A tmux window with a shell.
pub struct Tmux {
    tmux: PathBuf,
    socket: PathBuf,
}

impl Tmux {
    /// A `cols`×`rows` window in `dir` whose shell has `env` (plus this build's binaries first
    /// on `PATH`, prompt `$ `, `TERM=xterm-256color`).
    pub fn open(dir: &Path, cols: u16, rows: u16, env: &[(&str, String)]) -> Tmux {
        let tmux = require_tool("tmux", "tmux");
        let t = Tmux {
            tmux,
            socket: dir.join("tmux.sock"),
        };
        let bin_dir = bin("yieldctl")
            .parent()
            .expect("bin dir")
            .display()
            .to_string();
        let path = format!(
            "{bin_dir}:{}",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let mut cmd = t.command();
        cmd.args([
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "-c",
        ])
        .arg(dir);
        // Through env(1): tmux's own `-e` does not reliably override PATH for the first window.
        cmd.arg("env")
            .arg(format!("PATH={path}"))
            .arg("PS1=$ ")
            .arg("TERM=xterm-256color");
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg("sh");
        let out = run(&mut cmd);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t.wait_for("the shell's prompt", |s| s.trim_end().ends_with(['$', '#']));
        t
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

    /// Types a line (the text literally, then Enter).
    pub fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    /// `tmux send-keys` with these arguments (key names like `C-]`, `Escape`, or `-l TEXT`).
    pub fn keys(&self, args: &[&str]) {
        let out = run(self.command().args(["send-keys", "-t", "0"]).args(args));
        assert!(out.status.success(), "send-keys {args:?}");
    }

    /// What the window shows now (the visible screen only).
    pub fn screen(&self) -> String {
        let out = run(self.command().args(["capture-pane", "-p", "-t", "0"]));
        assert!(out.status.success(), "capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `tmux display -p FORMAT` for the window (`#{alternate_on}`, `#{cursor_flag}`, …).
    pub fn display(&self, format: &str) -> String {
        let out = run(self.command().args(["display", "-p", "-t", "0", format]));
        assert!(out.status.success(), "display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Polls the screen until `check` holds; on timeout the failure shows the screen.
    pub fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually_blocking(what, || {
                last = self.screen();
                check(&last).then(|| last.clone())
            })
        }));
        match found {
            Ok(text) => text,
            Err(_) => panic!("timed out waiting for {what}; the screen shows:\n{last}"),
        }
    }

    /// Waits until the shell has its terminal back as a shell wants it: the main screen, the
    /// cursor shown, and (asked with `stty`) line editing and echo on.
    pub fn assert_restored(&self) {
        eventually_blocking("the main screen with the cursor shown", || {
            (self.display("#{alternate_on} #{cursor_flag}") == "0 1").then_some(())
        });
        self.type_line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo");
        let text = self.wait_for("stty's answer", |s| {
            s.lines().any(|l| l.trim() == "echo" || l.trim() == "-echo")
        });
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert!(
            lines.contains(&"icanon") && lines.contains(&"echo"),
            "line editing and echo are on again:\n{text}"
        );
        assert!(
            !lines.contains(&"-icanon") && !lines.contains(&"-echo"),
            "{text}"
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
