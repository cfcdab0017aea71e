//! A bounded, in-memory window of the most recent output, addressed by absolute sequence numbers.
//!
//! Chunks keep the stream they came from, so one ring serves both streams in arrival order.
//! Eviction drops bytes from the front (whole chunks, or a prefix of the first one), so sequence
//! numbers of retained bytes never change: a cursor stays valid across wrap-around.

use std::collections::VecDeque;

use super::Stream;

/// Appends to the newest chunk while it is smaller than this, so a chatty process that writes a
/// few bytes at a time does not cost one allocation per write.
const COALESCE_BELOW: usize = 16 * 1024;

/// A run of bytes from one stream.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// Sequence number of `data[offset]`.
    pub start: u64,
    pub stream: Stream,
    data: Vec<u8>,
    /// Bytes already evicted from the front of `data`.
    offset: usize,
}

impl Chunk {
    /// The retained bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.offset..]
    }

    /// Sequence number after the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.bytes().len() as u64
    }
}

/// Most recent output, at most `capacity` bytes.
#[derive(Debug)]
pub(crate) struct Ring {
    chunks: VecDeque<Chunk>,
    capacity: usize,
    len: usize,
    /// Sequence number of the oldest retained byte (== end when empty).
    start: u64,
}

impl Ring {
    /// An empty ring whose first byte will have sequence number `start`.
    pub fn new(capacity: usize, start: u64) -> Ring {
        Ring {
            chunks: VecDeque::new(),
            capacity: capacity.max(1),
            len: 0,
            start,
        }
    }

    /// Sequence number of the oldest retained byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Appends `data` (which gets sequence numbers from `self.end()` on) and evicts the oldest
    /// bytes beyond capacity.
    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        // Only the newest `capacity` bytes of an oversized write can be retained.
        let data = if data.len() > self.capacity {
            let skip = data.len() - self.capacity;
            self.evict(self.len);
            self.start += skip as u64;
            &data[skip..]
        } else {
            data
        };
        let end = self.start + self.len as u64;
        match self.chunks.back_mut() {
            Some(last)
                if last.stream == stream
                    && last.offset == 0
                    && last.data.len() < COALESCE_BELOW
                    && last.end() == end =>
            {
                last.data.extend_from_slice(data);
            }
            _ => self.chunks.push_back(Chunk {
                start: end,
                stream,
                data: data.to_vec(),
                offset: 0,
            }),
        }
        self.len += data.len();
        if self.len > self.capacity {
            self.evict(self.len - self.capacity);
        }
    }

    fn evict(&mut self, mut n: usize) {
        while n > 0 {
            let Some(first) = self.chunks.front_mut() else {
                break;
            };
            let avail = first.bytes().len();
            if avail <= n {
                n -= avail;
                self.len -= avail;
                self.start += avail as u64;
                self.chunks.pop_front();
            } else {
                first.offset += n;
                first.start += n as u64;
                self.len -= n;
                self.start += n as u64;
                n = 0;
            }
        }
        if let Some(first) = self.chunks.front_mut()
            && first.offset > first.data.len() / 2
        {
            // Give memory back once most of a large chunk is gone.
            first.data.drain(..first.offset);
            first.offset = 0;
        }
    }

    /// Retained chunks, oldest first.
    pub fn chunks(&self) -> impl DoubleEndedIterator<Item = &Chunk> {
        self.chunks.iter()
    }

    /// A fresh ring holding only the newest `keep` bytes of this one, in allocations of their
    /// own size: what an ended process keeps in memory once the spool has the rest.
    pub fn tail(&self, keep: usize) -> Ring {
        let from = self.end().saturating_sub(keep as u64).max(self.start);
        let mut tail = Ring::new(keep, from);
        for chunk in &self.chunks {
            if chunk.end() <= from {
                continue;
            }
            let skip = usize::try_from(from.saturating_sub(chunk.start)).unwrap_or(0);
            tail.push(chunk.stream, &chunk.bytes()[skip..]);
        }
        tail
    }

    /// Sequence number after the newest byte.
    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    /// Bytes currently held.
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(r: &Ring) -> Vec<(u64, Stream, Vec<u8>)> {
        r.chunks()
            .map(|c| (c.start, c.stream, c.bytes().to_vec()))
            .collect()
    }

    #[test]
    fn coalesces_same_stream_and_splits_on_switch() {
        let mut r = Ring::new(100, 1);
        r.push(Stream::Stdout, b"ab");
        r.push(Stream::Stdout, b"cd");
        r.push(Stream::Stderr, b"E");
        assert_eq!(
            contents(&r),
            vec![
                (1, Stream::Stdout, b"abcd".to_vec()),
                (5, Stream::Stderr, b"E".to_vec())
            ]
        );
    }

    #[test]
    fn eviction_keeps_absolute_offsets() {
        let mut r = Ring::new(4, 1);
        r.push(Stream::Stdout, b"abc");
        r.push(Stream::Stderr, b"de");
        assert_eq!(r.start(), 2);
        assert_eq!(r.len(), 4);
        assert_eq!(
            contents(&r),
            vec![
                (2, Stream::Stdout, b"bc".to_vec()),
                (4, Stream::Stderr, b"de".to_vec())
            ]
        );
    }

    #[test]
    fn an_oversized_write_keeps_its_newest_bytes() {
        let mut r = Ring::new(3, 1);
        r.push(Stream::Stdout, b"x");
        r.push(Stream::Stdout, b"123456");
        assert_eq!(r.start(), 5);
        assert_eq!(contents(&r), vec![(5, Stream::Stdout, b"456".to_vec())]);
    }
}
