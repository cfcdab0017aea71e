//! Running-process limits: how many processes run, in total and per session, kept up to date by
//! the processes themselves so that `exec`'s limit checks cost O(1), never a walk over every
//! record. A process holds a [`RunningSlot`] while it runs and gives it back when it leaves
//! `running` (or is dropped), so no path can leak a count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
