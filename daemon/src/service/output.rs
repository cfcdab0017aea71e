//! `Read`, `Follow` and `Wait`: the output side. All three pull from the process's
//! [`OutputLog`](crate::output::OutputLog) with cursors; none holds a per-reader buffer.
//! `follow` and `wait(until)` share one waiting cursor ([`LogCursor`]); reads that reach the
//! disk spool run on a blocking thread, never on a runtime worker.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use regex::bytes::Regex;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use super::{
    ControlService, FollowStream, MAX_DURATION_MS, at_most, clamp_output_bytes, output_to_pb,
    search, stream_filter,
};
use crate::output::{LogEnd, ReadQuery, RunsPage, Stream, StreamFilter};
use crate::process::terminal::TextRendering;
use crate::process::{ManagedProcess, ProcState, input_wait, live_facts};

/// Largest `tail_lines` accepted.
const MAX_TAIL_LINES: u32 = 100_000;
/// Bytes per follow event batch.
const FOLLOW_BATCH: usize = 256 * 1024;
/// Longest line kept whole for `until` matching. A longer line is searched in windows of this
/// size that overlap by [`MATCH_OVERLAP`], so memory stays bounded whatever the line's length,
/// and a match anywhere in it is found as long as the matched text is under 32 KiB.
pub(super) const MAX_MATCH_LINE: usize = 64 * 1024;
/// How much of a window the next one searches again.
const MATCH_OVERLAP: usize = 32 * 1024;
/// Bytes kept before a window (and a match must end this far from a window's end that is not the
/// line's end), so look-around — `^`, `$`, `\b` over one UTF-8 character — never takes a window
/// edge for a line edge.
const WINDOW_EDGE: usize = 4;

pub(super) async fn read(
    svc: &ControlService,
    req: pb::ReadRequest,
) -> Result<pb::ReadResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let proc = svc.lookup(&session, &req.process_id)?;
    let streams = stream_filter(req.streams)?;
    if req.tail_lines.is_some_and(|n| n == 0 || n > MAX_TAIL_LINES) {
        return Err(ErrorKind::InvalidArgument
            .status(format!("tail_lines must be between 1 and {MAX_TAIL_LINES}")));
    }
    let q = ReadQuery {
        since: req.since_seq,
        max_bytes: clamp_output_bytes(req.max_output_bytes, session.policy.max_output_bytes),
        streams,
        tail_lines: req.tail_lines,
    };
    // State first, output second: if the process ends in between, the output is at least as new
    // as the status says.
    if req.screen && proc.terminal.is_none() {
        let why = if proc.facts.tty {
            "ran on a terminal, but its screen is not kept once it ended and the daemon \
             restarted: read its text (without screen), or raw=true for the bytes"
        } else {
            "runs on pipes, not a terminal: screen=true needs a process started with tty=true"
        };
        return Err(ErrorKind::InvalidArgument.status(format!("{} {why}", proc.facts.id)));
    }
    let search = search_query(&req, &proc, q)?;
    let mut process = proc.info();
    live_facts::annotate(live_facts::Freshness::Reused, [(&*proc, &mut process)]).await;
    let (out, search) = match search {
        Some(query) => {
            let (out, found) = run_search(&proc, query).await?;
            (out, Some(found))
        }
        None => (output_to_pb(read_output(&proc, q).await?), None),
    };
    let screen = match proc.terminal.as_ref().filter(|_| req.screen) {
        // Catching up may read the spool (a flood that outran the ring).
        Some(term) => {
            let (term, log) = (term.clone(), proc.output.clone());
            let redactor = proc.facts.redactor.clone();
            Some(
                tokio::task::spawn_blocking(move || term.screen(&log, redactor.as_deref()))
                    .await
                    .map_err(|e| {
                        ErrorKind::Internal.status(format!("rendering the screen failed: {e}"))
                    })?,
            )
        }
        None => None,
    };
    Ok(pb::ReadResponse {
        process: Some(process),
        output: Some(proc.answer_output(out, req.raw)),
        screen,
        search,
    })
}

/// The search a `read` with `grep` asks for, checked; `None` without `grep`.
fn search_query(
    req: &pb::ReadRequest,
    proc: &ManagedProcess,
    q: ReadQuery,
) -> Result<Option<search::SearchQuery>, tonic::Status> {
    let Some(pattern) = req.grep.as_deref().filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let invalid = |m: String| ErrorKind::InvalidArgument.status(m);
    if req.tail_lines.is_some() {
        return Err(invalid(
            "grep searches forward from since_seq (default 1); tail_lines is for the latest \
             output without grep"
                .to_string(),
        ));
    }
    let context = req.context.unwrap_or(0);
    if context > search::MAX_CONTEXT {
        return Err(invalid(format!(
            "context must be between 0 and {}",
            search::MAX_CONTEXT
        )));
    }
    let max_matches = req.max_matches.unwrap_or(search::DEFAULT_MAX_MATCHES);
    if max_matches == 0 || max_matches > search::MAX_MATCHES {
        return Err(invalid(format!(
            "max_matches must be between 1 and {}",
            search::MAX_MATCHES
        )));
    }
    let re = line_regex("grep", pattern).map_err(invalid)?;
    Ok(Some(search::SearchQuery {
        re,
        since: req.since_seq.unwrap_or(1).max(1),
        streams: q.streams,
        context: context as usize,
        max_matches: max_matches as usize,
        max_text: q.max_bytes,
        terminal: proc.text_rendering().filter(|_| !req.raw),
    }))
}

/// Runs a search on a blocking thread (it reads the spool): the window it covered, and the lines.
async fn run_search(
    proc: &Arc<ManagedProcess>,
    query: search::SearchQuery,
) -> Result<(pb::Output, pb::Search), tonic::Status> {
    // Each line's text is bounded by `max_text` in all, plus the line records around it.
    crate::answer_budget::reserve(query.max_text.saturating_mul(2)).await;
    let proc = proc.clone();
    let found = tokio::task::spawn_blocking(move || search::search(&proc.output, &query))
        .await
        .map_err(|e| ErrorKind::Internal.status(format!("searching the output failed: {e}")))?;
    let out = pb::Output {
        first_seq: found.first_seq,
        next_seq: found.next_seq,
        truncated: found.truncated,
        has_more: found.has_more,
        ..Default::default()
    };
    let lines = pb::Search {
        lines: found.lines,
        scanned_bytes: found.scanned_bytes,
    };
    Ok((out, lines))
}

/// Reads output; a read that reaches the disk runs on a blocking thread, not a runtime worker.
async fn read_output(
    proc: &Arc<ManagedProcess>,
    q: ReadQuery,
) -> Result<crate::output::ReadResult, tonic::Status> {
    crate::answer_budget::reserve(crate::answer_budget::answer_bytes(q.max_bytes, q.streams)).await;
    if !proc.output.query_touches_disk(&q) {
        return Ok(proc.output.read(&q));
    }
    let proc = proc.clone();
    tokio::task::spawn_blocking(move || proc.output.read(&q))
        .await
        .map_err(|e| ErrorKind::Internal.status(format!("reading the spool failed: {e}")))
}

/// A forward cursor over a process's output that waits for news: the one loop behind `follow`
/// and `wait(until)`. Pages that reach back before the ring are read from the spool on a
/// blocking thread.
struct LogCursor {
    proc: Arc<ManagedProcess>,
    at: u64,
    streams: StreamFilter,
    end_rx: watch::Receiver<LogEnd>,
    state_rx: watch::Receiver<ProcState>,
}

/// Why [`LogCursor::changed`] returned.
enum Wake {
    /// New output, or a state change.
    News,
    /// The caller's deadline passed.
    Deadline,
    /// The daemon is shutting down.
    ShuttingDown,
}

impl LogCursor {
    fn new(proc: Arc<ManagedProcess>, since: u64, streams: StreamFilter) -> LogCursor {
        LogCursor {
            end_rx: proc.output.subscribe(),
            state_rx: proc.subscribe(),
            proc,
            at: since.max(1),
            streams,
        }
    }

    /// The next page from the cursor on, or `None` when nothing new is there yet.
    async fn page(&mut self) -> Option<RunsPage> {
        let (at, streams) = (self.at, self.streams);
        let page = if self.proc.output.needs_disk(at) {
            let proc = self.proc.clone();
            match tokio::task::spawn_blocking(move || {
                proc.output.read_runs(at, FOLLOW_BATCH, streams)
            })
            .await
            {
                Ok(page) => page,
                Err(e) => {
                    tracing::error!("reading the spool failed: {e}");
                    return None;
                }
            }
        } else {
            self.proc.output.read_runs(at, FOLLOW_BATCH, streams)
        };
        if page.next <= self.at && page.gap.is_none() {
            return None;
        }
        self.at = page.next;
        Some(page)
    }

    /// The whole output has been read and no more will come.
    fn complete(&self) -> bool {
        let end = self.proc.output.end();
        end.closed && self.at >= end.next_seq
    }

    /// Waits for new output or a state change.
    async fn changed(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        shutdown: &CancellationToken,
    ) -> Wake {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // A closed channel (the process record was dropped) is news too: the caller
            // re-reads and finds the output complete.
            _ = self.end_rx.changed() => Wake::News,
            _ = self.state_rx.changed() => Wake::News,
            _ = sleep => Wake::Deadline,
            _ = shutdown.cancelled() => Wake::ShuttingDown,
        }
    }
}

pub(super) fn follow(
    svc: &ControlService,
    req: pb::FollowRequest,
) -> Result<FollowStream, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let proc = svc.lookup(&session, &req.process_id)?;
    let streams = stream_filter(req.streams)?;
    let (tx, rx) = mpsc::channel(4);
    let shutdown = svc.daemon.shutdown.clone();
    let mut cursor = LogCursor::new(proc.clone(), req.since_seq.unwrap_or(1), streams);
    // A terminal's output without its escape sequences, unless asked for raw.
    let mut filter = proc
        .text_rendering()
        .filter(|_| !req.raw)
        .map(|r| r.follow_filter());
    tokio::spawn(async move {
        loop {
            if let Some(RunsPage { runs, gap, .. }) = cursor.page().await {
                if let Some((from, to)) = gap {
                    let ev = pb::FollowEvent {
                        dropped_from: from,
                        dropped_to: to,
                        ..Default::default()
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                }
                for (seq, stream, data) in runs {
                    let ev = pb::FollowEvent {
                        seq,
                        stream: match stream {
                            Stream::Stdout => pb::Stream::Stdout,
                            Stream::Stderr => pb::Stream::Stderr,
                        } as i32,
                        data: match filter.as_mut() {
                            Some(f) => f.push(&data),
                            None => data,
                        },
                        ..Default::default()
                    };
                    // A client that stopped reading blocks only this task; the process and
                    // other readers never wait for it.
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
            if cursor.complete() {
                // The text redaction held back could start a secret no more.
                let held = filter.as_mut().map(|f| f.finish()).unwrap_or_default();
                if !held.is_empty() {
                    let ev = pb::FollowEvent {
                        seq: cursor.at,
                        stream: pb::Stream::Stdout as i32,
                        data: held,
                        ..Default::default()
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                }
                // Output is complete; report the final state once the result is settled.
                let mut state_rx = proc.subscribe();
                tokio::select! {
                    _ = state_rx.wait_for(ProcState::settled) => {}
                    _ = shutdown.cancelled() => {}
                }
                let ev = pb::FollowEvent {
                    seq: cursor.at,
                    ended: Some(proc.info()),
                    ..Default::default()
                };
                let _ = tx.send(Ok(ev)).await;
                return;
            }
            tokio::select! {
                wake = cursor.changed(None, &shutdown) => {
                    if let Wake::ShuttingDown = wake {
                        let _ = tx.send(Err(ErrorKind::ShuttingDown.status("yieldshelld is shutting down"))).await;
                        return;
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// Line-by-line matcher over the interleaved log: keeps each stream's unfinished line (or, in a
/// line over [`MAX_MATCH_LINE`], its latest window).
pub(super) struct LineMatcher {
    re: Regex,
    partial: [LineWindow; 2],
    /// A terminal process's lines: a whole line is matched as its text without escape sequences
    /// (`terminal::plain_text`: `^42$` matches the `42\r` a terminal writes), and that text is
    /// the matched line. A line over [`MAX_MATCH_LINE`] is searched raw, window by window.
    terminal: Option<TextRendering>,
    /// `write` with `until` on a terminal that echoes: the lines of the input written (plain
    /// text, trimmed), whose echo is not the answer. A line that ends with one of them is that
    /// echo (a prompt may precede it): it and the echo lines before it are passed over.
    echo: VecDeque<Vec<u8>>,
}

/// The lines a terminal echoes of `input`: each piece between line ends, as plain text, trimmed
/// (named keys' escape sequences vanish), empty ones left out.
fn echo_lines(input: &[u8]) -> VecDeque<Vec<u8>> {
    input
        .split(|b| matches!(b, b'\r' | b'\n'))
        .map(|piece| {
            crate::process::terminal::plain_text(piece)
                .trim_ascii()
                .to_vec()
        })
        .filter(|line| !line.is_empty())
        .collect()
}

/// Whether a finished line is the echo of a pending input line; if so, drops it and the ones
/// before it (their echo was passed over without matching, or never came).
fn take_echo(echo: &mut VecDeque<Vec<u8>>, line: &[u8]) -> bool {
    let text = line.trim_ascii_end();
    match echo.iter().position(|e| text.ends_with(e)) {
        Some(i) => {
            echo.drain(..=i);
            true
        }
        None => false,
    }
}

/// Whether an unfinished line is an echo still arriving: it ends with the start of a pending
/// input line (`print('DO` of `print('DONE')`), or all of the last one (typed without Enter).
fn echo_in_progress(echo: &VecDeque<Vec<u8>>, line: &[u8]) -> bool {
    let text = line.trim_ascii_end();
    echo.iter()
        .any(|e| (1..=e.len()).any(|k| text.ends_with(&e[..k])))
}

/// A stream's unfinished line, or the window of it still to search (also `read` with `grep`'s,
/// in `search`).
#[derive(Default)]
pub(super) struct LineWindow {
    /// Where the line starts.
    seq: u64,
    /// Some bytes of the line arrived (an empty line counts once its newline does).
    started: bool,
    /// `bytes[..context]` come before the window (look-behind context); `bytes[context..]` is the
    /// window, the whole line while it is under [`MAX_MATCH_LINE`].
    bytes: Vec<u8>,
    context: usize,
}

impl LineWindow {
    /// The window's text.
    fn window(&self) -> &[u8] {
        &self.bytes[self.context..]
    }

    /// Whether `re` matches in the window. Unless the window ends the line, a match must end
    /// [`WINDOW_EDGE`] bytes before the window does (`$` or `\b` there would see a false end);
    /// one nearer the end is searched again in the next window, which overlaps this one.
    pub(super) fn matches(&self, re: &Regex, at_line_end: bool) -> bool {
        // `find_at` lets look-behind see the context bytes, and `^` never matches after 0.
        re.find_at(&self.bytes, self.context)
            .is_some_and(|m| at_line_end || m.end() + WINDOW_EDGE <= self.bytes.len())
    }

    /// Appends part of the line; searches each full window before sliding past it.
    pub(super) fn extend(
        &mut self,
        re: &Regex,
        seq: u64,
        mut piece: &[u8],
    ) -> Option<(u64, Vec<u8>)> {
        if !self.started {
            self.started = true;
            self.seq = seq;
        }
        while !piece.is_empty() {
            let room = (self.context + MAX_MATCH_LINE).saturating_sub(self.bytes.len());
            if room == 0 {
                if self.matches(re, false) {
                    return Some((self.seq, self.window().to_vec()));
                }
                // Keep the overlap, plus the context before it.
                let cut = self.bytes.len() - (MATCH_OVERLAP + WINDOW_EDGE);
                self.bytes.drain(..cut);
                self.context = WINDOW_EDGE;
                continue;
            }
            let take = room.min(piece.len());
            self.bytes.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
        }
        None
    }

    /// The whole line as a terminal showed it, while it is one window.
    fn terminal_text(
        &self,
        re: &Regex,
        rendering: &TextRendering,
    ) -> Option<Option<(u64, Vec<u8>)>> {
        if self.context > 0 {
            return None;
        }
        let text = rendering.text(&self.bytes);
        Some(re.is_match(&text).then_some((self.seq, text)))
    }

    /// Ends the line at a newline: the last window is searched with the line's true end.
    pub(super) fn finish(
        &mut self,
        re: &Regex,
        terminal: Option<&TextRendering>,
    ) -> Option<(u64, Vec<u8>)> {
        let found = match terminal.and_then(|r| self.terminal_text(re, r)) {
            Some(found) => found,
            None => self
                .matches(re, true)
                .then(|| (self.seq, self.window().to_vec())),
        };
        self.clear();
        found
    }

    /// The whole line, while it is one window (as a terminal shows it when `terminal`).
    fn whole_line(&self, terminal: Option<&TextRendering>) -> Option<Vec<u8>> {
        (self.context == 0).then(|| match terminal {
            Some(r) => r.text(&self.bytes),
            None => self.bytes.clone(),
        })
    }

    /// Forgets the line (its end, or a gap, came) without searching what is left of it.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.context = 0;
        self.started = false;
    }
}

impl LineMatcher {
    fn new(re: Regex) -> LineMatcher {
        LineMatcher {
            re,
            partial: [LineWindow::default(), LineWindow::default()],
            terminal: None,
            echo: VecDeque::new(),
        }
    }

    /// Matches lines as a terminal process's (see [`LineMatcher::terminal`]), rendered so.
    pub(super) fn on_terminal(mut self, terminal: Option<TextRendering>) -> LineMatcher {
        self.terminal = terminal;
        self
    }

    /// Passes over the terminal's echo of `input` (see [`LineMatcher::echo`]): `write` with
    /// `until` answers with what the program printed, not with what was typed.
    pub(super) fn skipping_echo_of(mut self, input: &[u8]) -> LineMatcher {
        self.echo = echo_lines(input);
        self
    }

    /// Feeds a run; returns the first line that matches (its start seq, and the line — or, for a
    /// line over [`MAX_MATCH_LINE`], the window the match is in).
    fn feed(&mut self, seq: u64, stream: Stream, data: &[u8]) -> Option<(u64, Vec<u8>)> {
        let line = &mut self.partial[usize::from(stream == Stream::Stderr)];
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            // (An empty line starts at its newline: `extend` notes the start even of nothing.)
            if let Some(found) = line.extend(&self.re, seq + start as u64, &data[start..nl]) {
                return Some(found);
            }
            start = nl + 1;
            // Every whole line is checked for the echo, matching or not, so an echo that does
            // not match is not later taken for a line of output that ends the same way.
            if !self.echo.is_empty()
                && let Some(text) = line.whole_line(self.terminal.as_ref())
                && take_echo(&mut self.echo, &text)
            {
                line.clear();
                continue;
            }
            if let Some(found) = line.finish(&self.re, self.terminal.as_ref()) {
                return Some(found);
            }
        }
        if start < data.len() {
            return line.extend(&self.re, seq + start as u64, &data[start..]);
        }
        None
    }

    /// Checks the unfinished lines (a prompt without a newline, say) as if they ended here.
    fn check_partial(&self) -> Option<(u64, Vec<u8>)> {
        self.partial
            .iter()
            .filter(|l| !l.window().is_empty())
            .find_map(|l| {
                match self
                    .terminal
                    .as_ref()
                    .and_then(|r| l.terminal_text(&self.re, r))
                {
                    Some(found) => found,
                    None => l
                        .matches(&self.re, true)
                        .then(|| (l.seq, l.window().to_vec())),
                }
            })
            .filter(|(_, text)| !echo_in_progress(&self.echo, text))
    }
}

/// How a wait ended.
pub(super) enum WaitOutcome {
    Exited,
    InputWanted,
    Deadline,
    ShuttingDown,
    /// An output line matched: where the line starts, and the line (or its window).
    Matched(u64, Vec<u8>),
}

/// Longest pattern `until` or `grep` accepts: a regex is a line of text, not a document.
const MAX_PATTERN_BYTES: usize = 4096;
/// Largest compiled program of a pattern: the `regex` crate's size limit, set to its current
/// default (10 MiB, which `\w{100}` over Unicode fits) so it stays put. Matching time is linear
/// in the text whatever the pattern; this bounds the memory and per-byte cost of one.
const MAX_COMPILED_PATTERN: usize = 10 << 20;

/// Compiles a pattern matched against output lines (`until`, `grep`); an invalid or oversized one
/// is an `invalid_argument` message naming `field`.
pub(super) fn line_regex(field: &str, pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "{field} is {} bytes long; a pattern may be at most {MAX_PATTERN_BYTES}",
            pattern.len()
        ));
    }
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(MAX_COMPILED_PATTERN)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => format!(
                "{field} compiles to more than {} MiB; use a simpler pattern (smaller repetition counts)",
                MAX_COMPILED_PATTERN >> 20
            ),
            e => format!("{field} is not a valid regular expression: {e}"),
        })
}

/// Compiles an `until` pattern into a line matcher; an invalid one is an `invalid_argument`
/// message naming the field. The one compile behind `wait`, `exec` and `write` with `until`.
pub(super) fn until_matcher(pattern: &str) -> Result<LineMatcher, String> {
    line_regex("until", pattern).map(LineMatcher::new)
}

/// Waits until an output line from `since` on matches, the process has ended with its output
/// drained, `deadline` passes or the daemon shuts down: the one matching loop behind `wait`,
/// `exec` and `write` with `until`.
pub(super) async fn wait_until_match(
    proc: &Arc<ManagedProcess>,
    matcher: &mut LineMatcher,
    since: u64,
    streams: StreamFilter,
    deadline: Option<tokio::time::Instant>,
    shutdown: &CancellationToken,
) -> WaitOutcome {
    let mut cursor = LogCursor::new(proc.clone(), since, streams);
    loop {
        if let Some(page) = cursor.page().await {
            for (seq, stream, data) in &page.runs {
                if let Some((at, line)) = matcher.feed(*seq, *stream, data) {
                    return WaitOutcome::Matched(at, line);
                }
            }
            continue;
        }
        if let Some((at, line)) = matcher.check_partial() {
            return WaitOutcome::Matched(at, line);
        }
        if cursor.complete() && proc.state().settled() {
            return WaitOutcome::Exited;
        }
        match cursor.changed(deadline, shutdown).await {
            Wake::News => {}
            Wake::Deadline => return WaitOutcome::Deadline,
            Wake::ShuttingDown => return WaitOutcome::ShuttingDown,
        }
    }
}

pub(super) async fn wait(
    svc: &ControlService,
    req: pb::WaitRequest,
) -> Result<pb::WaitResponse, tonic::Status> {
    let session = svc.daemon.sessions.get(&req.session_id)?;
    let proc = svc.lookup(&session, &req.process_id)?;
    let streams = stream_filter(req.streams)?;
    let max_out = clamp_output_bytes(req.max_output_bytes, session.policy.max_output_bytes);
    // Beyond the range the deadline would overflow the clock.
    at_most("timeout_ms", req.timeout_ms, MAX_DURATION_MS)
        .map_err(|m| ErrorKind::InvalidArgument.status(m))?;
    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let shutdown = &svc.daemon.shutdown;
    let until = req
        .until
        .as_deref()
        .filter(|u| !u.is_empty())
        .map(|pattern| {
            until_matcher(pattern)
                .map(|m| m.on_terminal(proc.text_rendering()))
                .map_err(|m| ErrorKind::InvalidArgument.status(m))
        })
        .transpose()?;
    let waited = async {
        match until {
            Some(mut matcher) => {
                wait_until_match(
                    &proc,
                    &mut matcher,
                    req.since_seq.unwrap_or(1),
                    streams,
                    deadline,
                    shutdown,
                )
                .await
            }
            None => {
                let mut state_rx = proc.subscribe();
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = state_rx.wait_for(ProcState::settled) => WaitOutcome::Exited,
                    _ = sleep => WaitOutcome::Deadline,
                    _ = shutdown.cancelled() => WaitOutcome::ShuttingDown,
                }
            }
        }
    };
    // `for_input`: a process already waiting answers at once (after the confirming check).
    let input = async {
        match proc.state().identity {
            Some(shell) if req.for_input => input_wait::until_waiting(shell, Duration::ZERO).await,
            _ => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        biased;
        outcome = waited => outcome,
        () = input => WaitOutcome::InputWanted,
    };
    if matches!(outcome, WaitOutcome::ShuttingDown) {
        return Err(ErrorKind::ShuttingDown.status(format!(
            "yieldshelld is shutting down (it stops its processes, {} included); the wait was interrupted",
            proc.facts.id
        )));
    }
    let mut process = proc.info();
    live_facts::annotate(live_facts::Freshness::Reused, [(&*proc, &mut process)]).await;
    if matches!(outcome, WaitOutcome::InputWanted)
        && process.status == pb::ProcessStatus::Running as i32
    {
        // Found so on two checks in a row: a third, just now, is not needed to say so.
        process.waiting_for_input = Some(true);
    }
    let out = read_output(
        &proc,
        ReadQuery {
            since: None,
            max_bytes: max_out,
            streams,
            tail_lines: None,
        },
    )
    .await?;
    let (result, matched_line, matched_seq) = outcome_fields(outcome);
    let matched_line = proc.answer_text(matched_line);
    Ok(pb::WaitResponse {
        process: Some(process),
        output: Some(proc.answer_output(output_to_pb(out), false)),
        result: result as i32,
        matched_line,
        matched_seq,
    })
}

/// `Write` with `until`: writes, then waits for a line of the output that followed the write.
/// The wait starts at the log's end as it was before the input was sent, so an answer printed
/// before this call gets around to looking is still matched; the output returned is read
/// forward from there.
pub(super) async fn write_until(
    svc: &ControlService,
    proc: &Arc<ManagedProcess>,
    max_output_bytes: u64,
    req: pb::WriteRequest,
) -> Result<pb::WriteResponse, tonic::Status> {
    let pattern = req.until.as_deref().unwrap_or_default();
    // Refused before anything is written.
    let mut matcher = until_matcher(pattern)
        .map_err(|m| ErrorKind::InvalidArgument.status(m))?
        .on_terminal(proc.text_rendering());
    // A terminal echoes what is typed, unless it reads a password (canonical, echo off); a
    // program in raw mode (a REPL's line editor) draws the echo itself. As the modes are before
    // the input arrives.
    let echoes = proc
        .terminal
        .as_ref()
        .and_then(|t| t.modes())
        .is_some_and(|m| !(m.echo_off && m.canonical));
    if echoes {
        matcher = matcher.skipping_echo_of(&req.input);
    }
    at_most("timeout_ms", req.timeout_ms, MAX_DURATION_MS)
        .map_err(|m| ErrorKind::InvalidArgument.status(m))?;
    let max_out = clamp_output_bytes(req.max_output_bytes, max_output_bytes);
    let from_seq = proc.output.end().next_seq;
    let written = proc
        .write_stdin(req.input, req.eof)
        .await
        .map_err(|e| e.kind.status(format!("{}: {}", proc.facts.id, e.message)))?;
    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let shutdown = &svc.daemon.shutdown;
    let outcome = wait_until_match(
        proc,
        &mut matcher,
        from_seq,
        StreamFilter::Both,
        deadline,
        shutdown,
    )
    .await;
    if matches!(outcome, WaitOutcome::ShuttingDown) {
        return Err(ErrorKind::ShuttingDown.status(format!(
            "yieldshelld is shutting down (it stops its processes, {} included); the wait after the write was interrupted",
            proc.facts.id
        )));
    }
    let process = proc.info();
    let out = read_output(
        proc,
        ReadQuery {
            since: Some(from_seq),
            max_bytes: max_out,
            streams: StreamFilter::Both,
            tail_lines: None,
        },
    )
    .await?;
    let (result, matched_line, matched_seq) = outcome_fields(outcome);
    let matched_line = proc.answer_text(matched_line);
    Ok(pb::WriteResponse {
        ok: true,
        bytes_written: written as u64,
        process: Some(process),
        output: Some(proc.answer_output(output_to_pb(out), false)),
        result: result as i32,
        matched_line,
        matched_seq,
        from_seq,
    })
}

/// The wire fields of a wait's outcome: result, matched line, where it starts.
pub(super) fn outcome_fields(outcome: WaitOutcome) -> (pb::WaitResult, Vec<u8>, Option<u64>) {
    match outcome {
        WaitOutcome::Exited => (pb::WaitResult::Exited, Vec::new(), None),
        WaitOutcome::InputWanted => (pb::WaitResult::InputWanted, Vec::new(), None),
        WaitOutcome::Deadline | WaitOutcome::ShuttingDown => {
            (pb::WaitResult::DeadlineReached, Vec::new(), None)
        }
        WaitOutcome::Matched(seq, line) => (pb::WaitResult::Matched, line, Some(seq)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_lines_split_across_runs_per_stream() {
        let mut m = LineMatcher::new(Regex::new("listening on \\d+").expect("re"));
        assert!(m.feed(1, Stream::Stdout, b"booting\nlisten").is_none());
        assert!(m.feed(15, Stream::Stderr, b"noise\n").is_none());
        let (seq, line) = m.feed(21, Stream::Stdout, b"ing on 8080\n").expect("match");
        assert_eq!(line, b"listening on 8080");
        assert_eq!(seq, 9);
    }

    #[test]
    fn a_terminals_echo_of_the_input_is_passed_over() {
        let matcher = || {
            LineMatcher::new(Regex::new("DONE").expect("re"))
                .on_terminal(Some(TextRendering::default()))
                .skipping_echo_of(b"print('DONE')\r")
        };
        // The echo arriving (a partial line that starts the input) is no answer, nor its line.
        let mut m = matcher();
        assert!(m.feed(1, Stream::Stdout, b"print('DO").is_none());
        assert_eq!(m.check_partial(), None);
        assert!(m.feed(10, Stream::Stdout, b"NE')\r\n").is_none());
        let (seq, line) = m.feed(25, Stream::Stdout, b"DONE\r\n>>> ").expect("answer");
        assert_eq!((seq, line.as_slice()), (25, &b"DONE"[..]));
        // Behind a prompt, with the line editor's escape sequences.
        let mut m = matcher();
        assert!(
            m.feed(1, Stream::Stdout, b">>> \x1b[1mprint('DONE')\x1b[0m\r\n")
                .is_none()
        );
        assert!(m.feed(40, Stream::Stdout, b"DONE\r\n").is_some());
        // An echo that does not match is passed over too, so a later line ending the same way
        // is an answer: typed `ls`, printed `DONE: ls`.
        let mut m = LineMatcher::new(Regex::new("DONE").expect("re"))
            .on_terminal(Some(TextRendering::default()))
            .skipping_echo_of(b"ls\n");
        assert!(m.feed(1, Stream::Stdout, b"ls\r\n").is_none());
        let (_, line) = m.feed(5, Stream::Stdout, b"DONE: ls\r\n").expect("answer");
        assert_eq!(line, b"DONE: ls");
        // Without an echo expected, the first matching line is the answer.
        let mut m = LineMatcher::new(Regex::new("DONE").expect("re"))
            .on_terminal(Some(TextRendering::default()));
        assert!(m.feed(1, Stream::Stdout, b"print('DONE')\r\n").is_some());
    }

    #[test]
    fn echo_lines_are_the_typed_lines_as_plain_text() {
        assert_eq!(
            echo_lines(b"a = 1\n\nprint(a)\r  \x1b[A\n"),
            VecDeque::from([b"a = 1".to_vec(), b"print(a)".to_vec()])
        );
    }

    #[test]
    fn partial_lines_match_prompts() {
        let mut m = LineMatcher::new(Regex::new("^>>> $").expect("re"));
        assert!(m.feed(1, Stream::Stdout, b"Python\n>>> ").is_none());
        assert_eq!(m.check_partial().map(|(_, l)| l), Some(b">>> ".to_vec()));
    }

    /// Feeds `line` in odd-sized runs; returns what matched.
    fn feed_in_runs(m: &mut LineMatcher, line: &[u8]) -> Option<(u64, Vec<u8>)> {
        let mut seq = 1;
        for run in line.chunks(7_919) {
            if let Some(found) = m.feed(seq, Stream::Stdout, run) {
                return Some(found);
            }
            seq += run.len() as u64;
        }
        None
    }

    #[test]
    fn a_match_anywhere_in_a_line_of_any_length_is_found_in_bounded_memory() {
        let ready = Regex::new("READY").expect("re");
        for at in [10, 64 * 1024 - 3, 64 * 1024 + 1, 100_000, 3 * 1024 * 1024] {
            let mut line = vec![b'x'; 4 * 1024 * 1024];
            line[at..at + 5].copy_from_slice(b"READY");
            line.push(b'\n');
            let mut m = LineMatcher::new(ready.clone());
            let (seq, window) = feed_in_runs(&mut m, &line).unwrap_or_else(|| panic!("at {at}"));
            assert_eq!(seq, 1, "the line's start");
            assert!(window.len() <= MAX_MATCH_LINE, "at {at}");
            assert!(window.windows(5).any(|w| w == b"READY"), "at {at}");
        }
        // Memory: one window per stream, however long the line.
        let mut m = LineMatcher::new(Regex::new("never").expect("re"));
        assert!(feed_in_runs(&mut m, &vec![b'x'; 2 * 1024 * 1024]).is_none());
        assert!(m.partial[0].bytes.len() <= MAX_MATCH_LINE + WINDOW_EDGE);
    }

    #[test]
    fn window_edges_in_a_long_line_are_not_line_edges() {
        // Window edges fall inside the run of x: none of them may pass for the line's start or
        // end, nor for a word boundary.
        let long = vec![b'x'; 300 * 1024];
        let line = [b"a", &long[..], b"z\n"].concat();
        for (pattern, expected) in [
            ("^x", false),
            ("^ax", true),
            ("x$", false),
            ("xz$", true),
            (r"\bx", false),
            (r"x\b", false),
            (r"z\b", true),
            (r"\Bx\B", true),
        ] {
            let mut m = LineMatcher::new(Regex::new(pattern).expect("re"));
            assert_eq!(feed_in_runs(&mut m, &line).is_some(), expected, "{pattern}");
        }
        // A match longer than the overlap is not guaranteed, one shorter than it is.
        let mut spread = vec![b'x'; 300 * 1024];
        spread[100_000] = b'a';
        spread[100_000 + 20_000] = b'b';
        spread.push(b'\n');
        let mut m = LineMatcher::new(Regex::new("a[x]*b").expect("re"));
        assert!(feed_in_runs(&mut m, &spread).is_some());
    }
}
