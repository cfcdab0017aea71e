//! Fault injection for reliability tests, inert unless the daemon is started with
//! `YIELDSHELL_TEST_FAULTS` in its own environment.
//!
//! `YIELDSHELL_TEST_FAULTS=actor_panic:<marker>` makes the actor of any command containing
//! `<marker>` panic right after the spawn, so tests can prove that a supervisor bug never leaves
//! a process unsupervised (RELIABILITY F17). Clients cannot set it: the daemon reads only its own
//! environment, once.

use std::sync::OnceLock;

/// Variable holding the fault specification.
pub const ENV_TEST_FAULTS: &str = "YIELDSHELL_TEST_FAULTS";

fn actor_panic_marker() -> Option<&'static [u8]> {
    static MARKER: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    MARKER
        .get_or_init(|| {
            let spec = std::env::var(ENV_TEST_FAULTS).ok()?;
            let marker = spec.strip_prefix("actor_panic:")?;
            (!marker.is_empty()).then(|| marker.as_bytes().to_vec())
        })
        .as_deref()
}

/// Whether the actor of `command` must panic (only under fault injection).
pub fn actor_should_panic(command: &[u8]) -> bool {
    actor_panic_marker().is_some_and(|m| command.windows(m.len()).any(|w| w == m))
}
