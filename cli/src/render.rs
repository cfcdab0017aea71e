//! Human output: raw output bytes, escaped table cells, durations, JSON printing.
//!
//! Output of processes is written byte-exact (`read > file` reproduces it); only table cells are
//! escaped, so a command line with escape sequences cannot repaint the user's terminal.

use std::io::Write;

use serde::Serialize;

/// Writes raw bytes to stdout.
pub fn stdout_bytes(b: &[u8]) -> std::io::Result<()> {
    if b.is_empty() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(b)?;
    out.flush()
}

/// Writes raw bytes to stderr.
pub fn stderr_bytes(b: &[u8]) -> std::io::Result<()> {
    if b.is_empty() {
        return Ok(());
    }
    let mut err = std::io::stderr().lock();
    err.write_all(b)?;
    err.flush()
}

/// Prints a JSON object on one line.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// Escapes control characters and invalid UTF-8 for display in a table cell.
pub fn escape(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            '\r' => s.push_str("\\r"),
            c if c.is_control() => s.push_str(&format!("\\x{:02x}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

/// `1.2s`, `3m05s`, `2h01m`.
pub fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{}.{}s", secs, (ms % 1000) / 100)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else if secs < 86_400 {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    } else {
        format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3600)
    }
}

/// Shortens text to `max` characters with an ellipsis.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_control_sequences() {
        assert_eq!(escape(b"a\x1b[31mb\n"), "a\\x1b[31mb\\n");
        assert_eq!(escape(b"\xff"), "\u{fffd}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_ms(1_234), "1.2s");
        assert_eq!(duration_ms(185_000), "3m05s");
        assert_eq!(duration_ms(7_260_000), "2h01m");
    }
}
