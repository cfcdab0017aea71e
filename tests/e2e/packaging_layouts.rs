//! The shim finds `yieldshelld` beside itself in every install layout — a Python environment's
//! `bin` (pip, uvx; pipx's symlink into it), the npm platform package's `bin/` behind the real
//! launcher script, the release tarball's `bin/`, `cargo install`'s `~/.cargo/bin` — with a
//! `PATH` that holds no daemon and no `YIELDSHELL_DAEMON_BIN`; and when there is none anywhere,
//! the error says where it looked and names the variable.
//!
//! These use the workspace's debug binaries laid out as each package lays them out, so they run
//! in the normal suite; `packaging_dist` checks the same with the real artifacts.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::json;

use crate::helper::{
    TestDaemon, installed_shim_command, place_binaries, require_tool, serve_one_exec,
};
use crate::mcp::{Mcp, is_error, text_of};

const PAIR: &[&str] = &["mcp-yieldshell", "yieldshelld"];

/// Lays the shim and the daemon out in `rel` under a fresh directory, runs the shim from
/// there, and checks that the daemon it started is the one beside it.
async fn the_shim_starts_the_daemon_beside_it_in(rel: &str) {
    let d = TestDaemon::unstarted();
    let dir = place_binaries(&d.dir.path().join(rel), PAIR);
    let cmd = installed_shim_command(&dir.join("mcp-yieldshell"), &[], &d);
    assert_eq!(
        serve_one_exec(cmd, &d).await,
        dir.join("yieldshelld"),
        "{rel}"
    );
}

#[tokio::test]
async fn a_python_environment_bin() {
    the_shim_starts_the_daemon_beside_it_in("venv/bin").await;
}

#[tokio::test]
async fn the_release_tarball_bin() {
    the_shim_starts_the_daemon_beside_it_in("yieldshell-0.0.0-x86_64-unknown-linux-gnu/bin").await;
}

#[tokio::test]
async fn cargo_install_bin() {
    the_shim_starts_the_daemon_beside_it_in(".cargo/bin").await;
}

#[tokio::test]
async fn a_pipx_symlink_into_the_environment() {
    // pipx links `~/.local/bin/mcp-yieldshell` to its venv's copy; the daemon is only in the
    // venv, so the shim must look beside its resolved executable, not beside the link.
    let d = TestDaemon::unstarted();
    let venv_bin = place_binaries(&d.dir.path().join("pipx/venvs/yieldshell/bin"), PAIR);
    let local_bin = d.dir.path().join("local/bin");
    std::fs::create_dir_all(&local_bin).expect("mkdir");
    std::os::unix::fs::symlink(
        venv_bin.join("mcp-yieldshell"),
        local_bin.join("mcp-yieldshell"),
    )
    .expect("symlink");
    let cmd = installed_shim_command(&local_bin.join("mcp-yieldshell"), &[], &d);
    assert_eq!(serve_one_exec(cmd, &d).await, venv_bin.join("yieldshelld"));
}

#[tokio::test]
#[ignore = "needs node: run .ci/test-extra"]
async fn the_npm_launcher_and_its_platform_package() {
    // The real launcher (`packaging/npm/yieldshell`) under node, with the platform package
    // beside it in node_modules as npm installs them.
    let node = require_tool("node", "nodejs");
    let d = TestDaemon::unstarted();
    let modules = d.dir.path().join("node_modules");
    let launcher = modules.join("yieldshell");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/npm/yieldshell");
    std::fs::create_dir_all(launcher.join("bin")).expect("mkdir");
    for file in ["package.json", "launch.js", "bin/mcp-yieldshell.js"] {
        std::fs::copy(source.join(file), launcher.join(file)).expect("copy launcher");
    }
    let platform = modules.join(format!("@yieldshell/{}", npm_platform()));
    std::fs::create_dir_all(&platform).expect("mkdir");
    std::fs::write(
        platform.join("package.json"),
        json!({"name": format!("@yieldshell/{}", npm_platform()), "version": "0.0.0"}).to_string(),
    )
    .expect("platform package.json");
    let bin_dir = place_binaries(&platform.join("bin"), PAIR);
    let script = launcher.join("bin/mcp-yieldshell.js");
    let cmd = installed_shim_command(&node, &[script.as_os_str()], &d);
    assert_eq!(serve_one_exec(cmd, &d).await, bin_dir.join("yieldshelld"));
}

/// npm's name for this machine (`process.platform`-`process.arch`), as the launcher maps it.
fn npm_platform() -> &'static str {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("macos", "aarch64") => "darwin-arm64",
        ("macos", _) => "darwin-x64",
        (_, "aarch64") => "linux-arm64",
        _ => "linux-x64",
    }
}

#[tokio::test]
async fn without_a_daemon_anywhere_the_error_names_where_it_looked() {
    let d = TestDaemon::unstarted();
    let dir = place_binaries(&d.dir.path().join("lonely/bin"), &["mcp-yieldshell"]);
    let cmd = installed_shim_command(&dir.join("mcp-yieldshell"), &[] as &[&OsStr], &d);
    let mcp = Mcp::start_command(cmd).await;
    let r = mcp
        .call("exec", json!({"command": "true", "side_effects": ["NONE"]}))
        .await;
    assert!(is_error(&r), "{r:?}");
    let text = text_of(&r);
    for part in [
        format!("beside this program in {}", dir.display()),
        "on PATH (/usr/local/bin:/usr/bin:/bin)".to_string(),
        "YIELDSHELL_DAEMON_BIN".to_string(),
    ] {
        assert!(text.contains(&part), "{part:?} missing from: {text}");
    }
    mcp.close().await;
}
