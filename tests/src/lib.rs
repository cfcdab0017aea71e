//! Shared pieces of the end-to-end tests: byte patterns that `yieldshell-testbin` emits and the
//! tests check byte for byte, so both sides agree on exactly what was written.

/// The non-UTF-8 test output (RELIABILITY B1): invalid bytes, NUL, an encoded surrogate, a bare
/// CR, and a multibyte character split across the 64 KiB pipe-read boundary.
pub fn bad_utf8_bytes() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"start \xff\xfe invalid, NUL:\x00, surrogate:\xed\xa0\x80, bare CR:\r|\n");
    b.resize(65_535, b'a');
    b.extend_from_slice("€ after the boundary\n".as_bytes());
    b.extend_from_slice(b"end \xc3\n");
    b
}

/// Deterministic filler: byte `i` is printable and position-dependent, so a lost, repeated or
/// reordered byte is detected.
pub fn flood_byte(i: u64) -> u8 {
    b'A' + (i % 26) as u8
}

/// `len` bytes of the flood pattern starting at byte offset `start` (seq `start + 1`), checked
/// without a per-byte loop: compares against one precomputed window of the periodic pattern.
pub fn is_flood_at(start: u64, data: &[u8]) -> bool {
    use std::sync::OnceLock;
    static PATTERN: OnceLock<Vec<u8>> = OnceLock::new();
    let pattern = PATTERN.get_or_init(|| (0..(1u64 << 20) + 26).map(flood_byte).collect());
    let phase = (start % 26) as usize;
    data.chunks(1 << 20).enumerate().all(|(k, chunk)| {
        // Each chunk starts (1 << 20) * k bytes later; the phase shifts by that modulo 26.
        let p = (phase + ((1usize << 20) * k) % 26) % 26;
        chunk == &pattern[p..p + chunk.len()]
    })
}
