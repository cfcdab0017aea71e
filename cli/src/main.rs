//! `yieldctl`: the terminal client of the YieldShell daemon.
//!
//! Each subcommand lives in its own module. Human output by default; `--json` prints exactly the
//! object the matching MCP tool returns (see `yieldshell_proto::views`). Exit codes are listed in
//! [`exit`] and in the README.
//!
//! A reader that closes stdout early (`yieldctl ps | head -1`) is not an error: every write to
//! stdout goes through [`render`] and reports the `BrokenPipe`, and [`report`] turns it into a
//! quiet exit 0, for every command and format. `println!`, which would panic instead, is denied.

#![deny(clippy::print_stdout)]

#[cfg(unix)]
mod cmd_attach;
mod cmd_daemon;
mod cmd_docs;
mod cmd_exec;
mod cmd_procs;
mod cmd_read;
mod cmd_service;
#[cfg(unix)]
mod cmd_top;
mod exit;
mod follow_stream;
mod person_terminal;
mod process_names;
mod render;
mod style;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use yieldshell_proto::client::{ClientError, ConnectOptions, Session};
use yieldshell_proto::session_config::{ConfigError, SessionConfig};

/// Run, watch and stop shell commands owned by the YieldShell daemon (yieldshelld).
#[derive(Debug, Parser)]
#[command(
    name = "yieldctl",
    version = yieldshell_proto::VERSION_WITH_PROTOCOL,
    propagate_version = true
)]
pub struct Cli {
    /// Print the JSON object the matching MCP tool returns instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Daemon socket [default: $YIELDSHELL_SOCKET, else the per-user default].
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Colour human output: auto (when stdout is a terminal and NO_COLOR is unset), always, never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = style::ColorChoice::Auto)]
    pub color: style::ColorChoice,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command; if it is still running after --yield-ms it keeps running in the background.
    Exec(cmd_exec::ExecArgs),
    /// List managed processes (newest first).
    Ps(cmd_procs::PsArgs),
    /// Print a process's output (byte-exact); --follow streams it until the process ends.
    Read(cmd_read::ReadArgs),
    /// Wait for a process to end (or for its output to match --until).
    Wait(cmd_read::WaitArgs),
    /// Stop a process and its whole tree (SIGTERM, then SIGKILL after the grace period).
    Stop(cmd_procs::StopArgs),
    /// Write text, named keys or a new terminal size to a process.
    Write(cmd_procs::WriteArgs),
    /// Join a running process from this terminal: see its screen, type into it, Ctrl-] detaches.
    #[cfg(unix)]
    Attach(cmd_attach::AttachArgs),
    /// A live screen of the processes: CPU, memory, ports, who waits for input; attach, stop.
    #[cfg(unix)]
    Top(cmd_top::TopArgs),
    /// Remove records (and saved output) of ended processes.
    Cleanup(cmd_procs::CleanupArgs),
    /// Manage the daemon itself.
    #[command(subcommand)]
    Daemon(cmd_daemon::DaemonCommand),
    /// Run the daemon as a per-user service (systemd on Linux, launchd on macOS).
    #[command(subcommand)]
    Service(cmd_service::ServiceCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd_docs::CompletionsArgs),
    /// Print the man page, or write every page into a directory.
    Man(cmd_docs::ManArgs),
}

/// Page size of `yieldctl` reads unless `YIELDSHELL_MAX_OUTPUT_BYTES` says otherwise.
const CLI_PAGE_BYTES: u64 = 4 * 1024 * 1024;

/// What every subcommand gets.
pub struct Ctx {
    /// `--json`.
    pub json: bool,
    /// Whether human output on stdout is coloured (`--color`, `NO_COLOR`, stdout a terminal).
    pub color: bool,
    /// Connection options.
    pub opts: ConnectOptions,
}

impl Ctx {
    /// A session carrying this shell's environment, cwd and policy variables.
    pub fn session(&self) -> anyhow::Result<Session> {
        self.session_with(|_| {})
    }

    /// [`Ctx::session`], with its configuration adjusted by `adjust` first (an `exec`'s
    /// `--sandbox` and `--network`).
    pub fn session_with(&self, adjust: impl FnOnce(&mut SessionConfig)) -> anyhow::Result<Session> {
        let mut config = SessionConfig::from_process_env()?;
        adjust(&mut config);
        // A terminal reads whole logs page by page; bigger pages than an agent's 20 kB context
        // budget make that fast. An explicit YIELDSHELL_MAX_OUTPUT_BYTES still wins.
        if std::env::var_os(yieldshell_proto::session_config::ENV_MAX_OUTPUT_BYTES).is_none() {
            config.policy.max_output_bytes = Some(CLI_PAGE_BYTES);
        }
        Ok(Session::new(self.opts.clone(), &config))
    }
}

fn main() -> std::process::ExitCode {
    // A shell asking for completions (`COMPLETE=bash yieldctl -- …`, from the script that
    // `yieldctl completions` prints) is answered here, before anything else runs.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command)
        .completer("yieldctl")
        .complete();
    let cli = Cli::parse();
    let mut opts = ConnectOptions::from_env("yieldctl");
    if let Some(s) = &cli.socket {
        opts.socket = s.clone();
    }
    let ctx = Ctx {
        json: cli.json,
        color: cli.color.for_stdout(),
        opts,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("yieldctl: cannot start the runtime: {e}");
            return exit::code(exit::INTERNAL);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Exec(a) => cmd_exec::run(&ctx, a).await,
            Command::Ps(a) => cmd_procs::ps(&ctx, a).await,
            Command::Read(a) => cmd_read::read(&ctx, a).await,
            Command::Wait(a) => cmd_read::wait(&ctx, a).await,
            Command::Stop(a) => cmd_procs::stop(&ctx, a).await,
            Command::Write(a) => cmd_procs::write(&ctx, a).await,
            #[cfg(unix)]
            Command::Attach(a) => cmd_attach::run(&ctx, a).await,
            #[cfg(unix)]
            Command::Top(a) => cmd_top::run(&ctx, a).await,
            Command::Cleanup(a) => cmd_procs::cleanup(&ctx, a).await,
            Command::Daemon(c) => cmd_daemon::run(&ctx, c).await,
            Command::Service(c) => cmd_service::run(&ctx, c).await,
            Command::Completions(a) => cmd_docs::completions(a),
            Command::Man(a) => cmd_docs::man(&ctx, a),
        }
    });
    match result {
        Ok(code) => exit::code(code),
        Err(e) => report(&ctx, &e),
    }
}

/// Prints an error (as JSON with `--json`) and picks the exit code. A closed stdout (`| head`)
/// is not an error: exit 0 quietly, as Unix tools do.
fn report(ctx: &Ctx, e: &anyhow::Error) -> std::process::ExitCode {
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::BrokenPipe
        {
            return exit::code(exit::OK);
        }
    }
    let (kind, code) = match e.downcast_ref::<ClientError>() {
        Some(ce) => {
            let kind = ce.kind();
            (Some(kind), exit::for_kind(kind))
        }
        None if e.is::<ConfigError>() => (None, exit::USAGE),
        None => (None, exit::FAILURE),
    };
    if ctx.json {
        let body = serde_json::json!({
            "error": format!("{e:#}"),
            "error_kind": kind.map(|k| k.as_str()),
        });
        // The exit code carries the error even when stdout is closed too.
        let _ = render::json(&body);
    } else {
        eprintln!("yieldctl: {e:#}");
    }
    exit::code(code)
}
