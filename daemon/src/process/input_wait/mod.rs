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
//!    [`MAX_WATCHED`](readiness::MAX_WATCHED) fds only the first are looked at.
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
//! A terminal process is the [`InputEndpoint::Terminal`](judge::InputEndpoint::Terminal) on the shell's fd 0 (`/dev/pts/N`). A
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
//! interest list and one fd link per fd watched for reading, at most [`MAX_WATCHED`](readiness::MAX_WATCHED)). The
//! members come from [`super::sessions`]' shared pass over `/proc`. Checks run on the blocking
//! pool ([`check_off_runtime`]). The answers given to `read`, `ps` and `exec` come from
//! [`super::live_facts`], which reuses each for 100 ms and skips processes younger than 250 ms;
//! [`until_waiting`] checks afresh every [`CHECK_EVERY`] while an `exec` or a `wait(for_input)`
//! waits, and only then. A background start (an `exec` whose yield is under
//! [`EXEC_FIRST_CHECK`]) is not checked at all.
//!
//! # Where things are
//! [`proc_text`] parses the `/proc` text; [`judge`] holds the rules (one process, then a tree)
//! over a [`judge::ProcessView`]; [`readiness`] decodes rule 3's readiness waits; `linux` reads
//! a live process from `/proc`; this module schedules the checks off the runtime.

pub mod judge;
#[cfg(target_os = "linux")]
mod linux;
pub mod proc_text;
pub mod readiness;
#[cfg(all(test, target_os = "linux"))]
mod sample_process;

use std::time::Duration;

use super::tree::Identity;

/// How long an `exec` lets the command run before the first check: most commands have not
/// reached a prompt (or have finished) by then.
pub const EXEC_FIRST_CHECK: Duration = Duration::from_millis(75);
/// The interval between checks, and so the confirmation delay: a process must be found waiting
/// on two checks in a row, so a transient read (a program between two chunks of piped input) is
/// not taken for a prompt.
pub const CHECK_EVERY: Duration = Duration::from_millis(150);

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
