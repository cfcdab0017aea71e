//! Installed copies of the binaries, as each package lays them out: placing the built binaries
//! into a layout, and driving an installed `mcp-yieldshell` (native or behind the npm launcher)
//! with a real MCP client until it has started its own daemon.
//!
//! The installed shim runs with a `PATH` of system directories only and no
//! `YIELDSHELL_DAEMON_BIN`, so the daemon it starts can only be the one its layout put beside it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::binaries::bin;
use super::fixture::TestDaemon;
use super::poll::eventually;
use crate::mcp::{Mcp, body};

/// `PATH` for an installed program: system directories only, so no workspace or
/// `~/.cargo/bin` binary can stand in for the installed one.
pub const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Puts the built `names` into `dir` (created), as hard links where the filesystem allows (the
/// debug binaries are large) and copies elsewhere. Returns `dir`.
pub fn place_binaries(dir: &Path, names: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    for name in names {
        let to = dir.join(name);
        if std::fs::hard_link(bin(name), &to).is_err() {
            std::fs::copy(bin(name), &to).expect("copy binary");
        }
    }
    dir.to_path_buf()
}

/// `program` (an installed shim, or `node` with a launcher script in `args`) set up to serve
/// MCP against `d`'s socket and state directory, with nothing pointing it at a daemon binary.
pub fn installed_shim_command(
    program: &Path,
    args: &[&OsStr],
    d: &TestDaemon,
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(program);
    c.args(args)
        .env("PATH", SYSTEM_PATH)
        .env("YIELDSHELL_SOCKET", &d.socket)
        .env("YIELDSHELL_STATE_DIR", &d.state)
        .env_remove("YIELDSHELL_DAEMON_BIN")
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .current_dir(d.dir.path())
        .kill_on_drop(true);
    c
}

/// Drives a prepared shim command with a real MCP client: `tools/list` must offer `exec`, and
/// an `exec` must run. Returns the executable of the daemon that the shim started.
pub async fn serve_one_exec(cmd: tokio::process::Command, d: &TestDaemon) -> PathBuf {
    let mcp = Mcp::start_command(cmd).await;
    let tools = mcp.tools().await;
    assert!(
        tools.iter().any(|t| t.name == "exec"),
        "tools/list: {:?}",
        tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()
    );
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo installed", "side_effects": ["NONE"]}),
        )
        .await,
    );
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["stdout"], "installed\n", "{b}");
    mcp.close().await;
    started_daemon_exe(d).await
}

/// The executable of the daemon serving `d`'s state directory (from its instance lock).
pub async fn started_daemon_exe(d: &TestDaemon) -> PathBuf {
    let pid = eventually("the started daemon's pid in its instance lock", || async {
        yieldshell_proto::instance_lock::recorded_pid(&d.state)
    })
    .await;
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("the daemon's /proc/PID/exe")
}
