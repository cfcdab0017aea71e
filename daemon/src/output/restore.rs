//! Logs rebuilt from a spool someone else wrote: a closed log from an earlier daemon's spool
//! ([`OutputLog::restore`]), an open one for a process re-adopted from its holder
//! ([`OutputLog::adopted`]), and the log whose spool a holder writes ([`OutputLog::held`]). The
//! ring is refilled from the disk and the totals recounted, so a restarted daemon answers as
//! the one before it did.

use std::path::Path;

use super::ring::Ring;
use super::spool::{SpoolPiece, SpoolReader};
use super::{LogEnd, OutputLog, Stream};

impl OutputLog {
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
}
