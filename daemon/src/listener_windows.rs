//! Windows: the control plane on a named pipe (`\\.\pipe\yieldshell-<user>` by default), mounted
//! as `listener` so the daemon's startup is the same code as on Unix.
//!
//! Access control, as implemented:
//! - the first instance is created with `FILE_FLAG_FIRST_PIPE_INSTANCE`, so a pipe of that name
//!   that already exists (a live daemon, or a squatter who created it first) is an error, never
//!   shared;
//! - every instance rejects remote clients (`PIPE_REJECT_REMOTE_CLIENTS`);
//! - every instance carries a protected DACL granting access to the daemon's own user SID only
//!   (`D:P(A;;GA;;;<sid>)`), so other users — administrators included, unless they take
//!   ownership — cannot open it. Should the SID not be found, the pipe falls back to the default
//!   DACL (the creator and administrators full access, everyone else read-only, which cannot
//!   send a request) and the daemon logs a warning.
//!
//! There is no peer check per call beyond that (the Unix one compares `SO_PEERCRED` uids): the
//! DACL decides who can connect at all. Connections are not given a first-bytes deadline here.

use std::ffi::c_void;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::windows::named_pipe::{NamedPipeServer, ServerOptions};
use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, LocalFree};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES, TOKEN_QUERY, TOKEN_USER,
    TokenUser,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// A listening named pipe.
#[derive(Debug)]
pub struct BoundSocket {
    /// The listener.
    pub listener: PipeListener,
    /// Unix only (a socket file to remove); always `None` here: a pipe vanishes with its handles.
    pub owned_path: Option<(PathBuf, u64)>,
    /// Unix only (systemd activation); always false here.
    pub activated: bool,
}

/// Why the pipe could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The pipe name exists: another daemon (or someone else) created it first.
    #[error("{} already exists: another yieldshelld serves it (or another program took the name); not sharing it", .0.display())]
    AlreadyServing(PathBuf),
    /// Creating the pipe failed.
    #[error("creating {}: {source}", path.display())]
    Io {
        /// The pipe name.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// A security descriptor for the current user only, freed when dropped.
struct UserOnly {
    descriptor: PSECURITY_DESCRIPTOR,
}

// SAFETY: the descriptor is immutable memory owned by this value, only read by CreateNamedPipe.
unsafe impl Send for UserOnly {}
// SAFETY: as above.
unsafe impl Sync for UserOnly {}

impl Drop for UserOnly {
    fn drop(&mut self) {
        // SAFETY: allocated by ConvertStringSecurityDescriptorToSecurityDescriptorW with
        // LocalAlloc, freed once.
        unsafe {
            LocalFree(self.descriptor);
        }
    }
}

impl std::fmt::Debug for UserOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserOnly")
    }
}

/// The current user's SID as a string (`S-1-5-21-…`).
fn current_user_sid() -> io::Result<String> {
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: the pseudo-handle of this process; the token handle is closed below.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // TOKEN_USER plus the SID it points into: 256 bytes hold any SID (at most 68 bytes).
    let mut buf = [0u64; 32];
    let mut len = 0u32;
    // SAFETY: a valid token handle and a buffer of the size given, aligned for TOKEN_USER.
    let ok = unsafe {
        GetTokenInformation(
            token,
            TokenUser,
            buf.as_mut_ptr().cast(),
            size_of_val(&buf) as u32,
            &mut len,
        )
    };
    // SAFETY: our token handle, closed once.
    unsafe {
        CloseHandle(token);
    }
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call filled the buffer with a TOKEN_USER whose SID points into it.
    let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: a valid SID; the string is LocalAlloc'ed and freed below.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a NUL-terminated UTF-16 string from the call above.
    let s = unsafe {
        let n = (0..).take_while(|&i| *text.add(i) != 0).count();
        String::from_utf16_lossy(std::slice::from_raw_parts(text, n))
    };
    // SAFETY: allocated by ConvertSidToStringSidW, freed once.
    unsafe {
        LocalFree(text.cast());
    }
    Ok(s)
}

/// A protected DACL that grants all access to the current user and no one else.
fn user_only_descriptor() -> io::Result<UserOnly> {
    let sddl: Vec<u16> = format!("D:P(A;;GA;;;{})", current_user_sid()?)
        .encode_utf16()
        .chain([0])
        .collect();
    let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a NUL-terminated SDDL string; the descriptor is freed by `UserOnly`.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            sddl.as_ptr(),
            SDDL_REVISION_1,
            &mut descriptor,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UserOnly { descriptor })
}

/// Creates pipe instances of one name, each with the same access control.
#[derive(Debug)]
pub struct PipeListener {
    name: PathBuf,
    descriptor: Option<UserOnly>,
    next: Option<NamedPipeServer>,
}

impl PipeListener {
    fn create(&self, first: bool) -> io::Result<NamedPipeServer> {
        let mut options = ServerOptions::new();
        options
            .first_pipe_instance(first)
            .reject_remote_clients(true);
        match &self.descriptor {
            Some(d) => {
                let mut attrs = SECURITY_ATTRIBUTES {
                    nLength: size_of::<SECURITY_ATTRIBUTES>() as u32,
                    lpSecurityDescriptor: d.descriptor,
                    bInheritHandle: 0,
                };
                // SAFETY: a valid SECURITY_ATTRIBUTES whose descriptor outlives the call.
                unsafe {
                    options.create_with_security_attributes_raw(
                        &self.name,
                        (&raw mut attrs).cast::<c_void>(),
                    )
                }
            }
            None => options.create(&self.name),
        }
    }

    /// Connections as they come: each accepted instance is handed out and a new one listens.
    pub fn incoming(
        mut self,
    ) -> impl tokio_stream::Stream<Item = io::Result<PipeConnection>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let server = match self.next.take() {
                    Some(s) => s,
                    None => match self.create(false) {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::error!(pipe = %self.name.display(), "creating a pipe instance failed: {e}");
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    },
                };
                if let Err(e) = server.connect().await {
                    // A client that vanished between connecting and our accept: not fatal.
                    tracing::debug!("a pipe client went away before it was accepted: {e}");
                    continue;
                }
                if tx.send(Ok(PipeConnection(server))).await.is_err() {
                    return;
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

/// Creates the first instance of the pipe `name`. Call only while holding the instance lock.
pub fn bind(name: &Path) -> Result<BoundSocket, BindError> {
    let descriptor = match user_only_descriptor() {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("no user-only DACL for the control pipe ({e}); using the default one");
            None
        }
    };
    let mut listener = PipeListener {
        name: name.to_path_buf(),
        descriptor,
        next: None,
    };
    let first = listener.create(true).map_err(|source| {
        // ERROR_ACCESS_DENIED is what FILE_FLAG_FIRST_PIPE_INSTANCE gives for a taken name.
        if source.kind() == io::ErrorKind::PermissionDenied {
            BindError::AlreadyServing(name.to_path_buf())
        } else {
            BindError::Io {
                path: name.to_path_buf(),
                source,
            }
        }
    })?;
    listener.next = Some(first);
    Ok(BoundSocket {
        listener,
        owned_path: None,
        activated: false,
    })
}

/// Nothing to remove: a pipe vanishes with its last handle.
pub fn remove_if_ours(_owned: &Option<(PathBuf, u64)>) {}

/// gRPC interceptor: the pipe's DACL has decided who may connect (see the module doc).
pub fn check_peer(req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    Ok(req)
}

/// An accepted pipe connection.
#[derive(Debug)]
pub struct PipeConnection(NamedPipeServer);

impl AsyncRead for PipeConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PipeConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for PipeConnection {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}
