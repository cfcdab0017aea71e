//! The control socket: private directory, safe stale-socket handling, systemd socket activation,
//! and the peer-credential check on every call.
//!
//! Binding (docs/RELIABILITY.md): the socket's directory must be ours with mode 0700 (created so
//! if missing); a path that exists is replaced only when it is a socket *and* nothing answers on
//! it *and* we hold the instance lock; anything else (a live daemon, a regular file, a directory)
//! is an error that deletes nothing. The socket is created under umask 077, so it is never
//! reachable by others, not even for an instant; then it is chmod'ed 0600 for good measure.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tonic::transport::server::UdsConnectInfo;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::paths;

/// A bound (or inherited) listening socket.
#[derive(Debug)]
pub struct BoundSocket {
    /// The listener.
    pub listener: tokio::net::UnixListener,
    /// Path and inode when we created the file (so we remove only our own file on exit).
    pub owned_path: Option<(PathBuf, u64)>,
    /// True when systemd passed the socket in.
    pub activated: bool,
}

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A live daemon answers on the path.
    #[error("another yieldshelld already answers on {}; not replacing it", .0.display())]
    AlreadyServing(PathBuf),
    /// Something that is not a socket sits at the path.
    #[error("{} exists and is not a socket; not touching it (remove it or choose another YIELDSHELL_SOCKET)", .0.display())]
    NotASocket(PathBuf),
    /// The path or directory is unusable.
    #[error(transparent)]
    Path(#[from] paths::PathError),
    /// Binding failed.
    #[error("binding {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Takes the listening socket systemd passed (`LISTEN_FDS`/`LISTEN_PID`), if any.
fn from_systemd() -> Option<std::os::unix::net::UnixListener> {
    use std::os::fd::FromRawFd;
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || fds < 1 {
        return None;
    }
    const SD_LISTEN_FDS_START: i32 = 3;
    // SAFETY: systemd guarantees fd 3 is an open listening socket handed to this pid; we take
    // ownership once (the variables are checked against our pid, and nothing else uses fd 3).
    let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(SD_LISTEN_FDS_START) };
    // Inherited descriptors are not close-on-exec; managed processes must never get it.
    // SAFETY: fcntl on a valid fd.
    unsafe {
        libc::fcntl(SD_LISTEN_FDS_START, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Some(listener)
}

/// Binds `socket` (or adopts a systemd-activated one). Call only while holding the instance lock,
/// and before anything is spawned: the process's umask is 0177 while the socket is created, and
/// a child forked meanwhile would keep it.
pub fn bind(socket: &Path) -> Result<BoundSocket, BindError> {
    if let Some(std_listener) = from_systemd() {
        std_listener
            .set_nonblocking(true)
            .map_err(|source| BindError::Io {
                path: socket.to_path_buf(),
                source,
            })?;
        let listener =
            tokio::net::UnixListener::from_std(std_listener).map_err(|source| BindError::Io {
                path: socket.to_path_buf(),
                source,
            })?;
        return Ok(BoundSocket {
            listener,
            owned_path: None,
            activated: true,
        });
    }
    paths::check_socket_path_len(socket)?;
    let dir = socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    paths::ensure_private_dir(dir)?;
    let io_err = |source| BindError::Io {
        path: socket.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(socket) {
                Ok(_) => return Err(BindError::AlreadyServing(socket.to_path_buf())),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(socket = %socket.display(), "removing stale socket");
                    std::fs::remove_file(socket).map_err(io_err)?;
                }
                Err(e) => return Err(io_err(e)),
            }
        }
        Ok(_) => return Err(BindError::NotASocket(socket.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = tokio::net::UnixListener::bind(socket);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(io_err)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    let ino = std::fs::symlink_metadata(socket).map_err(io_err)?.ino();
    Ok(BoundSocket {
        listener,
        owned_path: Some((socket.to_path_buf(), ino)),
        activated: false,
    })
}

/// Removes the socket file at exit — only if it is still the one we created (a newer daemon may
/// have replaced it).
pub fn remove_if_ours(owned: &Option<(PathBuf, u64)>) {
    if let Some((path, ino)) = owned
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == *ino)
    {
        let _ = std::fs::remove_file(path);
    }
}

/// An accepted connection that must start talking within a deadline.
///
/// A client that connects and never sends the HTTP/2 preface (a crashed half-open peer, a
/// misbehaving tool) would otherwise hold a descriptor and a task for ever: HTTP/2 keep-alive
/// pings start only after the handshake (RELIABILITY B5). Once the first bytes arrive the
/// deadline is gone and keep-alive takes over.
#[derive(Debug)]
pub struct FirstBytesDeadline {
    inner: tokio::net::UnixStream,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl FirstBytesDeadline {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: tokio::net::UnixStream, within: std::time::Duration) -> Self {
        FirstBytesDeadline {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl tokio::io::AsyncRead for FirstBytesDeadline {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::future::Future;
        use std::task::Poll;
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let Some(deadline) = self.deadline.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.deadline = None,
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing after connecting",
                )));
            }
            _ => {}
        }
        polled
    }
}

impl tokio::io::AsyncWrite for FirstBytesDeadline {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the daemon knows of a connection, in every call's extensions: the peer, and the
/// connection's own budget for answers not yet sent ([`crate::answer_budget`]).
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The peer's credentials.
    pub peer: UdsConnectInfo,
    /// Shared by the connection's calls; made once per connection.
    pub answers: crate::answer_budget::AnswerBudget,
}

impl tonic::transport::server::Connected for FirstBytesDeadline {
    type ConnectInfo = ConnectionInfo;

    // Called once per accepted connection (tonic then copies the value into each call).
    fn connect_info(&self) -> Self::ConnectInfo {
        ConnectionInfo {
            peer: self.inner.connect_info(),
            answers: crate::answer_budget::AnswerBudget::new(),
        }
    }
}

/// gRPC interceptor: only our own uid may call (the peer's uid from `SO_PEERCRED` on Linux,
/// `getpeereid` on macOS, both through tokio's `peer_cred`).
pub fn check_peer(req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    let me = nix::unistd::geteuid().as_raw();
    let peer = req
        .extensions()
        .get::<ConnectionInfo>()
        .and_then(|i| i.peer.peer_cred)
        .map(|c| c.uid());
    match peer {
        Some(uid) if uid == me => Ok(req),
        other => {
            tracing::warn!(peer_uid = ?other, "refused a connection from another user");
            Err(ErrorKind::PermissionDenied.status(format!(
                "permission denied: this yieldshelld belongs to uid {me}; peer uid {}",
                other.map_or("unknown".to_string(), |u| u.to_string())
            )))
        }
    }
}
