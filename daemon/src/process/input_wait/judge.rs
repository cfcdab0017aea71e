//! The judgement on one process (rules 1 to 3 of [`super`]): from its `stat` state, its
//! `syscall` or `wchan` and what [`ProcessView`] shows of its fds and memory, whether it is
//! blocked waiting for the input endpoint; and the verdict on a whole tree ([`combine`]).
//! Everything here reads through [`ProcessView`], so the rules are tested on processes described
//! by hand as well as on real ones ([`super::linux`] reads `/proc`).

#[cfg(unix)]
use super::proc_text::{SyscallState, is_read_syscall, parse_pipe_link, parse_syscall};
#[cfg(unix)]
use super::readiness::{idle_but_for_input, readiness_wait, watched_for_reading};

/// What a process waits on when it waits for input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputEndpoint {
    /// An anonymous pipe (pipe-mode stdin), by inode.
    Pipe {
        /// The pipe's inode, as in `pipe:[inode]`.
        inode: u64,
    },
    /// A terminal (terminal-mode stdin), by its slave's path.
    Terminal {
        /// `/dev/pts/N`.
        path: String,
    },
}

#[cfg(unix)]
impl InputEndpoint {
    /// Whether an fd link (`readlink /proc/<pid>/fd/<n>`) is this endpoint.
    pub(super) fn is_link(&self, link: &str) -> bool {
        match self {
            InputEndpoint::Pipe { inode } => parse_pipe_link(link) == Some(*inode),
            InputEndpoint::Terminal { path } => link == path || link == "/dev/tty",
        }
    }

    /// Whether `wchan` names the kernel function this endpoint's readers sleep in.
    pub(super) fn is_read_wait(&self, wchan: &str) -> bool {
        match self {
            // `pipe_wait` before Linux 5.6, `pipe_read` after, `anon_pipe_read` from 6.x.
            InputEndpoint::Pipe { .. } => {
                matches!(wchan.trim(), "pipe_read" | "anon_pipe_read" | "pipe_wait")
            }
            InputEndpoint::Terminal { .. } => wchan.trim() == "n_tty_read",
        }
    }
}

/// What the judgement reads of a process besides its state: its open files and, for a
/// readiness wait, the interest list in its memory.
pub trait ProcessView {
    /// The link of fd `fd` (`pipe:[123]`, a path); `None` when unreadable or closed.
    fn link(&self, fd: u64) -> Option<String>;
    /// The links of the pipes and FIFOs it has open for reading; `None` when unreadable.
    fn readable_pipes(&self) -> Option<Vec<String>>;
    /// `len` bytes of its memory at `addr`; `None` when unreadable.
    fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
    /// The text of `/proc/<pid>/fdinfo/<fd>`, whole lines of at most
    /// [`FDINFO_MAX_BYTES`](super::readiness::FDINFO_MAX_BYTES), and whether there was more;
    /// `None` when unreadable or closed.
    fn fdinfo(&self, fd: u64) -> Option<(String, bool)>;
    /// Whether more than one of its fds links to `link` (both ends of a pipe); `None` when its
    /// fds cannot be listed.
    fn holds_more_than_once(&self, link: &str) -> Option<bool>;
    /// Whether it is in its terminal's foreground process group; `None` when unknown.
    fn in_foreground(&self) -> Option<bool>;
}

/// The judgement on one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Blocked reading the input endpoint.
    Waiting,
    /// Known not to be.
    NotWaiting,
    /// Cannot be told (files unreadable).
    Unknown,
}

/// Judges one process from its `stat` state letter, its `syscall` text and `wchan` text (`None`
/// when unreadable) and its fds (see the module docs for the rule).
#[cfg(unix)]
pub fn judge(
    state: u8,
    syscall: Option<&str>,
    wchan: Option<&str>,
    fds: &impl ProcessView,
    endpoint: &InputEndpoint,
) -> Verdict {
    if state != b'S' {
        return Verdict::NotWaiting;
    }
    if let Some(sys) = syscall.and_then(parse_syscall) {
        let SyscallState::Blocked { nr, args } = sys else {
            return Verdict::NotWaiting;
        };
        if is_read_syscall(nr) {
            return match fds.link(args[0]) {
                Some(link) if endpoint.is_link(&link) => Verdict::Waiting,
                Some(_) => Verdict::NotWaiting,
                None => Verdict::Unknown,
            };
        }
        let Some(wait) = readiness_wait(nr, &args) else {
            return Verdict::NotWaiting;
        };
        let Some((watched, more)) = watched_for_reading(wait, fds) else {
            return Verdict::Unknown;
        };
        let verdict = idle_but_for_input(&watched, more, fds, endpoint);
        // A background job polling the terminal is not what a person would answer (a read
        // there would have stopped it with SIGTTIN, so rules 1 and 2 never see one).
        return match (verdict, endpoint, fds.in_foreground()) {
            (Verdict::Waiting, InputEndpoint::Terminal { .. }, Some(false)) => Verdict::NotWaiting,
            (Verdict::Waiting, InputEndpoint::Terminal { .. }, None) => Verdict::Unknown,
            (v, _, _) => v,
        };
    }
    // `wchan` reads as "0" when the kernel will not say.
    let Some(wchan) = wchan.map(str::trim).filter(|w| !w.is_empty() && *w != "0") else {
        return Verdict::Unknown;
    };
    if let InputEndpoint::Terminal { .. } = endpoint
        && wchan == "wait_woken"
    {
        // Where newer kernels leave a terminal read (and many other waits): cannot be told.
        return Verdict::Unknown;
    }
    if !endpoint.is_read_wait(wchan) {
        return Verdict::NotWaiting;
    }
    if let InputEndpoint::Terminal { .. } = endpoint {
        // Only a terminal read sleeps in n_tty_read, and a member of the session has no
        // terminal but this one (a terminal of its own would have taken a new session).
        return Verdict::Waiting;
    }
    match fds.readable_pipes() {
        Some(pipes) if !pipes.is_empty() && pipes.iter().all(|l| endpoint.is_link(l)) => {
            Verdict::Waiting
        }
        Some(pipes) if pipes.iter().all(|l| !endpoint.is_link(l)) => Verdict::NotWaiting,
        _ => Verdict::Unknown,
    }
}

/// The verdict on a whole tree from its members': waiting when one is, not waiting when all are
/// known not to be, else unknown.
pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Option<bool> {
    let mut known = true;
    for v in verdicts {
        match v {
            Verdict::Waiting => return Some(true),
            Verdict::Unknown => known = false,
            Verdict::NotWaiting => {}
        }
    }
    known.then_some(false)
}

// The tests speak Linux syscall numbers, the only ones a process reports.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::sample_process::*;
    use super::*;

    #[test]
    fn a_read_on_the_input_pipe_is_waiting_and_on_another_fd_is_not() {
        let f = fds(&[(0, "pipe:[1738101]"), (3, "pipe:[42]")]);
        assert_eq!(
            judge(b'S', Some(&read_syscall(0)), None, &f, &STDIN),
            Verdict::Waiting
        );
        // A shell reading the pipe of `$(…)` with the input pipe on its fd 0.
        assert_eq!(
            judge(b'S', Some(&read_syscall(3)), None, &f, &STDIN),
            Verdict::NotWaiting
        );
        // The fd vanished between the two reads.
        assert_eq!(
            judge(b'S', Some(&read_syscall(9)), None, &f, &STDIN),
            Verdict::Unknown
        );
        // Busy, sleeping, waiting for a child, stopped: not waiting.
        assert_eq!(
            judge(b'R', Some(&read_syscall(0)), None, &f, &STDIN),
            Verdict::NotWaiting
        );
        let nanosleep = format!(
            "{} 0x0 0x0 0x7fff1 0x7fff2 0x0 0x0 0x7ff 0x7fa",
            libc::SYS_clock_nanosleep
        );
        assert_eq!(
            judge(b'S', Some(&nanosleep), None, &f, &STDIN),
            Verdict::NotWaiting
        );
        assert_eq!(
            judge(b'S', Some("running"), None, &f, &STDIN),
            Verdict::NotWaiting
        );
        assert_eq!(judge(b'T', None, None, &f, &STDIN), Verdict::NotWaiting);
    }

    #[test]
    fn without_syscall_the_pipe_wait_counts_only_when_the_input_is_the_only_readable_pipe() {
        let only_stdin = Fds {
            readable: Some(vec!["pipe:[1738101]".into()]),
            ..Fds::default()
        };
        let also_other = Fds {
            readable: Some(vec!["pipe:[1738101]".into(), "pipe:[42]".into()]),
            ..Fds::default()
        };
        let other_only = Fds {
            readable: Some(vec!["/tmp/fifo".into()]),
            ..Fds::default()
        };
        for wchan in ["anon_pipe_read", "pipe_read\n", "pipe_wait"] {
            assert_eq!(
                judge(b'S', None, Some(wchan), &only_stdin, &STDIN),
                Verdict::Waiting,
                "{wchan}"
            );
        }
        assert_eq!(
            judge(b'S', None, Some("anon_pipe_read"), &also_other, &STDIN),
            Verdict::Unknown
        );
        assert_eq!(
            judge(b'S', None, Some("anon_pipe_read"), &other_only, &STDIN),
            Verdict::NotWaiting
        );
        assert_eq!(
            judge(b'S', None, Some("do_wait"), &only_stdin, &STDIN),
            Verdict::NotWaiting
        );
        // A kernel that will not say, or files we may not read: unknown, not a guess.
        assert_eq!(
            judge(b'S', None, Some("0"), &only_stdin, &STDIN),
            Verdict::Unknown
        );
        assert_eq!(
            judge(b'S', None, None, &only_stdin, &STDIN),
            Verdict::Unknown
        );
        assert_eq!(
            judge(b'S', None, Some("pipe_read"), &Fds::default(), &STDIN),
            Verdict::Unknown
        );
    }

    #[test]
    fn a_tree_waits_when_one_member_does_and_is_unknown_when_one_cannot_be_judged() {
        use Verdict::*;
        assert_eq!(combine([NotWaiting, Waiting, Unknown]), Some(true));
        assert_eq!(combine([NotWaiting, NotWaiting]), Some(false));
        assert_eq!(combine([NotWaiting, Unknown]), None);
        assert_eq!(combine([]), Some(false));
    }
}
