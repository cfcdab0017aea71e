//! Starting a shell (`/bin/sh -c COMMAND`): in a new session (own process group, no
//! controlling terminal), in the resolved cwd, with exactly the given environment plus the
//! `YIELDSHELL_PROCESS_ID` marker. stdin/stdout/stderr are pipes (or a terminal's slave, see
//! [`super::pty`]); no other descriptor survives `exec` (everything is opened close-on-exec);
//! the signal mask is empty and every disposition is the default.
//!
//! On Linux this is `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`), with
//! `POSIX_SPAWN_SETSID`, an empty mask and every signal reset to its default. Unlike `fork`, this
//! copies no page tables and leaves the caller's other threads no copy-on-write faults to take,
//! which is a good part of `exec`'s latency. Elsewhere it falls back to `fork` + `pre_exec`. The
//! holder is the caller (`crate::holder`), and it starts itself the same way
//! (`crate::holder::start`).

#[cfg(target_os = "linux")]
use std::ffi::CString;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::MARKER_VAR;

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
    /// A program (and its arguments) that runs `/bin/sh -c …` in its place: macOS's
    /// `sandbox-exec -p PROFILE` for a sandboxed command. Empty on Linux, whose sandbox the
    /// shell's own process enters before `exec`.
    pub wrapper: Vec<OsString>,
}

/// Bigger pipes mean fewer wake-ups per megabyte for chatty processes (Linux only; best effort).
#[cfg(target_os = "linux")]
pub(crate) fn enlarge_pipe(fd: &impl std::os::fd::AsRawFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; failure (e.g. above the user's limit) is harmless.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
    }
}

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
        // The kernel's struct sigaction, read back to find SIG_IGN (handler value 1).
        let mut old = [0u64; 4];
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
                set_default_disposition(sig);
            }
        }
    }
}

/// Sets signal `sig` to its default disposition with the raw `rt_sigaction` syscall, which also
/// reaches the two real-time signals glibc reserves (32, 33) and refuses through `sigaction`.
/// Async-signal-safe (a forked child may call it).
#[cfg(target_os = "linux")]
pub(crate) fn set_default_disposition(sig: libc::c_int) {
    // An all-zero kernel struct sigaction is SIG_DFL with no flags and an empty mask, whatever
    // the architecture; 8 is the kernel's sigset size.
    let default = [0u64; 4];
    // SAFETY: a valid buffer of the kernel's struct size; the old action is not asked for.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            default.as_ptr(),
            std::ptr::null_mut::<u8>(),
            8usize,
        );
    }
}

/// A started shell: its pid and the daemon-side ends of its pipes.
pub struct Shell {
    /// The shell's pid.
    pub pid: i32,
    /// Write end of its stdin.
    pub stdin: OwnedFd,
    /// Read end of its stdout.
    pub stdout: OwnedFd,
    /// Read end of its stderr.
    pub stderr: OwnedFd,
}

#[cfg(target_os = "linux")]
pub(crate) fn cstring(b: Vec<u8>, what: &str) -> io::Result<CString> {
    CString::new(b).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

/// `sh -c COMMAND`'s argv, envp (with the process marker) and working directory.
#[cfg(target_os = "linux")]
pub fn shell_strings(spec: &SpawnSpec) -> io::Result<([CString; 4], Vec<CString>, CString)> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    let argv = [
        cstring(b"/bin/sh".to_vec(), "program")?,
        cstring(b"-c".to_vec(), "argument")?,
        // The end of sh's options: a command that starts with `-` is a command, not an option.
        cstring(b"--".to_vec(), "argument")?,
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
    Ok((argv, envp, cwd))
}

/// Starts `sh -c COMMAND` on the terminal whose slave is `slave` (ARCHITECTURE.md, "Terminal processes"): in a new session
/// whose controlling terminal it is, as fds 0, 1 and 2. Returns the shell's pid (the caller, the
/// holder, reaps it). The slave is opened by the spawn itself, after its `setsid`: a session
/// leader without a terminal that opens one (no `O_NOCTTY`) acquires it on Linux, which glibc's
/// `posix_spawn` has no `TIOCSCTTY` action for; the caller never holds the slave open, so the
/// master reads EIO once the last process of the terminal has closed it.
#[cfg(target_os = "linux")]
pub fn spawn_shell_on_terminal(spec: &SpawnSpec, slave: &std::path::Path) -> io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let (argv, envp, cwd) = shell_strings(spec)?;
    let slave = cstring(slave.as_os_str().as_bytes().to_vec(), "terminal path")?;
    posix_spawn_session(
        &argv[0],
        &argv,
        &envp,
        Some(&slave),
        &[(0, 1), (0, 2)],
        Some(&cwd),
    )
}

/// Terminal mode needs `posix_spawn`'s Linux semantics (see the Linux version).
#[cfg(not(target_os = "linux"))]
pub fn spawn_shell_on_terminal(_spec: &SpawnSpec, _slave: &std::path::Path) -> io::Result<i32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "terminal mode (tty=true) is only supported on Linux",
    ))
}

/// Starts `sh -c COMMAND` (the caller reaps it: the holder, whose child it is).
#[cfg(target_os = "linux")]
pub fn spawn_shell(spec: &SpawnSpec) -> io::Result<Shell> {
    use std::os::fd::AsRawFd;
    let (argv, envp, cwd) = shell_strings(spec)?;
    // Close-on-exec pipes: the child gets them only as its 0, 1 and 2 (dup2 clears the flag).
    let (stdin_r, stdin_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (stdout_r, stdout_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (stderr_r, stderr_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let pid = posix_spawn_session(
        &argv[0],
        &argv,
        &envp,
        None,
        &[
            (stdin_r.as_raw_fd(), 0),
            (stdout_w.as_raw_fd(), 1),
            (stderr_w.as_raw_fd(), 2),
        ],
        Some(&cwd),
    )?;
    drop((stdin_r, stdout_w, stderr_w));
    enlarge_pipe(&stdout_r);
    enlarge_pipe(&stderr_r);
    Ok(Shell {
        pid,
        stdin: stdin_w,
        stdout: stdout_r,
        stderr: stderr_r,
    })
}

/// `posix_spawn` of `program` in a new session, with an empty signal mask, every signal at its
/// default, `terminal` (when given) opened read-write as fd 0 after the `setsid` (so it becomes
/// the controlling terminal), then `dups` (`from → to`) applied and, when given, `cwd` as
/// working directory.
#[cfg(target_os = "linux")]
pub(crate) fn posix_spawn_session(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    terminal: Option<&CString>,
    dups: &[(i32, i32)],
    cwd: Option<&CString>,
) -> io::Result<i32> {
    let mut argv_ptrs: Vec<*mut libc::c_char> =
        argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut envp_ptrs: Vec<*mut libc::c_char> =
        envp.iter().map(|e| e.as_ptr().cast_mut()).collect();
    envp_ptrs.push(std::ptr::null_mut());
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
        // glibc runs the file actions after POSIX_SPAWN_SETSID, so this open makes the terminal
        // the new session's controlling terminal.
        if let Some(path) = terminal {
            check(libc::posix_spawn_file_actions_addopen(
                actions,
                0,
                path.as_ptr(),
                libc::O_RDWR,
                0,
            ))?;
        }
        for (from, to) in dups {
            check(libc::posix_spawn_file_actions_adddup2(actions, *from, *to))?;
        }
        // Without the chdir action (glibc before 2.29), the caller changes its own directory
        // around the spawn; see `InDirectory`.
        let mut moved = None;
        if let Some(cwd) = cwd {
            match chdir_action() {
                Some(addchdir) => check(addchdir(actions, cwd.as_ptr()))?,
                None => moved = Some(InDirectory::enter(cwd)?),
            }
        }
        let mut pid: libc::pid_t = 0;
        let spawned = check(libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            actions,
            attr,
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        ));
        if let Some(moved) = moved {
            moved.leave()?;
        }
        spawned?;
        Ok(pid)
    }
}

/// glibc's `posix_spawn_file_actions_addchdir_np`.
#[cfg(target_os = "linux")]
type AddChdir =
    unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, *const libc::c_char) -> libc::c_int;

/// `posix_spawn_file_actions_addchdir_np` if this glibc has it (2.29 and newer), looked up at
/// run time rather than linked: the release binaries link against glibc 2.28 (manylinux_2_28),
/// where it is missing and a spawn with a working directory takes [`InDirectory`] instead.
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

/// The chdir spawn action to use: [`addchdir_np`], unless a test forces the fallback.
#[cfg(target_os = "linux")]
fn chdir_action() -> Option<AddChdir> {
    #[cfg(test)]
    if tests::FORCE_NO_CHDIR_ACTION.load(std::sync::atomic::Ordering::SeqCst) {
        return None;
    }
    addchdir_np()
}

/// The process's working directory moved to a spawn's `cwd` for the length of the spawn, for a
/// glibc without the chdir spawn action. The working directory is per process, so this is only
/// sound in a single-threaded caller: the holder, the only caller that passes a `cwd`
/// (`spawn_shell`), runs one thread.
#[cfg(target_os = "linux")]
struct InDirectory(OwnedFd);

#[cfg(target_os = "linux")]
impl InDirectory {
    fn enter(cwd: &CString) -> io::Result<InDirectory> {
        use nix::fcntl::{OFlag, open};
        let here = open(
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        nix::unistd::chdir(cwd.as_c_str())?;
        Ok(InDirectory(here))
    }

    fn leave(self) -> io::Result<()> {
        nix::unistd::fchdir(&self.0)?;
        Ok(())
    }
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

/// Starts `sh -c COMMAND` (the caller reaps it: the holder, whose child it is).
#[cfg(not(target_os = "linux"))]
pub fn spawn_shell(spec: &SpawnSpec) -> io::Result<Shell> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut cmd = match spec.wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg("/bin/sh");
            c
        }
        None => Command::new("/bin/sh"),
    };
    cmd.arg("-c")
        .arg("--")
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
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let take = |o: Option<OwnedFd>| o.ok_or_else(|| io::Error::other("missing pipe"));
    let stdin = take(child.stdin.take().map(OwnedFd::from))?;
    let stdout = take(child.stdout.take().map(OwnedFd::from))?;
    let stderr = take(child.stderr.take().map(OwnedFd::from))?;
    // `child` is dropped without waiting: std never reaps on drop, the holder does.
    Ok(Shell {
        pid,
        stdin,
        stdout,
        stderr,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Makes spawns take the glibc 2.28 path ([`InDirectory`]) in this process.
    pub(super) static FORCE_NO_CHDIR_ACTION: AtomicBool = AtomicBool::new(false);

    /// Set in the re-executed test binary, where the test takes the fallback alone.
    const CHILD_VAR: &str = "YIELDSHELL_TEST_SPAWN_FALLBACK_CHILD";

    /// This glibc (2.29 or newer) has the chdir spawn action: the run-time lookup must find it,
    /// or every spawn with a working directory would take the fallback.
    #[test]
    fn the_spawn_chdir_action_is_found_at_run_time() {
        assert!(addchdir_np().is_some());
    }

    /// The glibc 2.28 fallback moves the process's own directory, which only a single-threaded
    /// process may do: the test runs again, alone, in a child of its own.
    #[test]
    fn without_the_chdir_action_the_shell_still_starts_in_its_directory() {
        crate::test_child::in_own_process(
            "spawn::shell::tests::without_the_chdir_action_the_shell_still_starts_in_its_directory",
            CHILD_VAR,
            "fallback ok",
            fallback,
        );
    }

    /// The spawn through the fallback, in the test's own process.
    fn fallback() {
        FORCE_NO_CHDIR_ACTION.store(true, Ordering::SeqCst);
        let before = std::env::current_dir().expect("cwd");
        let target = std::env::temp_dir().canonicalize().expect("temp dir");
        let shell = spawn_shell(&SpawnSpec {
            command: b"pwd".to_vec(),
            cwd: target.clone(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            process_id: "proc_fallback".into(),
            wrapper: Vec::new(),
        })
        .expect("spawn");
        drop(shell.stdin);
        let mut out = String::new();
        std::fs::File::from(shell.stdout)
            .read_to_string(&mut out)
            .expect("read stdout");
        assert_eq!(out.trim_end(), target.to_str().expect("utf-8 temp dir"));
        assert_eq!(
            std::env::current_dir().expect("cwd"),
            before,
            "cwd restored"
        );
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(shell.pid), None);
        println!("fallback ok");
    }
}
