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
//!   `.await`.

pub(crate) mod ring;
pub(crate) mod spool;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use ring::Ring;
use spool::{SpoolBuffer, SpoolFiles, SpoolPiece, SpoolReader};

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

/// Length of the UTF-8 sequence a lead byte starts (1 for ASCII and for invalid bytes).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

/// Where to cut `bytes` at or before `cut` without splitting a UTF-8 character; keeps `cut` when
/// moving back would leave nothing (binary data is then simply cut).
fn char_boundary_before(bytes: &[u8], cut: usize) -> usize {
    if cut >= bytes.len() {
        return cut;
    }
    let lowest = cut.saturating_sub(3);
    for i in (lowest..cut).rev() {
        let b = bytes[i];
        if b & 0xC0 != 0x80 {
            // A lead byte: move the cut before it if its character does not fit.
            return if i + utf8_len(b) > cut && i > 0 {
                i
            } else {
                cut
            };
        }
    }
    cut
}

/// How many leading continuation bytes to skip so a window starts on a character.
fn continuation_prefix(bytes: &[u8]) -> usize {
    let n = bytes
        .iter()
        .take(3)
        .take_while(|b| **b & 0xC0 == 0x80)
        .count();
    if n == bytes.len() { 0 } else { n }
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

    /// Rebuilds a closed log from a spool written by an earlier daemon: the ring gets the newest
    /// `ring_bytes` (after the last gap, since a ring holds contiguous bytes), totals are
    /// recounted from what is on disk.
    pub fn restore(ring_bytes: usize, spool_dir: &Path) -> OutputLog {
        Self::restore_until(ring_bytes, spool_dir, u64::MAX)
    }

    /// [`OutputLog::restore`] of the bytes before `until` only.
    fn restore_until(ring_bytes: usize, spool_dir: &Path, until: u64) -> OutputLog {
        let mut log = OutputLog::new(ring_bytes, None, 0);
        log.spool_dir = Some(spool_dir.to_path_buf());
        {
            let mut inner = log.lock();
            if let Ok(reader) = SpoolReader::open(spool_dir) {
                let (start, end) = reader.range();
                let end = end.min(until);
                let ring_start = end.saturating_sub(ring_bytes as u64).max(start);
                inner.ring = Ring::new(ring_bytes, ring_start);
                let mut seq = start;
                while seq < end {
                    let Ok(pieces) = reader.read(seq, 1 << 20) else {
                        break;
                    };
                    if pieces.is_empty() {
                        break;
                    }
                    for piece in pieces {
                        match piece {
                            SpoolPiece::Run(at, _, _) if at >= end => break,
                            SpoolPiece::Run(at, stream, mut bytes) => {
                                bytes.truncate(usize::try_from(end - at).unwrap_or(usize::MAX));
                                match stream {
                                    Stream::Stdout => inner.stdout.add(&bytes),
                                    Stream::Stderr => inner.stderr.add(&bytes),
                                }
                                let run_end = at + bytes.len() as u64;
                                if run_end > inner.ring.start() {
                                    let skip =
                                        usize::try_from(inner.ring.start().saturating_sub(at))
                                            .unwrap_or(0);
                                    inner.ring.push(stream, &bytes[skip..]);
                                }
                                seq = run_end;
                            }
                            SpoolPiece::Missing(at, _) if at >= end => break,
                            SpoolPiece::Missing(_, to) => {
                                let to = to.min(end);
                                if to > inner.ring.start() {
                                    inner.ring = Ring::new(ring_bytes, to);
                                }
                                seq = to;
                            }
                        }
                    }
                }
                inner.next_seq = seq.max(start);
            }
            inner.closed = true;
            let end = LogEnd {
                next_seq: inner.next_seq,
                closed: true,
            };
            drop(inner);
            log.end.send_replace(end);
        }
        log
    }

    /// A log whose spool a holder writes (in `spool_dir`, when there is a spool): the daemon
    /// keeps the ring and reads the spool, and never writes it.
    pub fn held(ring_bytes: usize, spool_dir: Option<&Path>) -> OutputLog {
        let mut log = OutputLog::new(ring_bytes, None, 0);
        log.spool_dir = spool_dir.map(Path::to_path_buf);
        log.lock().held = Some((0, None));
        log
    }

    /// The log of a process a new daemon re-adopts from its holder: the ring rebuilt from the
    /// spool, as [`OutputLog::restore`] does, and open for the holder's bytes from `next_seq`
    /// on (anything the spool lacks before it is a gap).
    pub fn adopted(ring_bytes: usize, spool_dir: &Path, next_seq: u64, lost: u64) -> OutputLog {
        // Only up to `next_seq`: the holder goes on writing the spool while this runs, and
        // sends those later bytes as output frames.
        let log = OutputLog::restore_until(ring_bytes, spool_dir, next_seq);
        {
            let mut inner = log.lock();
            if next_seq > inner.next_seq {
                inner.ring = Ring::new(ring_bytes, next_seq);
                inner.next_seq = next_seq;
            }
            inner.closed = false;
            inner.held = Some((lost, None));
            let end = LogEnd {
                next_seq: inner.next_seq,
                closed: false,
            };
            drop(inner);
            log.end.send_replace(end);
        }
        log
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

    /// Reads a window of output (see [`ReadQuery`]).
    pub fn read(&self, q: &ReadQuery) -> ReadResult {
        let max = q.max_bytes.max(1);
        match q.since {
            Some(since) => {
                // A cursor past the end reads from the end (nothing yet), as before it.
                let since = since.clamp(1, self.lock().next_seq);
                let mut page = Page::new(since, max, q.streams);
                // Read twice one stream's cap from disk at a time: a page of both streams is
                // then full after one read.
                let walked = self.walk(
                    since,
                    max.saturating_mul(2),
                    DISK_BYTES_PER_PAGE,
                    &mut |p| page.feed(p),
                );
                page.finish(walked.end, walked.retained_from)
            }
            None => {
                let inner = self.lock();
                let end = inner.next_seq;
                let mut r = Self::read_latest(&inner.ring, end, max, q.streams, q.tail_lines);
                let Some(floor) = inner.trimmed_from else {
                    return r;
                };
                // What the ring kept before its memory was released still counts as kept.
                r.retained_from = floor;
                if r.first_seq > inner.ring.start() || floor >= inner.ring.start() {
                    return r;
                }
                // The window wants more than the tail an ended process kept: rebuild its old
                // ring from disk and answer from that, exactly as before the memory was released.
                let capacity = usize::try_from(end - floor).unwrap_or(usize::MAX);
                drop(inner);
                match self.ring_from_disk(floor, end, capacity) {
                    Some(ring) => Self::read_latest(&ring, end, max, q.streams, q.tail_lines),
                    None => r,
                }
            }
        }
    }

    /// Reads forward from `since` keeping arrival order: runs of the selected streams, at most
    /// `max` bytes in total, from the spool when the ring no longer has them. Used by `follow`
    /// and `wait --until`.
    pub fn read_runs(&self, since: u64, max: usize, streams: StreamFilter) -> RunsPage {
        let max = max.max(1);
        let since = since.clamp(1, self.lock().next_seq);
        let mut page = RunsPage {
            next: since,
            ..RunsPage::default()
        };
        let mut total = 0usize;
        let walked = self.walk(since, max, DISK_BYTES_PER_PAGE, &mut |piece| match piece {
            Piece::Gap(from, to) => {
                if page.runs.is_empty() && page.next == since && page.gap.is_none() {
                    page.gap = Some((from, to));
                    page.next = to;
                    ControlFlow::Continue(())
                } else {
                    // The next page starts with this gap, so it is reported on its own.
                    ControlFlow::Break(())
                }
            }
            Piece::Bytes(seq, stream, bytes) => {
                if !streams.selects(stream) {
                    page.next = seq + bytes.len() as u64;
                    return ControlFlow::Continue(());
                }
                let take = bytes.len().min(max - total);
                page.runs.push((seq, stream, bytes[..take].to_vec()));
                total += take;
                page.next = seq + take as u64;
                if total >= max {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        });
        page.next = page.next.min(walked.end);
        page
    }

    /// Walks every retained byte from `since` on, one [`Piece`] at a time, until `visit` breaks
    /// or the end is reached: what a search reads (it bounds its own work by breaking). Reads the
    /// disk; callers on the async runtime run it on a blocking thread.
    pub fn scan(&self, since: u64, visit: &mut dyn FnMut(Piece<'_>) -> ControlFlow<()>) -> LogEnd {
        let since = since.clamp(1, self.lock().next_seq);
        let walked = self.walk(since, 1 << 20, usize::MAX, visit);
        let end = self.end();
        LogEnd {
            next_seq: walked.end,
            // Closed as of the walk only if no byte came after the end it walked to.
            closed: end.closed && end.next_seq == walked.end,
        }
    }

    /// Walks the log forward from `since`, one [`Piece`] at a time, until `visit` breaks, the
    /// end is reached, or `disk_budget` bytes were read from disk (then the walk ends where it
    /// is: the caller's next page goes on from there). Bytes the ring no longer has come from
    /// the spool, `disk_step` bytes per read, outside the log's lock; the ring may move
    /// meanwhile, and what it lost is then read from disk on the next step; anything retained
    /// nowhere is a [`Piece::Gap`].
    fn walk(
        &self,
        since: u64,
        disk_step: usize,
        disk_budget: usize,
        visit: &mut dyn FnMut(Piece<'_>) -> ControlFlow<()>,
    ) -> Walked {
        let mut cursor = since;
        let mut disk_exhausted = false;
        let mut retained_from = None;
        let mut cached_reader = None;
        let mut disk_read = 0usize;
        loop {
            let inner = self.lock();
            let end = inner.next_seq;
            let ring_start = inner.ring.start();
            // Where the ring would start had an ended process kept its memory.
            let floor = inner.trimmed_from.unwrap_or(ring_start);
            cursor = cursor.min(end);
            if cursor < ring_start
                && !disk_exhausted
                && let Some(dir) = self.spool_dir.as_deref()
            {
                drop(inner);
                if disk_read >= disk_budget {
                    return Walked {
                        end,
                        retained_from: retained_from.unwrap_or(floor),
                    };
                }
                let step = disk_step.min(disk_budget - disk_read).max(1);
                let Some((pieces, disk_start)) =
                    self.read_disk(dir, cursor, ring_start, step, &mut cached_reader)
                else {
                    // Nothing of it on disk: what the ring no longer has is a gap.
                    disk_exhausted = true;
                    continue;
                };
                retained_from = Some(disk_start);
                for piece in &pieces {
                    let (flow, piece_end) = match piece {
                        SpoolPiece::Run(at, stream, bytes) => {
                            disk_read += bytes.len();
                            (
                                visit(Piece::Bytes(*at, *stream, bytes)),
                                at + bytes.len() as u64,
                            )
                        }
                        SpoolPiece::Missing(from, to) => (visit(Piece::Gap(*from, *to)), *to),
                    };
                    if flow.is_break() {
                        return Walked {
                            end,
                            retained_from: disk_start,
                        };
                    }
                    cursor = piece_end;
                }
                // Go on from the disk or into the ring, which may have moved meanwhile: bytes it
                // lost since are on disk (the holder writes them before sending them), so the
                // next step reads them there.
                continue;
            }
            if cursor < ring_start {
                if visit(Piece::Gap(cursor, ring_start)).is_break() {
                    return Walked {
                        end,
                        retained_from: retained_from.unwrap_or(ring_start),
                    };
                }
                cursor = ring_start;
            }
            Self::walk_ring(&inner.ring, cursor, visit);
            return Walked {
                end,
                retained_from: retained_from.unwrap_or(floor),
            };
        }
    }

    /// The ring's part of a walk, from `cursor` (not before the ring's start) on.
    fn walk_ring(ring: &Ring, cursor: u64, visit: &mut dyn FnMut(Piece<'_>) -> ControlFlow<()>) {
        for chunk in ring.chunks() {
            if chunk.end() <= cursor {
                continue;
            }
            let skip = usize::try_from(cursor.saturating_sub(chunk.start)).unwrap_or(0);
            let at = chunk.start + skip as u64;
            if visit(Piece::Bytes(at, chunk.stream, &chunk.bytes()[skip..])).is_break() {
                return;
            }
        }
    }

    /// The bytes `[from, end)` from disk as a ring, when the disk has all of them.
    fn ring_from_disk(&self, from: u64, end: u64, capacity: usize) -> Option<Ring> {
        let reader = SpoolReader::open(self.spool_dir.as_deref()?).ok()?;
        let mut ring = Ring::new(capacity, from);
        let mut seq = from;
        while seq < end {
            let want = usize::try_from(end - seq)
                .unwrap_or(usize::MAX)
                .min(1 << 20);
            let pieces = reader.read(seq, want).ok()?;
            if pieces.is_empty() {
                return None;
            }
            for piece in pieces {
                let SpoolPiece::Run(at, stream, bytes) = piece else {
                    return None;
                };
                if at != seq {
                    return None;
                }
                ring.push(stream, &bytes);
                seq += bytes.len() as u64;
            }
        }
        Some(ring)
    }

    /// Reads what the spool has of `[since, ring_start)`, at most `max` bytes: pieces in order
    /// (a leading gap when the cap already deleted the start) and the oldest sequence number on
    /// disk. `None` when the disk has none of those bytes.
    fn read_disk(
        &self,
        dir: &Path,
        since: u64,
        ring_start: u64,
        max: usize,
        cached: &mut Option<SpoolReader>,
    ) -> Option<(Vec<SpoolPiece>, u64)> {
        // Waiting for the files' lock waits for a batch in flight: bytes that left the ring
        // before we looked are then on disk. Bytes from `missing_from` on failed to reach the
        // disk and have no gap record yet: read up to there only, whatever lands on disk after.
        let (files_start, missing_from) = self
            .lock_files()
            .map_or((1, None), |f| (f.start(), f.missing_from()));
        let reader = match cached.take() {
            Some(r) => r,
            None => SpoolReader::open(dir).ok()?,
        };
        let start = reader.range().0.max(files_start);
        let from = since.max(start);
        let until = ring_start.min(missing_from.unwrap_or(u64::MAX));
        if from >= until {
            return None;
        }
        let want = usize::try_from(until - from).unwrap_or(usize::MAX);
        let pieces = reader.read(from, want.min(max)).ok()?;
        if self.end().closed {
            // A complete log's index no longer changes: the next step of this walk reuses it.
            *cached = Some(reader);
        }
        // Only `[from, until)`: a missing range costs nothing against `want`, so the reader may
        // run past it, and bytes from `ring_start` on are the ring's to serve.
        let mut clipped = Vec::with_capacity(pieces.len() + 1);
        if from > since {
            clipped.push(SpoolPiece::Missing(since, from));
        }
        for piece in pieces {
            match piece {
                SpoolPiece::Run(at, _, _) if at >= until => break,
                SpoolPiece::Run(at, stream, mut bytes) => {
                    bytes.truncate(usize::try_from(until - at).unwrap_or(usize::MAX));
                    clipped.push(SpoolPiece::Run(at, stream, bytes));
                }
                SpoolPiece::Missing(at, _) if at >= until => break,
                SpoolPiece::Missing(at, to) => clipped.push(SpoolPiece::Missing(at, to.min(until))),
            }
        }
        if !clipped.iter().any(|p| matches!(p, SpoolPiece::Run(..))) {
            return None;
        }
        Some((clipped, start))
    }

    fn read_latest(
        ring: &Ring,
        end: u64,
        max: usize,
        streams: StreamFilter,
        tail_lines: Option<u32>,
    ) -> ReadResult {
        let ring_start = ring.start();
        // Walk back from the end to find where the window starts.
        let mut first = end;
        let mut taken = [0usize; 2];
        let mut lines_left = tail_lines.map(|n| u64::from(n.max(1)));
        let mut at_end = true;
        'chunks: for chunk in ring.chunks().rev() {
            let bytes = chunk.bytes();
            if !streams.selects(chunk.stream) {
                first = chunk.start;
                continue;
            }
            let idx = usize::from(chunk.stream == Stream::Stderr);
            let room = max.saturating_sub(taken[idx]);
            let mut keep = bytes.len().min(room);
            if let Some(left) = lines_left.as_mut() {
                // Count newlines backwards; a newline that ends the log does not start a line.
                let window = &bytes[bytes.len() - keep..];
                let mut cut = None;
                for (i, b) in window.iter().enumerate().rev() {
                    if *b != b'\n' {
                        at_end = false;
                        continue;
                    }
                    if at_end {
                        at_end = false;
                        continue;
                    }
                    *left -= 1;
                    if *left == 0 {
                        cut = Some(i + 1);
                        break;
                    }
                }
                if let Some(c) = cut {
                    keep = window.len() - c;
                    first = chunk.end() - keep as u64;
                    break 'chunks;
                }
            }
            taken[idx] += keep;
            first = chunk.end() - keep as u64;
            if keep < bytes.len() {
                break;
            }
        }
        // Start on a character, not in the middle of one.
        if let Some(chunk) = ring.chunks().find(|c| c.start <= first && first < c.end()) {
            let skip = usize::try_from(first - chunk.start).unwrap_or(0);
            first += continuation_prefix(&chunk.bytes()[skip..]) as u64;
        }
        let mut page = Page::new(first, usize::MAX, streams);
        Self::walk_ring(ring, first, &mut |p| page.feed(p));
        let mut r = page.finish(end, ring_start);
        r.truncated = first > 1;
        r.has_more = false;
        r
    }
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        // A log dropped without `close` (a daemon shutting down) still writes what it buffered.
        self.flush_spool();
    }
}

/// Where a walk ended: the log's end when it began, and the oldest byte it could have served.
struct Walked {
    end: u64,
    retained_from: u64,
}

/// A forward page under construction: at most `max` bytes per stream, cut on a character
/// boundary, a gap only at its start (reported as `truncated`, with `first_seq` after it).
struct Page {
    r: ReadResult,
    max: usize,
    streams: StreamFilter,
}

impl Page {
    fn new(since: u64, max: usize, streams: StreamFilter) -> Page {
        Page {
            r: ReadResult {
                first_seq: since,
                next_seq: since,
                ..ReadResult::default()
            },
            max,
            streams,
        }
    }

    fn feed(&mut self, piece: Piece<'_>) -> ControlFlow<()> {
        let r = &mut self.r;
        match piece {
            Piece::Gap(_, to) => {
                if r.next_seq == r.first_seq {
                    r.truncated = true;
                    r.first_seq = to;
                    r.next_seq = to;
                    ControlFlow::Continue(())
                } else {
                    // Stop before it: the next page starts with the gap and says so.
                    ControlFlow::Break(())
                }
            }
            Piece::Bytes(seq, stream, bytes) => {
                if !self.streams.selects(stream) {
                    r.next_seq = seq + bytes.len() as u64;
                    return ControlFlow::Continue(());
                }
                let out = r.take(stream);
                let room = self.max.saturating_sub(out.len());
                if bytes.len() <= room {
                    out.extend_from_slice(bytes);
                    r.next_seq = seq + bytes.len() as u64;
                    return ControlFlow::Continue(());
                }
                // This stream is full: stop here, on a character boundary, so the next page
                // continues exactly where this one ends.
                let cut = char_boundary_before(bytes, room);
                out.extend_from_slice(&bytes[..cut]);
                r.next_seq = seq + cut as u64;
                ControlFlow::Break(())
            }
        }
    }

    fn finish(self, end: u64, retained_from: u64) -> ReadResult {
        let mut r = self.r;
        r.has_more = r.next_seq < end;
        r.retained_from = retained_from;
        r
    }
}

#[cfg(test)]
mod tests;
