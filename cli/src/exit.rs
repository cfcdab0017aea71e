//! `yieldctl` exit codes (documented in the README).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (also: stdout closed by the reader, e.g. `| head`) |
//! | 1 | the daemon refused or reported an error (unknown id, policy, …); `read --grep`: no line matched; `service`, `man --dir`: a step failed or `install` refused |
//! | 2 | usage error (bad arguments, bad `YIELDSHELL_*` configuration) |
//! | 3 | no daemon could be reached or started, or it did not answer in time (`daemon_unavailable`) |
//! | 4 | protocol mismatch between yieldctl and the daemon |
//! | 5 | `read`: what was printed is incomplete — bytes in the range asked for are retained nowhere (each gap is named on stderr where it occurs) |
//! | 70 | yieldctl itself failed (no runtime) |
//! | `exec`/`wait`: the command's own exit code when it exited; 128+N when signal N ended it; 124 when it timed out (`timeout_ms`) or `wait` hit its deadline |
//! | `attach`: 0 on a detach; the process's exit code when it ended while attached; 128+N when signal N made yieldctl leave |

use yieldshell_proto::errors::ErrorKind;

/// Success.
pub const OK: u8 = 0;
/// The daemon refused or failed.
pub const FAILURE: u8 = 1;
/// Bad arguments or configuration.
pub const USAGE: u8 = 2;
/// No daemon.
pub const UNAVAILABLE: u8 = 3;
/// Incompatible daemon.
pub const PROTOCOL: u8 = 4;
/// `read` printed everything there is, but bytes in the range asked for are retained nowhere.
pub const INCOMPLETE: u8 = 5;
/// Timed out (like timeout(1)).
pub const TIMED_OUT: u8 = 124;
/// yieldctl itself failed (like sysexits' EX_SOFTWARE).
pub const INTERNAL: u8 = 70;

/// Exit code for an error kind.
pub fn for_kind(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::DaemonUnavailable | ErrorKind::ShuttingDown => UNAVAILABLE,
        ErrorKind::ProtocolMismatch => PROTOCOL,
        ErrorKind::InvalidArgument => USAGE,
        _ => FAILURE,
    }
}

/// Exit code mirroring a process's end: its code, or 128+signal.
pub fn for_exit(exit_code: Option<i32>, signal: Option<&str>) -> u8 {
    if let Some(c) = exit_code {
        return u8::try_from(c & 0xff).unwrap_or(FAILURE);
    }
    if let Some(name) = signal {
        let n = SIGNALS.iter().position(|s| *s == name).map_or(9, |i| i + 1);
        return u8::try_from(128 + n).unwrap_or(FAILURE);
    }
    OK
}

/// Signal names by number (Linux numbering, 1-based) for 128+N exit codes.
const SIGNALS: [&str; 31] = [
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// A process exit code from a small number.
pub fn code(c: u8) -> std::process::ExitCode {
    std::process::ExitCode::from(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_documents_every_fixed_exit_code() {
        let readme = include_str!("../../README.md");
        for code in [OK, FAILURE, USAGE, UNAVAILABLE, PROTOCOL, INTERNAL] {
            assert!(
                readme.contains(&format!("\n| {code} | ")),
                "README's exit-code table lacks {code}"
            );
        }
        assert!(readme.contains(&format!(" {TIMED_OUT} when it timed out")));
    }

    #[test]
    fn exit_codes_mirror_the_process() {
        assert_eq!(for_exit(Some(3), None), 3);
        assert_eq!(for_exit(None, Some("SIGKILL")), 137);
        assert_eq!(for_exit(None, Some("SIGTERM")), 143);
        assert_eq!(for_exit(None, None), 0);
    }
}
