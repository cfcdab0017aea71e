//! Reconnecting to a holder an earlier daemon left (after a crash, restart or upgrade): its
//! socket in the process directory, even where that path is too long for a socket address, a
//! holder its own command stopped woken first; and the exit status it left on disk.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::greeting::{Held, greeted};
use crate::holder::{EXIT_FILE, ExitNote, SOCKET_NAME};

/// Connects to the holder of the process whose directory is `dir`, left by an earlier daemon.
pub fn attach(dir: &Path) -> io::Result<Held> {
    let path = dir.join(SOCKET_NAME);
    let sock = if path.as_os_str().len() < 100 {
        UnixStream::connect(&path)?
    } else {
        connect_long(dir)?
    };
    wake_listener(&sock);
    greeted(sock, None)
}

/// Resumes (SIGCONT) the holder that listens on the other end of `sock`, in case its own command
/// stopped it (`kill -STOP $PPID`): a stopped holder accepts no connection and greets no daemon,
/// and the next daemon would wait out the handshake for each such process before it serves.
/// The peer is the process that bound the socket in our own private process directory (Linux:
/// `SO_PEERCRED`), and of our uid: a holder of ours.
#[cfg(target_os = "linux")]
fn wake_listener(sock: &UnixStream) {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    if let Ok(cred) = getsockopt(sock, PeerCredentials)
        && cred.uid() == nix::unistd::geteuid().as_raw()
        && cred.pid() > 1
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(cred.pid()),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
}

/// Elsewhere the peer's pid is not at hand: a stopped holder is waited for (the handshake's
/// timeout), as before.
#[cfg(not(target_os = "linux"))]
fn wake_listener(_sock: &UnixStream) {}

/// Connects to the holder socket in `dir` when its path is too long for a socket address (104
/// bytes on macOS, 108 on Linux): on Linux through the directory's descriptor, a short path
/// whatever `dir` is.
#[cfg(target_os = "linux")]
fn connect_long(dir: &Path) -> io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir)?;
    UnixStream::connect(format!("/proc/self/fd/{}/{SOCKET_NAME}", d.as_raw_fd()))
}

/// Connects to the holder socket in `dir` when its path is too long for a socket address. macOS
/// has no `/proc/self/fd`, and its `connectat` is not in the SDK stubs the cross-build links
/// against; so a symlink with a short name in the user's temporary directory stands for `dir`
/// while connecting. This is the common case there: the state directory under
/// `~/Library/Application Support` makes process directories longer than 104 bytes.
#[cfg(not(target_os = "linux"))]
fn connect_long(dir: &Path) -> io::Result<UnixStream> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A name no one else uses (pid and counter); `symlink` never replaces an existing entry.
    let link = std::env::temp_dir().join(format!("yieldshell-{}-{n}", std::process::id()));
    std::os::unix::fs::symlink(dir, &link)?;
    let connected = UnixStream::connect(link.join(SOCKET_NAME));
    let _ = std::fs::remove_file(&link);
    connected
}

/// The exit status a holder left in `dir` (it may have exited since).
pub fn exit_file(dir: &Path) -> Option<ExitNote> {
    ExitNote::parse_file(&std::fs::read_to_string(dir.join(EXIT_FILE)).ok()?)
}
