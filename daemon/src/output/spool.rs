//! The capped, segmented on-disk copy of a process's output log.
//!
//! Layout inside the process's directory:
//! - `out.<n>`: segment `n` holds the bytes with sequence numbers
//!   `n * SEGMENT_BYTES + 1 ..= (n + 1) * SEGMENT_BYTES`, so a byte's file and offset follow from
//!   its sequence number alone (O(1) random access, byte-exact). Bytes are written at their
//!   offset (`pwrite`), never appended, so a failed write cannot shift what follows it.
//! - `streams`: one 9-byte record (sequence number, little-endian u64; stream byte) each time the
//!   stream switches, to tell stdout from stderr. Stream byte 0 marks the start of bytes that
//!   could not be written (disk full, quota): readers report them as a gap, never as data.
//!
//! The writer side is split in two, so that the disk is never written under the log's mutex:
//! [`SpoolBuffer`] collects bytes in memory (under the log's mutex, a memcpy) and hands out
//! [`Batch`]es; [`SpoolFiles`] writes batches (under its own mutex, taken while the log's mutex
//! is still held so batches are written in order). When the segments exceed the cap, the oldest
//! are deleted: the spool keeps the newest output. Write errors never reach the process: the
//! bytes are counted as dropped, marked missing in the index, and the next batch tries again, so
//! the spool recovers when space returns.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Stream;

/// Size of one segment file.
pub(crate) const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes buffered before they are written: floods arrive in many small pipe reads, and one
/// write per read would make the disk the bottleneck.
pub(crate) const FLUSH_BYTES: usize = 128 * 1024;

/// Oldest buffered byte's age at which the buffer is written even while output keeps coming:
/// without it a process printing a line every 30 ms never pauses long enough for the holder's
/// quiet-time write (`holder::serve`), and a holder killed outright would lose everything it
/// printed (issue 16 item 5). A crash loses at most this long, or [`FLUSH_BYTES`], of output.
pub(crate) const FLUSH_AGE: Duration = Duration::from_millis(250);

/// Beyond this many stream-switch records the spool stops (pathological 1-byte interleaving).
const MAX_SWITCH_RECORDS: u64 = 1 << 20;

const SWITCH_RECORD_BYTES: usize = 9;

/// Index stream byte that marks bytes missing from the spool.
const MISSING: u8 = 0;

/// Bytes handed from the buffer to the files, in sequence order.
#[derive(Debug)]
pub(crate) struct Batch {
    /// Sequence number of `data[0]`.
    start: u64,
    /// Stream of `data[0]` (re-recorded after a gap, whose index records were lost).
    first_stream: Stream,
    data: Vec<u8>,
    /// Stream-switch records for bytes in `data`.
    index: Vec<u8>,
}

/// The in-memory side of the spool: bytes not written yet. Lives under the log's mutex.
#[derive(Debug)]
pub(crate) struct SpoolBuffer {
    /// Sequence number of the next byte to append.
    end: u64,
    pending: Vec<u8>,
    pending_index: Vec<u8>,
    /// When the oldest pending byte arrived.
    oldest_at: Option<Instant>,
    /// Stream of the oldest pending byte.
    pending_stream: Option<Stream>,
    last_stream: Option<Stream>,
    switch_records: u64,
    /// The spool gave up for good (pathological interleaving): bytes are only counted.
    disabled: bool,
    /// Bytes not buffered because the spool is disabled.
    pub(crate) discarded: u64,
}

impl SpoolBuffer {
    /// An empty buffer.
    pub fn new() -> SpoolBuffer {
        SpoolBuffer {
            end: 1,
            pending: Vec::new(),
            pending_index: Vec::new(),
            oldest_at: None,
            pending_stream: None,
            last_stream: None,
            switch_records: 0,
            disabled: false,
            discarded: 0,
        }
    }

    /// Buffers bytes of one stream.
    pub fn append(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.disabled {
            self.discarded += data.len() as u64;
            self.end += data.len() as u64;
            return;
        }
        if self.last_stream != Some(stream) {
            if self.switch_records >= MAX_SWITCH_RECORDS {
                tracing::warn!("output spool disabled: too many stream switches");
                self.disabled = true;
                return self.append(stream, data);
            }
            self.pending_index
                .extend_from_slice(&self.end.to_le_bytes());
            self.pending_index.push(stream.as_byte());
            self.switch_records += 1;
            self.last_stream = Some(stream);
        }
        if self.pending.is_empty() {
            self.oldest_at = Some(Instant::now());
            self.pending_stream = Some(stream);
        }
        self.pending.extend_from_slice(data);
        self.end += data.len() as u64;
    }

    /// Sequence number of the oldest byte not handed out yet, if any.
    pub fn unflushed_from(&self) -> Option<u64> {
        (!self.pending.is_empty()).then(|| self.end - self.pending.len() as u64)
    }

    /// Bytes buffered, not handed out yet (the holder's batch rule; Unix only).
    #[cfg(unix)]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// How long ago the oldest buffered byte arrived; `None` when nothing is buffered (the
    /// holder's quiet-time rule; Unix only).
    #[cfg(unix)]
    pub fn age(&self) -> Option<Duration> {
        self.oldest_at.map(|t| t.elapsed())
    }

    /// Whether the buffer should be written now: it is full, or its oldest byte is old.
    pub fn due(&self) -> bool {
        self.pending.len() >= FLUSH_BYTES
            || self.oldest_at.is_some_and(|t| t.elapsed() >= FLUSH_AGE)
    }

    /// Makes the oldest pending byte `by` older (tests of the age rule, without sleeping).
    #[cfg(test)]
    pub fn age_by(&mut self, by: Duration) {
        self.oldest_at = self.oldest_at.map(|t| t - by);
    }

    /// Gives back the buffer's memory once the log is complete (it can take no more bytes).
    pub fn release(&mut self) {
        self.pending = Vec::new();
        self.pending_index = Vec::new();
    }

    /// Whether the spool gave up for good.
    pub fn disabled(&self) -> bool {
        self.disabled
    }

    /// Hands out everything pending.
    pub fn take(&mut self) -> Option<Batch> {
        if self.pending.is_empty() {
            return None;
        }
        let first_stream = self.pending_stream?;
        // Give back the memory of a flood's buffer once it has been handed out; keep a normal
        // one for the next bytes.
        let keep = if self.pending.capacity() <= 2 * FLUSH_BYTES {
            self.pending.capacity()
        } else {
            0
        };
        let data = std::mem::replace(&mut self.pending, Vec::with_capacity(keep));
        let index = std::mem::take(&mut self.pending_index);
        self.oldest_at = None;
        Some(Batch {
            start: self.end - data.len() as u64,
            first_stream,
            data,
            index,
        })
    }
}

/// The on-disk side of the spool: files and write health. Lives under its own mutex.
#[derive(Debug)]
pub(crate) struct SpoolFiles {
    dir: PathBuf,
    max_segments: u64,
    /// Oldest segment still on disk.
    first_segment: u64,
    current: Option<(u64, File)>,
    streams: Option<File>,
    /// Bytes of `streams` written so far (records are written at this offset, so a torn record
    /// left by a failed write is overwritten by the next one).
    index_len: u64,
    /// Bytes from this sequence number on could not be written; the next successful batch
    /// records the gap.
    missing_from: Option<u64>,
    /// Bytes that could not be written.
    pub dropped: u64,
    /// Why the last write failed, while the spool has not recovered.
    pub failing: Option<String>,
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("out.{n}"))
}

fn streams_path(dir: &Path) -> PathBuf {
    dir.join("streams")
}

/// Opens a spool file (0600) for positional writes, never through a planted symlink
/// (`O_NOFOLLOW`).
fn open_write(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW).mode(0o600);
    }
    options.open(path)
}

#[cfg(unix)]
fn write_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(data, offset)
}

#[cfg(windows)]
fn write_at(file: &File, mut data: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !data.is_empty() {
        let n = file.seek_write(data, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

impl SpoolFiles {
    /// Files of a new, empty spool in `dir` (which must exist), keeping at most `cap_bytes`
    /// (rounded up to whole segments). Nothing is created before the first byte.
    pub fn create(dir: &Path, cap_bytes: u64) -> SpoolFiles {
        SpoolFiles {
            dir: dir.to_path_buf(),
            max_segments: cap_bytes.div_ceil(SEGMENT_BYTES).max(1),
            first_segment: 0,
            current: None,
            streams: None,
            index_len: 0,
            missing_from: None,
            dropped: 0,
            failing: None,
        }
    }

    /// Writes a batch. On failure its bytes are counted as dropped and remembered as missing;
    /// the next batch tries again and, once it succeeds, records the gap in the index.
    pub fn write(&mut self, batch: Batch) {
        if batch.data.is_empty() && batch.index.is_empty() {
            return;
        }
        match self.try_write(&batch) {
            Ok(()) => {
                if let Some(from) = self.missing_from.take() {
                    tracing::info!(dir = %self.dir.display(), "output spool recovered; bytes {from}..{} are missing", batch.start);
                }
                self.failing = None;
            }
            Err(e) => {
                if self.failing.is_none() {
                    tracing::warn!(dir = %self.dir.display(), "output spool write failed (bytes are missing until a write succeeds): {e}");
                }
                self.failing = Some(e.to_string());
                self.dropped += batch.data.len() as u64;
                self.missing_from.get_or_insert(batch.start);
            }
        }
    }

    fn try_write(&mut self, batch: &Batch) -> io::Result<()> {
        // The index first: a gap record (and the batch's stream again, since the lost batches
        // took their switch records with them), then the batch's own switches. Should the data
        // write fail after this, the next successful batch writes a gap record from here on.
        let mut index = Vec::with_capacity(batch.index.len() + 2 * SWITCH_RECORD_BYTES);
        if let Some(from) = self.missing_from {
            index.extend_from_slice(&from.to_le_bytes());
            index.push(MISSING);
            let starts_with_switch = batch.index.len() >= SWITCH_RECORD_BYTES
                && batch.index[..8] == batch.start.to_le_bytes();
            if !starts_with_switch && !batch.data.is_empty() {
                index.extend_from_slice(&batch.start.to_le_bytes());
                index.push(batch.first_stream.as_byte());
            }
        }
        index.extend_from_slice(&batch.index);
        if !index.is_empty() {
            // Opened on first use: a command without output costs no file.
            if self.streams.is_none() {
                self.streams = Some(open_write(&streams_path(&self.dir))?);
            }
            let file = self
                .streams
                .as_ref()
                .ok_or_else(|| io::Error::other("no index file"))?;
            write_at(file, &index, self.index_len)?;
        }
        let index_before = self.index_len;
        self.index_len += index.len() as u64;
        if let Err(e) = self.write_data(batch) {
            // The batch's index records must not outlive its bytes: the next gap record goes
            // where they were, and the file is cut there, so no stale switch can follow it.
            self.index_len = index_before;
            if let Some(file) = self.streams.as_ref() {
                let _ = file.set_len(index_before);
            }
            return Err(e);
        }
        Ok(())
    }

    fn write_data(&mut self, batch: &Batch) -> io::Result<()> {
        let mut pos = batch.start;
        let mut rest = &batch.data[..];
        while !rest.is_empty() {
            let segment = (pos - 1) / SEGMENT_BYTES;
            let offset = pos - 1 - segment * SEGMENT_BYTES;
            let n = rest
                .len()
                .min(usize::try_from(SEGMENT_BYTES - offset).unwrap_or(usize::MAX));
            self.write_segment(segment, offset, &rest[..n])?;
            pos += n as u64;
            rest = &rest[n..];
        }
        Ok(())
    }

    fn write_segment(&mut self, segment: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        if self.current.as_ref().map(|(n, _)| *n) != Some(segment) {
            let file = open_write(&segment_path(&self.dir, segment))?;
            self.current = Some((segment, file));
            while segment - self.first_segment >= self.max_segments {
                // Keep the newest output: drop the oldest segment.
                let _ = std::fs::remove_file(segment_path(&self.dir, self.first_segment));
                self.first_segment += 1;
            }
        }
        let (_, file) = self
            .current
            .as_ref()
            .ok_or_else(|| io::Error::other("no segment"))?;
        write_at(file, data, offset)
    }

    /// Closes the files once the log is complete. Without this a finished process would hold
    /// two descriptors for as long as its record is kept (found by RELIABILITY F3/F14: 1000
    /// kept records held 2000 descriptors).
    pub fn finish(&mut self) {
        self.current = None;
        self.streams = None;
    }

    /// Marks bytes from `from` on as not written, as a failed batch does.
    #[cfg(test)]
    pub fn mark_missing_for_test(&mut self, from: u64) {
        self.missing_from.get_or_insert(from);
    }

    /// Where bytes began to go missing, while no write has succeeded since (the gap is not in
    /// the index yet).
    pub fn missing_from(&self) -> Option<u64> {
        self.missing_from
    }

    /// Sequence number of the oldest byte the files may hold.
    pub fn start(&self) -> u64 {
        self.first_segment * SEGMENT_BYTES + 1
    }
}

/// A piece of a spool read: bytes of one stream, or a range the spool does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpoolPiece {
    /// Bytes from `seq` on, of one stream.
    Run(u64, Stream, Vec<u8>),
    /// Bytes `[from, to)` could not be written (disk full, quota).
    Missing(u64, u64),
}

/// Read access to a spool directory (also for spools of a previous daemon).
#[derive(Debug)]
pub(crate) struct SpoolReader {
    dir: PathBuf,
    /// Stream switches in sequence order; `None` starts a missing range.
    switches: Vec<(u64, Option<Stream>)>,
}

impl SpoolReader {
    /// Opens the spool in `dir`, reading its stream index.
    pub fn open(dir: &Path) -> io::Result<SpoolReader> {
        let mut raw = Vec::new();
        match File::open(streams_path(dir)) {
            Ok(mut f) => {
                f.read_to_end(&mut raw)?;
            }
            // Created with the first output: no index, no output yet.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut switches: Vec<(u64, Option<Stream>)> = Vec::new();
        for rec in raw.chunks_exact(SWITCH_RECORD_BYTES) {
            let Ok(seq) = rec[..8].try_into().map(u64::from_le_bytes) else {
                continue;
            };
            let stream = match rec[8] {
                MISSING => None,
                b => match Stream::from_byte(b) {
                    Some(s) => Some(s),
                    None => continue,
                },
            };
            // Records are written in order, a gap record and the stream that resumes after it
            // at their own positions. Should switches of bytes that never reached the disk
            // precede a gap record that starts before them (a crash between the index write
            // and the data write), the gap wins: those switches describe missing bytes.
            if stream.is_none() {
                while switches.last().is_some_and(|(s, _)| *s >= seq) {
                    switches.pop();
                }
            } else if switches.last().is_some_and(|(s, _)| *s > seq) {
                continue;
            }
            switches.push((seq, stream));
        }
        Ok(SpoolReader {
            dir: dir.to_path_buf(),
            switches,
        })
    }

    /// Sequence range `[start, end)` present on disk.
    pub fn range(&self) -> (u64, u64) {
        let mut segments: Vec<u64> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| {
                    let name = e.ok()?.file_name();
                    name.to_str()?.strip_prefix("out.")?.parse().ok()
                })
                .collect()
            })
            .unwrap_or_default();
        segments.sort_unstable();
        let (Some(&first), Some(&last)) = (segments.first(), segments.last()) else {
            return (1, 1);
        };
        let last_len = std::fs::metadata(segment_path(&self.dir, last))
            .map(|m| m.len())
            .unwrap_or(0);
        (
            first * SEGMENT_BYTES + 1,
            last * SEGMENT_BYTES + 1 + last_len,
        )
    }

    /// The stream in force at `seq` (`None`: missing), and where the next switch is.
    fn at(&self, seq: u64) -> (Option<Stream>, Option<u64>) {
        // The last record at or before `seq` wins; records at the same position keep their
        // written order (a gap record, then the stream that resumes there).
        let i = self.switches.partition_point(|(s, _)| *s <= seq);
        let stream = match i {
            0 => Some(Stream::Stdout),
            i => self.switches[i - 1].1,
        };
        (stream, self.switches.get(i).map(|(s, _)| *s))
    }

    /// Reads up to `max` bytes starting at `seq`, as runs and missing ranges in order. Stops at
    /// the end of what is on disk.
    pub fn read(&self, seq: u64, max: usize) -> io::Result<Vec<SpoolPiece>> {
        let (_, disk_end) = self.range();
        let mut pieces: Vec<SpoolPiece> = Vec::new();
        let mut pos = seq;
        let mut left = max as u64;
        while left > 0 && pos < disk_end {
            let (stream, next_switch) = self.at(pos);
            let piece_end = next_switch.unwrap_or(disk_end).min(disk_end);
            let Some(stream) = stream else {
                // A missing range costs nothing against `max`: it carries no bytes.
                pieces.push(SpoolPiece::Missing(pos, piece_end));
                pos = piece_end;
                continue;
            };
            let want = left.min(piece_end - pos);
            let bytes = self.read_bytes(pos, want)?;
            if bytes.is_empty() {
                // Below the end on disk, a segment that is gone was deleted by the cap after
                // `range` was taken (a holder writes on while we read): its bytes are retained
                // nowhere. Said so, and the read goes on with the next segment, which is still
                // there (the oldest go first), instead of ending as if nothing followed.
                let segment = (pos - 1) / SEGMENT_BYTES;
                if segment_path(&self.dir, segment).exists() {
                    break;
                }
                let segment_end = ((segment + 1) * SEGMENT_BYTES + 1).min(disk_end);
                match pieces.last_mut() {
                    Some(SpoolPiece::Missing(_, to)) if *to == pos => *to = segment_end,
                    _ => pieces.push(SpoolPiece::Missing(pos, segment_end)),
                }
                pos = segment_end;
                continue;
            }
            let got = bytes.len() as u64;
            match pieces.last_mut() {
                Some(SpoolPiece::Run(s, st, b)) if *st == stream && *s + b.len() as u64 == pos => {
                    b.extend_from_slice(&bytes)
                }
                _ => pieces.push(SpoolPiece::Run(pos, stream, bytes)),
            }
            pos += got;
            left -= got;
            if got < want {
                break;
            }
        }
        Ok(pieces)
    }

    /// Reads up to `want` bytes from `seq` on, across segment files.
    fn read_bytes(&self, seq: u64, want: u64) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        let mut pos = seq;
        while (buf.len() as u64) < want {
            let segment = (pos - 1) / SEGMENT_BYTES;
            let file = match File::open(segment_path(&self.dir, segment)) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            let offset = pos - 1 - segment * SEGMENT_BYTES;
            let n = (want - buf.len() as u64).min(SEGMENT_BYTES - offset);
            let before = buf.len();
            read_at(&file, offset, n, &mut buf)?;
            let got = (buf.len() - before) as u64;
            pos += got;
            if got < n {
                break;
            }
        }
        Ok(buf)
    }
}

fn read_at(file: &File, offset: u64, n: u64, buf: &mut Vec<u8>) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.take(n).read_to_end(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool(dir: &Path, cap: u64) -> (SpoolBuffer, SpoolFiles) {
        (SpoolBuffer::new(), SpoolFiles::create(dir, cap))
    }

    fn flush(buf: &mut SpoolBuffer, files: &mut SpoolFiles) {
        if let Some(b) = buf.take() {
            files.write(b);
        }
    }

    /// Writes segment 0 full of `a` and puts a directory where segment 1 goes, so the next
    /// write fails as a full disk would fail it (until the directory is removed).
    fn fill_segment_0_and_block_segment_1(dir: &Path, b: &mut SpoolBuffer, f: &mut SpoolFiles) {
        let seg = usize::try_from(SEGMENT_BYTES).expect("segment size");
        b.append(Stream::Stdout, &vec![b'a'; seg]);
        flush(b, f);
        std::fs::create_dir(segment_path(dir, 1)).expect("mkdir");
    }

    fn run(seq: u64, s: Stream, b: &[u8]) -> SpoolPiece {
        SpoolPiece::Run(seq, s, b.to_vec())
    }

    #[test]
    fn reads_back_bytes_and_streams_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        b.append(Stream::Stdout, b"hello ");
        b.append(Stream::Stderr, b"\xff\x00err");
        b.append(Stream::Stdout, b"world");
        assert_eq!(b.unflushed_from(), Some(1));
        flush(&mut b, &mut f);
        assert_eq!(b.unflushed_from(), None);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(r.range(), (1, 17));
        assert_eq!(
            r.read(1, 100).expect("read"),
            vec![
                run(1, Stream::Stdout, b"hello "),
                run(7, Stream::Stderr, b"\xff\x00err"),
                run(12, Stream::Stdout, b"world"),
            ]
        );
        assert_eq!(
            r.read(9, 4).expect("read"),
            vec![
                run(9, Stream::Stderr, b"err"),
                run(12, Stream::Stdout, b"w")
            ]
        );
    }

    #[test]
    fn batches_continue_the_stream_of_the_previous_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        b.append(Stream::Stderr, b"one ");
        flush(&mut b, &mut f);
        b.append(Stream::Stderr, b"two");
        flush(&mut b, &mut f);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(
            r.read(1, 100).expect("read"),
            vec![run(1, Stream::Stderr, b"one two")]
        );
    }

    #[test]
    fn keeps_only_the_newest_segments_within_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), SEGMENT_BYTES * 2);
        let block = vec![b'x'; 1024 * 1024];
        for _ in 0..13 {
            b.append(Stream::Stdout, &block);
            if b.due() {
                flush(&mut b, &mut f);
            }
        }
        flush(&mut b, &mut f);
        // 13 MiB written, 4 MiB segments, cap 2 segments: segments 2 and 3 remain.
        assert_eq!(f.start(), 2 * SEGMENT_BYTES + 1);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(r.range(), (2 * SEGMENT_BYTES + 1, 13 * 1024 * 1024 + 1));
        assert!(!segment_path(dir.path(), 1).exists());
    }

    #[test]
    fn a_buffer_is_due_when_full_or_old() {
        let mut b = SpoolBuffer::new();
        assert!(!b.due());
        b.append(Stream::Stdout, b"x");
        assert!(!b.due(), "one fresh byte waits for more");
        b.oldest_at = Some(Instant::now() - FLUSH_AGE);
        assert!(
            b.due(),
            "an old byte is written even while output keeps coming"
        );
        let mut full = SpoolBuffer::new();
        full.append(Stream::Stdout, &vec![b'x'; FLUSH_BYTES]);
        assert!(full.due());
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_never_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, segment_path(dir.path(), 0)).expect("symlink");
        let (mut b, mut f) = spool(dir.path(), 1 << 20);
        b.append(Stream::Stdout, b"secret");
        flush(&mut b, &mut f);
        assert!(f.failing.is_some());
        assert_eq!(f.dropped, 6);
        assert!(!target.exists());
    }

    /// A write that fails (here: the next segment's path is a directory, as a full disk would
    /// fail it) makes a recorded gap, and the spool recovers on the next batch: what is read back
    /// says exactly which bytes are missing, with the right streams around them.
    #[test]
    fn a_failed_write_leaves_a_recorded_gap_and_the_spool_recovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        fill_segment_0_and_block_segment_1(dir.path(), &mut b, &mut f);
        b.append(Stream::Stderr, b"lost!");
        flush(&mut b, &mut f);
        assert!(f.failing.is_some());
        assert_eq!(f.dropped, 5);
        // Space returns.
        std::fs::remove_dir(segment_path(dir.path(), 1)).expect("rmdir");
        b.append(Stream::Stderr, b"after");
        flush(&mut b, &mut f);
        assert!(f.failing.is_none());
        let r = SpoolReader::open(dir.path()).expect("open");
        let s = SEGMENT_BYTES;
        assert_eq!(
            r.read(s - 1, 100).expect("read"),
            vec![
                run(s - 1, Stream::Stdout, b"aa"),
                SpoolPiece::Missing(s + 1, s + 6),
                run(s + 6, Stream::Stderr, b"after"),
            ]
        );
    }

    #[test]
    fn a_gap_inside_a_segment_is_reported_not_read_as_zeros() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        b.append(Stream::Stdout, b"aaaa");
        flush(&mut b, &mut f);
        // Simulate a failed batch: its bytes are handed out and never written.
        b.append(Stream::Stdout, b"bbbb");
        let lost = b.take().expect("batch");
        f.dropped += lost.data.len() as u64;
        f.missing_from = Some(lost.start);
        b.append(Stream::Stdout, b"cccc");
        flush(&mut b, &mut f);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(
            r.read(1, 100).expect("read"),
            vec![
                run(1, Stream::Stdout, b"aaaa"),
                SpoolPiece::Missing(5, 9),
                run(9, Stream::Stdout, b"cccc"),
            ]
        );
        assert_eq!(r.read(6, 100).expect("read")[0], SpoolPiece::Missing(6, 9));
    }

    /// A batch whose switch records reached the index but whose bytes did not: the gap record
    /// written later starts before those records, and they must not describe missing bytes as
    /// data (found in review).
    #[test]
    fn switches_of_a_failed_batch_never_describe_its_missing_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        fill_segment_0_and_block_segment_1(dir.path(), &mut b, &mut f);
        b.append(Stream::Stdout, b"xxxxx");
        b.append(Stream::Stderr, b"yyyyy");
        flush(&mut b, &mut f);
        assert!(f.failing.is_some());
        std::fs::remove_dir(segment_path(dir.path(), 1)).expect("rmdir");
        b.append(Stream::Stderr, b"after");
        flush(&mut b, &mut f);
        let s = SEGMENT_BYTES;
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(
            r.read(s + 1, 100).expect("read"),
            vec![
                SpoolPiece::Missing(s + 1, s + 11),
                run(s + 11, Stream::Stderr, b"after"),
            ]
        );
    }

    /// Found with issue 25 item 3: the cap deletes the oldest segment while a reader is between
    /// taking the spool's range and opening the segment. The bytes of the deleted segment are
    /// missing; the segments after it are still read (a read that ended there would make a page
    /// jump over them).
    #[test]
    fn a_segment_deleted_under_a_reader_is_missing_and_the_rest_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, mut f) = spool(dir.path(), 1 << 30);
        let seg = usize::try_from(SEGMENT_BYTES).expect("segment size");
        b.append(Stream::Stdout, &vec![b'a'; seg]);
        b.append(Stream::Stdout, &vec![b'b'; seg]);
        b.append(Stream::Stdout, b"ccc");
        flush(&mut b, &mut f);
        let r = SpoolReader::open(dir.path()).expect("open");
        std::fs::remove_file(segment_path(dir.path(), 0)).expect("rm");
        let s = SEGMENT_BYTES;
        let pieces = r.read(s - 1, seg + 10).expect("read");
        assert_eq!(pieces.len(), 2, "a gap, then the next segment");
        assert_eq!(pieces[0], SpoolPiece::Missing(s - 1, s + 1));
        let SpoolPiece::Run(at, Stream::Stdout, bytes) = &pieces[1] else {
            panic!("{:?}", pieces[1]);
        };
        assert_eq!(*at, s + 1);
        assert_eq!(bytes.len(), seg + 3);
        assert!(bytes.ends_with(b"bccc"));
    }

    /// An index left by a crash between the index write and the data write: the gap record that
    /// follows starts before the stale switch, and the stale switch is dropped.
    #[test]
    fn a_gap_record_overrides_stale_switches_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Vec::new();
        for (seq, byte) in [(1u64, 1u8), (10, 2), (5, MISSING), (20, 2)] {
            index.extend_from_slice(&seq.to_le_bytes());
            index.push(byte);
        }
        std::fs::write(dir.path().join("streams"), &index).expect("index");
        std::fs::write(segment_path(dir.path(), 0), vec![b'z'; 24]).expect("segment");
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(
            r.read(1, 100).expect("read"),
            vec![
                run(1, Stream::Stdout, b"zzzz"),
                SpoolPiece::Missing(5, 20),
                run(20, Stream::Stderr, b"zzzzz"),
            ]
        );
    }
}
