//! "Input wanted": whether a running process is blocked reading its stdin (ARCHITECTURE.md, "Terminal processes").
//!
//! # The rule (Linux, pipe mode)
//! The input endpoint is the pipe on the shell's fd 0, read from `/proc/<shell>/fd/0`
//! (`pipe:[inode]`) at each check: the daemon need not hold that pipe itself (a per-process
//! holder may). The tree is the shell's session: the shell, then every live process whose
//! `/proc/<pid>/stat` names the shell's session or process group. A process of it waits for input
//! when its `stat` state is `S` (interruptible sleep) and either
//! 1. `/proc/<pid>/syscall` shows its main thread blocked in `read`, `readv`, `pread64`, `preadv`
//!    or `preadv2` on an fd whose `/proc/<pid>/fd/<fd>` is the input endpoint (exact); or, when
//!    `syscall` cannot be read (it needs ptrace-attach access, which Yama's scope 1 gives only
//!    to ancestors: a daemon that re-adopted the process after a restart),
//! 2. `/proc/<pid>/wchan` names the pipe read wait (`pipe_read`, `anon_pipe_read`, `pipe_wait`)
//!    and the only pipes or FIFOs it holds open for reading are the input endpoint (so the pipe it
//!    sleeps on must be that one; a shell reading `$(…)` holds that other pipe and is not counted).
//!    A non-dumpable process (setuid, file capabilities, `PR_SET_DUMPABLE` 0) hides `wchan` and
//!    its fds too: it cannot be judged at all.
//! 3. `/proc/<pid>/syscall` shows its main thread blocked in a readiness wait that watches the
//!    input endpoint for reading and nothing else that could bring it work: `select`/`pselect6`
//!    (the read set, read from `/proc/<pid>/mem`), `poll`/`ppoll` (the `pollfd` array, likewise,
//!    with `POLLIN`, `POLLRDNORM` or `POLLPRI` asked), or `epoll_wait`/`epoll_pwait`/
//!    `epoll_pwait2` (the epoll fd's targets from `/proc/<pid>/fdinfo/<epfd>`, with `EPOLLIN`,
//!    `EPOLLRDNORM` or `EPOLLPRI`). Besides the input it may watch only its own wake-ups: an
//!    eventfd, signalfd or timerfd, or a pipe it holds both ends of (a self-pipe). This is how
//!    line editors wait for a key: GNU readline (Python's REPL, bash, psql) in `pselect6` on the
//!    terminal alone, Node's REPL in `epoll_pwait` with the terminal beside libuv's eventfd and
//!    signal pipe. A dev server that also reads keyboard shortcuts from its stdin (nodemon's
//!    `rs`, vite's `h`) watches its sockets, its file watchers or its child's pipes too: it is
//!    running, not waiting to be answered, and is not counted. Whatever the wait's timeout: a
//!    program that would also wake on a timer (`top`'s refresh) still takes input now. Under a
//!    terminal, only a member of the terminal's foreground process group counts (a background
//!    job's read would stop it with SIGTTIN; its readiness wait does not). An interest list that
//!    cannot be read (memory gone between the two reads) leaves the member unknown; of more than
//!    [`MAX_WATCHED`] fds only the first are looked at.
//!
//! The process waits for input when some member does; it does not when every member could be
//! judged and none does; otherwise it cannot be told ([`None`]: the field is absent, never a
//! guess). Elsewhere than Linux it is always `None`.
//!
//! # What it cannot see
//! A program that reads or waits on stdin in a thread other than its main thread, one that
//! reads `/dev/tty` instead of stdin in pipe mode (`ssh`, `sudo` password prompts), a readiness
//! wait judged without `syscall` (rule 2 knows only plain reads), a program idle but for its
//! input and a timer it set through the wait's timeout (a server that binds a second after it
//! starts is taken for waiting until then), 32-bit programs (their syscall numbers are another
//! table's) and descendants that left the session (`setsid`) are not seen as they are. A process reading a pipe it got some
//! other way while also holding the input pipe, judged by rule 2, reports `None`.
//!
//! # Terminal mode
//! A terminal process is the [`InputEndpoint::Terminal`] on the shell's fd 0 (`/dev/pts/N`). A
//! member waits for input when blocked reading an fd that links to that terminal or to
//! `/dev/tty` (its controlling terminal, which for a member of the shell's session is this one:
//! `getpass`, `ssh` and `sudo` read there); without `syscall`, when its `wchan` is `n_tty_read`
//! (a kernel that shows only `wait_woken` there leaves it unknown). Every member of the session
//! is judged rather than only the foreground process group: a background member that reads
//! the terminal is stopped by SIGTTIN (state `T`), so it never counts anyway (rule 3, whose
//! waits raise no SIGTTIN, checks the foreground group itself). `echo_off` is the
//! terminal's termios read through the master (`ManagedProcess::info_of`): `ECHO` off while
//! `ICANON` is on, as a password prompt sets it (raw mode, where a program draws its own echo,
//! does not count). Rule 3 applies as in pipe mode: a REPL's prompt under a line editor waits in
//! `pselect6` or `epoll_pwait` on the terminal, and is seen.
//!
//! # Cost
//! One check reads the shell's fd 0 link, `stat` and `syscall`, and the same per member of its
//! session (plus one fd link for a member blocked in a read, and for one in a readiness wait its
//! interest list and one fd link per fd watched for reading, at most [`MAX_WATCHED`]). The
//! members come from [`super::sessions`]' shared pass over `/proc`. Checks run on the blocking
//! pool ([`check_off_runtime`]). The answers given to `read`, `ps` and `exec` come from
//! [`super::live_facts`], which reuses each for 100 ms and skips processes younger than 250 ms;
//! [`until_waiting`] checks afresh every [`CHECK_EVERY`] while an `exec` or a `wait(for_input)`
//! waits, and only then. A background start (an `exec` whose yield is under
//! [`EXEC_FIRST_CHECK`]) is not checked at all.

use std::time::Duration;

use super::tree::Identity;

/// How long an `exec` lets the command run before the first check: most commands have not
/// reached a prompt (or have finished) by then.
pub const EXEC_FIRST_CHECK: Duration = Duration::from_millis(75);
/// The interval between checks, and so the confirmation delay: a process must be found waiting
/// on two checks in a row, so a transient read (a program between two chunks of piped input) is
/// not taken for a prompt.
pub const CHECK_EVERY: Duration = Duration::from_millis(150);

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
    fn is_link(&self, link: &str) -> bool {
        match self {
            InputEndpoint::Pipe { inode } => parse_pipe_link(link) == Some(*inode),
            InputEndpoint::Terminal { path } => link == path || link == "/dev/tty",
        }
    }

    /// Whether `wchan` names the kernel function this endpoint's readers sleep in.
    fn is_read_wait(&self, wchan: &str) -> bool {
        match self {
            // `pipe_wait` before Linux 5.6, `pipe_read` after, `anon_pipe_read` from 6.x.
            InputEndpoint::Pipe { .. } => {
                matches!(wchan.trim(), "pipe_read" | "anon_pipe_read" | "pipe_wait")
            }
            InputEndpoint::Terminal { .. } => wchan.trim() == "n_tty_read",
        }
    }
}

/// The inode of a `pipe:[inode]` fd link.
pub fn parse_pipe_link(link: &str) -> Option<u64> {
    link.trim()
        .strip_prefix("pipe:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// What `/proc/<pid>/syscall` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallState {
    /// On a CPU (`running`).
    Running,
    /// Blocked in system call `nr` with these arguments.
    Blocked {
        /// Syscall number (of the kernel's native table).
        nr: i64,
        /// Its six arguments (the fd first, for the read family).
        args: [u64; 6],
    },
    /// Not in a system call (`-1 …`: stopped in user space, say).
    Outside,
}

/// Parses `/proc/<pid>/syscall`: `running`, `-1 sp pc`, or `nr arg0 … arg5 sp pc` with the
/// arguments in hex.
pub fn parse_syscall(text: &str) -> Option<SyscallState> {
    let mut fields = text.split_ascii_whitespace();
    let first = fields.next()?;
    if first == "running" {
        return Some(SyscallState::Running);
    }
    let nr: i64 = first.parse().ok()?;
    if nr < 0 {
        return Some(SyscallState::Outside);
    }
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some(SyscallState::Blocked { nr, args })
}

/// Linux's numbers of the syscalls that read one fd's data (`read`, `readv`, `pread64`,
/// `preadv`, `preadv2`), as `/proc/<pid>/syscall` reports them.
#[cfg(target_os = "linux")]
const READ_SYSCALLS: [libc::c_long; 5] = [
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_preadv,
    libc::SYS_preadv2,
];

/// Elsewhere no process reports its syscall, so none is known to be a read.
#[cfg(all(unix, not(target_os = "linux")))]
const READ_SYSCALLS: [libc::c_long; 0] = [];

/// Whether `nr` is a read of one fd's data (one of [`READ_SYSCALLS`]).
// `c_long` is `i64` here but `i32` on 32-bit targets: the conversion is not useless there.
#[allow(clippy::useless_conversion)]
#[cfg(unix)]
pub fn is_read_syscall(nr: i64) -> bool {
    READ_SYSCALLS.iter().any(|n| i64::from(*n) == nr)
}

/// A wait for any of several fds to become ready, and where its interest list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadinessWait {
    /// `select`/`pselect6`: the number of fds and the address of the read set (a bitmap in
    /// `unsigned long` words, 0 when there is none).
    Select {
        /// First argument: one more than the highest fd in the sets.
        nfds: u64,
        /// Second argument: the read set.
        read_set: u64,
    },
    /// `poll`/`ppoll`: the address of `nfds` `struct pollfd`.
    Poll {
        /// First argument.
        fds: u64,
        /// Second argument.
        nfds: u64,
    },
    /// `epoll_wait`/`epoll_pwait`/`epoll_pwait2` on this epoll fd.
    Epoll {
        /// First argument.
        epfd: u64,
    },
}

/// The most fds of one readiness wait looked at: a prompt watches one or a few; a server may
/// watch thousands of sockets, each of which would cost a `/proc` link read.
pub const MAX_WATCHED: usize = 1024;

/// The most of an epoll fd's `fdinfo` read: a line per watched fd (about 90 bytes), so more than
/// [`MAX_WATCHED`] of them, without reading megabytes for a server's ten thousand connections.
pub const FDINFO_MAX_BYTES: u64 = 256 * 1024;

/// Linux's numbers of the readiness waits, by kind, as `/proc/<pid>/syscall` reports them
/// (`select`, `poll` and `epoll_wait` exist only in some architectures' tables; aarch64 has the
/// `p` forms alone).
#[cfg(target_os = "linux")]
mod wait_syscalls {
    pub const SELECT: &[libc::c_long] = &[
        libc::SYS_pselect6,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select,
    ];
    pub const POLL: &[libc::c_long] = &[
        libc::SYS_ppoll,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll,
    ];
    pub const EPOLL: &[libc::c_long] = &[
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait,
    ];
}

/// Elsewhere no process reports its syscall.
#[cfg(all(unix, not(target_os = "linux")))]
mod wait_syscalls {
    pub const SELECT: &[libc::c_long] = &[];
    pub const POLL: &[libc::c_long] = &[];
    pub const EPOLL: &[libc::c_long] = &[];
}

/// The readiness wait syscall `nr` with `args` is, if it is one.
// `c_long` is `i64` here but `i32` on 32-bit targets: the conversion is not useless there.
#[allow(clippy::useless_conversion)]
#[cfg(unix)]
pub fn readiness_wait(nr: i64, args: &[u64; 6]) -> Option<ReadinessWait> {
    let is = |table: &[libc::c_long]| table.iter().any(|n| i64::from(*n) == nr);
    if is(wait_syscalls::SELECT) {
        Some(ReadinessWait::Select {
            nfds: args[0],
            read_set: args[1],
        })
    } else if is(wait_syscalls::POLL) {
        Some(ReadinessWait::Poll {
            fds: args[0],
            nfds: args[1],
        })
    } else if is(wait_syscalls::EPOLL) {
        Some(ReadinessWait::Epoll { epfd: args[0] })
    } else {
        None
    }
}

/// The fds set in a `select` read set, from its bytes (whole `unsigned long` words in the
/// process's byte order), below `nfds`.
pub fn fds_in_select_set(bytes: &[u8], nfds: u64) -> Vec<u64> {
    const WORD: usize = std::mem::size_of::<std::ffi::c_ulong>();
    let mut fds = Vec::new();
    for (w, word) in bytes.chunks_exact(WORD).enumerate() {
        let mut buf = [0u8; 8];
        // The word's bytes as a native integer; on a big-endian 32-bit target they are the
        // high half of the u64 and shift down.
        buf[..WORD].copy_from_slice(word);
        let value = if cfg!(target_endian = "big") {
            u64::from_be_bytes(buf) >> (8 * (8 - WORD))
        } else {
            u64::from_le_bytes(buf)
        };
        for bit in 0..WORD * 8 {
            let fd = (w * WORD * 8 + bit) as u64;
            if fd < nfds && value & (1 << bit) != 0 {
                fds.push(fd);
            }
        }
    }
    fds
}

/// The fds a `poll` array asks to be told are readable (`POLLIN`, `POLLRDNORM`, `POLLPRI`), from
/// its bytes (`struct pollfd`: `int fd; short events; short revents`, native byte order);
/// negative fds are ignored entries.
#[cfg(unix)]
pub fn fds_polled_for_reading(bytes: &[u8]) -> Vec<u64> {
    let reading = libc::POLLIN | libc::POLLRDNORM | libc::POLLPRI;
    bytes
        .chunks_exact(8)
        .filter_map(|entry| {
            let fd = i32::from_ne_bytes(entry[0..4].try_into().ok()?);
            let events = i16::from_ne_bytes(entry[4..6].try_into().ok()?);
            (events & reading != 0).then_some(u64::try_from(fd).ok()?)
        })
        .collect()
}

/// The target fds an epoll instance watches for reading (`EPOLLIN`, `EPOLLRDNORM`, `EPOLLPRI`),
/// from its `/proc/<pid>/fdinfo/<epfd>` (`tfd: 20 events: 19 data: … ino:4 sdev:1a` lines).
/// `None` when a `tfd:` line does not parse.
#[cfg(target_os = "linux")]
pub fn epoll_targets_for_reading(fdinfo: &str) -> Option<Vec<u64>> {
    let reading = (libc::EPOLLIN | libc::EPOLLRDNORM | libc::EPOLLPRI) as u32;
    let mut targets = Vec::new();
    for line in fdinfo.lines() {
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some("tfd:") {
            continue;
        }
        let fd: u64 = words.next()?.parse().ok()?;
        if words.next() != Some("events:") {
            return None;
        }
        let events = u32::from_str_radix(words.next()?, 16).ok()?;
        if events & reading != 0 {
            targets.push(fd);
        }
    }
    // An epoll fd with nothing registered has no `tfd:` line, nor has a file that is not an
    // epoll fd (the number was reused since the wait began): both watch nothing for reading.
    Some(targets)
}

/// Elsewhere there is no epoll.
#[cfg(all(unix, not(target_os = "linux")))]
pub fn epoll_targets_for_reading(_fdinfo: &str) -> Option<Vec<u64>> {
    Some(Vec::new())
}

/// Whether `/proc/<pid>/fdinfo/<n>` describes an fd open for reading (its octal `flags` have
/// access mode `O_RDONLY` or `O_RDWR`).
#[cfg(unix)]
pub fn fdinfo_readable(text: &str) -> Option<bool> {
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())?;
    Some(matches!(
        flags & libc::O_ACCMODE,
        libc::O_RDONLY | libc::O_RDWR
    ))
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
    /// The text of `/proc/<pid>/fdinfo/<fd>`, whole lines of at most [`FDINFO_MAX_BYTES`], and
    /// whether there was more; `None` when unreadable or closed.
    fn fdinfo(&self, fd: u64) -> Option<(String, bool)>;
    /// Whether more than one of its fds links to `link` (both ends of a pipe); `None` when its
    /// fds cannot be listed.
    fn holds_more_than_once(&self, link: &str) -> Option<bool>;
    /// Whether it is in its terminal's foreground process group; `None` when unknown.
    fn in_foreground(&self) -> Option<bool>;
}

/// The fds a readiness wait watches for reading, at most [`MAX_WATCHED`], and whether it may
/// watch more than were looked at; `None` when its interest list cannot be read.
#[cfg(unix)]
fn watched_for_reading(wait: ReadinessWait, view: &impl ProcessView) -> Option<(Vec<u64>, bool)> {
    const WORD: u64 = std::mem::size_of::<std::ffi::c_ulong>() as u64;
    let limit = MAX_WATCHED as u64;
    let (mut fds, beyond) = match wait {
        ReadinessWait::Select { nfds, read_set } => {
            if nfds == 0 || read_set == 0 {
                return Some((Vec::new(), false));
            }
            let bits = nfds.min(limit);
            let bytes = view.memory(read_set, (bits.div_ceil(WORD * 8) * WORD) as usize)?;
            (fds_in_select_set(&bytes, bits), nfds > bits)
        }
        ReadinessWait::Poll { fds, nfds } => {
            if nfds == 0 {
                return Some((Vec::new(), false));
            }
            let entries = nfds.min(limit);
            let bytes = view.memory(fds, (entries * 8) as usize)?;
            (fds_polled_for_reading(&bytes), nfds > entries)
        }
        ReadinessWait::Epoll { epfd } => {
            let (text, cut) = view.fdinfo(epfd)?;
            (epoll_targets_for_reading(&text)?, cut)
        }
    };
    let more = beyond || fds.len() > MAX_WATCHED;
    fds.truncate(MAX_WATCHED);
    Some((fds, more))
}

/// What a watched fd is to a program that may be waiting for input.
#[cfg(unix)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    /// The input endpoint.
    Input,
    /// One of the program's own wake-ups: an eventfd, signalfd or timerfd, or a pipe it holds
    /// both ends of (a self-pipe: libuv's signal pipe, Python's wakeup fd). Nothing from outside
    /// comes through these.
    WakeUp,
    /// Anything else (a socket, a listening socket, inotify, another process's pipe): work may
    /// come from there, so the program is not merely waiting for input.
    Work,
    /// Closed since the wait began: not watched any more.
    Gone,
    /// Cannot be told.
    Unknown,
}

/// Classifies watched fd `fd`.
#[cfg(unix)]
fn classify(fd: u64, view: &impl ProcessView, endpoint: &InputEndpoint) -> Watched {
    let Some(link) = view.link(fd) else {
        return Watched::Gone;
    };
    if endpoint.is_link(&link) {
        return Watched::Input;
    }
    match link.as_str() {
        "anon_inode:[eventfd]" | "anon_inode:[signalfd]" | "anon_inode:[timerfd]" => {
            Watched::WakeUp
        }
        _ if parse_pipe_link(&link).is_some() => match view.holds_more_than_once(&link) {
            Some(true) => Watched::WakeUp,
            Some(false) => Watched::Work,
            None => Watched::Unknown,
        },
        _ => Watched::Work,
    }
}

/// Rule 3's verdict on a readiness wait watching `watched` for reading (and maybe `more`): the
/// program waits for input when it watches the input and nothing else that could bring it work.
/// A dev server that also reads keyboard shortcuts from its stdin (nodemon's `rs`, vite's `h`)
/// watches its sockets or its child's pipes too: it is running, not waiting to be answered.
#[cfg(unix)]
fn idle_but_for_input(
    watched: &[u64],
    more: bool,
    view: &impl ProcessView,
    endpoint: &InputEndpoint,
) -> Verdict {
    let kinds: Vec<Watched> = watched
        .iter()
        .map(|fd| classify(*fd, view, endpoint))
        .collect();
    if kinds.contains(&Watched::Work) {
        Verdict::NotWaiting
    } else if !kinds.contains(&Watched::Input) {
        if more {
            Verdict::Unknown
        } else {
            Verdict::NotWaiting
        }
    } else if more || kinds.contains(&Watched::Unknown) {
        Verdict::Unknown
    } else {
        Verdict::Waiting
    }
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

#[cfg(target_os = "linux")]
mod linux {
    //! The `/proc` reader behind [`check_many`](super::check_many).

    use std::collections::{HashMap, HashSet};

    use super::super::tree::{self, Identity, ProcStat};
    use super::{InputEndpoint, ProcessView, Verdict, judge, parse_pipe_link};

    /// The fds of a live process, read on demand, and what its `stat` said.
    struct ProcFds(i32, Option<ProcStat>);

    impl ProcessView for ProcFds {
        fn link(&self, fd: u64) -> Option<String> {
            let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.0)).ok()?;
            Some(link.to_string_lossy().into_owned())
        }

        fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
            use std::os::unix::fs::FileExt;
            // Opening `mem` takes the same ptrace access as reading `syscall`, which the caller
            // already had; the process may have left the wait since (then the bytes are stale,
            // and the two checks in a row of an `exec` tell a passing state from a prompt).
            let mem = std::fs::File::open(format!("/proc/{}/mem", self.0)).ok()?;
            let mut bytes = vec![0; len];
            mem.read_exact_at(&mut bytes, addr).ok()?;
            Some(bytes)
        }

        fn holds_more_than_once(&self, link: &str) -> Option<bool> {
            let mut seen = 0;
            for (n, entry) in std::fs::read_dir(format!("/proc/{}/fd", self.0))
                .ok()?
                .flatten()
                .enumerate()
            {
                // A program with this many fds is no prompt; do not read them all.
                if n >= super::MAX_WATCHED {
                    return None;
                }
                if std::fs::read_link(entry.path()).is_ok_and(|l| l.as_os_str() == link) {
                    seen += 1;
                    if seen > 1 {
                        return Some(true);
                    }
                }
            }
            Some(false)
        }

        fn in_foreground(&self) -> Option<bool> {
            self.1.map(|stat| stat.pgrp == stat.tpgid)
        }

        fn fdinfo(&self, fd: u64) -> Option<(String, bool)> {
            use std::io::Read;
            let file = std::fs::File::open(format!("/proc/{}/fdinfo/{fd}", self.0)).ok()?;
            let mut text = String::new();
            file.take(super::FDINFO_MAX_BYTES + 1)
                .read_to_string(&mut text)
                .ok()?;
            if text.len() as u64 <= super::FDINFO_MAX_BYTES {
                return Some((text, false));
            }
            // Cut: keep whole lines only.
            text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
            Some((text, true))
        }

        fn readable_pipes(&self) -> Option<Vec<String>> {
            use std::os::unix::fs::FileTypeExt;
            let mut pipes = Vec::new();
            for entry in std::fs::read_dir(format!("/proc/{}/fd", self.0))
                .ok()?
                .flatten()
            {
                let link = std::fs::read_link(entry.path()).ok()?;
                let link = link.to_string_lossy().into_owned();
                let pipe = parse_pipe_link(&link).is_some()
                    || (link.starts_with('/')
                        && std::fs::metadata(entry.path()).is_ok_and(|m| m.file_type().is_fifo()));
                if !pipe {
                    continue;
                }
                let info = std::fs::read_to_string(format!(
                    "/proc/{}/fdinfo/{}",
                    self.0,
                    entry.file_name().to_string_lossy()
                ))
                .ok()?;
                if super::fdinfo_readable(&info)? {
                    pipes.push(link);
                }
            }
            Some(pipes)
        }
    }

    /// Judges `pid` by rule 2 alone (`wchan` and its readable pipes), as when `syscall` is
    /// closed to us: the unit tests run it where `syscall` is open.
    #[cfg(test)]
    pub(super) fn judge_without_syscall(pid: i32, endpoint: &InputEndpoint) -> Verdict {
        let stat = tree::read_stat(pid);
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok();
        let state = stat.map_or(b'?', |s| s.state);
        judge(state, None, wchan.as_deref(), &ProcFds(pid, stat), endpoint)
    }

    /// The endpoint on the shell's fd 0, if it is a pipe or a terminal.
    pub(super) fn endpoint_of(shell: i32) -> Option<InputEndpoint> {
        let link = ProcFds(shell, None).link(0)?;
        if link.starts_with("/dev/pts/") {
            return Some(InputEndpoint::Terminal { path: link });
        }
        let inode = parse_pipe_link(&link)?;
        Some(InputEndpoint::Pipe { inode })
    }

    fn judge_pid(pid: i32, stat: &ProcStat, endpoint: &InputEndpoint) -> Verdict {
        if stat.state != b'S' {
            return Verdict::NotWaiting;
        }
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok();
        let wchan = match syscall {
            Some(_) => None,
            None => std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok(),
        };
        judge(
            stat.state,
            syscall.as_deref(),
            wchan.as_deref(),
            &ProcFds(pid, Some(*stat)),
            endpoint,
        )
    }

    /// See [`check_many`](super::check_many).
    pub fn check_many(shells: &[Identity]) -> Vec<Option<bool>> {
        // Each shell: its endpoint and its own verdict; a shell found waiting needs no scan.
        let mut pending: HashMap<i32, (InputEndpoint, Vec<Verdict>)> = HashMap::new();
        let mut answers: Vec<Option<bool>> = vec![None; shells.len()];
        for (i, shell) in shells.iter().enumerate() {
            let Some(endpoint) = endpoint_of(shell.pid) else {
                continue;
            };
            // Read after the link, so the link was this shell's and not a recycled pid's.
            let Some(stat) = tree::read_stat(shell.pid)
                .filter(|s| s.is_alive() && s.start_time == shell.start_time)
            else {
                continue;
            };
            match judge_pid(shell.pid, &stat, &endpoint) {
                Verdict::Waiting => answers[i] = Some(true),
                v => {
                    pending.insert(shell.pid, (endpoint, vec![v]));
                }
            }
        }
        if !pending.is_empty() {
            scan_members(&mut pending);
        }
        for (i, shell) in shells.iter().enumerate() {
            if let Some((_, verdicts)) = pending.remove(&shell.pid) {
                answers[i] = super::combine(verdicts);
            }
        }
        answers
    }

    /// Judges every live member of a pending shell's session or group.
    fn scan_members(pending: &mut HashMap<i32, (InputEndpoint, Vec<Verdict>)>) {
        let Some(snap) = super::super::sessions::snapshot() else {
            for (_, verdicts) in pending.values_mut() {
                verdicts.push(Verdict::Unknown);
            }
            return;
        };
        let leaders: HashSet<i32> = pending.keys().copied().collect();
        for (pid, leader) in snap.members(|p| leaders.contains(&p)) {
            // The state now, not as of the snapshot.
            let Some(stat) = tree::read_stat(pid).filter(ProcStat::is_alive) else {
                continue;
            };
            if let Some((endpoint, verdicts)) = pending.get_mut(&leader) {
                verdicts.push(judge_pid(pid, &stat, endpoint));
            }
        }
    }
}

/// Whether each shell's process (the shell and its session) waits for input now: `Some(true)`,
/// `Some(false)`, or `None` when it cannot be told. One `/proc` pass for all of them (`ps`).
/// Blocking: call it on the blocking pool.
#[cfg(target_os = "linux")]
pub fn check_many(shells: &[Identity]) -> Vec<Option<bool>> {
    linux::check_many(shells)
}

/// Without `/proc` it cannot be told.
#[cfg(not(target_os = "linux"))]
pub fn check_many(shells: &[Identity]) -> Vec<Option<bool>> {
    vec![None; shells.len()]
}

/// Whether detection works on this platform at all.
pub const SUPPORTED: bool = cfg!(target_os = "linux");

/// How long an answer waits for a `/proc` check before it goes without (fields absent). A check
/// takes well under a millisecond per process, but reading a process's memory can block for as
/// long as its page does (memory mapped from a hung FUSE or network filesystem): the stuck
/// thread is the blocking pool's, never a caller's.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How many `/proc` checks run at once. A check holds its permit until it is done, even after
/// its caller gave up on it: a tree that makes checks slow (tens of thousands of descriptors)
/// then delays other checks by at most one check, and never fills the blocking pool with a
/// backlog of them.
static CHECKS_AT_ONCE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Runs a `/proc` check on the blocking pool, waiting for it (and for its turn) at most
/// [`CHECK_TIMEOUT`]; `None` when it failed or took longer.
pub async fn off_runtime<T: Send + 'static>(
    check: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let run = async {
        let permit = CHECKS_AT_ONCE.acquire().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let found = check();
            drop(permit);
            found
        })
        .await
        .ok()
    };
    tokio::time::timeout(CHECK_TIMEOUT, run)
        .await
        .ok()
        .flatten()
}

/// [`check_many`] on the blocking pool.
pub async fn check_off_runtime(shells: Vec<Identity>) -> Vec<Option<bool>> {
    if !SUPPORTED || shells.is_empty() {
        return vec![None; shells.len()];
    }
    let n = shells.len();
    off_runtime(move || check_many(&shells))
        .await
        .unwrap_or_else(|| vec![None; n])
}

/// Whether the process with this shell waits for input now (one check).
pub async fn check_one(shell: Option<Identity>) -> Option<bool> {
    check_off_runtime(shell.into_iter().collect())
        .await
        .into_iter()
        .next()
        .flatten()
}

/// Resolves once the process of `shell` has been found waiting for input on two checks in a row
/// ([`CHECK_EVERY`] apart), the first after `first_check`. Never resolves where it cannot be
/// told: callers race it against their own ends (exit, deadline).
pub async fn until_waiting(shell: Identity, first_check: Duration) {
    if !SUPPORTED {
        return std::future::pending().await;
    }
    tokio::time::sleep(first_check).await;
    let mut before = false;
    loop {
        let now = check_one(Some(shell)).await == Some(true);
        if now && before {
            return;
        }
        before = now;
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

// The tests speak Linux syscall numbers, the only ones a process reports.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Fds of a sample process.
    #[derive(Default)]
    struct Fds {
        links: HashMap<u64, String>,
        readable: Option<Vec<String>>,
        /// Memory by address (a read must fall inside one region).
        memory: HashMap<u64, Vec<u8>>,
        fdinfo: HashMap<u64, String>,
        /// Not in its terminal's foreground group.
        background: bool,
    }

    impl ProcessView for Fds {
        fn link(&self, fd: u64) -> Option<String> {
            self.links.get(&fd).cloned()
        }
        fn readable_pipes(&self) -> Option<Vec<String>> {
            self.readable.clone()
        }
        fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
            let (start, bytes) = self
                .memory
                .iter()
                .find(|(start, bytes)| **start <= addr && addr - **start < bytes.len() as u64)?;
            let from = usize::try_from(addr - start).ok()?;
            bytes.get(from..from + len).map(<[u8]>::to_vec)
        }
        fn fdinfo(&self, fd: u64) -> Option<(String, bool)> {
            self.fdinfo.get(&fd).map(|t| (t.clone(), false))
        }
        fn holds_more_than_once(&self, link: &str) -> Option<bool> {
            Some(self.links.values().filter(|l| *l == link).count() > 1)
        }
        fn in_foreground(&self) -> Option<bool> {
            Some(!self.background)
        }
    }

    const STDIN: InputEndpoint = InputEndpoint::Pipe { inode: 1738101 };

    fn fds(links: &[(u64, &str)]) -> Fds {
        Fds {
            links: links.iter().map(|(f, l)| (*f, l.to_string())).collect(),
            ..Fds::default()
        }
    }

    /// `/proc/<pid>/syscall` of a process blocked in syscall `nr` with these first arguments.
    fn blocked_in(nr: libc::c_long, args: &[u64]) -> String {
        let mut all = [0u64; 6];
        all[..args.len()].copy_from_slice(args);
        let args: Vec<String> = all.iter().map(|a| format!("{a:#x}")).collect();
        format!("{nr} {} 0x7ffc25e0fc18 0x7f4bae7532ad", args.join(" "))
    }

    /// A `select` read set (whole `unsigned long` words) with these fds.
    fn select_set(fds: &[u64], words: usize) -> Vec<u8> {
        let bits = 8 * std::mem::size_of::<std::ffi::c_ulong>();
        let mut set: Vec<std::ffi::c_ulong> = vec![0; words];
        for fd in fds {
            set[*fd as usize / bits] |= 1 << (*fd as usize % bits);
        }
        set.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// A `poll` array of (fd, events).
    fn poll_array(entries: &[(i32, i16)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|(fd, events)| {
                let mut e = fd.to_ne_bytes().to_vec();
                e.extend(events.to_ne_bytes());
                e.extend(0i16.to_ne_bytes());
                e
            })
            .collect()
    }

    /// `/proc/<pid>/syscall` of a process blocked in read(fd, …) (x86-64 or aarch64 number).
    fn read_syscall(fd: u64) -> String {
        format!(
            "{} {fd:#x} 0x7f4bae5d7000 0x20000 0x7f4bae66ab60 0xffffffff 0x0 0x7ffc25e0fc18 0x7f4bae7532ad",
            libc::SYS_read
        )
    }

    #[test]
    #[allow(clippy::useless_conversion)] // `c_long` is `i32` on 32-bit targets
    fn parses_pipe_links_syscalls_and_fdinfo() {
        assert_eq!(parse_pipe_link("pipe:[1738101]"), Some(1738101));
        assert_eq!(parse_pipe_link("pipe:[1738101]\n"), Some(1738101));
        assert_eq!(parse_pipe_link("socket:[5]"), None);
        assert_eq!(parse_pipe_link("/dev/pts/3"), None);
        assert_eq!(parse_syscall("running\n"), Some(SyscallState::Running));
        assert_eq!(
            parse_syscall("-1 0x7ffd1 0x7f2"),
            Some(SyscallState::Outside)
        );
        assert_eq!(
            parse_syscall(&read_syscall(0)),
            Some(SyscallState::Blocked {
                nr: i64::from(libc::SYS_read),
                args: [0, 0x7f4bae5d7000, 0x20000, 0x7f4bae66ab60, 0xffffffff, 0]
            })
        );
        assert_eq!(
            parse_syscall("7 0x5556c3f1ad30 0x1 0xffffffff 0x0 0x0 0x0 0x7ffcad1a4e88 0x7f9e"),
            Some(SyscallState::Blocked {
                nr: 7,
                args: [0x5556c3f1ad30, 1, 0xffffffff, 0, 0, 0]
            })
        );
        assert_eq!(parse_syscall(""), None);
        // Fewer than six arguments is not the kernel's format: not trusted.
        assert_eq!(parse_syscall("7 0x1 0x2"), None);
        #[cfg(target_os = "linux")]
        {
            assert!(is_read_syscall(i64::from(libc::SYS_read)));
            assert!(is_read_syscall(i64::from(libc::SYS_readv)));
            assert!(!is_read_syscall(i64::from(libc::SYS_wait4)));
            assert!(!is_read_syscall(i64::from(libc::SYS_write)));
        }
        let fdinfo =
            |flags: &str| format!("pos:\t0\nflags:\t{flags}\nmnt_id:\t16\nino:\t1738101\n");
        assert_eq!(fdinfo_readable(&fdinfo("00")), Some(true));
        assert_eq!(fdinfo_readable(&fdinfo("02000002")), Some(true));
        assert_eq!(fdinfo_readable(&fdinfo("01")), Some(false));
        assert_eq!(fdinfo_readable(&fdinfo("02004001")), Some(false));
        assert_eq!(fdinfo_readable("pos:\t0\n"), None);
    }

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

    const TTY: &str = "/dev/pts/7";

    fn terminal() -> InputEndpoint {
        InputEndpoint::Terminal { path: TTY.into() }
    }

    #[test]
    fn a_select_or_poll_watching_the_input_and_nothing_else_that_brings_work_is_waiting() {
        const SET: u64 = 0x7ffc_6e5e_8830;
        let mut f = fds(&[
            (0, TTY),
            (3, "pipe:[42]"),
            (4, "socket:[9]"),
            (5, "anon_inode:[eventfd]"),
            (6, "pipe:[99]"),
            (7, "pipe:[99]"),
            (8, "/dev/tty"),
        ]);
        let pselect = |nfds: u64| blocked_in(libc::SYS_pselect6, &[nfds, SET, 0, 0, 0, 0x7ffc]);
        // GNU readline at a prompt: pselect6(1, {0}, NULL, NULL, NULL, mask).
        f.memory.insert(SET, select_set(&[0], 1));
        assert_eq!(
            judge(b'S', Some(&pselect(1)), None, &f, &terminal()),
            Verdict::Waiting
        );
        // With its own wake-ups beside the input (an eventfd, both ends of a self-pipe): still.
        f.memory.insert(SET, select_set(&[0, 5, 6], 1));
        assert_eq!(
            judge(b'S', Some(&pselect(7)), None, &f, &terminal()),
            Verdict::Waiting
        );
        // A socket or another process's pipe beside the input: work may come from there (a dev
        // server reading shortcuts from its stdin), so it is not waiting to be answered.
        for other in [3, 4] {
            f.memory.insert(SET, select_set(&[0, other], 1));
            assert_eq!(
                judge(b'S', Some(&pselect(5)), None, &f, &terminal()),
                Verdict::NotWaiting,
                "fd {other}"
            );
        }
        // Waiting on a pipe and a socket, not on the input.
        f.memory.insert(SET, select_set(&[3, 4], 1));
        assert_eq!(
            judge(b'S', Some(&pselect(5)), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // Only fds below nfds count.
        f.memory.insert(SET, select_set(&[0, 3], 1));
        assert_eq!(
            judge(b'S', Some(&pselect(0)), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // No read set (a select used as a sleep).
        let sleep = blocked_in(libc::SYS_pselect6, &[0, 0, 0, 0, 0x7ffc]);
        assert_eq!(
            judge(b'S', Some(&sleep), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // A background job polling the terminal is not the prompt a person answers.
        f.memory.insert(SET, select_set(&[0], 1));
        f.background = true;
        assert_eq!(
            judge(b'S', Some(&pselect(1)), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // …while on pipes there is no foreground to be in.
        let stdin_pipe = fds(&[(0, "pipe:[1738101]")]);
        let mut piped = Fds {
            background: true,
            ..stdin_pipe
        };
        piped.memory.insert(SET, select_set(&[0], 1));
        assert_eq!(
            judge(b'S', Some(&pselect(1)), None, &piped, &STDIN),
            Verdict::Waiting
        );
        f.background = false;
        // The interest list cannot be read: unknown, not a guess.
        f.memory.clear();
        assert_eq!(
            judge(b'S', Some(&pselect(1)), None, &f, &terminal()),
            Verdict::Unknown
        );
        // A set wider than is looked at, without the input in its first part: unknown.
        let wide = MAX_WATCHED as u64 * 2;
        f.memory.insert(SET, select_set(&[5], MAX_WATCHED / 8));
        assert_eq!(
            judge(b'S', Some(&pselect(wide)), None, &f, &terminal()),
            Verdict::Unknown
        );

        // poll: the input asked for reading beside an eventfd; the input asked only for writing.
        const ARRAY: u64 = 0x5556_c3f1_ad30;
        let ppoll = |n: u64| blocked_in(libc::SYS_ppoll, &[ARRAY, n, 0, 0]);
        f.memory.insert(
            ARRAY,
            poll_array(&[(5, libc::POLLIN), (-1, libc::POLLIN), (0, libc::POLLIN)]),
        );
        assert_eq!(
            judge(b'S', Some(&ppoll(3)), None, &f, &terminal()),
            Verdict::Waiting
        );
        assert_eq!(
            judge(b'S', Some(&ppoll(2)), None, &f, &terminal()),
            Verdict::NotWaiting,
            "the input is the third entry"
        );
        f.memory
            .insert(ARRAY, poll_array(&[(0, libc::POLLOUT), (5, libc::POLLIN)]));
        assert_eq!(
            judge(b'S', Some(&ppoll(2)), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // A read of the input through /dev/tty counts as the terminal's.
        f.memory.insert(ARRAY, poll_array(&[(8, libc::POLLRDNORM)]));
        assert_eq!(
            judge(b'S', Some(&ppoll(1)), None, &f, &terminal()),
            Verdict::Waiting
        );
        // Still the state letter first: a busy process is not waiting.
        assert_eq!(
            judge(b'R', Some(&ppoll(1)), None, &f, &terminal()),
            Verdict::NotWaiting
        );
    }

    #[test]
    fn an_epoll_wait_on_the_input_and_its_own_wake_ups_is_waiting() {
        // Node's REPL: epoll_pwait(13, …, 1024, 8095) with the terminal, reopened as fd 20,
        // beside libuv's eventfd (16) and signal pipe (14, whose write end is 15).
        let info = |tty_events: &str| {
            format!(
                "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\n\
                 tfd:       16 events:       19 data:               10  pos:0 ino:40e sdev:10\n\
                 tfd:       14 events:       19 data:                e  pos:0 ino:b4bc46 sdev:f\n\
                 tfd:       20 events: {tty_events:>8} data:               14  pos:0 ino:4 sdev:1a\n"
            )
        };
        let mut f = fds(&[
            (13, "anon_inode:[eventpoll]"),
            (14, "pipe:[11844678]"),
            (15, "pipe:[11844678]"),
            (16, "anon_inode:[eventfd]"),
            (20, TTY),
        ]);
        let wait = blocked_in(libc::SYS_epoll_pwait, &[13, 0x7ffe, 0x400, 0x1f9f, 0, 8]);
        f.fdinfo.insert(13, info("19"));
        assert_eq!(
            judge(b'S', Some(&wait), None, &f, &terminal()),
            Verdict::Waiting
        );
        // The terminal registered for writing only.
        f.fdinfo.insert(13, info("4"));
        assert_eq!(
            judge(b'S', Some(&wait), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // nodemon: its child's output pipe (only the read end here) beside the input.
        f.fdinfo.insert(13, info("19"));
        f.links.remove(&15);
        assert_eq!(
            judge(b'S', Some(&wait), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        f.links.insert(15, "pipe:[11844678]".into());
        // A dev server's event loop: its socket where the terminal was.
        f.links.insert(20, "socket:[77]".into());
        assert_eq!(
            judge(b'S', Some(&wait), None, &f, &terminal()),
            Verdict::NotWaiting
        );
        // The epoll fd's fdinfo is gone (closed meanwhile): unknown.
        f.fdinfo.clear();
        assert_eq!(
            judge(b'S', Some(&wait), None, &f, &terminal()),
            Verdict::Unknown
        );
        assert_eq!(
            epoll_targets_for_reading("pos:\t0\nflags:\t02\n"),
            Some(vec![])
        );
        assert_eq!(epoll_targets_for_reading("tfd: x events: 19\n"), None);
    }

    #[test]
    fn a_tree_waits_when_one_member_does_and_is_unknown_when_one_cannot_be_judged() {
        use Verdict::*;
        assert_eq!(combine([NotWaiting, Waiting, Unknown]), Some(true));
        assert_eq!(combine([NotWaiting, NotWaiting]), Some(false));
        assert_eq!(combine([NotWaiting, Unknown]), None);
        assert_eq!(combine([]), Some(false));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_shell_reading_its_stdin_pipe_is_found_waiting() {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read answer; echo \"got $answer\""])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        let shell = super::super::tree::identify(child.id() as i32).expect("identity");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while check_many(&[shell]) != vec![Some(true)] {
            assert!(std::time::Instant::now() < deadline, "never seen waiting");
            std::thread::yield_now();
        }
        // The same pid with another start time is another process: never judged.
        let recycled = Identity {
            start_time: shell.start_time + 1,
            ..shell
        };
        assert_eq!(check_many(&[recycled, shell]), vec![None, Some(true)]);
        // Rule 2 (wchan and the readable pipes), used where `syscall` is closed to us, sees it
        // too.
        let endpoint = linux::endpoint_of(shell.pid).expect("a pipe on fd 0");
        assert_eq!(
            linux::judge_without_syscall(shell.pid, &endpoint),
            Verdict::Waiting
        );
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"yes\n").expect("write");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.stdout, b"got yes\n");
    }

    /// `python3 -c "import os, select, socket, sys; PROGRAM"` with its stdin and stdout on
    /// pipes, leading a process group of its own as a managed shell does, and its identity.
    #[cfg(target_os = "linux")]
    fn python(program: &str) -> (std::process::Child, Identity) {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("python3")
            .args(["-c", &format!("import os, select, socket, sys\n{program}")])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3 (installed by .ci/test-extra)");
        let shell = super::super::tree::identify(child.id() as i32).expect("identity");
        (child, shell)
    }

    /// Rule 3 on real processes: Python waiting for its stdin pipe in `select`, `poll` and
    /// `epoll` (the interest lists read from its memory and its epoll fd's fdinfo).
    #[cfg(target_os = "linux")]
    #[test]
    #[ignore = "needs python3: run .ci/test-extra"]
    fn real_readiness_waits_on_the_stdin_pipe_are_found_waiting() {
        use std::io::Write;
        let waits = [
            "select.select([sys.stdin], [], [])",
            "p = select.poll(); p.register(0, select.POLLIN); p.poll()",
            "e = select.epoll(); e.register(0, select.EPOLLIN); e.poll()",
            // Watching another pipe (its own) and the input: still the input it would take.
            "r, w = os.pipe(); select.select([r, sys.stdin], [], [])",
        ];
        for wait in waits {
            let (mut child, shell) = python(&format!("{wait}\nprint(sys.stdin.readline())"));
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while check_many(&[shell]) != vec![Some(true)] {
                assert!(std::time::Instant::now() < deadline, "{wait}: never seen");
                std::thread::yield_now();
            }
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"yes\n").expect("write");
            drop(stdin);
            let out = child.wait_with_output().expect("wait");
            assert_eq!(out.stdout, b"yes\n\n", "{wait}");
        }
    }

    /// And a readiness wait on something else is not a wait for input: Python sleeping in
    /// `select` on a pipe of its own, its stdin untouched; or a server watching its listening
    /// socket beside its stdin (as dev servers reading keyboard shortcuts do).
    #[cfg(target_os = "linux")]
    #[test]
    #[ignore = "needs python3: run .ci/test-extra"]
    fn real_readiness_waits_on_other_work_are_not_waiting() {
        let programs = [
            "r, w = os.pipe()\nprint('in', flush=True)\nselect.select([r], [], [])",
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
             print('in', flush=True)\nselect.select([s, sys.stdin], [], [])",
        ];
        for program in programs {
            let (mut child, shell) = python(program);
            let mut line = [0u8; 3];
            std::io::Read::read_exact(child.stdout.as_mut().expect("stdout"), &mut line)
                .expect("in");
            // Now it is in (or about to enter) the select: seen as a wait that is not for
            // input, never as waiting. Until its syscall shows the select, it reads as running
            // or as another syscall: also "not waiting".
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let syscall = std::fs::read_to_string(format!("/proc/{}/syscall", shell.pid))
                    .unwrap_or_default();
                let in_wait = parse_syscall(&syscall).is_some_and(|s| {
                    matches!(s, SyscallState::Blocked { nr, args } if readiness_wait(nr, &args).is_some())
                });
                assert_eq!(check_many(&[shell]), vec![Some(false)], "{program}");
                if in_wait {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "never in select");
                std::thread::yield_now();
            }
            child.kill().expect("kill");
            child.wait().expect("reap");
        }
    }
}
