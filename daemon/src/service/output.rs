//! `Read`, `Follow` and `Wait`: the output side. All three pull from the process's
//! [`OutputLog`](crate::output::OutputLog) with cursors; none holds a per-reader buffer.
//! `follow` and `wait(until)` share one waiting cursor ([`LogCursor`]); reads that reach the
//! disk spool run on a blocking thread, never on a runtime worker.

use std::sync::Arc;
use std::time::Duration;

use regex::bytes::Regex;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use super::{ControlService, FollowStream, clamp_output_bytes, output_to_pb, stream_filter};
use crate::output::{LogEnd, ReadQuery, RunsPage, Stream, StreamFilter};
use crate::process::{ManagedProcess, ProcState};

/// Largest `tail_lines` accepted.
const MAX_TAIL_LINES: u32 = 100_000;
/// Bytes per follow event batch.
const FOLLOW_BATCH: usize = 256 * 1024;
/// Longest line kept for `until` matching; longer lines are matched by their first bytes.
const MAX_MATCH_LINE: usize = 64 * 1024;

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
        use_spool: req.use_spool,
    };
    // State first, output second: if the process ends in between, the output is at least as new
    // as the status says.
    let process = proc.info();
    let out = read_output(&proc, q).await?;
    Ok(pb::ReadResponse {
        process: Some(process),
        output: Some(output_to_pb(out)),
    })
}

/// Reads output; a read that reaches the disk runs on a blocking thread, not a runtime worker.
async fn read_output(
    proc: &Arc<ManagedProcess>,
    q: ReadQuery,
) -> Result<crate::output::ReadResult, tonic::Status> {
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
                        data,
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
                // Output is complete; report the final state once the result is settled.
                let mut state_rx = proc.subscribe();
                tokio::select! {
                    _ = state_rx.wait_for(|s| s.settled) => {}
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

/// Line-by-line matcher over the interleaved log: keeps each stream's unfinished line.
struct LineMatcher {
    re: Regex,
    partial: [(u64, Vec<u8>); 2],
}

impl LineMatcher {
    fn new(re: Regex) -> LineMatcher {
        LineMatcher {
            re,
            partial: [(0, Vec::new()), (0, Vec::new())],
        }
    }

    /// Feeds a run; returns the first complete line that matches (and its start seq).
    fn feed(&mut self, seq: u64, stream: Stream, data: &[u8]) -> Option<(u64, Vec<u8>)> {
        let slot = &mut self.partial[usize::from(stream == Stream::Stderr)];
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            if slot.1.is_empty() {
                slot.0 = seq + start as u64;
            }
            let piece = &data[start..nl];
            let room = MAX_MATCH_LINE.saturating_sub(slot.1.len());
            slot.1.extend_from_slice(&piece[..piece.len().min(room)]);
            let line = std::mem::take(&mut slot.1);
            start = nl + 1;
            if self.re.is_match(&line) {
                return Some((slot.0, line));
            }
        }
        if start < data.len() {
            if slot.1.is_empty() {
                slot.0 = seq + start as u64;
            }
            let piece = &data[start..];
            let room = MAX_MATCH_LINE.saturating_sub(slot.1.len());
            slot.1.extend_from_slice(&piece[..piece.len().min(room)]);
        }
        None
    }

    /// Checks the unfinished lines (a prompt without a newline, say).
    fn check_partial(&self) -> Option<(u64, Vec<u8>)> {
        self.partial
            .iter()
            .find(|(_, l)| !l.is_empty() && self.re.is_match(l))
            .map(|(s, l)| (*s, l.clone()))
    }
}

enum WaitOutcome {
    Exited,
    Deadline,
    ShuttingDown,
    Matched(u64, Vec<u8>),
}

async fn wait_until_match(
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
        if cursor.complete() && proc.state().settled {
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
    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let shutdown = &svc.daemon.shutdown;
    let outcome = match req.until.as_deref().filter(|u| !u.is_empty()) {
        Some(pattern) => {
            let re = Regex::new(pattern).map_err(|e| {
                ErrorKind::InvalidArgument
                    .status(format!("until is not a valid regular expression: {e}"))
            })?;
            let mut matcher = LineMatcher::new(re);
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
                _ = state_rx.wait_for(|s| s.settled) => WaitOutcome::Exited,
                _ = sleep => WaitOutcome::Deadline,
                _ = shutdown.cancelled() => WaitOutcome::ShuttingDown,
            }
        }
    };
    if matches!(outcome, WaitOutcome::ShuttingDown) {
        return Err(ErrorKind::ShuttingDown.status(format!(
            "yieldshelld is shutting down (it stops its processes, {} included); the wait was interrupted",
            proc.facts.id
        )));
    }
    let process = proc.info();
    let out = read_output(
        &proc,
        ReadQuery {
            since: None,
            max_bytes: max_out,
            streams,
            tail_lines: None,
            use_spool: false,
        },
    )
    .await?;
    let (result, matched_line, matched_seq) = match outcome {
        WaitOutcome::Exited => (pb::WaitResult::Exited, Vec::new(), None),
        WaitOutcome::Deadline | WaitOutcome::ShuttingDown => {
            (pb::WaitResult::DeadlineReached, Vec::new(), None)
        }
        WaitOutcome::Matched(seq, line) => (pb::WaitResult::Matched, line, Some(seq)),
    };
    Ok(pb::WaitResponse {
        process: Some(process),
        output: Some(output_to_pb(out)),
        result: result as i32,
        matched_line,
        matched_seq,
    })
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
    fn partial_lines_match_prompts() {
        let mut m = LineMatcher::new(Regex::new("^>>> $").expect("re"));
        assert!(m.feed(1, Stream::Stdout, b"Python\n>>> ").is_none());
        assert_eq!(m.check_partial().map(|(_, l)| l), Some(b">>> ".to_vec()));
    }
}
