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
//! Clients cannot set it: the daemon reads only its own environment, once.

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
