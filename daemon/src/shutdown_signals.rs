//! Shutdown signals (SIGTERM, SIGINT, SIGUSR1) that arrive while the daemon sets up its
//! listeners for them are not lost.
//!
//! tokio installs its handler for a signal before it subscribes the new listener, and a signal
//! its driver sees while no listener is subscribed is dropped. A SIGTERM in that instant was
//! swallowed: the default action (exit) no longer applied, and nothing shut down — a stop sent
//! right as the socket appeared (a service manager's, or `reliability_security::s1`'s) then
//! waited for ever on a daemon that seemed to ignore SIGTERM. [`note`] installs, before tokio's,
//! a handler that only records the signal; tokio's chains to it (signal-hook-registry calls the
//! handler it replaced), so [`take`] tells whether one came before the listeners could hear it.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// SIGTERM or SIGINT seen since [`note`].
static STOP: AtomicBool = AtomicBool::new(false);
/// SIGUSR1 seen since [`note`].
static DETACH: AtomicBool = AtomicBool::new(false);

/// The shutdown signals that arrived since [`note`] (and since the last [`take`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// SIGTERM or SIGINT: stop every managed process and exit.
    pub stop: bool,
    /// SIGUSR1: exit leaving the processes to their holders.
    pub detach: bool,
}

extern "C" fn record(signal: libc::c_int) {
    // Async-signal-safe: one atomic store.
    if signal == libc::SIGUSR1 {
        DETACH.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Starts recording SIGTERM, SIGINT and SIGUSR1. Call it before tokio listens for them; where
/// a signal already has a handler (tokio's, from an earlier call) it is left alone, since
/// replacing it would cut tokio off.
pub fn note() -> nix::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(record),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGUSR1] {
        // SAFETY: `record` only stores to atomics (async-signal-safe); the old action is
        // restored at once when it was not the default.
        let old = unsafe { sigaction(signal, &action) }?;
        if !matches!(old.handler(), SigHandler::SigDfl) {
            // SAFETY: as above; `old` is the action that was installed.
            unsafe { sigaction(signal, &old) }?;
        }
    }
    Ok(())
}

/// What arrived since [`note`] or the last call, clearing it.
pub fn take() -> Seen {
    Seen {
        stop: STOP.swap(false, Ordering::SeqCst),
        detach: DETACH.swap(false, Ordering::SeqCst),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::raise;
    use tokio::signal::unix::{SignalKind, signal};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// The daemon's sequence with the window held open: the recording handler, then tokio's
    /// handler for SIGTERM with no listener subscribed, a SIGTERM that tokio's driver drops for
    /// want of one — and still the handlers the daemon then sets up shut it down.
    #[tokio::test(flavor = "current_thread")]
    async fn a_sigterm_before_the_listeners_are_subscribed_still_shuts_the_daemon_down() {
        note().expect("note");
        drop(signal(SignalKind::terminate()).expect("tokio's SIGTERM handler"));
        let mut marker = signal(SignalKind::user_defined2()).expect("SIGUSR2 listener");
        raise(Signal::SIGTERM).expect("raise SIGTERM");
        raise(Signal::SIGUSR2).expect("raise SIGUSR2");
        // The driver broadcasts every pending signal at once: once SIGUSR2 is heard, SIGTERM
        // has gone to no listener.
        marker.recv().await;

        let (shutdown, detach) = (CancellationToken::new(), CancellationToken::new());
        crate::spawn_signal_handlers(shutdown.clone(), detach.clone()).expect("handlers");
        tokio::time::timeout(Duration::from_secs(30), shutdown.cancelled())
            .await
            .expect("the SIGTERM that came before the listeners shut the daemon down");
        assert!(!detach.is_cancelled(), "SIGTERM stops the processes");
    }
}
