//! Terminal mode's pseudo-terminal (ARCHITECTURE.md, "Terminal processes"): opening one for a holder, and the few
//! operations on its master that the holder and the daemon share.
//!
//! # Who holds what
//! The holder opens the PTY ([`open`]) and starts the shell on its slave
//! ([`super::spawn_shell_on_terminal`]), never keeping the slave open itself: once the last process
//! of the terminal closes it, reads of the master fail with `EIO`, which is the normal end of a
//! terminal's output (the pipe mode's EOF). The holder owns the master for the whole life of
//! the process: it reads it as the one output stream (`stdout`, through the same redaction and
//! spool as pipes), and it hands a duplicate to each daemon that connects, in place of the
//! stdin pipe's write end (the holder's `Hello` says which it is). The daemon writes input
//! to that duplicate and does every query and control itself, straight on the master, with no
//! holder frame: the window size ([`set_size`], which makes the kernel send SIGWINCH to the
//! foreground process group), the termios echo bit and EOF character ([`modes`]), and the
//! foreground process group. On Linux each of these on the master answers for the terminal as
//! a whole. A re-adopting daemon gets the same duplicate, so nothing is lost across a restart.

#[cfg(unix)]
use std::io;
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
#[cfg(unix)]
use std::path::PathBuf;

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// What the terminal's line discipline is set to, as far as answers need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// `ECHO` is off (a password prompt, or a program in raw mode that draws its own echo).
    pub echo_off: bool,
    /// `ICANON` is on: input is edited and delivered a line at a time.
    pub canonical: bool,
    /// The EOF character (`VEOF`, Ctrl-D unless changed).
    pub eof_char: u8,
}

/// A PTY just opened: its master, and the path of its slave (not opened here).
#[cfg(unix)]
#[derive(Debug)]
pub struct Pty {
    /// The master side (close-on-exec).
    pub master: OwnedFd,
    /// `/dev/pts/N`.
    pub slave: PathBuf,
}

/// Opens a new PTY of `size`.
#[cfg(target_os = "linux")]
pub fn open(size: TermSize) -> io::Result<Pty> {
    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = PathBuf::from(ptsname_r(&master)?);
    let master = OwnedFd::from(master);
    set_size(&master, size)?;
    Ok(Pty { master, slave })
}

/// Terminal mode is Linux-only.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn open(_size: TermSize) -> io::Result<Pty> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "terminal mode (tty=true) is only supported on Linux",
    ))
}

/// Starts the shell of `spec` on a new terminal of `size` (see the module doc): the master as
/// its `stdout`, duplicates of it as `stdin` (handed to the daemon) and `stderr` (which the
/// holder drops: a terminal is one stream).
#[cfg(unix)]
pub fn start(spec: &super::SpawnSpec, size: TermSize) -> io::Result<super::Shell> {
    let pty = open(size)?;
    let pid = super::spawn_shell_on_terminal(spec, &pty.slave)?;
    Ok(super::Shell {
        pid,
        stdin: pty.master.try_clone()?,
        stderr: pty.master.try_clone()?,
        stdout: pty.master,
    })
}

/// Sets the window size; the kernel sends SIGWINCH to the foreground process group when it
/// changes.
#[cfg(unix)]
pub fn set_size(master: &impl AsFd, size: TermSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from a valid pointer; the fd is open (borrowed).
    let rc = unsafe { libc::ioctl(master.as_fd().as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The window size.
#[cfg(unix)]
pub fn size(master: &impl AsFd) -> io::Result<TermSize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` to a valid pointer; the fd is open (borrowed).
    let rc = unsafe { libc::ioctl(master.as_fd().as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TermSize {
        cols: ws.ws_col,
        rows: ws.ws_row,
    })
}

/// The terminal's modes, read through the master (on Linux `tcgetattr` on the master answers
/// with the slave's termios).
#[cfg(unix)]
pub fn modes(master: &impl AsFd) -> io::Result<Modes> {
    use nix::sys::termios::{LocalFlags, SpecialCharacterIndices, tcgetattr};
    let t = tcgetattr(master.as_fd())?;
    let eof = t.control_chars[SpecialCharacterIndices::VEOF as usize];
    Ok(Modes {
        echo_off: !t.local_flags.contains(LocalFlags::ECHO),
        canonical: t.local_flags.contains(LocalFlags::ICANON),
        // A disabled VEOF (_POSIX_VDISABLE, 0) falls back to the usual Ctrl-D.
        eof_char: if eof == 0 { 4 } else { eof },
    })
}

/// The terminal's foreground process group, through the master.
#[cfg(unix)]
pub fn foreground_group(master: &impl AsFd) -> Option<i32> {
    let mut pgrp: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t to a valid pointer; the fd is open (borrowed).
    let rc = unsafe { libc::ioctl(master.as_fd().as_raw_fd(), libc::TIOCGPGRP, &mut pgrp) };
    (rc == 0 && pgrp > 0).then_some(pgrp)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_new_terminal_has_its_size_and_the_usual_modes() {
        let pty = open(TermSize { cols: 93, rows: 17 }).expect("open a pty");
        assert!(pty.slave.starts_with("/dev/pts"), "{:?}", pty.slave);
        assert_eq!(
            size(&pty.master).expect("size"),
            TermSize { cols: 93, rows: 17 }
        );
        set_size(&pty.master, TermSize { cols: 40, rows: 10 }).expect("resize");
        assert_eq!(
            size(&pty.master).expect("size"),
            TermSize { cols: 40, rows: 10 }
        );
        let m = modes(&pty.master).expect("modes");
        assert!(!m.echo_off && m.canonical, "{m:?}");
        assert_eq!(m.eof_char, 4);
        // Nothing runs on it: no foreground group.
        assert_eq!(foreground_group(&pty.master), None);
    }
}
