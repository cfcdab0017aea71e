//! `yieldctl service install|uninstall|status`: run `yieldshelld` under the user's service
//! manager — systemd user units on Linux ([`systemd`]), a launchd agent on macOS (`launchd.rs`).
//!
//! Each platform module builds a [`Plan`](plan::Plan) (files to write, commands to run); this
//! module prints it (`--dry-run`) or carries it out. Other platforms get a clear error: there
//! the daemon runs by hand or is started by its clients.

mod plan;

// Each platform's code is compiled where it runs, and everywhere for the unit tests of what it
// renders (so the Linux CI checks the launchd plist too).
#[cfg(any(target_os = "macos", test))]
#[cfg_attr(
    not(target_os = "macos"),
    allow(dead_code, reason = "only its rendering is tested off macOS")
)]
mod launchd;
#[cfg(any(target_os = "linux", test))]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "only its rendering is tested off Linux")
)]
mod systemd;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Serialize;
use yieldshell_proto::client::{self, ConnectOptions};
use yieldshell_proto::pb;

use crate::{Ctx, exit, render};

/// Service subcommands.
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Install and start the per-user service: systemd user units (socket activation) on Linux, a
    /// launchd agent on macOS.
    Install(InstallArgs),
    /// Stop and remove the per-user service. Stopping it stops every process the daemon runs.
    Uninstall(UninstallArgs),
    /// Show what is installed, enabled and running.
    Status(StatusArgs),
}

/// Arguments of `service install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Print the files and commands instead of writing and running them; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The yieldshelld the service runs [default: $YIELDSHELL_DAEMON_BIN, else next to yieldctl,
    /// else on PATH].
    #[arg(long, value_name = "PATH")]
    daemon_bin: Option<PathBuf>,
}

/// Arguments of `service uninstall`.
#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// Print the commands and files it would run and remove; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `service status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The yieldshelld to compare the installed files with [default: as for install].
    #[arg(long, value_name = "PATH")]
    daemon_bin: Option<PathBuf>,
}

/// One installed file (unit or plist) and what the service manager says about it.
#[derive(Debug, Serialize)]
pub struct UnitStatus {
    /// Unit name or plist file name.
    pub name: String,
    /// Where the file is (or would be).
    pub path: PathBuf,
    /// Whether the file exists.
    pub installed: bool,
    /// Whether it is exactly what `install` would write now (`None`: not installed, or no daemon
    /// binary found to compare with).
    pub up_to_date: Option<bool>,
    /// systemd: `is-enabled`; launchd: loaded or not.
    pub enabled: String,
    /// systemd: `is-active`; launchd: the job's state.
    pub active: String,
}

/// The answer of `service status`.
#[derive(Debug, Serialize)]
pub struct Status {
    /// `systemd` or `launchd`.
    pub manager: &'static str,
    /// The unit (or agent) directory.
    pub dir: PathBuf,
    /// The daemon the installed unit starts, when it can be read from it.
    pub installed_binary: Option<String>,
    /// The installed files.
    pub units: Vec<UnitStatus>,
    /// The socket the service serves.
    pub socket: Option<PathBuf>,
    /// Pid of the daemon answering on that socket, if one was asked.
    pub daemon_pid: Option<u32>,
    /// Anything worth knowing.
    pub notes: Vec<String>,
}

#[cfg(target_os = "linux")]
use systemd as platform;

#[cfg(target_os = "macos")]
use launchd as platform;

/// The platforms without a supported service manager.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod platform {
    use std::path::PathBuf;

    use super::Status;
    use super::plan::Plan;

    const UNSUPPORTED: &str = "`yieldctl service` supports systemd (Linux) and launchd (macOS) \
        only; here, run yieldshelld yourself or let clients start it";

    pub async fn install_plan(_bin: PathBuf) -> anyhow::Result<Plan> {
        anyhow::bail!(UNSUPPORTED)
    }

    pub async fn uninstall_plan() -> anyhow::Result<Plan> {
        anyhow::bail!(UNSUPPORTED)
    }

    pub async fn status(_bin: Option<PathBuf>) -> anyhow::Result<Status> {
        anyhow::bail!(UNSUPPORTED)
    }
}

pub async fn run(ctx: &Ctx, cmd: ServiceCommand) -> anyhow::Result<u8> {
    match cmd {
        ServiceCommand::Install(a) => {
            let bin = daemon_binary(a.daemon_bin.as_deref())?;
            let plan = platform::install_plan(bin).await?;
            apply(ctx, &plan, a.dry_run)
        }
        ServiceCommand::Uninstall(a) => {
            let plan = platform::uninstall_plan().await?;
            apply(ctx, &plan, a.dry_run)
        }
        ServiceCommand::Status(a) => {
            // A missing daemon binary must not hide what is installed: compare only if found.
            let bin = daemon_binary(a.daemon_bin.as_deref()).ok();
            let status = platform::status(bin).await?;
            print_status(ctx, &status)
        }
    }
}

/// Prints the plan (dry run) or carries it out.
fn apply(ctx: &Ctx, plan: &plan::Plan, dry_run: bool) -> anyhow::Result<u8> {
    if dry_run {
        if ctx.json {
            render::json(&serde_json::json!({ "dry_run": true, "plan": plan }))?;
        } else {
            render::stdout_bytes(plan.script().as_bytes())?;
        }
        return Ok(exit::OK);
    }
    plan.execute(ctx.json)?;
    if ctx.json {
        render::json(&serde_json::json!({ "dry_run": false, "plan": plan }))?;
    } else {
        for note in &plan.notes {
            eprintln!("note: {note}");
        }
        if plan.action == "install" {
            eprintln!(
                "installed: the daemon starts on the first connection; `yieldctl daemon status` shows it"
            );
        }
    }
    Ok(exit::OK)
}

fn print_status(ctx: &Ctx, s: &Status) -> anyhow::Result<u8> {
    if ctx.json {
        render::json(s)?;
        return Ok(exit::OK);
    }
    render::line(format_args!("manager      {}", s.manager))?;
    render::line(format_args!("directory    {}", s.dir.display()))?;
    for u in &s.units {
        let file = match (u.installed, u.up_to_date) {
            (false, _) => "not installed",
            (true, Some(false)) => "installed, differs from what `service install` writes now",
            (true, _) => "installed",
        };
        render::line(format_args!("{}", u.name))?;
        render::line(format_args!("  file       {file}"))?;
        render::line(format_args!("  enabled    {}", u.enabled))?;
        render::line(format_args!("  active     {}", u.active))?;
    }
    if let Some(bin) = &s.installed_binary {
        render::line(format_args!("binary       {bin}"))?;
    }
    if let Some(socket) = &s.socket {
        render::line(format_args!("socket       {}", socket.display()))?;
    }
    match s.daemon_pid {
        Some(pid) => render::line(format_args!("daemon       pid {pid}"))?,
        None => render::line(format_args!("daemon       not running"))?,
    }
    for note in &s.notes {
        render::line(format_args!("note         {note}"))?;
    }
    Ok(exit::OK)
}

/// Asks whoever answers on `socket` for its handshake; never starts a daemon.
// Used by the systemd and launchd backends only: Windows has no service backend yet.
#[cfg_attr(windows, allow(dead_code))]
pub async fn probe_daemon(socket: &Path) -> Option<pb::HelloResponse> {
    let mut opts = ConnectOptions::from_env("yieldctl");
    opts.socket = socket.to_path_buf();
    opts.autostart = false;
    client::connect(&opts).await.ok().map(|c| c.hello)
}

/// The daemon the service runs, as an absolute path: `--daemon-bin`, else
/// `$YIELDSHELL_DAEMON_BIN`, else `yieldshelld` next to this `yieldctl`, else on `PATH`.
///
/// Symlinks are kept, not resolved: a package manager's `bin/yieldshelld` link keeps pointing
/// at the current version after an upgrade, where its resolved target would not.
fn daemon_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let name = if cfg!(windows) {
        "yieldshelld.exe"
    } else {
        "yieldshelld"
    };
    let chosen = explicit.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(yieldshell_proto::paths::ENV_DAEMON_BIN)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let found = match chosen {
        Some(p) => p,
        None => {
            let sibling = std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join(name)))
                .filter(|p| is_executable(p));
            let on_path = || {
                std::env::var_os("PATH").and_then(|path| {
                    std::env::split_paths(&path)
                        .map(|dir| dir.join(name))
                        .find(|p| is_executable(p))
                })
            };
            sibling.or_else(on_path).ok_or_else(|| {
                anyhow::anyhow!(
                    "no {name} next to yieldctl or on PATH; install it (see packaging/README.md) \
                     or pass --daemon-bin"
                )
            })?
        }
    };
    let absolute = std::path::absolute(&found)?;
    if !is_executable(&absolute) {
        anyhow::bail!("{} is not an executable file", absolute.display());
    }
    Ok(absolute)
}

fn is_executable(p: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(p) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}
