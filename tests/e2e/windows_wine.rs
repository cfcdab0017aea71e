//! The Windows build under Wine: the `.exe` files of `cargo build --target x86_64-pc-windows-gnu`
//! start a daemon on a named pipe, `yieldctl.exe` runs, lists, reads and stops processes through
//! it, and `mcp-yieldshell.exe` serves a real MCP client over stdio.
//!
//! Ignored in the normal suite (they need Wine, the mingw linker and the Windows build);
//! `.ci/test-extra windows` builds the Windows binaries (its `dist-check` profile, named by `YIELDSHELL_WINDOWS_PROFILE`:
//! the binaries `packaging/release.sh` then packs) and runs them with `--ignored windows_wine::`.
//! The Wine driving here ([`wine`], [`Finish`], [`windows_path`], [`processes_with`]) is also
//! what `packaging_dist` uses to run the unpacked Windows release.
//!
//! The harness keeps one Wine prefix in the target directory (`wine-prefix`, created on first
//! use: about half a minute) and installs in it a `bcryptprimitives.dll` it compiles with mingw:
//! Rust's standard library imports `ProcessPrng` from that DLL, which Wine 8 lacks, and the
//! ten-line shim (`ProcessPrng` over advapi32's `SystemFunction036`) is enough for the binaries
//! to run. It lives only in the test prefix; nothing ships it.
//!
//! Where Wine differs from Windows, the test says so:
//! - Wine's `cmd.exe` does not parse `@(…)` in a `for` body, and does not echo the body of a
//!   `for` run by `cmd /c` as Windows' does: commands below use `(…)` and assert on lines of their
//!   own output only.
//! - A tree's processes are checked from Linux: Wine runs each Windows process as a Linux process
//!   whose command line is the Windows one (Wine 8's `tasklist` prints nothing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::helper::{eventually_blocking, require_tool, windows_bin};
use crate::mcp::{Mcp, body, is_error};

/// The `ProcessPrng` export Rust's standard library needs and Wine 8 lacks (see the module doc).
const PROCESS_PRNG_C: &str = r#"
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
"#;

/// The prepared Wine prefix.
pub struct Wine {
    wine: PathBuf,
    prefix: PathBuf,
}

/// Creates the prefix (once per test run) and installs the `ProcessPrng` shim in it.
pub fn wine() -> &'static Wine {
    static WINE: OnceLock<Wine> = OnceLock::new();
    WINE.get_or_init(|| {
        let wine = require_tool("wine", "wine");
        let gcc = require_tool("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64");
        // This test binary is `<target>/debug/deps/e2e-…`: the prefix is the target dir's,
        // whichever Windows build (profile, or a release's unpacked files) runs in it.
        let target = std::env::current_exe()
            .expect("current exe")
            .ancestors()
            .nth(3)
            .expect("target dir")
            .to_path_buf();
        let prefix = target.join("wine-prefix");
        let w = Wine { wine, prefix };
        if !w.prefix.join("system.reg").is_file() {
            let out = w
                .command("wineboot")
                .arg("--init")
                .output()
                .expect("wineboot");
            assert!(out.status.success(), "wineboot --init: {out:?}");
        }
        let dll = w
            .prefix
            .join("drive_c/windows/system32/bcryptprimitives.dll");
        if !dll.is_file() {
            let src = tempfile::tempdir().expect("tempdir");
            let c = src.path().join("process_prng.c");
            std::fs::write(&c, PROCESS_PRNG_C).expect("write C source");
            let built = src.path().join("bcryptprimitives.dll");
            let out = Command::new(gcc)
                .args(["-shared", "-o"])
                .arg(&built)
                .arg(&c)
                .args(["-ladvapi32", "-Wl,--kill-at"])
                .output()
                .expect("mingw gcc");
            assert!(
                out.status.success(),
                "building the ProcessPrng shim: {out:?}"
            );
            std::fs::copy(&built, &dll).expect("installing the ProcessPrng shim");
        }
        w
    })
}

impl Wine {
    /// `wine PROGRAM` in the test prefix, quiet, never asking to install Mono or Gecko.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(&self.wine);
        c.arg(program)
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .env_remove("DISPLAY")
            .env_remove("YIELDSHELL_SOCKET")
            .env_remove("YIELDSHELL_STATE_DIR")
            .stdin(Stdio::null());
        c
    }
}

/// Running a command under Wine to its end.
pub trait Finish {
    /// Runs the command to its end (within [`TIMEOUT`](crate::helper::TIMEOUT)) with its output
    /// in files, not pipes. Wine differs from Windows here: a Windows process starts as a Linux
    /// process that inherits every descriptor of its starter, whatever the Windows handles say,
    /// so a daemon a client starts would hold the client's output pipes open, and
    /// `Command::output` would wait for ever.
    fn finish(&mut self) -> Output;
}

impl Finish for Command {
    fn finish(&mut self) -> Output {
        let dir = tempfile::tempdir().expect("tempdir");
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        let mut child = self
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("wine");
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{self:?} did not finish within {:?}",
                    crate::helper::TIMEOUT
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        Output {
            status,
            stdout: std::fs::read(&out).expect("stdout"),
            stderr: std::fs::read(&err).expect("stderr"),
        }
    }
}

/// A Linux path as Windows programs under Wine see it (Wine maps `Z:` to `/`).
pub fn windows_path(p: &Path) -> String {
    format!("Z:{}", p.display()).replace('/', "\\")
}

/// A number no other test of this run uses, for pipe names and markers.
pub fn unique() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    10_000 + (std::process::id() % 8_000) * 10 + n
}

/// `yieldshelld.exe` on a pipe of its own, with a state dir of its own.
struct WinDaemon {
    child: std::process::Child,
    pipe: String,
    dir: tempfile::TempDir,
}

impl WinDaemon {
    fn start() -> WinDaemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let pipe = format!(r"\\.\pipe\yieldshell-test-{}", unique());
        let log = std::fs::File::create(dir.path().join("daemon.out")).expect("log");
        let child = wine()
            .command(windows_bin("yieldshelld"))
            .arg("--socket")
            .arg(&pipe)
            .arg("--state-dir")
            .arg(windows_path(&dir.path().join("state")))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("wine yieldshelld.exe");
        let mut d = WinDaemon { child, pipe, dir };
        eventually_blocking("yieldshelld.exe to answer on its pipe", || {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("yieldshelld.exe exited ({status}): {}", d.log());
            }
            d.yieldctl(&["daemon", "status"])
                .status
                .success()
                .then_some(())
        });
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.out")).unwrap_or_default()
    }

    /// `yieldctl.exe ARGS` against this daemon (never starting one).
    fn yieldctl(&self, args: &[&str]) -> Output {
        wine()
            .command(windows_bin("yieldctl"))
            .args(args)
            .env("YIELDSHELL_SOCKET", &self.pipe)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .finish()
    }

    /// `yieldctl.exe --json ARGS`, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.yieldctl(&all);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("yieldctl {args:?} printed no JSON ({e}): {out:?}"))
    }
}

impl Drop for WinDaemon {
    fn drop(&mut self) {
        // A failed test (a stale binary, say) must not panic again here: the child is killed.
        if !std::thread::panicking() {
            let _ = self.yieldctl(&["daemon", "stop"]);
        }
        let deadline = std::time::Instant::now() + crate::helper::TIMEOUT;
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Linux processes (Wine runs each Windows process as one) whose command line contains any of
/// `needles`.
pub fn processes_with(needles: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if needles.iter().any(|n| line.contains(n.as_str())) {
            found.push(line);
        }
    }
    found
}

#[test]
#[ignore = "needs wine and the Windows build: run .ci/test-extra windows"]
fn exec_returns_a_commands_output_and_exit_code() {
    let d = WinDaemon::start();
    // `hi&`, not `hi &`: cmd's echo keeps the space before `&`.
    let out = d.yieldctl(&["exec", "--", "echo hi& exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\r\n", "{out:?}");
    let r = d.json(&["exec", "--", "echo out& echo err 1>&2& exit 4"]);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["exit_code"], 4, "{r}");
    assert_eq!(r["stdout"], "out\r\n", "{r}");
    assert_eq!(r["stderr"], "err \r\n", "{r}");
    let status = d.json(&["daemon", "status"]);
    assert_eq!(status["containment"], "job-object", "{status}");
}

#[test]
#[ignore = "needs wine and the Windows build: run .ci/test-extra windows"]
fn a_yielded_process_is_listed_read_incrementally_and_stopped_with_its_child() {
    let d = WinDaemon::start();
    let (command, markers) = nested_loop();
    let r = d.json(&["exec", "--yield-ms", "300", "--", &command]);
    assert_eq!(r["status"], "backgrounded", "{r}");
    let id = r["process_id"].as_str().expect("process_id").to_string();

    let ps = d.json(&["ps"]);
    let listed = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {ps}"))
        .clone();
    assert_eq!(listed["status"], "running", "{listed}");

    // Read incrementally: each read continues exactly where the last one ended.
    let first = eventually_blocking("the first tick", || {
        let r = d.json(&["read", &id]);
        r["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("tick 1 \r\n"))
            .then_some(r)
    });
    let next = first["next_seq"].as_u64().expect("next_seq");
    let second = eventually_blocking("output after the first read", || {
        let r = d.json(&["read", &id, "--since", &next.to_string()]);
        r["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("tick 2 \r\n"))
            .then_some(r)
    });
    assert_eq!(second["first_seq"].as_u64(), Some(next), "a gap: {second}");
    assert!(second["next_seq"].as_u64() > Some(next), "{second}");
    let whole = d.json(&["read", &id, "--since", "1"]);
    let joined = format!(
        "{}{}",
        first["stdout"].as_str().unwrap_or_default(),
        second["stdout"].as_str().unwrap_or_default()
    );
    assert!(
        whole["stdout"]
            .as_str()
            .is_some_and(|s| s.starts_with(&joined)),
        "the two reads are not the log's start: {joined:?} vs {whole}"
    );

    // The child and the grandchild run (the grandchild restarts each second: wait for one).
    eventually_blocking("the child and a ping to run", || {
        let found = processes_with(&markers);
        (found.iter().any(|l| l.contains(&markers[0]))
            && found.iter().any(|l| l.contains(&markers[1])))
        .then_some(())
    });
    let stopped = d.json(&["stop", &id]);
    assert_eq!(stopped["stopped"], true, "{stopped}");
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    eventually_blocking("the child and grandchild to be gone", || {
        processes_with(&markers).is_empty().then_some(())
    });
    let ps = d.json(&["ps"]);
    let after = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(after["status"], "stopped", "{after}");
    assert_eq!(after["descendants_running"], 0, "{after}");
}

#[tokio::test]
#[ignore = "needs wine and the Windows build: run .ci/test-extra windows"]
async fn the_mcp_shim_lists_its_tools_and_runs_an_exec() {
    let d = tokio::task::spawn_blocking(WinDaemon::start)
        .await
        .expect("daemon start");
    let mut cmd = tokio::process::Command::from(wine().command(windows_bin("mcp-yieldshell")));
    cmd.env("YIELDSHELL_SOCKET", &d.pipe)
        .env("YIELDSHELL_NO_AUTOSTART", "1");
    let mcp = Mcp::start_command(cmd).await;
    let names = mcp.tool_names().await;
    for tool in ["exec", "read", "write", "wait", "stop", "ps"] {
        assert!(names.iter().any(|n| n == tool), "no {tool}: {names:?}");
    }
    let r = mcp
        .call(
            "exec",
            json!({"command": "echo from-mcp& exit 5", "side_effects": ["NONE"]}),
        )
        .await;
    assert!(!is_error(&r), "{r:?}");
    let b = body(&r);
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["exit_code"], 5, "{b}");
    assert_eq!(b["stdout"], "from-mcp\r\n", "{b}");
    mcp.close().await;
    // Stopping the daemon blocks on yieldctl.exe: off the runtime.
    tokio::task::spawn_blocking(move || drop(d))
        .await
        .expect("daemon stop");
}

#[test]
#[ignore = "needs wine and the Windows build: run .ci/test-extra windows"]
fn a_client_starts_the_daemon_detached_and_daemon_stop_ends_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pipe = format!(r"\\.\pipe\yieldshell-test-{}", unique());
    let client = |args: &[&str]| {
        wine()
            .command(windows_bin("yieldctl"))
            .args(args)
            .env("YIELDSHELL_SOCKET", &pipe)
            .env(
                "YIELDSHELL_STATE_DIR",
                windows_path(&dir.path().join("state")),
            )
            .env(
                "YIELDSHELL_DAEMON_BIN",
                windows_path(&windows_bin("yieldshelld")),
            )
            .env_remove("YIELDSHELL_NO_AUTOSTART")
            .finish()
    };
    let out = client(&["exec", "--", "echo started"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\r\n");
    // The client has exited; the daemon it started still answers.
    let status = client(&["--json", "daemon", "status"]);
    let s: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert!(s["pid"].as_u64().is_some(), "{s}");
    assert!(client(&["daemon", "stop"]).status.success());
    eventually_blocking("the daemon to be gone", || {
        let out = wine()
            .command(windows_bin("yieldctl"))
            .args(["daemon", "status"])
            .env("YIELDSHELL_SOCKET", &pipe)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .finish();
        (!out.status.success()).then_some(())
    });
}

/// A command whose child (an inner `cmd.exe`) runs `ping.exe` (the grandchild) once a second,
/// and the markers of both in their Linux command lines (`1,1,N`, `-w N`).
fn nested_loop() -> (String, [String; 2]) {
    let n = unique();
    (
        format!(
            r#"cmd /c "for /L %i in (1,1,{n}) do (echo tick %i & ping -n 2 -w {n} 127.0.0.1 >nul)""#
        ),
        [format!("1,1,{n}"), format!("-w {n}")],
    )
}

/// The status `ps` reports for `id`.
fn status_of(d: &WinDaemon, id: &str) -> Value {
    let ps = d.json(&["ps"]);
    ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id)
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs wine and the Windows build: run .ci/test-extra windows"]
fn a_timeout_and_the_daemons_shutdown_end_whole_trees() {
    let mut d = WinDaemon::start();
    let (command, markers) = nested_loop();
    let r = d.json(&[
        "exec",
        "--timeout-ms",
        "3000",
        "--yield-ms",
        "300",
        "--",
        &command,
    ]);
    let id = r["process_id"].as_str().expect("process_id").to_string();
    eventually_blocking("the child and a ping to run", || {
        let found = processes_with(&markers);
        markers
            .iter()
            .all(|m| found.iter().any(|l| l.contains(m.as_str())))
            .then_some(())
    });
    eventually_blocking("the timeout to end the process", || {
        (status_of(&d, &id) == "timed_out").then_some(())
    });
    eventually_blocking("the timed-out tree to be gone", || {
        processes_with(&markers).is_empty().then_some(())
    });

    let (command, markers) = nested_loop();
    let r = d.json(&["exec", "--yield-ms", "300", "--", &command]);
    assert_eq!(r["status"], "backgrounded", "{r}");
    eventually_blocking("the second tree to run", || {
        let found = processes_with(&markers);
        markers
            .iter()
            .all(|m| found.iter().any(|l| l.contains(m.as_str())))
            .then_some(())
    });
    let out = d.yieldctl(&["daemon", "stop"]);
    assert!(out.status.success(), "{out:?}");
    eventually_blocking("the daemon to exit", || {
        d.child.try_wait().ok().flatten().map(|_| ())
    });
    eventually_blocking("the daemon's last tree to be gone", || {
        processes_with(&markers).is_empty().then_some(())
    });
}
