//! The registry maps process ids to their shared handles.
//!
//! It only maps: every process-level decision lives in the process's actor. It is a `std` mutex
//! held for map operations only, never across an `.await`. Entries are added after a successful
//! spawn and removed only by cleanup or retention, never implicitly. Running counts (the limits)
//! are kept apart, in [`crate::limits`], by the processes themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::process::ManagedProcess;

/// All known processes, running or ended.
#[derive(Debug)]
pub struct Registry {
    procs: Mutex<HashMap<String, Arc<ManagedProcess>>>,
    /// Counts inserts and removals, so a live viewer (`Watch`) shows a new process at once
    /// instead of at its next look.
    changes: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            procs: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ManagedProcess>>> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a process.
    pub fn insert(&self, p: Arc<ManagedProcess>) {
        self.lock().insert(p.facts.id.clone(), p);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Wakes on every insert and removal.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Looks a process up.
    pub fn get(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        self.lock().get(id).cloned()
    }

    /// Whether an id is taken.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Removes a process.
    pub fn remove(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        let removed = self.lock().remove(id);
        if removed.is_some() {
            self.changes.send_modify(|n| *n += 1);
        }
        removed
    }

    /// A snapshot of every process.
    pub fn all(&self) -> Vec<Arc<ManagedProcess>> {
        self.lock().values().cloned().collect()
    }

    /// Number of records.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}
