//! Connecting to the daemon: socket transport, version handshake, race-safe auto-start, and a
//! [`Session`] that survives daemon restarts.
//!
//! # Auto-start
//! [`connect_or_start`] follows tmux's and atuin's pattern so that any number of concurrent
//! clients leave exactly one daemon:
//! 1. connect and handshake; done if a daemon answers;
//! 2. otherwise take the start lock (`flock` on `yieldshelld.start.lock` beside the socket);
//! 3. connect again — another client may have started the daemon meanwhile;
//! 4. spawn `yieldshelld` fully detached (new session, stdio to a start log, a minimal
//!    environment without the client's secrets), poll until it answers, then release the lock.
//!
//! The daemon's own instance lock is the last line of defence: a second daemon exits at once.
//! `YIELDSHELL_NO_AUTOSTART=1` turns step 4 into a clear error.
//!
//! # Deadlines
//! Every call is bounded ([`crate::deadlines`] has the rules): connect and handshake by
//! [`Deadlines::connect`], each RPC by [`Deadlines::rpc`] or, for long polls, by their own
//! duration plus that margin. A daemon that does not answer in time (stopped with `kill -STOP`,
//! hung) is reported as [`ClientError::Unresponsive`], kind `daemon_unavailable`, naming the pid
//! from its instance lock; it is never auto-started over, since it still holds that lock.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::deadlines::Deadlines;
use crate::errors::ErrorKind;
use crate::instance_lock;
use crate::paths::{self, PathError};
use crate::pb;
use crate::pb::control_client::ControlClient;

mod daemon_binary;
pub use daemon_binary::{DAEMON_FILE_NAME, DaemonBinaryNotFound, find_daemon_binary};

mod session;

pub use session::Session;

/// Largest message either side accepts. Responses are bounded by `max_output_bytes` caps far
/// below this; the limit exists so a bug or hostile peer cannot make us allocate without bound.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How long a client waits for a daemon it started to answer.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(15);

/// A connected, handshaken control-plane client.
pub type Client = ControlClient<Channel>;

/// Why a client could not reach or use the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers on the socket, and this call does not start a daemon (auto-start is
    /// off, or the command never starts one, as `yieldctl daemon status`).
    #[error(
        "no yieldshelld answers on {}: {reason}. Start it with `yieldshelld` (or `yieldctl daemon start`){}",
        socket.display(), autostart_remedy(*autostart_off)
    )]
    NoDaemon {
        /// The socket tried.
        socket: PathBuf,
        /// The connection error.
        reason: String,
        /// `YIELDSHELL_NO_AUTOSTART` is set, so clients that would start a daemon do not: the
        /// message names it only then (a person told to unset a variable that is not set
        /// looks for a problem that is not there).
        autostart_off: bool,
    },
    /// We tried to start the daemon and it did not come up.
    #[error("could not start yieldshelld for {}: {detail}", socket.display())]
    StartFailed {
        /// The socket the daemon should have bound.
        socket: PathBuf,
        /// What went wrong, with the daemon's own error output when there is some.
        detail: String,
    },
    /// The daemon speaks another protocol version.
    #[error("{0}")]
    ProtocolMismatch(String),
    /// A private directory could not be prepared.
    #[error(transparent)]
    Path(#[from] PathError),
    /// The daemon answered with an error.
    #[error("{}", .0.message())]
    Rpc(tonic::Status),
    /// The connection broke during a call (for example the daemon restarted). The next call
    /// reconnects.
    #[error(
        "lost the connection to yieldshelld ({0}); the daemon may have restarted — the next call reconnects"
    )]
    ConnectionLost(String),
    /// The connection could not be re-established for a call (no socket, or nobody listening on
    /// it: `ENOENT`, `ECONNREFUSED`), so the request was never delivered and may be sent again.
    #[error(
        "could not reach yieldshelld ({0}); the request was not delivered — the next call reconnects"
    )]
    NotDelivered(String),
    /// A daemon holds the socket but did not answer within the deadline: it is stopped
    /// (`kill -STOP`), hung or badly overloaded.
    #[error("{}", unresponsive_message(.what, *.waited, .pid, .lock_file, .socket))]
    Unresponsive {
        /// The call that got no answer (`the handshake`, `List`, …).
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The daemon's pid from its instance lock, when the lock file names one.
        pid: Option<u32>,
        /// The instance lock the pid was read from.
        lock_file: PathBuf,
        /// The socket.
        socket: PathBuf,
    },
}

/// What to say about a daemon that does not answer: which one, and what the user can do.
fn unresponsive_message(
    what: &str,
    waited: Duration,
    pid: &Option<u32>,
    lock_file: &Path,
    socket: &Path,
) -> String {
    let (who, pid) = match pid {
        Some(pid) => (format!("yieldshelld (pid {pid})"), pid.to_string()),
        None => (
            format!(
                "yieldshelld (pid unknown: {} names none)",
                lock_file.display()
            ),
            "<pid>".to_string(),
        ),
    };
    format!(
        "{who} did not answer {what} within {waited:?} on {}: it is stopped (kill -STOP, Ctrl-Z), \
         hung or overloaded. Check it with `yieldctl daemon status`; resume a stopped daemon with \
         `kill -CONT {pid}`; restart a hung one with `kill {pid}` (`kill -9 {pid}` if it does not \
         exit) and `yieldctl daemon start`",
        socket.display()
    )
}

/// The end of a [`ClientError::NoDaemon`] message: how to let clients start the daemon, when
/// `YIELDSHELL_NO_AUTOSTART` is what keeps them from it.
fn autostart_remedy(autostart_off: bool) -> String {
    if autostart_off {
        format!(
            ", or unset {} to let clients start it",
            paths::ENV_NO_AUTOSTART
        )
    } else {
        String::new()
    }
}

impl ClientError {
    /// The domain error kind, for exit codes and JSON bodies.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Rpc(status) => ErrorKind::of_status(status),
            ClientError::ProtocolMismatch(_) => ErrorKind::ProtocolMismatch,
            ClientError::NoDaemon { .. }
            | ClientError::StartFailed { .. }
            | ClientError::ConnectionLost(_)
            | ClientError::NotDelivered(_)
            | ClientError::Unresponsive { .. } => ErrorKind::DaemonUnavailable,
            ClientError::Path(_) => ErrorKind::Internal,
        }
    }
}

/// How to find (and if need be start) the daemon.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// Passed to a daemon we start (`None`: its default).
    pub state_dir: Option<PathBuf>,
    /// Start a daemon when none answers.
    pub autostart: bool,
    /// The daemon binary to start (`None`: next to this executable, then `PATH`).
    pub daemon_bin: Option<PathBuf>,
    /// Reported in the handshake and the daemon's log.
    pub client_name: String,
    /// How long to wait for a started daemon.
    pub start_timeout: Duration,
    /// How long to wait for each call (see [`crate::deadlines`]).
    pub deadlines: Deadlines,
}

impl ConnectOptions {
    /// Options from the `YIELDSHELL_*` environment.
    pub fn from_env(client_name: &str) -> ConnectOptions {
        ConnectOptions {
            socket: paths::default_socket_path(),
            state_dir: std::env::var_os(paths::ENV_STATE_DIR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            autostart: paths::autostart_enabled(),
            daemon_bin: std::env::var_os(paths::ENV_DAEMON_BIN)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            client_name: client_name.to_string(),
            start_timeout: DEFAULT_START_TIMEOUT,
            deadlines: Deadlines::default(),
        }
    }

    /// The state directory whose instance lock names the daemon: the configured one, else the
    /// default. `None` when neither can be determined.
    pub fn effective_state_dir(&self) -> Option<PathBuf> {
        self.state_dir
            .clone()
            .or_else(|| paths::default_state_dir().ok())
    }

    /// The error for a daemon that did not answer `what` within `waited`, naming its pid.
    pub fn unresponsive(&self, what: &str, waited: Duration) -> ClientError {
        let state_dir = self.effective_state_dir();
        ClientError::Unresponsive {
            what: what.to_string(),
            waited,
            pid: state_dir.as_deref().and_then(instance_lock::recorded_pid),
            lock_file: state_dir.map_or_else(
                || PathBuf::from(instance_lock::LOCK_FILE_NAME),
                |dir| instance_lock::lock_path(&dir),
            ),
            socket: self.socket.clone(),
        }
    }
}

/// Runs one call on a raw client within `deadline`: the answer, the daemon's error, or
/// [`ClientError::Unresponsive`] when it does not answer in time. A broken connection is
/// [`ClientError::ConnectionLost`].
pub async fn within<T>(
    opts: &ConnectOptions,
    what: &str,
    deadline: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ClientError> {
    match tokio::time::timeout(deadline, call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(rpc_error(status)),
        Err(_) => Err(opts.unresponsive(what, deadline)),
    }
}

/// Runs one unary call on a raw client within [`Deadlines::rpc`] (see [`within`]).
pub async fn unary<T>(
    opts: &ConnectOptions,
    what: &str,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ClientError> {
    within(opts, what, opts.deadlines.rpc, call).await
}

/// A daemon's error status as a client error: transport failures are a lost connection, or —
/// when the failure was in connecting — a request that was never delivered.
fn rpc_error(status: tonic::Status) -> ClientError {
    match ErrorKind::of_status(&status) {
        ErrorKind::DaemonUnavailable if failed_to_connect(&status) => {
            ClientError::NotDelivered(status.message().to_string())
        }
        ErrorKind::DaemonUnavailable => ClientError::ConnectionLost(status.message().to_string()),
        _ => ClientError::Rpc(status),
    }
}

/// Whether a transport failure came from (re)connecting the socket: `ENOENT` (no socket) or
/// `ECONNREFUSED` (nobody listens). Only `connect` fails that way — a request on a connection
/// that was established fails with a reset or a broken pipe — so the request never left.
fn failed_to_connect(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && matches!(
                io.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            )
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// A handshaken connection.
#[derive(Debug, Clone)]
pub struct Connection {
    /// The gRPC client (cheap to clone).
    pub client: Client,
    /// The daemon's handshake answer.
    pub hello: pb::HelloResponse,
    /// Whether this call started the daemon.
    pub started_daemon: bool,
}

fn describe_transport_error(err: &(dyn std::error::Error + 'static)) -> String {
    // tonic's transport error prints only "transport error"; the io::Error underneath says why.
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.dedup();
    parts.join(": ")
}

#[cfg(unix)]
async fn open_channel(socket: &Path) -> Result<Channel, String> {
    use hyper_util::rt::TokioIo;
    let path = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://yieldshelld.local")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| describe_transport_error(&e))
}

#[cfg(windows)]
async fn open_channel(socket: &Path) -> Result<Channel, String> {
    use hyper_util::rt::TokioIo;
    use interprocess::local_socket::{
        GenericFilePath, ToFsName, tokio::Stream, traits::tokio::Stream as _,
    };
    let path = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://yieldshelld.local")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let name = path.as_os_str().to_fs_name::<GenericFilePath>()?;
                let stream = Stream::connect(name).await?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| describe_transport_error(&e))
}

/// What one connection attempt found.
enum Probe {
    /// A daemon answered and the handshake succeeded.
    Connected(Connection),
    /// Nothing answers (yet); the reason goes into the error a caller reports.
    NoAnswer(String),
    /// A daemon answered but cannot be used (another protocol version, a refusal).
    Unusable(ClientError),
}

/// Connects and handshakes, without starting a daemon, within [`Deadlines::connect`]. A daemon
/// that accepts the connection but does not answer in time is unusable (it still holds the
/// instance lock, so starting another would fail).
async fn try_connect(opts: &ConnectOptions) -> Probe {
    if let Err(e) = paths::check_socket_path_len(&opts.socket) {
        return Probe::Unusable(e.into());
    }
    let deadline = opts.deadlines.connect;
    match tokio::time::timeout(deadline, connect_and_handshake(opts)).await {
        Ok(probe) => probe,
        Err(_) => Probe::Unusable(opts.unresponsive("the handshake", deadline)),
    }
}

async fn connect_and_handshake(opts: &ConnectOptions) -> Probe {
    let channel = match open_channel(&opts.socket).await {
        Ok(c) => c,
        Err(reason) => return Probe::NoAnswer(reason),
    };
    let mut client = ControlClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let hello = client
        .hello(pb::HelloRequest {
            protocol_version: crate::PROTOCOL_VERSION,
            client_name: opts.client_name.clone(),
            client_version: crate::VERSION.to_string(),
        })
        .await;
    match hello {
        Ok(resp) => Probe::Connected(Connection {
            client,
            hello: resp.into_inner(),
            started_daemon: false,
        }),
        Err(status) => match ErrorKind::of_status(&status) {
            ErrorKind::ProtocolMismatch => Probe::Unusable(ClientError::ProtocolMismatch(
                restart_hint(status.message()),
            )),
            ErrorKind::DaemonUnavailable => Probe::NoAnswer(status.message().to_string()),
            _ => Probe::Unusable(ClientError::Rpc(status)),
        },
    }
}

/// A client for a running daemon without the handshake, for the calls that must reach a
/// daemon of another protocol version too (`Status`, `Shutdown`: `yieldctl daemon restart`
/// replaces exactly such a daemon). Never starts one.
pub async fn connect_any_version(opts: &ConnectOptions) -> Result<Client, ClientError> {
    paths::check_socket_path_len(&opts.socket)?;
    let channel = tokio::time::timeout(opts.deadlines.connect, open_channel(&opts.socket))
        .await
        .map_err(|_| opts.unresponsive("connecting", opts.deadlines.connect))?
        .map_err(|reason| ClientError::NoDaemon {
            socket: opts.socket.clone(),
            reason,
            autostart_off: !paths::autostart_enabled(),
        })?;
    Ok(ControlClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// A daemon's protocol-mismatch message, ending with the one remedy that loses nothing: daemons
/// from before process holders advised `daemon stop` (which stops every process).
fn restart_hint(message: &str) -> String {
    if message.contains("yieldctl daemon restart") {
        return message.to_string();
    }
    let facts = message
        .split(". Upgrade the client")
        .next()
        .unwrap_or(message);
    format!(
        "{facts}. Run `yieldctl daemon restart` to replace it with the installed daemon \
         (running processes are kept)"
    )
}

/// Connects to a running daemon; never starts one.
pub async fn connect(opts: &ConnectOptions) -> Result<Connection, ClientError> {
    match try_connect(opts).await {
        Probe::Connected(c) => Ok(c),
        Probe::NoAnswer(reason) => Err(ClientError::NoDaemon {
            socket: opts.socket.clone(),
            reason,
            autostart_off: !paths::autostart_enabled(),
        }),
        Probe::Unusable(e) => Err(e),
    }
}

/// Connects to the daemon, starting it first when none answers and `opts.autostart` is set.
pub async fn connect_or_start(opts: &ConnectOptions) -> Result<Connection, ClientError> {
    let first = match try_connect(opts).await {
        Probe::Connected(c) => return Ok(c),
        Probe::Unusable(e) => return Err(e),
        Probe::NoAnswer(reason) => reason,
    };
    if !opts.autostart {
        return Err(ClientError::NoDaemon {
            socket: opts.socket.clone(),
            reason: first,
            autostart_off: !paths::autostart_enabled(),
        });
    }
    let socket_dir = socket_dir(&opts.socket);
    paths::ensure_private_dir(&socket_dir)?;

    let deadline = Instant::now() + opts.start_timeout;
    let lock = acquire_start_lock(&socket_dir, deadline, &opts.socket).await?;
    // Another client may have started the daemon while we waited for the lock.
    match try_connect(opts).await {
        Probe::Connected(c) => return Ok(c),
        Probe::Unusable(e) => return Err(e),
        Probe::NoAnswer(_) => {}
    }
    let result = start_daemon(opts, &socket_dir, deadline).await;
    drop(lock);
    result
}

/// The directory holding the socket, the start lock and the start log.
///
/// Windows: a named pipe (`\\.\pipe\NAME`) lives in no directory, so the lock and the log go
/// to `<temp>\yieldshell-NAME`, one directory per pipe name.
fn socket_dir(socket: &Path) -> PathBuf {
    #[cfg(windows)]
    if let Some(name) = socket
        .to_str()
        .and_then(|s| s.strip_prefix(r"\\.\pipe\"))
        .filter(|n| !n.is_empty() && !n.contains('\\'))
    {
        return std::env::temp_dir().join(format!("yieldshell-{name}"));
    }
    socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// Opens (creating it) the start lock beside the socket, which clients hold while they start a
/// daemon.
fn open_start_lock(socket_dir: &Path) -> io::Result<(std::fs::File, PathBuf)> {
    let path = socket_dir.join("yieldshelld.start.lock");
    // std opens files close-on-exec, so the daemon we spawn never inherits this lock.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    Ok((file, path))
}

/// Whether the daemon `pid` serving `socket` with `state_dir` has exited: its instance lock is
/// free, or already names another daemon. `None` means "ask again": another client holds the
/// start lock, and the probe (which takes the instance lock for an instant) must not make that
/// client's new daemon find its instance lock taken.
pub fn daemon_has_exited(socket: &Path, state_dir: &Path, pid: u32) -> io::Result<Option<bool>> {
    if instance_lock::recorded_pid(state_dir).is_some_and(|recorded| recorded != pid) {
        return Ok(Some(true));
    }
    // A named pipe's lock directory exists only once a client has started a daemon on it.
    #[cfg(windows)]
    std::fs::create_dir_all(socket_dir(socket))?;
    let (start_lock, _) = open_start_lock(&socket_dir(socket))?;
    match start_lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    let held = instance_lock::is_held(state_dir)?;
    drop(start_lock);
    Ok(Some(!held))
}

async fn acquire_start_lock(
    socket_dir: &Path,
    deadline: Instant,
    socket: &Path,
) -> Result<std::fs::File, ClientError> {
    let (file, path) = open_start_lock(socket_dir).map_err(|source| PathError::Io {
        what: "opening start lock",
        path: socket_dir.join("yieldshelld.start.lock"),
        source,
    })?;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(PathError::Io {
                    what: "locking",
                    path,
                    source,
                }
                .into());
            }
        }
        if Instant::now() >= deadline {
            return Err(ClientError::StartFailed {
                socket: socket.to_path_buf(),
                detail: format!(
                    "another client holds {} and its daemon did not answer in time",
                    path.display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Variables an auto-started daemon inherits: enough to find programs, home and locale, and the
/// `YIELDSHELL_*` location settings. Never the client's secrets: commands get the session's
/// environment from each client anyway.
fn inherited_by_daemon(name: &str) -> bool {
    matches!(
        name,
        "PATH" | "HOME" | "USER" | "LOGNAME" | "LANG" | "TZ" | "TMPDIR" | "RUST_LOG"
    ) || name.starts_with("LC_")
        || name.starts_with("XDG_")
        || (name.starts_with("YIELDSHELL_")
            && matches!(
                name,
                paths::ENV_SOCKET | paths::ENV_STATE_DIR | paths::ENV_CONFIG | "YIELDSHELL_LOG"
            ))
}

async fn start_daemon(
    opts: &ConnectOptions,
    socket_dir: &Path,
    deadline: Instant,
) -> Result<Connection, ClientError> {
    let fail = |detail: String| ClientError::StartFailed {
        socket: opts.socket.clone(),
        detail,
    };
    let bin = find_daemon_binary(opts.daemon_bin.as_deref()).map_err(|e| fail(e.to_string()))?;
    let start_log_path = socket_dir.join("yieldshelld.start.log");
    let mut child = spawn_daemon(opts, &bin, &start_log_path).map_err(fail)?;
    let mut delay = Duration::from_millis(2);
    loop {
        match try_connect(opts).await {
            Probe::Connected(mut c) => {
                c.started_daemon = true;
                // The daemon is our child until we exit: reap it whenever it ends so it never
                // lingers as a zombie of a long-lived client.
                std::thread::spawn(move || {
                    let _ = child.wait();
                });
                return Ok(c);
            }
            Probe::Unusable(e) => return Err(e),
            Probe::NoAnswer(reason) => {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(&start_log_path).unwrap_or_default();
                    let exited = format!(
                        "{} exited ({status}){}",
                        bin.display(),
                        if log.trim().is_empty() {
                            String::new()
                        } else {
                            format!(": {}", log.trim())
                        }
                    );
                    if status.code() != Some(i32::from(instance_lock::EXIT_LOCK_HELD)) {
                        return Err(fail(exited));
                    }
                    // Another daemon holds the state directory: typically the one before
                    // ours, still exiting (a `daemon restart` or `stop` has closed its socket,
                    // and it runs its grace before it lets go). Wait for it, then start ours
                    // again.
                    match wait_for_exiting_daemon(opts, deadline).await {
                        Exiting::Gone => {
                            child = spawn_daemon(opts, &bin, &start_log_path).map_err(fail)?;
                            continue;
                        }
                        Exiting::Answers(c) => return Ok(c),
                        Exiting::StillHeld(pid) => {
                            return Err(fail(format!(
                                "{exited}; yieldshelld{} still held the state directory after \
                                 {:?}",
                                pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                                opts.start_timeout
                            )));
                        }
                    }
                }
                if Instant::now() >= deadline {
                    return Err(fail(format!(
                        "{} did not answer within {:?} (last error: {reason}); see {}",
                        bin.display(),
                        opts.start_timeout,
                        start_log_path.display()
                    )));
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// Runs `yieldshelld` for `opts`, detached, its output to the start log (truncated).
fn spawn_daemon(
    opts: &ConnectOptions,
    bin: &Path,
    start_log_path: &Path,
) -> Result<std::process::Child, String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    // Never truncate through a symlink planted in the socket directory (RELIABILITY S3).
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        nix::fcntl::OFlag::O_NOFOLLOW.bits(),
    );
    let start_log = options
        .open(start_log_path)
        .map_err(|e| format!("creating {}: {e}", start_log_path.display()))?;
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("--socket").arg(&opts.socket);
    if let Some(state) = &opts.state_dir {
        cmd.arg("--state-dir").arg(state);
    }
    cmd.env_clear();
    for (k, v) in std::env::vars_os() {
        if k.to_str().is_some_and(inherited_by_daemon) {
            cmd.env(k, v);
        }
    }
    cmd.stdin(std::process::Stdio::null());
    let out = start_log
        .try_clone()
        .map_err(|e| format!("duplicating start log: {e}"))?;
    cmd.stdout(out).stderr(start_log);
    detach(&mut cmd);
    cmd.spawn()
        .map_err(|e| format!("running {}: {e}", bin.display()))
}

/// What became of the daemon holding the state directory when ours could not start.
enum Exiting {
    /// No daemon holds it (any more): start ours again.
    Gone,
    /// A daemon answers on the socket after all.
    Answers(Connection),
    /// It still held the state directory at the deadline (the pid its lock names).
    StillHeld(Option<u32>),
}

/// After a daemon we started found the instance lock held: waits, until `deadline`, for the
/// daemon holding it to let go (or to answer on our socket). The caller holds the start lock,
/// so the lock probes here race no other client's start.
async fn wait_for_exiting_daemon(opts: &ConnectOptions, deadline: Instant) -> Exiting {
    let Some(state_dir) = opts.effective_state_dir() else {
        return Exiting::StillHeld(None);
    };
    loop {
        if let Probe::Connected(c) = try_connect(opts).await {
            return Exiting::Answers(c);
        }
        if !instance_lock::is_held(&state_dir).unwrap_or(true) {
            return Exiting::Gone;
        }
        if Instant::now() >= deadline {
            return Exiting::StillHeld(instance_lock::recorded_pid(&state_dir));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(unix)]
fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and calls only setsid(2), which is
    // async-signal-safe. A new session puts the daemon outside the client's process group and
    // terminal, so an editor killing its group (or hanging up) does not reach it.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
}

#[cfg(windows)]
fn detach(cmd: &mut std::process::Command) {
    use std::os::windows::process::CommandExt;
    const DETACHED_PROCESS: u32 = 0x0000_0008;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    const CREATE_NO_WINDOW: u32 = 0x0800_0000;
    // No console of the client's (its Ctrl+C and closing never reach the daemon), and never a
    // console window of its own.
    cmd.creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_inherits_no_secrets_or_policy() {
        assert!(inherited_by_daemon("PATH"));
        assert!(inherited_by_daemon("XDG_RUNTIME_DIR"));
        assert!(inherited_by_daemon("YIELDSHELL_SOCKET"));
        assert!(!inherited_by_daemon("GITHUB_TOKEN"));
        assert!(!inherited_by_daemon("YIELDSHELL_ALLOWED_CWDS"));
        assert!(!inherited_by_daemon("AWS_SECRET_ACCESS_KEY"));
    }

    #[test]
    fn a_daemon_of_another_protocol_is_answered_with_daemon_restart() {
        // What a daemon from before process holders said: its advice stopped every process.
        let old = "mcp-yieldshell 0.2.0 speaks control protocol 2, but this yieldshelld 0.1.0 \
                   (pid 7) speaks 1. Upgrade the client, or run `yieldctl daemon stop` and \
                   retry (this stops its running processes)";
        let hint = restart_hint(old);
        assert!(
            hint.starts_with("mcp-yieldshell 0.2.0 speaks control protocol 2")
                && hint.contains("Run `yieldctl daemon restart`")
                && hint.contains("running processes are kept")
                && !hint.contains("daemon stop"),
            "{hint}"
        );
        // A current daemon's message already names it, and is passed on as it is.
        let new = "… Upgrade the client, or run `yieldctl daemon restart` to replace this daemon";
        assert_eq!(restart_hint(new), new);
    }

    #[test]
    fn an_unresponsive_daemon_is_named_with_what_to_do() {
        let error = |pid| ClientError::Unresponsive {
            what: "List".into(),
            waited: Duration::from_secs(20),
            pid,
            lock_file: PathBuf::from("state/yieldshelld.lock"),
            socket: PathBuf::from("run/d.sock"),
        };
        let known = error(Some(4242));
        assert_eq!(known.kind(), ErrorKind::DaemonUnavailable);
        let text = known.to_string();
        for part in [
            "yieldshelld (pid 4242) did not answer List within 20s on run/d.sock",
            "yieldctl daemon status",
            "kill -CONT 4242",
            "yieldctl daemon start",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        let unknown = error(None).to_string();
        assert!(
            unknown.contains("pid unknown: state/yieldshelld.lock names none")
                && unknown.contains("kill -CONT <pid>"),
            "{unknown}"
        );
    }
}
