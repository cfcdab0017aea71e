//! The person's own terminal, for `yieldctl attach` and `exec --tty`: its window size, raw mode
//! behind a guard that always restores it, and a keystroke reader that never blocks the runtime.
//!
//! Restoring is what matters most: a terminal left in raw mode is unusable (no echo, no line
//! editing, Enter prints a staircase). [`RawMode`] restores on drop (detach, error, the process
//! ending, a signal the caller turned into a normal return), and a panic hook restores before the
//! panic message is printed, so the message is readable and nothing depends on unwinding.

#[cfg(unix)]
use std::io::{IsTerminal, Read};
#[cfg(unix)]
use std::os::fd::AsFd;
#[cfg(unix)]
use std::sync::Mutex;

#[cfg(unix)]
use nix::sys::termios::{self, SetArg, Termios};
#[cfg(unix)]
use tokio::sync::mpsc;

/// Size used when stdout is not a terminal (the daemon's default for `exec(tty=true)`).
pub const DEFAULT_SIZE: WindowSize = WindowSize {
    cols: 120,
    rows: 40,
};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    /// Columns.
    pub cols: u32,
    /// Rows.
    pub rows: u32,
}

/// The size of the terminal behind `fd`, or `None` when it is not a terminal (or reports 0×0, as
/// some pseudo-terminals do before anyone sized them).
#[cfg(unix)]
pub fn window_size(fd: impl AsFd) -> Option<WindowSize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer, which points at a live local of
    // that type; the descriptor is borrowed for the call.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd.as_fd()),
            libc::TIOCGWINSZ,
            &mut ws,
        )
    };
    (rc == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some(WindowSize {
        cols: u32::from(ws.ws_col),
        rows: u32::from(ws.ws_row),
    })
}

/// Windows: the console's size is not read yet (terminal mode is Unix-only until ConPTY).
#[cfg(windows)]
pub fn window_size<T>(_: T) -> Option<WindowSize> {
    None
}

#[cfg(unix)]
/// The person's window size: stdout's terminal, else stdin's.
pub fn person_window_size() -> Option<WindowSize> {
    window_size(std::io::stdout()).or_else(|| window_size(std::io::stdin()))
}

#[cfg(unix)]
/// Whether stdin is a terminal (attach needs a person typing).
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

#[cfg(unix)]
/// The mode to put back if a panic happens in raw mode (read by the panic hook). A plain
/// `libc::termios` because nix's `Termios` is not `Sync`.
static SAVED_MODE: Mutex<Option<libc::termios>> = Mutex::new(None);

#[cfg(unix)]
/// Puts stdin's terminal back into `mode`; best effort, there is nothing better to do on failure.
fn restore(mode: &libc::termios) {
    let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSADRAIN, &Termios::from(*mode));
}

#[cfg(unix)]
/// Stdin's terminal in raw mode (no echo, no line editing, no signals from keys, bytes as typed)
/// until this is dropped.
pub struct RawMode {
    saved: libc::termios,
}

#[cfg(unix)]
impl RawMode {
    /// Switches stdin's terminal to raw mode, remembering the mode it had.
    pub fn enter() -> anyhow::Result<RawMode> {
        let before = termios::tcgetattr(std::io::stdin())?;
        let saved = libc::termios::from(before.clone());
        install_panic_hook();
        if let Ok(mut slot) = SAVED_MODE.lock() {
            *slot = Some(saved);
        }
        let mut raw = before;
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(std::io::stdin(), SetArg::TCSADRAIN, &raw)?;
        Ok(RawMode { saved })
    }
}

#[cfg(unix)]
impl Drop for RawMode {
    fn drop(&mut self) {
        restore(&self.saved);
        if let Ok(mut slot) = SAVED_MODE.lock() {
            *slot = None;
        }
    }
}

#[cfg(unix)]
/// Once per process: a panic first restores the terminal (if raw mode is on), then reports as
/// usual, so the message is legible and the shell usable whatever happens after.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // try_lock: a panic while the slot is locked must not deadlock the hook.
            if let Ok(slot) = SAVED_MODE.try_lock()
                && let Some(mode) = slot.as_ref()
            {
                restore(mode);
            }
            previous(info);
        }));
    });
}

#[cfg(unix)]
/// Reads stdin on a dedicated thread (a blocking read must not stall the runtime) and hands over
/// whatever each read returned: in raw mode that is every key as it is typed, several at once
/// when they arrive together (a paste); in line mode a whole line. An empty chunk means end of
/// input (Ctrl-D on an empty line in line mode), after which the thread ends.
///
/// Dropping the reader stops its thread and waits for it: the thread reads only after `poll`
/// says a key is there and no stop was asked for, so once the drop returns nothing reads stdin
/// any more, and the next key goes to whoever reads it next (`yieldctl top` after an attach).
pub struct StdinReader {
    rx: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    stop: Option<std::os::unix::net::UnixStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(unix)]
impl StdinReader {
    /// The next chunk; `None` once the thread ended.
    pub async fn recv(&mut self) -> Option<std::io::Result<Vec<u8>>> {
        self.rx.recv().await
    }
}

#[cfg(unix)]
impl Drop for StdinReader {
    fn drop(&mut self) {
        // A thread blocked handing over a chunk gets an error instead; one waiting in `poll`
        // sees the stop socket readable (a byte, or its peer closed).
        self.rx.close();
        if let Some(mut stop) = self.stop.take() {
            let _ = std::io::Write::write_all(&mut stop, b"x");
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(unix)]
/// Starts a [`StdinReader`].
pub fn spawn_stdin_reader() -> StdinReader {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let (tx, rx) = mpsc::channel(64);
    let (stop, stopped) = match std::os::unix::net::UnixStream::pair() {
        Ok((a, b)) => (Some(a), Some(b)),
        // Without a stop socket the thread cannot be woken: it ends at its next key instead.
        Err(_) => (None, None),
    };
    let thread = std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 4096];
        loop {
            if let Some(stopped) = stopped.as_ref() {
                let stdin_fd = std::io::stdin();
                let mut fds = [
                    PollFd::new(stdin_fd.as_fd(), PollFlags::POLLIN),
                    PollFd::new(stopped.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => {}
                    Ok(_) => {
                        let woken = fds[1].revents().is_some_and(|r| !r.is_empty());
                        if woken || tx.is_closed() {
                            return;
                        }
                    }
                }
            }
            let chunk = match stdin.read(&mut buf) {
                Ok(n) => Ok(buf[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
            let last = !matches!(&chunk, Ok(c) if !c.is_empty());
            if tx.blocking_send(chunk).is_err() || last {
                return;
            }
        }
    });
    StdinReader {
        rx,
        stop,
        thread: Some(thread),
    }
}

/// Parses `COLSxROWS` (`120x40`).
pub fn parse_size(s: &str) -> Result<WindowSize, String> {
    let (c, r) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("expected COLSxROWS (like 120x40), got {s:?}"))?;
    let parse = |v: &str, what: &str| -> Result<u32, String> {
        match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{what} must be a positive number, got {v:?}")),
        }
    };
    Ok(WindowSize {
        cols: parse(c, "columns")?,
        rows: parse(r, "rows")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_cols_by_rows() {
        assert_eq!(
            parse_size("120x40"),
            Ok(WindowSize {
                cols: 120,
                rows: 40
            })
        );
        assert_eq!(parse_size("80X24").map(|s| s.rows), Ok(24));
        assert!(parse_size("80").is_err());
        assert!(parse_size("0x24").is_err());
        assert!(parse_size("80x-1").is_err());
    }
}
