//! Starting one managed process, once its `exec` has passed the policy: the running slot
//! (the limits, under the spawn lock), the process directory (the id's reservation: a spare
//! holder's directory renamed into place, or a new one), the `starting` record, the holder (an
//! idle one from the pool with its launcher, or a new one), the actor, and the registration.
//! `service::exec` calls [`start`] in a task of its own, so a client that vanishes meanwhile
//! leaves a registered process, never a half-started one.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use yieldshell_proto::errors::ErrorKind;
#[cfg(unix)]
use yieldshell_proto::session_config::os_bytes;

#[cfg(unix)]
use crate::holder::HoldSpec;
#[cfg(unix)]
use crate::holder::link;
use crate::output::OutputLog;
use crate::policy::Refusal;
use crate::policy::redact::Redactor;
use crate::process::actor::{self, ActorContext};
use crate::process::terminal::TermSize;
use crate::process::{ManagedProcess, ProcessFacts, new_process_id};
use crate::session::Session;

/// One `exec` between its limit check and its registration (see `Daemon::starts_in_flight`).
struct StartInFlight<'a>(&'a crate::Daemon);

impl<'a> StartInFlight<'a> {
    fn enter(d: &'a crate::Daemon) -> StartInFlight<'a> {
        d.starts_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        StartInFlight(d)
    }
}

impl Drop for StartInFlight<'_> {
    fn drop(&mut self) {
        self.0
            .starts_in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What [`start`] needs of an `exec` that passed the policy.
pub struct StartRequest {
    /// The client-chosen process id, if any.
    pub wanted_id: Option<String>,
    /// The process's name (empty: none).
    pub name: String,
    /// The command line, as sent.
    pub command: Vec<u8>,
    /// The resolved working directory.
    pub cwd: PathBuf,
    /// The complete environment.
    pub env: Vec<(OsString, OsString)>,
    /// Redacts the environment's secrets from output and from what is shown of the command.
    pub redactor: Option<Arc<Redactor>>,
    /// `timeout_ms`.
    pub timeout: Option<Duration>,
    /// What the command may do, and where that comes from (`None`: unsandboxed).
    pub sandbox: Option<(crate::sandbox::Grant, crate::sandbox::Origin)>,
    /// The terminal to run on. Windows refuses `tty` before a request is made (no ConPTY yet).
    #[cfg_attr(windows, allow(dead_code))]
    pub terminal: Option<TermSize>,
    /// The request's `shell`: on Windows, `powershell`/`pwsh` selects PowerShell; elsewhere
    /// commands always run with `/bin/sh -c`.
    #[cfg_attr(unix, allow(dead_code))]
    pub shell: Option<String>,
    /// What an identical `exec` will recognise it by, when it may be reused.
    pub twin: Option<super::twins::TwinKey>,
}

/// Starts and registers a process. Its blocking steps are short (a lock, a `mkdir`, a queued
/// record, one socket write to an idle holder); what may take long runs on the blocking pool
/// (`holder::link::start`).
pub async fn start(
    d: &crate::Daemon,
    session: &Session,
    mut req: StartRequest,
) -> Result<Arc<ManagedProcess>, Refusal> {
    let limit = |m: String| Refusal {
        kind: ErrorKind::LimitReached,
        message: m,
    };
    // Only the limit check and the taking of a running slot are under the lock, so concurrent
    // execs cannot overshoot the limits; the slot is given back if anything below fails.
    let (slot, _in_flight) = {
        let _guard = d.spawn_lock.lock().unwrap_or_else(|e| e.into_inner());
        if d.shutdown.is_cancelled() {
            return Err(Refusal::new(
                ErrorKind::ShuttingDown,
                "yieldshelld is shutting down",
            ));
        }
        let (total, mine) = d.running.get(&session.id);
        if mine >= session.policy.max_processes as usize {
            return Err(limit(format!(
                "this session already runs {mine} processes (YIELDSHELL_MAX_PROCESSES={}); stop one or wait for it first",
                session.policy.max_processes
            )));
        }
        let global = d.config.file.max_running_processes();
        if total >= global as usize {
            return Err(limit(format!(
                "the daemon already runs {total} processes (its max_running_processes is {global})"
            )));
        }
        (d.running.take(&session.id), StartInFlight::enter(d))
    };
    let in_use = |id: &str| Refusal {
        kind: ErrorKind::InvalidArgument,
        message: format!("process_id {id} is already in use"),
    };
    let wanted = req.wanted_id.as_deref();
    // The process directory is the reservation: it is created atomically and never reused, so
    // two concurrent execs cannot both claim an id.
    let mut id = match wanted {
        Some(w) if d.registry.contains(w) => return Err(in_use(w)),
        Some(w) => w.to_string(),
        None => {
            let mut id = new_process_id();
            while d.registry.contains(&id) {
                id = new_process_id();
            }
            id
        }
    };
    let internal = |what: &str, e: std::io::Error| Refusal {
        kind: ErrorKind::SpawnFailed,
        message: format!("{what}: {e}"),
    };
    // The directory is created before the spawn and never reused: its existence is what lets a
    // restarted daemon find this process should the daemon crash right after the spawn. An idle
    // holder from the pool (Unix) usually brings one: its spare directory, renamed into place.
    #[cfg(unix)]
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut idle = d.holders.take_idle();
    let dir = loop {
        #[cfg(target_os = "linux")]
        if let Some(spare) = idle.as_ref().and_then(|i| i.spare_dir()) {
            match d.store.claim_dir(spare, &id) {
                Ok(dir) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match wanted {
                    Some(w) => return Err(in_use(w)),
                    None => id = new_process_id(),
                },
                Err(e) => {
                    // A holder is only ever given the directory it waits in: this one goes (it
                    // exits, removing its spare), and the directory is made the usual way.
                    tracing::warn!("moving a spare holder directory into place failed: {e}");
                    idle = None;
                }
            }
            continue;
        }
        match d.store.create_dir(&id) {
            Ok(dir) => break dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match wanted {
                Some(w) => return Err(in_use(w)),
                None => id = new_process_id(),
            },
            Err(e) => return Err(internal("creating the process directory", e)),
        }
    };
    // What is stored and shown (ps, info, record.json) is redacted as output is; what runs is
    // the command as sent.
    let (name, shown_command) = match req.redactor.as_ref() {
        Some(r) => (
            String::from_utf8_lossy(&r.redact(req.name.as_bytes())).into_owned(),
            r.redact(&req.command),
        ),
        None => (std::mem::take(&mut req.name), req.command.clone()),
    };
    // A sandboxed command's plan needs its directory (its private temp dir is in it).
    #[cfg(unix)]
    let confined = match req.sandbox.as_ref() {
        Some((grant, origin)) => match confine(d, grant, origin, &dir, &req.cwd).await {
            Ok(c) => Some(c),
            Err(r) => {
                d.store.remove(&id);
                return Err(r);
            }
        },
        None => None,
    };
    #[cfg(unix)]
    let sandbox = confined.as_ref().map(|c| c.confinement.clone());
    #[cfg(windows)]
    let sandbox = None;
    let facts = Arc::new(ProcessFacts {
        id,
        session_id: session.id.clone(),
        name,
        command: shown_command,
        cwd: std::mem::take(&mut req.cwd),
        started_at: SystemTime::now(),
        tty: req.terminal.is_some(),
        sandbox,
        twin: req.twin,
        timeout: req.timeout,
        redactor: req.redactor.clone(),
    });
    // Queued before the spawn, so the record exists (with the command) for the next daemon even
    // if this one crashes right after; the directory alone already would.
    d.store.save(&facts.starting_record());
    crate::faults::delay_spawn(&req.command).await; // tests only (RELIABILITY F3)
    #[cfg(unix)]
    let (proc, handle) =
        spawn_and_launch(d, session, facts, slot, &dir, (idle, confined), req).await?;
    #[cfg(windows)]
    let (proc, handle) = spawn_and_launch(d, session, facts, slot, &dir, req).await?;
    d.registry.insert(proc.clone());
    d.track_actor(proc.clone(), handle);
    tracing::info!(process_id = %proc.facts.id, pid = proc.state().identity.map(|i| i.pid), session = %session.id, "started");
    Ok(proc)
}

/// A started process and its actor's handle.
type Launched = (Arc<ManagedProcess>, tokio::task::JoinHandle<()>);

/// Unix: starts the command under a holder (docs/ARCHITECTURE.md, "Idle holders and the exec's
/// path") and the actor on the holder's link; a sandboxed one with its plan in the spec and, for
/// an allowlist, its proxy served.
#[cfg(unix)]
async fn spawn_and_launch(
    d: &crate::Daemon,
    session: &Session,
    facts: Arc<ProcessFacts>,
    slot: crate::limits::RunningSlot,
    dir: &std::path::Path,
    (idle, confined): (Option<link::Idle>, Option<Confined>),
    mut req: StartRequest,
) -> Result<Launched, Refusal> {
    use std::os::unix::ffi::OsStringExt;
    let internal = |what: &str, e: std::io::Error| Refusal {
        kind: ErrorKind::SpawnFailed,
        message: format!("{what}: {e}"),
    };
    let (plan, mut listener) = match confined {
        Some(c) => {
            req.env.extend(c.env);
            (Some(c.plan), c.listener)
        }
        None => (None, None),
    };
    let spool_cap = d.config.file.spool_max_bytes();
    let spec = HoldSpec {
        process_id: facts.id.clone(),
        dir: os_bytes(dir.as_os_str()),
        command: super::exec_line::exec_single(req.command),
        cwd: os_bytes(facts.cwd.as_os_str()),
        env: req
            .env
            .into_iter()
            .map(|(k, v)| (k.into_vec(), v.into_vec()))
            .collect(),
        redact: req.redactor.as_ref().map_or_else(Vec::new, |r| {
            r.pairs().map(|(s, r)| (s.to_vec(), r.to_vec())).collect()
        }),
        // spool_max_bytes = 0 turns the disk spool off.
        spool_cap,
        spool_batch: crate::holder::spool_batch_for(session.policy.max_buffer_bytes),
        terminal: req.terminal,
        sandbox: plan,
    };
    let mut given = link::Given::default();
    let mut held = link::start(&d.holders, idle, &spec, &mut given).await;
    if matches!(&held, Err(e) if e.kind() == link::LAUNCHER_GONE) {
        // Killed while idle, after the pool's liveness check: nothing ran, and its holder has let
        // go of the directory. Once more, on a new holder, in the emptied directory.
        tracing::warn!(process_id = %facts.id, "the idle holder's launcher died before it took the command; starting it on a new holder");
        let (store, id) = (d.store.clone(), facts.id.clone());
        let cleared = tokio::task::spawn_blocking(move || store.clear_for_another_start(&id))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
        given = link::Given::default();
        held = match cleared {
            Ok(()) => link::start(&d.holders, None, &spec, &mut given).await,
            Err(e) => Err(e),
        };
    }
    // The pool is refilled once the exec has answered; only a burst that emptied it refills now.
    if d.holders.is_empty() {
        d.holders.refill_later();
    }
    let mut held = match held {
        Ok(h) => h,
        Err(e) => {
            // The answer says the command did not start: make it true first.
            if e.kind() != link::LAUNCHER_GONE {
                end_unstarted(given, &facts.id).await;
            }
            d.store.remove(&facts.id);
            return Err(internal("could not start /bin/sh", e));
        }
    };
    // The proxy's listener: made in the command's network namespace (it came back with the
    // holder's answer), or bound here (no namespaces), which the holder is then given to keep.
    if let Some(own) = listener.as_ref() {
        use std::os::fd::AsRawFd;
        let keep = crate::holder::Encoder::new(crate::holder::Kind::Keep).finish();
        if let Err(e) = crate::holder::send_with_fd(&held.sock, &keep, Some(own.as_raw_fd())) {
            tracing::warn!(process_id = %facts.id, "handing the proxy listener to the holder failed: {e}");
        }
    }
    if held.listener.is_some() {
        listener = held.listener.take();
    }
    let output = Arc::new(OutputLog::held(
        usize::try_from(session.policy.max_buffer_bytes).unwrap_or(usize::MAX),
        (spool_cap > 0).then_some(dir),
    ));
    let ctx = ActorContext {
        timing: d.config.file.timing(),
        store: d.store.clone(),
        shutdown: d.shutdown.clone(),
        detach: d.detach.clone(),
        reaper: d.reaper.clone(),
    };
    let (holder, shell, proc_id) = (held.holder, held.shell(), facts.id.clone());
    let (proc, handle) = match actor::launch(facts, slot, held, output, req.timeout, ctx) {
        Ok(launched) => launched,
        Err(e) => {
            // Never leave a process running that nobody supervises: its whole tree and its
            // holder go.
            end_unstarted(
                link::Given {
                    holder: Some(holder),
                    shell: Some(shell),
                },
                &proc_id,
            )
            .await;
            return Err(internal("could not supervise the process", e));
        }
    };
    if let Some(listener) = listener {
        serve_proxy(&proc, listener);
    }
    Ok((proc, handle))
}

/// Ends whatever runs of a command whose start failed, before its `exec` answers that it did not
/// start. A holder can fail to answer after it spawned the shell (stopped by its own command,
/// `kill -STOP $PPID`, or killed), and the command then ran on, listed nowhere. The holder is
/// frozen (SIGSTOP: it spawns nothing more), every live descendant of it is killed until none is
/// left (it is its tree's child subreaper, so orphans stay below it), then the holder itself;
/// last, whatever carries the command's marker or is in its shell's session (a holder that died
/// already left its tree to the daemon). Blocking work (`/proc` scans), on the blocking pool.
#[cfg(unix)]
async fn end_unstarted(given: link::Given, process_id: &str) {
    let process_id = process_id.to_string();
    let ended = tokio::task::spawn_blocking(move || {
        use crate::process::tree;
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let signal = |id: tree::Identity, sig| {
            if tree::is_alive(id) {
                let _ = kill(Pid::from_raw(id.pid), sig);
            }
        };
        let holder = given.holder.filter(|h| tree::is_alive(*h));
        let until = std::time::Instant::now() + Duration::from_secs(5);
        if let Some(holder) = holder {
            signal(holder, Signal::SIGSTOP);
            loop {
                let below = descendants_of(holder.pid);
                if below.is_empty() || std::time::Instant::now() >= until {
                    break;
                }
                for id in below {
                    signal(id, Signal::SIGKILL);
                }
                // A killed process is gone a moment later; what one forked meanwhile is found
                // on the next pass.
                std::thread::sleep(Duration::from_millis(1));
            }
            // Its children (zombies now) go to the daemon, a child subreaper, which reaps them.
            signal(holder, Signal::SIGKILL);
        }
        let leaders: Vec<tree::Identity> = given.shell.into_iter().collect();
        // The holder is gone (killed above): its group, session and marker are what is left.
        tree::stop_all(&leaders, &[], &[process_id], Duration::ZERO);
        if let Some(holder) = holder {
            // The caller removes the process directory next: not while the holder may still
            // write in it. SIGKILL takes a moment; the reaper collects it.
            while tree::is_alive(holder) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    })
    .await;
    if let Err(e) = ended {
        tracing::error!("ending a command that did not start failed: {e}");
    }
}

/// Every live process below `pid` (Linux: one pass over `/proc`, parents to children).
#[cfg(target_os = "linux")]
fn descendants_of(pid: i32) -> Vec<crate::process::tree::Identity> {
    use crate::process::tree;
    let mut children: std::collections::HashMap<i32, Vec<(i32, tree::ProcStat)>> =
        std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some(stat) = tree::read_stat(child) {
            children.entry(stat.ppid).or_default().push((child, stat));
        }
    }
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        for (child, stat) in children.remove(&parent).unwrap_or_default() {
            next.push(child);
            if stat.is_alive() {
                found.push(tree::Identity {
                    pid: child,
                    start_time: stat.start_time,
                });
            }
        }
    }
    found
}

/// Elsewhere the command's marker finds its processes (`tree::stop_all`).
#[cfg(all(unix, not(target_os = "linux")))]
fn descendants_of(_pid: i32) -> Vec<crate::process::tree::Identity> {
    Vec::new()
}

/// Serves `proc`'s allowlist proxy on `listener` until its actor lets go (the daemon's side of
/// `crate::sandbox::proxy`). A process whose grant is no allowlist has none to serve.
#[cfg(unix)]
pub fn serve_proxy(proc: &ManagedProcess, listener: std::os::fd::OwnedFd) {
    let Some(network) = proc
        .facts
        .sandbox
        .as_ref()
        .map(|c| c.grant.network.clone())
        .filter(|n| matches!(n, crate::sandbox::Network::Allowlist(_)))
    else {
        return;
    };
    let stop = tokio_util::sync::CancellationToken::new();
    match crate::sandbox::proxy::serve(listener, network, proc.facts.id.clone(), stop.clone()) {
        Ok(_) => {
            *proc.proxy_stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(stop);
        }
        Err(e) => {
            tracing::warn!(process_id = %proc.facts.id, "the allowlist proxy did not start: {e}")
        }
    }
}

/// A sandboxed command's plan, what it adds to the environment, and (an allowlist without
/// namespaces) the proxy's listener bound here.
#[cfg(unix)]
pub struct Confined {
    /// What the command's process applies.
    pub plan: crate::sandbox::plan::Plan,
    /// What the grant is, and what the machine could not enforce.
    pub confinement: Arc<crate::sandbox::Confinement>,
    /// `TMPDIR`, and the proxy variables.
    pub env: Vec<(OsString, OsString)>,
    /// The proxy's listener, bound by the daemon.
    pub listener: Option<std::os::fd::OwnedFd>,
}

/// The plan of a grant for the process whose directory is `dir` (README, "Sandbox"); a grant
/// this machine cannot enforce is refused with the reason, never run without it.
#[cfg(unix)]
async fn confine(
    d: &crate::Daemon,
    grant: &crate::sandbox::Grant,
    origin: &crate::sandbox::Origin,
    dir: &std::path::Path,
    cwd: &std::path::Path,
) -> Result<Confined, Refusal> {
    use crate::sandbox::plan::{self, DaemonDirs, NetPlan};
    let refused = |message: String| Refusal {
        kind: ErrorKind::SandboxUnavailable,
        message,
    };
    let kernel = d.sandbox_kernel().await;
    let allowlist = matches!(grant.network, crate::sandbox::Network::Allowlist(_));
    let mut listener = None;
    if allowlist && !kernel.namespaces {
        let bound = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| refused(format!("the allowlist proxy could not listen: {e}")))?;
        listener = Some(std::os::fd::OwnedFd::from(bound));
    }
    let proxy_port = listener.as_ref().and_then(|l| {
        let l = std::net::TcpListener::from(l.try_clone().ok()?);
        let port = l.local_addr().ok()?.port();
        // Only a view of the same socket: the descriptor stays with `listener`.
        std::mem::forget(l);
        Some(port)
    });
    let dirs = DaemonDirs {
        state: std::fs::canonicalize(&d.config.state_dir).unwrap_or(d.config.state_dir.clone()),
        socket: d
            .config
            .socket
            .parent()
            .map(|p| std::fs::canonicalize(p).unwrap_or(p.to_path_buf()))
            .unwrap_or_default(),
    };
    let built = plan::build(grant, kernel, &dirs, dir, cwd, proxy_port).map_err(refused)?;
    let mut env: Vec<(OsString, OsString)> = vec![("TMPDIR".into(), built.plan.tmp.clone().into())];
    if let NetPlan::Proxy { port } = built.plan.network {
        let url = format!("http://127.0.0.1:{port}");
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.push((name.into(), url.clone().into()));
        }
        // Nothing may go around the proxy (it could not reach anything anyway).
        env.push(("NO_PROXY".into(), "".into()));
        env.push(("no_proxy".into(), "".into()));
    }
    Ok(Confined {
        confinement: Arc::new(crate::sandbox::Confinement {
            grant: grant.clone(),
            limits: built.limits,
            origin: Some(origin.clone()),
        }),
        plan: built.plan,
        env,
        listener,
    })
}

/// Windows: starts the command in a Job Object of its own (`process::job`) and the actor on its
/// pipes. No holder: the process ends with the daemon. Creating the process is blocking work
/// and runs off the runtime's workers.
#[cfg(windows)]
async fn spawn_and_launch(
    d: &crate::Daemon,
    session: &Session,
    facts: Arc<ProcessFacts>,
    slot: crate::limits::RunningSlot,
    dir: &std::path::Path,
    req: StartRequest,
) -> Result<Launched, Refusal> {
    let powershell = req
        .shell
        .as_deref()
        .map(|s| s.trim().to_ascii_lowercase())
        .is_some_and(|s| {
            matches!(
                s.as_str(),
                "powershell" | "powershell.exe" | "pwsh" | "pwsh.exe"
            )
        });
    let spec = crate::process::job::JobSpec {
        command: req.command,
        powershell,
        cwd: facts.cwd.clone(),
        env: req.env,
        process_id: facts.id.clone(),
    };
    let started = match tokio::task::spawn_blocking(move || crate::process::job::spawn(&spec))
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
    {
        Ok(s) => s,
        Err(e) => {
            d.store.remove(&facts.id);
            let shell = if powershell {
                "powershell.exe"
            } else {
                "cmd.exe"
            };
            return Err(Refusal {
                kind: ErrorKind::SpawnFailed,
                message: format!("could not start {shell}: {e}"),
            });
        }
    };
    let spool_cap = d.config.file.spool_max_bytes();
    let output = Arc::new(OutputLog::new(
        usize::try_from(session.policy.max_buffer_bytes).unwrap_or(usize::MAX),
        (spool_cap > 0).then_some(dir),
        spool_cap,
    ));
    let ctx = ActorContext {
        timing: d.config.file.timing(),
        store: d.store.clone(),
        shutdown: d.shutdown.clone(),
        detach: d.detach.clone(),
    };
    Ok(actor::launch(
        facts,
        slot,
        started,
        output,
        req.redactor,
        req.timeout,
        ctx,
    ))
}
