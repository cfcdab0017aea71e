//! Duplicate starts (README, "Tools": `exec`; docs/DECISIONS.md, "Duplicate starts"): an `exec`
//! identical to one still running in the same project returns that process, `reused`, instead
//! of starting a second copy.
//!
//! Agents re-run a command that yielded when they lose track of it (after a context reset, or
//! simply forgetting the id): a dev server started twice fails on its port, a second `sleep 600`
//! is a leak, and other agents' logs show a dozen copies of one command. The MCP `exec` tool
//! asks for reuse (`ExecRequest.reuse_running`); `yieldctl exec` does not (a person means what
//! they type), nor do the profiles' job tools (each call is a new job by contract).
//!
//! Identical means the same command line, resolved working directory, `name`, terminal mode and
//! environment overlay (the `env` parameter, not the session's environment: two agents of one
//! project share their dev server), and the same sandbox grant. A [`TwinKey`] digests all but
//! the grant (compared as it is) into 32 bytes, which a process keeps in its facts and record —
//! overlay values may be secrets, so the record keeps the digest, never the values — so a
//! process re-adopted by a later daemon is found too. A request that writes `stdin`, closes it,
//! or chooses its own process id neither reuses nor is reused: its input is meant for a new
//! process, and a chosen id names a new one.
//!
//! Two identical `exec`s at once must not both start: [`TwinStarts`] holds a lock per key from
//! the look for a twin until the new process is registered, so the second finds the first.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::path_bytes;

/// What makes two `exec`s the same command (all but the sandbox grant): a SHA-256 digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TwinKey([u8; 32]);

impl TwinKey {
    /// The key of a command line run in `cwd` (resolved) with this `name`, terminal mode and
    /// environment overlay. The overlay is taken as the shell sees it: a later entry of a name
    /// wins, and order does not matter.
    pub fn of(command: &[u8], cwd: &Path, name: &str, tty: bool, overlay: &[pb::EnvVar]) -> Self {
        let mut vars: HashMap<&[u8], &[u8]> = HashMap::with_capacity(overlay.len());
        for var in overlay {
            vars.insert(&var.name, &var.value);
        }
        let mut vars: Vec<_> = vars.into_iter().collect();
        vars.sort_unstable();
        let mut h = Sha256::new();
        // Every field is length-prefixed, so no two different requests feed the same bytes.
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(b"yieldshell exec twin 1");
        field(command);
        field(&path_bytes(cwd));
        field(name.as_bytes());
        field(&[u8::from(tty)]);
        field(&(vars.len() as u64).to_le_bytes());
        for (name, value) in vars {
            field(name);
            field(value);
        }
        TwinKey(h.finalize().into())
    }

    /// The hex form a record keeps.
    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads [`TwinKey::to_hex`]'s form; `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(TwinKey(key))
    }
}

/// Whether a request starts a process an identical later `exec` may reuse: nothing in it is
/// meant for a new process only (input to write or close, a chosen id). Such a process keeps
/// its key whoever started it (`yieldctl exec` too), so an agent's `exec` finds it; whether
/// the request itself looks for a twin is its `reuse_running`.
pub fn has_twin_key(req: &pb::ExecRequest) -> bool {
    req.stdin.as_ref().is_none_or(Vec::is_empty)
        && !req.close_stdin
        && req.process_id.as_deref().is_none_or(str::is_empty)
}

/// Locks per [`TwinKey`], held from the look for a twin until the new process is registered.
#[derive(Debug, Clone, Default)]
pub struct TwinStarts {
    locks: Arc<Mutex<HashMap<TwinKey, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A held [`TwinStarts`] lock; dropping it lets the next identical `exec` look.
#[derive(Debug)]
pub struct TwinGuard {
    key: TwinKey,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
    locks: Arc<Mutex<HashMap<TwinKey, Arc<tokio::sync::Mutex<()>>>>>,
}

impl TwinStarts {
    /// Waits until no other `exec` of `key` is between its look and its registration.
    pub async fn lock(&self, key: TwinKey) -> TwinGuard {
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone();
        TwinGuard {
            key,
            held: Some(lock.lock_owned().await),
            locks: self.locks.clone(),
        }
    }

    /// Keys with a lock entry (held or awaited): none once every start is done.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.locks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for TwinGuard {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // Only the map's own reference left: nobody holds or awaits this key's lock.
        if locks
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, value: &str) -> pb::EnvVar {
        pb::EnvVar {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn the_key_covers_every_field_and_reads_the_overlay_as_the_shell_does() {
        let cwd = Path::new("/p");
        let base = TwinKey::of(b"npm run dev", cwd, "", false, &[]);
        assert_eq!(base, TwinKey::of(b"npm run dev", cwd, "", false, &[]));
        for other in [
            TwinKey::of(b"npm run dev ", cwd, "", false, &[]),
            TwinKey::of(b"npm run dev", Path::new("/p/sub"), "", false, &[]),
            TwinKey::of(b"npm run dev", cwd, "web", false, &[]),
            TwinKey::of(b"npm run dev", cwd, "", true, &[]),
            TwinKey::of(b"npm run dev", cwd, "", false, &[var("PORT", "1")]),
            // Field boundaries count: moving bytes from one field to the next is another key.
            TwinKey::of(b"npm run de", Path::new("v/p"), "", false, &[]),
        ] {
            assert_ne!(base, other);
        }
        let a = TwinKey::of(b"x", cwd, "", false, &[var("A", "1"), var("B", "2")]);
        let b = TwinKey::of(
            b"x",
            cwd,
            "",
            false,
            &[var("B", "2"), var("A", "0"), var("A", "1")],
        );
        assert_eq!(
            a, b,
            "order is irrelevant and the later entry of a name wins"
        );
        assert_ne!(
            a,
            TwinKey::of(b"x", cwd, "", false, &[var("A", "1"), var("B", "3")])
        );
    }

    #[test]
    fn the_hex_form_round_trips_and_refuses_anything_else() {
        let key = TwinKey::of(b"make", Path::new("/p"), "", false, &[]);
        assert_eq!(TwinKey::from_hex(&key.to_hex()), Some(key));
        for bad in ["", "00", &"g".repeat(64), &"é".repeat(32), &"0".repeat(66)] {
            assert_eq!(TwinKey::from_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn input_or_a_chosen_id_is_for_a_new_process() {
        let reuse = pb::ExecRequest::default();
        assert!(has_twin_key(&reuse));
        for other in [
            pb::ExecRequest {
                stdin: Some(b"y\n".to_vec()),
                ..reuse.clone()
            },
            pb::ExecRequest {
                close_stdin: true,
                ..reuse.clone()
            },
            pb::ExecRequest {
                process_id: Some("0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b".into()),
                ..reuse.clone()
            },
        ] {
            assert!(!has_twin_key(&other), "{other:?}");
        }
    }

    #[tokio::test]
    async fn a_second_start_of_a_key_waits_for_the_first_and_the_entry_goes_with_the_last() {
        let starts = TwinStarts::default();
        let key = TwinKey::of(b"sleep 600", Path::new("/p"), "", false, &[]);
        let other = TwinKey::of(b"sleep 601", Path::new("/p"), "", false, &[]);
        let first = starts.lock(key).await;
        // Another key is not held up.
        drop(starts.lock(other).await);
        // Polled once: still pending while the first holds the key.
        tokio::select! {
            biased;
            _ = starts.lock(key) => panic!("a second start of the key went ahead of the first"),
            () = std::future::ready(()) => {}
        }
        assert_eq!(
            starts.entries(),
            1,
            "the abandoned wait left nothing behind"
        );
        drop(first);
        let second = starts.lock(key).await;
        assert_eq!(starts.entries(), 1, "held by the second");
        drop(second);
        assert_eq!(starts.entries(), 0);
    }
}
