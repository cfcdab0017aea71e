//! The holder process (`yieldshelld hold`): one thread, `poll`, no runtime.
//!
//! It reads its [`HoldSpec`] from descriptor 3 (a socket the daemon kept the other end of),
//! becomes the child subreaper of what it starts, binds `holder.sock` in the process directory,
//! spawns the shell, and answers with [`Hello`] (with stdin's write end). Then, until the tree
//! is gone, the pipes are at EOF and the daemon has every frame:
//! - each pipe read is redacted, buffered for the spool and queued for the daemon; the buffer is
//!   written once it reaches the spec's batch (never more than the daemon's ring holds, so every
//!   byte the ring has given up is on disk), once output pauses for [`SPOOL_QUIET`], once its
//!   oldest byte is [`FLUSH_AGE`] old, and before an EOF or a new daemon's [`Hello`];
//! - every child is reaped at once (SIGCHLD through a signalfd on Linux, through a self-pipe
//!   written by a SIGCHLD handler elsewhere); the shell's status goes to the exit file first,
//!   then to the daemon;
//! - a daemon that connects anew (after a crash or restart) replaces the old connection and gets
//!   a fresh [`Hello`]; while no daemon is connected the holder only writes the spool.
//!
//! Writes to the daemon never block the holder: frames queue in memory, and above
//! [`BACKLOG_LIMIT`] the pipes are simply not read until the daemon catches up (the process
//! then waits on a full pipe, as it would for a slow reader).
//!
//! # Where things are
//! This module starts the holder ([`run`]: the spec, the shell, the first daemon) and holds
//! its state ([`Holder`]); [`event_loop`] is the `poll` loop (pipes, children, sockets);
//! [`recording`] what becomes of each pipe read (the spool's batches, the daemon's frames,
//! the spool's health); [`daemon_conn`] the daemon's side (frames written without blocking,
//! a new daemon greeted, its control frames obeyed); [`process_dir`] the files in the process
//! directory and the spare directory an idle holder prepares; [`process_setup`] what the
//! holder process sets up for itself (standard descriptors, signals).
//!
//! [`Hello`]: super::Hello
//! [`SPOOL_QUIET`]: recording::SPOOL_QUIET
//! [`FLUSH_AGE`]: crate::output::spool::FLUSH_AGE

mod daemon_conn;
mod event_loop;
mod process_dir;
mod process_setup;
mod recording;
#[cfg(all(test, target_os = "linux"))]
mod test_holder;

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use super::{ExitNote, HOLDER_FD, HoldSpec, Kind, SOCKET_NAME, recv_frame_with_fd, send_with_fd};
use crate::output::Stream;
use crate::output::spool::{SpoolBuffer, SpoolFiles};
use crate::policy::redact::{RedactStream, Redactor};
use crate::spawn::identity::{self, Identity};
use crate::spawn::{Shell, spawn_shell};
use process_dir::{Prepared, bind_socket};
#[cfg(not(target_os = "linux"))]
use process_setup::close_stray_fds;
pub(super) use process_setup::detach_stdio;
use process_setup::{Signals, prepare_signals, signal_fd};

/// Queued bytes for the daemon above which the pipes are not read.
const BACKLOG_LIMIT: usize = 1 << 20;
/// Size of one pipe read (and so of one output frame at most).
const READ_BYTES: usize = 64 * 1024;

/// Runs a holder; the process exits with the returned code.
pub fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

fn run() -> io::Result<()> {
    name_this_process();
    // SAFETY: descriptor 3 was set up by the daemon's spawn for us alone.
    let first = UnixStream::from(unsafe { OwnedFd::from_raw_fd(HOLDER_FD) });
    // dup2 cleared close-on-exec: the shell must not inherit the daemon's connection.
    nix::fcntl::fcntl(
        &first,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )?;
    #[cfg(not(target_os = "linux"))]
    close_stray_fds();
    detach_stdio();
    // The exit file and the socket are the user's alone; the shell gets the user's umask back.
    let user_umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    // Set up while idle, before the spec: an idle holder waits in the pool, and whatever it
    // does after the spec arrives is on the `exec`'s path.
    prepare_signals()?;
    let signals = signal_fd()?;
    let mut prepared = None;
    let spec = loop {
        let (kind, payload, _) = match recv_frame_with_fd(&first) {
            Ok(frame) => frame,
            Err(e) => {
                // The daemon let this idle holder go (it exited, or drained its pool): the
                // spare directory (and the launcher) go with it.
                if let Some(p) = prepared.take() {
                    Prepared::discard(p);
                }
                return Err(e);
            }
        };
        match kind {
            Kind::Prepare if prepared.is_none() => {
                let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&payload));
                match Prepared::make(dir, user_umask) {
                    Ok(p) => prepared = Some(p.announce(&first)?),
                    Err(e) => {
                        refuse(&first, &e);
                        return Err(e);
                    }
                }
            }
            Kind::Spec => match HoldSpec::decode(&payload) {
                Ok(spec) => break spec,
                Err(e) => {
                    if let Some(p) = prepared.take() {
                        Prepared::discard(p);
                    }
                    return Err(e);
                }
            },
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "expected a spec",
                ));
            }
        }
    };
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&spec.dir));
    // A prepared holder already works in its directory, which the daemon renamed to `dir`
    // (the working directory follows a rename); its socket and exit file are there too.
    let terminal = spec.terminal.is_some();
    // The launcher is already running the command (the daemon wrote it the spec too).
    let (listener, exit_file, launched) = match prepared {
        Some(p) => {
            let (listener, exit_file, launched) = p.into_parts(terminal);
            (Some(listener), Some(exit_file), launched)
        }
        None => {
            std::env::set_current_dir(&dir)?;
            (None, None, None)
        }
    };
    let greeted = launched.is_some();
    let mut kept = None;
    #[cfg(target_os = "linux")]
    let gate = crate::faults::ContinueGate::close(launched.is_none(), &spec.command);
    let (shell, identity) = match launched {
        Some(launched) => launched,
        None => {
            let shell = match spawn(&spec, user_umask) {
                Ok((s, listener)) => {
                    kept = listener;
                    s
                }
                Err(e) => {
                    refuse(&first, &e);
                    return Err(e);
                }
            };
            // A quick command may have exited already: still a zombie, unreaped, with its start
            // time.
            let identity = identity::identify_child(shell.pid);
            (shell, identity)
        }
    };
    #[cfg(target_os = "linux")]
    gate.wait(); // tests only
    let secrets = super::Secrets(spec.redact);
    let redactor = Redactor::from_pairs(secrets.0.clone());
    let spool = (spec.spool_cap > 0)
        .then(|| (SpoolBuffer::new(), SpoolFiles::create(&dir, spec.spool_cap)));
    // A batch of 0 would be a spec from a daemon that wants every read written at once.
    let spool_batch = usize::try_from(spec.spool_batch.max(1)).unwrap_or(usize::MAX);
    let mut h = Holder {
        shell: identity,
        holder_pid: std::process::id() as i32,
        stdin: Some(shell.stdin),
        // A terminal is one stream: its "stderr" is at EOF from the start.
        pipes: [Some(shell.stdout), (!terminal).then_some(shell.stderr)],
        terminal,
        secrets,
        redact: [
            redactor.clone().map(RedactStream::new),
            redactor.map(RedactStream::new),
        ],
        spool,
        spool_batch,
        last_output: std::time::Instant::now(),
        next_seq: 1,
        exit: None,
        children: true,
        conn: None,
        listener: None,
        exit_written: false,
        exit_file,
        signals,
        reported_health: 0,
        kept,
    };
    // The socket for later daemons exists before the first daemon hears of the shell: a daemon
    // killed right after answering its `exec` leaves a holder the next one can find (bound
    // later, the next daemon could look in between, find nothing and call the process lost).
    // A prepared holder bound it while idle.
    let listener = match listener {
        Some(l) => l,
        None => bind_socket()?,
    };
    h.listener = Some(listener);
    let connected = if greeted {
        // The daemon was greeted while this holder was idle (`Prepared::announce`).
        h.keep(first)
    } else {
        h.connect(first)
    };
    if let Err(e) = connected {
        // The daemon died before it heard of the shell: its `exec` failed, and a daemon that
        // recovers meanwhile may already have looked for leftovers. The shell must not run on
        // unsupervised: its group goes now.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(h.shell.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        h.reap();
        let _ = std::fs::remove_file(SOCKET_NAME);
        return Err(e);
    }
    h.serve();
    h.write_spool();
    if let Some((_, files)) = h.spool.as_mut() {
        files.finish();
    }
    let _ = std::fs::remove_file(SOCKET_NAME);
    Ok(())
}

/// Tells the daemon why this holder cannot do what it asked (a [`Kind::Failed`] frame); the
/// daemon may be gone already, which changes nothing.
fn refuse(sock: &UnixStream, why: &io::Error) {
    let frame = super::Encoder::new(Kind::Failed)
        .rest(why.to_string().as_bytes())
        .finish();
    let _ = send_with_fd(sock, &frame, None);
}

/// Starts the shell the usual way (no launcher: an unprepared holder, or a terminal), under the
/// user's umask rather than the holder's; a sandboxed one is forked and enters its sandbox first
/// (Linux), and may return its proxy listener.
fn spawn(
    spec: &HoldSpec,
    user_umask: nix::sys::stat::Mode,
) -> io::Result<(Shell, Option<OwnedFd>)> {
    use nix::sys::stat::umask;
    #[cfg(target_os = "linux")]
    if spec.sandbox.is_some() {
        let pty = spec.terminal.map(crate::spawn::pty::open).transpose()?;
        return super::launcher::spawn_sandboxed(spec, user_umask.bits(), pty);
    }
    let shell_spec = spec.spawn_spec();
    // Seatbelt (macOS) needs the private temp dir made here; Linux's sandbox makes its own.
    #[cfg(not(target_os = "linux"))]
    if let Some(plan) = &spec.sandbox {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&plan.tmp) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    // The holder is single-threaded: nothing else creates a file while the umask is the user's.
    let holders = umask(user_umask);
    let started = match spec.terminal {
        Some(size) => crate::spawn::pty::start(&shell_spec, size),
        None => spawn_shell(&shell_spec),
    };
    umask(holders);
    started.map(|shell| (shell, None))
}

/// A connected daemon.
struct Conn {
    sock: UnixStream,
    /// Frames not yet written, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Bytes read from the daemon, not yet a whole frame.
    inbuf: Vec<u8>,
}

/// A holder at work: the shell's pipes, the spool, the daemon's connection and the socket later
/// daemons connect to, served by one `poll` loop ([`Holder::serve`]).
struct Holder {
    shell: Identity,
    holder_pid: i32,
    /// The holder's copy of stdin's write end: it keeps stdin open while no daemon runs.
    stdin: Option<OwnedFd>,
    /// stdout, stderr; `None` at EOF. A terminal's master is its stdout (`EIO` after the
    /// last slave closes ends it like EOF), and it has no stderr.
    pipes: [Option<OwnedFd>; 2],
    /// Runs on a terminal (`stdin` is then a duplicate of the master).
    terminal: bool,
    /// The spec's secrets, given back to every daemon in its [`Hello`](super::Hello).
    secrets: super::Secrets,
    redact: [Option<RedactStream>; 2],
    spool: Option<(SpoolBuffer, SpoolFiles)>,
    /// Buffered spool bytes at which they are written (the spec's [`HoldSpec::spool_batch`]).
    spool_batch: usize,
    /// When the last output was read (the spool's buffer is written after
    /// [`SPOOL_QUIET`](recording::SPOOL_QUIET)).
    last_output: std::time::Instant,
    next_seq: u64,
    exit: Option<ExitNote>,
    /// Something may still be ours to reap (false once `waitpid` says ECHILD).
    children: bool,
    conn: Option<Conn>,
    /// Where later daemons connect (bound right after the first daemon was greeted).
    listener: Option<UnixListener>,
    /// The exit file is written (after the frames that a waiting `exec` needs).
    exit_written: bool,
    /// The exit file, created empty ahead of time (a prepared holder): the status is written
    /// into it in place, with no file created on the way out.
    exit_file: Option<std::fs::File>,
    signals: Signals,
    /// Spool bytes lost as last told to the daemon.
    reported_health: u64,
    /// A descriptor kept for every daemon (`Kind::Keep`, or the shell's process made it): a
    /// sandboxed command's proxy listener, which the daemon serves the proxy on.
    kept: Option<OwnedFd>,
}

const STREAMS: [Stream; 2] = [Stream::Stdout, Stream::Stderr];

/// Names the holder `yieldshell-hold` in `ps`/`top`: it is started through `/proc/self/fd/N`, so
/// the kernel would otherwise name it after the descriptor number ("11").
fn name_this_process() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which this is.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"yieldshell-hold".as_ptr());
    }
}
