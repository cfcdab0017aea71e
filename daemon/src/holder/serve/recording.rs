//! What becomes of each pipe read: buffered for the spool and written in batches no larger
//! than the daemon's ring (so every byte the ring has given up is on disk), after a pause, at an
//! age, before an EOF and before a new daemon's greeting; queued at once for the daemon as an
//! output frame; and, when the spool loses bytes, a health frame after them.

use super::Holder;
use crate::holder::{Kind, stream_byte};
use crate::output::Stream;
use crate::output::spool::FLUSH_AGE;

/// How long output must pause before the spool's buffer is written. A process that prints a
/// line now and then has it on disk at once, give or take this; a flood's reads (many per
/// millisecond) are batched instead of one `pwrite` each. A holder killed outright loses at most
/// this long, [`FLUSH_AGE`] or one batch of its process's output on disk.
pub(super) const SPOOL_QUIET: std::time::Duration = std::time::Duration::from_millis(50);

impl Holder {
    /// Buffers the bytes for the spool (writing a full batch) and queues them for the daemon.
    /// The spool lacks only the buffer, fewer bytes than the daemon's ring holds.
    pub(super) fn record(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.last_output = std::time::Instant::now();
        if let Some((buffer, files)) = self.spool.as_mut() {
            buffer.append(stream, data);
            if buffer.pending_len() >= self.spool_batch
                && let Some(batch) = buffer.take()
            {
                files.write(batch);
            }
        }
        self.next_seq += data.len() as u64;
        if let Some(c) = self.conn.as_mut() {
            let len = u32::try_from(2 + data.len()).unwrap_or(u32::MAX);
            c.out.extend_from_slice(&len.to_le_bytes());
            c.out.push(Kind::Output as u8);
            c.out.push(stream_byte(stream));
            c.out.extend_from_slice(data);
        }
        self.report_spool_health();
    }

    /// How long until the spool's buffer is due to be written (zero: now); `None` when it is
    /// empty.
    pub(super) fn spool_due_in(&self) -> Option<std::time::Duration> {
        let (buffer, _) = self.spool.as_ref()?;
        let age = buffer.age()?;
        let quiet = SPOOL_QUIET.saturating_sub(self.last_output.elapsed());
        Some(quiet.min(FLUSH_AGE.saturating_sub(age)))
    }

    /// Writes the spool's buffer.
    pub(super) fn write_spool(&mut self) {
        if let Some((buffer, files)) = self.spool.as_mut()
            && let Some(batch) = buffer.take()
        {
            files.write(batch);
            self.report_spool_health();
        }
    }

    /// Tells the daemon when the count of bytes the spool lost has changed.
    fn report_spool_health(&mut self) {
        let lost = self.spool_lost();
        if lost != self.reported_health {
            self.reported_health = lost;
            let failing = self
                .spool
                .as_ref()
                .and_then(|(_, f)| f.failing.clone())
                .unwrap_or_default();
            let frame = crate::holder::Encoder::new(Kind::Health)
                .u64(lost)
                .rest(failing.as_bytes())
                .finish();
            self.queue(&frame);
        }
    }

    pub(super) fn spool_lost(&self) -> u64 {
        self.spool
            .as_ref()
            .map_or(0, |(b, f)| b.discarded + f.dropped)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::super::test_holder::{frames, on_disk, output, spooled, spooling_holder};
    use super::*;
    use crate::holder::Decoder;
    use crate::output::spool::SpoolPiece;

    /// Frames reach the daemon in the order the bytes came, whatever their stream, and the
    /// spool numbers the same bytes the same way: a daemon that reads a page from disk (older
    /// than its ring, or after a restart) gets exactly the bytes the frames carried at those
    /// sequence numbers, and the next daemon's ring starts after them.
    #[test]
    fn frames_and_spool_keep_the_order_and_numbering_of_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (daemon, ours) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(ours, dir.path(), usize::MAX);
        h.record(Stream::Stdout, b"first ");
        h.record(Stream::Stderr, b"oops ");
        h.record(Stream::Stdout, b"second");
        h.flush();
        assert_eq!(
            frames(&daemon),
            vec![
                output(Stream::Stdout, b"first "),
                output(Stream::Stderr, b"oops "),
                output(Stream::Stdout, b"second"),
            ],
            "frames in the order the bytes came"
        );
        h.write_spool();
        assert_eq!(
            spooled(dir.path()),
            vec![
                SpoolPiece::Run(1, Stream::Stdout, b"first ".to_vec()),
                SpoolPiece::Run(7, Stream::Stderr, b"oops ".to_vec()),
                SpoolPiece::Run(12, Stream::Stdout, b"second".to_vec()),
            ]
        );
        assert_eq!(
            h.hello().next_seq,
            18,
            "a later daemon's ring starts after them"
        );
    }

    /// Bytes the spool could not keep are told to the daemon once per change, after the output
    /// they belong to (a `Health` frame: how many, and why), so `read` can say output is
    /// missing from disk; a later daemon's [`Hello`] carries the count.
    #[test]
    fn bytes_the_spool_lost_are_told_after_their_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool_dir = dir.path().join("procs");
        std::fs::create_dir(&spool_dir).expect("mkdir");
        let (daemon, ours) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(ours, &spool_dir, 1);
        // The spool's directory goes (as a full disk or a removed state directory fails it).
        std::fs::remove_dir(&spool_dir).expect("rmdir");
        h.record(Stream::Stdout, b"lost bytes");
        h.flush();
        let got = frames(&daemon);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], output(Stream::Stdout, b"lost bytes"));
        let (kind, payload) = &got[1];
        assert_eq!(*kind, Kind::Health);
        let mut d = Decoder::new(payload);
        assert_eq!(d.u64().expect("lost"), 10);
        assert!(!d.rest().is_empty(), "the health frame says why");
        // Once the spool writes again, no new health frame: the count did not change.
        std::fs::create_dir(&spool_dir).expect("mkdir");
        h.record(Stream::Stdout, b"kept");
        h.flush();
        assert_eq!(frames(&daemon), vec![output(Stream::Stdout, b"kept")]);
        assert_eq!(h.hello().dropped, 10);
    }

    /// Issue 26 item 7: reads below the batch stay in memory (one `pwrite` per batch, not per
    /// read), while every byte is queued for the daemon at once; reaching the batch writes
    /// everything buffered.
    #[test]
    fn output_is_written_to_the_spool_once_a_batch_is_reached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(holder_end, dir.path(), 100);
        h.record(Stream::Stdout, &[b'a'; 60]);
        assert_eq!(on_disk(dir.path()), b"", "below the batch: buffered");
        let queued = h.conn.as_ref().expect("conn").out.len();
        assert_eq!(queued, 4 + 2 + 60, "the daemon gets the bytes at once");
        h.record(Stream::Stdout, &[b'b'; 40]);
        let mut want = vec![b'a'; 60];
        want.extend_from_slice(&[b'b'; 40]);
        assert_eq!(on_disk(dir.path()), want, "the batch is written whole");
        assert_eq!(h.spool_due_in(), None, "nothing left buffered");
    }
}
