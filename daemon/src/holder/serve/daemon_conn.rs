//! The holder's side of its link to the daemon: the greeting ([`Hello`]) a daemon gets when it
//! connects (the newest one wins; a sandboxed peer never does; the spool is written up to the
//! greeting's `next_seq` first), the frames queued for it in order and written without ever
//! blocking the holder (a daemon gone mid-write is let go), and the control frames it sends
//! (`CloseStdin`, `CloseOutput`, `Keep` with its descriptor).

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::{Conn, Holder, READ_BYTES};
use crate::holder::{Hello, Kind, split_frame};

impl Conn {
    pub(super) fn backlog(&self) -> usize {
        self.out.len() - self.sent
    }
}

impl Holder {
    pub(super) fn hello(&self) -> Hello {
        Hello {
            holder_pid: self.holder_pid,
            shell_pid: self.shell.pid,
            shell_start_time: self.shell.start_time,
            next_seq: self.next_seq,
            exit: self.exit,
            eof: crate::holder::PipesAtEof {
                stdout: self.pipes[0].is_none(),
                stderr: self.pipes[1].is_none(),
            },
            dropped: self.spool_lost(),
            stdin_open: self.stdin.is_some(),
            terminal: self.terminal,
            protocol: crate::holder::PROTOCOL,
            listener: self.kept.is_some(),
            redact: self.secrets.clone(),
        }
    }

    /// Makes `sock` the daemon's connection (replacing any older one, whose daemon is gone) and
    /// greets it. Everything queued for the old one is written to the spool first: the new
    /// daemon rebuilds its ring from the spool up to the greeting's `next_seq`.
    pub(super) fn connect(&mut self, sock: UnixStream) -> io::Result<()> {
        self.write_spool();
        sock.set_nonblocking(true)?;
        // stdin's descriptor first, then the kept one: `Hello` says which are there.
        let fds: Vec<i32> = self
            .stdin
            .iter()
            .chain(self.kept.iter())
            .map(AsRawFd::as_raw_fd)
            .collect();
        crate::holder::send_with_fds(&sock, &self.hello().encode(), &fds)?;
        self.keep(sock)
    }

    /// Makes `sock`, whose daemon has been greeted already, the daemon's connection.
    pub(super) fn keep(&mut self, sock: UnixStream) -> io::Result<()> {
        sock.set_nonblocking(true)?;
        self.conn = Some(Conn {
            sock,
            out: Vec::new(),
            sent: 0,
            inbuf: Vec::new(),
        });
        Ok(())
    }

    pub(super) fn queue(&mut self, frame: &[u8]) {
        if let Some(c) = self.conn.as_mut() {
            c.out.extend_from_slice(frame);
        }
    }

    /// Writes what the socket takes now; a dead connection is dropped (its daemon is gone).
    pub(super) fn flush(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        while c.sent < c.out.len() {
            match c.sock.write(&c.out[c.sent..]) {
                Ok(0) => {
                    self.conn = None;
                    return;
                }
                Ok(n) => c.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.conn = None;
                    return;
                }
            }
        }
        if c.sent == c.out.len() {
            c.sent = 0;
            c.out.clear();
            // A flood's backlog is memory a quiet process should not keep.
            if c.out.capacity() > 4 * READ_BYTES {
                c.out.shrink_to(READ_BYTES);
            }
        } else if c.sent > c.out.len() / 2 {
            c.out.drain(..c.sent);
            c.sent = 0;
        }
    }

    /// Frames from the daemon, with the descriptors they carry (only `Keep` carries one).
    ///
    /// Frames that arrived before the daemon went away are still obeyed: a daemon that hands
    /// over a proxy listener (`Keep`) and is killed at once leaves the frame and its end in one
    /// read, and dropping the frame would close the listener that every later daemon serves the
    /// proxy on.
    pub(super) fn serve_conn(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        let mut received = Vec::new();
        let mut gone = false;
        loop {
            match read_with_fds(&c.sock, &mut c.inbuf, &mut received) {
                Ok(0) => {
                    gone = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        let mut kinds = Vec::new();
        let mut at = 0;
        loop {
            match split_frame(&c.inbuf[at..]) {
                Ok(Some((kind, _, len))) => {
                    kinds.push(kind);
                    at += len;
                }
                Ok(None) => break,
                Err(_) => {
                    gone = true;
                    break;
                }
            }
        }
        c.inbuf.drain(..at);
        if gone {
            self.conn = None;
        }
        let mut received = received.into_iter();
        for kind in kinds {
            match kind {
                Kind::CloseStdin => self.stdin = None,
                Kind::CloseOutput => {
                    // The daemon stopped waiting for this output (its reader cutoff): whatever
                    // still holds the pipes gets EPIPE, as it did when the daemon read them.
                    self.pipes = [None, None];
                    self.redact = [None, None];
                }
                Kind::Keep => {
                    if let Some(fd) = received.next() {
                        self.kept = Some(fd);
                    }
                }
                _ => {}
            }
        }
    }

    pub(super) fn accept(&mut self) {
        let Some(listener) = self.listener.as_ref() else {
            return;
        };
        let mut accepted = Vec::new();
        loop {
            match listener.accept() {
                Ok((sock, _)) => accepted.push(sock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        // The newest daemon wins (the instance lock lets only one run at a time). Never a
        // sandboxed process: one that reached this socket (no namespaces hid it) would get the
        // command's stdin and take the holder from its daemon.
        for sock in accepted {
            if more_confined_than_me(&sock) {
                continue;
            }
            if self.connect(sock).is_err() {
                self.conn = None;
            }
        }
    }
}

/// Whether the peer of `sock` is more confined than this holder: `no_new_privs` it lacks, or
/// more seccomp filters (a sandboxed command has both; a daemon has what the holder inherited
/// from it). Linux; elsewhere nothing tells, and no sandbox hides behind `no_new_privs`.
#[cfg(target_os = "linux")]
fn more_confined_than_me(sock: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let Ok(cred) = getsockopt(sock, PeerCredentials) else {
        return true;
    };
    // A peer gone already is no daemon to serve.
    crate::sandbox::linux::more_confined_than_me(cred.pid()).unwrap_or(true)
}

#[cfg(not(target_os = "linux"))]
fn more_confined_than_me(_sock: &UnixStream) -> bool {
    false
}

/// One non-blocking `recvmsg` of up to 4 KiB from the daemon into `buf`, keeping any
/// descriptors that came with it (close-on-exec). The bytes read (0 at EOF).
fn read_with_fds(
    sock: &UnixStream,
    buf: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> io::Result<usize> {
    use nix::sys::socket::{ControlMessageOwned, recvmsg};
    let mut chunk = [0u8; 4096];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
    let mut iov = [io::IoSliceMut::new(&mut chunk)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        crate::holder::RECV_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let n = msg.bytes;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = c {
            for f in received {
                // SAFETY: a descriptor just received is ours alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(f) });
            }
        }
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    use super::super::test_holder::{frames, holder_linked_to, output, spooled, spooling_holder};
    use super::*;
    use crate::holder::{Encoder, PROTOCOL, send_with_fd};
    use crate::output::Stream;
    use crate::output::spool::SpoolPiece;

    /// A daemon that connects anew (after a crash or restart) is greeted with a fresh
    /// [`Hello`] saying where the output stands, and then gets only what comes after: frames
    /// queued for the daemon that died are not replayed (their bytes are in the spool, which
    /// the new daemon reads up to `next_seq`).
    #[test]
    fn a_new_daemon_gets_a_fresh_hello_then_only_new_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (first, ours) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(ours, dir.path(), usize::MAX);
        let path = dir.path().join(crate::holder::SOCKET_NAME);
        let listener = UnixListener::bind(&path).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        h.listener = Some(listener);
        h.record(Stream::Stdout, b"before");
        // The first daemon dies with that frame still queued.
        drop(first);
        let second = UnixStream::connect(&path).expect("connect");
        h.accept();
        // Greeted only once the spool has everything before `next_seq`: the new daemon
        // rebuilds its ring from there.
        assert_eq!(
            spooled(dir.path()),
            vec![SpoolPiece::Run(1, Stream::Stdout, b"before".to_vec())]
        );
        h.record(Stream::Stderr, b"after");
        h.flush();
        let got = frames(&second);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, Kind::Hello);
        let hello = Hello::decode(&got[0].1).expect("hello");
        assert_eq!(hello.next_seq, 7, "the bytes before are the spool's");
        assert_eq!(hello.holder_pid, std::process::id() as i32);
        assert_eq!(hello.protocol, PROTOCOL);
        assert_eq!(hello.dropped, 0);
        assert_eq!(got[1], output(Stream::Stderr, b"after"));
    }

    /// A flood queues frames while the daemon is slow; once it has caught up, the queue's
    /// memory is given back (a quiet process keeps no flood-sized buffer), and every byte
    /// arrived in order.
    #[test]
    fn the_backlog_shrinks_once_the_daemon_caught_up_after_a_flood() {
        const CHUNKS: usize = 64;
        let (daemon, ours) = UnixStream::pair().expect("socketpair");
        let mut h = holder_linked_to(ours);
        for i in 0..CHUNKS {
            h.record(Stream::Stdout, &[b'a' + (i % 26) as u8; READ_BYTES]);
            h.flush();
        }
        let backlog = h.conn.as_ref().expect("connected").backlog();
        assert!(
            backlog > 0,
            "the socket could not take the whole flood at once"
        );
        let frame_bytes = 4 + 2 + READ_BYTES;
        let mut received = Vec::with_capacity(CHUNKS * frame_bytes);
        let mut chunk = vec![0u8; 256 * 1024];
        daemon.set_nonblocking(true).expect("nonblocking");
        while received.len() < CHUNKS * frame_bytes {
            match (&daemon).read(&mut chunk) {
                Ok(0) => panic!("the holder closed the connection"),
                Ok(n) => received.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => h.flush(),
                Err(e) => panic!("read: {e}"),
            }
        }
        let c = h.conn.as_ref().expect("still connected");
        assert_eq!(c.backlog(), 0);
        assert!(
            c.out.capacity() <= 4 * READ_BYTES,
            "the flood's queue was kept: {} bytes",
            c.out.capacity()
        );
        for (i, frame) in received.chunks(frame_bytes).enumerate() {
            assert_eq!(frame[4], Kind::Output as u8);
            assert!(
                frame[6..].iter().all(|b| *b == b'a' + (i % 26) as u8),
                "frame {i} out of order"
            );
        }
    }

    /// A daemon that dies while a write to it is half done (its socket closes with frames
    /// queued) is let go, without blocking or killing the holder (SIGPIPE is an error value
    /// here); the output goes on into the spool, whole, for the next daemon.
    #[test]
    fn a_daemon_gone_mid_write_is_let_go_and_the_spool_keeps_every_byte() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (daemon, ours) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(ours, dir.path(), usize::MAX);
        for _ in 0..16 {
            h.record(Stream::Stdout, &[b'x'; READ_BYTES]);
        }
        h.flush();
        assert!(h.conn.as_ref().is_some_and(|c| c.backlog() > 0));
        // The daemon read part of a frame, then died.
        let mut some = [0u8; 1000];
        (&daemon).read_exact(&mut some).expect("read");
        drop(daemon);
        h.flush();
        assert!(h.conn.is_none(), "the dead daemon's connection is dropped");
        h.record(Stream::Stdout, b"after");
        h.flush();
        // As the holder does when it is done.
        h.write_spool();
        let total: usize = spooled(dir.path())
            .iter()
            .map(|p| match p {
                SpoolPiece::Run(_, _, bytes) => bytes.len(),
                SpoolPiece::Missing(from, to) => panic!("bytes {from}..{to} missing"),
            })
            .sum();
        assert_eq!(total, 16 * READ_BYTES + 5);
        assert_eq!(h.hello().next_seq, 16 * READ_BYTES as u64 + 6);
    }

    /// A daemon killed right after it handed a sandbox's proxy listener over leaves the `Keep`
    /// frame and its end of the socket to be read together: the holder still keeps the
    /// listener, so the next daemon serves the proxy on it and the command's connections wait
    /// in its backlog meanwhile instead of being refused.
    #[test]
    fn a_listener_handed_over_just_before_the_daemon_died_is_kept() {
        let (daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let keep = Encoder::new(Kind::Keep).finish();
        send_with_fd(&daemon, &keep, Some(listener.as_raw_fd())).expect("send");
        // The daemon's copies go with it.
        drop(listener);
        drop(daemon);
        let mut h = holder_linked_to(holder_end);
        h.serve_conn();
        assert!(h.conn.is_none(), "the daemon's end is seen");
        assert!(h.kept.is_some(), "the listener handed over is kept");
        std::net::TcpStream::connect(addr).expect("the kept listener still takes connections");
    }
}
