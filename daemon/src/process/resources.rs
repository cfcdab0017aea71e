//! Resource figures of running processes: the CPU use of each process's tree over the last
//! sampling interval and its resident memory, for `ps` (MCP and `yieldctl`) and the `Watch`
//! stream of `yieldctl top`.
//!
//! # Theory of operation
//!
//! A process's *tree* is its shell and every live process of the shell's session or process
//! group, as for the input-wait and listening checks ([`super::sessions`]); a member that left
//! both (`setsid` and a group of its own) is not counted. The figures come from one pass over
//! the whole process table (`/proc/<pid>/stat` on Linux, libproc on macOS), taken by one
//! [`Sampler`] for every process at once:
//!
//! - **memory** is the sum of the members' resident set sizes (a page shared by two members
//!   counts twice, as summing `ps` or `top` rows does);
//! - **CPU** needs two passes: each member's CPU time (its own, plus that of the children it
//!   waited for: a `make` that ran many short compilers between two passes has them in its
//!   children's time) is compared with the previous pass. A member the previous pass did not
//!   have started since, so all its time counts; a process that ended since and whose parent is
//!   a member moved its time into that parent's children's time, so what the previous pass
//!   already counted of it is taken off again (a long compiler that exits is not counted twice).
//!   A member that ended since without being waited for by a member (its time went to the
//!   holder, the tree's subreaper) loses its time after the previous pass. The result is a
//!   percentage of one CPU: 200 means two CPUs busy.
//!
//! The sampler runs only while someone wants figures: every `ps` and every open `Watch` stream
//! asks for them ([`Sampler::demand`]); it takes a pass every [`INTERVAL`] (the first two
//! [`WARMUP`] apart, so a first `ps` has CPU figures quickly) and stops [`LINGER`] after the
//! last demand. A pass runs on the blocking pool, never on a runtime worker; its answers are
//! shared by every caller until the next one, so ten viewers cost one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use yieldshell_proto::pb;

use super::tree::Identity;
use crate::Daemon;

/// Time between two passes while figures are wanted.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Time between the first two passes: a `ps` that woke the sampler waits this long (plus two
/// passes) for CPU figures.
pub const WARMUP: Duration = Duration::from_millis(250);
/// How long the sampler keeps running after the last demand.
pub const LINGER: Duration = Duration::from_secs(10);
/// Figures older than this are not given to a `ps` without waiting for the next pass (the
/// sampler stopped, or a pass is stuck).
const STALE: Duration = Duration::from_secs(3);
/// Longest a `ps` waits for figures; it answers without them after that.
const COLD_WAIT: Duration = Duration::from_millis(1500);
/// A tree sampled over less than this (it started just before the pass) gets no CPU figure yet:
/// a few clock ticks over a few milliseconds say nothing.
const MIN_SPAN: Duration = Duration::from_millis(50);

/// The figures of one tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    /// CPU use over the interval, in percent of one CPU, to one decimal; `None` until two
    /// passes have seen the tree.
    pub cpu_percent: Option<f64>,
    /// Resident memory of the tree's members, in bytes.
    pub rss_bytes: u64,
}

/// One process of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    /// Process id.
    pub pid: i32,
    /// Parent pid.
    pub ppid: i32,
    /// Session id.
    pub session: i32,
    /// Process group.
    pub pgrp: i32,
    /// Start time, in the unit of [`Identity::start_time`] (tells a reused pid apart).
    pub start_time: u64,
    /// CPU time it used itself (user + system), in nanoseconds.
    pub own_ns: u64,
    /// CPU time of its children it waited for (Linux's `cutime + cstime`), in nanoseconds.
    pub children_ns: u64,
    /// Resident memory, in bytes.
    pub rss_bytes: u64,
    /// Not a zombie.
    pub alive: bool,
}

impl ProcSample {
    fn total_ns(&self) -> u64 {
        self.own_ns.saturating_add(self.children_ns)
    }
}

/// Every process of the machine at one moment.
#[derive(Debug, Clone)]
pub struct Pass {
    /// When the pass started.
    pub taken: Instant,
    /// By pid.
    pub processes: HashMap<i32, ProcSample>,
}

impl Pass {
    /// A pass of these processes, taken at `taken`.
    pub fn new(taken: Instant, processes: impl IntoIterator<Item = ProcSample>) -> Pass {
        Pass {
            taken,
            processes: processes.into_iter().map(|p| (p.pid, p)).collect(),
        }
    }

    /// The same process (pid and start time) in this pass.
    fn same(&self, p: &ProcSample) -> Option<&ProcSample> {
        self.processes
            .get(&p.pid)
            .filter(|q| q.start_time == p.start_time)
    }
}

/// A tree to compute figures for: its shell and when the daemon started it.
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// The shell (pid and start time; a start time of 0 is not checked).
    pub shell: Identity,
    /// When the process started (monotonic).
    pub started: Instant,
}

/// The figures of each tree in `cur` (`None` for a tree whose shell is gone), with `prev` the
/// previous pass (CPU figures need one).
pub fn figures(prev: Option<&Pass>, cur: &Pass, trees: &[Tree]) -> Vec<Option<Figure>> {
    // Which tree each process belongs to: its own pid, else its session, else its group names
    // a shell (the shell leads both).
    let leaders: HashMap<i32, usize> = trees
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            cur.processes
                .get(&t.shell.pid)
                .is_some_and(|p| t.shell.start_time == 0 || p.start_time == t.shell.start_time)
        })
        .map(|(i, t)| (t.shell.pid, i))
        .collect();
    let mut alive = vec![false; trees.len()];
    for &i in leaders.values() {
        alive[i] = true;
    }
    let mut members: Vec<Vec<&ProcSample>> = vec![Vec::new(); trees.len()];
    for p in cur.processes.values() {
        let tree = leaders
            .get(&p.pid)
            .or_else(|| leaders.get(&p.session))
            .or_else(|| leaders.get(&p.pgrp));
        if let Some(&i) = tree {
            members[i].push(p);
        }
    }
    // What processes that ended since the previous pass had used by then, by parent: their
    // parent's children's time now holds all of it.
    let mut gone_children: HashMap<i32, u64> = HashMap::new();
    if let Some(prev) = prev {
        for q in prev.processes.values() {
            if cur.same(q).is_none() {
                let entry = gone_children.entry(q.ppid).or_default();
                *entry = entry.saturating_add(q.total_ns());
            }
        }
    }
    trees
        .iter()
        .zip(members)
        .enumerate()
        .map(|(i, (tree, members))| {
            if !alive[i] {
                return None;
            }
            let rss_bytes = members
                .iter()
                .fold(0u64, |sum, m| sum.saturating_add(m.rss_bytes));
            let cpu_percent = prev.and_then(|prev| {
                let since = tree.started.max(prev.taken);
                let span = cur.taken.checked_duration_since(since)?;
                if span < MIN_SPAN {
                    return None;
                }
                let used: u64 = members
                    .iter()
                    .map(|m| {
                        let before = prev.same(m).map_or(0, ProcSample::total_ns);
                        // The parent's children's time holds its ended children's, counted
                        // already up to the previous pass (only when the parent is the same
                        // process as then: a new one waited for nobody the pass saw).
                        let counted_children = if prev.same(m).is_some() {
                            gone_children.get(&m.pid).copied().unwrap_or(0)
                        } else {
                            0
                        };
                        m.total_ns()
                            .saturating_sub(before)
                            .saturating_sub(counted_children)
                    })
                    .fold(0u64, u64::saturating_add);
                let percent = used as f64 / span.as_nanos() as f64 * 100.0;
                Some((percent * 10.0).round() / 10.0)
            });
            Some(Figure {
                cpu_percent,
                rss_bytes,
            })
        })
        .collect()
}

/// Units of `/proc/<pid>/stat`: clock ticks and pages.
#[derive(Debug, Clone, Copy)]
pub struct StatUnits {
    /// Nanoseconds per clock tick (`10_000_000` at the usual 100 Hz).
    pub ns_per_tick: u64,
    /// Bytes per page.
    pub page_bytes: u64,
}

impl StatUnits {
    /// The running kernel's units.
    #[cfg(target_os = "linux")]
    pub fn of_system() -> StatUnits {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(100);
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| u64::try_from(p).ok())
            .filter(|p| *p > 0)
            .unwrap_or(4096);
        StatUnits {
            ns_per_tick: 1_000_000_000 / ticks,
            page_bytes: page,
        }
    }
}

/// Parses `/proc/<pid>/stat` into a sample. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted after the *last* `)`.
pub fn parse_stat(pid: i32, text: &str, units: StatUnits) -> Option<ProcSample> {
    let rest = &text[text.rfind(')')? + 1..];
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let num = |n: usize| field(n)?.parse::<i64>().ok();
    let ticks = |n: usize| num(n).map(|t| u64::try_from(t.max(0)).unwrap_or(0));
    let ns = |t: u64| t.saturating_mul(units.ns_per_tick);
    let state = field(3)?.bytes().next()?;
    Some(ProcSample {
        pid,
        alive: !matches!(state, b'Z' | b'X' | b'x'),
        ppid: i32::try_from(num(4)?).ok()?,
        pgrp: i32::try_from(num(5)?).ok()?,
        session: i32::try_from(num(6)?).ok()?,
        own_ns: ns(ticks(14)?.saturating_add(ticks(15)?)),
        children_ns: ns(ticks(16)?.saturating_add(ticks(17)?)),
        start_time: field(22)?.parse().ok()?,
        rss_bytes: ticks(24)?.saturating_mul(units.page_bytes),
    })
}

/// A pass over `root` laid out like `/proc` (every `<pid>/stat`); processes that vanish during
/// the pass are left out. `None` when `root` cannot be listed. Blocking.
pub fn read_proc(root: &std::path::Path, units: StatUnits) -> Option<Pass> {
    let taken = Instant::now();
    let mut processes = Vec::new();
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(p) = parse_stat(pid, &text, units) {
            processes.push(p);
        }
    }
    Some(Pass::new(taken, processes))
}

/// A pass over this machine's process table; `None` where figures cannot be had (Windows) or
/// the table cannot be read. Blocking.
fn read_system() -> Option<Pass> {
    #[cfg(target_os = "linux")]
    {
        static UNITS: std::sync::OnceLock<StatUnits> = std::sync::OnceLock::new();
        read_proc(
            std::path::Path::new("/proc"),
            *UNITS.get_or_init(StatUnits::of_system),
        )
    }
    #[cfg(target_os = "macos")]
    {
        let taken = Instant::now();
        let processes = super::darwin::all_pids()?
            .into_iter()
            .filter_map(|pid| {
                let stat = crate::spawn::identity::read_stat(pid)?;
                let (cpu_ns, rss_bytes) = super::darwin::cpu_and_resident(pid)?;
                Some(ProcSample {
                    pid,
                    ppid: stat.ppid,
                    session: stat.session,
                    pgrp: stat.pgrp,
                    start_time: stat.start_time,
                    own_ns: cpu_ns,
                    // macOS keeps no time of waited-for children per process: a child that
                    // ended between two passes loses its time since the first.
                    children_ns: 0,
                    rss_bytes,
                    alive: stat.is_alive(),
                })
            })
            .collect::<Vec<_>>();
        Some(Pass::new(taken, processes))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        None
    }
}

/// Whether figures can be had on this platform at all.
pub const SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "macos"));

/// The figures of every running process at the last pass, by process id.
#[derive(Debug, Default)]
pub struct FigureTable {
    /// When the pass was taken (`None` for the empty table before the first).
    pub taken: Option<Instant>,
    /// The pass had a previous one: processes it saw in both have CPU figures.
    pub warm: bool,
    /// By process id.
    pub by_id: HashMap<String, Figure>,
}

/// The daemon's one sampler (see the module doc).
#[derive(Debug)]
pub struct Sampler {
    last_demand: Mutex<Option<Instant>>,
    running: std::sync::atomic::AtomicBool,
    latest: watch::Sender<Arc<FigureTable>>,
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler {
            last_demand: Mutex::new(None),
            running: std::sync::atomic::AtomicBool::new(false),
            latest: watch::channel(Arc::new(FigureTable::default())).0,
        }
    }
}

impl Sampler {
    /// Notes that figures are wanted, starting the sampling task when it is not running, and
    /// returns a receiver of each pass's table.
    pub fn demand(&self, daemon: &Arc<Daemon>) -> watch::Receiver<Arc<FigureTable>> {
        *self.last_demand.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let rx = self.latest.subscribe();
        if SUPPORTED && !self.running.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tokio::spawn(sample(Arc::downgrade(daemon)));
        }
        rx
    }

    fn wanted(&self) -> bool {
        self.last_demand
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < LINGER)
    }
}

/// The sampling task: a pass every [`INTERVAL`] while figures are wanted.
async fn sample(daemon: Weak<Daemon>) {
    let mut prev: Option<Pass> = None;
    loop {
        let Some(d) = daemon.upgrade() else { return };
        let running: Vec<(String, Tree)> = d
            .registry
            .all()
            .into_iter()
            .filter(|p| p.is_running())
            .filter_map(|p| {
                let shell = p.state().identity?;
                Some((
                    p.facts.id.clone(),
                    Tree {
                        shell,
                        started: p.started,
                    },
                ))
            })
            .collect();
        let shutdown = d.shutdown.clone();
        drop(d);
        let (ids, trees): (Vec<String>, Vec<Tree>) = running.into_iter().unzip();
        let last = prev.take();
        let warm = last.is_some();
        let done = tokio::task::spawn_blocking(move || {
            let cur = read_system()?;
            // The same pass tells the input-wait and port checks who is in which session.
            #[cfg(target_os = "linux")]
            super::sessions::offer(
                cur.taken,
                cur.processes
                    .values()
                    .filter(|p| p.alive)
                    .map(|p| (p.pid, p.session, p.pgrp))
                    .collect(),
            );
            let found = figures(last.as_ref(), &cur, &trees);
            Some((cur, found))
        })
        .await
        .ok()
        .flatten();
        let Some(d) = daemon.upgrade() else { return };
        if let Some((cur, found)) = done {
            let table = FigureTable {
                taken: Some(cur.taken),
                warm,
                by_id: ids
                    .into_iter()
                    .zip(found)
                    .filter_map(|(id, f)| Some((id, f?)))
                    .collect(),
            };
            d.figures.latest.send_replace(Arc::new(table));
            prev = Some(cur);
        }
        if !d.figures.wanted() {
            d.figures
                .running
                .store(false, std::sync::atomic::Ordering::Release);
            // A demand between the check and the store found the task still running and
            // started none: take it on.
            if !d.figures.wanted()
                || d.figures
                    .running
                    .swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                return;
            }
        }
        drop(d);
        let pause = if prev.is_some() && warm {
            INTERVAL
        } else {
            WARMUP
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Fills in `cpu_percent` and `rss_bytes` of each running [`ProcessInfo`](pb::ProcessInfo)
/// from the sampler's last pass, waiting (at most [`COLD_WAIT`]) for a pass when the last one is
/// stale or had no previous one (the sampler was idle). Others keep them absent, as does a
/// process started after the pass.
pub async fn annotate<'a>(
    daemon: &Arc<Daemon>,
    infos: impl IntoIterator<Item = &'a mut pb::ProcessInfo>,
) {
    let running = pb::ProcessStatus::Running as i32;
    let mut infos: Vec<&mut pb::ProcessInfo> =
        infos.into_iter().filter(|i| i.status == running).collect();
    if infos.is_empty() || !SUPPORTED {
        return;
    }
    let mut rx = daemon.figures.demand(daemon);
    let usable = |t: &FigureTable| t.warm && t.taken.is_some_and(|at| at.elapsed() < STALE);
    if !usable(&rx.borrow_and_update()) {
        let _ = tokio::time::timeout(COLD_WAIT, rx.wait_for(|t| usable(t))).await;
    }
    let table = rx.borrow().clone();
    for info in &mut infos {
        if let Some(f) = table.by_id.get(&info.process_id) {
            info.cpu_percent = f.cpu_percent;
            info.rss_bytes = Some(f.rss_bytes);
        }
    }
}

/// The latest table, without waiting (the `Watch` stream takes whatever the last pass found,
/// and its next table when one comes).
pub fn latest(daemon: &Arc<Daemon>) -> Arc<FigureTable> {
    daemon.figures.latest.borrow().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: StatUnits = StatUnits {
        ns_per_tick: 10_000_000,
        page_bytes: 4096,
    };

    /// A `/proc/<pid>/stat` line: state S, the given parent, group, session, CPU ticks
    /// (own user/system, children's user/system), start time and resident pages.
    fn stat_line(
        pid: i32,
        name: &str,
        (ppid, pgrp, session): (i32, i32, i32),
        ticks: [u64; 4],
        start: u64,
        rss: u64,
    ) -> String {
        format!(
            "{pid} ({name}) S {ppid} {pgrp} {session} 34816 {pgrp} 4194304 100 0 0 0 {} {} {} {} 20 0 1 0 {start} 10485760 {rss} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
            ticks[0], ticks[1], ticks[2], ticks[3]
        )
    }

    /// Writes a fake `/proc` in `dir`: one `<pid>/stat` per entry, plus files a real `/proc`
    /// has that are not processes.
    fn lay_out(dir: &std::path::Path, lines: &[(i32, String)]) {
        for entry in std::fs::read_dir(dir).expect("dir").flatten() {
            std::fs::remove_dir_all(entry.path()).ok();
            std::fs::remove_file(entry.path()).ok();
        }
        std::fs::write(dir.join("uptime"), "1.0 1.0\n").expect("uptime");
        std::fs::create_dir_all(dir.join("self")).expect("self");
        for (pid, line) in lines {
            let p = dir.join(pid.to_string());
            std::fs::create_dir_all(&p).expect("pid dir");
            std::fs::write(p.join("stat"), line).expect("stat");
        }
    }

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let line = stat_line(
            42,
            "a (tricky) name) S 1 2 3",
            (7, 42, 40),
            [150, 50, 30, 20],
            9999,
            256,
        );
        let s = parse_stat(42, &line, UNITS).expect("parsed");
        assert_eq!((s.ppid, s.pgrp, s.session, s.start_time), (7, 42, 40, 9999));
        assert_eq!(s.own_ns, 2_000_000_000, "200 ticks of 10 ms");
        assert_eq!(s.children_ns, 500_000_000);
        assert_eq!(s.rss_bytes, 256 * 4096);
        assert_eq!(parse_stat(1, "garbage", UNITS), None);
        assert_eq!(
            parse_stat(1, "1 (x) S 0 1", UNITS),
            None,
            "a cut line is refused"
        );
    }

    /// The shell 100 (session and group 100), a busy child 101 in its group, a pipeline 102 in
    /// a group of its own in the same session, and an unrelated process 200.
    fn machine(t: [u64; 4], busy: u64) -> Vec<(i32, String)> {
        vec![
            (100, stat_line(100, "sh", (1, 100, 100), t, 500, 100)),
            (
                101,
                stat_line(101, "busy loop", (100, 100, 100), [busy, 0, 0, 0], 510, 300),
            ),
            (
                102,
                stat_line(102, "cat", (100, 102, 100), [0, 0, 0, 0], 520, 50),
            ),
            (
                200,
                stat_line(200, "other", (1, 200, 200), [busy * 5, 0, 0, 0], 100, 9000),
            ),
        ]
    }

    #[test]
    fn a_tree_sums_its_members_cpu_over_the_interval_and_their_memory_on_a_fake_proc() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = Instant::now() - Duration::from_secs(60);
        let trees = [Tree {
            shell: Identity {
                pid: 100,
                start_time: 500,
            },
            started,
        }];
        lay_out(dir.path(), &machine([1, 1, 0, 0], 1000));
        let mut first = read_proc(dir.path(), UNITS).expect("pass");
        assert_eq!(
            first.processes.len(),
            4,
            "non-numeric entries are not processes"
        );
        let alone = figures(None, &first, &trees);
        assert_eq!(
            alone,
            vec![Some(Figure {
                cpu_percent: None,
                rss_bytes: 450 * 4096
            })],
            "memory from one pass, CPU needs two"
        );
        // One second later the child used 80 more ticks (0.8 s of CPU), the shell 2.
        lay_out(dir.path(), &machine([2, 2, 0, 0], 1080));
        let mut second = read_proc(dir.path(), UNITS).expect("pass");
        first.taken = Instant::now() - Duration::from_secs(2);
        second.taken = first.taken + Duration::from_secs(1);
        let f = figures(Some(&first), &second, &trees)[0].expect("figure");
        assert_eq!(f.cpu_percent, Some(82.0), "80 + 2 ticks of 10 ms in 1 s");
        assert_eq!(
            f.rss_bytes,
            450 * 4096,
            "the unrelated process is not counted"
        );
    }

    #[test]
    fn an_ended_child_is_counted_once_and_a_new_one_wholly() {
        let started = Instant::now() - Duration::from_secs(60);
        let trees = [Tree {
            shell: Identity {
                pid: 100,
                start_time: 500,
            },
            started,
        }];
        let t0 = Instant::now() - Duration::from_secs(10);
        let shell = |children: u64| ProcSample {
            pid: 100,
            ppid: 1,
            session: 100,
            pgrp: 100,
            start_time: 500,
            own_ns: 0,
            children_ns: children,
            rss_bytes: 0,
            alive: true,
        };
        let child = |pid: i32, start: u64, own: u64| ProcSample {
            pid,
            ppid: 100,
            session: 100,
            pgrp: 100,
            start_time: start,
            own_ns: own,
            children_ns: 0,
            rss_bytes: 0,
            alive: true,
        };
        let sec = 1_000_000_000;
        // A compiler that had used 30 s by the first pass, then 1 s more before it ended and the
        // shell waited for it (its 31 s are now the shell's children's time); meanwhile a new
        // compiler started and used 0.5 s.
        let first = Pass::new(t0, [shell(0), child(101, 510, 30 * sec)]);
        let second = Pass::new(
            t0 + Duration::from_secs(2),
            [shell(31 * sec), child(102, 900, sec / 2)],
        );
        let f = figures(Some(&first), &second, &trees)[0].expect("figure");
        assert_eq!(
            f.cpu_percent,
            Some(75.0),
            "(1 s + 0.5 s) over 2 s, not 31.5 s"
        );
        // A pid reused by another process is a new process, not the old one.
        let reused = Pass::new(
            t0 + Duration::from_secs(2),
            [shell(0), child(101, 777, sec / 4)],
        );
        let f = figures(Some(&first), &reused, &trees)[0].expect("figure");
        assert_eq!(f.cpu_percent, Some(12.5));
    }

    #[test]
    fn a_gone_or_replaced_shell_has_no_figures_and_a_young_tree_no_cpu_yet() {
        let t0 = Instant::now() - Duration::from_secs(10);
        let sample = |pid: i32, start: u64| ProcSample {
            pid,
            ppid: 1,
            session: pid,
            pgrp: pid,
            start_time: start,
            own_ns: 5_000_000,
            children_ns: 0,
            rss_bytes: 4096,
            alive: true,
        };
        let first = Pass::new(t0, [sample(100, 500)]);
        let second = Pass::new(
            t0 + Duration::from_secs(1),
            [sample(100, 501), sample(300, 9)],
        );
        let trees = [
            Tree {
                shell: Identity {
                    pid: 100,
                    start_time: 500,
                },
                started: t0 - Duration::from_secs(5),
            },
            Tree {
                shell: Identity {
                    pid: 300,
                    start_time: 9,
                },
                // Started 10 ms before the pass.
                started: t0 + Duration::from_millis(990),
            },
            Tree {
                shell: Identity {
                    pid: 400,
                    start_time: 0,
                },
                started: t0,
            },
        ];
        let found = figures(Some(&first), &second, &trees);
        assert_eq!(found[0], None, "pid 100 is another process now");
        assert_eq!(
            found[1],
            Some(Figure {
                cpu_percent: None,
                rss_bytes: 4096
            })
        );
        assert_eq!(found[2], None, "no such process");
    }

    #[test]
    fn a_missing_proc_gives_no_pass() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(read_proc(&dir.path().join("absent"), UNITS).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_real_proc_has_this_process_with_memory() {
        let pass = read_system().expect("a pass over /proc");
        let me = i32::try_from(std::process::id()).expect("pid");
        let mine = pass.processes.get(&me).expect("this process");
        assert!(mine.rss_bytes > 0);
    }
}
