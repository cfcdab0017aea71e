//! Handshake, health, sessions and shutdown.

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::path_bytes;
use yieldshell_proto::{PROTOCOL_VERSION, VERSION};

use super::ControlService;
use crate::status::unix_ms;

/// The version this daemon reports (`Hello`, `Status`). A debug build appends
/// `YIELDSHELL_TEST_VERSION_SUFFIX`, so a test can run a second daemon that reports another
/// version and watch it take over from the first (issue 13: an upgrade keeps every process);
/// release builds have no such override.
fn reported_version() -> String {
    #[cfg(debug_assertions)]
    if let Some(suffix) = std::env::var_os("YIELDSHELL_TEST_VERSION_SUFFIX") {
        return format!("{VERSION}{}", suffix.to_string_lossy());
    }
    VERSION.to_string()
}

pub(super) fn hello(
    svc: &ControlService,
    req: pb::HelloRequest,
) -> Result<pb::HelloResponse, tonic::Status> {
    if req.protocol_version != PROTOCOL_VERSION {
        return Err(ErrorKind::ProtocolMismatch.status(format!(
            "{} {} speaks control protocol {}, but this yieldshelld {VERSION} (pid {}) speaks {PROTOCOL_VERSION}. \
             Upgrade the client, or run `yieldctl daemon restart` to replace this daemon with the \
             installed one (its running processes are kept)",
            req.client_name,
            req.client_version,
            req.protocol_version,
            std::process::id()
        )));
    }
    tracing::debug!(client = %req.client_name, version = %req.client_version, "hello");
    let _ = svc;
    Ok(pb::HelloResponse {
        daemon_version: reported_version(),
        protocol_version: PROTOCOL_VERSION,
        pid: std::process::id(),
    })
}

/// Resident memory of this process (Linux: `/proc/self/statm`; macOS: `proc_pidinfo`'s task
/// info; elsewhere unknown, 0).
fn rss_bytes() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let pages = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        pages * u64::try_from(page).unwrap_or(4096)
    }
    #[cfg(target_os = "macos")]
    {
        crate::process::darwin::resident_bytes(std::process::id() as i32).unwrap_or(0)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        0
    }
}

pub(super) fn status(svc: &ControlService) -> pb::StatusResponse {
    let d = &svc.daemon;
    let all = d.registry.all();
    let running = all.iter().filter(|p| p.is_running()).count();
    let degraded = all
        .iter()
        .filter(|p| p.output.spool_health().1.is_some())
        .count();
    pb::StatusResponse {
        daemon_version: reported_version(),
        protocol_version: PROTOCOL_VERSION,
        pid: std::process::id(),
        uptime_ms: u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        started_at_unix_ms: unix_ms(d.started_at),
        socket_path: path_bytes(&d.config.socket),
        state_dir: path_bytes(&d.config.state_dir),
        log_file: path_bytes(&d.log_dir),
        running: u32::try_from(running).unwrap_or(u32::MAX),
        records: u32::try_from(all.len()).unwrap_or(u32::MAX),
        sessions: u32::try_from(d.sessions.count()).unwrap_or(u32::MAX),
        rss_bytes: rss_bytes(),
        containment: crate::process::tree::containment_name().to_string(),
        spool_degraded: u32::try_from(degraded).unwrap_or(u32::MAX),
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks() as u64,
        // Windows has no holders: its processes end with the daemon.
        holders: cfg!(unix),
    }
}

pub(super) fn open_session(
    svc: &ControlService,
    req: pb::OpenSessionRequest,
) -> Result<pb::OpenSessionResponse, tonic::Status> {
    let client = req.client_name.clone();
    let session = svc
        .daemon
        .sessions
        .open(req, &svc.daemon.config.file.policy)?;
    tracing::debug!(session = %session.id, %client, "session opened");
    Ok(pb::OpenSessionResponse {
        session_id: session.id.clone(),
    })
}

pub(super) fn shutdown(svc: &ControlService, req: &pb::ShutdownRequest) -> pb::ShutdownResponse {
    let running = svc
        .daemon
        .registry
        .all()
        .iter()
        .filter(|p| p.is_running())
        .count();
    let running = u32::try_from(running).unwrap_or(u32::MAX);
    // Windows has no holders: its processes end with the daemon whatever is asked.
    let keep = cfg!(unix) && req.keep_processes;
    tracing::info!(
        running,
        keep_processes = keep,
        "shutdown requested over the control socket"
    );
    if keep {
        // Before the shutdown itself: every actor lets go of its process (the holders carry
        // on alone), and no sweep stops a tree.
        svc.daemon.detach.cancel();
    }
    svc.daemon.shutdown.cancel();
    if keep {
        pb::ShutdownResponse {
            stopping: 0,
            kept: running,
        }
    } else {
        pb::ShutdownResponse {
            stopping: running,
            kept: 0,
        }
    }
}
