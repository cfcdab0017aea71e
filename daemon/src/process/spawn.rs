//! Building and starting a managed command (DESIGN §4 "Spawn").
//!
//! `/bin/sh -c COMMAND` in a new session (own process group, no controlling terminal), in the
//! resolved cwd, with exactly the session's environment plus the overlay and the
//! `YIELDSHELL_PROCESS_ID` marker. stdin/stdout/stderr are pipes; no other descriptor survives
//! `exec` (the daemon opens everything close-on-exec); the signal mask is empty and every
//! disposition is the default.
//!
//! On Linux the child is started with `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`), with
//! `POSIX_SPAWN_SETSID`, an empty mask and every signal reset to its default. Unlike `fork`, this
//! copies no page tables and leaves the daemon's other threads no copy-on-write faults to take,
//! which is a good part of `exec`'s latency. Elsewhere it falls back to `fork` + `pre_exec`.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

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

/// Resets, in the daemon itself and once at startup, every signal it inherited as *ignored* to
/// its default (except SIGPIPE, which the daemon must keep ignoring to see EPIPE as an error).
///
/// Ignored dispositions survive `exec`, so without this a managed process would inherit, say, a
/// SIGHUP ignored by `nohup` or a real-time signal ignored by a test harness. On Linux this uses
/// the raw `rt_sigaction` syscall, because glibc's `sigaction` refuses the two real-time signals
/// it reserves (32, 33). Call before any thread exists.
pub fn reset_inherited_ignores() {
    #[cfg(target_os = "linux")]
    for sig in 1..=64 {
        if sig == libc::SIGPIPE || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // The kernel's struct sigaction, read back to find SIG_IGN (handler value 1); an all-zero
        // struct is SIG_DFL with no flags and an empty mask, whatever the architecture.
        let mut old = [0u64; 4];
        let zeroed = [0u64; 4];
        // SAFETY: valid buffers of the kernel's struct size; 8 is the kernel's sigset size.
        unsafe {
            let got = libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<u8>(),
                old.as_mut_ptr(),
                8usize,
            );
            if got == 0 && old[0] == libc::SIG_IGN as u64 {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    zeroed.as_ptr(),
                    std::ptr::null_mut::<u8>(),
                    8usize,
                );
            }
        }
    }
}

/// Starts the command through the reaper.
pub fn spawn(reaper: &Reaper, spec: &SpawnSpec) -> io::Result<Spawned> {
    let (pid, stdin, stdout, stderr, exit) = start(reaper, spec)?;
    // Read the start time right away; a shell that already exited and was reaped leaves the pid
    // alone as its identity.
    let identity = tree::identify(pid).unwrap_or(Identity { pid, start_time: 0 });
    enlarge_pipe(&stdout);
    enlarge_pipe(&stderr);
    let pipes = (|| {
        Ok::<_, io::Error>((
            pipe::Sender::from_owned_fd(stdin)?,
            pipe::Receiver::from_owned_fd(stdout)?,
            pipe::Receiver::from_owned_fd(stderr)?,
        ))
    })();
    match pipes {
        Ok((stdin, stdout, stderr)) => Ok(Spawned {
            identity,
            stdin,
            stdout,
            stderr,
            exit,
        }),
        Err(e) => {
            // Never leave a process running that nobody supervises.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            Err(e)
        }
    }
}

type Started = (i32, OwnedFd, OwnedFd, OwnedFd, oneshot::Receiver<ExitHow>);

/// glibc's `posix_spawn_file_actions_addchdir_np`.
#[cfg(target_os = "linux")]
type AddChdir =
    unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, *const libc::c_char) -> libc::c_int;

/// `posix_spawn_file_actions_addchdir_np` if this glibc has it (2.29 and newer), looked up at
/// run time rather than linked: the release binaries link against glibc 2.28 (manylinux_2_28),
/// where it is missing and [`start`] falls back to `fork`. Rust's std does the same.
#[cfg(target_os = "linux")]
fn addchdir_np() -> Option<AddChdir> {
    static FOUND: std::sync::OnceLock<Option<AddChdir>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads; a non-null
        // result is this function, whose C signature is `AddChdir`.
        unsafe {
            let f = libc::dlsym(
                libc::RTLD_DEFAULT,
                c"posix_spawn_file_actions_addchdir_np".as_ptr(),
            );
            (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, AddChdir>(f))
        }
    })
}

#[cfg(target_os = "linux")]
fn start(reaper: &Reaper, spec: &SpawnSpec) -> io::Result<Started> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    let Some(addchdir) = addchdir_np() else {
        return start_forked(reaper, spec);
    };

    let cstring = |b: Vec<u8>, what: &str| {
        CString::new(b).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte"),
            )
        })
    };
    let argv = [
        cstring(b"/bin/sh".to_vec(), "program")?,
        cstring(b"-c".to_vec(), "argument")?,
        cstring(spec.command.clone(), "command")?,
    ];
    let mut envp = Vec::with_capacity(spec.env.len() + 1);
    for (k, v) in &spec.env {
        if k.as_bytes() == MARKER_VAR.as_bytes() {
            continue;
        }
        let mut kv = k.clone().into_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(cstring(kv, "environment")?);
    }
    envp.push(cstring(
        format!("{MARKER_VAR}={}", spec.process_id).into_bytes(),
        "process id",
    )?);
    let cwd = cstring(
        spec.cwd.as_os_str().as_bytes().to_vec(),
        "working directory",
    )?;
    let mut argv_ptrs: Vec<*mut libc::c_char> =
        argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut envp_ptrs: Vec<*mut libc::c_char> =
        envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envp_ptrs.push(std::ptr::null_mut());

    // Close-on-exec pipes: the child gets them only as its 0, 1 and 2 (dup2 clears the flag).
    let (stdin_r, stdin_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (stdout_r, stdout_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (stderr_r, stderr_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;

    let (pid, exit) = reaper.spawn_with(|| {
        // SAFETY: the attribute and file-action objects are initialised before use and destroyed
        // on every path (their Drop); every pointer passed to posix_spawn points into CStrings
        // and vectors that outlive the call; argv and envp are NULL-terminated.
        unsafe {
            let mut attr = SpawnAttr::new()?;
            let attr = &mut *attr.0;
            let mut actions = FileActions::new()?;
            let actions = &mut *actions.0;
            let flags = libc::POSIX_SPAWN_SETSID as libc::c_short
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
            check(libc::posix_spawnattr_setflags(attr, flags))?;
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            // glibc's sigfillset leaves out the two real-time signals it reserves (32, 33), and
            // its spawn child sets those to SIG_IGN unless they are in this set — an ignore that
            // would survive exec into every managed process. Add them by setting their bits
            // directly (sigaddset refuses them); the child then sets them to SIG_DFL, which is
            // safe there: all signals stay blocked until exec.
            // Bit n-1 is signal n in glibc's array of longs; read as one little-endian u64 the
            // first 64 signals have those positions on 32- and 64-bit targets alike.
            #[cfg(target_endian = "little")]
            {
                let words = (&mut all as *mut libc::sigset_t).cast::<u64>();
                *words |= (1u64 << 31) | (1u64 << 32);
            }
            check(libc::posix_spawnattr_setsigdefault(attr, &all))?;
            check(libc::posix_spawn_file_actions_adddup2(
                actions,
                stdin_r.as_raw_fd(),
                0,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(
                actions,
                stdout_w.as_raw_fd(),
                1,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(
                actions,
                stderr_w.as_raw_fd(),
                2,
            ))?;
            check(addchdir(actions, cwd.as_ptr()))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                argv[0].as_ptr(),
                actions,
                attr,
                argv_ptrs.as_ptr(),
                envp_ptrs.as_ptr(),
            ))?;
            Ok((pid, pid))
        }
    })?;
    drop((stdin_r, stdout_w, stderr_w));
    Ok((pid, stdin_w, stdout_r, stderr_r, exit))
}

#[cfg(target_os = "linux")]
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// An initialised `posix_spawnattr_t`, boxed so it never moves, destroyed on drop.
#[cfg(target_os = "linux")]
struct SpawnAttr(Box<libc::posix_spawnattr_t>);

#[cfg(target_os = "linux")]
impl SpawnAttr {
    fn new() -> io::Result<SpawnAttr> {
        // SAFETY: a zeroed attribute object is valid storage for posix_spawnattr_init.
        let mut a = Box::new(unsafe { std::mem::zeroed::<libc::posix_spawnattr_t>() });
        // SAFETY: initialising storage we own.
        check(unsafe { libc::posix_spawnattr_init(&mut *a) })?;
        Ok(SpawnAttr(a))
    }
}

#[cfg(target_os = "linux")]
impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawnattr_destroy(&mut *self.0);
        }
    }
}

/// An initialised `posix_spawn_file_actions_t`, boxed so it never moves, destroyed on drop.
#[cfg(target_os = "linux")]
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

#[cfg(target_os = "linux")]
impl FileActions {
    fn new() -> io::Result<FileActions> {
        // SAFETY: zeroed storage is valid input for posix_spawn_file_actions_init.
        let mut a = Box::new(unsafe { std::mem::zeroed::<libc::posix_spawn_file_actions_t>() });
        // SAFETY: initialising storage we own.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *a) })?;
        Ok(FileActions(a))
    }
}

#[cfg(target_os = "linux")]
impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut *self.0);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn start(reaper: &Reaper, spec: &SpawnSpec) -> io::Result<Started> {
    start_forked(reaper, spec)
}

/// `fork` + `exec` through std: the path where `posix_spawn` cannot chdir (not Linux, or a
/// glibc older than 2.29).
fn start_forked(reaper: &Reaper, spec: &SpawnSpec) -> io::Result<Started> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
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
    // SAFETY: the closure calls only setsid(2) and sigprocmask(2), both async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let (mut child, exit) = reaper.spawn(&mut cmd)?;
    let pid = child.id() as i32;
    let take = |o: Option<OwnedFd>| o.ok_or_else(|| io::Error::other("missing pipe"));
    let stdin = take(child.stdin.take().map(OwnedFd::from))?;
    let stdout = take(child.stdout.take().map(OwnedFd::from))?;
    let stderr = take(child.stderr.take().map(OwnedFd::from))?;
    // `child` is dropped without waiting: std never reaps on drop, the reaper does.
    Ok((pid, stdin, stdout, stderr, exit))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;

    /// This glibc (2.29 or newer) has `posix_spawn_file_actions_addchdir_np`: the run-time
    /// lookup must find it, or every spawn would silently take the slower `fork` path.
    #[test]
    fn the_spawn_chdir_action_is_found_at_run_time() {
        assert!(addchdir_np().is_some());
    }

    /// What a command started by `how` prints about its cwd, environment and stdin.
    async fn observed(how: fn(&Reaper, &SpawnSpec) -> io::Result<Started>) -> String {
        let reaper = Reaper::start().expect("reaper");
        let spec = SpawnSpec {
            command: b"pwd; echo \"$YIELDSHELL_PROCESS_ID $ONLY\"; cat".to_vec(),
            cwd: std::env::temp_dir(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("ONLY".into(), "this".into()),
            ],
            process_id: "proc_fallback".into(),
        };
        let (_pid, stdin, stdout, _stderr, _exit) = how(&reaper, &spec).expect("spawn");
        drop(stdin); // `cat` sees end of input at once
        // Read to the end (the command has exited) rather than await `_exit`: the other tests'
        // reapers in this process wait for any child and may collect this one.
        let mut out = String::new();
        std::fs::File::from(stdout)
            .read_to_string(&mut out)
            .expect("read stdout");
        out
    }

    /// The `fork` fallback (glibc 2.28 takes it) starts commands as `posix_spawn` does.
    #[tokio::test]
    async fn the_fork_fallback_starts_the_same_command_the_same_way() {
        let expected = format!("{}\nproc_fallback this\n", std::env::temp_dir().display());
        assert_eq!(observed(start).await, expected);
        assert_eq!(observed(start_forked).await, expected);
    }
}
