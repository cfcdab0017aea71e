//! The state every handler and task shares ([`Daemon`]), and what keeps it bounded over time:
//! retention of ended records, release of cold output, expiry of idle sessions, and the
//! watchdog that never leaves a process unsupervised when its actor panics.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::DaemonConfig;
use crate::heap;
use crate::limits::RunningCounts;
use crate::process;
use crate::record::RecordStore;
use crate::registry::Registry;
use crate::session::Sessions;
#[cfg(unix)]
use crate::spawn::reaper::Reaper;

/// State shared by every handler and task.
#[derive(Debug)]
pub struct Daemon {
    /// Paths and limits.
    pub config: DaemonConfig,
    /// The only reaper.
    #[cfg(unix)]
    pub reaper: Arc<Reaper>,
    /// Idle holders, ready for the next `exec`s.
    #[cfg(unix)]
    pub holders: Arc<crate::holder::link::HolderPool>,
    /// Every known process.
    pub registry: Registry,
    /// Running processes per session (O(1) limit checks).
    pub running: Arc<RunningCounts>,
    /// Open client sessions.
    pub sessions: Sessions,
    /// Persisted records and spools.
    pub store: RecordStore,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
    /// Cancelled (before `shutdown`) when the daemon leaves its processes running for the next
    /// one (`Shutdown` with `keep_processes`): actors let go, nothing is stopped.
    pub detach: CancellationToken,
    /// Wall-clock start.
    pub started_at: SystemTime,
    /// Monotonic start.
    pub started: Instant,
    /// Where the daemon log goes.
    pub log_dir: PathBuf,
    /// Serialises `exec`'s limit checks with the taking of a running slot (see `service::exec`).
    pub spawn_lock: Mutex<()>,
    /// `exec`s between their limit check and their registration. Shutdown waits for them, so
    /// no process is registered after its sweep (none starts once shutdown began).
    pub starts_in_flight: std::sync::atomic::AtomicUsize,
    /// CPU and memory figures of running processes' trees (`ps`, `Watch`).
    pub figures: process::resources::Sampler,
    /// The live viewers' table (`Watch`), built while any viewer is connected.
    pub watchers: crate::service::watch::Hub,
    /// Identical `exec`s between their look for a running twin and their registration.
    pub twin_starts: process::twins::TwinStarts,
    /// Actor watchdogs, awaited at shutdown.
    pub(crate) actors: Mutex<Vec<JoinHandle<()>>>,
    /// What the kernel lets the sandbox use, found on the first sandboxed `exec`.
    #[cfg(unix)]
    pub(crate) sandbox_kernel: tokio::sync::OnceCell<crate::sandbox::plan::Kernel>,
}

impl Daemon {
    /// What the kernel lets the sandbox use (`crate::sandbox::probe`): probed once, on the first
    /// sandboxed `exec`, off the runtime's workers; Seatbelt on macOS.
    #[cfg(unix)]
    pub async fn sandbox_kernel(&self) -> crate::sandbox::plan::Kernel {
        *self
            .sandbox_kernel
            .get_or_init(|| async {
                #[cfg(target_os = "linux")]
                {
                    let reaper = self.reaper.clone();
                    tokio::task::spawn_blocking(move || {
                        crate::holder::start::sandbox_kernel(&reaper)
                    })
                    .await
                    .unwrap_or_default()
                }
                #[cfg(not(target_os = "linux"))]
                crate::sandbox::plan::Kernel {
                    seatbelt: cfg!(target_os = "macos"),
                    ..Default::default()
                }
            })
            .await
    }

    /// Keeps an actor's handle so shutdown can wait for it, behind a watchdog: an actor that
    /// panics (a bug) must not leave its process unsupervised (STYLE §7.2 rule 7), so the
    /// watchdog kills the tree and marks the process `lost` (`supervisor_panic`).
    pub fn track_actor(&self, proc: Arc<process::ManagedProcess>, handle: JoinHandle<()>) {
        let store = self.store.clone();
        let watchdog = tokio::spawn(async move {
            let Err(e) = handle.await else {
                return;
            };
            if !e.is_panic() {
                return;
            }
            tracing::error!(process_id = %proc.facts.id, "the process's supervisor panicked; killing its tree");
            let leaders: Vec<_> = proc.state().identity.into_iter().collect();
            let holders: Vec<_> = proc.holder.into_iter().collect();
            let ids = [proc.facts.id.clone()];
            let _ = tokio::task::spawn_blocking(move || {
                process::tree::stop_all(&leaders, &holders, &ids, Duration::ZERO);
            })
            .await;
            proc.mark_supervisor_lost();
            store.save(&proc.record());
        });
        let mut actors = self.actors.lock().unwrap_or_else(|e| e.into_inner());
        actors.retain(|h| !h.is_finished());
        actors.push(watchdog);
    }

    /// Removes a process's record, spool and registry entry.
    pub fn forget(&self, id: &str) {
        self.registry.remove(id);
        self.store.remove(id);
    }

    pub(crate) fn take_actors(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.actors.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Forgets idle sessions, releases the memory of cold ended processes (their output is
    /// then read from the spool), and removes the oldest ended records beyond the configured
    /// number. Runs every [`RETENTION_TICK`], so neither memory nor disk grows with a burst of
    /// ended processes for longer than that (RELIABILITY, issue 16 item 7).
    pub(crate) fn apply_retention(&self) {
        self.sessions.expire_idle();
        let keep = self.config.file.max_ended_records();
        let now = std::time::SystemTime::now();
        let mut released = false;
        let mut ended: Vec<_> = self
            .registry
            .all()
            .into_iter()
            .filter_map(|p| {
                let s = p.state();
                // One left for a daemon that speaks its holder's protocol keeps its record.
                let ended = s.finished();
                let ended_at = s.ended_at().unwrap_or(p.facts.started_at);
                (ended && p.output.end().closed).then_some((p, ended_at))
            })
            .collect();
        for (p, ended_at) in &ended {
            if now.duration_since(*ended_at).unwrap_or_default() >= COLD_AFTER {
                released |= p.output.release_memory();
            }
        }
        if ended.len() > keep {
            ended.sort_by_key(|(_, ended_at)| *ended_at);
            let excess = ended.len() - keep;
            for (p, _) in ended.into_iter().take(excess) {
                self.forget(&p.facts.id);
            }
            released = true;
        }
        if released {
            // Give the freed rings and records back to the OS once this burst is over.
            heap::note_activity();
        }
    }
}

/// How often retention runs: bounds how long a burst of ended processes holds memory and disk
/// beyond the limits (a scan of the registry; ~1 ms for thousands of records).
pub(crate) const RETENTION_TICK: Duration = Duration::from_secs(1);

/// How long an ended process keeps its whole ring in memory: reads right after the end (the
/// agent's `read`/`wait`, `yieldctl read`) stay memory-fast, older ones read the spool.
const COLD_AFTER: Duration = Duration::from_secs(10);
