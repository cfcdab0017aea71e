//! `yieldctl ps`, `stop`, `write` and `cleanup`.

use clap::Args;
use yieldshell_proto::client::ClientError;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::DEFAULT_CLEANUP_OLDER_THAN_MS;
use yieldshell_proto::views::{self, CleanupView, ProcessSummary, PsView, StopView, WriteView};

use crate::{Ctx, exit, person_terminal, render, style};

/// Appended to the status of a process blocked reading its stdin (`running[input]`).
pub const INPUT_MARKER: &str = "[input]";
/// Appended instead when it reads from a terminal with echo off, as password prompts do
/// (`running[password]`): a person has to type it (`yieldctl attach`).
pub const PASSWORD_MARKER: &str = "[password]";

/// Arguments of `ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Only processes of this project (cwd inside the current directory, or started here).
    #[arg(long)]
    project: bool,
    /// Only running processes.
    #[arg(long)]
    running: bool,
    /// At most this many entries (0: all).
    #[arg(long, default_value_t = 0)]
    limit: u32,
}

pub async fn ps(ctx: &Ctx, a: PsArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    let req = pb::ListRequest {
        include_completed: !a.running,
        limit: a.limit,
        scope: if a.project {
            pb::Scope::Project
        } else {
            pb::Scope::All
        } as i32,
        ..Default::default()
    };
    let resp = session.list(req).await?;
    let view = PsView {
        processes: resp.processes.iter().map(ProcessSummary::from).collect(),
    };
    if ctx.json {
        render::json(&view)?;
        return Ok(exit::OK);
    }
    if resp.processes.is_empty() {
        eprintln!("no processes");
        return Ok(exit::OK);
    }
    let mut table = render::Table::new(
        vec![
            "ID", "PID", "STATUS", "TTY", "EXIT", "STARTED", "TIME", "CPU", "MEM", "PORTS",
            "SANDBOX", "NAME", "COMMAND",
        ],
        ctx.color,
    );
    let now = render::now_unix_ms();
    for p in &resp.processes {
        let status = views::process_status_name(p.status);
        let exit = match (&p.exit_code, &p.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => s.clone(),
            _ => "-".into(),
        };
        let mut status = if p.descendants_running > 0 {
            format!("{status}+{}", p.descendants_running)
        } else {
            status.to_string()
        };
        if p.waiting_for_input == Some(true) {
            // One word, so the column stays splittable by whitespace.
            status.push_str(if p.echo_off == Some(true) {
                PASSWORD_MARKER
            } else {
                INPUT_MARKER
            });
        }
        table.row(vec![
            (p.process_id.clone(), None),
            (p.pid.map_or("-".into(), |x| x.to_string()), None),
            (status, style::for_status(p)),
            ((if p.tty { "tty" } else { "-" }).into(), None),
            (exit, None),
            (render::ago(now, p.started_at_unix_ms), None),
            (render::duration_ms(p.duration_ms), None),
            (render::cpu(p.cpu_percent), None),
            (render::memory(p.rss_bytes), None),
            (ports(&p.listening), None),
            (sandbox(p.sandbox.as_ref()), None),
            (
                if p.name.is_empty() {
                    "-".into()
                } else {
                    render::truncate(&render::escape(p.name.as_bytes()), 20)
                },
                None,
            ),
            (render::truncate(&render::escape(&p.command), 60), None),
        ]);
    }
    render::stdout_bytes(table.render().as_bytes())?;
    Ok(exit::OK)
}

/// The SANDBOX column: where it may write and what it may reach (`workspace/off`,
/// `read-only/allowlist`, `workspace+git/on`), `-` when it runs unsandboxed.
fn sandbox(s: Option<&pb::Sandbox>) -> String {
    match s {
        Some(s) if s.git_writable => format!("{}+git/{}", s.files, s.network),
        Some(s) => format!("{}/{}", s.files, s.network),
        None => "-".into(),
    }
}

/// The PORTS column: the ports of the listening addresses, each once, in their order (by port);
/// `--json ps` has the addresses.
pub fn ports(listening: &[String]) -> String {
    let mut ports: Vec<&str> = listening
        .iter()
        .filter_map(|a| a.rsplit_once(':').map(|(_, port)| port))
        .collect();
    ports.dedup();
    // A few keep the table readable; `--json ps` has them all.
    const SHOWN: usize = 3;
    match ports.len() {
        0 => "-".into(),
        n if n > SHOWN => format!("{}+{}", ports[..SHOWN].join(","), n - SHOWN),
        _ => ports.join(","),
    }
}

/// Arguments of `stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// Process id, or the name given at exec.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::process_names::complete))]
    id: String,
    /// Signal to send first (TERM, SIGINT, KILL, 9, …).
    #[arg(long, default_value = "SIGTERM")]
    signal: String,
    /// Milliseconds before escalating to SIGKILL.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    force_after_ms: u64,
}

pub async fn stop(ctx: &Ctx, mut a: StopArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    a.id = crate::process_names::resolve(&session, &a.id).await?;
    let req = pb::StopRequest {
        process_id: a.id.clone(),
        signal: a.signal,
        force_after_ms: Some(a.force_after_ms),
        ..Default::default()
    };
    let resp = match session.stop(req).await {
        Ok(r) => r,
        Err(ClientError::Rpc(status)) if ctx.json => {
            let kind = ErrorKind::of_status(&status);
            render::json(&StopView {
                process_id: a.id,
                stopped: false,
                signal: None,
                status: None,
                exit_code: None,
                escalated: false,
                error: Some(status.message().to_string()),
                error_kind: Some(kind.as_str().to_string()),
            })?;
            return Ok(exit::for_kind(kind));
        }
        Err(e) => return Err(e.into()),
    };
    if ctx.json {
        render::json(&StopView::from(&resp))?;
    } else if resp.stopped {
        eprintln!(
            "stopped {} ({}{})",
            a.id,
            resp.signal,
            if resp.escalated { ", then SIGKILL" } else { "" }
        );
    } else {
        eprintln!("{}", resp.error);
    }
    // Stopping something that already ended is not a failure: the goal state holds.
    Ok(
        if resp.stopped || resp.error_kind == ErrorKind::ProcessExited.as_str() {
            exit::OK
        } else {
            exit::FAILURE
        },
    )
}

/// Arguments of `write`.
#[derive(Debug, Args)]
pub struct WriteArgs {
    /// Process id, or the name given at exec.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::process_names::complete))]
    id: String,
    /// Text to write (any bytes).
    #[arg(
        value_parser = clap::value_parser!(std::ffi::OsString),
        required_unless_present_any = ["keys", "resize", "eof", "newline"]
    )]
    text: Option<std::ffi::OsString>,
    /// Append a newline.
    #[arg(long)]
    newline: bool,
    /// Terminal process: send a named key after the text (repeatable, in order): Enter, Tab, Esc,
    /// Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, F1…F12, C-a…C-z.
    #[arg(long = "key", id = "keys", value_name = "KEY")]
    keys: Vec<String>,
    /// Terminal process: resize its terminal to COLSxROWS (like 120x40; the program gets SIGWINCH).
    #[arg(long, value_name = "COLSxROWS", value_parser = person_terminal::parse_size)]
    resize: Option<person_terminal::WindowSize>,
    /// Close stdin after writing (a terminal process: send the EOF character, Ctrl-D).
    #[arg(long)]
    eof: bool,
    /// Then wait for an output line printed after the write that matches this regex, and print
    /// the output that followed the write (a REPL's answer).
    #[arg(long, value_name = "REGEX")]
    until: Option<String>,
    /// With --until: the longest wait.
    #[arg(long, value_name = "MS", default_value_t = 30_000, requires = "until")]
    timeout: u64,
}

pub async fn write(ctx: &Ctx, mut a: WriteArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    a.id = crate::process_names::resolve(&session, &a.id).await?;
    let mut input = a
        .text
        .as_deref()
        .map(yieldshell_proto::session_config::os_bytes)
        .unwrap_or_default();
    if a.newline {
        input.push(b'\n');
    }
    let waits = a.until.is_some();
    let req = pb::WriteRequest {
        process_id: a.id.clone(),
        input,
        eof: a.eof,
        timeout_ms: waits.then_some(a.timeout),
        until: a.until,
        keys: a.keys,
        cols: a.resize.map(|s| s.cols),
        rows: a.resize.map(|s| s.rows),
        ..Default::default()
    };
    let result = session.write(req).await;
    match result {
        Ok(resp) => {
            if ctx.json {
                render::json(&WriteView::written(&a.id, &resp))?;
            } else if let Some(out) = resp.output.as_ref() {
                render::stdout_bytes(&out.stdout)?;
                render::stderr_bytes(&out.stderr)?;
                if resp.result != pb::WaitResult::Matched as i32 {
                    eprintln!(
                        "yieldctl: no line matched --until ({})",
                        yieldshell_proto::views::wait_result_name(resp.result)
                    );
                }
            } else {
                eprintln!("wrote {} bytes to {}", resp.bytes_written, a.id);
                if let Some(size) = a.resize {
                    eprintln!("resized {} to {}x{}", a.id, size.cols, size.rows);
                }
            }
            // A wait that ended without a match is reported like `wait --until`'s.
            if waits && resp.result == pb::WaitResult::DeadlineReached as i32 {
                return Ok(exit::TIMED_OUT);
            }
            Ok(exit::OK)
        }
        Err(ClientError::Rpc(status)) if ctx.json => {
            let kind = ErrorKind::of_status(&status);
            render::json(&WriteView::failed(
                &a.id,
                status.message().to_string(),
                kind.as_str(),
            ))?;
            Ok(exit::for_kind(kind))
        }
        Err(e) => Err(e.into()),
    }
}

/// Arguments of `cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Remove completed processes that ended longer ago than this.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_CLEANUP_OLDER_THAN_MS)]
    completed_older_than_ms: u64,
    /// Remove stopped, timed-out, failed and lost processes that ended longer ago than this.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_CLEANUP_OLDER_THAN_MS)]
    stopped_older_than_ms: u64,
    /// Act on every process, not only this project's.
    #[arg(long)]
    all: bool,
}

pub async fn cleanup(ctx: &Ctx, a: CleanupArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    let req = pb::CleanupRequest {
        completed_older_than_ms: Some(a.completed_older_than_ms),
        stopped_older_than_ms: Some(a.stopped_older_than_ms),
        scope: if a.all {
            pb::Scope::All
        } else {
            pb::Scope::Project
        } as i32,
        ..Default::default()
    };
    let resp = session.cleanup(req).await?;
    if ctx.json {
        render::json(&CleanupView {
            removed: resp.removed,
        })?;
    } else {
        eprintln!("removed {} record(s)", resp.removed);
    }
    Ok(exit::OK)
}
