//! The daemon's side of a terminal process (ARCHITECTURE.md, "Terminal processes"): the rendered screen, input to the
//! PTY master, named keys, and the escape-free text of answers.
//!
//! # Where things live
//! The holder owns the PTY master and reads it (`spawn::pty`); the daemon gets a duplicate
//! of the master in the holder's greeting. [`Terminal`] keeps one copy for queries and controls
//! (window size, termios, foreground group: ioctls straight on the master, no holder frame) and
//! the stdin writer gets another ([`MasterWriter`]). Input is written to the master and never
//! into the output log: what a program shows of typed input is only what the terminal echoes,
//! so with `ECHO` off (a password prompt) nothing of it is recorded anywhere.
//!
//! # The screen
//! A `vt100` emulator lives in the daemon (the holder stays small), fed the whole output stream
//! of the process from the [`OutputLog`] by a task that follows the log ([`spawn_feeder`]); a
//! `read(screen=true)` first brings it up to the log's end, so the screen it answers reflects
//! exactly the bytes before its `seq`. The emulator keeps **no scrollback** (the log is the
//! history): its memory is the visible grid, 32 bytes a cell, twice (main and alternate
//! screen), whatever the process prints: 120×40 is 300 KiB, the largest terminal (1000×1000
//! cells, see [`MAX_CELLS`]) 64 MiB. A re-adopting daemon rebuilds the emulator from the last
//! [`REBUILD_BYTES`] of the retained log (a full-screen program that has not repainted since may
//! show stale rows until it does).
//!
//! # Answers without escapes
//! `read`, `wait`, `exec` and `write(until)` answers of a terminal process carry its text
//! without escape sequences ([`plain_text`]): printable characters go through, `\n` ends a
//! line, a carriage return moves back to the line's start and later characters overwrite
//! earlier ones as on a terminal (`"progress 10%\rprogress 100%"` reads `progress 100%`;
//! `"abcdef\rXY"` reads `XYcdef`), backspace moves back one column, erase-in-line (`ESC [ K`)
//! cuts the line, tabs are kept, every other control character and sequence is dropped.
//! `follow` strips the sequences but keeps carriage returns ([`EscapeFilter`]: a follower sees
//! lines being rewritten). `raw=true` gives the bytes as written. Sequence numbers always count
//! raw log bytes, so a stripped answer's `next_seq` pages exactly like a raw one.
//!
//! # Secrets put back together
//! The holder redacted the raw bytes, but a secret printed in pieces (a colour change mid-token,
//! a `\r` overwrite, a cursor move between them) is whole again once rendered. So every
//! rendering is redacted again with the process's secrets: the text ([`TextRendering`], what
//! `grep` and `until` match too), `follow`'s stream ([`TextRendering::follow_filter`]), and the
//! screen ([`masked_screen`]: each secret's cells show its replacement instead).

use std::io;
#[cfg(unix)]
use std::os::fd::{AsFd, OwnedFd};
#[cfg(unix)]
use std::pin::Pin;
use std::sync::{Arc, Mutex};
#[cfg(unix)]
use std::task::{Context, Poll, ready};

#[cfg(unix)]
use tokio::io::unix::AsyncFd;
use yieldshell_proto::pb;

use crate::output::{OutputLog, StreamFilter};
use crate::policy::redact::{RedactStream, Redactor};
#[cfg(unix)]
use crate::spawn::pty as master_ops;

pub use crate::spawn::pty::{Modes, TermSize};

/// The daemon's handle on a terminal's master. Terminal mode needs a PTY: on Windows (no ConPTY
/// yet) no [`Terminal`] is ever made, so its master operations cannot be reached.
#[cfg(unix)]
type Master = OwnedFd;
#[cfg(windows)]
type Master = std::convert::Infallible;

#[cfg(windows)]
mod master_ops {
    //! Stand-ins for the PTY master's operations where no terminal exists (see [`Master`]).
    use super::{Master, Modes, TermSize};
    use std::io;
    pub fn size(m: &Master) -> io::Result<TermSize> {
        match *m {}
    }
    pub fn set_size(m: &Master, _: TermSize) -> io::Result<()> {
        match *m {}
    }
    pub fn modes(m: &Master) -> io::Result<Modes> {
        match *m {}
    }
    pub fn foreground_group(m: &Master) -> Option<i32> {
        match *m {}
    }
}
/// The size of a terminal whose `exec` names none.
pub const DEFAULT_SIZE: TermSize = TermSize {
    cols: 120,
    rows: 40,
};
/// The largest number of columns or rows; larger requests are clamped to it.
pub const MAX_CELLS: u32 = 1000;
/// How much of the retained log a re-adopting daemon replays into a new emulator.
pub const REBUILD_BYTES: u64 = 1 << 20;
/// Bytes fed to the emulator per log read.
const FEED_BATCH: usize = 256 * 1024;

/// A size from a request's `cols`/`rows` (`None`: the default, or the current size): 0 is
/// refused, anything above [`MAX_CELLS`] clamped.
pub fn requested_size(
    cols: Option<u32>,
    rows: Option<u32>,
    base: TermSize,
) -> Result<TermSize, String> {
    let cell = |name: &str, v: Option<u32>, default: u16| match v {
        Some(0) => Err(format!(
            "{name} must be between 1 and {MAX_CELLS} (0 is not a terminal size)"
        )),
        Some(n) => Ok(u16::try_from(n.min(MAX_CELLS)).unwrap_or(u16::MAX)),
        None => Ok(default),
    };
    Ok(TermSize {
        cols: cell("cols", cols, base.cols)?,
        rows: cell("rows", rows, base.rows)?,
    })
}

/// The emulator and how far it has read the log.
struct Emulator {
    parser: vt100::Parser,
    /// The next log byte to feed: every byte before it was fed.
    seq: u64,
}

/// A terminal process's master (a duplicate) and rendered screen.
pub struct Terminal {
    /// Released once the process has ended ([`Terminal::release`]): a daemon keeps up to a
    /// thousand ended processes, and their terminals must not cost a descriptor each.
    master: Mutex<Option<Master>>,
    emulator: Mutex<Emulator>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").finish_non_exhaustive()
    }
}

#[cfg(unix)]
fn parser_of(size: TermSize) -> vt100::Parser {
    let cell = |v: u16, default: u16| std::num::NonZeroU16::new(v).unwrap_or_else(|| nz(default));
    vt100::Parser::new(
        cell(size.rows, DEFAULT_SIZE.rows),
        cell(size.cols, DEFAULT_SIZE.cols),
        0,
    )
}

fn nz(v: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(v).unwrap_or(std::num::NonZeroU16::MIN)
}

impl Terminal {
    /// The terminal of a process whose master is `master`; its emulator starts at the log's
    /// beginning, or (re-adoption) [`REBUILD_BYTES`] before the log's end.
    #[cfg(unix)]
    pub fn new(master: OwnedFd, log: &OutputLog) -> Terminal {
        let size = master_ops::size(&master).unwrap_or(DEFAULT_SIZE);
        let end = log.end().next_seq;
        Terminal {
            master: Mutex::new(Some(master)),
            emulator: Mutex::new(Emulator {
                parser: parser_of(size),
                seq: end.saturating_sub(REBUILD_BYTES).max(1),
            }),
        }
    }

    fn emulator(&self) -> std::sync::MutexGuard<'_, Emulator> {
        self.emulator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the master while the daemon has it.
    fn with_master<T>(&self, f: impl FnOnce(&Master) -> T) -> Option<T> {
        self.master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(f)
    }

    /// Lets the master go (the process has ended); the screen stays readable.
    pub fn release(&self) {
        self.master.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// The window size: the kernel's while the master is held, else the emulator's (the size the
    /// terminal last had).
    pub fn size(&self) -> Option<TermSize> {
        self.with_master(|m| master_ops::size(m).ok())
            .flatten()
            .or_else(|| {
                let (rows, cols) = self.emulator().parser.screen().size();
                Some(TermSize {
                    cols: cols.get(),
                    rows: rows.get(),
                })
            })
    }

    /// The line discipline's modes (echo, EOF character).
    pub fn modes(&self) -> Option<Modes> {
        self.with_master(|m| master_ops::modes(m).ok()).flatten()
    }

    /// The foreground process group.
    pub fn foreground_group(&self) -> Option<i32> {
        self.with_master(master_ops::foreground_group).flatten()
    }

    /// Resizes the terminal (the foreground group gets SIGWINCH) and the emulator.
    pub fn resize(&self, size: TermSize) -> io::Result<()> {
        self.with_master(|m| master_ops::set_size(m, size))
            .unwrap_or_else(|| Err(io::Error::other("the terminal is gone with its process")))?;
        self.emulator()
            .parser
            .screen_mut()
            .set_size(nz(size.rows), nz(size.cols));
        Ok(())
    }

    /// Feeds the emulator every log byte it has not seen yet (may read the spool: call it off
    /// the runtime when [`OutputLog::needs_disk`] says so). Returns the position reached.
    pub fn catch_up(&self, log: &OutputLog) -> u64 {
        let mut emu = self.emulator();
        loop {
            let page = log.read_runs(emu.seq, FEED_BATCH, StreamFilter::Both);
            if page.next <= emu.seq && page.gap.is_none() {
                return emu.seq;
            }
            for (_, _, data) in &page.runs {
                emu.parser.process(data);
            }
            emu.seq = page.next;
        }
    }

    /// Where the emulator is in the log.
    pub fn fed_to(&self) -> u64 {
        self.emulator().seq
    }

    /// The bytes a named key sends in the terminal's current mode (arrow keys follow the
    /// application-cursor mode a full-screen program turns on).
    pub fn key_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let app_cursor = self.emulator().parser.screen().application_cursor();
        key_bytes(name, app_cursor)
    }

    /// The rendered screen, up to date with the log (see the module doc), with every secret
    /// of `redactor` that shows on it masked ([`masked_screen`]).
    pub fn screen(&self, log: &OutputLog, redactor: Option<&Redactor>) -> pb::Screen {
        self.catch_up(log);
        let emu = self.emulator();
        let masked = redactor.and_then(|r| masked_screen(emu.parser.screen(), r));
        let screen = masked.as_ref().map_or(emu.parser.screen(), |p| p.screen());
        let (rows, cols) = screen.size();
        let mut lines: Vec<String> = screen
            .rows(0, cols.get())
            .map(|r| r.trim_end().to_string())
            .collect();
        // Trailing empty rows say nothing (the cursor says where the next text goes).
        while lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        let (cursor_row, cursor_col) = screen.cursor_position();
        pb::Screen {
            text: lines.join("\n"),
            cursor_row: u32::from(cursor_row),
            cursor_col: u32::from(cursor_col),
            cols: u32::from(cols.get()),
            rows: u32::from(rows.get()),
            formatted: screen.state_formatted().into_bytes(),
            seq: emu.seq,
        }
    }
}

/// A run of cells on one row that a secret covers, and what they show instead.
struct Mask {
    row: u16,
    col: u16,
    text: String,
}

/// Where secrets show on `screen`: each logical line (rows joined where the terminal wrapped
/// them, an empty cell read as a space, a wide character once) is searched as text, so a secret
/// the rendering put together (`"sk-AB\e[31mCD…"`, a `\r` overwrite, a cursor move between its
/// pieces) is found as a program's reader would see it. Each secret's cells get its
/// replacement, cut to their width or padded with `*`.
fn secret_masks(screen: &vt100::Screen, redactor: &Redactor) -> Vec<Mask> {
    let (rows, cols) = screen.size();
    let (rows, cols) = (rows.get(), cols.get());
    let mut masks = Vec::new();
    let mut text = String::new();
    // Each cell's first byte in `text`: (byte, row, col, width).
    let mut cells: Vec<(usize, u16, u16, u16)> = Vec::new();
    let mut row = 0;
    while row < rows {
        text.clear();
        cells.clear();
        loop {
            for col in 0..cols {
                let Some(cell) = screen.cell(row, col) else {
                    continue;
                };
                if cell.is_wide_continuation() {
                    continue;
                }
                cells.push((text.len(), row, col, if cell.is_wide() { 2 } else { 1 }));
                match cell.contents() {
                    "" => text.push(' '),
                    c => text.push_str(c),
                }
            }
            let wrapped = screen.row_wrapped(row);
            row += 1;
            if !wrapped || row >= rows {
                break;
            }
        }
        for (range, replacement) in redactor.find(text.as_bytes()) {
            let first = cells.partition_point(|c| c.0 < range.start);
            let last = cells.partition_point(|c| c.0 < range.end);
            let covered = &cells[first..last];
            let width: usize = covered.iter().map(|c| usize::from(c.3)).sum();
            let mut shown = replacement
                .iter()
                .map(|&b| {
                    if b.is_ascii_graphic() {
                        char::from(b)
                    } else {
                        '*'
                    }
                })
                .chain(std::iter::repeat('*'))
                .take(width);
            // One mask per row the secret is on: its cells there are side by side.
            for on_row in covered.chunk_by(|a, b| a.1 == b.1) {
                let cells_wide: usize = on_row.iter().map(|c| usize::from(c.3)).sum();
                masks.push(Mask {
                    row: on_row[0].1,
                    col: on_row[0].2,
                    text: shown.by_ref().take(cells_wide).collect(),
                });
            }
        }
    }
    masks
}

/// A copy of `screen` with every secret of `redactor` on it masked ([`secret_masks`]); `None`
/// when none shows. The masks are written into the copy as a terminal would draw them, the
/// cursor (position, origin mode, pen) saved before and restored after, so the copy's text,
/// cells and formatted state are the screen's but for the secrets.
fn masked_screen(screen: &vt100::Screen, redactor: &Redactor) -> Option<vt100::Parser> {
    let masks = secret_masks(screen, redactor);
    if masks.is_empty() {
        return None;
    }
    let (rows, cols) = screen.size();
    let mut copy = vt100::Parser::new(rows, cols, 0);
    *copy.screen_mut() = screen.clone();
    // Save the cursor; absolute positions (origin mode off); plain cells.
    let mut draw = String::from("\x1b7\x1b[?6l\x1b[m");
    for m in &masks {
        draw.push_str(&format!("\x1b[{};{}H{}", m.row + 1, m.col + 1, m.text));
    }
    draw.push_str("\x1b8");
    copy.process(draw.as_bytes());
    Some(copy)
}

/// Keeps `term`'s emulator near the log's end while output comes, so a `read(screen=true)`
/// has little to catch up on. Ends when the log is closed and fed.
pub fn spawn_feeder(term: Arc<Terminal>, log: Arc<OutputLog>) {
    tokio::spawn(async move {
        let mut end_rx = log.subscribe();
        loop {
            let (t, l) = (term.clone(), log.clone());
            // The log may be read from the spool (a flood that outran the ring).
            let fed = match tokio::task::spawn_blocking(move || t.catch_up(&l)).await {
                Ok(fed) => fed,
                Err(_) => return,
            };
            let end = *end_rx.borrow_and_update();
            if end.closed && fed >= end.next_seq {
                return;
            }
            if fed < end.next_seq {
                continue;
            }
            if end_rx.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The bytes of a named key (ARCHITECTURE.md, "Terminal processes"), case-insensitive; `None` for an unknown name.
pub fn key_bytes(name: &str, app_cursor: bool) -> Option<Vec<u8>> {
    let lower = name.trim().to_ascii_lowercase();
    let arrow = |c: u8| {
        if app_cursor {
            vec![0x1b, b'O', c]
        } else {
            vec![0x1b, b'[', c]
        }
    };
    let tilde = |n: &str| format!("\x1b[{n}~").into_bytes();
    Some(match lower.as_str() {
        "enter" | "return" => b"\r".to_vec(),
        "tab" => b"\t".to_vec(),
        "esc" | "escape" => b"\x1b".to_vec(),
        "backspace" => b"\x7f".to_vec(),
        "up" => arrow(b'A'),
        "down" => arrow(b'B'),
        "right" => arrow(b'C'),
        "left" => arrow(b'D'),
        "home" => arrow(b'H'),
        "end" => arrow(b'F'),
        "pageup" => tilde("5"),
        "pagedown" => tilde("6"),
        "delete" => tilde("3"),
        "f1" => b"\x1bOP".to_vec(),
        "f2" => b"\x1bOQ".to_vec(),
        "f3" => b"\x1bOR".to_vec(),
        "f4" => b"\x1bOS".to_vec(),
        "f5" => tilde("15"),
        "f6" => tilde("17"),
        "f7" => tilde("18"),
        "f8" => tilde("19"),
        "f9" => tilde("20"),
        "f10" => tilde("21"),
        "f11" => tilde("23"),
        "f12" => tilde("24"),
        _ => {
            let letter = lower.strip_prefix("c-")?;
            match letter.as_bytes() {
                [c @ b'a'..=b'z'] => vec![c - b'a' + 1],
                _ => return None,
            }
        }
    })
}

/// The names [`key_bytes`] knows, for error messages.
pub const KEY_NAMES: &str = "Enter, Tab, Esc, Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, F1-F12, C-a..C-z";

/// Writes to the PTY master (the stdin writer's sink for a terminal process). The master is
/// non-blocking; a full input queue waits for the terminal to drain, as a pipe would.
#[cfg(unix)]
pub struct MasterWriter(AsyncFd<OwnedFd>);

#[cfg(unix)]
impl MasterWriter {
    /// Over `master` (made non-blocking: its file description is shared with the holder, whose
    /// reads only follow `poll` and take `EAGAIN` in their stride).
    pub fn new(master: OwnedFd) -> io::Result<MasterWriter> {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let flags = OFlag::from_bits_truncate(fcntl(&master, FcntlArg::F_GETFL)?);
        fcntl(&master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        // SAFETY: an OwnedFd's descriptor stays open, and the same one, until it is dropped,
        // which only the AsyncFd that owns it does.
        let fd = unsafe { AsyncFd::register_with_interest(master, tokio::io::Interest::WRITABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(MasterWriter(fd))
    }
}

#[cfg(unix)]
impl tokio::io::AsyncWrite for MasterWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|fd| match nix::unistd::write(fd.get_ref().as_fd(), buf) {
                Ok(n) => Ok(n),
                // The terminal's last process closed it: like a pipe with no reader.
                Err(nix::errno::Errno::EIO) => Err(io::ErrorKind::BrokenPipe.into()),
                Err(e) => Err(e.into()),
            }) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One line being built by [`plain_text`]: characters by column, and the cursor.
#[derive(Default)]
struct PlainText {
    out: String,
    line: Vec<char>,
    col: usize,
}

impl PlainText {
    fn end_line(&mut self) {
        self.out.extend(self.line.drain(..));
        self.col = 0;
    }
}

impl vte::Perform for PlainText {
    fn print(&mut self, c: char) {
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            self.line.resize(self.col, ' ');
            self.line.push(c);
        }
        self.col += 1;
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                self.end_line();
                self.out.push('\n');
            }
            b'\r' => self.col = 0,
            b'\t' => self.print('\t'),
            0x08 => self.col = self.col.saturating_sub(1),
            _ => {}
        }
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        _intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        // Erase in line: 0 (default) to the end, 1 to the cursor, 2 the whole line.
        if action == 'K' {
            let mode = params.iter().next().and_then(|p| p.first().copied());
            match mode.unwrap_or(0) {
                0 => self.line.truncate(self.col),
                1 => {
                    for c in self.line.iter_mut().take(self.col + 1) {
                        *c = ' ';
                    }
                }
                _ => self.line.clear(),
            }
        }
    }
}

/// How answers show a terminal process's output: its [`plain_text`], redacted again with the
/// process's secrets (the rendering puts back together a secret the raw bytes had apart: a
/// colour change, a `\r` overwrite or a cursor move between its pieces).
#[derive(Clone, Debug, Default)]
pub struct TextRendering(Option<Arc<Redactor>>);

impl TextRendering {
    /// Renders with `redactor`'s secrets (`None`: the process has none, or none is known).
    pub fn new(redactor: Option<Arc<Redactor>>) -> TextRendering {
        TextRendering(redactor)
    }

    /// `raw` as the terminal shows it, with no secret in it.
    pub fn text(&self, raw: &[u8]) -> Vec<u8> {
        let text = plain_text(raw);
        match &self.0 {
            Some(r) => r.redact(&text),
            None => text,
        }
    }

    /// The streaming filter of the same rendering, for `follow`.
    pub fn follow_filter(&self) -> EscapeFilter {
        EscapeFilter {
            parser: vte::Parser::new(),
            redact: self.0.clone().map(RedactStream::new),
        }
    }
}

/// A terminal's output as plain text (the rule is in the module doc).
pub fn plain_text(raw: &[u8]) -> Vec<u8> {
    let mut text = PlainText::default();
    let mut parser = vte::Parser::new();
    parser.advance(&mut text, raw);
    text.end_line();
    text.out.into_bytes()
}

/// Strips escape sequences from a stream chunk by chunk (a sequence split between chunks is
/// still recognised), keeping printable text, `\n`, `\r` and `\t`: what `follow` sends. The
/// text is redacted again as a stream ([`TextRendering::follow_filter`]): the few bytes that
/// could start a secret wait for the next chunk, or [`EscapeFilter::finish`].
#[derive(Default)]
pub struct EscapeFilter {
    parser: vte::Parser,
    redact: Option<RedactStream>,
}

/// The output of one [`EscapeFilter::push`].
struct Kept(Vec<u8>);

impl vte::Perform for Kept {
    fn print(&mut self, c: char) {
        let mut b = [0u8; 4];
        self.0.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
    }

    fn execute(&mut self, byte: u8) {
        if matches!(byte, b'\n' | b'\r' | b'\t') {
            self.0.push(byte);
        }
    }
}

impl EscapeFilter {
    /// The text of the next chunk.
    pub fn push(&mut self, raw: &[u8]) -> Vec<u8> {
        let mut kept = Kept(Vec::with_capacity(raw.len()));
        self.parser.advance(&mut kept, raw);
        match self.redact.as_mut() {
            Some(r) => {
                let mut out = Vec::with_capacity(kept.0.len());
                r.push(&kept.0, &mut out);
                out
            }
            None => kept.0,
        }
    }

    /// What redaction held back, once the output is complete (it can no longer be a secret).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(r) = self.redact.as_mut() {
            r.finish(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> String {
        String::from_utf8(plain_text(s.as_bytes())).expect("utf-8")
    }

    #[test]
    fn answers_read_like_the_terminal_showed_them() {
        assert_eq!(plain("progress 10%\rprogress 100%\n"), "progress 100%\n");
        assert_eq!(plain("abcdef\rXY"), "XYcdef");
        assert_eq!(plain("50%\r\x1b[K100%\r\n"), "100%\n");
        assert_eq!(plain("\x1b[1;31mred\x1b[0m plain\r\n"), "red plain\n");
        assert_eq!(plain("ab\x08c\ttab\x07"), "ac\ttab");
        assert_eq!(plain("\x1b]0;title\x07héllo"), "héllo");
    }

    #[test]
    fn a_follow_keeps_carriage_returns_and_sequences_split_between_chunks() {
        let mut f = EscapeFilter::default();
        let mut out = f.push(b"a\x1b[3");
        out.extend(f.push(b"1mb\rc\n"));
        assert_eq!(out, b"ab\rc\n");
    }

    const SECRET: &str = "sk-ABCDEFGHIJKLMNOP0123";

    fn redactor() -> Arc<Redactor> {
        let names = regex::Regex::new("TOKEN").expect("regex");
        let env: Vec<(&[u8], &[u8])> = vec![(b"API_TOKEN", SECRET.as_bytes())];
        Redactor::from_env(&names, env).expect("a secret")
    }

    /// The screen `raw` renders on a terminal of `cols`×`rows`, as `read(screen)` answers it.
    fn rendered(raw: &str, cols: u16, rows: u16) -> pb::Screen {
        let mut parser = parser_of(TermSize { cols, rows });
        parser.process(raw.as_bytes());
        let r = redactor();
        let masked = masked_screen(parser.screen(), &r);
        let screen = masked.as_ref().map_or(parser.screen(), |p| p.screen());
        pb::Screen {
            text: screen
                .rows(0, cols)
                .map(|r| r.trim_end().to_string())
                .collect::<Vec<_>>()
                .join("\n")
                .trim_end()
                .to_string(),
            cursor_row: u32::from(screen.cursor_position().0),
            cursor_col: u32::from(screen.cursor_position().1),
            formatted: screen.state_formatted().into_bytes(),
            ..Default::default()
        }
    }

    /// What a terminal fed `formatted` shows: the formatted state must not carry the secret in
    /// any form a terminal puts back together.
    fn repainted(formatted: &[u8], cols: u16, rows: u16) -> String {
        let mut parser = parser_of(TermSize { cols, rows });
        parser.process(formatted);
        parser.screen().contents()
    }

    #[test]
    fn a_secret_the_rendering_puts_together_is_masked_on_the_screen() {
        let cases = [
            // A colour change mid-token.
            "key sk-ABCDEFGH\x1b[31mIJKLMNOP0123\x1b[0m end\r\n",
            // The tail drawn first, the head over the line's start after a carriage return.
            "key ...........IJKLMNOP0123 end\rkey sk-ABCDEFGH\r\n",
            // A cursor move between the pieces.
            "key \x1b[11CIJKLMNOP0123 end\x1b[1Gkey sk-ABCDEFGH\r\n",
        ];
        for raw in cases {
            assert!(!raw.contains(SECRET));
            let mut plain = parser_of(TermSize { cols: 60, rows: 5 });
            plain.process(raw.as_bytes());
            assert!(plain.screen().contents().contains(SECRET), "{raw:?}");
            let s = rendered(raw, 60, 5);
            assert_eq!(s.text, "key [REDACTED:API_TOKEN]*** end", "{raw:?}");
            assert_eq!((s.cursor_row, s.cursor_col), (1, 0), "{raw:?}");
            let again = repainted(&s.formatted, 60, 5);
            assert!(!again.contains("IJKLMNOP"), "{raw:?}: {again}");
            assert!(again.contains("[REDACTED:API_TOKEN]"), "{raw:?}: {again}");
        }
    }

    #[test]
    fn a_secret_wrapped_across_rows_is_masked_on_both_and_the_cursor_stays() {
        // 20 columns: the secret starts on the first row and wraps onto the second; the cursor
        // ends mid-row with the pen red.
        let s = rendered("0123456789 sk-ABCDEFGH\x1b[31mIJKLMNOP0123 x", 20, 4);
        assert_eq!(s.text, "0123456789 [REDACTED\n:API_TOKEN]*** x");
        assert_eq!((s.cursor_row, s.cursor_col), (1, 16));
        let again = repainted(&s.formatted, 20, 4);
        assert!(
            !again.contains("sk-A") && !again.contains("0123 x"),
            "{again}"
        );
        // Nothing on the screen: the same screen, untouched.
        let plain = rendered("no secret here\r\n", 20, 4);
        assert_eq!(plain.text, "no secret here");
    }

    #[test]
    fn rendered_text_and_a_follow_are_redacted_again() {
        let r = TextRendering::new(Some(redactor()));
        assert_eq!(
            r.text(b"a sk-ABCDEFGH\x1b[31mIJKLMNOP0123\x1b[0m b\r\n"),
            b"a [REDACTED:API_TOKEN] b\n"
        );
        assert_eq!(
            r.text(b"a ...........IJKLMNOP0123 b\ra sk-ABCDEFGH\n"),
            b"a [REDACTED:API_TOKEN] b\n"
        );
        let mut f = r.follow_filter();
        let mut out = f.push(b"a sk-ABCDEF");
        out.extend(f.push(b"GH\x1b[3"));
        out.extend(f.push(b"1mIJKLMNOP0123 b"));
        out.extend(f.finish());
        assert_eq!(out, b"a [REDACTED:API_TOKEN] b");
    }

    #[test]
    fn keys_are_named_case_insensitively_and_unknown_ones_refused() {
        assert_eq!(key_bytes("Enter", false), Some(b"\r".to_vec()));
        assert_eq!(key_bytes("c-C", false), Some(vec![3]));
        assert_eq!(key_bytes("C-z", false), Some(vec![26]));
        assert_eq!(key_bytes("UP", false), Some(b"\x1b[A".to_vec()));
        assert_eq!(key_bytes("up", true), Some(b"\x1bOA".to_vec()));
        assert_eq!(key_bytes("F12", false), Some(b"\x1b[24~".to_vec()));
        assert_eq!(key_bytes("F13", false), None);
        assert_eq!(key_bytes("C-1", false), None);
        assert_eq!(key_bytes("Hyper", false), None);
    }

    #[test]
    fn sizes_are_clamped_and_zero_refused() {
        let s = requested_size(Some(5000), None, DEFAULT_SIZE).expect("clamped");
        assert_eq!(
            s,
            TermSize {
                cols: 1000,
                rows: 40
            }
        );
        assert!(requested_size(Some(0), Some(10), DEFAULT_SIZE).is_err());
        assert!(requested_size(None, Some(0), DEFAULT_SIZE).is_err());
    }

    /// Set in the re-executed test binary, where the test does the measuring alone.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    const CHILD_VAR: &str = "YIELDSHELL_TEST_EMULATOR_FLOOD_CHILD";

    /// The emulator keeps no history: 50 MB of output grow the heap by less than the bound the
    /// module doc gives (the grid's 300 KiB at 120×40, here checked against 1 MiB). Measured
    /// with glibc's heap statistics in a process of its own, where no other test allocates
    /// meanwhile.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn fifty_megabytes_grow_the_emulator_by_less_than_its_bound() {
        crate::test_child::in_own_process(
            "process::terminal::tests::fifty_megabytes_grow_the_emulator_by_less_than_its_bound",
            CHILD_VAR,
            "flood ok",
            flood,
        );
    }

    /// The measurement of the test above, in its own process.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn flood() {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let in_use = || unsafe { libc::mallinfo2() }.uordblks;
        let mut parser = parser_of(DEFAULT_SIZE);
        let mut chunk = Vec::new();
        for i in 0..1000 {
            chunk.extend_from_slice(format!("\x1b[1;3{}mline {i:>5}\x1b[0m ", i % 8).as_bytes());
            chunk.extend_from_slice(&[b'x'; 80]);
            chunk.extend_from_slice(b"\r\n");
        }
        parser.process(&chunk);
        let before = in_use();
        let mut fed = 0;
        while fed < 50_000_000 {
            parser.process(&chunk);
            fed += chunk.len();
        }
        let grown = in_use().saturating_sub(before);
        println!("fed {fed} bytes; the heap grew by {grown} bytes");
        assert!(grown < 1 << 20, "the emulator grew by {grown} bytes");
        assert_eq!(parser.screen().scrollback_len(), 0);
        println!("flood ok");
    }
}
