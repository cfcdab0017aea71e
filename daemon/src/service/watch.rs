//! `Watch`: the live table of processes for viewers such as `yieldctl top`, pushed instead of
//! polled.
//!
//! # Theory of operation
//!
//! One [`Hub`] task per daemon builds the table (every process's row, as `List` describes it)
//! while at least one viewer is connected, and publishes each new version through a `watch`
//! channel. It looks again every [`TICK`], at once when a process is registered or removed, and
//! when the sampler ([`crate::process::resources`]) has new figures; the input-wait and port
//! checks ([`crate::process::live_facts`]) are refreshed every [`FACTS_EVERY`], right after a
//! pass of the sampler, whose reading of every `/proc/<pid>/stat` they then reuse. A row whose
//! content did not change keeps its `Arc`, so a version costs the rows that changed, and the
//! table is published only when one did.
//!
//! Each viewer has a task of its own that compares the newest table with the rows it last sent
//! (pointer equality of the `Arc`s), and sends the rows that changed, with what changed about
//! each, and the ids that went. It sends into a channel of [`BUFFER`] events and waits for room:
//! a viewer that reads slowly blocks only its own task, which then looks at the newest table
//! only — intermediate states are skipped, never queued — so no viewer holds memory beyond one
//! table and its last-sent rows, nor slows the daemon or another viewer.
//!
//! The hub stops [`LINGER`] after its last viewer left; every work it does is bounded by the
//! number of records, and the `/proc` work is shared with `ps` (reused answers and passes).

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use super::ControlService;
use crate::Daemon;
use crate::process::{ManagedProcess, live_facts, resources};
use crate::status::unix_ms;

/// How often the hub looks for output and state changes.
pub const TICK: Duration = Duration::from_millis(250);
/// How often the input-wait and listening checks of running processes are refreshed: right
/// after a pass of the figures' sampler once this long passed (that pass then also tells the
/// checks who is in which session), or after [`FACTS_AT_MOST`] whatever the sampler does.
pub const FACTS_EVERY: Duration = Duration::from_secs(2);
/// The longest the checks go without a refresh.
const FACTS_AT_MOST: Duration = Duration::from_secs(3);
/// How long the hub keeps running after its last viewer left (a viewer that reconnects, or
/// several run one after another, finds it warm).
const LINGER: Duration = Duration::from_secs(5);
/// Events a viewer's stream holds before its task waits for the viewer.
const BUFFER: usize = 4;

/// Stream type of `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, tonic::Status>> + Send>>;

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    /// The row as `List` gives it, with live facts and figures, `duration_ms` 0 while running.
    pub info: pb::ProcessInfo,
    /// Who may see it.
    session_id: String,
    cwd: PathBuf,
}

/// A version of the table.
#[derive(Debug, Default)]
pub struct Table {
    /// Which run of the hub built it (a viewer waits for a table of the run it joined, not a
    /// leftover of an earlier one).
    epoch: u64,
    /// Every known process, by id.
    rows: HashMap<String, Arc<Row>>,
    /// The daemon's clock when it was built.
    now_unix_ms: i64,
}

/// The table's builder, shared by every viewer (see the module doc).
#[derive(Debug)]
pub struct Hub {
    table: watch::Sender<Arc<Table>>,
    running: AtomicBool,
    epoch: AtomicU64,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub {
            table: watch::channel(Arc::new(Table::default())).0,
            running: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        }
    }
}

impl Hub {
    /// A receiver of the table and the epoch to wait for, starting the hub if it is not running.
    fn subscribe(&self, daemon: &Arc<Daemon>) -> (watch::Receiver<Arc<Table>>, u64) {
        let rx = self.table.subscribe();
        if !self.running.swap(true, Ordering::AcqRel) {
            let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            tokio::spawn(build(Arc::downgrade(daemon), epoch));
            return (rx, epoch);
        }
        (rx, self.epoch.load(Ordering::Acquire))
    }
}

/// What the hub keeps about a process between two looks.
struct Seen {
    row: Arc<Row>,
    state_rx: watch::Receiver<crate::process::ProcState>,
    next_seq: u64,
}

/// The hub's task: builds the table until no viewer has been connected for [`LINGER`].
async fn build(daemon: Weak<Daemon>, epoch: u64) {
    let Some(d) = daemon.upgrade() else { return };
    let mut registry_rx = d.registry.changes();
    let shutdown = d.shutdown.clone();
    drop(d);
    let mut seen: HashMap<String, Seen> = HashMap::new();
    // The input-wait and ports of each running process, from the last refresh.
    let mut facts: HashMap<String, (Option<bool>, Vec<String>)> = HashMap::new();
    let mut facts_at: Option<Instant> = None;
    let mut facts_after_pass: Option<Instant> = None;
    let mut alone_since: Option<Instant> = None;
    let mut published = false;
    loop {
        let Some(d) = daemon.upgrade() else { return };
        // Keeps the sampler running while the hub does.
        let mut figures_rx = d.figures.demand(&d);
        let figures = resources::latest(&d);
        let procs = d.registry.all();
        let new_pass = figures.taken.is_some() && figures.taken != facts_after_pass;
        let refresh = facts_at.is_none_or(|at| {
            (new_pass && at.elapsed() >= FACTS_EVERY.saturating_sub(TICK))
                || at.elapsed() >= FACTS_AT_MOST
        });
        if refresh {
            let running: Vec<&Arc<ManagedProcess>> =
                procs.iter().filter(|p| p.is_running()).collect();
            let mut infos: Vec<pb::ProcessInfo> = running.iter().map(|p| p.info()).collect();
            live_facts::annotate(
                live_facts::Freshness::Reused,
                running.iter().map(|p| &***p).zip(infos.iter_mut()),
            )
            .await;
            facts = running
                .iter()
                .zip(infos)
                .map(|(p, i)| (p.facts.id.clone(), (i.waiting_for_input, i.listening)))
                .collect();
            facts_at = Some(Instant::now());
            facts_after_pass = figures.taken;
        }
        let mut changed = !published;
        let mut next: HashMap<String, Seen> = HashMap::with_capacity(procs.len());
        for p in &procs {
            let id = &p.facts.id;
            let next_seq = p.output.end().next_seq;
            let kept = match seen.remove(id) {
                // An ended process whose state and output did not move since the last look
                // keeps its row (most of a full table): nothing rebuilt, nothing compared.
                Some(s)
                    if !p.is_running()
                        && !s.state_rx.has_changed().unwrap_or(true)
                        && s.next_seq == next_seq =>
                {
                    s
                }
                Some(mut s) => {
                    s.state_rx.mark_unchanged();
                    s.next_seq = next_seq;
                    let info = row_info(p, &facts, &figures);
                    if s.row.info != info {
                        s.row = Arc::new(Row {
                            info,
                            session_id: p.facts.session_id.clone(),
                            cwd: p.facts.cwd.clone(),
                        });
                        changed = true;
                    }
                    s
                }
                None => {
                    changed = true;
                    fresh(p, &facts, &figures)
                }
            };
            next.insert(id.clone(), kept);
        }
        changed |= !seen.is_empty();
        seen = next;
        if changed {
            published = true;
            let rows = seen
                .iter()
                .map(|(id, s)| (id.clone(), s.row.clone()))
                .collect();
            d.watchers.table.send_replace(Arc::new(Table {
                epoch,
                rows,
                now_unix_ms: unix_ms(SystemTime::now()),
            }));
        }
        if d.watchers.table.receiver_count() == 0 {
            let since = *alone_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= LINGER {
                d.watchers.running.store(false, Ordering::Release);
                // A viewer that subscribed between the count and the store found the hub
                // running and started none: carry on for it.
                if d.watchers.table.receiver_count() == 0
                    || d.watchers.running.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
        } else {
            alone_since = None;
        }
        drop(d);
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            r = registry_rx.changed() => if r.is_err() { return },
            _ = figures_rx.changed() => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// The first row of `p`.
fn fresh(
    p: &Arc<ManagedProcess>,
    facts: &HashMap<String, (Option<bool>, Vec<String>)>,
    figures: &resources::FigureTable,
) -> Seen {
    let mut state_rx = p.subscribe();
    state_rx.mark_unchanged();
    Seen {
        row: Arc::new(Row {
            info: row_info(p, facts, figures),
            session_id: p.facts.session_id.clone(),
            cwd: p.facts.cwd.clone(),
        }),
        state_rx,
        next_seq: p.output.end().next_seq,
    }
}

/// The row's content: `List`'s description with the latest facts and figures, and no running
/// time while it runs (it would change every look; viewers count it themselves).
fn row_info(
    p: &ManagedProcess,
    facts: &HashMap<String, (Option<bool>, Vec<String>)>,
    figures: &resources::FigureTable,
) -> pb::ProcessInfo {
    let mut info = p.info();
    if info.status == pb::ProcessStatus::Running as i32 {
        info.duration_ms = 0;
        if let Some((waiting, listening)) = facts.get(&p.facts.id) {
            info.waiting_for_input = *waiting;
            info.listening = listening.clone();
        }
        if let Some(f) = figures.by_id.get(&p.facts.id) {
            info.cpu_percent = f.cpu_percent;
            info.rss_bytes = Some(f.rss_bytes);
        }
    }
    info
}

/// What changed between two versions of a row.
fn kinds(old: Option<&pb::ProcessInfo>, new: &pb::ProcessInfo) -> Vec<i32> {
    use pb::ChangeKind as K;
    let Some(old) = old else {
        return vec![K::Started as i32];
    };
    let running = pb::ProcessStatus::Running as i32;
    let mut kinds = Vec::new();
    if old.status == running && new.status != running {
        kinds.push(K::Ended as i32);
    }
    let output = |i: &pb::ProcessInfo| {
        (
            i.stdout_bytes,
            i.stderr_bytes,
            i.stdout_lines,
            i.stderr_lines,
            i.spool_dropped_bytes,
        )
    };
    if output(old) != output(new) {
        kinds.push(K::Output as i32);
    }
    if (old.cpu_percent, old.rss_bytes) != (new.cpu_percent, new.rss_bytes) {
        kinds.push(K::Figures as i32);
    }
    // Anything else: compare with the output and figures taken out.
    let rest = |i: &pb::ProcessInfo| pb::ProcessInfo {
        stdout_bytes: 0,
        stderr_bytes: 0,
        stdout_lines: 0,
        stderr_lines: 0,
        spool_dropped_bytes: 0,
        cpu_percent: None,
        rss_bytes: None,
        ..i.clone()
    };
    if !kinds.contains(&(K::Ended as i32)) && rest(old) != rest(new) {
        kinds.push(K::State as i32);
    }
    kinds
}

pub(super) fn watch(
    svc: &ControlService,
    req: pb::WatchRequest,
) -> Result<WatchStream, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let all_scope = match pb::Scope::try_from(req.scope) {
        Ok(pb::Scope::All) => true,
        Ok(pb::Scope::Project) => false,
        Err(_) => return Err(ErrorKind::InvalidArgument.status("scope must be project or all")),
    };
    let project_root = std::fs::canonicalize(&session.default_cwd).ok();
    let visible = move |row: &Row| {
        session.policy.cwd_allowed(&row.cwd)
            && (all_scope
                || row.session_id == session.id
                || project_root
                    .as_deref()
                    .is_some_and(|root| row.cwd.starts_with(root)))
            && (req.include_completed || row.info.status == pb::ProcessStatus::Running as i32)
    };
    let (tx, rx) = mpsc::channel(BUFFER);
    let (mut table_rx, epoch) = svc.daemon.watchers.subscribe(&svc.daemon);
    let shutdown = svc.daemon.shutdown.clone();
    tokio::spawn(async move {
        let shutting_down = || Err(ErrorKind::ShuttingDown.status("yieldshelld is shutting down"));
        // The hub's first table of this run (a table of an earlier run is stale).
        tokio::select! {
            ready = async { table_rx.wait_for(|t| t.epoch >= epoch).await.is_ok() } => if !ready {
                let _ = tx.send(shutting_down()).await;
                return;
            },
            _ = tx.closed() => return,
            _ = shutdown.cancelled() => {
                let _ = tx.send(shutting_down()).await;
                return;
            }
        }
        let mut sent: HashMap<String, Arc<Row>> = HashMap::new();
        let mut first = true;
        loop {
            let table = table_rx.borrow_and_update().clone();
            let mut changes = Vec::new();
            let mut now_sent = HashMap::with_capacity(sent.len());
            for (id, row) in table.rows.iter().filter(|(_, r)| visible(r)) {
                let before = sent.remove(id);
                if before.as_ref().is_none_or(|b| !Arc::ptr_eq(b, row)) {
                    let kinds = kinds(before.as_ref().map(|b| &b.info), &row.info);
                    if !kinds.is_empty() || before.is_none() {
                        changes.push(pb::ProcessChange {
                            kinds,
                            process: Some(row.info.clone()),
                        });
                    }
                }
                now_sent.insert(id.clone(), row.clone());
            }
            let removed: Vec<String> = sent.into_keys().collect();
            sent = now_sent;
            if first || !changes.is_empty() || !removed.is_empty() {
                let ev = pb::WatchEvent {
                    reset: first,
                    changes,
                    removed,
                    now_unix_ms: table.now_unix_ms,
                };
                first = false;
                // A viewer that stopped reading blocks only this task; when it reads again it
                // gets the newest table's differences, not a backlog.
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                r = table_rx.changed() => if r.is_err() {
                    let _ = tx.send(shutting_down()).await;
                    return;
                },
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => {
                    let _ = tx.send(shutting_down()).await;
                    return;
                }
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::ChangeKind as K;

    fn running() -> pb::ProcessInfo {
        pb::ProcessInfo {
            process_id: "proc_1".into(),
            status: pb::ProcessStatus::Running as i32,
            ..Default::default()
        }
    }

    #[test]
    fn what_changed_is_named_per_kind() {
        let old = running();
        assert_eq!(kinds(None, &old), vec![K::Started as i32]);
        assert_eq!(kinds(Some(&old), &old), Vec::<i32>::new());
        let printed = pb::ProcessInfo {
            stdout_bytes: 10,
            stdout_lines: 1,
            cpu_percent: Some(50.0),
            ..old.clone()
        };
        assert_eq!(
            kinds(Some(&old), &printed),
            vec![K::Output as i32, K::Figures as i32]
        );
        let waiting = pb::ProcessInfo {
            waiting_for_input: Some(true),
            ..old.clone()
        };
        assert_eq!(kinds(Some(&old), &waiting), vec![K::State as i32]);
        let ended = pb::ProcessInfo {
            status: pb::ProcessStatus::Completed as i32,
            exit_code: Some(0),
            stderr_bytes: 3,
            ..old.clone()
        };
        assert_eq!(
            kinds(Some(&old), &ended),
            vec![K::Ended as i32, K::Output as i32]
        );
    }
}
