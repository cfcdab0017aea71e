//! Fault injection for reliability tests, inert unless the daemon is started with
//! `YIELDSHELL_TEST_FAULTS` in its own environment.
//!
//! The variable holds comma-separated `kind:<marker>` items; each applies to the commands that
//! contain `<marker>`:
//! - `actor_panic:<marker>`: the actor panics right after the spawn, so tests can prove that a
//!   supervisor bug never leaves a process unsupervised (RELIABILITY F17);
//! - `spawn_delay:<marker>`: `exec` pauses for [`SPAWN_DELAY`] between writing the `starting`
//!   record and spawning, so a test can kill its client inside that window (RELIABILITY F3).
//! - `launch_abort:<marker>`: `exec` gives the spec to the idle holder but not to its launcher,
//!   and closes the launcher's socket, as a daemon that died between the two writes does.
//!
//! One item is not about commands: `spare_prepare_fails:<n>` makes the first `n` preparations of
//! idle holders in spare directories fail, as a full disk or a holder killed in its prepare
//! window would ([`spare_prepare_should_fail`]).
//!
//! And `sandbox_namespaces:refused` makes the sandbox act as if the kernel refused user
//! namespaces (as Ubuntu's AppArmor restriction does): Landlock and seccomp still enforce for
//! real, only the namespaces are not used ([`namespaces_refused`]).
//!
//! `holder_protocol:<n>` makes the daemon read every holder's `Hello` as protocol `n` (a
//! holder of a newer release, after a downgrade), to test that such a holder is refused by name
//! and left running ([`holder_protocol_seen`]).
//!
//! Two items are about a holder that its own command stops before it could greet
//! (`kill -STOP $PPID` as the command's first word wins that race on some machines):
//! - `holder_greets_when_continued:<marker>`: a holder that spawns the shell of such a command
//!   itself greets only once it has been stopped and continued ([`ContinueGate`]), so the
//!   command always wins the race;
//! - `holder_left_stopped:<marker>`: the daemon does not continue the stopped holder of such a
//!   command while it waits for its greeting ([`holder_left_stopped`]), so the start fails.
//!
//! Clients cannot set it: the daemon reads only its own environment, once, and passes it on to
//! the holders it starts (which otherwise get no environment).

use std::sync::OnceLock;
use std::time::Duration;

/// Variable holding the fault specification.
pub const ENV_TEST_FAULTS: &str = "YIELDSHELL_TEST_FAULTS";

/// How long `spawn_delay` pauses.
pub const SPAWN_DELAY: Duration = Duration::from_secs(1);

/// The `(kind, marker)` items of the specification.
fn faults() -> &'static [(String, Vec<u8>)] {
    static FAULTS: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    FAULTS.get_or_init(|| {
        let spec = std::env::var(ENV_TEST_FAULTS).unwrap_or_default();
        spec.split(',')
            .filter_map(|item| {
                let (kind, marker) = item.split_once(':')?;
                (!marker.is_empty()).then(|| (kind.to_string(), marker.as_bytes().to_vec()))
            })
            .collect()
    })
}

fn injected(kind: &str, command: &[u8]) -> bool {
    faults()
        .iter()
        .any(|(k, m)| k == kind && command.windows(m.len()).any(|w| w == m.as_slice()))
}

/// Whether this preparation of an idle holder must fail (under `spare_prepare_fails:<n>`, the
/// first `n` do).
pub fn spare_prepare_should_fail() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREPARED: AtomicU64 = AtomicU64::new(0);
    let Some(n) = faults()
        .iter()
        .find(|(k, _)| k == "spare_prepare_fails")
        .and_then(|(_, m)| std::str::from_utf8(m).ok()?.parse::<u64>().ok())
    else {
        return false;
    };
    PREPARED.fetch_add(1, Ordering::Relaxed) < n
}

/// Whether `exec` must leave the launcher of `command` without its spec (`launch_abort`).
pub fn launch_should_abort(command: &[u8]) -> bool {
    injected("launch_abort", command)
}

/// Whether the actor of `command` must panic (only under fault injection).
pub fn actor_should_panic(command: &[u8]) -> bool {
    injected("actor_panic", command)
}

/// Pauses the start of `command` under `spawn_delay` fault injection. The start is a task of its
/// own, so the delay holds up this exec alone, as a slow spawn would.
pub async fn delay_spawn(command: &[u8]) {
    if injected("spawn_delay", command) {
        tokio::time::sleep(SPAWN_DELAY).await;
    }
}

/// Whether the sandbox must act as if this kernel refused unprivileged user namespaces
/// (`sandbox_namespaces:refused`).
pub fn namespaces_refused() -> bool {
    faults()
        .iter()
        .any(|(k, m)| k == "sandbox_namespaces" && m == b"refused")
}

/// The holder protocol the daemon takes a `Hello` of `protocol` to be: `protocol`, or `n` under
/// `holder_protocol:<n>`.
pub fn holder_protocol_seen(protocol: u32) -> u32 {
    faults()
        .iter()
        .find(|(k, _)| k == "holder_protocol")
        .and_then(|(_, m)| std::str::from_utf8(m).ok()?.parse().ok())
        .unwrap_or(protocol)
}

/// The environment of a holder (or the zygote) the daemon starts: the fault specification, if
/// the daemon has one, and nothing else.
#[cfg(target_os = "linux")]
pub fn holder_env() -> Vec<std::ffi::CString> {
    std::env::var(ENV_TEST_FAULTS)
        .ok()
        .and_then(|spec| std::ffi::CString::new(format!("{ENV_TEST_FAULTS}={spec}")).ok())
        .into_iter()
        .collect()
}

/// Whether the daemon must leave the stopped holder of `command` stopped while it waits for
/// its greeting (`holder_left_stopped`).
pub fn holder_left_stopped(command: &[u8]) -> bool {
    injected("holder_left_stopped", command)
}

/// How long a holder under `holder_greets_when_continued` waits to be stopped and continued.
#[cfg(target_os = "linux")]
const CONTINUE_WAIT: Duration = Duration::from_secs(60);

/// In a holder, under `holder_greets_when_continued:<marker>`: SIGCONT is blocked from before the
/// shell is spawned (the shell gets an empty mask) until [`ContinueGate::wait`] has seen one, so
/// a stop and continue that come at any moment in between are seen.
#[cfg(target_os = "linux")]
pub struct ContinueGate(bool);

#[cfg(target_os = "linux")]
impl ContinueGate {
    /// Closes the gate for the shell of `command`, which this holder `spawns` itself (a
    /// launcher's holder greeted while idle), when the fault applies to it.
    pub fn close(spawns: bool, command: &[u8]) -> ContinueGate {
        let applies = spawns && injected("holder_greets_when_continued", command);
        if applies {
            let _ = Self::mask(nix::sys::signal::SigmaskHow::SIG_BLOCK);
        }
        ContinueGate(applies)
    }

    /// Waits (at most [`CONTINUE_WAIT`]) for this holder to have been continued, then lets
    /// SIGCONT through again.
    pub fn wait(self) {
        if !self.0 {
            return;
        }
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGCONT);
        let timeout = libc::timespec {
            tv_sec: CONTINUE_WAIT.as_secs() as libc::time_t,
            tv_nsec: 0,
        };
        // SAFETY: a valid signal set and timeout, and a null info pointer (not wanted).
        unsafe {
            libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout);
        }
        let _ = Self::mask(nix::sys::signal::SigmaskHow::SIG_UNBLOCK);
    }

    fn mask(how: nix::sys::signal::SigmaskHow) -> nix::Result<()> {
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGCONT);
        nix::sys::signal::sigprocmask(how, Some(&set), None)
    }
}
