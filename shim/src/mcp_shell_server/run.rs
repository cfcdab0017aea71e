//! Running the stages of one `shell_execute` call through the daemon, the way the published
//! package runs them: each stage is one program started directly (looked up in the safe `PATH`,
//! a missing one an error), with stdin closed after the input is written, the call's timeout,
//! and the output limit per stream (exceeding it ends the program). A pipeline runs its stages
//! one after the other, each stage's stdout the next one's stdin, as the package does.
//!
//! Each program reaches the daemon as its quoted name and arguments, so `/bin/sh` passes the
//! words unchanged, finds the program in the same safe `PATH`, and the daemon `exec`s it (a
//! signal is reported as the program's own end). A name that is also a shell builtin (`echo`,
//! `printf`, …) is given as its resolved path instead, so the program runs, as in the package,
//! not the shell's builtin.

use std::path::{Path, PathBuf};

use yieldshell_proto::pb;

use super::config::{SLACK_MS, ShellServerSettings};
use crate::context::{Context, describe};
use crate::jobs::tools::in_profile_terms;
use crate::mcp_background_job::command_line::{SHELL_BUILTINS, find_program};
use crate::shell::argv::quote;

/// How long one wait lasts before the output counts are looked at again, so a program that
/// floods its output is ended soon after it passes the limit.
const SLICE_MS: u64 = 250;
/// Side effects every command declares: the package has no such notion.
const SIDE_EFFECTS: &str = "UNKNOWN";

/// How one program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited: the exit status, or minus the signal number, as Python reports it.
    Exited(i32),
    /// Its timeout ended it.
    TimedOut,
    /// A stream passed the output limit (`stdout` or `stderr`); the program was stopped.
    OutputLimit(&'static str),
    /// It could not run or was lost: the message.
    Failed(String),
}

/// What one program printed and how it ended.
#[derive(Debug, Clone)]
pub struct Ran {
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
    /// How it ended.
    pub ended: Ended,
}

/// Python's `OSError` text for an I/O error on `path`: `[Errno 21] Is a directory: '/x'`.
pub fn os_error(e: &std::io::Error, path: &Path) -> String {
    match e.raw_os_error() {
        #[cfg(unix)]
        Some(code) => format!(
            "[Errno {code}] {}: '{}'",
            nix::errno::Errno::from_raw(code).desc(),
            path.display()
        ),
        // Windows: the system's own text for the error code.
        #[cfg(not(unix))]
        Some(code) => format!(
            "[Errno {code}] {}: '{}'",
            std::io::Error::from_raw_os_error(code),
            path.display()
        ),
        None => e.to_string(),
    }
}

fn signal_number(name: Option<&str>) -> i32 {
    #[cfg(unix)]
    {
        use std::str::FromStr;
        name.and_then(|n| nix::sys::signal::Signal::from_str(n).ok())
            .map_or(-1, |s| -(s as i32))
    }
    // Windows processes end by exit code only; no signal is ever reported.
    #[cfg(not(unix))]
    {
        let _ = name;
        -1
    }
}

fn ended(p: &pb::ProcessInfo) -> Ended {
    match pb::ProcessStatus::try_from(p.status).unwrap_or_default() {
        pb::ProcessStatus::Completed => Ended::Exited(
            p.exit_code
                .unwrap_or_else(|| signal_number(p.signal.as_deref())),
        ),
        pb::ProcessStatus::TimedOut => Ended::TimedOut,
        pb::ProcessStatus::Stopped => Ended::Exited(signal_number(p.signal.as_deref())),
        _ => Ended::Failed(
            p.lost_reason
                .clone()
                .or_else(|| p.ended_by.clone())
                .unwrap_or_else(|| "the daemon could not finish the command".into()),
        ),
    }
}

async fn stop(ctx: &Context, id: &str) {
    let req = pb::StopRequest {
        process_id: id.to_string(),
        signal: "SIGTERM".into(),
        force_after_ms: Some(500),
        ..Default::default()
    };
    // Best effort: the program passed its output limit or outlived every deadline.
    let _ = ctx.session.stop(req).await;
}

/// Runs one program (`argv[0]` already checked against the allowlist) in `cwd` and waits for
/// its end. `Err` is the package's message for a program that could not start.
pub async fn run_program(
    ctx: &Context,
    s: &ShellServerSettings,
    argv: &[String],
    cwd: &Path,
    stdin: Option<Vec<u8>>,
    timeout_secs: u64,
) -> Result<Ran, String> {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let full: PathBuf = find_program(program, Some(&s.path), cwd)
        .map_err(|m| format!("Failed to create process: {m}"))?;
    let mut line = if SHELL_BUILTINS.contains(&program) {
        quote(&full.to_string_lossy())
    } else {
        quote(program)
    };
    for arg in &argv[1..] {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    let limit = s.output_limit;
    let budget_ms = timeout_secs.saturating_mul(1000) + SLACK_MS;
    let req = pb::ExecRequest {
        command: line.into_bytes(),
        side_effects: vec![SIDE_EFFECTS.to_string()],
        cwd: Some(cwd.as_os_str().as_encoded_bytes().to_vec()),
        stdin,
        close_stdin: true,
        name: Some(super::TOOL_NAME.to_string()),
        yield_ms: Some(SLICE_MS),
        timeout_ms: Some(timeout_secs.saturating_mul(1000)),
        max_output_bytes: Some(limit + 1),
        ..Default::default()
    };
    let resp = ctx.session.exec(req).await.map_err(|e| describe(&e).0)?;
    let Some(mut process) = resp.process else {
        return Err(in_profile_terms(
            &resp.error,
            super::config::ENV_ALLOW_COMMANDS,
        ));
    };
    let mut output = resp.output.unwrap_or_default();
    let started = std::time::Instant::now();
    let id = process.process_id.clone();
    while process.status == pb::ProcessStatus::Running as i32 {
        let over = if process.stdout_bytes > limit {
            Some("stdout")
        } else if process.stderr_bytes > limit {
            Some("stderr")
        } else {
            None
        };
        if let Some(stream) = over {
            stop(ctx, &id).await;
            return Ok(Ran {
                stdout: Vec::new(),
                stderr: Vec::new(),
                ended: Ended::OutputLimit(stream),
            });
        }
        if started.elapsed().as_millis() > u128::from(budget_ms) {
            // The daemon's timeout should have ended it long ago; do not block for ever.
            stop(ctx, &id).await;
            return Ok(Ran {
                stdout: Vec::new(),
                stderr: Vec::new(),
                ended: Ended::TimedOut,
            });
        }
        let wait = pb::WaitRequest {
            process_id: id.clone(),
            timeout_ms: Some(SLICE_MS),
            max_output_bytes: Some(limit + 1),
            ..Default::default()
        };
        let w = ctx.session.wait(wait).await.map_err(|e| describe(&e).0)?;
        process = w.process.unwrap_or_default();
        output = w.output.unwrap_or_default();
    }
    let over = if process.stdout_bytes > limit {
        Some("stdout")
    } else if process.stderr_bytes > limit {
        Some("stderr")
    } else {
        None
    };
    Ok(Ran {
        stdout: output.stdout,
        stderr: output.stderr,
        ended: over.map_or_else(|| ended(&process), Ended::OutputLimit),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_like_pythons() {
        let e = std::io::Error::from_raw_os_error(21);
        assert_eq!(
            os_error(&e, Path::new("/tmp")),
            "[Errno 21] Is a directory: '/tmp'"
        );
        assert_eq!(signal_number(Some("SIGKILL")), -9);
        assert_eq!(signal_number(None), -1);
    }
}
