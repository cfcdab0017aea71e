//! A holder for the unit tests of its parts: nothing running, but real descriptors: a
//! socketpair for the daemon's connection, pipes for the shell's output, a spool in a temporary
//! directory. The daemon's side reads the frames the way the daemon's link does.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::process_setup::signal_fd;
use super::{Conn, Holder};
use crate::holder::{Kind, Secrets, split_frame};
use crate::output::Stream;
use crate::output::spool::{SpoolBuffer, SpoolFiles, SpoolPiece, SpoolReader};
use crate::spawn::identity::Identity;

/// A holder with nothing running, linked to a daemon through `sock`.
pub(super) fn holder_linked_to(sock: UnixStream) -> Holder {
    sock.set_nonblocking(true).expect("nonblocking");
    Holder {
        shell: Identity {
            pid: 0,
            start_time: 0,
        },
        holder_pid: std::process::id() as i32,
        stdin: None,
        pipes: [None, None],
        terminal: false,
        secrets: Secrets::default(),
        redact: [None, None],
        spool: None,
        spool_batch: usize::MAX,
        last_output: std::time::Instant::now(),
        next_seq: 1,
        exit: None,
        children: false,
        conn: Some(Conn {
            sock,
            out: Vec::new(),
            sent: 0,
            inbuf: Vec::new(),
        }),
        listener: None,
        exit_written: false,
        exit_file: None,
        signals: signal_fd().expect("signalfd"),
        reported_health: 0,
        kept: None,
    }
}

/// A holder linked to `sock` that spools into `dir` in batches of `batch` bytes.
pub(super) fn spooling_holder(sock: UnixStream, dir: &Path, batch: usize) -> Holder {
    let mut h = holder_linked_to(sock);
    h.spool = Some((SpoolBuffer::new(), SpoolFiles::create(dir, 1 << 30)));
    h.spool_batch = batch;
    h
}

/// The bytes of the spool's first segment in `dir`.
pub(super) fn on_disk(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("out.0")).unwrap_or_default()
}

/// The whole frames the daemon's end can read now, in order (kind and payload), leaving
/// nothing half-read: every frame a test waits for has been flushed whole already.
pub(super) fn frames(daemon: &UnixStream) -> Vec<(Kind, Vec<u8>)> {
    daemon.set_nonblocking(true).expect("nonblocking");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match (&*daemon).read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("reading the holder's frames: {e}"),
        }
    }
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((kind, payload, len)) = split_frame(&bytes[at..]).expect("a valid frame") {
        out.push((kind, payload.to_vec()));
        at += len;
    }
    assert_eq!(at, bytes.len(), "a frame was cut short");
    out
}

/// An output frame as the daemon receives it.
pub(super) fn output(stream: Stream, bytes: &[u8]) -> (Kind, Vec<u8>) {
    let mut payload = vec![crate::holder::stream_byte(stream)];
    payload.extend_from_slice(bytes);
    (Kind::Output, payload)
}

/// What the spool in `dir` holds, from byte 1: runs (first sequence number, stream, bytes)
/// and missing ranges, as a later daemon would read them.
pub(super) fn spooled(dir: &Path) -> Vec<SpoolPiece> {
    let reader = SpoolReader::open(dir).expect("open the spool");
    reader.read(1, 64 << 20).expect("read the spool")
}
