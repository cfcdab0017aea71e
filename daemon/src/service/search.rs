//! `read` with `grep`: the output lines that match a regex, each with its sequence number and
//! lines of context, searched in one bounded pass over everything retained (the ring, and the
//! spool for what the ring no longer has).
//!
//! Lines are those `until` matches ([`LineWindow`]): one stream's bytes up to a newline, a
//! terminal process's as plain text, a line over 64 KiB searched in overlapping windows in
//! bounded memory. Lines are taken in the order they end; context is the lines before and after
//! a match in that order. The pass stops at the first of: the end of the log, `max_matches`
//! matching lines (after their context), the output cap, [`SCAN_BYTES`] read or [`SCAN_TIME`]
//! spent. Where it stopped is exact: every line that ended before `next_seq` was searched, and
//! none after it, so searching on from `next_seq` finds each later match once (a line of the
//! other stream that straddles the stop is the one exception: its stream's unfinished line
//! starts the next search, so lines of this stream after that start are searched again).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use regex::bytes::Regex;
use yieldshell_proto::pb;

use super::output::{LineWindow, MAX_MATCH_LINE};
use crate::output::{OutputLog, Piece, Stream, StreamFilter};
use crate::process::terminal;

/// Most bytes one search reads (the default spool cap: one call can search a whole log).
pub(super) const SCAN_BYTES: u64 = 64 << 20;
/// Longest one search runs before it answers with where it stopped.
pub(super) const SCAN_TIME: Duration = Duration::from_secs(10);
/// Most context lines before and after a match.
pub(super) const MAX_CONTEXT: u32 = 20;
/// Matching lines returned when the request does not say.
pub(super) const DEFAULT_MAX_MATCHES: u32 = 50;
/// Most matching lines one search returns.
pub(super) const MAX_MATCHES: u32 = 1000;
/// Longest line text returned; a longer line is cut around its first match.
const MAX_SHOWN: usize = 1000;
/// How much of a cut line is shown before its match.
const SHOWN_BEFORE_MATCH: usize = 200;
/// Bytes of each line kept to show it as context (a terminal's escape sequences take room too).
const HEAD_BYTES: usize = 4 * MAX_SHOWN;
/// The mark of a cut.
const ELLIPSIS: &str = "…";

/// What to search for and how much to return.
pub(super) struct SearchQuery {
    pub re: Regex,
    pub since: u64,
    pub streams: StreamFilter,
    /// Context lines before and after each match.
    pub context: usize,
    pub max_matches: usize,
    /// Most bytes of line text returned (the request's `max_output_bytes`).
    pub max_text: usize,
    /// Match and show lines as a terminal shows them (a terminal process, without `raw`).
    pub terminal: Option<terminal::TextRendering>,
}

/// What a search found and where it stopped.
pub(super) struct SearchAnswer {
    pub lines: Vec<pb::SearchLine>,
    /// Where the search began (after bytes retained nowhere at its start).
    pub first_seq: u64,
    /// Search on from here.
    pub next_seq: u64,
    /// Stopped before the end.
    pub has_more: bool,
    /// Bytes in the searched range are retained nowhere.
    pub truncated: bool,
    pub scanned_bytes: u64,
}

/// One stream's line in progress.
#[derive(Default)]
struct OpenLine {
    /// Where it starts, once a byte (or its newline) came.
    start: Option<u64>,
    window: LineWindow,
    /// Its first bytes, to show it as context.
    head: Vec<u8>,
    len: u64,
    /// It matched before its end (a long line): the window the match is in.
    found: Option<Vec<u8>>,
}

/// A line that did not match, kept in case a match follows.
struct Candidate {
    seq: u64,
    stream: Stream,
    head: Vec<u8>,
    len: u64,
}

struct Scanner<'q> {
    q: &'q SearchQuery,
    lines: [OpenLine; 2],
    before: VecDeque<Candidate>,
    after_left: usize,
    out: Vec<pb::SearchLine>,
    text_bytes: usize,
    matches: usize,
    /// Where the scanner stopped taking lines: the start of the first line it did not take, or
    /// the byte after the last one it did.
    stopped_at: Option<u64>,
    first_seq: u64,
    /// Nothing was read yet (a gap here moves `first_seq`).
    at_start: bool,
    truncated: bool,
    scanned: u64,
    started: Instant,
}

fn stream_index(stream: Stream) -> usize {
    usize::from(stream == Stream::Stderr)
}

fn pb_stream(stream: Stream) -> pb::Stream {
    match stream {
        Stream::Stdout => pb::Stream::Stdout,
        Stream::Stderr => pb::Stream::Stderr,
    }
}

/// Moves `at` back to the start of the UTF-8 character it is in.
fn char_start(text: &[u8], mut at: usize) -> usize {
    at = at.min(text.len());
    while at > 0 && at < text.len() && text[at] & 0xC0 == 0x80 {
        at -= 1;
    }
    at
}

/// At most [`MAX_SHOWN`] bytes of `text` from `from` on (moved to a character boundary), "…"
/// marking what is left out: before, when `from` is not 0 or `text` does not start its line;
/// after, when the cut ends early or `text` does not end its line.
fn shown(text: &[u8], from: usize, starts_line: bool, ends_line: bool) -> Vec<u8> {
    let from = char_start(text, from);
    let to = char_start(text, from + MAX_SHOWN);
    let mut out = Vec::with_capacity(to - from + 2 * ELLIPSIS.len());
    if from > 0 || !starts_line {
        out.extend_from_slice(ELLIPSIS.as_bytes());
    }
    out.extend_from_slice(&text[from..to]);
    if to < text.len() || !ends_line {
        out.extend_from_slice(ELLIPSIS.as_bytes());
    }
    out
}

impl<'q> Scanner<'q> {
    fn new(q: &'q SearchQuery) -> Scanner<'q> {
        Scanner {
            q,
            lines: [OpenLine::default(), OpenLine::default()],
            before: VecDeque::new(),
            after_left: 0,
            out: Vec::new(),
            text_bytes: 0,
            matches: 0,
            stopped_at: None,
            first_seq: q.since,
            at_start: true,
            truncated: false,
            scanned: 0,
            started: Instant::now(),
        }
    }

    fn stop(&mut self, at: u64) -> ControlFlow<()> {
        self.stopped_at = Some(at);
        ControlFlow::Break(())
    }

    fn visit(&mut self, piece: Piece<'_>) -> ControlFlow<()> {
        match piece {
            Piece::Gap(_, to) => {
                if self.at_start {
                    self.first_seq = to;
                }
                self.truncated = true;
                // The lines the gap cut off end there: searched as they are.
                for i in 0..2 {
                    self.end_line(i)?;
                }
                ControlFlow::Continue(())
            }
            Piece::Bytes(seq, stream, data) => {
                if self.scanned >= SCAN_BYTES || self.started.elapsed() >= SCAN_TIME {
                    return self.stop(seq);
                }
                self.at_start = false;
                self.scanned += data.len() as u64;
                if !self.q.streams.selects(stream) {
                    return ControlFlow::Continue(());
                }
                self.bytes(seq, stream_index(stream), data)
            }
        }
    }

    fn bytes(&mut self, seq: u64, i: usize, data: &[u8]) -> ControlFlow<()> {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            self.extend(i, seq + start as u64, &data[start..nl]);
            self.end_line(i)?;
            start = nl + 1;
        }
        if start < data.len() {
            self.extend(i, seq + start as u64, &data[start..]);
        }
        ControlFlow::Continue(())
    }

    fn extend(&mut self, i: usize, seq: u64, piece: &[u8]) {
        let line = &mut self.lines[i];
        if line.start.is_none() {
            line.start = Some(seq);
            line.head.clear();
            line.len = 0;
        }
        line.len += piece.len() as u64;
        let keep = HEAD_BYTES.saturating_sub(line.head.len()).min(piece.len());
        line.head.extend_from_slice(&piece[..keep]);
        if line.found.is_none()
            && let Some((_, window)) = line.window.extend(&self.q.re, seq, piece)
        {
            line.found = Some(window);
        }
    }

    /// The text shown of a line: a match's cut around its first match, another line's start.
    fn show(&self, text: &[u8], starts_line: bool, ends_line: bool, is_match: bool) -> Vec<u8> {
        let plain;
        let text = match &self.q.terminal {
            Some(r) => {
                plain = r.text(text);
                &plain[..]
            }
            None => text,
        };
        let from = if is_match {
            self.q
                .re
                .find(text)
                .map_or(0, |m| m.start().saturating_sub(SHOWN_BEFORE_MATCH))
        } else {
            0
        };
        shown(text, from, starts_line, ends_line)
    }

    /// The line of stream `i` ended (at its newline, a gap, or the end of the log), if one was
    /// open.
    fn end_line(&mut self, i: usize) -> ControlFlow<()> {
        let line = &mut self.lines[i];
        let Some(seq) = line.start.take() else {
            return ControlFlow::Continue(());
        };
        let stream = if i == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        let len = line.len;
        // A window of a long line starts and ends inside it; a shorter line is whole (a
        // terminal's as its plain text).
        let whole = len <= MAX_MATCH_LINE as u64;
        let found = match line.found.take() {
            Some(window) => {
                line.window.clear();
                Some(window)
            }
            None => line
                .window
                .finish(&self.q.re, self.q.terminal.as_ref())
                .map(|(_, text)| text),
        };
        if let Some(text) = found {
            let text = self.show(&text, whole, whole, true);
            return self.take_match(seq, stream, text, seq + len + 1);
        }
        if self.after_left == 0 && self.q.context == 0 {
            // Shown nowhere: its buffer is kept for the next line.
            return ControlFlow::Continue(());
        }
        let head = std::mem::take(&mut line.head);
        self.take_other(Candidate {
            seq,
            stream,
            head,
            len,
        })
    }

    fn candidate_line(&self, c: &Candidate) -> pb::SearchLine {
        pb::SearchLine {
            seq: c.seq,
            stream: pb_stream(c.stream) as i32,
            text: self.show(&c.head, true, c.len <= c.head.len() as u64, false),
            context: true,
        }
    }

    fn take_match(&mut self, seq: u64, stream: Stream, text: Vec<u8>, end: u64) -> ControlFlow<()> {
        if self.matches >= self.q.max_matches {
            // Met while showing the last match's context: the next search starts here.
            return self.stop(seq);
        }
        let before: Vec<pb::SearchLine> =
            self.before.iter().map(|c| self.candidate_line(c)).collect();
        let group = text.len() + before.iter().map(|l| l.text.len()).sum::<usize>();
        if !self.out.is_empty() && self.text_bytes + group > self.q.max_text {
            // The next search starts with this match (its context before is then not shown).
            return self.stop(seq);
        }
        self.before.clear();
        self.text_bytes += group;
        self.out.extend(before);
        self.out.push(pb::SearchLine {
            seq,
            stream: pb_stream(stream) as i32,
            text,
            context: false,
        });
        self.matches += 1;
        self.after_left = self.q.context;
        if self.matches >= self.q.max_matches && self.after_left == 0 {
            return self.stop(end);
        }
        ControlFlow::Continue(())
    }

    fn take_other(&mut self, c: Candidate) -> ControlFlow<()> {
        if self.after_left > 0 {
            let line = self.candidate_line(&c);
            if self.text_bytes + line.text.len() > self.q.max_text {
                return self.stop(c.seq);
            }
            self.text_bytes += line.text.len();
            self.out.push(line);
            self.after_left -= 1;
            if self.after_left == 0 && self.matches >= self.q.max_matches {
                return self.stop(c.seq + c.len + 1);
            }
            return ControlFlow::Continue(());
        }
        if self.before.len() == self.q.context {
            self.before.pop_front();
        }
        self.before.push_back(c);
        ControlFlow::Continue(())
    }

    /// Where the next search starts: `stopped_at`, or earlier where a stream's unfinished line
    /// starts (it is searched once it ends).
    fn resume_at(&self, stopped_at: u64) -> u64 {
        self.lines
            .iter()
            .filter_map(|l| l.start)
            .fold(stopped_at, u64::min)
    }
}

/// Searches `log` (reads the disk: run it on a blocking thread).
pub(super) fn search(log: &OutputLog, q: &SearchQuery) -> SearchAnswer {
    let mut scanner = Scanner::new(q);
    let end = log.scan(q.since, &mut |piece| scanner.visit(piece));
    if scanner.stopped_at.is_none() && end.closed {
        // The last line of an ended process ends with the log.
        for i in 0..2 {
            if scanner.end_line(i).is_break() {
                break;
            }
        }
    }
    let (next_seq, has_more) = match scanner.stopped_at {
        Some(at) => {
            let resume = scanner.resume_at(at);
            // An unfinished line that started where this search did, and that the search
            // stopped inside, would start every search again: the next goes on from the stop.
            let resume = if resume <= q.since { at } else { resume };
            (resume, true)
        }
        None => (scanner.resume_at(end.next_seq), false),
    };
    // A line the log's end finished has no newline to step over.
    let next_seq = next_seq.min(log.end().next_seq);
    SearchAnswer {
        first_seq: scanner.first_seq.min(next_seq),
        next_seq,
        has_more,
        truncated: scanner.truncated,
        scanned_bytes: scanner.scanned,
        lines: scanner.out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pattern: &str, context: usize, max_matches: usize) -> SearchQuery {
        SearchQuery {
            re: Regex::new(pattern).expect("re"),
            since: 1,
            streams: StreamFilter::Both,
            context,
            max_matches,
            max_text: 1 << 20,
            terminal: None,
        }
    }

    fn texts(a: &SearchAnswer) -> Vec<(String, bool)> {
        a.lines
            .iter()
            .map(|l| (String::from_utf8_lossy(&l.text).into_owned(), l.context))
            .collect()
    }

    fn numbered_log(n: u32) -> OutputLog {
        let log = OutputLog::new(1 << 20, None, 0);
        for i in 1..=n {
            let line = if i % 10 == 0 {
                format!("error {i}\n")
            } else {
                format!("ok {i}\n")
            };
            log.append(Stream::Stdout, line.as_bytes());
        }
        log
    }

    #[test]
    fn matches_come_with_their_context_and_seq() {
        let log = numbered_log(30);
        log.close();
        let a = search(&log, &query("^error", 1, 50));
        assert_eq!(
            texts(&a),
            [
                ("ok 9", true),
                ("error 10", false),
                ("ok 11", true),
                ("ok 19", true),
                ("error 20", false),
                ("ok 21", true),
                ("ok 29", true),
                ("error 30", false),
            ]
            .map(|(t, c)| (t.to_string(), c))
        );
        // "ok 1\n" … "ok 9\n": 9 lines of 5 bytes; "error 10" starts at 46.
        assert_eq!(a.lines[1].seq, 46);
        assert!(!a.has_more && !a.truncated);
        assert_eq!(a.next_seq, log.end().next_seq);
    }

    #[test]
    fn following_next_seq_finds_every_match_once() {
        let log = numbered_log(200);
        log.close();
        for (context, max) in [(0, 1), (0, 7), (2, 3), (5, 50)] {
            let mut q = query("^error", context, max);
            let mut found = Vec::new();
            loop {
                let a = search(&log, &q);
                found.extend(
                    texts(&a)
                        .into_iter()
                        .filter(|(_, ctx)| !ctx)
                        .map(|(t, _)| t),
                );
                assert!(a.next_seq > q.since || !a.has_more, "progress");
                q.since = a.next_seq;
                if !a.has_more {
                    break;
                }
            }
            let want: Vec<String> = (1..=20).map(|i| format!("error {}", i * 10)).collect();
            assert_eq!(found, want, "context {context}, max {max}");
        }
    }

    #[test]
    fn an_unfinished_line_of_a_running_process_is_searched_once_it_ends() {
        let log = OutputLog::new(1 << 20, None, 0);
        log.append(Stream::Stdout, b"one\nerr");
        let a = search(&log, &query("error", 0, 50));
        assert!(a.lines.is_empty());
        assert_eq!((a.next_seq, a.has_more), (5, false), "it starts at 5");
        log.append(Stream::Stdout, b"or here\n");
        let a = search(
            &log,
            &SearchQuery {
                since: a.next_seq,
                ..query("error", 0, 50)
            },
        );
        assert_eq!(texts(&a), [("error here".to_string(), false)]);
        // Once the process ended, its last line needs no newline.
        log.append(Stream::Stdout, b"last error");
        log.close();
        let a = search(&log, &query("error", 0, 50));
        assert_eq!(a.lines.len(), 2);
        assert_eq!(a.next_seq, log.end().next_seq);
    }

    #[test]
    fn the_output_cap_ends_a_search_before_the_match_that_does_not_fit() {
        let log = numbered_log(100);
        log.close();
        let a = search(
            &log,
            &SearchQuery {
                max_text: 20,
                ..query("^error", 0, 50)
            },
        );
        // "error 10" and "error 20" are 16 bytes; "error 30" would pass 20.
        assert_eq!(a.lines.len(), 2);
        assert!(a.has_more);
        // The next search starts with "error 30": after "ok 1".."ok 9" (5 bytes each), "error
        // 10", "ok 11".."ok 19" (6 bytes each), "error 20" and "ok 21".."ok 29".
        assert_eq!(a.next_seq, 1 + 9 * 5 + 9 + 9 * 6 + 9 + 9 * 6);
    }

    #[test]
    fn a_long_line_is_cut_around_its_match() {
        let log = OutputLog::new(1 << 20, None, 0);
        let mut line = vec![b'x'; 300_000];
        line[200_000..200_005].copy_from_slice(b"FATAL");
        line.push(b'\n');
        log.append(Stream::Stderr, &line);
        log.append(Stream::Stdout, b"short\n");
        log.close();
        let a = search(&log, &query("FATAL", 0, 50));
        assert_eq!(a.lines.len(), 1);
        let text = String::from_utf8(a.lines[0].text.clone()).expect("utf8");
        assert!(
            text.len() <= MAX_SHOWN + 2 * ELLIPSIS.len(),
            "{}",
            text.len()
        );
        assert!(text.starts_with(ELLIPSIS) && text.ends_with(ELLIPSIS));
        assert!(text.contains("FATAL"));
        assert_eq!(a.lines[0].stream, pb::Stream::Stderr as i32);
        assert_eq!(a.lines[0].seq, 1);
    }

    #[test]
    fn streams_keep_their_own_lines() {
        let log = OutputLog::new(1 << 20, None, 0);
        log.append(Stream::Stdout, b"comp");
        log.append(Stream::Stderr, b"warning: x\n");
        log.append(Stream::Stdout, b"iling\n");
        log.close();
        let a = search(&log, &query("^compiling$|^warning", 0, 50));
        assert_eq!(
            texts(&a),
            [
                ("warning: x".to_string(), false),
                ("compiling".to_string(), false)
            ]
        );
        let only_out = search(
            &log,
            &SearchQuery {
                streams: StreamFilter::Stdout,
                ..query("ing", 0, 50)
            },
        );
        assert_eq!(texts(&only_out), [("compiling".to_string(), false)]);
    }
}
