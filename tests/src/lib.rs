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
