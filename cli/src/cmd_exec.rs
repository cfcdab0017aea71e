//! `yieldctl exec`: run a command through the daemon, with auto-yield and an optional
//! ready-wait (`--until`).

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::Args;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::{os_bytes, parse_side_effect_list, path_bytes};
use yieldshell_proto::views::ExecView;

use crate::person_terminal::{DEFAULT_SIZE, WindowSize, window_size};
use crate::{Ctx, exit, render};

/// Arguments of `exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Milliseconds to wait before leaving the command running in the background [default: the session's, 5000].
    #[arg(long, value_name = "MS")]
    yield_ms: Option<u64>,
    /// Kill the whole tree after this many milliseconds (0: never) [default: YIELDSHELL_DEFAULT_TIMEOUT_MS].
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Working directory [default: YIELDSHELL_DEFAULT_CWD, else the current directory].
    #[arg(long, value_name = "DIR")]
    cwd: Option<std::path::PathBuf>,
    /// A name to find the process by in `ps`.
    #[arg(long)]
    name: Option<String>,
    /// Declared side effects, comma-separated (see the README for the list). Under a sandbox
    /// they decide what the command may do.
    #[arg(long, value_name = "LIST", default_value = "UNKNOWN")]
    side_effects: String,
    /// Run sandboxed: off, declared (what --side-effects grant), workspace-write or read-only
    /// [default: YIELDSHELL_SANDBOX, else off].
    #[arg(long, value_name = "MODE", value_parser = parse_sandbox_mode)]
    sandbox: Option<String>,
    /// The sandbox's network: declared, off, on or allow:HOST,*.HOST2,… [default:
    /// YIELDSHELL_SANDBOX_NETWORK, else declared].
    #[arg(long, value_name = "SETTING", value_parser = parse_network_setting)]
    network: Option<String>,
    /// Text written to the command's stdin right after it starts (any bytes).
    #[arg(long, value_parser = clap::value_parser!(OsString))]
    stdin: Option<OsString>,
    /// Close stdin after writing --stdin (for commands that read to EOF).
    #[arg(long)]
    close_stdin: bool,
    /// Return as soon as an output line matches this regex (the command keeps running in the
    /// background), at --yield-ms, or at exit, whichever comes first.
    #[arg(long, value_name = "REGEX")]
    until: Option<String>,
    /// Set an environment variable for the command (repeatable). The value may be any bytes:
    /// environments are bytes, not text.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = clap::value_parser!(OsString))]
    env: Vec<OsString>,
    /// Run under a pseudo-terminal (stdout and stderr become one stream; a person can
    /// `yieldctl attach` to it). Output is shown with escape sequences removed unless --raw.
    #[arg(long)]
    tty: bool,
    /// With --tty: terminal width [default: this terminal's when stdout is one, else 120].
    #[arg(long, value_name = "N", requires = "tty", value_parser = clap::value_parser!(u32).range(1..))]
    cols: Option<u32>,
    /// With --tty: terminal height [default: this terminal's when stdout is one, else 40].
    #[arg(long, value_name = "N", requires = "tty", value_parser = clap::value_parser!(u32).range(1..))]
    rows: Option<u32>,
    /// With --tty: print the output as the program wrote it, escape sequences included.
    #[arg(long, requires = "tty")]
    raw: bool,
    /// The command line (several words are joined with spaces and run by /bin/sh -c). Everything
    /// from the first word on is the command's, options included (`yieldctl exec ls -la`); a
    /// `--` before it is optional, and needed only for a command that starts with `-`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

fn parse_sandbox_mode(v: &str) -> Result<String, String> {
    yieldshell_proto::sandbox_settings::SandboxMode::parse(v).map(|m| m.as_str().to_string())
}

fn parse_network_setting(v: &str) -> Result<String, String> {
    yieldshell_proto::sandbox_settings::NetworkSetting::parse(v).map(|n| n.to_text())
}

/// Splits `NAME=VALUE` at the first `=`, as bytes.
fn env_pair(pair: &OsString) -> anyhow::Result<pb::EnvVar> {
    let bytes = os_bytes(pair);
    let eq = bytes
        .iter()
        .position(|b| *b == b'=')
        .ok_or_else(|| anyhow::anyhow!("--env expects NAME=VALUE, got {pair:?}"))?;
    Ok(pb::EnvVar {
        name: bytes[..eq].to_vec(),
        value: bytes[eq + 1..].to_vec(),
    })
}

pub async fn run(ctx: &Ctx, a: ExecArgs) -> anyhow::Result<u8> {
    let side_effects = parse_side_effect_list(&a.side_effects).map_err(anyhow::Error::msg)?;
    let env = a
        .env
        .iter()
        .map(env_pair)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut command = Vec::new();
    for (i, word) in a.command.iter().enumerate() {
        if i > 0 {
            command.push(b' ');
        }
        command.extend_from_slice(&os_bytes(word));
    }
    let size = if a.tty {
        // The person's window when the output goes to it, so the program draws for what shows it.
        let here = window_size(std::io::stdout()).unwrap_or(DEFAULT_SIZE);
        Some(WindowSize {
            cols: a.cols.unwrap_or(here.cols),
            rows: a.rows.unwrap_or(here.rows),
        })
    } else {
        None
    };
    let (sandbox, network) = (a.sandbox, a.network);
    let session = ctx.session_with(|config| {
        if sandbox.is_some() {
            config.policy.sandbox = sandbox;
        }
        if network.is_some() {
            config.policy.sandbox_network = network;
        }
    })?;
    let req = pb::ExecRequest {
        command,
        side_effects,
        cwd: a.cwd.as_deref().map(path_bytes),
        env,
        stdin: a.stdin.as_deref().map(os_bytes),
        close_stdin: a.close_stdin,
        name: a.name,
        yield_ms: a.yield_ms,
        timeout_ms: a.timeout_ms,
        max_output_bytes: None,
        shell: None,
        process_id: None,
        until: a.until,
        tty: a.tty,
        cols: size.map(|s| s.cols),
        rows: size.map(|s| s.rows),
        ..Default::default()
    };
    let mut resp = session.exec(req).await?;
    let status = pb::ExecStatus::try_from(resp.status).unwrap_or_default();
    let info = resp.process.clone().unwrap_or_default();
    let code = match status {
        pb::ExecStatus::Completed | pb::ExecStatus::Stopped | pb::ExecStatus::Lost => {
            exit::for_exit(info.exit_code, info.signal.as_deref())
        }
        pb::ExecStatus::TimedOut => exit::TIMED_OUT,
        pb::ExecStatus::Backgrounded => exit::OK,
        pb::ExecStatus::FailedToStart | pb::ExecStatus::Failed | pb::ExecStatus::Unspecified => {
            exit::FAILURE
        }
    };
    if ctx.json {
        render::json(&ExecView::from(&resp))?;
        return Ok(code);
    }
    if a.raw
        && let Some(out) = resp.output.as_mut()
    {
        out.stdout = raw_window(&session, &info.process_id, out).await?;
    }
    let out = resp.output.clone().unwrap_or_default();
    if out.truncated {
        render::stderr_bytes(
            format!(
                "[yieldctl: earlier output omitted; `yieldctl read {} --all` shows everything]\n",
                info.process_id
            )
            .as_bytes(),
        )?;
    }
    render::stdout_bytes(&out.stdout)?;
    render::stderr_bytes(&out.stderr)?;
    render::sandbox_denial(&info);
    if let Some(line) = hint(status, &resp, &info, out.next_seq) {
        // A prompt ("Password: ") ends without a newline; on a terminal the hint would continue
        // its line.
        let mid_line = out.stdout.last().is_some_and(|b| *b != b'\n');
        if mid_line && std::io::stderr().is_terminal() {
            eprintln!();
        }
        eprintln!("{line}");
    }
    Ok(code)
}

/// The bytes of `out`'s window as the program wrote them (`exec` answers with escape sequences
/// removed; `read(raw)` has them), for `exec --tty --raw`. A terminal process has one stream, so
/// positions in the window are positions in stdout.
async fn raw_window(
    session: &yieldshell_proto::client::Session,
    id: &str,
    out: &pb::Output,
) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut since = out.first_seq;
    while since < out.next_seq {
        let page = session
            .read(pb::ReadRequest {
                process_id: id.to_string(),
                since_seq: Some(since),
                raw: true,
                ..Default::default()
            })
            .await?
            .output
            .unwrap_or_default();
        let wanted = usize::try_from(out.next_seq.saturating_sub(page.first_seq)).unwrap_or(0);
        bytes.extend_from_slice(&page.stdout[..wanted.min(page.stdout.len())]);
        if page.next_seq <= since {
            break;
        }
        since = page.next_seq;
    }
    Ok(bytes)
}

/// The line `exec` prints on stderr after the output, if any. The daemon returns facts only
/// (status, process, `next_seq`, `yield_ms`); this hint names yieldctl's own commands.
fn hint(
    status: pb::ExecStatus,
    resp: &pb::ExecResponse,
    info: &pb::ProcessInfo,
    next_seq: u64,
) -> Option<String> {
    let id = &info.process_id;
    let echo_off = info.echo_off == Some(true);
    // A server says where it can be reached.
    let listening = if info.listening.is_empty() {
        String::new()
    } else {
        format!(", listening on {}", info.listening.join(", "))
    };
    Some(match status {
        pb::ExecStatus::Backgrounded if info.waiting_for_input == Some(true) => format!(
            "yieldctl: {id} (pid {}) is waiting for {} and continues in the background.\n  \
             type it yourself: yieldctl attach {id}{}",
            info.pid.unwrap_or_default(),
            if echo_off {
                "input with echo off (a password?)"
            } else {
                "input"
            },
            // A secret given on a command line would land in the shell's history.
            if echo_off {
                String::new()
            } else {
                format!("    or: yieldctl write {id} TEXT --newline")
            },
        ),
        pb::ExecStatus::Backgrounded if resp.matched_seq.is_some() => format!(
            "yieldctl: {id} (pid {}) printed a line matching --until and continues in the background{listening}.\n  \
             follow it: yieldctl read {id} --since {next_seq} --follow    stop it: yieldctl stop {id}",
            info.pid.unwrap_or_default(),
        ),
        pb::ExecStatus::Backgrounded => format!(
            "yieldctl: {id} (pid {}) is still running after {} ms and continues in the background{listening}.\n  \
             follow it: yieldctl read {id} --follow    {}stop it: yieldctl stop {id}",
            info.pid.unwrap_or_default(),
            resp.yield_ms,
            if info.tty {
                format!("join it: yieldctl attach {id}    ")
            } else {
                String::new()
            },
        ),
        pb::ExecStatus::FailedToStart | pb::ExecStatus::Failed => {
            format!("yieldctl: failed to start: {}", resp.error)
        }
        pb::ExecStatus::TimedOut => format!("yieldctl: {id} timed out and was stopped"),
        _ if info.descendants_running > 0 => format!(
            "yieldctl: the shell of {id} exited, but {} descendant process(es) still run and may \
             print more.\n  follow them: yieldctl read {id} --since {next_seq} --follow    \
             stop them: yieldctl stop {id}",
            info.descendants_running,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(descendants_running: u32) -> pb::ProcessInfo {
        pb::ProcessInfo {
            process_id: "proc_7".into(),
            pid: Some(42),
            descendants_running,
            ..Default::default()
        }
    }

    #[test]
    fn hints_name_yieldctl_commands_from_the_facts() {
        let resp = pb::ExecResponse {
            yield_ms: 250,
            ..Default::default()
        };
        let bg = hint(pb::ExecStatus::Backgrounded, &resp, &info(0), 9).expect("hint");
        assert!(bg.contains("after 250 ms"), "{bg}");
        assert!(bg.contains("yieldctl read proc_7 --follow"), "{bg}");
        assert!(bg.contains("yieldctl stop proc_7"), "{bg}");
        let left = hint(pb::ExecStatus::Completed, &resp, &info(2), 9).expect("hint");
        assert!(left.contains("2 descendant process(es)"), "{left}");
        assert!(
            left.contains("yieldctl read proc_7 --since 9 --follow"),
            "{left}"
        );
        assert_eq!(hint(pb::ExecStatus::Completed, &resp, &info(0), 9), None);
        let matched = pb::ExecResponse {
            matched_seq: Some(3),
            ..resp.clone()
        };
        let ready = hint(pb::ExecStatus::Backgrounded, &matched, &info(0), 9).expect("hint");
        assert!(ready.contains("matching --until"), "{ready}");
        let terminal = pb::ProcessInfo {
            tty: true,
            ..info(0)
        };
        let bg = hint(pb::ExecStatus::Backgrounded, &resp, &terminal, 9).expect("hint");
        assert!(bg.contains("yieldctl attach proc_7"), "{bg}");
        let prompt = pb::ProcessInfo {
            waiting_for_input: Some(true),
            echo_off: Some(true),
            ..terminal
        };
        let asks = hint(pb::ExecStatus::Backgrounded, &resp, &prompt, 9).expect("hint");
        assert!(asks.contains("echo off"), "{asks}");
        assert!(asks.contains("yieldctl attach proc_7"), "{asks}");
        assert!(
            !asks.contains("yieldctl write"),
            "no secret on a command line: {asks}"
        );
    }
}
