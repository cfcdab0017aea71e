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

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::{
    EXIT_FILE, ExitNote, HOLDER_FD, Hello, HoldSpec, Kind, SOCKET_NAME, recv_frame_with_fd,
    send_with_fd, split_frame, stream_byte,
};
use crate::output::Stream;
use crate::output::spool::{FLUSH_AGE, SpoolBuffer, SpoolFiles};
use crate::policy::redact::{RedactStream, Redactor};
use crate::spawn::identity::{self, Identity};
use crate::spawn::reaper::ExitHow;
use crate::spawn::{Shell, spawn_shell};

/// Queued bytes for the daemon above which the pipes are not read.
const BACKLOG_LIMIT: usize = 1 << 20;
/// Size of one pipe read (and so of one output frame at most).
const READ_BYTES: usize = 64 * 1024;
/// How long output must pause before the spool's buffer is written. A process that prints a
/// line now and then has it on disk at once, give or take this; a flood's reads (many per
/// millisecond) are batched instead of one `pwrite` each. A holder killed outright loses at most
/// this long, [`FLUSH_AGE`] or one batch of its process's output on disk.
const SPOOL_QUIET: std::time::Duration = std::time::Duration::from_millis(50);

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

/// Points descriptors 0–2 at /dev/null: the holder must not keep the daemon's terminal or the
/// pipes of whoever started the daemon open for as long as its process runs.
pub(super) fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which nothing else here uses.
            unsafe {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}

/// Closes every descriptor above the daemon's connection that this holder inherited. On macOS
/// a descriptor the daemon was receiving (no `MSG_CMSG_CLOEXEC`) or accepting (no `accept4`)
/// while it forked this holder may not have been close-on-exec yet; a holder keeping another
/// process's stdin pipe open would keep that stdin from ever closing. Linux sets the flag
/// atomically, so there is nothing to close.
#[cfg(not(target_os = "linux"))]
fn close_stray_fds() {
    // /dev/fd lists this process's open descriptors (the listing's own is closed again by
    // the time the loop runs, and closing it twice is a harmless EBADF).
    let Ok(dir) = std::fs::read_dir("/dev/fd") else {
        return;
    };
    let open: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|fd| *fd > HOLDER_FD) {
        // SAFETY: nothing in this process uses a descriptor above HOLDER_FD yet.
        unsafe {
            libc::close(fd);
        }
    }
}

/// SIGPIPE ignored (a vanished daemon is an error value, never a death); on Linux SIGCHLD
/// blocked for the signalfd and the holder made the subreaper of its tree. The shell gets an
/// empty mask and default dispositions from its spawn.
///
/// macOS has no subreaper: a descendant orphaned by the shell goes to launchd, not to the holder,
/// so the holder reaps only the shell, and the daemon finds such a descendant by its marker.
fn prepare_signals() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_IGN installs no handler code.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) }?;
    #[cfg(target_os = "linux")]
    {
        use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
        let mut set = SigSet::empty();
        set.add(Signal::SIGCHLD);
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
        nix::sys::prctl::set_child_subreaper(true)?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
type Signals = nix::sys::signalfd::SignalFd;

#[cfg(target_os = "linux")]
fn signal_fd() -> io::Result<Signals> {
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Without signalfd (macOS): the read end of a self-pipe that a SIGCHLD handler writes a byte
/// to, so `poll` wakes on a child's exit as it does on Linux.
#[cfg(not(target_os = "linux"))]
type Signals = OwnedFd;

/// The self-pipe's write end, for the handler (set once, before the handler is installed).
#[cfg(not(target_os = "linux"))]
static CHILD_PIPE_WRITE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

#[cfg(not(target_os = "linux"))]
extern "C" fn on_child_signal(_: libc::c_int) {
    let fd = CHILD_PIPE_WRITE.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        // write(2) is async-signal-safe; errno is saved around it for the code interrupted. A
        // full pipe (EAGAIN) is fine: it is readable already, which is all the loop needs.
        let saved = nix::errno::Errno::last_raw();
        // SAFETY: one byte from a static into a descriptor this process owns.
        unsafe {
            libc::write(fd, [1u8].as_ptr().cast(), 1);
        }
        nix::errno::Errno::set_raw(saved);
    }
}

/// Creates the self-pipe (both ends non-blocking and close-on-exec, so the shell inherits
/// neither) and installs the SIGCHLD handler that writes to it.
#[cfg(not(target_os = "linux"))]
fn signal_fd() -> io::Result<Signals> {
    use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    use std::os::fd::IntoRawFd;
    // macOS has no pipe2: the flags are set right after, before any child exists.
    let (read, write) = nix::unistd::pipe()?;
    for end in [&read, &write] {
        fcntl(end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        fcntl(end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    // The write end lives as long as the process (the handler may run until exit).
    CHILD_PIPE_WRITE.store(write.into_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_child_signal),
        SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
        SigSet::empty(),
    );
    // SAFETY: the handler only calls write(2) and touches errno, both async-signal-safe.
    unsafe { sigaction(Signal::SIGCHLD, &action) }?;
    Ok(read)
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

impl Conn {
    fn backlog(&self) -> usize {
        self.out.len() - self.sent
    }
}

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
    /// The spec's secrets, given back to every daemon in its [`Hello`].
    secrets: super::Secrets,
    redact: [Option<RedactStream>; 2],
    spool: Option<(SpoolBuffer, SpoolFiles)>,
    /// Buffered spool bytes at which they are written (the spec's [`HoldSpec::spool_batch`]).
    spool_batch: usize,
    /// When the last output was read (the spool's buffer is written after [`SPOOL_QUIET`]).
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

impl Holder {
    fn done(&self) -> bool {
        self.exit.is_some()
            && self.pipes.iter().all(Option::is_none)
            && !self.children
            && self.conn.as_ref().is_none_or(|c| c.backlog() == 0)
    }

    fn open_pipes(&self) -> usize {
        self.pipes.iter().filter(|p| p.is_some()).count()
    }

    fn hello(&self) -> Hello {
        Hello {
            holder_pid: self.holder_pid,
            shell_pid: self.shell.pid,
            shell_start_time: self.shell.start_time,
            next_seq: self.next_seq,
            exit: self.exit,
            eof: super::PipesAtEof {
                stdout: self.pipes[0].is_none(),
                stderr: self.pipes[1].is_none(),
            },
            dropped: self.spool_lost(),
            stdin_open: self.stdin.is_some(),
            terminal: self.terminal,
            protocol: super::PROTOCOL,
            listener: self.kept.is_some(),
            redact: self.secrets.clone(),
        }
    }

    /// Makes `sock` the daemon's connection (replacing any older one, whose daemon is gone) and
    /// greets it. Everything queued for the old one is written to the spool first: the new
    /// daemon rebuilds its ring from the spool up to the greeting's `next_seq`.
    fn connect(&mut self, sock: UnixStream) -> io::Result<()> {
        self.write_spool();
        sock.set_nonblocking(true)?;
        // stdin's descriptor first, then the kept one: `Hello` says which are there.
        let fds: Vec<i32> = self
            .stdin
            .iter()
            .chain(self.kept.iter())
            .map(AsRawFd::as_raw_fd)
            .collect();
        super::send_with_fds(&sock, &self.hello().encode(), &fds)?;
        self.keep(sock)
    }

    /// Makes `sock`, whose daemon has been greeted already, the daemon's connection.
    fn keep(&mut self, sock: UnixStream) -> io::Result<()> {
        sock.set_nonblocking(true)?;
        self.conn = Some(Conn {
            sock,
            out: Vec::new(),
            sent: 0,
            inbuf: Vec::new(),
        });
        Ok(())
    }

    fn serve(&mut self) {
        let mut buf = vec![0u8; READ_BYTES];
        while !self.done() {
            fn readable(fd: &impl AsFd) -> PollFd<'_> {
                PollFd::new(fd.as_fd(), PollFlags::POLLIN)
            }
            let reading = self
                .conn
                .as_ref()
                .is_none_or(|c| c.backlog() < BACKLOG_LIMIT);
            let mut fds = Vec::with_capacity(5);
            // Exits are news only when the signalfd (or the self-pipe) says so.
            fds.push(readable(&self.signals));
            let signals_at = 0;
            let listener_at = self.listener.as_ref().map(|l| {
                fds.push(readable(l));
                fds.len() - 1
            });
            let conn_at = self.conn.as_ref().map(|c| {
                let mut flags = PollFlags::POLLIN;
                if c.backlog() > 0 {
                    flags |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(c.sock.as_fd(), flags));
                fds.len() - 1
            });
            let mut pipe_at = [None, None];
            if reading {
                for (i, p) in self.pipes.iter().enumerate() {
                    if let Some(p) = p {
                        fds.push(readable(p));
                        pipe_at[i] = Some(fds.len() - 1);
                    }
                }
            }
            let timeout = self.spool_due_in().map_or(PollTimeout::NONE, |d| {
                // Rounded up: a wake-up a hair early would find nothing due and poll again.
                let ms = d.as_millis().saturating_add(1);
                PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
            });
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    // Cannot wait: do not spin on an error that will not go away.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            let ready = |at: Option<usize>| {
                at.and_then(|i| fds[i].revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let conn_ready = ready(conn_at);
            let listener_ready = ready(listener_at);
            let pipes_ready = [ready(pipe_at[0]), ready(pipe_at[1])];
            let children_changed = ready(Some(signals_at));
            drop(fds);
            if children_changed {
                self.drain_signals();
                self.reap();
            }
            let open = self.open_pipes();
            for (i, r) in pipes_ready.into_iter().enumerate() {
                if r {
                    self.read_pipe(i, &mut buf);
                }
            }
            if self.exit.is_none() && self.open_pipes() == 0 && open > 0 {
                // The last pipe just closed, most often because the shell exited: the kernel
                // closes an exiting process's descriptors just before it signals the parent.
                // Reaping now usually puts the exit in the same write as the EOFs, which
                // spares the daemon (and a short command's `exec`) a second wake-up.
                self.reap();
            }
            if conn_ready {
                self.serve_conn();
            }
            if listener_ready {
                self.accept();
            }
            if self.spool_due_in() == Some(std::time::Duration::ZERO) {
                self.write_spool();
            }
            self.flush();
            // After the frames: the file is for a daemon that was not there to get them.
            if let Some(note) = self.exit
                && !self.exit_written
            {
                self.exit_written = true;
                write_exit_file(note, self.exit_file.as_ref());
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn drain_signals(&mut self) {
        while let Ok(Some(_)) = self.signals.read_signal() {}
    }

    #[cfg(not(target_os = "linux"))]
    fn drain_signals(&mut self) {
        let mut bytes = [0u8; 64];
        while matches!(nix::unistd::read(&self.signals, &mut bytes), Ok(n) if n > 0) {}
    }

    /// Reaps every exited child: the shell's status is recorded (the daemon first, then the
    /// file); adopted orphans are only collected.
    fn reap(&mut self) {
        use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
        let mut shell_ended = None;
        loop {
            let (pid, how) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitHow::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, ExitHow::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) => {
                    self.children = true;
                    break;
                }
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    self.children = false;
                    break;
                }
            };
            if pid.as_raw() == self.shell.pid && self.exit.is_none() {
                let note = ExitNote {
                    how,
                    ended_at_ms: crate::status::unix_ms(std::time::SystemTime::now()),
                };
                self.exit = Some(note);
                shell_ended = Some(note);
            }
        }
        if let Some(note) = shell_ended {
            // The daemon first (a short command's `exec` waits for it), saying whether any child
            // is left (then it looks for leftovers); the exit file, which only a later daemon
            // reads, once this round's frames are sent.
            self.queue(&note.encode(!self.children));
        }
    }

    fn read_pipe(&mut self, i: usize, buf: &mut [u8]) {
        let Some(p) = self.pipes[i].as_ref() else {
            return;
        };
        match nix::unistd::read(p, buf) {
            Ok(0) => self.end_pipe(i),
            Ok(n) => {
                let stream = STREAMS[i];
                match self.redact[i].as_mut() {
                    Some(r) => {
                        let mut clean = Vec::with_capacity(n);
                        r.push(&buf[..n], &mut clean);
                        self.record(stream, &clean);
                    }
                    None => self.record(stream, &buf[..n]),
                }
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => self.end_pipe(i),
        }
    }

    /// EOF (or a read error) on pipe `i`: releases what redaction held back, tells the daemon.
    fn end_pipe(&mut self, i: usize) {
        self.pipes[i] = None;
        if let Some(mut r) = self.redact[i].take() {
            let mut rest = Vec::new();
            r.finish(&mut rest);
            self.record(STREAMS[i], &rest);
        }
        // The daemon may close the log on this EOF and read it from disk from then on.
        self.write_spool();
        let frame = super::Encoder::new(Kind::Eof)
            .u8(stream_byte(STREAMS[i]))
            .finish();
        self.queue(&frame);
    }

    /// Buffers the bytes for the spool (writing a full batch) and queues them for the daemon.
    /// The spool lacks only the buffer, fewer bytes than the daemon's ring holds.
    fn record(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.last_output = std::time::Instant::now();
        if let Some((buffer, files)) = self.spool.as_mut() {
            buffer.append(stream, data);
            if buffer.pending_len() >= self.spool_batch
                && let Some(batch) = buffer.take()
            {
                files.write(batch);
            }
        }
        self.next_seq += data.len() as u64;
        if let Some(c) = self.conn.as_mut() {
            let len = u32::try_from(2 + data.len()).unwrap_or(u32::MAX);
            c.out.extend_from_slice(&len.to_le_bytes());
            c.out.push(Kind::Output as u8);
            c.out.push(stream_byte(stream));
            c.out.extend_from_slice(data);
        }
        self.report_spool_health();
    }

    /// How long until the spool's buffer is due to be written (zero: now); `None` when it is
    /// empty.
    fn spool_due_in(&self) -> Option<std::time::Duration> {
        let (buffer, _) = self.spool.as_ref()?;
        let age = buffer.age()?;
        let quiet = SPOOL_QUIET.saturating_sub(self.last_output.elapsed());
        Some(quiet.min(FLUSH_AGE.saturating_sub(age)))
    }

    /// Writes the spool's buffer.
    fn write_spool(&mut self) {
        if let Some((buffer, files)) = self.spool.as_mut()
            && let Some(batch) = buffer.take()
        {
            files.write(batch);
            self.report_spool_health();
        }
    }

    /// Tells the daemon when the count of bytes the spool lost has changed.
    fn report_spool_health(&mut self) {
        let lost = self.spool_lost();
        if lost != self.reported_health {
            self.reported_health = lost;
            let failing = self
                .spool
                .as_ref()
                .and_then(|(_, f)| f.failing.clone())
                .unwrap_or_default();
            let frame = super::Encoder::new(Kind::Health)
                .u64(lost)
                .rest(failing.as_bytes())
                .finish();
            self.queue(&frame);
        }
    }

    fn spool_lost(&self) -> u64 {
        self.spool
            .as_ref()
            .map_or(0, |(b, f)| b.discarded + f.dropped)
    }

    fn queue(&mut self, frame: &[u8]) {
        if let Some(c) = self.conn.as_mut() {
            c.out.extend_from_slice(frame);
        }
    }

    /// Writes what the socket takes now; a dead connection is dropped (its daemon is gone).
    fn flush(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        while c.sent < c.out.len() {
            match c.sock.write(&c.out[c.sent..]) {
                Ok(0) => {
                    self.conn = None;
                    return;
                }
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.conn = None;
                    return;
                }
            }
        }
        if c.sent == c.out.len() {
            c.sent = 0;
            c.out.clear();
            // A flood's backlog is memory a quiet process should not keep.
            if c.out.capacity() > 4 * READ_BYTES {
                c.out.shrink_to(READ_BYTES);
            }
        } else if c.sent > c.out.len() / 2 {
            c.out.drain(..c.sent);
            c.sent = 0;
        }
    }

    /// Frames from the daemon, with the descriptors they carry (only `Keep` carries one).
    ///
    /// Frames that arrived before the daemon went away are still obeyed: a daemon that hands
    /// over a proxy listener (`Keep`) and is killed at once leaves the frame and its end in one
    /// read, and dropping the frame would close the listener that every later daemon serves the
    /// proxy on.
    fn serve_conn(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        let mut received = Vec::new();
        let mut gone = false;
        loop {
            match read_with_fds(&c.sock, &mut c.inbuf, &mut received) {
                Ok(0) => {
                    gone = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        let mut kinds = Vec::new();
        let mut at = 0;
        loop {
            match split_frame(&c.inbuf[at..]) {
                Ok(Some((kind, _, len))) => {
                    kinds.push(kind);
                    at += len;
                }
                Ok(None) => break,
                Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        c.inbuf.drain(..at);
        if gone {
            self.conn = None;
        }
        let mut received = received.into_iter();
        for kind in kinds {
            match kind {
                Kind::CloseStdin => self.stdin = None,
                Kind::CloseOutput => {
                    // The daemon stopped waiting for this output (its reader cutoff): whatever
                    // still holds the pipes gets EPIPE, as it did when the daemon read them.
                    self.pipes = [None, None];
                    self.redact = [None, None];
                }
                Kind::Keep => {
                    if let Some(fd) = received.next() {
                        self.kept = Some(fd);
                    }
                }
                _ => {}
            }
        }
    }

    fn accept(&mut self) {
        let Some(listener) = self.listener.as_ref() else {
            return;
        };
        let mut accepted = Vec::new();
        loop {
            match listener.accept() {
                Ok((sock, _)) => accepted.push(sock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        // The newest daemon wins (the instance lock lets only one run at a time). Never a
        // sandboxed process: one that reached this socket (no namespaces hid it) would get the
        // command's stdin and take the holder from its daemon.
        for sock in accepted {
            if more_confined_than_me(&sock) {
                continue;
            }
            if self.connect(sock).is_err() {
                self.conn = None;
            }
        }
    }
}

/// Whether the peer of `sock` is more confined than this holder: `no_new_privs` it lacks, or
/// more seccomp filters (a sandboxed command has both; a daemon has what the holder inherited
/// from it). Linux; elsewhere nothing tells, and no sandbox hides behind `no_new_privs`.
#[cfg(target_os = "linux")]
fn more_confined_than_me(sock: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let Ok(cred) = getsockopt(sock, PeerCredentials) else {
        return true;
    };
    let level = |pid: &str| -> Option<(u32, u32)> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        };
        Some((field("NoNewPrivs:"), field("Seccomp_filters:")))
    };
    match (level(&cred.pid().to_string()), level("self")) {
        (Some(peer), Some(me)) => peer.0 > me.0 || peer.1 > me.1,
        // A peer gone already is no daemon to serve.
        _ => true,
    }
}

#[cfg(not(target_os = "linux"))]
fn more_confined_than_me(_sock: &UnixStream) -> bool {
    false
}

/// One non-blocking `recvmsg` of up to 4 KiB from the daemon into `buf`, keeping any
/// descriptors that came with it (close-on-exec). The bytes read (0 at EOF).
fn read_with_fds(
    sock: &UnixStream,
    buf: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> io::Result<usize> {
    use nix::sys::socket::{ControlMessageOwned, recvmsg};
    let mut chunk = [0u8; 4096];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
    let mut iov = [io::IoSliceMut::new(&mut chunk)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        super::RECV_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let n = msg.bytes;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = c {
            for f in received {
                // SAFETY: a descriptor just received is ours alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(f) });
            }
        }
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Records the exit status where a daemon that was not there to see it finds it (the holder's
/// directory is the process directory). No fsync: an fsync would add milliseconds to every short
/// command's `exec`. Into the file created ahead when there is one: a single write at offset 0
/// of a file that was empty, so a reader sees either nothing (no status yet) or all of it, as
/// with the atomic rename, without creating a file (on some filesystems creating one costs a
/// tenth of a millisecond or more) while the daemon answers the `exec`.
fn write_exit_file(note: ExitNote, ahead: Option<&std::fs::File>) {
    use std::os::unix::fs::FileExt;
    let text = note.file_text();
    if let Some(file) = ahead
        && file.write_all_at(text.as_bytes(), 0).is_ok()
    {
        return;
    }
    let _ = crate::record::write_private_atomically(
        std::path::Path::new("."),
        EXIT_FILE,
        text.as_bytes(),
    );
}

/// Binds `holder.sock` in the working directory (the process directory, or the spare one that
/// becomes it), relative, so a long state-dir path never hits the ~107-byte limit of socket
/// addresses.
fn bind_socket() -> io::Result<UnixListener> {
    let _ = std::fs::remove_file(SOCKET_NAME);
    let listener = UnixListener::bind(SOCKET_NAME)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
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

/// What an idle holder sets up in its spare directory before any `exec` needs it (the daemon's
/// `Prepare`): the two files a holder creates, made while nothing waits for them, and on Linux
/// the shell's process itself ([`super::launcher`]). Creating a file or binding a socket
/// allocates an inode, which on some filesystems (ext4 without a journal scans for recently
/// deleted inodes) costs 0.1–0.2 ms each; a fork and a holder's wake-up cost as much again. The
/// `exec` then pays only the daemon's rename of the directory and one wake-up, the launcher's.
struct Prepared {
    dir: PathBuf,
    listener: UnixListener,
    exit_file: std::fs::File,
    #[cfg(target_os = "linux")]
    launcher: Option<super::launcher::Launcher>,
    /// The launcher's spec pipe, until it is handed to the daemon.
    #[cfg(target_os = "linux")]
    launch: Option<OwnedFd>,
}

impl Prepared {
    fn make(dir: PathBuf, user_umask: nix::sys::stat::Mode) -> io::Result<Prepared> {
        use std::os::unix::fs::OpenOptionsExt;
        std::env::set_current_dir(&dir)?;
        let listener = bind_socket()?;
        let exit_file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(EXIT_FILE)?;
        #[cfg(target_os = "linux")]
        let (launcher, launch) = match super::launcher::Launcher::start(user_umask.bits()) {
            Ok((l, w)) => (Some(l), Some(w)),
            Err(_) => (None, None),
        };
        #[cfg(not(target_os = "linux"))]
        let _ = user_umask;
        Ok(Prepared {
            dir,
            listener,
            exit_file,
            #[cfg(target_os = "linux")]
            launcher,
            #[cfg(target_os = "linux")]
            launch,
        })
    }

    /// Tells the daemon this holder is ready: `Ready`, with the launcher's spec pipe when there
    /// is a launcher, then the launcher's `Hello` (with its stdin), as a holder greets once its
    /// shell runs — the daemon has all it needs before the `exec`.
    fn announce(mut self, sock: &UnixStream) -> io::Result<Prepared> {
        match self.send_ready(sock) {
            Ok(()) => Ok(self),
            Err(e) => {
                // The daemon is gone: nothing of this holder will be used.
                self.discard();
                Err(e)
            }
        }
    }

    fn send_ready(&mut self, sock: &UnixStream) -> io::Result<()> {
        let ready = super::Encoder::new(Kind::Ready).finish();
        #[cfg(target_os = "linux")]
        if let (Some(l), Some(launch)) = (self.launcher.as_ref(), self.launch.take()) {
            send_with_fd(sock, &ready, Some(launch.as_raw_fd()))?;
            // Dropped here: the daemon holds the only write end, so its death ends the wait.
            drop(launch);
            let hello = Hello {
                holder_pid: std::process::id() as i32,
                shell_pid: l.identity.pid,
                shell_start_time: l.identity.start_time,
                next_seq: 1,
                exit: None,
                eof: super::PipesAtEof::default(),
                dropped: 0,
                stdin_open: true,
                terminal: false,
                protocol: super::PROTOCOL,
                listener: false,
                redact: super::Secrets::default(),
            };
            return send_with_fd(sock, &hello.encode(), Some(l.stdin.as_raw_fd()));
        }
        send_with_fd(sock, &ready, None)
    }

    /// What the holder keeps once its spec came: the socket, the exit file, and the launcher as
    /// the shell with its identity — unless the command wants a terminal, which needs a shell
    /// of its own (the launcher then goes).
    fn into_parts(
        self,
        terminal: bool,
    ) -> (UnixListener, std::fs::File, Option<(Shell, Identity)>) {
        #[cfg(target_os = "linux")]
        let shell = match self.launcher {
            Some(l) if terminal => {
                l.discard();
                None
            }
            Some(l) => Some((
                Shell {
                    pid: l.identity.pid,
                    stdin: l.stdin,
                    stdout: l.stdout,
                    stderr: l.stderr,
                },
                l.identity,
            )),
            None => None,
        };
        #[cfg(not(target_os = "linux"))]
        let shell = {
            let _ = terminal;
            None
        };
        (self.listener, self.exit_file, shell)
    }

    /// Removes the spare directory of a holder that was never used, and ends its launcher.
    fn discard(self) {
        #[cfg(target_os = "linux")]
        if let Some(l) = self.launcher {
            l.discard();
        }
        drop(self.listener);
        let _ = std::fs::remove_file(SOCKET_NAME);
        let _ = std::fs::remove_file(EXIT_FILE);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Names the holder `yieldshell-hold` in `ps`/`top`: it is started through `/proc/self/fd/N`, so
/// the kernel would otherwise name it after the descriptor number ("11").
fn name_this_process() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which this is.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"yieldshell-hold".as_ptr());
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A holder with nothing running, linked to a daemon through `sock`.
    fn holder_linked_to(sock: UnixStream) -> Holder {
        sock.set_nonblocking(true).expect("nonblocking");
        Holder {
            shell: Identity {
                pid: 0,
                start_time: 0,
            },
            holder_pid: std::process::id() as i32,
            stdin: None,
            pipes: [None, None],
            terminal: false,
            secrets: super::super::Secrets::default(),
            redact: [None, None],
            spool: None,
            spool_batch: usize::MAX,
            last_output: std::time::Instant::now(),
            next_seq: 1,
            exit: None,
            children: false,
            conn: Some(Conn {
                sock,
                out: Vec::new(),
                sent: 0,
                inbuf: Vec::new(),
            }),
            listener: None,
            exit_written: false,
            exit_file: None,
            signals: signal_fd().expect("signalfd"),
            reported_health: 0,
            kept: None,
        }
    }

    /// A daemon killed right after it handed a sandbox's proxy listener over leaves the `Keep`
    /// frame and its end of the socket to be read together: the holder still keeps the
    /// listener, so the next daemon serves the proxy on it and the command's connections wait
    /// in its backlog meanwhile instead of being refused.
    #[test]
    fn a_listener_handed_over_just_before_the_daemon_died_is_kept() {
        let (daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let keep = super::super::Encoder::new(Kind::Keep).finish();
        send_with_fd(&daemon, &keep, Some(listener.as_raw_fd())).expect("send");
        // The daemon's copies go with it.
        drop(listener);
        drop(daemon);
        let mut h = holder_linked_to(holder_end);
        h.serve_conn();
        assert!(h.conn.is_none(), "the daemon's end is seen");
        assert!(h.kept.is_some(), "the listener handed over is kept");
        std::net::TcpStream::connect(addr).expect("the kept listener still takes connections");
    }

    /// A holder linked to `sock` that spools into `dir` in batches of `batch` bytes.
    fn spooling_holder(sock: UnixStream, dir: &std::path::Path, batch: usize) -> Holder {
        let mut h = holder_linked_to(sock);
        h.spool = Some((SpoolBuffer::new(), SpoolFiles::create(dir, 1 << 30)));
        h.spool_batch = batch;
        h
    }

    fn on_disk(dir: &std::path::Path) -> Vec<u8> {
        std::fs::read(dir.join("out.0")).unwrap_or_default()
    }

    /// Issue 26 item 7: reads below the batch stay in memory (one `pwrite` per batch, not per
    /// read), while every byte is queued for the daemon at once; reaching the batch writes
    /// everything buffered.
    #[test]
    fn output_is_written_to_the_spool_once_a_batch_is_reached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(holder_end, dir.path(), 100);
        h.record(Stream::Stdout, &[b'a'; 60]);
        assert_eq!(on_disk(dir.path()), b"", "below the batch: buffered");
        let queued = h.conn.as_ref().expect("conn").out.len();
        assert_eq!(queued, 4 + 2 + 60, "the daemon gets the bytes at once");
        h.record(Stream::Stdout, &[b'b'; 40]);
        let mut want = vec![b'a'; 60];
        want.extend_from_slice(&[b'b'; 40]);
        assert_eq!(on_disk(dir.path()), want, "the batch is written whole");
        assert_eq!(h.spool_due_in(), None, "nothing left buffered");
    }

    /// Buffered bytes are due once output pauses for the quiet time (the poll's timeout wakes
    /// the holder for it), and they are written before an EOF goes to the daemon, which may
    /// close the log on it and read the rest from disk.
    #[test]
    fn buffered_output_is_due_after_a_pause_and_written_before_an_eof() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(holder_end, dir.path(), 1 << 20);
        h.record(Stream::Stdout, b"one line\n");
        let wait = h.spool_due_in().expect("something buffered");
        assert!(wait <= SPOOL_QUIET, "{wait:?}");
        h.last_output -= SPOOL_QUIET;
        assert_eq!(h.spool_due_in(), Some(std::time::Duration::ZERO));

        let (read_end, _write_end) = nix::unistd::pipe().expect("pipe");
        h.pipes[0] = Some(read_end);
        h.record(Stream::Stdout, b"last\n");
        h.end_pipe(0);
        assert_eq!(on_disk(dir.path()), b"one line\nlast\n");
        let out = &h.conn.as_ref().expect("conn").out;
        let (kind, payload, _) = split_frame(&out[out.len() - 6..])
            .expect("frame")
            .expect("whole");
        assert_eq!(
            (kind, payload),
            (Kind::Eof, &[stream_byte(Stream::Stdout)][..])
        );
    }
}
