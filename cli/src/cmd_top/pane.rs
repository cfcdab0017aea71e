//! The output pane: the selected process's live output, as a terminal would show it.
//!
//! Both kinds of process are drawn through a terminal emulator (`vt100`) held here, so that
//! what reaches the person's terminal is the emulator's text — cells of printable characters —
//! never the process's bytes: a colour code, a cursor movement or a window-title sequence in the
//! output changes the emulator, not the person's screen.
//!
//! - A pipe process: an emulator the size of the pane, fed the interleaved log from a little
//!   before its end (newlines taken as a terminal takes them, `\n` → `\r\n`), so the pane shows
//!   the last lines, carriage-return progress bars rewritten in place.
//! - A terminal process: an emulator the size of the process's own terminal, painted from the
//!   daemon's screen (`read(screen)`), then fed the raw output from exactly the position that
//!   screen reflects, so the pane shows its rendered screen.
//!
//! A [`follow`] task per selected process feeds the pane through the app's channel; the app
//! aborts it when the selection moves. The task follows again from the first byte not yet fed
//! when its stream breaks (a daemon restart), so the pane never shows a byte twice.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

use super::inert;

/// How much of the log before its end a pipe process's pane starts from.
const TAIL_BYTES: u64 = 64 * 1024;
/// Pause before following again after the stream broke.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// Largest emulator accepted (a terminal process's own size is at most 1000×1000, and a pane
/// is a part of the person's window).
const MAX_SIDE: u16 = 1000;

/// What a follow task sends the app.
#[derive(Debug)]
pub enum PaneEvent {
    /// The pane starts over: a terminal process's screen (`formatted`, its size), or a pipe
    /// process (no screen).
    Start {
        /// Process id.
        id: String,
        /// The terminal process's screen, as redraw sequences, with its size.
        screen: Option<(Vec<u8>, u16, u16)>,
    },
    /// Output to feed.
    Data {
        /// Process id.
        id: String,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The process ended and its output is complete.
    Ended {
        /// Process id.
        id: String,
    },
    /// A note for the pane's title (why output is missing).
    Note {
        /// Process id.
        id: String,
        /// What to say.
        text: String,
    },
}

/// The pane's state for one process.
pub struct Pane {
    /// The process shown.
    pub id: String,
    parser: vt100::Parser,
    /// A terminal process (its screen is shown at its own size).
    pub tty: bool,
    /// Its output is complete.
    pub ended: bool,
    /// Why output is missing, if it is.
    pub note: Option<String>,
}

fn side(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n.clamp(1, MAX_SIDE)).unwrap_or(std::num::NonZeroU16::MIN)
}

impl Pane {
    /// An empty pane for `id`, `rows`×`cols` until the process says otherwise.
    pub fn new(id: &str, rows: u16, cols: u16) -> Pane {
        Pane {
            id: id.to_string(),
            parser: vt100::Parser::new(side(rows), side(cols), 0),
            tty: false,
            ended: false,
            note: None,
        }
    }

    /// Starts over with a terminal process's screen, or empty for a pipe process of a pane of
    /// `rows`×`cols`.
    pub fn start(&mut self, screen: Option<(Vec<u8>, u16, u16)>, rows: u16, cols: u16) {
        self.ended = false;
        self.note = None;
        match screen {
            Some((formatted, screen_rows, screen_cols)) => {
                self.tty = true;
                self.parser = vt100::Parser::new(side(screen_rows), side(screen_cols), 0);
                self.parser.process(&formatted);
            }
            None => {
                self.tty = false;
                self.parser = vt100::Parser::new(side(rows), side(cols), 0);
            }
        }
    }

    /// Feeds output.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.tty {
            self.parser.process(bytes);
            return;
        }
        // A pipe's lines end in `\n` alone; a terminal's line discipline would add the `\r`.
        let mut at = 0;
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                self.parser.process(&bytes[at..i]);
                self.parser.process(b"\r\n");
                at = i + 1;
            }
        }
        self.parser.process(&bytes[at..]);
    }

    /// A pipe process's pane follows the pane's size (the text already shown is not reflowed).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        if !self.tty && (rows, cols) != self.size() {
            self.parser.set_size(side(rows), side(cols));
        }
    }

    /// The emulator's size (rows, cols).
    pub fn size(&self) -> (u16, u16) {
        let (r, c) = self.parser.screen().size();
        (r.get(), c.get())
    }

    /// The rows to draw (at most `rows` of at most `cols` characters): a pipe process's last
    /// lines, a terminal process's screen from its top left.
    pub fn lines(&self, rows: u16, cols: u16) -> Vec<String> {
        let screen = self.parser.screen();
        let all: Vec<String> = screen.rows(0, cols).map(|r| inert::printable(&r)).collect();
        if self.tty {
            return all.into_iter().take(usize::from(rows)).collect();
        }
        // The cursor's row is the last one written to; below it the pane is empty.
        let (cursor_row, cursor_col) = screen.cursor_position();
        let last = if cursor_col == 0 {
            usize::from(cursor_row)
        } else {
            usize::from(cursor_row) + 1
        };
        let written = &all[..last.min(all.len())];
        let from = written.len().saturating_sub(usize::from(rows));
        written[from..].to_vec()
    }
}

/// Follows `id`'s output into the app's channel until the process ended (or the app aborts the
/// task). `tty`: it runs on a terminal (its screen is painted first).
pub async fn follow(session: Arc<Session>, id: String, tty: bool, tx: mpsc::Sender<PaneEvent>) {
    let note = |text: String| PaneEvent::Note {
        id: id.clone(),
        text,
    };
    // Where to follow from, and whether the raw bytes (a terminal's screen) are wanted.
    let start = if tty {
        screen_start(&session, &id).await
    } else {
        None
    };
    let (mut since, raw) = match start {
        Some((formatted, rows, cols, seq)) => {
            let screen = Some((formatted, rows, cols));
            if tx
                .send(PaneEvent::Start {
                    id: id.clone(),
                    screen,
                })
                .await
                .is_err()
            {
                return;
            }
            (seq, true)
        }
        None => {
            let end = match session
                .read(pb::ReadRequest {
                    process_id: id.clone(),
                    max_output_bytes: Some(1),
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.output.map_or(1, |o| o.next_seq),
                Err(e) => {
                    let _ = tx.send(note(format!("cannot read its output: {e}"))).await;
                    return;
                }
            };
            if tx
                .send(PaneEvent::Start {
                    id: id.clone(),
                    screen: None,
                })
                .await
                .is_err()
            {
                return;
            }
            (end.saturating_sub(TAIL_BYTES).max(1), false)
        }
    };
    loop {
        let stream = session
            .follow(pb::FollowRequest {
                process_id: id.clone(),
                since_seq: Some(since),
                streams: pb::Streams::Both as i32,
                raw,
                ..Default::default()
            })
            .await;
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) if e.kind() == yieldshell_proto::errors::ErrorKind::UnknownProcess => {
                let _ = tx.send(note("gone (cleaned up)".into())).await;
                return;
            }
            Err(_) => {
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
        };
        while let Some(Ok(ev)) = stream.next().await {
            since = since.max(ev.seq + ev.data.len() as u64).max(ev.dropped_to);
            if !ev.data.is_empty()
                && tx
                    .send(PaneEvent::Data {
                        id: id.clone(),
                        bytes: ev.data,
                    })
                    .await
                    .is_err()
            {
                return;
            }
            if ev.ended.is_some() {
                let _ = tx.send(PaneEvent::Ended { id: id.clone() }).await;
                return;
            }
        }
        // The stream broke before the end (the daemon went away): follow again from `since`.
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// A terminal process's screen: its redraw sequences, size and log position; `None` when the
/// daemon has none (it ended and the daemon restarted since): then its text is followed.
async fn screen_start(session: &Session, id: &str) -> Option<(Vec<u8>, u16, u16, u64)> {
    let read = session
        .read(pb::ReadRequest {
            process_id: id.to_string(),
            screen: true,
            raw: true,
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await
        .ok()?;
    let screen = read.screen?;
    let rows = u16::try_from(screen.rows).ok()?;
    let cols = u16::try_from(screen.cols).ok()?;
    Some((screen.formatted, rows, cols, screen.seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_pane_shows_the_last_lines_with_progress_rewritten() {
        let mut pane = Pane::new("p", 3, 20);
        pane.feed(b"one\ntwo\nthree\nfour\n10%\r100%");
        assert_eq!(pane.lines(3, 20), ["three", "four", "100%"]);
        assert_eq!(pane.lines(2, 3), ["fou", "100"], "clipped to what fits");
    }

    #[test]
    fn sequences_in_the_output_change_the_emulator_not_the_screen() {
        let mut pane = Pane::new("p", 4, 30);
        // A colour, a window title (OSC), a cursor jump and a clear, then text.
        pane.feed(b"\x1b[31mred\x1b[0m\n\x1b]0;owned\x07title\n\x1b[2J\x1b[Hgone?\n");
        let text = pane.lines(4, 30).join("\n");
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
        assert!(text.contains("gone?"), "{text:?}");
    }

    #[test]
    fn a_terminal_pane_is_painted_from_its_screen_then_follows_it() {
        let mut pane = Pane::new("t", 10, 40);
        pane.start(
            Some((b"\x1b[H\x1b[2Jtop line\r\nsecond".to_vec(), 5, 20)),
            10,
            40,
        );
        assert!(pane.tty);
        assert_eq!(pane.size(), (5, 20));
        pane.feed(b"\x1b[1;1Hrewritten");
        let lines = pane.lines(10, 40);
        assert_eq!(lines.len(), 5, "the process's own rows");
        assert_eq!(lines[0], "rewritten");
        assert_eq!(lines[1], "second");
    }
}
