//! The registry maps process ids to their shared handles.
//!
//! It only maps: every process-level decision lives in the process's actor. It is a `std` mutex
//! held for map operations only, never across an `.await`. Entries are added after a successful
//! spawn and removed only by cleanup or retention, never implicitly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::process::ManagedProcess;

/// How many processes are running, in total and per session. Kept up to date by the processes
/// themselves (a [`RunningSlot`] each), so limit checks on `exec` cost O(1), not a walk over
/// every record.
#[derive(Debug, Default)]
pub struct RunningCounts {
    per_session: Mutex<HashMap<String, usize>>,
}

impl RunningCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.per_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Running processes in total and for `session_id`.
    pub fn get(&self, session_id: &str) -> (usize, usize) {
        let map = self.lock();
        (
            map.values().sum(),
            map.get(session_id).copied().unwrap_or(0),
        )
    }

    /// Counts a new running process; the slot gives it back when released or dropped.
    pub fn take(self: &Arc<Self>, session_id: &str) -> RunningSlot {
        *self.lock().entry(session_id.to_string()).or_insert(0) += 1;
        RunningSlot {
            counts: self.clone(),
            session_id: session_id.to_string(),
        }
    }

    fn give_back(&self, session_id: &str) {
        let mut map = self.lock();
        if let Some(n) = map.get_mut(session_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(session_id);
            }
        }
    }
}

/// One running process's place in [`RunningCounts`].
#[derive(Debug)]
pub struct RunningSlot {
    counts: Arc<RunningCounts>,
    session_id: String,
}

impl Drop for RunningSlot {
    fn drop(&mut self) {
        self.counts.give_back(&self.session_id);
    }
}

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
        self.lock().insert(p.id.clone(), p);
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
