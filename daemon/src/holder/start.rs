//! Starting holders: the daemon spawns each holder (or the zygote that forks them,
//! [`super::zygote`]) as this very binary in its holder mode, or as the small
//! [`HOLDER_BINARY`] installed beside it, in a new session with its connection as descriptor 3
//! ([`super::HOLDER_FD`]) and no environment, through the daemon's reaper (a holder is the
//! daemon's child until the daemon exits).

use std::io;

#[cfg(target_os = "linux")]
use crate::sandbox::plan::Kernel;
use crate::spawn::reaper::Reaper;

/// Starts a holder (`yieldshelld hold`, this very binary) in a new session, with `sock` as its
/// descriptor 3 and no environment, through the reaper (a holder is the daemon's child until
/// the daemon exits). Returns its pid.
#[cfg(target_os = "linux")]
pub fn spawn_holder(reaper: &Reaper, sock: &impl std::os::fd::AsRawFd) -> io::Result<i32> {
    spawn_holder_binary(reaper, sock, super::HOLD_ARG)
}

/// Starts the holder zygote (`crate::holder::zygote`): the holder binary in its zygote mode,
/// started like a holder. Returns its pid.
#[cfg(target_os = "linux")]
pub fn spawn_zygote(reaper: &Reaper, sock: &impl std::os::fd::AsRawFd) -> io::Result<i32> {
    spawn_holder_binary(reaper, sock, super::zygote::ZYGOTE_ARG)
}

#[cfg(target_os = "linux")]
fn spawn_holder_binary(
    reaper: &Reaper,
    sock: &impl std::os::fd::AsRawFd,
    mode: &str,
) -> io::Result<i32> {
    // The small holder binary when it was installed beside the daemon, else this binary in its
    // holder mode. Either way through a descriptor or /proc/self/exe, which stay the files this
    // daemon started with even after an upgrade replaced them on disk: a daemon's holders are
    // always its own version.
    let (program, name) = match holder_program() {
        Some(fd) => (format!("/proc/self/fd/{fd}"), HOLDER_BINARY),
        None => ("/proc/self/exe".to_string(), "yieldshelld"),
    };
    let program = crate::spawn::cstring(program.into_bytes(), "program")?;
    let argv = [
        crate::spawn::cstring(name.as_bytes().to_vec(), "program name")?,
        crate::spawn::cstring(mode.as_bytes().to_vec(), "argument")?,
    ];
    // No environment, but the tests' fault injection (`crate::faults`).
    let envp = crate::faults::holder_env();
    let (pid, _exit) = reaper.spawn_with(|| {
        let pid = crate::spawn::posix_spawn_session(
            &program,
            &argv,
            &envp,
            None,
            &[(sock.as_raw_fd(), super::HOLDER_FD)],
            None,
        )?;
        Ok((pid, pid))
    })?;
    // The holder's end is detected through its socket, not its exit status: a new daemon is
    // not its parent and has only the socket.
    Ok(pid)
}

/// The holder's own binary, installed beside `yieldshelld` (`cargo install` installs both): it
/// links only what a holder runs, so its relocated data — the one part of a binary every
/// process has its own copy of — is a tenth of the daemon's (ARCHITECTURE.md, "Who owns what": at most 512 KiB PSS
/// per held process).
pub const HOLDER_BINARY: &str = "yieldshell-holder";

/// A close-on-exec descriptor of [`HOLDER_BINARY`] beside the running daemon, opened once (the
/// daemon calls this at startup); `None` when it is not there.
#[cfg(target_os = "linux")]
pub fn holder_program() -> Option<i32> {
    use std::os::fd::{AsRawFd, OwnedFd};
    static PROGRAM: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let exe = std::fs::read_link("/proc/self/exe").ok()?;
            let path = exe.parent()?.join(HOLDER_BINARY);
            // std opens close-on-exec: the descriptor reaches no process, only the path
            // /proc/self/fd/N that a spawn resolves before its exec closes it.
            let file = std::fs::File::open(&path).ok()?;
            tracing::info!(holder = %path.display(), "holders run the holder binary");
            Some(OwnedFd::from(file))
        })
        .as_ref()
        .map(AsRawFd::as_raw_fd)
}

/// Starts a holder (`yieldshelld hold`, this very binary) in a new session with `sock` as its
/// descriptor 3, through the reaper. Returns its pid.
#[cfg(not(target_os = "linux"))]
pub fn spawn_holder(reaper: &Reaper, sock: &impl std::os::fd::AsRawFd) -> io::Result<i32> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg(super::HOLD_ARG).env_clear();
    // No environment, but the tests' fault injection (`crate::faults`).
    if let Some(faults) = std::env::var_os(crate::faults::ENV_TEST_FAULTS) {
        cmd.env(crate::faults::ENV_TEST_FAULTS, faults);
    }
    let fd = sock.as_raw_fd();
    // SAFETY: dup2 and setsid are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setsid()?;
            if libc::dup2(fd, super::HOLDER_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (child, _exit) = reaper.spawn(&mut cmd)?;
    Ok(child.id() as i32)
}

/// Runs the probe once for the daemon's life and returns its answer (`Kernel::namespaces`
/// false, with the reason logged, when the probe could not run). Blocking: call it off the
/// runtime's workers.
#[cfg(target_os = "linux")]
pub fn sandbox_kernel(reaper: &std::sync::Arc<Reaper>) -> Kernel {
    static FOUND: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let landlock_abi = crate::sandbox::probe::landlock_abi();
        let namespaces = if crate::faults::namespaces_refused() {
            tracing::warn!("sandbox: namespaces refused by fault injection (tests only)");
            false
        } else {
            match run_probe(reaper) {
                Ok(answer) if answer.trim() == "namespaces ok" => true,
                Ok(answer) => {
                    tracing::warn!(
                        "sandbox: {} — .git cannot be kept read-only, and the network is \
                         held back by seccomp and Landlock alone",
                        answer.trim()
                    );
                    false
                }
                Err(e) => {
                    tracing::warn!("sandbox: the namespace probe did not run: {e}");
                    false
                }
            }
        };
        tracing::info!(landlock_abi, namespaces, "sandbox: what the kernel offers");
        Kernel {
            landlock_abi,
            namespaces,
            seatbelt: false,
        }
    })
}

#[cfg(target_os = "linux")]
fn run_probe(reaper: &std::sync::Arc<Reaper>) -> std::io::Result<String> {
    let program = match holder_program() {
        Some(fd) => format!("/proc/self/fd/{fd}"),
        None => "/proc/self/exe".to_string(),
    };
    let mut cmd = std::process::Command::new(program);
    cmd.arg(crate::sandbox::probe::PROBE_ARG)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let (mut child, exit) = reaper.spawn(&mut cmd)?;
    let mut answer = String::new();
    if let Some(mut out) = child.stdout.take() {
        use std::io::Read;
        out.read_to_string(&mut answer)?;
    }
    // The reaper collects the exit status; the answer is the line it printed.
    drop(exit);
    Ok(answer)
}
