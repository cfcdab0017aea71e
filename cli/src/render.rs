//! Human output: raw output bytes, escaped table cells, aligned tables, durations and relative
//! times, JSON printing.
//!
//! Output of processes is written byte-exact (`read > file` reproduces it); only table cells are
//! escaped, so a command line with escape sequences cannot repaint the user's terminal. The only
//! escape sequences `yieldctl` itself prints are the colours of [`crate::style`], and only when
//! the caller asked for them.
//!
//! Every write to stdout goes through this module and returns its `io::Error`, never panics
//! (`println!` is denied in this crate): a reader that closed the pipe (`| head`) surfaces as
//! `ErrorKind::BrokenPipe`, which `main` turns into a quiet exit 0 for every command and format.

use std::io::Write;

use serde::Serialize;

use crate::style::Color;

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

/// Writes one line of text to stdout: `println!` that reports a closed stdout instead of
/// panicking.
pub fn line(text: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(text)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Prints a JSON object on one line. A failed write is the `io::Error` itself (not wrapped in a
/// `serde_json::Error`), so a closed stdout is recognised as one.
pub fn json<T: Serialize>(value: &T) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()
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

/// How long ago `then_ms` was at `now_ms` (both Unix milliseconds): `5s ago`, `3m ago`,
/// `2h ago`, `4d ago`. A time in the future (clock skew) reads `just now`.
pub fn ago(now_ms: i64, then_ms: i64) -> String {
    let Ok(ms) = u64::try_from(now_ms - then_ms) else {
        return "just now".into();
    };
    let secs = ms / 1000;
    if secs < 60 {
        format!("{secs}s ago")
    } else if secs < 3600 {
        format!("{}m ago", secs / 60)
    } else if secs < 86_400 {
        format!("{}h ago", secs / 3600)
    } else {
        format!("{}d ago", secs / 86_400)
    }
}

/// A CPU figure: `12.5%` (percent of one CPU), `-` when there is none.
pub fn cpu(percent: Option<f64>) -> String {
    match percent {
        Some(p) if p >= 100.0 => format!("{p:.0}%"),
        Some(p) => format!("{p:.1}%"),
        None => "-".into(),
    }
}

/// Resident memory: `812K`, `23.4M`, `1.2G` (powers of 1024), `-` when there is none.
pub fn memory(bytes: Option<u64>) -> String {
    let Some(b) = bytes else {
        return "-".into();
    };
    const K: f64 = 1024.0;
    let b = b as f64;
    if b < K * K {
        format!("{:.0}K", b / K)
    } else if b < K * K * K {
        format!("{:.1}M", b / (K * K))
    } else {
        format!("{:.1}G", b / (K * K * K))
    }
}

/// The current time in Unix milliseconds.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A left-aligned text table: columns separated by two spaces, widths from the visible text.
///
/// Widths are computed before colour is applied, so coloured cells line up exactly like plain
/// ones (a table library that measures the escape sequences would misalign them).
#[derive(Debug)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<(String, Option<Color>)>>,
    color: bool,
}

impl Table {
    /// A table with these column headers; `color` says whether cell colours are printed.
    pub fn new(header: Vec<&'static str>, color: bool) -> Table {
        Table {
            header,
            rows: Vec::new(),
            color,
        }
    }

    /// Adds a row: one `(text, colour)` per column.
    pub fn row(&mut self, cells: Vec<(String, Option<Color>)>) {
        self.rows.push(cells);
    }

    /// The rendered table, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.header.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (i, (text, _)) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(width(text));
                }
            }
        }
        let mut out = String::new();
        let header = self.header.iter().map(|h| (h.to_string(), None));
        let lines = std::iter::once(header.collect::<Vec<_>>()).chain(self.rows.iter().cloned());
        for cells in lines {
            let mut line = String::new();
            let last = cells.len().saturating_sub(1);
            for (i, (text, color)) in cells.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                match color {
                    Some(c) if self.color => line.push_str(&c.paint(text)),
                    _ => line.push_str(text),
                }
                if i < last {
                    let pad = widths
                        .get(i)
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(width(text));
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
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

/// Prints, on stderr, the sandbox's reading of a failed process ("… denied: declare
/// MODIFIES_WORKSPACE_FILES"), if it has one: what a person needs to run it again with the right
/// declaration. `--json` has it in `sandbox.denied`.
pub fn sandbox_denial(info: &yieldshell_proto::pb::ProcessInfo) {
    if let Some(denied) = info.sandbox.as_ref().map(|s| &s.denied)
        && !denied.is_empty()
    {
        eprintln!("[yieldctl: sandbox: {denied}]");
    }
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
    fn figures_read_as_percent_and_binary_units() {
        assert_eq!(cpu(Some(12.34)), "12.3%");
        assert_eq!(cpu(Some(199.6)), "200%");
        assert_eq!(cpu(None), "-");
        assert_eq!(memory(Some(812 * 1024)), "812K");
        assert_eq!(memory(Some(23 * 1024 * 1024 + 400 * 1024)), "23.4M");
        assert_eq!(memory(Some(3 << 30)), "3.0G");
        assert_eq!(memory(None), "-");
    }

    #[test]
    fn relative_times_read_naturally() {
        let now = 1_000_000_000;
        assert_eq!(ago(now, now - 4_900), "4s ago");
        assert_eq!(ago(now, now - 185_000), "3m ago");
        assert_eq!(ago(now, now - 7_260_000), "2h ago");
        assert_eq!(ago(now, now - 3 * 86_400_000), "3d ago");
        assert_eq!(ago(now, now + 5_000), "just now");
    }

    #[test]
    fn tables_align_on_visible_width_even_when_coloured() {
        let mut t = Table::new(vec!["ID", "STATUS", "CMD"], true);
        t.row(vec![
            ("a".into(), None),
            ("running".into(), Some(Color::Yellow)),
            ("sleep 9".into(), None),
        ]);
        t.row(vec![
            ("bbb".into(), None),
            ("ok".into(), Some(Color::Green)),
            ("true".into(), None),
        ]);
        assert_eq!(
            t.render(),
            "ID   STATUS   CMD\n\
             a    \x1b[33mrunning\x1b[0m  sleep 9\n\
             bbb  \x1b[32mok\x1b[0m       true\n"
        );
        let plain = Table { color: false, ..t };
        assert_eq!(
            plain.render(),
            "ID   STATUS   CMD\na    running  sleep 9\nbbb  ok       true\n"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_ms(1_234), "1.2s");
        assert_eq!(duration_ms(185_000), "3m05s");
        assert_eq!(duration_ms(7_260_000), "2h01m");
    }
}
