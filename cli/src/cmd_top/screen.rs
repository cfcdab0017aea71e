//! The person's terminal while `yieldctl top` runs: raw mode, the alternate screen and a hidden
//! cursor, put back on every way out.
//!
//! [`Screen`] restores on drop (quit, an error, a signal turned into a normal return, the daemon
//! gone), a panic hook restores before the panic message is printed, and [`Screen::suspend`]
//! hands the terminal back as it was for an attach, which sets it up its own way. Restoring
//! twice is harmless; only SIGKILL leaves a terminal as `top` had it (`reset` fixes it).

use std::io::{Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// The screen is set up (read by the panic hook).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back: main screen, cursor shown, line mode. Best effort: a terminal that
/// went away (SIGHUP) cannot be restored, and there is nothing better to do then.
fn restore() {
    if ACTIVE.swap(false, Ordering::AcqRel) {
        let mut out = std::io::stdout();
        let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
        let _ = out.flush();
    }
}

fn set_up() -> std::io::Result<()> {
    terminal::enable_raw_mode()?;
    ACTIVE.store(true, Ordering::Release);
    execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        cursor::Hide
    )
}

/// Once per process: a panic restores the terminal first, then reports as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// The terminal in `top`'s mode, and ratatui's handle on it.
pub struct Screen {
    /// What draws.
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    /// Switches the terminal to `top`'s mode.
    pub fn enter() -> anyhow::Result<Screen> {
        install_panic_hook();
        if let Err(e) = set_up() {
            restore();
            return Err(e.into());
        }
        match Terminal::new(CrosstermBackend::new(std::io::stdout())) {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e.into())
            }
        }
    }

    /// Gives the terminal back as it was (for an attach).
    pub fn suspend(&mut self) {
        restore();
    }

    /// Takes it again after [`suspend`](Self::suspend), to be redrawn whole.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        set_up()?;
        // A resize to the current size clears the screen and forgets what was drawn, so the
        // next frame is drawn whole (`clear` would ask the terminal where its cursor is, and
        // wait for an answer on stdin).
        let size = self.terminal.size()?;
        self.terminal
            .resize(ratatui::layout::Rect::new(0, 0, size.width, size.height))?;
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
