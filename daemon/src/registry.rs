//! The registry maps process ids to their shared handles.
//!
//! It only maps: every process-level decision lives in the process's actor. It is a `std` mutex
//! held for map operations only, never across an `.await`. Entries are added after a successful
//! spawn and removed only by cleanup or retention, never implicitly. Running counts (the limits)
//! are kept apart, in [`crate::limits`], by the processes themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::process::ManagedProcess;

/// All known processes, running or ended.
#[derive(Debug, Default)]
pub struct Registry {
    procs: Mutex<HashMap<String, Arc<ManagedProcess>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ManagedProcess>>> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a process.
    pub fn insert(&self, p: Arc<ManagedProcess>) {
        self.lock().insert(p.facts.id.clone(), p);
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
        self.lock().remove(id)
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
