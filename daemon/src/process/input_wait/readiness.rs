//! Rule 3 of [`super`]: a program blocked in a readiness wait (`select`, `poll`, `epoll`) waits
//! for input when it watches the input endpoint and nothing else that could bring it work. This
//! module decodes the waits (the syscall, its interest list in the program's memory or its epoll
//! fd's `fdinfo`) and classifies what each watched fd is; [`super::judge`] applies the verdict.

#[cfg(unix)]
use super::judge::{InputEndpoint, ProcessView, Verdict};
#[cfg(unix)]
use super::proc_text::parse_pipe_link;

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

/// The fds a readiness wait watches for reading, at most [`MAX_WATCHED`], and whether it may
/// watch more than were looked at; `None` when its interest list cannot be read.
#[cfg(unix)]
pub(super) fn watched_for_reading(
    wait: ReadinessWait,
    view: &impl ProcessView,
) -> Option<(Vec<u64>, bool)> {
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
pub(super) fn idle_but_for_input(
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

// The tests speak Linux syscall numbers, the only ones a process reports.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::judge::judge;
    use super::super::sample_process::*;
    use super::*;

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
}
