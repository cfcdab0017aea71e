//! Building and starting a managed command (DESIGN §4 "Spawn").
//!
//! `/bin/sh -c COMMAND` in a new session (own process group, no controlling terminal), in the
//! resolved cwd, with exactly the session's environment plus the overlay and the
//! `YIELDSHELL_PROCESS_ID` marker. stdin/stdout/stderr are pipes; no other descriptor survives
//! `exec`; the signal mask is empty and every disposition is the default, whatever the daemon
//! inherited or installed.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::reaper::{ExitHow, Reaper};
use super::tree::{self, Identity, MARKER_VAR};

/// What to run.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The command line given to `sh -c`.
    pub command: Vec<u8>,
    /// Resolved working directory.
    pub cwd: PathBuf,
    /// The complete environment (session environment plus overlay).
    pub env: Vec<(OsString, OsString)>,
    /// Becomes `YIELDSHELL_PROCESS_ID`.
    pub process_id: String,
}

/// A started process and its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// Pid, and start time for identity checks.
    pub identity: Identity,
    /// Write end of its stdin.
    pub stdin: pipe::Sender,
    /// Read end of its stdout.
    pub stdout: pipe::Receiver,
    /// Read end of its stderr.
    pub stderr: pipe::Receiver,
    /// Resolves when the reaper collects its exit status.
    pub exit: oneshot::Receiver<ExitHow>,
}

/// Bigger pipes mean fewer wake-ups per megabyte for chatty processes (Linux only; best effort).
#[cfg(target_os = "linux")]
fn enlarge_pipe(fd: &impl std::os::fd::AsRawFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; failure (e.g. above the user's limit) is harmless.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
    }
}

#[cfg(not(target_os = "linux"))]
fn enlarge_pipe(_fd: &impl std::os::fd::AsRawFd) {}

/// Sets every signal's disposition back to the default.
///
/// On Linux this uses the raw `rt_sigaction` syscall: glibc's `sigaction` refuses the two
/// real-time signals it reserves (32, 33), yet an inherited "ignore" on them survives `exec`
/// (seen under test harnesses). An all-zero kernel `sigaction` is `SIG_DFL` with no flags and an
/// empty mask, whatever the architecture's field order.
fn reset_signal_dispositions() {
    #[cfg(target_os = "linux")]
    for sig in 1..=64 {
        let zeroed = [0u64; 4];
        // SAFETY: the kernel reads a `struct sigaction` (at most 32 bytes) from a valid buffer;
        // a null old-action pointer is allowed; 8 is the kernel's sigset size. SIGKILL/SIGSTOP
        // fail with EINVAL, which is ignored.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                zeroed.as_ptr(),
                std::ptr::null_mut::<u8>(),
                8usize,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    // SAFETY: a zeroed sigaction with SIG_DFL is a valid argument; invalid signal numbers fail
    // with EINVAL, which is ignored.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..32 {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
}

/// Resets the child's signal state and descriptor table between fork and exec.
///
/// Must only call async-signal-safe functions: `rt_sigaction`/`sigaction`, `sigprocmask`,
/// `setsid` and the `close_range` syscall are.
fn prepare_child() -> io::Result<()> {
    nix::unistd::setsid()?;
    reset_signal_dispositions();
    // SAFETY: sigemptyset/sigprocmask on a local, zero-initialised set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    #[cfg(target_os = "linux")]
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets close-on-exec on fds >= 3 (it does
    // not close std's exec-error pipe, which must stay open until exec). Older kernels return
    // ENOSYS; the daemon opens everything close-on-exec anyway, so that is only a second guard.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    Ok(())
}

/// Starts the command through the reaper.
pub fn spawn(reaper: &Reaper, spec: &SpawnSpec) -> io::Result<Spawned> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(std::ffi::OsStr::from_bytes(&spec.command))
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(MARKER_VAR, &spec.process_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: `prepare_child` only makes async-signal-safe calls (see its doc).
    unsafe {
        cmd.pre_exec(prepare_child);
    }
    let (mut child, exit) = reaper.spawn(&mut cmd)?;
    let pid = child.id() as i32;
    // Read the start time right away; the shell cannot have exited *and* been reaped yet unless
    // it was extremely quick, in which case identity falls back to the pid alone.
    let identity = tree::identify(pid).unwrap_or(Identity { pid, start_time: 0 });
    let take = |o: Option<OwnedFd>| o.ok_or_else(|| io::Error::other("missing pipe"));
    let stdin = take(child.stdin.take().map(OwnedFd::from))?;
    let stdout = take(child.stdout.take().map(OwnedFd::from))?;
    let stderr = take(child.stderr.take().map(OwnedFd::from))?;
    enlarge_pipe(&stdout);
    enlarge_pipe(&stderr);
    // `child` is dropped without waiting: std never reaps on drop, the reaper does.
    Ok(Spawned {
        identity,
        stdin: pipe::Sender::from_owned_fd(stdin)?,
        stdout: pipe::Receiver::from_owned_fd(stdout)?,
        stderr: pipe::Receiver::from_owned_fd(stderr)?,
        exit,
    })
}
