//! One output log per managed process: both streams interleaved in arrival order, numbered by
//! byte, kept in a bounded ring and a capped disk spool.
//!
//! # Theory of operation
//! - **Writers.** Only the process's pipe readers append (through [`OutputLog::append`]), after
//!   redaction, so the ring and the spool never hold a secret the session asked to hide. An append
//!   takes the log's mutex for a memcpy into the ring and the spool buffer; it never waits on a
//!   reader, so a slow or stalled client can never block the process. When the spool buffer is
//!   due (full, old, or about to leave the ring), the batch is written to disk *after* the log's
//!   mutex is released, under the spool files' own mutex (taken first, so batches reach the disk
//!   in order and a reader of the disk waits for the batch in flight): readers of the ring never
//!   wait for the disk.
//! - **Sequence numbers.** Byte `n` of the interleaved log has `seq == n`, starting at 1. A read
//!   returns `next_seq` right after the last byte it returned, so following `next_seq` returns
//!   every byte exactly once, whatever the page size.
//! - **Readers** pull with cursors ([`OutputLog::read`]) and wait for news on a `watch` channel
//!   that carries the end position; there are no per-reader queues, so a reader costs a cursor.
//!   Forward reads that fall behind the ring are served from the spool; only bytes retained
//!   nowhere are reported (`truncated`, or a gap in `follow`). Every forward read walks one
//!   sequence of [`Piece`]s — bytes from the spool while the cursor is older than the ring, then
//!   from the ring, with a gap wherever bytes are retained nowhere (no spool, past the spool's
//!   cap, or never written because the disk was full) — so no read path can skip bytes silently.
//!   One walk reads at most [`DISK_BYTES_PER_PAGE`] from disk for a page (a page of a rare stream
//!   ends early, `has_more` set, rather than scanning the whole spool); a search
//!   ([`OutputLog::scan`]) sets its own bound.
//! - **Closing.** When both pipes reach EOF (or the daemon gives up draining them), the log is
//!   closed; `follow` ends there.
//! - The mutex is a `std` mutex held only for short, non-blocking sections and never across an
//!   `.await`.//!
//! # Where things are
//! This module holds the log's types and its writers' side (append, flush, close, health,
//! memory release); [`reading`] every read (pages, runs, scans, the latest view) and the walk
//! they share; [`restore`] the logs rebuilt from a spool an earlier daemon or a holder wrote;
//! [`ring`] and [`spool`] the two stores.

mod reading;
mod restore;
pub(crate) mod ring;
pub(crate) mod spool;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use ring::Ring;
use spool::{SpoolBuffer, SpoolFiles, SpoolReader};

/// A run of bytes from one stream: its first sequence number, the stream, the bytes.
pub type Run = (u64, Stream, Vec<u8>);

/// Result of [`OutputLog::read_runs`].
#[derive(Debug, Clone, Default)]
pub struct RunsPage {
    /// Runs in arrival order.
    pub runs: Vec<Run>,
    /// Sequence number after the last byte covered.
    pub next: u64,
    /// Bytes `[from, to)` that were no longer retained anywhere.
    pub gap: Option<(u64, u64)>,
}

/// Which pipe bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    fn as_byte(self) -> u8 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }

    fn from_byte(b: u8) -> Option<Stream> {
        match b {
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// Which streams a read selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFilter {
    /// Both streams.
    Both,
    /// Only stdout.
    Stdout,
    /// Only stderr.
    Stderr,
}

impl StreamFilter {
    pub(crate) fn selects(self, s: Stream) -> bool {
        matches!(
            (self, s),
            (StreamFilter::Both, _)
                | (StreamFilter::Stdout, Stream::Stdout)
                | (StreamFilter::Stderr, Stream::Stderr)
        )
    }
}

/// Where the log ends, broadcast to waiting readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnd {
    /// Sequence number the next byte will get.
    pub next_seq: u64,
    /// No more bytes will come.
    pub closed: bool,
}

/// Byte and line totals of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamTotals {
    /// Bytes captured.
    pub bytes: u64,
    /// Complete lines, plus one for a final unterminated line.
    pub lines: u64,
    newlines: u64,
    ends_with_newline: bool,
}

impl StreamTotals {
    fn add(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.bytes += data.len() as u64;
        self.newlines += memchr::memchr_iter(b'\n', data).count() as u64;
        self.ends_with_newline = data.last() == Some(&b'\n');
        self.lines = self.newlines + u64::from(!self.ends_with_newline);
    }
}

/// What a read asks for.
#[derive(Debug, Clone, Copy)]
pub struct ReadQuery {
    /// Page forward from here; `None`: the latest bytes.
    pub since: Option<u64>,
    /// Most bytes returned per stream.
    pub max_bytes: usize,
    /// Streams to return.
    pub streams: StreamFilter,
    /// Latest view only: at most this many lines.
    pub tail_lines: Option<u32>,
}

/// A window of output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadResult {
    /// stdout bytes in the window.
    pub stdout: Vec<u8>,
    /// stderr bytes in the window.
    pub stderr: Vec<u8>,
    /// First sequence number the window covers.
    pub first_seq: u64,
    /// Sequence number after the window.
    pub next_seq: u64,
    /// Requested bytes are missing (evicted, or before a latest-view window).
    pub truncated: bool,
    /// More bytes are already available after `next_seq`.
    pub has_more: bool,
    /// Oldest retained sequence number: in a latest view, the ring's (what memory keeps, also
    /// once an ended process's ring was released to disk); in a forward read, the spool's when
    /// the read reached it.
    pub retained_from: u64,
}

impl ReadResult {
    fn take(&mut self, stream: Stream) -> &mut Vec<u8> {
        match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }
}

#[derive(Debug)]
struct LogInner {
    ring: Ring,
    next_seq: u64,
    stdout: StreamTotals,
    stderr: StreamTotals,
    /// Bytes on their way to the spool (`None`: no spool for this process).
    spool: Option<SpoolBuffer>,
    closed: bool,
    /// Set once the ring of an ended process was cut to a small tail ([`OutputLog::release_memory`]):
    /// where the ring started then. Bytes from here on still read as if in memory (from disk).
    trimmed_from: Option<u64>,
    /// A holder writes this log's spool (not this daemon): the spool's health as it last
    /// reported it (bytes lost, and why while failing).
    held: Option<(u64, Option<String>)>,
}

/// Most bytes one page reads from the spool. A page of both streams fills long before (it
/// reads twice its cap); a page of one rare stream stops here and says `has_more`, so one call
/// never scans a whole 64 MiB spool.
pub const DISK_BYTES_PER_PAGE: usize = 16 << 20;

/// Bytes an ended process keeps in memory once its output is cold: its latest output for the
/// usual short views; older bytes are read from the spool (RELIABILITY, issue 16 item 7).
pub const COLD_TAIL_BYTES: usize = 16 * 1024;

/// One step of a forward walk over the log (see [`OutputLog::walk`]).
pub enum Piece<'a> {
    /// Bytes of one stream from a sequence number on.
    Bytes(u64, Stream, &'a [u8]),
    /// Bytes `[from, to)` are retained nowhere.
    Gap(u64, u64),
}

/// The output of one process. Shared (`Arc`) by its pipe readers and every RPC handler.
#[derive(Debug)]
pub struct OutputLog {
    inner: Mutex<LogInner>,
    /// The spool's files, written outside `inner` (lock order: `inner`, then `files`).
    files: Option<Mutex<SpoolFiles>>,
    end: watch::Sender<LogEnd>,
    spool_dir: Option<PathBuf>,
}

impl OutputLog {
    /// A new log with a ring of `ring_bytes` and, when `spool_dir` is given, a spool capped at
    /// `spool_cap` bytes.
    pub fn new(ring_bytes: usize, spool_dir: Option<&Path>, spool_cap: u64) -> OutputLog {
        let (end, _) = watch::channel(LogEnd {
            next_seq: 1,
            closed: false,
        });
        OutputLog {
            inner: Mutex::new(LogInner {
                ring: Ring::new(ring_bytes, 1),
                next_seq: 1,
                stdout: StreamTotals::default(),
                stderr: StreamTotals::default(),
                spool: spool_dir.map(|_| SpoolBuffer::new()),
                closed: false,
                trimmed_from: None,
                held: None,
            }),
            files: spool_dir.map(|d| Mutex::new(SpoolFiles::create(d, spool_cap))),
            end,
            spool_dir: spool_dir.map(Path::to_path_buf),
        }
    }

    /// The spool health a holder reported.
    pub fn set_held_health(&self, lost: u64, why: Option<String>) {
        self.lock().held = Some((lost, why));
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A panic while holding this lock cannot leave the log inconsistent in a way worse than
        // losing the panicking append, so recover the guard rather than poisoning every reader.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_files(&self) -> Option<MutexGuard<'_, SpoolFiles>> {
        self.files
            .as_ref()
            .map(|f| f.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Writes a batch taken under `inner`: the files' lock is taken before `inner` is released,
    /// so batches reach the disk in order and a reader that saw the ring move waits for them.
    fn write_batch(&self, inner: MutexGuard<'_, LogInner>, batch: Option<spool::Batch>) {
        let Some(batch) = batch else {
            return;
        };
        let files = self.lock_files();
        drop(inner);
        if let Some(mut files) = files {
            files.write(batch);
        }
    }

    /// Appends bytes from one stream.
    pub fn append(&self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        inner.ring.push(stream, data);
        match stream {
            Stream::Stdout => inner.stdout.add(data),
            Stream::Stderr => inner.stderr.add(data),
        }
        inner.next_seq += data.len() as u64;
        let next_seq = inner.next_seq;
        let ring_start = inner.ring.start();
        let batch = inner.spool.as_mut().and_then(|spool| {
            spool.append(stream, data);
            // Bytes still waiting for the disk must stay readable: once the ring has lost them,
            // write them out; and write old or many bytes anyway, to bound a crash's loss.
            let leaving_ring = spool.unflushed_from().is_some_and(|from| from < ring_start);
            (leaving_ring || spool.due())
                .then(|| spool.take())
                .flatten()
        });
        self.write_batch(inner, batch);
        self.end.send_modify(|e| e.next_seq = next_seq);
    }

    /// Writes buffered spool bytes to disk (a log dropped without `close`; tests).
    pub fn flush_spool(&self) {
        let mut inner = self.lock();
        let batch = inner.spool.as_mut().and_then(SpoolBuffer::take);
        self.write_batch(inner, batch);
    }

    /// Marks the log complete; later appends are ignored.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        let batch = inner.spool.as_mut().and_then(|spool| {
            let batch = spool.take();
            spool.release();
            batch
        });
        self.write_batch(inner, batch);
        if let Some(mut files) = self.lock_files() {
            files.finish();
        }
        self.end.send_modify(|e| e.closed = true);
    }

    /// Subscribes to end-position changes.
    pub fn subscribe(&self) -> watch::Receiver<LogEnd> {
        self.end.subscribe()
    }

    /// Current end position.
    pub fn end(&self) -> LogEnd {
        *self.end.borrow()
    }

    /// Byte and line totals per stream.
    pub fn totals(&self) -> (StreamTotals, StreamTotals) {
        let inner = self.lock();
        (inner.stdout, inner.stderr)
    }

    /// Spool health: bytes the spool does not have, and why (while it is failing or gave up).
    pub fn spool_health(&self) -> (u64, Option<String>) {
        let (discarded, disabled) = {
            let inner = self.lock();
            if let Some(held) = inner.held.clone() {
                return held;
            }
            inner
                .spool
                .as_ref()
                .map_or((0, false), |s| (s.discarded, s.disabled()))
        };
        let (dropped, failing) = self
            .lock_files()
            .map_or((0, None), |f| (f.dropped, f.failing.clone()));
        let why = failing.or_else(|| disabled.then(|| "too many stream switches".to_string()));
        (dropped + discarded, why)
    }

    /// Whether a forward read from `since` goes to the disk (callers on the async runtime move
    /// such reads to a blocking thread).
    pub fn needs_disk(&self, since: u64) -> bool {
        self.spool_dir.is_some() && since < self.lock().ring.start()
    }

    /// Whether `q` may read the disk: a forward read of bytes older than the ring, or a latest
    /// view of an ended process whose memory was released.
    pub fn query_touches_disk(&self, q: &ReadQuery) -> bool {
        if self.spool_dir.is_none() {
            return false;
        }
        let inner = self.lock();
        match q.since {
            Some(since) => since < inner.ring.start(),
            None => inner.trimmed_from.is_some(),
        }
    }

    /// Cuts the ring of a complete log to its newest [`COLD_TAIL_BYTES`] when the spool holds
    /// every byte the ring held (no write failed, nothing dropped); reads of the rest then come
    /// from the spool, answering exactly as before. Returns whether memory was released.
    pub fn release_memory(&self) -> bool {
        let mut inner = self.lock();
        if !inner.closed || inner.trimmed_from.is_some() || inner.ring.len() <= COLD_TAIL_BYTES {
            return false;
        }
        if self.spool_dir.is_none() || inner.spool.as_ref().is_some_and(SpoolBuffer::disabled) {
            return false;
        }
        // Taking the files' lock after `inner` keeps the lock order; a log restored from disk
        // has no files and its ring came from the disk, so the disk holds it.
        // Nor when the spool's cap already deleted bytes the ring still holds.
        let ring_start = inner.ring.start();
        if self
            .lock_files()
            .is_some_and(|f| f.dropped > 0 || f.start() > ring_start)
        {
            return false;
        }
        // A holder's spool: only when it lost nothing and its cap has not deleted bytes the
        // ring still holds.
        if let Some((lost, _)) = inner.held {
            let kept_from = self
                .spool_dir
                .as_deref()
                .and_then(|d| SpoolReader::open(d).ok())
                .map(|r| r.range().0);
            if lost > 0 || kept_from.is_none_or(|start| start > ring_start) {
                return false;
            }
        }
        let floor = inner.ring.start();
        inner.ring = inner.ring.tail(COLD_TAIL_BYTES);
        inner.trimmed_from = Some(floor);
        true
    }
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        // A log dropped without `close` (a daemon shutting down) still writes what it buffered.
        self.flush_spool();
    }
}

#[cfg(test)]
mod tests;
