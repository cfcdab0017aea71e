//! Untrusted text made inert before it is drawn. A process's name, command line and output are
//! whatever its author (or an agent) chose: an escape sequence in them must not reach the
//! person's terminal as one (it could retitle the window, move the cursor over the table, or
//! answer a terminal query with keystrokes), nor may invisible characters reorder what the
//! person reads.
//!
//! Everything drawn by `yieldctl top` that did not come from `yieldctl` itself goes through
//! [`escaped`] (table cells: control characters shown as `\x1b`, `\n`, …) or [`printable`]
//! (screen rows of the emulator, which holds printable text only: anything else becomes `?`).

/// Whether `c` changes how other text shows without showing itself: bidirectional overrides
/// and isolates, zero-width characters, the byte order mark, the soft hyphen.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}')
}

/// `text` with every control character (C0, DEL, C1: ESC and CSI included) and invisible
/// formatting character written out as an escape (`\x1b`, `\n`, `\u{202e}`); invalid UTF-8
/// becomes U+FFFD.
pub fn escaped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if invisible(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `text` with anything that is not printable replaced by `?` (the emulator's rows should have
/// none; this is the last line of defence).
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || invisible(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_are_written_out() {
        assert_eq!(escaped(b"a\x1b]0;owned\x07b"), "a\\x1b]0;owned\\x07b");
        assert_eq!(escaped("x\u{9b}2J".as_bytes()), "x\\x9b2J", "C1 CSI");
        assert_eq!(escaped(b"l1\nl2\r\t\x7f"), "l1\\nl2\\r\\t\\x7f");
        assert_eq!(escaped(b"\xff"), "\u{fffd}");
        assert_eq!(
            escaped("evil\u{202e}txt.exe".as_bytes()),
            "evil\\u{202e}txt.exe"
        );
        assert_eq!(escaped("npm run dev ✓".as_bytes()), "npm run dev ✓");
    }

    #[test]
    fn rows_keep_text_only() {
        assert_eq!(printable("ok\x1b[31m\u{200b}"), "ok?[31m?");
        assert_eq!(printable("  42 │ done"), "  42 │ done");
    }
}
