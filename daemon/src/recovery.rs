//! Startup recovery: loading the records a previous daemon left, re-adopting the processes
//! whose holders still run, and making sure nothing else of a previous daemon keeps running
//! unsupervised (README, "How it fits together"; ARCHITECTURE.md, "Who owns what").
//!
//! A record still marked `starting`/`running` means the previous daemon did not stop its
//! process. Then, in order:
//! 1. its holder answers on `<process dir>/holder.sock`: the process is re-adopted — an actor
//!    is launched on the holder's link, the ring is rebuilt from the spool (which the holder
//!    wrote while no daemon ran) and output continues at the holder's `next_seq`;
//! 2. no holder, but it left an exit file: the process ended while no daemon ran, and is
//!    recorded with its real exit code or signal;
//! 3. neither: the holder died too. The process tree is found by the process group of the
//!    recorded shell — only if the shell's pid *and* start time still match, so a recycled pid
//!    is never signalled — and by the `YIELDSHELL_PROCESS_ID` marker, which is unique to that
//!    process. The tree gets SIGTERM, then SIGKILL, and the record becomes `lost`
//!    (`holder_died`, `daemon_crash` for a record of a daemon without holders, or
//!    `identity_mismatch` when the pid now belongs to another process). Spooled output stays
//!    readable.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::Daemon;
use crate::output::OutputLog;
#[cfg(unix)]
use crate::process::ProcessFacts;
#[cfg(unix)]
use crate::process::actor::{self, ActorContext};
use crate::process::tree::{self, Identity};
use crate::process::{End, EndStatus, Life, LostReason, ManagedProcess, ProcState, RecordStatus};
use crate::record::ProcessRecord;
use crate::status::from_unix_ms;

/// Ring size for restored processes (the seed default; sessions cannot be consulted any more).
const RESTORED_RING_BYTES: usize = 262_144;
/// Grace between SIGTERM and SIGKILL for leftovers.
const LEFTOVER_GRACE: Duration = Duration::from_millis(500);

struct Leftover {
    process_id: String,
    /// The shell whose group may be signalled.
    leader: Option<Identity>,
}

/// Loads every record into the registry; stops leftovers of a crashed daemon. Returns how many
/// records were marked lost.
pub fn recover(daemon: &Arc<Daemon>) -> usize {
    let mut leftovers = Vec::new();
    #[cfg_attr(windows, allow(unused_mut))]
    let mut adopted = 0usize;
    for record in daemon.store.load_all() {
        let mut record = record;
        let mut state = ProcState::from_record(&record);
        #[cfg(unix)]
        let dir = daemon.store.dir(&record.process_id);
        // Windows has no holders: a process of an earlier daemon ended with it (its job closed).
        #[cfg(unix)]
        if state.life == Life::Running {
            match crate::holder::link::attach(&dir) {
                Ok(held) => match adopt(daemon, &record, held) {
                    Ok(()) => {
                        adopted += 1;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(process_id = %record.process_id, "re-adopting failed: {e}");
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                    // A newer release's holder (a downgrade): left alone, running, its output
                    // readable; its record untouched, for a daemon that speaks its protocol.
                    tracing::warn!(process_id = %record.process_id, "not re-adopted: {e}");
                    state.life = Life::LeftToNewerHolder;
                    let output = Arc::new(OutputLog::restore(
                        RESTORED_RING_BYTES,
                        &daemon.store.dir(&record.process_id),
                    ));
                    daemon
                        .registry
                        .insert(Arc::new(ManagedProcess::restored(&record, state, output)));
                    continue;
                }
                Err(e)
                    if e.kind() != std::io::ErrorKind::NotFound
                        && e.kind() != std::io::ErrorKind::ConnectionRefused =>
                {
                    tracing::warn!(process_id = %record.process_id, "its holder did not answer: {e}");
                }
                Err(_) => {}
            }
        }
        #[cfg(unix)]
        if state.life == Life::Running
            && let Some(note) = crate::holder::link::exit_file(&dir)
        {
            // Ended while no daemon ran: its holder wrote how, then exited with nothing left.
            tracing::info!(process_id = %record.process_id, "process ended while no daemon ran");
            state.end_with(
                End {
                    status: EndStatus::Completed,
                    exit: Some(note.how),
                    at: from_unix_ms(note.ended_at_ms),
                    duration: Duration::from_millis(
                        u64::try_from(note.ended_at_ms - record.started_at_ms).unwrap_or(0),
                    ),
                },
                true,
            );
            record = ProcessFacts::from_record(&record).record(&state);
            if let Err(e) = daemon.store.save_now(&record) {
                tracing::warn!(process_id = %record.process_id, "updating record failed: {e}");
            }
        }
        if state.life == Life::Running {
            #[cfg_attr(windows, allow(unused_mut))]
            let (mut reason, leader) = classify(&record);
            #[cfg(unix)]
            if reason == LostReason::DaemonCrash && dir.join(crate::holder::SOCKET_NAME).exists() {
                reason = LostReason::HolderDied;
            }
            tracing::warn!(process_id = %record.process_id, reason = reason.as_str(), "process left running by a previous daemon; stopping it");
            let now = SystemTime::now();
            let duration = now
                .duration_since(from_unix_ms(record.started_at_ms))
                .unwrap_or_default();
            state.end_with(
                End {
                    status: EndStatus::Lost(reason),
                    exit: None,
                    at: now,
                    duration,
                },
                true,
            );
            record.status = RecordStatus::Lost;
            record.lost_reason = Some(reason);
            record.ended_at_ms = Some(crate::status::unix_ms(now));
            record.duration_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(0));
            if let Err(e) = daemon.store.save_now(&record) {
                tracing::warn!(process_id = %record.process_id, "updating record failed: {e}");
            }
            leftovers.push(Leftover {
                process_id: record.process_id.clone(),
                leader,
            });
        }
        let output = Arc::new(OutputLog::restore(
            RESTORED_RING_BYTES,
            &daemon.store.dir(&record.process_id),
        ));
        daemon
            .registry
            .insert(Arc::new(ManagedProcess::restored(&record, state, output)));
    }
    // A directory without a record: the previous daemon crashed between creating it and writing
    // the record (or the record was corrupt). The process may be running: find it by its marker,
    // stop it, and keep a minimal `lost` record so `ps` shows what happened.
    for id in daemon.store.dirs_without_record() {
        let dir = daemon.store.dir(&id);
        let started = std::fs::metadata(&dir)
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| SystemTime::now());
        let record = ProcessRecord {
            sandbox: None,
            twin: None,
            timeout_at_ms: None,
            format: crate::record::RECORD_FORMAT,
            process_id: id.clone(),
            session_id: String::new(),
            name: String::new(),
            command: crate::record::RecordBytes::Text(String::new()),
            cwd: crate::record::RecordBytes::Text(String::new()),
            status: RecordStatus::Lost,
            pid: None,
            start_time: None,
            exit_code: None,
            signal: None,
            started_at_ms: crate::status::unix_ms(started),
            ended_at_ms: Some(crate::status::unix_ms(SystemTime::now())),
            duration_ms: None,
            ended_by: None,
            lost_reason: Some(LostReason::RecordMissing),
            tty: false,
        };
        tracing::warn!(process_id = %id, "process directory without a record; stopping whatever carries its marker");
        if let Err(e) = daemon.store.save_now(&record) {
            tracing::warn!(process_id = %id, "writing record failed: {e}");
        }
        let output = Arc::new(OutputLog::restore(RESTORED_RING_BYTES, &dir));
        daemon.registry.insert(Arc::new(ManagedProcess::restored(
            &record,
            ProcState::from_record(&record),
            output,
        )));
        leftovers.push(Leftover {
            process_id: id,
            leader: None,
        });
    }
    let lost = leftovers.len();
    stop_leftovers(&leftovers);
    if adopted > 0 {
        tracing::info!(adopted, "re-adopted processes from their holders");
    }
    lost
}

/// Re-adopts the process of `record` from its live holder: an actor on the holder's link, the
/// output log rebuilt from the spool and continued at the holder's `next_seq`.
#[cfg(unix)]
fn adopt(
    daemon: &Arc<Daemon>,
    record: &ProcessRecord,
    held: crate::holder::link::Held,
) -> std::io::Result<()> {
    let dir = daemon.store.dir(&record.process_id);
    let output = Arc::new(OutputLog::adopted(
        RESTORED_RING_BYTES,
        &dir,
        held.hello.next_seq,
        held.hello.dropped,
    ));
    // Its holder gives its secrets back (protocol 3): the terminal's rendering is redacted.
    let facts = Arc::new(ProcessFacts {
        redactor: crate::policy::redact::Redactor::from_pairs(held.hello.redact.0.clone()),
        ..ProcessFacts::from_record(record)
    });
    let ctx = ActorContext {
        timing: daemon.config.file.timing(),
        store: daemon.store.clone(),
        shutdown: daemon.shutdown.clone(),
        detach: daemon.detach.clone(),
        reaper: daemon.reaper.clone(),
    };
    let slot = daemon.running.take(&record.session_id);
    tracing::info!(process_id = %record.process_id, pid = held.hello.shell_pid, holder = held.holder.pid, next_seq = held.hello.next_seq, "re-adopted");
    // The `exec`'s timeout is the same deadline as under the daemon that started it (counted
    // from the recorded start): one that passed while no daemon ran fires at once.
    let timeout = facts.timeout;
    let mut held = held;
    let listener = held.listener.take();
    let (proc, handle) = actor::launch(facts, slot, held, output, timeout, ctx)?;
    // A sandboxed command's allowlist proxy, on the listener its holder kept.
    if let Some(listener) = listener {
        crate::process::launch::serve_proxy(&proc, listener);
    }
    daemon.store.save(&proc.record());
    daemon.registry.insert(proc.clone());
    daemon.track_actor(proc, handle);
    Ok(())
}

/// Why a leftover is lost, and the shell whose process group may be signalled (only when the
/// recorded shell is verifiably the same process).
fn classify(r: &ProcessRecord) -> (LostReason, Option<Identity>) {
    let Some(pid) = r.pid else {
        return (LostReason::DaemonCrash, None);
    };
    match tree::identify(pid) {
        Some(now) if r.start_time.is_some_and(|t| t == now.start_time) => {
            (LostReason::DaemonCrash, Some(now))
        }
        Some(_) => (LostReason::IdentityMismatch, None),
        None => (LostReason::DaemonCrash, None),
    }
}

fn stop_leftovers(leftovers: &[Leftover]) {
    if leftovers.is_empty() {
        return;
    }
    // One /proc scan per round for all leftovers: after a crash with a thousand processes,
    // per-process sweeps would delay the new daemon's start by minutes.
    let leaders: Vec<Identity> = leftovers.iter().filter_map(|l| l.leader).collect();
    let ids: Vec<String> = leftovers.iter().map(|l| l.process_id.clone()).collect();
    // Their holders are gone (a live one is re-adopted instead): the marker and the groups
    // whose leaders still match are what is left to find them by.
    tree::stop_all(&leaders, &[], &ids, LEFTOVER_GRACE);
}
