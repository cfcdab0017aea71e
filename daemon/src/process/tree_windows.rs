//! Windows: a managed process's tree is its Job Object ([`super::job`]), mounted as `tree` so
//! the actor, its stops and the daemon's shutdown sweep are the same code as on Unix.
//!
//! Containment, as implemented: the shell (`cmd.exe`) is started suspended, put in a Job Object
//! of its own with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, then resumed, so everything it starts
//! is in the job from its first instruction (breakaway is not allowed). "Signals" map to what
//! Windows has for a process without a console of the client's: every stop signal terminates the
//! whole job at once (`TerminateJobObject`), so the grace before SIGKILL does not apply; SIGCONT
//! is a no-op. The daemon holds each job's only handle: if the daemon dies, Windows closes it and
//! kills the tree, so no process outlives its daemon (there are no holders on Windows).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::job::Job;
pub use super::tree_ops::{Identity, KILL_GIVE_UP, ProcessTree, freeze_tree, off_runtime};

pub use crate::spawn::MARKER_VAR;

/// The Unix signal names clients send to `stop`, so requests and answers read the same on every
/// platform. Windows delivers none of them: see the module doc for what each does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Hang-up.
    SIGHUP,
    /// Interrupt.
    SIGINT,
    /// Quit.
    SIGQUIT,
    /// Kill.
    SIGKILL,
    /// User signal 1.
    SIGUSR1,
    /// User signal 2.
    SIGUSR2,
    /// Terminate.
    SIGTERM,
    /// Continue (a no-op here).
    SIGCONT,
}

/// The Linux numbers, as clients may send them (`stop --signal 9`).
const NUMBERED: [(i32, Signal); 8] = [
    (1, Signal::SIGHUP),
    (2, Signal::SIGINT),
    (3, Signal::SIGQUIT),
    (9, Signal::SIGKILL),
    (10, Signal::SIGUSR1),
    (12, Signal::SIGUSR2),
    (15, Signal::SIGTERM),
    (18, Signal::SIGCONT),
];

impl Signal {
    /// The `SIGTERM`-style name.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::SIGHUP => "SIGHUP",
            Signal::SIGINT => "SIGINT",
            Signal::SIGQUIT => "SIGQUIT",
            Signal::SIGKILL => "SIGKILL",
            Signal::SIGUSR1 => "SIGUSR1",
            Signal::SIGUSR2 => "SIGUSR2",
            Signal::SIGTERM => "SIGTERM",
            Signal::SIGCONT => "SIGCONT",
        }
    }
}

impl TryFrom<i32> for Signal {
    type Error = ();

    fn try_from(n: i32) -> Result<Signal, ()> {
        NUMBERED
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, s)| *s)
            .ok_or(())
    }
}

/// Parses a signal name with or without the `SIG` prefix (`TERM`, `SIGTERM`, `sigkill`) or a
/// number.
pub fn parse_signal(name: &str) -> Option<Signal> {
    let trimmed = name.trim();
    if let Ok(n) = trimmed.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let upper = trimmed.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    NUMBERED
        .iter()
        .map(|(_, s)| *s)
        .find(|s| &s.as_str()[3..] == bare)
}

/// How the daemon contains a process's tree here (`Status.containment`).
pub fn containment_name() -> &'static str {
    "job-object"
}

/// A pid alone says nothing verifiable after a restart (no start time is recorded here), and
/// every process of an earlier daemon ended with it (its jobs were closed): nothing is known.
pub fn identify(_pid: i32) -> Option<Identity> {
    None
}

/// The live jobs by process id, for the shutdown sweep and the watchdog, which know processes
/// by id only. Weak: the actor's [`JobTree`] owns each job, and dropping the last handle closes
/// the job (killing what is left, which by then is nothing).
static JOBS: Mutex<Option<HashMap<String, Weak<Job>>>> = Mutex::new(None);

fn jobs() -> std::sync::MutexGuard<'static, Option<HashMap<String, Weak<Job>>>> {
    JOBS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes the job of `process_id` reachable by [`stop_all`].
pub fn register(process_id: &str, job: &Arc<Job>) {
    let mut jobs = jobs();
    let map = jobs.get_or_insert_with(HashMap::new);
    map.retain(|_, j| j.strong_count() > 0);
    map.insert(process_id.to_string(), Arc::downgrade(job));
}

/// Terminates the jobs of `process_ids` (daemon shutdown, a panicked actor's watchdog). The
/// grace does not apply: Windows has no SIGTERM to give first. `_leaders` (the shells leading
/// Unix process groups) and `_holders` have no meaning here.
pub fn stop_all(
    _leaders: &[Identity],
    _holders: &[Identity],
    process_ids: &[String],
    _grace: std::time::Duration,
) {
    let found: Vec<Arc<Job>> = {
        let jobs = jobs();
        let Some(map) = jobs.as_ref() else {
            return;
        };
        process_ids
            .iter()
            .filter_map(|id| map.get(id)?.upgrade())
            .collect()
    };
    for job in found {
        job.terminate();
    }
}

/// The tree of one process: its Job Object.
#[derive(Debug, Clone)]
pub struct JobTree {
    job: Arc<Job>,
}

impl JobTree {
    /// The tree contained by `job`.
    pub fn new(job: Arc<Job>) -> JobTree {
        JobTree { job }
    }
}

impl ProcessTree for JobTree {
    /// Whether the job has a live process; any signal but SIGCONT terminates the job.
    fn signal_group(&self, _pgid: i32, signal: Option<Signal>) -> bool {
        let alive = self.job.active_processes() > 0;
        if alive && signal.is_some_and(|s| s != Signal::SIGCONT) {
            self.job.terminate();
        }
        alive
    }

    /// Nothing is outside the job: there are never members to signal one by one.
    fn signal_members(&self, _members: &[Identity], _signal: Signal) {}

    /// A job is terminated whole, at once: nothing in it can fork meanwhile.
    fn pause(&self, _pgid: i32, _members: &[Identity]) {}

    fn is_alive(&self, id: Identity) -> bool {
        self.job
            .pids()
            .iter()
            .any(|p| i64::from(*p) == i64::from(id.pid))
    }

    fn find_tree(&self, _pgid: i32, _process_id: &str) -> Vec<Identity> {
        self.job
            .pids()
            .into_iter()
            .map(|pid| Identity {
                pid: i32::try_from(pid).unwrap_or(i32::MAX),
                start_time: 0,
            })
            .collect()
    }

    fn split_tree(&self, pgid: i32, process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
        (self.find_tree(pgid, process_id), Vec::new())
    }

    /// No process leaves its job.
    fn find_escapees(&self, _process_id: &str) -> Vec<Identity> {
        Vec::new()
    }
}
