//! Every read of a log: forward pages ([`OutputLog::read`]), runs per stream
//! ([`OutputLog::read_runs`]), scans ([`OutputLog::scan`]) and the latest view, all through one
//! walk over the spool, the ring and the gaps between them, so no read path can skip bytes
//! silently; and the cuts on UTF-8 character boundaries that keep pages continuing exactly
//! where the last one ended.

use std::ops::ControlFlow;
use std::path::Path;

use super::ring::Ring;
use super::spool::{SpoolPiece, SpoolReader};
use super::{
    DISK_BYTES_PER_PAGE, LogEnd, OutputLog, Piece, ReadQuery, ReadResult, RunsPage, Stream,
    StreamFilter,
};

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
