//! `yieldctl daemon status|start|stop|restart|logs`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use yieldshell_proto::client::{self, ClientError};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::instance_lock;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::bytes_os;

use crate::{Ctx, exit, render};

/// How long `daemon stop` waits for the daemon to exit: its processes' shutdown grace
/// (`shutdown_grace_ms`, 3 s by default) and SIGKILL waits fit well within it.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Daemon subcommands.
#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Version, pid, uptime, socket, state directory, process counts and memory.
    Status,
    /// Start the daemon if it is not running.
    Start,
    /// Stop the daemon. Its running processes are stopped too (SIGTERM, then SIGKILL), unless
    /// --keep-processes.
    Stop {
        /// Leave every running process running under its holder; the next daemon (started by
        /// `daemon start` or by any client) re-adopts them with their output.
        #[arg(long)]
        keep_processes: bool,
    },
    /// Replace the daemon with the one installed (e.g. after an upgrade), keeping every running
    /// process and its output: the daemon exits leaving them to their holders, and the daemon
    /// binary found the usual way starts and re-adopts them.
    Restart,
    /// Print the daemon's log.
    Logs {
        /// Keep printing new lines.
        #[arg(long, short = 'f')]
        follow: bool,
    },
}

pub async fn run(ctx: &Ctx, cmd: DaemonCommand) -> anyhow::Result<u8> {
    match cmd {
        DaemonCommand::Status => status(ctx).await,
        DaemonCommand::Start => start(ctx).await,
        DaemonCommand::Stop { keep_processes } => stop(ctx, keep_processes).await,
        DaemonCommand::Restart => restart(ctx).await,
        DaemonCommand::Logs { follow } => logs(ctx, follow).await,
    }
}

fn status_json(s: &pb::StatusResponse, socket: &Path) -> serde_json::Value {
    serde_json::json!({
        "version": s.daemon_version,
        "protocol_version": s.protocol_version,
        "pid": s.pid,
        "uptime_ms": s.uptime_ms,
        "started_at": yieldshell_proto::views::format_unix_ms(s.started_at_unix_ms),
        "socket": socket.display().to_string(),
        "state_dir": PathBuf::from(bytes_os(&s.state_dir)).display().to_string(),
        "log_dir": PathBuf::from(bytes_os(&s.log_file)).display().to_string(),
        "running": s.running,
        "records": s.records,
        "sessions": s.sessions,
        "rss_bytes": s.rss_bytes,
        "containment": s.containment,
        "spool_degraded": s.spool_degraded,
    })
}

async fn status(ctx: &Ctx) -> anyhow::Result<u8> {
    let mut conn = client::connect(&ctx.opts).await?;
    let s = client::unary(
        &ctx.opts,
        "Status",
        conn.client.status(pb::StatusRequest {}),
    )
    .await?;
    let v = status_json(&s, &ctx.opts.socket);
    if ctx.json {
        render::json(&v)?;
        return Ok(exit::OK);
    }
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    render::line(format_args!(
        "yieldshelld {} (protocol {})",
        s.daemon_version, s.protocol_version
    ))?;
    render::line(format_args!("pid          {}", s.pid))?;
    render::line(format_args!(
        "uptime       {}",
        render::duration_ms(s.uptime_ms)
    ))?;
    render::line(format_args!("socket       {}", ctx.opts.socket.display()))?;
    render::line(format_args!(
        "state dir    {}",
        v["state_dir"].as_str().unwrap_or_default()
    ))?;
    render::line(format_args!(
        "logs         {}",
        v["log_dir"].as_str().unwrap_or_default()
    ))?;
    render::line(format_args!(
        "processes    {} running, {} records",
        s.running, s.records
    ))?;
    render::line(format_args!("sessions     {}", s.sessions))?;
    render::line(format_args!("memory       {}", mib(s.rss_bytes)))?;
    render::line(format_args!("containment  {}", s.containment))?;
    if s.spool_degraded > 0 {
        render::line(format_args!(
            "warning      {} process(es) could not save all output to disk",
            s.spool_degraded
        ))?;
    }
    Ok(exit::OK)
}

async fn start(ctx: &Ctx) -> anyhow::Result<u8> {
    let mut opts = ctx.opts.clone();
    // An explicit start always may start.
    opts.autostart = true;
    let conn = client::connect_or_start(&opts).await?;
    if ctx.json {
        render::json(&serde_json::json!({
            "pid": conn.hello.pid,
            "version": conn.hello.daemon_version,
            "started": conn.started_daemon,
        }))?;
    } else if conn.started_daemon {
        eprintln!(
            "started yieldshelld {} (pid {})",
            conn.hello.daemon_version, conn.hello.pid
        );
    } else {
        eprintln!(
            "yieldshelld {} already running (pid {})",
            conn.hello.daemon_version, conn.hello.pid
        );
    }
    Ok(exit::OK)
}

/// What became of the daemon `shut_down` was to stop.
enum ShutDown {
    /// None answered on the socket.
    NotRunning,
    /// It was asked to exit, and has.
    Exited(Stopped),
    /// It went away while we asked (its socket closed, or it answered `shutting_down`):
    /// another client's `stop` or `restart` had asked it first. It has exited too (when its
    /// pid could be known; a client starting the next daemon waits for it in any case).
    AlreadyExiting,
}

/// Whether a failed call means the daemon is going away under us: it stopped listening or
/// dropped the connection mid-call, or said it is shutting down.
fn going_away(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::NotDelivered(_) | ClientError::ConnectionLost(_)
    ) || e.kind() == ErrorKind::ShuttingDown
}

/// What a daemon that was asked to exit said, once it has exited.
struct Stopped {
    pid: u32,
    version: String,
    /// Processes it stopped, and processes it left to their holders.
    stopping: u32,
    kept: u32,
}

/// Asks the daemon to exit (leaving its processes to their holders with `keep`) and waits until
/// it has. Works whatever protocol the daemon speaks, so a `restart` can replace a daemon of
/// another version. Two of these at once (two `restart`s) both succeed: the one that finds
/// the daemon already going away says so ([`ShutDown::AlreadyExiting`]).
async fn shut_down(ctx: &Ctx, keep: bool) -> anyhow::Result<ShutDown> {
    let mut client = match client::connect_any_version(&ctx.opts).await {
        Ok(c) => c,
        Err(ClientError::NoDaemon { .. }) => return Ok(ShutDown::NotRunning),
        Err(e) => return Err(e.into()),
    };
    // The daemon's own state directory holds its instance lock (the client's may differ, e.g.
    // for a service started with --state-dir).
    let status = match client::unary(&ctx.opts, "Status", client.status(pb::StatusRequest {})).await
    {
        Ok(status) => status,
        Err(e) if going_away(&e) => {
            // Its pid and state directory are unknown: the daemon the client's state
            // directory names is the one going away.
            if let Some(state_dir) = ctx.opts.effective_state_dir()
                && let Some(pid) = instance_lock::recorded_pid(&state_dir)
            {
                wait_until_exited(ctx, &state_dir, pid).await?;
            }
            return Ok(ShutDown::AlreadyExiting);
        }
        Err(e) => return Err(e.into()),
    };
    let pid = status.pid;
    if keep && !status.holders && status.running > 0 {
        anyhow::bail!(
            "yieldshelld {} (pid {pid}) cannot hand its {} running process(es) over to another \
             daemon (it has no process holders: it predates them, or runs on Windows): \
             `yieldctl daemon stop` stops them",
            status.daemon_version,
            status.running
        );
    }
    let state_dir = PathBuf::from(bytes_os(&status.state_dir));
    let resp = client::unary(
        &ctx.opts,
        "Shutdown",
        client.shutdown(pb::ShutdownRequest {
            grace_ms: None,
            keep_processes: keep,
        }),
    )
    .await;
    drop(client);
    let resp = match resp {
        Ok(resp) => Some(resp),
        Err(e) if going_away(&e) => None,
        Err(e) => return Err(e.into()),
    };
    if !ctx.json
        && let Some(resp) = &resp
    {
        if keep {
            eprintln!(
                "stopping yieldshelld (pid {pid}); {} running process(es) keep running…",
                resp.kept
            );
        } else {
            eprintln!(
                "stopping yieldshelld (pid {pid}) and {} running process(es)…",
                resp.stopping
            );
        }
    }
    wait_until_exited(ctx, &state_dir, pid).await?;
    let Some(resp) = resp else {
        return Ok(ShutDown::AlreadyExiting);
    };
    Ok(ShutDown::Exited(Stopped {
        pid,
        version: status.daemon_version,
        stopping: resp.stopping,
        kept: resp.kept,
    }))
}

/// Waits until the daemon `pid` using `state_dir` has exited. It closes its socket at once but
/// runs its processes' grace before it exits and frees its instance lock; a daemon started
/// meanwhile would find the lock taken. So done means exited: the lock is free, or names the
/// next daemon (bounded: grace periods plus SIGKILL waits).
async fn wait_until_exited(ctx: &Ctx, state_dir: &Path, pid: u32) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    loop {
        let exited = client::daemon_has_exited(&ctx.opts.socket, state_dir, pid)
            .with_context(|| format!("checking whether yieldshelld (pid {pid}) has exited"))?;
        if exited == Some(true) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "yieldshelld (pid {pid}) was asked to stop but has not exited after {} s: its \
                 processes may still be in their shutdown grace (shutdown_grace_ms). See \
                 `yieldctl daemon logs`; `kill -9 {pid}` ends it at once",
                STOP_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop(ctx: &Ctx, keep: bool) -> anyhow::Result<u8> {
    let stopped = match shut_down(ctx, keep).await? {
        ShutDown::Exited(stopped) => stopped,
        ShutDown::NotRunning => {
            eprintln!("yieldshelld is not running");
            return Ok(exit::OK);
        }
        ShutDown::AlreadyExiting => {
            if ctx.json {
                render::json(&serde_json::json!({"stopped": true, "pid": null}))?;
            } else {
                eprintln!("yieldshelld was already exiting (another client asked it to)");
            }
            return Ok(exit::OK);
        }
    };
    if ctx.json {
        render::json(&serde_json::json!({
            "stopped": true,
            "pid": stopped.pid,
            "processes_stopped": stopped.stopping,
            "processes_kept": stopped.kept,
        }))?;
    } else {
        eprintln!("yieldshelld stopped");
    }
    Ok(exit::OK)
}

async fn restart(ctx: &Ctx) -> anyhow::Result<u8> {
    let shut = shut_down(ctx, true).await?;
    let mut opts = ctx.opts.clone();
    // The point of a restart is a new daemon: it may always start one. A daemon still on its
    // way out (another client's restart) is waited for: the client library starts ours once
    // it has let go of its state directory, or connects to the one that client started.
    opts.autostart = true;
    let conn = client::connect_or_start(&opts).await?;
    let already_exiting = matches!(shut, ShutDown::AlreadyExiting);
    let stopped = match shut {
        ShutDown::Exited(stopped) => Some(stopped),
        ShutDown::NotRunning | ShutDown::AlreadyExiting => None,
    };
    let kept = stopped.as_ref().map_or(0, |s| s.kept);
    if ctx.json {
        render::json(&serde_json::json!({
            "old_pid": stopped.as_ref().map(|s| s.pid),
            "old_version": stopped.as_ref().map(|s| s.version.clone()),
            "pid": conn.hello.pid,
            "version": conn.hello.daemon_version,
            "processes_kept": kept,
        }))?;
    } else {
        match &stopped {
            Some(s) => eprintln!(
                "restarted yieldshelld: {} (pid {}) → {} (pid {}); {kept} running process(es) kept",
                s.version, s.pid, conn.hello.daemon_version, conn.hello.pid
            ),
            None if already_exiting => eprintln!(
                "yieldshelld was already being replaced (another client's restart or stop); \
                 {} (pid {}) now runs",
                conn.hello.daemon_version, conn.hello.pid
            ),
            None if conn.started_daemon => eprintln!(
                "yieldshelld was not running; started {} (pid {})",
                conn.hello.daemon_version, conn.hello.pid
            ),
            None => eprintln!(
                "yieldshelld {} (pid {}) runs, started by another client meanwhile",
                conn.hello.daemon_version, conn.hello.pid
            ),
        }
    }
    Ok(exit::OK)
}

fn newest_log(dir: &Path) -> Option<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("yieldshelld") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    logs.pop()
}

async fn logs(ctx: &Ctx, follow: bool) -> anyhow::Result<u8> {
    let dir = match client::connect(&ctx.opts).await {
        Ok(mut conn) => {
            let s = client::unary(
                &ctx.opts,
                "Status",
                conn.client.status(pb::StatusRequest {}),
            )
            .await?;
            PathBuf::from(bytes_os(&s.log_file))
        }
        Err(_) => yieldshell_proto::paths::default_state_dir()?.join("logs"),
    };
    let Some(mut path) = newest_log(&dir) else {
        anyhow::bail!("no daemon log in {}", dir.display());
    };
    let mut file = std::fs::File::open(&path)?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    render::stdout_bytes(&buf)?;
    if !follow {
        return Ok(exit::OK);
    }
    let mut pos = file.stream_position()?;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        // Daily rotation starts a new file: switch to it.
        if let Some(newest) = newest_log(&dir)
            && newest != path
        {
            path = newest;
            file = std::fs::File::open(&path)?;
            pos = 0;
        }
        let len = file.metadata()?.len();
        if len < pos {
            pos = 0;
        }
        if len > pos {
            file.seek(SeekFrom::Start(pos))?;
            buf.clear();
            file.read_to_end(&mut buf)?;
            pos += buf.len() as u64;
            let mut out = std::io::stdout().lock();
            out.write_all(&buf)?;
            out.flush()?;
        }
    }
}
