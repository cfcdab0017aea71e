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
use crate::spawn::{enlarge_pipe, set_default_disposition, shell_strings};
use crate::spawn::identity::{self, Identity};

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
    // SAFETY: plain descriptor, session and signal calls on this process's own state.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"yieldshell-lnch".as_ptr());
        libc::setsid();
        // The pipes are above descriptor 3 (0–2 are /dev/null in a holder, 3 its connection),
        // so no dup2 below overwrites a descriptor a later one reads. dup2 clears close-on-exec.
        for (to, from) in stdio.into_iter().enumerate() {
            libc::dup2(from, to as RawFd);
        }
        libc::dup2(spec, SPEC_FD);
        libc::fcntl(SPEC_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::syscall(libc::SYS_close_range, (SPEC_FD + 1) as u32, u32::MAX, 0u32);
        // Every disposition to its default (the holder ignores SIGPIPE; glibc's reserved
        // real-time signals included, hence the raw syscall) and an empty mask (the holder
        // blocks SIGCHLD): what posix_spawn's SETSIGDEF and SETSIGMASK give a spawned shell.
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
    let why = match read_spec().and_then(|spec| run(&spec)) {
        Ok(never) => match never {},
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
        let message = why.to_string();
        // SAFETY: writing a live buffer into this process's end of the socket.
        unsafe {
            libc::send(
                SPEC_FD,
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_NOSIGNAL,
            );
        }
    }
    // SAFETY: ends this process without running the holder's destructors or exit handlers.
    unsafe { libc::_exit(CANNOT_RUN) }
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

/// Changes into the spec's working directory and execs `sh -c`; returns only on failure.
fn run(spec: &HoldSpec) -> io::Result<std::convert::Infallible> {
    let (argv, envp, cwd) = shell_strings(&spec.spawn_spec())?;
    nix::unistd::chdir(cwd.as_c_str())?;
    match nix::unistd::execve(&argv[0], &argv, &envp) {
        Ok(never) => match never {},
        Err(e) => Err(e.into()),
    }
}
