//! `yieldshelld`: the YieldShell daemon. It owns every managed shell process and its output, and
//! serves the control plane (`yieldshell.v1.Control`) on a local socket only its user can reach.
//!
//! Crate map:
//! - [`process`]: the managed process handle, the per-process actor, tree containment;
//! - [`holder`]: the per-process holder (`yieldshelld hold`), its start, and the daemon's link to
//!   it;
//! - [`spawn`]: the lower room both build on: the shell's spawn, terminals, a process's
//!   identity, the reaper (`process → holder → spawn`, never back);
//! - [`output`]: the per-process output log (ring + spool);
//! - [`policy`]: per-session rules and secret redaction; [`sandbox`]: the enforced sandbox (the
//!   grant a declaration gives, the plan the command's process applies, the allowlist proxy);
//! - [`service`]: the gRPC handlers; [`listener`]: socket, activation, peer check (on Windows:
//!   the named pipe and its DACL, `listener_windows.rs`);
//! - [`state`]: the [`Daemon`] state every handler and task shares, and retention;
//! - [`error`]: the one error type (a kind and a message), and [`status`]: the typed words of
//!   a process's end;
//! - [`shutdown_signals`]: SIGTERM/SIGINT/SIGUSR1 that come while their listeners are set up;
//! - [`session`], [`registry`], [`limits`], [`record`], [`recovery`], [`lock`], [`config`],
//!   [`heap`], [`faults`] (test-only fault injection, inert unless the daemon's own environment
//!   asks for it).
//!
//! `docs/ARCHITECTURE.md` describes the ownership rules these modules follow.

pub mod answer_budget;
pub mod config;
pub mod error;
pub mod faults;
pub mod heap;
#[cfg(unix)]
pub mod holder;
pub mod limits;
#[cfg(unix)]
pub mod listener;
/// Windows: the control plane on a named pipe.
#[cfg(windows)]
#[path = "listener_windows.rs"]
pub mod listener;
pub mod lock;
pub mod output;
pub mod policy;
pub mod process;
pub mod record;
pub mod recovery;
pub mod registry;
pub mod sandbox;
pub mod service;
pub mod session;
#[cfg(unix)]
pub mod shutdown_signals;
pub mod spawn;
pub mod state;
pub mod status;
#[cfg(all(test, target_os = "linux"))]
mod test_child;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use yieldshell_proto::pb::control_server::ControlServer;

use crate::config::DaemonConfig;
use crate::lock::InstanceLock;
use crate::record::RecordStore;
use crate::registry::Registry;
use crate::session::Sessions;
#[cfg(unix)]
use crate::spawn::reaper::{self, Reaper};
pub use crate::state::Daemon;
use crate::state::RETENTION_TICK;

/// Holders kept started and idle, so an `exec` does not wait for one to start (a burst beyond
/// them starts its own).
#[cfg(unix)]
const IDLE_HOLDERS: usize = 2;

/// Largest request the daemon decodes (a command line, a stdin write, an environment).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// Calls one connection may have open at once (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`): a
/// client's further calls wait in the client until one ends. Generous, because long polls and
/// streams (`wait`, `follow`, `Watch`) stay open for long; the memory of answers is bounded
/// apart from it, by [`answer_budget`].
pub const MAX_CALLS_PER_CONNECTION: u32 = 1024;

/// Tells systemd (Type=notify) that the daemon is ready, when it runs under systemd.
#[cfg(unix)]
fn notify_systemd_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = yieldshell_proto::session_config::os_bytes(&path);
    let result = if let Some(name) = bytes.strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|addr| sock.send_to_addr(b"READY=1", &addr))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            Ok(0)
        }
    } else {
        sock.send_to(b"READY=1", std::path::Path::new(&path))
    };
    if let Err(e) = result {
        tracing::warn!("sd_notify READY failed: {e}");
    }
}

/// Runs the daemon until SIGTERM/SIGINT or a `Shutdown` call, then stops every managed process
/// and exits — or, on SIGUSR1 or a `Shutdown` with `keep_processes`, exits leaving them to their
/// holders for the next daemon.
pub async fn run(config: DaemonConfig, log_dir: PathBuf) -> anyhow::Result<Ended> {
    record::create_private_dir(&config.state_dir)
        .with_context(|| format!("creating state directory {}", config.state_dir.display()))?;
    let lock = InstanceLock::acquire(&config.state_dir)?;
    #[cfg(unix)]
    reaper::become_subreaper().context("becoming a child subreaper")?;
    #[cfg(unix)]
    let reaper = Reaper::start().context("installing the SIGCHLD handler")?;
    let store = RecordStore::open(&config.state_dir).context("opening the record store")?;
    #[cfg(unix)]
    let holders = Arc::new(crate::holder::link::HolderPool::new(
        reaper.clone(),
        IDLE_HOLDERS,
        // Spare directories are renamed into place with Linux's renameat2 (link::Idle).
        cfg!(target_os = "linux").then(|| config.state_dir.join("spare")),
    ));
    let daemon = Arc::new(Daemon {
        config: config.clone(),
        #[cfg(unix)]
        reaper,
        #[cfg(unix)]
        holders: holders.clone(),
        registry: Registry::default(),
        running: Arc::new(limits::RunningCounts::default()),
        sessions: Sessions::default(),
        store,
        shutdown: CancellationToken::new(),
        detach: CancellationToken::new(),
        started_at: SystemTime::now(),
        started: Instant::now(),
        log_dir,
        spawn_lock: Mutex::new(()),
        starts_in_flight: std::sync::atomic::AtomicUsize::new(0),
        figures: Default::default(),
        watchers: Default::default(),
        twin_starts: Default::default(),
        actors: Mutex::new(Vec::new()),
        #[cfg(unix)]
        sandbox_kernel: tokio::sync::OnceCell::new(),
    });
    #[cfg(target_os = "linux")]
    holder::start::holder_program();
    let lost = recovery::recover(&daemon);
    let bound = listener::bind(&config.socket)?;
    // Only once the socket is bound: binding narrows the process's umask for a moment, and a
    // zygote or holder spawned meanwhile would keep it, and hand it to every command.
    #[cfg(unix)]
    tokio::task::spawn_blocking(move || holders.refill());
    tracing::info!(
        pid = std::process::id(),
        version = yieldshell_proto::VERSION,
        socket = %config.socket.display(),
        state_dir = %config.state_dir.display(),
        lock = %lock.path().display(),
        activated = bound.activated,
        records = daemon.registry.count(),
        lost,
        "yieldshelld ready"
    );

    spawn_signal_handlers(daemon.shutdown.clone(), daemon.detach.clone())?;
    let retention = {
        let d = daemon.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RETENTION_TICK);
            loop {
                tokio::select! {
                    _ = tick.tick() => d.apply_retention(),
                    _ = d.shutdown.cancelled() => break,
                }
            }
        })
    };

    let trimmer = tokio::spawn(heap::trim_when_idle(heap::QUIET));

    let svc = service::ControlService::new(daemon.clone());
    let grpc = tonic::service::interceptor::InterceptedService::new(
        ControlServer::new(svc)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(yieldshell_proto::client::MAX_MESSAGE_BYTES),
        listener::check_peer,
    );
    #[cfg(unix)]
    let incoming = {
        let handshake = config.file.handshake_timeout();
        tokio_stream::StreamExt::map(
            tokio_stream::wrappers::UnixListenerStream::new(bound.listener),
            move |conn| conn.map(|c| listener::FirstBytesDeadline::new(c, handshake)),
        )
    };
    #[cfg(windows)]
    let incoming = bound.listener.incoming();
    let shutdown = daemon.shutdown.clone();
    let mut server = tokio::spawn(
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            // Bounded in-flight calls per connection (docs/RELIABILITY.md L7): the answers a
            // connection has not read yet share its answer budget, and HTTP/2 lets a client
            // open at most this many calls at once (a well-behaved client queues the rest).
            .max_concurrent_streams(Some(MAX_CALLS_PER_CONNECTION))
            .layer(answer_budget::HoldAnswersLayer)
            .add_service(grpc)
            .serve_with_incoming_shutdown(incoming, async move { shutdown.cancelled().await }),
    );
    #[cfg(unix)]
    notify_systemd_ready();

    let server_result = tokio::select! {
        r = &mut server => Some(r),
        _ = daemon.shutdown.cancelled() => None,
    };
    daemon.shutdown.cancel();
    let keep = daemon.detach.is_cancelled();
    if keep {
        tracing::info!("shutting down: leaving managed processes to their holders");
    } else {
        tracing::info!("shutting down: stopping managed processes");
    }
    // An `exec` past its limit check before the cancel is counted under the spawn lock; one
    // after it refuses. Wait for the counted ones to register, so the sweep sees them.
    drop(daemon.spawn_lock.lock().unwrap_or_else(|e| e.into_inner()));
    let starts_deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while daemon
        .starts_in_flight
        .load(std::sync::atomic::Ordering::Acquire)
        > 0
        && tokio::time::Instant::now() < starts_deadline
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let timing = config.file.timing();
    let sweep = |grace: Duration| {
        let d = daemon.clone();
        async move {
            let mut leaders = Vec::new();
            let mut holders = Vec::new();
            let mut ids = Vec::new();
            for p in d.registry.all() {
                let s = p.state();
                if s.reported_running() || s.descendants > 0 {
                    leaders.extend(s.identity);
                    holders.extend(p.holder);
                    ids.push(p.facts.id.clone());
                }
            }
            if ids.is_empty() || d.detach.is_cancelled() {
                return;
            }
            tracing::info!(processes = ids.len(), "stopping every managed tree");
            let _ = tokio::task::spawn_blocking(move || {
                process::tree::stop_all(&leaders, &holders, &ids, grace);
            })
            .await;
        }
    };
    sweep(timing.shutdown_grace).await;
    let actors = daemon.take_actors();
    let waited = tokio::time::timeout(
        timing.shutdown_grace + Duration::from_secs(12),
        futures_join_all(actors),
    )
    .await;
    if waited.is_err() {
        tracing::error!("some process actors did not finish in time");
    }
    // Never leave a process running unsupervised: whatever still runs now gets SIGKILL (unless
    // its holder keeps it for the next daemon).
    sweep(Duration::ZERO).await;
    retention.abort();
    trimmer.abort();
    if server_result.is_none()
        && tokio::time::timeout(Duration::from_secs(2), &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    #[cfg(unix)]
    daemon.holders.drain();
    // Every queued record write reaches the disk before the daemon is gone.
    daemon.store.flush();
    listener::remove_if_ours(&bound.owned_path);
    tracing::info!("yieldshelld stopped");
    drop(lock);
    if let Some(Ok(Err(e))) = server_result {
        return Err(e).context("serving the control socket");
    }
    Ok(if keep {
        Ended::KeptProcesses
    } else {
        Ended::Stopped
    })
}

async fn futures_join_all(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

#[cfg(unix)]
fn spawn_signal_handlers(
    shutdown: CancellationToken,
    detach: CancellationToken,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // A stop that comes while tokio sets up a listener would be dropped: record it first.
    shutdown_signals::note()?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // SIGHUP (terminal hang-up) must not kill a daemon that owns processes: log and go on.
    let mut hup = signal(SignalKind::hangup())?;
    // SIGUSR1: exit leaving every process to its holder (a service manager's reload, which
    // then starts the daemon anew: packaging/systemd).
    let mut usr1 = signal(SignalKind::user_defined1())?;
    // Every listener is subscribed now; what came before may have reached none of them. A
    // SIGTERM/SIGINT among them wins over a SIGUSR1 (stopping is the default).
    let early = shutdown_signals::take();
    tokio::spawn(async move {
        if early.stop {
            tracing::info!("SIGTERM or SIGINT received while starting");
            shutdown.cancel();
            return;
        }
        if early.detach {
            tracing::info!("SIGUSR1 received while starting: exiting, processes kept");
            detach.cancel();
            shutdown.cancel();
            return;
        }
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM received"); break; }
                _ = int.recv() => { tracing::info!("SIGINT received"); break; }
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1 received: exiting, processes kept");
                    detach.cancel();
                    break;
                }
                _ = hup.recv() => { tracing::info!("SIGHUP ignored"); continue; }
            }
        }
        shutdown.cancel();
    });
    Ok(())
}

/// Windows: Ctrl+C or Ctrl+Break (a daemon run by hand in a console) shut the daemon down; a
/// started one has no console and is stopped with `Shutdown` (`yieldctl daemon stop`). There is
/// no equivalent of SIGUSR1 (processes end with the daemon here).
#[cfg(windows)]
fn spawn_signal_handlers(
    shutdown: CancellationToken,
    _detach: CancellationToken,
) -> anyhow::Result<()> {
    let mut ctrl_c = tokio::signal::windows::ctrl_c()?;
    let mut ctrl_break = tokio::signal::windows::ctrl_break()?;
    tokio::spawn(async move {
        tokio::select! {
            _ = ctrl_c.recv() => tracing::info!("Ctrl+C received"),
            _ = ctrl_break.recv() => tracing::info!("Ctrl+Break received"),
        }
        shutdown.cancel();
    });
    Ok(())
}

/// How the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every process was stopped with it.
    Stopped,
    /// Its processes were left running for the next daemon.
    KeptProcesses,
}

/// The exit status of a daemon that left its processes running (EX_TEMPFAIL): a service
/// manager restarts it on this status (`RestartForceExitStatus=` in the systemd unit).
pub const EXIT_KEPT_PROCESSES: u8 = 75;
