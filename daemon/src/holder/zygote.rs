//! The holder zygote (Linux): one small, single-threaded process per daemon that forks fresh
//! holders on request, so a new holder costs a `fork` of a tiny process instead of an `exec`
//! of the holder binary and its dynamic linking (which, on the daemon's cores, slowed every
//! `exec` that refilled the pool of idle holders).
//!
//! Who forks whom: the daemon starts the zygote (`yieldshell-holder zygote`, or `yieldshelld
//! zygote` without the holder binary) through its reaper, with one end of a socket pair as
//! descriptor 3. For each request — one byte carrying a holder's socket (SCM_RIGHTS) — the
//! zygote forks a child, which forks the holder and exits at once; the zygote reaps that child
//! and the holder, an orphan now, is re-parented to the daemon (a child subreaper): exactly
//! where a holder the daemon spawned itself would be. The holder then owes the zygote nothing:
//! it has only the standard descriptors (on `/dev/null`) and its socket as descriptor 3, the
//! zygote's own socket and every other descriptor closed, so the zygote's death cannot reach
//! it. The child answers the daemon with the holder's pid (`i32` LE; a negative errno when a
//! fork failed) before it exits.
//!
//! Sessions: the zygote is started in a new session, away from the daemon's (a signal to the
//! daemon's process group or a hangup of its terminal never reaches it), and its holders stay
//! in that session, each in a process group of its own — not a session each. The difference is
//! the scheduler's: with autogroups (`kernel.sched_autogroup_enabled`, on by default on most
//! desktops and here) every new session is a scheduling group of its own, and on a busy
//! machine a holder alone in its group waited about a millisecond for the CPU at each of its
//! wake-ups (`perf sched latency`: 1.1 ms on average against 0.14 ms for the daemon), which
//! cost every `exec` ~2–3 ms; holders sharing one group wake as promptly as the daemon. The
//! zygote, the session's leader, never has a controlling terminal, and a holder (not a
//! leader) can never acquire one; the zygote's death changes nothing for them.
//!
//! The zygote lives as long as its socket: when the daemon exits (or crashes, or replaces it)
//! the socket closes and the zygote exits too; a new daemon starts its own. It never outlives
//! its daemon, and it is not what keeps processes alive — the holders are.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::HOLDER_FD;
use crate::spawn::reaper::Reaper;

/// Argument that turns the holder binary (or `yieldshelld`) into a zygote.
pub const ZYGOTE_ARG: &str = "zygote";

/// How long the daemon waits for the zygote's answer: two forks of a small process take well
/// under a millisecond, but a machine under heavy load may stall it for a while; a zygote that
/// takes this long is stuck and is replaced.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the zygote gave no holder.
#[derive(Debug)]
pub enum ForkError {
    /// It answered that a fork failed (the zygote itself is fine).
    Refused(io::Error),
    /// It did not answer (gone, stuck, or garbled): replace it.
    Broken(io::Error),
}

/// The daemon's handle on its zygote. Dropping it closes the socket, and the zygote exits.
#[derive(Debug)]
pub struct Zygote {
    sock: UnixStream,
    pid: i32,
}

impl Zygote {
    /// Starts a zygote (through `reaper`, which reaps it when it exits).
    pub fn start(reaper: &Reaper) -> io::Result<Zygote> {
        let (ours, theirs) = UnixStream::pair()?;
        let pid = super::start::spawn_zygote(reaper, &theirs)?;
        drop(theirs);
        ours.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        Ok(Zygote { sock: ours, pid })
    }

    /// Has the zygote fork a holder whose descriptor 3 is `holder_end`; returns its pid. Call
    /// it inside [`Reaper::spawn_with`]: the holder becomes the daemon's child as the zygote's
    /// child exits, and must be registered before the reaper can see it end.
    pub fn fork_holder(&self, holder_end: &impl AsRawFd) -> Result<i32, ForkError> {
        super::send_with_fd(&self.sock, &[1], Some(holder_end.as_raw_fd()))
            .map_err(ForkError::Broken)?;
        let mut answer = [0u8; 4];
        io::Read::read_exact(&mut &self.sock, &mut answer).map_err(ForkError::Broken)?;
        match i32::from_le_bytes(answer) {
            pid if pid > 0 => Ok(pid),
            errno if errno < 0 => Err(ForkError::Refused(io::Error::from_raw_os_error(-errno))),
            _ => Err(ForkError::Broken(io::Error::new(
                io::ErrorKind::InvalidData,
                "the zygote answered 0",
            ))),
        }
    }

    /// Ends a zygote that misbehaved (one that merely lost its socket exits by itself).
    pub fn kill(self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Runs the zygote until its socket closes. In a forked holder this returns the holder's own
/// exit code (the holder runs on from inside the zygote's loop, see [`fork_holder`]).
pub fn main() -> std::process::ExitCode {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which this is.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"yieldshell-zygo".as_ptr());
    }
    super::serve::detach_stdio();
    // A vanished daemon must be an error value, never a death by SIGPIPE; the holders set their
    // own signal state (and their shells get every default back at their spawn).
    // SAFETY: SIG_IGN installs no handler code.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigIgn,
        )
    };
    loop {
        let holder_end = match next_request(HOLDER_FD) {
            Ok(Some(fd)) => fd,
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(_) => return std::process::ExitCode::FAILURE,
        };
        if let Some(code) = fork_holder(holder_end) {
            // This is the holder: it has run and ended.
            return code;
        }
    }
}

/// Waits for a request: the holder's socket, or `None` when the daemon closed the connection.
fn next_request(control: RawFd) -> io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    loop {
        let mut byte = [0u8; 1];
        let mut space = nix::cmsg_space!([RawFd; 1]);
        let mut iov = [io::IoSliceMut::new(&mut byte)];
        let msg = match recvmsg::<()>(
            control,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if msg.bytes == 0 {
            return Ok(None);
        }
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(got) = cmsg {
                fds.extend(got);
            }
        }
        // SAFETY: SCM_RIGHTS gave us these descriptors; nothing else owns them.
        let mut owned = fds
            .into_iter()
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        match owned.next() {
            Some(fd) => return Ok(Some(fd)),
            // A request without a socket: answer so the daemon is not left waiting.
            None => answer(control, -libc::EINVAL),
        }
    }
}

/// Writes the answer for one request (a pid, or a negative errno).
fn answer(control: RawFd, value: i32) {
    let bytes = value.to_le_bytes();
    // SAFETY: writing 4 bytes from a live buffer to an open descriptor.
    unsafe {
        libc::send(
            control,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        );
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Forks a holder on `holder_end` (see the module docs). Returns in the zygote (`None`) after
/// its child answered and was reaped, and in the holder (`Some(code)`) when the holder is done.
fn fork_holder(holder_end: OwnedFd) -> Option<std::process::ExitCode> {
    // SAFETY: the zygote is single-threaded, so its child may run any code after the fork.
    match unsafe { libc::fork() } {
        -1 => {
            answer(HOLDER_FD, -errno());
            None
        }
        0 => {
            // The intermediate child: fork the holder, answer with its pid, exit. Its exit
            // hands the holder to the nearest subreaper, the daemon.
            // SAFETY: still single-threaded.
            match unsafe { libc::fork() } {
                -1 => {
                    answer(HOLDER_FD, -errno());
                    // SAFETY: ends this child without running the zygote's destructors.
                    unsafe { libc::_exit(0) }
                }
                0 => Some(become_holder(holder_end)),
                holder => {
                    answer(HOLDER_FD, holder);
                    // SAFETY: as above.
                    unsafe { libc::_exit(0) }
                }
            }
        }
        child => {
            drop(holder_end);
            // The child answers and exits at once: reaped here, it never lingers as a zombie.
            while let Err(nix::errno::Errno::EINTR) =
                nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None)
            {}
            None
        }
    }
}

/// In the forked holder: a process group of its own in the zygote's session (see the module
/// docs), its socket as descriptor 3 (which drops the zygote's connection to the daemon), every
/// other descriptor closed; then the holder runs.
fn become_holder(holder_end: OwnedFd) -> std::process::ExitCode {
    let raw = holder_end.into_raw_fd();
    // SAFETY: plain descriptor calls on descriptors this process owns.
    let moved = unsafe {
        libc::setpgid(0, 0) == 0 && libc::dup2(raw, HOLDER_FD) == HOLDER_FD && libc::close(raw) == 0
    };
    if !moved {
        return std::process::ExitCode::FAILURE;
    }
    close_others(HOLDER_FD + 1);
    show_as_holder();
    super::serve::main()
}

/// Makes the holder's command line read `… hold`, like a holder the daemon spawned itself, not
/// the zygote's `… zygote` it inherited with its memory: `ps` shows what it is, and whoever
/// finds holders by their command line finds these too. The arguments are rewritten in place
/// (the kernel reads `/proc/PID/cmdline` from this memory); "hold" is shorter than "zygote".
fn show_as_holder() {
    let Some((start, end)) = argument_area() else {
        return;
    };
    let Some(len) = end.checked_sub(start).filter(|&l| l > 0) else {
        return;
    };
    // SAFETY: [arg_start, arg_end) is this process's argument strings, in its writable initial
    // stack, and nothing here holds a Rust reference into it (std keeps only raw pointers).
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    let Some(first_end) = area.iter().position(|&b| b == 0) else {
        return;
    };
    let rest = &mut area[first_end + 1..];
    let mode = super::HOLD_ARG.as_bytes();
    if rest.starts_with(ZYGOTE_ARG.as_bytes()) && rest.len() > mode.len() {
        rest.fill(0);
        rest[..mode.len()].copy_from_slice(mode);
    }
}

/// `arg_start` and `arg_end` of this process (fields 48 and 49 of `/proc/self/stat`).
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may itself contain spaces and parentheses; the
    // first of them is field 3.
    let mut after = stat.get(stat.rfind(')')? + 1..)?.split_ascii_whitespace();
    let start = after.nth(48 - 3)?.parse().ok()?;
    let end = after.next()?.parse().ok()?;
    Some((start, end))
}

/// Closes every descriptor from `first` on (close_range, else each one `/proc/self/fd` lists).
fn close_others(first: RawFd) {
    // SAFETY: close_range takes plain integers; it closes only descriptors of this process.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) };
    if closed == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<RawFd> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= first)
        .collect();
    for fd in open {
        // SAFETY: closing a descriptor nothing in this process uses any more (the directory
        // listing's own descriptor is closed already, and closing it twice only fails).
        unsafe {
            libc::close(fd);
        }
    }
}
