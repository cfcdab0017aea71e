//! The launcher (Linux): a prepared holder's shell process, forked while the holder is idle and
//! waiting for its command, so that an `exec` wakes one process, which `exec`s `sh -c` at once.
//!
//! Everything that does not depend on the command is done ahead of time: the fork, the pipes
//! (stdin, stdout, stderr, as descriptors 0–2), the new session, every signal at its default with
//! an empty mask, the user's umask (the holder itself works under 077), every other descriptor
//! closed. The launcher then blocks reading the spec on descriptor 3, one end of a socket pair
//! whose other end the holder handed to the daemon (`Kind::Ready`); the daemon writes the very
//! spec frame it gives the holder into it, straight from the `exec`. The launcher changes into
//! the working directory and `exec`s `/bin/sh -c COMMAND` with exactly the spec's environment and
//! the process marker; its pid and start time, which `exec` keeps, are the shell's, and the
//! holder told the daemon both (and handed it stdin's write end) while idle.
//!
//! The socket is close-on-exec: the daemon reads EOF once the shell runs, as `posix_spawn`'s
//! caller learns it. A launcher that cannot run the command writes why into the socket instead
//! and exits 127, and the `exec` fails to start, as it would have with a spawn; one whose spec
//! never comes (the daemon let the idle holder go, or died) exits 127 when the socket closes,
//! saying on its stderr that the command did not run, and its holder reaps it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::{HoldSpec, Kind};
use crate::spawn::identity::{self, Identity};
use crate::spawn::{Shell, enlarge_pipe, set_default_disposition, shell_strings};

/// The descriptor the launcher reads its spec from.
const SPEC_FD: RawFd = 3;
/// What a launcher exits with when it cannot run the command (a shell's "command not found").
const CANNOT_RUN: i32 = 127;

/// A launcher, from its holder's side.
#[derive(Debug)]
pub struct Launcher {
    /// Its pid and start time: the shell's, once it has `exec`ed.
    pub identity: Identity,
    /// Write end of its stdin.
    pub stdin: OwnedFd,
    /// Read end of its stdout.
    pub stdout: OwnedFd,
    /// Read end of its stderr.
    pub stderr: OwnedFd,
}

impl Launcher {
    /// Forks a launcher whose shell runs with `umask`. Returns it and the daemon's end of its
    /// socket (the holder must not keep a copy, or a launcher whose daemon died would wait for
    /// ever). The holder is single-threaded, so the child may run any code.
    pub fn start(umask: libc::mode_t) -> io::Result<(Launcher, OwnedFd)> {
        use nix::fcntl::OFlag;
        let (stdin_r, stdin_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (stdout_r, stdout_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (stderr_r, stderr_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (spec_r, spec_w) = {
            use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
            socketpair(
                AddressFamily::Unix,
                SockType::Stream,
                None,
                SockFlag::SOCK_CLOEXEC,
            )?
        };
        enlarge_pipe(&stdout_r);
        enlarge_pipe(&stderr_r);
        // SAFETY: the holder is single-threaded (no lock can be held by another thread across
        // the fork); the child only arranges its descriptors and signals, then waits and execs.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => wait_and_run(
                [
                    stdin_r.as_raw_fd(),
                    stdout_w.as_raw_fd(),
                    stderr_w.as_raw_fd(),
                ],
                spec_r.as_raw_fd(),
                umask,
            ),
            pid => {
                drop((stdin_r, stdout_w, stderr_w, spec_r));
                let identity = identity::identify_child(pid);
                Ok((
                    Launcher {
                        identity,
                        stdin: stdin_w,
                        stdout: stdout_r,
                        stderr: stderr_r,
                    },
                    spec_w,
                ))
            }
        }
    }

    /// Ends a launcher that will not be used (the exec wants a terminal, or the holder is let
    /// go) and reaps it, so it never lingers as a zombie or an orphan.
    pub fn discard(self) {
        let pid = nix::unistd::Pid::from_raw(self.identity.pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
    }
}

/// The launcher itself: set up, wait for the spec, exec. Never returns.
fn wait_and_run(stdio: [RawFd; 3], spec: RawFd, umask: libc::mode_t) -> ! {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which this is.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"yieldshell-lnch".as_ptr());
    }
    become_shell_process(Stdio::Fds(stdio), spec, umask);
    let why = match read_spec() {
        Ok(spec) => exec_shell(&spec, SPEC_FD, None),
        Err(e) => e,
    };
    if why.kind() == io::ErrorKind::UnexpectedEof {
        // A closed socket is the daemon letting the holder go, or dying after it gave the
        // holder the spec but before it gave it here. Then the holder keeps this process's
        // output and exit status for the next daemon: say, where the command's own errors would
        // be, that it never ran. (Let go while idle, the holder reads nothing: no harm.)
        let message =
            b"yieldshell: the daemon stopped before this command could start; it did not run\n";
        // SAFETY: writing a live buffer to this process's stderr.
        unsafe {
            libc::write(2, message.as_ptr().cast(), message.len());
        }
    } else {
        report_failure(SPEC_FD, &why);
    }
    // SAFETY: ends this process without running the holder's destructors or exit handlers.
    unsafe { libc::_exit(CANNOT_RUN) }
}

/// What a shell's process gets as descriptors 0–2.
pub(super) enum Stdio<'a> {
    /// These descriptors (pipe ends), in order.
    Fds([RawFd; 3]),
    /// The slave of a terminal, opened after `setsid` (so it becomes the controlling terminal).
    Terminal(&'a std::ffi::CStr),
}

/// Makes this freshly forked child of the holder the shell's process, short of the command: a
/// session of its own; `stdio` as descriptors 0–2 and `report` (the socket its start is
/// reported on) as [`SPEC_FD`], close-on-exec, every other descriptor closed; every signal at its
/// default with an empty mask (what posix_spawn's SETSIGDEF and SETSIGMASK give a spawned shell:
/// the holder ignores SIGPIPE and blocks SIGCHLD); the user's `umask`. The holder is
/// single-threaded, so the child may run any code.
pub(super) fn become_shell_process(stdio: Stdio<'_>, report: RawFd, umask: libc::mode_t) {
    // SAFETY: plain descriptor, session and signal calls on this process's own state.
    unsafe {
        libc::setsid();
        match stdio {
            Stdio::Fds(fds) => {
                // The pipes are above descriptor 3 (0–2 are /dev/null in a holder, 3 its
                // connection), so no dup2 below overwrites a descriptor a later one reads. dup2
                // clears close-on-exec.
                for (to, from) in fds.into_iter().enumerate() {
                    libc::dup2(from, to as RawFd);
                }
            }
            Stdio::Terminal(slave) => {
                // A session leader without a terminal that opens one (no O_NOCTTY) acquires it.
                let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
                if fd >= 0 {
                    for to in 0..3 {
                        libc::dup2(fd, to);
                    }
                    if fd > 2 && fd != report {
                        libc::close(fd);
                    }
                }
            }
        }
        if report != SPEC_FD {
            libc::dup2(report, SPEC_FD);
        }
        libc::fcntl(SPEC_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::syscall(libc::SYS_close_range, (SPEC_FD + 1) as u32, u32::MAX, 0u32);
        // Every disposition to its default (glibc's reserved real-time signals included, hence
        // the raw syscall) and an empty mask.
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                set_default_disposition(sig);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::umask(umask);
    }
}

/// Tells whoever waits on `report` why the command cannot run (a [`Kind::Failed`] frame).
pub(super) fn report_failure(report: RawFd, why: &io::Error) {
    let frame = super::Encoder::new(Kind::Failed)
        .rest(why.to_string().as_bytes())
        .finish();
    // SAFETY: `report` is this process's end of the socket, open until exec closes it.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(report) };
    let _ = super::send_with_fd(&socket, &frame, None);
}

/// Reads the spec frame from [`SPEC_FD`] (EOF when the daemon let the holder go).
fn read_spec() -> io::Result<HoldSpec> {
    // SAFETY: SPEC_FD is this process's end of the socket, open until exec closes it.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(SPEC_FD) };
    match super::recv_frame_with_fd(&socket)? {
        (Kind::Spec, payload, _) => HoldSpec::decode(&payload),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "not a spec")),
    }
}

/// Enters the spec's sandbox (reporting its proxy listener, if it made one, on `report` as a
/// [`Kind::Listener`] frame), changes into the working directory and execs `sh -c`; returns
/// only the reason it could not. `terminal` is the slave's path when it runs on one.
pub(super) fn exec_shell(
    spec: &HoldSpec,
    report: RawFd,
    terminal: Option<&std::path::Path>,
) -> io::Error {
    let (argv, envp, cwd) = match shell_strings(&spec.spawn_spec()) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if let Some(plan) = &spec.sandbox {
        match crate::sandbox::linux::enter(plan, terminal) {
            Ok(Some(listener)) => {
                let frame = super::Encoder::new(Kind::Listener).finish();
                // SAFETY: `report` is this process's end of the socket, open until exec.
                let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(report) };
                if let Err(e) = super::send_with_fd(&socket, &frame, Some(listener.as_raw_fd())) {
                    return io::Error::new(
                        e.kind(),
                        format!("handing the sandbox's proxy listener over: {e}"),
                    );
                }
            }
            Ok(None) => {}
            Err(e) => {
                return io::Error::new(e.kind(), format!("the sandbox could not be applied: {e}"));
            }
        }
    }
    if let Err(e) = nix::unistd::chdir(cwd.as_c_str()) {
        return e.into();
    }
    match nix::unistd::execve(&argv[0], &argv, &envp) {
        Ok(never) => match never {},
        Err(e) => e.into(),
    }
}

/// The descriptors a sandboxed shell is started on: both ends of its three pipes, or a terminal.
enum ShellIo {
    Pipes {
        /// (read end, write end) of stdin, stdout, stderr.
        ends: [(OwnedFd, OwnedFd); 3],
    },
    Terminal {
        pty: crate::spawn::pty::Pty,
        slave: std::ffi::CString,
    },
}

/// Starts a sandboxed shell the way a launcher does, for a holder without a launcher for it (a
/// terminal, or no idle holder was ready): forks, the child becomes the shell's process (on the
/// pipes, or on the terminal `terminal`), enters the sandbox and execs, and this waits on a
/// close-on-exec socket until it has (EOF) or has said why not. Returns the shell and the proxy
/// listener its sandbox made, if any. The caller (the holder) is single-threaded and reaps the
/// child.
pub fn spawn_sandboxed(
    spec: &HoldSpec,
    umask: libc::mode_t,
    terminal: Option<crate::spawn::pty::Pty>,
) -> io::Result<(Shell, Option<OwnedFd>)> {
    use nix::fcntl::OFlag;
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (report_r, report_w) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    let io = match terminal {
        Some(pty) => {
            let slave = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
                pty.slave.as_os_str(),
            ))
            .map_err(|_| io::Error::other("the terminal's path contains a NUL byte"))?;
            ShellIo::Terminal { pty, slave }
        }
        None => {
            let ends = [
                nix::unistd::pipe2(OFlag::O_CLOEXEC)?,
                nix::unistd::pipe2(OFlag::O_CLOEXEC)?,
                nix::unistd::pipe2(OFlag::O_CLOEXEC)?,
            ];
            enlarge_pipe(&ends[1].0);
            enlarge_pipe(&ends[2].0);
            ShellIo::Pipes { ends }
        }
    };
    // SAFETY: the holder is single-threaded (no lock can be held by another thread across the
    // fork); the child only sets itself up, enters the sandbox and execs, or exits.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let (stdio, terminal_path) = match &io {
                ShellIo::Pipes { ends } => (
                    Stdio::Fds([
                        ends[0].0.as_raw_fd(),
                        ends[1].1.as_raw_fd(),
                        ends[2].1.as_raw_fd(),
                    ]),
                    None,
                ),
                ShellIo::Terminal { pty, slave } => {
                    (Stdio::Terminal(slave), Some(pty.slave.as_path()))
                }
            };
            become_shell_process(stdio, report_w.as_raw_fd(), umask);
            let why = exec_shell(spec, SPEC_FD, terminal_path);
            report_failure(SPEC_FD, &why);
            // SAFETY: ends the child without running the holder's destructors.
            unsafe { libc::_exit(CANNOT_RUN) }
        }
        pid => {
            drop(report_w);
            let shell = match io {
                ShellIo::Pipes {
                    ends: [stdin, stdout, stderr],
                } => {
                    drop((stdin.0, stdout.1, stderr.1));
                    Shell {
                        pid,
                        stdin: stdin.1,
                        stdout: stdout.0,
                        stderr: stderr.0,
                    }
                }
                // The master is the one output stream; its "stderr" is dropped by the holder.
                ShellIo::Terminal { pty, .. } => Shell {
                    pid,
                    stdin: pty.master.try_clone()?,
                    stderr: pty.master.try_clone()?,
                    stdout: pty.master,
                },
            };
            match read_start_report(&report_r) {
                Ok(listener) => Ok((shell, listener)),
                Err(e) => {
                    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
                    Err(e)
                }
            }
        }
    }
}

/// Reads what the shell's process reports before its exec: a [`Kind::Listener`] frame (with
/// the listener), a [`Kind::Failed`] one (why it cannot run), then EOF once the exec happened.
pub(super) fn read_start_report(report: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut listener = None;
    loop {
        match super::recv_frame_with_fd(report) {
            Ok((Kind::Listener, _, fd)) => listener = fd,
            Ok((Kind::Failed, why, _)) => {
                return Err(io::Error::other(String::from_utf8_lossy(&why).into_owned()));
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the shell's process sent an unexpected frame",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(listener),
            Err(e) => return Err(e),
        }
    }
}
