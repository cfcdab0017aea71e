//! `yieldshelld` entry point: arguments, logging, then [`yieldshelld::run`].

use std::path::PathBuf;

use clap::Parser;
use yieldshell_proto::paths;
use yieldshelld::config::{DaemonConfig, FileConfig};

/// The YieldShell daemon: owns managed shell processes and their output, and serves the control
/// socket used by mcp-yieldshell and yieldctl. Clients start it on demand; run it by hand (or as
/// a systemd/launchd service) to keep it in the foreground.
#[derive(Debug, Parser)]
#[command(name = "yieldshelld", version = yieldshell_proto::VERSION_WITH_PROTOCOL)]
struct Args {
    /// Socket to serve on [default: $YIELDSHELL_SOCKET, else $XDG_RUNTIME_DIR/yieldshell/yieldshelld.sock, else <tmp>/yieldshell-<uid>/yieldshelld.sock]
    #[arg(long)]
    socket: Option<PathBuf>,
    /// State directory: records, output spools, logs [default: $YIELDSHELL_STATE_DIR, else the platform state dir]
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Config file (TOML) [default: $YIELDSHELL_CONFIG, else <config dir>/yieldshell/config.toml]
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also log to stderr (the log file in <state dir>/logs is always written).
    #[arg(long)]
    log_stderr: bool,
}

/// Log lines that may wait for the writer thread.
const LOG_QUEUE_LINES: usize = 4096;

/// Most threads of the runtime's blocking pool (see `real_main`).
const BLOCKING_THREADS: usize = 4;

fn init_logging(
    log_dir: &std::path::Path,
    to_stderr: bool,
) -> anyhow::Result<tracing_appender::non_blocking::WorkerGuard> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    yieldshelld::record::create_private_dir(log_dir)?;
    let appender = tracing_appender::rolling::Builder::new()
        .rotation(tracing_appender::rolling::Rotation::DAILY)
        .filename_prefix("yieldshelld")
        .filename_suffix("log")
        .max_log_files(7)
        .build(log_dir)?;
    // The default queue (128 000 lines) is allocated and touched up front: 4 MiB of a ~12 MiB
    // daemon. 4096 pending lines absorb any burst the daemon logs; beyond that lines are dropped
    // (lossy) rather than ever blocking process management on the log file.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .lossy(true)
        .finish(appender);
    let filter = tracing_subscriber::EnvFilter::try_from_env("YIELDSHELL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let file_layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false);
    let stderr_layer = to_stderr.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(file_layer)
        .with(stderr_layer)
        .init();
    Ok(guard)
}

fn main() -> std::process::ExitCode {
    // A holder (`yieldshelld hold`, started by the daemon for each process) runs no runtime, no
    // logging and none of the daemon's setup: it is dispatched before anything else.
    #[cfg(unix)]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(yieldshelld::holder::HOLD_ARG))
    {
        return yieldshelld::holder::serve::main();
    }
    // The holder zygote (`yieldshelld zygote`, when the holder binary is not installed).
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            yieldshelld::holder::zygote::ZYGOTE_ARG,
        ))
    {
        return yieldshelld::holder::zygote::main();
    }
    // The sandbox's probe of what the kernel allows (`yieldshelld sandbox-probe`, likewise).
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(yieldshelld::sandbox::probe::PROBE_ARG))
    {
        return yieldshelld::sandbox::probe::main();
    }
    let args = Args::parse();
    match real_main(args) {
        Ok(yieldshelld::Ended::Stopped) => std::process::ExitCode::SUCCESS,
        Ok(yieldshelld::Ended::KeptProcesses) => {
            std::process::ExitCode::from(yieldshelld::EXIT_KEPT_PROCESSES)
        }
        Err(e) => {
            eprintln!("yieldshelld: {e:#}");
            tracing::error!("exiting: {e:#}");
            let lock_held = e.chain().any(|cause| {
                matches!(
                    cause.downcast_ref(),
                    Some(yieldshelld::lock::LockError::Held { .. })
                )
            });
            if lock_held {
                std::process::ExitCode::from(yieldshell_proto::instance_lock::EXIT_LOCK_HELD)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// Raises the soft open-file limit to the hard one (on macOS to `kern.maxfilesperproc`, see
/// [`max_files_per_process`]): every managed process costs the daemon three
/// pipe descriptors, and the common soft default (1024) would cap it at ~300 processes.
#[cfg(unix)]
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let target = hard.min(max_files_per_process());
        if soft < target {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, target, hard);
        }
    }
}

/// The most descriptors one process may have. macOS's hard limit is usually "unlimited", and a
/// soft limit above `kern.maxfilesperproc` is refused (EINVAL), which would leave the daemon at
/// the default soft limit of 256.
#[cfg(target_os = "macos")]
fn max_files_per_process() -> u64 {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>();
    // SAFETY: `value` is a c_int and `len` says so; the name is NUL-terminated.
    let rc = unsafe {
        libc::sysctlbyname(
            c"kern.maxfilesperproc".as_ptr(),
            (&raw mut value).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    match u64::try_from(value) {
        Ok(n) if rc == 0 && n > 0 => n,
        // OPEN_MAX, what macOS's own documentation suggests as the ceiling.
        _ => 10240,
    }
}

/// Elsewhere the hard limit is the ceiling.
#[cfg(all(unix, not(target_os = "macos")))]
fn max_files_per_process() -> u64 {
    u64::MAX
}

/// Closes every descriptor the daemon inherited besides stdio (and the sockets systemd passes).
///
/// A long-lived daemon must not keep its starter's pipes open (an editor waiting for EOF on a
/// pipe its MCP server leaked would hang), and managed processes must not inherit them.
#[cfg(unix)]
fn close_inherited_fds() {
    let keep_from_systemd: u32 = match (std::env::var("LISTEN_PID"), std::env::var("LISTEN_FDS")) {
        (Ok(pid), Ok(n)) if pid.parse::<u32>().ok() == Some(std::process::id()) => {
            n.parse().unwrap_or(0)
        }
        _ => 0,
    };
    let first = 3 + keep_from_systemd;
    #[cfg(target_os = "linux")]
    // SAFETY: closes descriptors nothing in this process uses yet (called first thing in main,
    // before any file, socket or thread exists); failure (old kernel) leaves them open.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32);
    }
    #[cfg(not(target_os = "linux"))]
    for fd in first..1024 {
        // SAFETY: as above; closing an fd that is not open is harmless (EBADF).
        unsafe {
            libc::close(fd as i32);
        }
    }
}

fn real_main(args: Args) -> anyhow::Result<yieldshelld::Ended> {
    // Before anything else: a daemon started from inside a sandboxed command (a shim that found
    // none running) would re-adopt every holder, unsandboxed ones included.
    #[cfg(target_os = "linux")]
    if yieldshelld::sandbox::linux::inside_a_sandbox() {
        anyhow::bail!(
            "yieldshelld cannot run inside a YieldShell sandbox (this one was started by a \
             sandboxed command); start it outside, or let a client outside the sandbox start it"
        );
    }
    // Windows needs none of these: handles are not inherited unless marked so, there is no
    // descriptor limit to speak of, and no signal dispositions to inherit.
    #[cfg(unix)]
    {
        close_inherited_fds();
        raise_fd_limit();
        // Before any thread exists: managed processes must not inherit an ignored signal.
        yieldshelld::spawn::reset_inherited_ignores();
    }
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => paths::default_state_dir()?,
    };
    let socket = args.socket.unwrap_or_else(paths::default_socket_path);
    let config_file = args.config.or_else(paths::default_config_file);
    let file = FileConfig::load(config_file.as_deref())?;
    yieldshelld::record::create_private_dir(&state_dir)?;
    let log_dir = state_dir.join("logs");
    let _guard = init_logging(&log_dir, args.log_stderr)?;
    let config = DaemonConfig {
        socket,
        state_dir,
        config_file,
        file,
    };
    // A small blocking pool: `exec`'s start, `/proc` scans and spool reads are short and
    // frequent, and an unbounded pool grows to hundreds of threads under a burst of execs —
    // each with its own malloc arena (RSS that never comes back) and each one more task for the
    // subreaper's `/proc/self/task/*/children` scan after every process.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("yieldshelld")
        .max_blocking_threads(BLOCKING_THREADS)
        .build()?;
    runtime.block_on(yieldshelld::run(config, log_dir))
}
