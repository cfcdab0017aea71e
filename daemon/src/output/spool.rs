//! The capped, segmented on-disk copy of a process's output log.
//!
//! Layout inside the process's directory:
//! - `out.<n>`: segment `n` holds the bytes with sequence numbers
//!   `n * SEGMENT_BYTES + 1 ..= (n + 1) * SEGMENT_BYTES`, so a byte's file and offset follow from
//!   its sequence number alone (O(1) random access, byte-exact).
//! - `streams`: one 9-byte record (sequence number, little-endian u64; stream byte) each time the
//!   stream switches, to tell stdout from stderr.
//!
//! When the segments exceed the cap, the oldest are deleted: the spool keeps the newest output.
//! Write errors (disk full, quota) never reach the process: the spool marks itself degraded,
//! counts what it dropped, and the in-memory ring goes on serving the latest bytes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::Stream;

/// Size of one segment file.
pub(crate) const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;

/// Bytes buffered before they are written: floods arrive in many small pipe reads, and one
/// write per read would make the disk the bottleneck.
pub(crate) const FLUSH_BYTES: usize = 128 * 1024;

/// Beyond this many stream-switch records the spool stops (pathological 1-byte interleaving).
const MAX_SWITCH_RECORDS: u64 = 1 << 20;

const SWITCH_RECORD_BYTES: usize = 9;

/// An append-only spool (writer side).
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    max_segments: u64,
    /// Sequence number of the next byte to append (written or pending).
    end: u64,
    /// Bytes appended but not written yet, starting at `end - pending.len()`.
    pending: Vec<u8>,
    /// Stream-switch records not written yet.
    pending_index: Vec<u8>,
    /// Oldest segment still on disk.
    first_segment: u64,
    current: Option<(u64, File)>,
    streams: Option<File>,
    last_stream: Option<Stream>,
    switch_records: u64,
    /// Bytes that could not be written.
    pub dropped: u64,
    /// The first error that degraded the spool.
    pub degraded: Option<String>,
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("out.{n}"))
}

fn streams_path(dir: &Path) -> PathBuf {
    dir.join("streams")
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags_nofollow()
        .open(path)
}

/// `O_NOFOLLOW` on Unix, so a planted symlink can never redirect our writes.
trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            self.custom_flags(libc::O_NOFOLLOW)
        }
        #[cfg(not(unix))]
        {
            self
        }
    }
}

impl Spool {
    /// A new, empty spool in `dir` (which must exist), keeping at most `cap_bytes` (rounded up to
    /// whole segments).
    pub fn create(dir: &Path, cap_bytes: u64) -> Spool {
        Spool {
            dir: dir.to_path_buf(),
            max_segments: cap_bytes.div_ceil(SEGMENT_BYTES).max(1),
            end: 1,
            pending: Vec::new(),
            pending_index: Vec::new(),
            first_segment: 0,
            current: None,
            streams: None,
            last_stream: None,
            switch_records: 0,
            dropped: 0,
            degraded: None,
        }
    }

    fn degrade(&mut self, why: String) {
        if self.degraded.is_none() {
            tracing::warn!(dir = %self.dir.display(), "output spool degraded: {why}");
            self.degraded = Some(why);
        }
    }

    /// Appends bytes; never fails (errors degrade the spool instead). Bytes are buffered up to
    /// [`FLUSH_BYTES`]; [`Spool::flush`] writes them.
    pub fn append(&mut self, stream: Stream, data: &[u8]) {
        if self.degraded.is_some() {
            self.dropped += data.len() as u64;
            self.end += data.len() as u64;
            return;
        }
        if self.last_stream != Some(stream) {
            if self.switch_records >= MAX_SWITCH_RECORDS {
                self.degrade("too many stream switches".into());
                return self.append(stream, data);
            }
            self.pending_index
                .extend_from_slice(&self.end.to_le_bytes());
            self.pending_index.push(stream.as_byte());
            self.switch_records += 1;
            self.last_stream = Some(stream);
        }
        self.pending.extend_from_slice(data);
        self.end += data.len() as u64;
        if self.pending.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// Sequence number of the oldest byte not yet written, if any.
    pub fn unflushed_from(&self) -> Option<u64> {
        (!self.pending.is_empty()).then(|| self.end - self.pending.len() as u64)
    }

    /// Writes everything pending.
    pub fn flush(&mut self) {
        if self.pending.is_empty() && self.pending_index.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.pending);
        let index = std::mem::take(&mut self.pending_index);
        if self.degraded.is_some() {
            self.dropped += data.len() as u64;
            return;
        }
        let mut pos = self.end - data.len() as u64;
        let mut rest = &data[..];
        while !rest.is_empty() {
            let segment = (pos - 1) / SEGMENT_BYTES;
            let room = (segment + 1) * SEGMENT_BYTES - (pos - 1);
            let n = rest.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            if let Err(e) = self.write_segment(segment, &rest[..n]) {
                self.degrade(format!("writing spool segment: {e}"));
                self.dropped += rest.len() as u64;
                return;
            }
            pos += n as u64;
            rest = &rest[n..];
        }
        if !index.is_empty() {
            // Opened on first use: a command without output costs no file.
            if self.streams.is_none() {
                match open_append(&streams_path(&self.dir)) {
                    Ok(f) => self.streams = Some(f),
                    Err(e) => {
                        self.degrade(format!("opening spool index: {e}"));
                        return;
                    }
                }
            }
            let written = self
                .streams
                .as_mut()
                .ok_or_else(|| io::Error::other("no index"))
                .and_then(|f| f.write_all(&index));
            if let Err(e) = written {
                self.degrade(format!("writing spool index: {e}"));
            }
        }
        // Give back the memory of a flood's buffer once it has been written.
        self.pending = if data.capacity() <= 2 * FLUSH_BYTES {
            let mut d = data;
            d.clear();
            d
        } else {
            Vec::new()
        };
    }

    fn write_segment(&mut self, segment: u64, data: &[u8]) -> io::Result<()> {
        if self.current.as_ref().map(|(n, _)| *n) != Some(segment) {
            let file = open_append(&segment_path(&self.dir, segment))?;
            self.current = Some((segment, file));
            while segment - self.first_segment >= self.max_segments {
                // Keep the newest output: drop the oldest segment.
                let _ = std::fs::remove_file(segment_path(&self.dir, self.first_segment));
                self.first_segment += 1;
            }
        }
        let (_, file) = self
            .current
            .as_mut()
            .ok_or_else(|| io::Error::other("no segment"))?;
        file.write_all(data)
    }

    /// Writes what is pending and closes the files, once the log is complete. Without this a
    /// finished process would hold two descriptors for as long as its record is kept (found by
    /// RELIABILITY F3/F14: 1000 kept records held 2000 descriptors).
    pub fn finish(&mut self) {
        self.flush();
        self.current = None;
        self.streams = None;
    }

    /// Sequence number of the oldest byte on disk.
    pub fn start(&self) -> u64 {
        (self.first_segment * SEGMENT_BYTES + 1).min(self.end)
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Read access to a spool directory (also for spools of a previous daemon).
#[derive(Debug)]
pub(crate) struct SpoolReader {
    dir: PathBuf,
    switches: Vec<(u64, Stream)>,
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
        let switches = raw
            .chunks_exact(SWITCH_RECORD_BYTES)
            .filter_map(|rec| {
                let seq = u64::from_le_bytes(rec[..8].try_into().ok()?);
                Some((seq, Stream::from_byte(rec[8])?))
            })
            .collect();
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

    fn stream_at(&self, seq: u64) -> Stream {
        match self.switches.partition_point(|(s, _)| *s <= seq) {
            0 => Stream::Stdout,
            i => self.switches[i - 1].1,
        }
    }

    /// Next switch strictly after `seq`.
    fn next_switch_after(&self, seq: u64) -> Option<u64> {
        let i = self.switches.partition_point(|(s, _)| *s <= seq);
        self.switches.get(i).map(|(s, _)| *s)
    }

    /// Reads up to `max` bytes starting at `seq` as runs of `(start_seq, stream, bytes)`.
    pub fn read(&self, seq: u64, max: usize) -> io::Result<Vec<(u64, Stream, Vec<u8>)>> {
        let mut runs: Vec<(u64, Stream, Vec<u8>)> = Vec::new();
        let mut pos = seq;
        let mut left = max as u64;
        while left > 0 {
            let segment = (pos - 1) / SEGMENT_BYTES;
            let mut file = match File::open(segment_path(&self.dir, segment)) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            };
            let seg_end = (segment + 1) * SEGMENT_BYTES + 1;
            let want = left.min(seg_end - pos);
            file.seek(SeekFrom::Start(pos - 1 - segment * SEGMENT_BYTES))?;
            let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
            file.take(want).read_to_end(&mut buf)?;
            if buf.is_empty() {
                break;
            }
            let got = buf.len() as u64;
            // Split the bytes at stream switches.
            let mut off = 0u64;
            while off < got {
                let at = pos + off;
                let stream = self.stream_at(at);
                let run_end = self
                    .next_switch_after(at)
                    .map_or(got, |s| (s - pos).min(got));
                let bytes =
                    &buf[usize::try_from(off).unwrap_or(0)..usize::try_from(run_end).unwrap_or(0)];
                match runs.last_mut() {
                    Some((s, st, b)) if *st == stream && *s + b.len() as u64 == at => {
                        b.extend_from_slice(bytes)
                    }
                    _ => runs.push((at, stream, bytes.to_vec())),
                }
                off = run_end;
            }
            pos += got;
            left -= got;
            if got < want {
                break;
            }
        }
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_bytes_and_streams_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Spool::create(dir.path(), 1 << 30);
        s.append(Stream::Stdout, b"hello ");
        s.append(Stream::Stderr, b"\xff\x00err");
        s.append(Stream::Stdout, b"world");
        assert_eq!(s.unflushed_from(), Some(1));
        s.flush();
        assert_eq!(s.unflushed_from(), None);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(r.range(), (1, 17));
        let runs = r.read(1, 100).expect("read");
        assert_eq!(
            runs,
            vec![
                (1, Stream::Stdout, b"hello ".to_vec()),
                (7, Stream::Stderr, b"\xff\x00err".to_vec()),
                (12, Stream::Stdout, b"world".to_vec()),
            ]
        );
        assert_eq!(
            r.read(9, 4).expect("read"),
            vec![
                (9, Stream::Stderr, b"err".to_vec()),
                (12, Stream::Stdout, b"w".to_vec())
            ]
        );
    }

    #[test]
    fn keeps_only_the_newest_segments_within_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Spool::create(dir.path(), SEGMENT_BYTES * 2);
        let block = vec![b'x'; 1024 * 1024];
        for _ in 0..13 {
            s.append(Stream::Stdout, &block);
        }
        s.flush();
        // 13 MiB written, 4 MiB segments, cap 2 segments: segments 2 and 3 remain.
        assert_eq!(s.start(), 2 * SEGMENT_BYTES + 1);
        let r = SpoolReader::open(dir.path()).expect("open");
        assert_eq!(r.range(), (2 * SEGMENT_BYTES + 1, 13 * 1024 * 1024 + 1));
        assert!(!segment_path(dir.path(), 1).exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_degrades_instead_of_following() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, segment_path(dir.path(), 0)).expect("symlink");
        let mut s = Spool::create(dir.path(), 1 << 20);
        s.append(Stream::Stdout, b"secret");
        s.flush();
        assert!(s.degraded.is_some());
        assert_eq!(s.dropped, 6);
        assert!(!target.exists());
    }
}
