//! Terminal colour: when to use it (`--color`, `NO_COLOR`, whether stdout is a terminal) and how
//! `ps` colours a process's status.
//!
//! Colour is for people looking at a terminal. Output that goes to a file or a pipe — which is
//! what scripts and tests read — never carries escape sequences unless `--color always` asks for
//! them, and `NO_COLOR` (<https://no-color.org>) turns the automatic choice off; an explicit
//! `--color always` still wins over it, as that convention says command-line flags should.

use clap::ValueEnum;
use yieldshell_proto::pb;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    Auto,
    /// Always colour, even into a pipe or file.
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Whether to colour stdout, given whether it is a terminal and the value of `NO_COLOR`.
    pub fn enabled(self, stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            // no-color.org: set *and non-empty* disables colour.
            ColorChoice::Auto => stdout_is_terminal && no_color.is_none_or(|v| v.is_empty()),
        }
    }

    /// [`enabled`](Self::enabled) for this process's stdout and environment.
    pub fn for_stdout(self) -> bool {
        use std::io::IsTerminal;
        self.enabled(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        )
    }
}

/// The few colours `yieldctl` uses (all plain 8-colour SGR codes, readable on dark and light
/// backgrounds alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    /// Success.
    Green,
    /// Still in progress.
    Yellow,
    /// Failure.
    Red,
    /// Ended from outside (stopped, timed out).
    Magenta,
}

impl Color {
    fn sgr(self) -> &'static str {
        match self {
            Color::Green => "\x1b[32m",
            Color::Yellow => "\x1b[33m",
            Color::Red => "\x1b[31m",
            Color::Magenta => "\x1b[35m",
        }
    }

    /// `text` wrapped in this colour and a reset.
    pub fn paint(self, text: &str) -> String {
        format!("{}{text}\x1b[0m", self.sgr())
    }
}

/// The colour of a process's STATUS in `ps`: running yellow; completed green with exit code 0,
/// red otherwise; failed and lost red; stopped and timed out magenta.
pub fn for_status(info: &pb::ProcessInfo) -> Option<Color> {
    match pb::ProcessStatus::try_from(info.status).ok()? {
        pb::ProcessStatus::Running => Some(Color::Yellow),
        pb::ProcessStatus::Completed if info.exit_code == Some(0) => Some(Color::Green),
        pb::ProcessStatus::Completed | pb::ProcessStatus::Failed | pb::ProcessStatus::Lost => {
            Some(Color::Red)
        }
        pb::ProcessStatus::Stopped | pb::ProcessStatus::TimedOut => Some(Color::Magenta),
        pb::ProcessStatus::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn auto_colours_only_a_terminal_without_no_color() {
        assert!(ColorChoice::Auto.enabled(true, None));
        assert!(!ColorChoice::Auto.enabled(false, None));
        assert!(!ColorChoice::Auto.enabled(true, Some(OsStr::new("1"))));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(ColorChoice::Auto.enabled(true, Some(OsStr::new(""))));
        assert!(ColorChoice::Always.enabled(false, Some(OsStr::new("1"))));
        assert!(!ColorChoice::Never.enabled(true, None));
    }

    #[test]
    fn statuses_get_their_colours() {
        let info = |status: pb::ProcessStatus, exit_code| pb::ProcessInfo {
            status: status as i32,
            exit_code,
            ..Default::default()
        };
        use pb::ProcessStatus as S;
        assert_eq!(for_status(&info(S::Running, None)), Some(Color::Yellow));
        assert_eq!(for_status(&info(S::Completed, Some(0))), Some(Color::Green));
        assert_eq!(for_status(&info(S::Completed, Some(3))), Some(Color::Red));
        // Ended by a signal: no exit code.
        assert_eq!(for_status(&info(S::Completed, None)), Some(Color::Red));
        assert_eq!(for_status(&info(S::Lost, None)), Some(Color::Red));
        assert_eq!(for_status(&info(S::TimedOut, None)), Some(Color::Magenta));
        assert_eq!(for_status(&info(S::Stopped, None)), Some(Color::Magenta));
        assert_eq!(Color::Green.paint("ok"), "\x1b[32mok\x1b[0m");
    }
}
