//! What the holder process sets up for itself before any spec: its standard descriptors
//! pointed at /dev/null (it must not keep a terminal or a pipe of whoever started the daemon
//! open), stray inherited descriptors closed (macOS), SIGPIPE ignored, and the way it hears of
//! its children's exits: a signalfd on Linux, a self-pipe written by a SIGCHLD handler
//! elsewhere. Set up while the holder is idle, so none of it is on an `exec`'s path.

use std::io;
use std::os::fd::AsRawFd;
#[cfg(not(target_os = "linux"))]
use std::os::fd::OwnedFd;

#[cfg(not(target_os = "linux"))]
use crate::holder::HOLDER_FD;

/// Points descriptors 0–2 at /dev/null: the holder must not keep the daemon's terminal or the
/// pipes of whoever started the daemon open for as long as its process runs.
pub(crate) fn detach_stdio() {
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
pub(super) fn close_stray_fds() {
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
pub(super) fn prepare_signals() -> io::Result<()> {
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
pub(super) type Signals = nix::sys::signalfd::SignalFd;

#[cfg(target_os = "linux")]
pub(super) fn signal_fd() -> io::Result<Signals> {
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
pub(super) type Signals = OwnedFd;

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
pub(super) fn signal_fd() -> io::Result<Signals> {
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
