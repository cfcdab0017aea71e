//! The JSON objects the MCP tools return (README, "Tools"), built from control-plane responses.
//!
//! `mcp-yieldshell` returns these as `structuredContent` (their JSON Schemas become the tools'
//! `outputSchema`s) and `yieldctl --json` prints the very same objects, so scripts and agents see
//! one format. Every field a tool names is always present, `null` when it has no value. Output
//! bytes become text here, at the edge: invalid UTF-8 is replaced (U+FFFD) and `lossy` says so.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pb;
pub use crate::status_names::{exec_status_name, process_status_name};

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds.
pub fn format_unix_ms(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// Decodes output bytes for JSON; the flag is true when bytes had to be replaced.
pub fn text(bytes: &[u8]) -> (String, bool) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (String::from_utf8_lossy(bytes).into_owned(), true),
    }
}

/// The hint an `exec` body carries when the command keeps running in the background: one short
/// line naming the next calls (the id is in the body already). The daemon reports only facts
/// (status, id, `next_seq`, `yield_ms`); this body is what the MCP tools return and
/// `yieldctl --json` prints, so the phrasing lives here, once, for both. An agent reads it with
/// every backgrounded exec, so every byte counts. The id and the yield time are not repeated (the
/// body has the id and `duration_ms`; a ready-wait returns before the yield time).
pub fn backgrounded_message(next_seq: u64) -> String {
    format!("In the background: wait, read(since_seq={next_seq}), write or stop it.")
}

/// The hint an `exec` body carries when the command yielded early because it waits for input:
/// one short line, like [`backgrounded_message`]. It names the attach command too, so an agent
/// can tell its user how to step in (a password prompt, say; ARCHITECTURE.md, "Terminal processes").
pub fn input_wanted_message(process_id: &str) -> String {
    format!("Waiting for input: write(input=\"…\\n\"), or a person: yieldctl attach {process_id}")
}

/// The hint of an `exec` answered with the process an identical earlier `exec` started, which
/// still runs (`reused`): nothing new started, and how to get a second copy if one is wanted.
pub fn reused_message(next_seq: u64) -> String {
    format!(
        "Already running (an identical exec started it): this is that process, not a new copy \
         (another name starts one). wait, read(since_seq={next_seq}) or stop it."
    )
}

/// The hint for a shell that exited while descendants still run.
pub fn descendants_message(descendants: u32, next_seq: u64) -> String {
    format!(
        "The shell exited; {descendants} descendant(s) still run: read(since_seq={next_seq}) for more, stop to end them."
    )
}

/// The hint for an `exec` body, from the facts: `status` is the exec status name. A backgrounded command gets [`input_wanted_message`] when it waits
/// for input, else [`backgrounded_message`]; a completed one whose descendants still run
/// [`descendants_message`]; anything else `None`.
pub fn exec_hint(status: &str, p: &pb::ProcessInfo, next_seq: u64) -> Option<String> {
    if status == exec_status_name(pb::ExecStatus::Backgrounded as i32)
        && p.waiting_for_input == Some(true)
    {
        Some(input_wanted_message(&p.process_id))
    } else if status == exec_status_name(pb::ExecStatus::Backgrounded as i32) {
        Some(backgrounded_message(next_seq))
    } else if status == exec_status_name(pb::ExecStatus::Completed as i32)
        && p.descendants_running > 0
    {
        Some(descendants_message(p.descendants_running, next_seq))
    } else {
        None
    }
}

/// What a sandboxed process may do (README, "Sandbox"), and what it was denied.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SandboxView {
    /// Where it may write besides its private temp dir (`$TMPDIR`): `read-only`, `workspace`
    /// or `anywhere`.
    pub files: String,
    /// `off`, `on` or `allowlist` (HTTP(S) to `hosts` only, through a proxy).
    pub network: String,
    /// With files `workspace`: true when its `.git` is writable too (absent: read-only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git_writable: bool,
    /// With network `allowlist`: the hosts it may reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// What this machine could not enforce (absent when everything is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// Once it failed: the denial its output shows and the declaration that would have allowed
    /// it (absent when none shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<String>,
}

impl From<&pb::Sandbox> for SandboxView {
    fn from(s: &pb::Sandbox) -> SandboxView {
        SandboxView {
            files: s.files.clone(),
            network: s.network.clone(),
            git_writable: s.git_writable,
            hosts: s.hosts.clone(),
            limits: (!s.limits.is_empty()).then(|| s.limits.clone()),
            denied: (!s.denied.is_empty()).then(|| s.denied.clone()),
        }
    }
}

/// Response of the `exec` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ExecView {
    /// Id for `read`/`write`/`wait`/`stop`; null only when the command failed to start.
    pub process_id: Option<String>,
    /// `completed`, `backgrounded`, `timed_out`, `stopped`, `failed_to_start` or `failed`.
    pub status: String,
    /// Run time so far (or in total, once exited).
    pub duration_ms: u64,
    /// Latest stdout (at most `max_output_bytes`).
    pub stdout: String,
    /// Latest stderr (at most `max_output_bytes`).
    pub stderr: String,
    /// True when earlier output is not in this response (page it with `read` from `first_seq`
    /// backwards via `since_seq`).
    pub truncated: bool,
    /// Pass as `since_seq` to `read` to get only output after this response.
    pub next_seq: u64,
    /// Sequence number where the returned output starts.
    pub first_seq: u64,
    /// Exit code once exited normally; null while running or when ended by a signal.
    pub exit_code: Option<i32>,
    /// Signal name (`SIGKILL`) when ended by a signal.
    pub signal: Option<String>,
    /// OS process id of the shell.
    pub pid: Option<u32>,
    /// One line naming the next call to make.
    pub message: Option<String>,
    /// Why the command failed to start.
    pub error: Option<String>,
    /// Machine-readable error kind when `error` is set.
    pub error_kind: Option<String>,
    /// Total stdout lines so far.
    pub stdout_lines: u64,
    /// Total stderr lines so far.
    pub stderr_lines: u64,
    /// Descendants still running after the shell exited.
    pub descendants_running: u32,
    /// True when output had invalid UTF-8 that was replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lossy: bool,
    /// With `until`: the output line that matched (null when none did).
    #[serde(default)]
    pub matched_line: Option<String>,
    /// True while it is blocked reading its stdin (absent otherwise, or where it cannot be told).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// True when it runs on a terminal (`tty`; absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// True while its terminal's echo is off: a password prompt (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo_off: bool,
    /// While running: the TCP addresses its process tree listens on (`127.0.0.1:5173`,
    /// `[::]:8080`), sorted by port (absent when none, or where it cannot be told).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<String>,
    /// What the kernel lets it do, when it runs sandboxed (absent: unsandboxed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxView>,
    /// True when an identical exec's process was still running and is what this answer is
    /// about: nothing new was started (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

impl ExecView {
    /// A refusal before any process existed.
    pub fn failed_to_start(error: String, error_kind: &str) -> ExecView {
        ExecView {
            process_id: None,
            status: "failed_to_start".into(),
            duration_ms: 0,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            next_seq: 1,
            first_seq: 1,
            exit_code: None,
            signal: None,
            pid: None,
            message: None,
            error: Some(error),
            error_kind: Some(error_kind.to_string()),
            stdout_lines: 0,
            stderr_lines: 0,
            descendants_running: 0,
            lossy: false,
            matched_line: None,
            waiting_for_input: false,
            tty: false,
            echo_off: false,
            listening: Vec::new(),
            sandbox: None,
            reused: false,
        }
    }
}

impl ExecView {
    /// The view of a started process: `status` is the exec status name (`backgrounded` while it
    /// runs), `message` the hint for the next call (see [`exec_hint`]).
    pub fn of_process(
        p: &pb::ProcessInfo,
        out: &pb::Output,
        status: &str,
        message: Option<String>,
    ) -> ExecView {
        let (stdout, lossy_out) = text(&out.stdout);
        let (stderr, lossy_err) = text(&out.stderr);
        ExecView {
            process_id: Some(p.process_id.clone()),
            status: status.to_string(),
            duration_ms: p.duration_ms,
            stdout,
            stderr,
            truncated: out.truncated,
            next_seq: out.next_seq,
            first_seq: out.first_seq,
            exit_code: p.exit_code,
            signal: p.signal.clone(),
            pid: p.pid,
            message,
            error: None,
            error_kind: None,
            stdout_lines: p.stdout_lines,
            stderr_lines: p.stderr_lines,
            descendants_running: p.descendants_running,
            lossy: lossy_out || lossy_err,
            matched_line: None,
            waiting_for_input: p.waiting_for_input == Some(true),
            tty: p.tty,
            echo_off: p.echo_off == Some(true),
            listening: p.listening.clone(),
            sandbox: p.sandbox.as_ref().map(SandboxView::from),
            reused: false,
        }
    }
}

impl From<&pb::ExecResponse> for ExecView {
    fn from(r: &pb::ExecResponse) -> ExecView {
        let Some(p) = r.process.as_ref() else {
            return ExecView::failed_to_start(r.error.clone(), &r.error_kind);
        };
        let out = r.output.clone().unwrap_or_default();
        let status = exec_status_name(r.status);
        let message = exec_hint(status, p, out.next_seq);
        let mut view = ExecView::of_process(p, &out, status, message);
        view.matched_line = r
            .matched_seq
            .map(|_| String::from_utf8_lossy(&r.matched_line).into_owned());
        if !r.error.is_empty() {
            view.error = Some(r.error.clone());
            view.error_kind = Some(r.error_kind.clone());
        }
        if r.reused {
            view.reused = true;
            view.message = Some(reused_message(out.next_seq));
        }
        view
    }
}

/// Which streams a `read` selected, to decide which text fields appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSelection {
    /// stdout and stderr.
    Both,
    /// stdout only.
    Stdout,
    /// stderr only.
    Stderr,
}

impl StreamSelection {
    /// The control-plane enum value.
    pub fn to_pb(self) -> pb::Streams {
        match self {
            StreamSelection::Both => pb::Streams::Both,
            StreamSelection::Stdout => pb::Streams::Stdout,
            StreamSelection::Stderr => pb::Streams::Stderr,
        }
    }

    /// Parses `both`, `stdout` or `stderr`.
    pub fn parse(s: &str) -> Option<StreamSelection> {
        match s {
            "both" => Some(StreamSelection::Both),
            "stdout" => Some(StreamSelection::Stdout),
            "stderr" => Some(StreamSelection::Stderr),
            _ => None,
        }
    }
}

/// Response of the `read` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReadView {
    /// The process read.
    pub process_id: String,
    /// `running`, `completed`, `stopped`, `timed_out`, `failed` or `lost`.
    pub status: String,
    /// Exit code once exited normally.
    pub exit_code: Option<i32>,
    /// Signal name when ended by a signal.
    pub signal: Option<String>,
    /// Pass as `since_seq` next time to continue exactly after this response.
    pub next_seq: u64,
    /// Sequence number where the returned output starts.
    pub first_seq: u64,
    /// True when this response left out requested bytes: retained nowhere (past the on-disk
    /// log's cap, or never written), or earlier than a latest-output window.
    pub truncated: bool,
    /// True when more output is already available after `next_seq`.
    pub has_more: bool,
    /// stdout text (absent when `streams` is `stderr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// stderr text (absent when `streams` is `stdout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Total stdout lines so far.
    pub stdout_lines: u64,
    /// Total stderr lines so far.
    pub stderr_lines: u64,
    /// Descendants still running after the shell exited.
    pub descendants_running: u32,
    /// True when output had invalid UTF-8 that was replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lossy: bool,
    /// True while it is blocked reading its stdin (absent otherwise, or where it cannot be told).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// True when it runs on a terminal (`tty`; absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// True while its terminal's echo is off: a password prompt (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo_off: bool,
    /// While running: the TCP addresses its process tree listens on (`127.0.0.1:5173`,
    /// `[::]:8080`), sorted by port (absent when none, or where it cannot be told).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<String>,
    /// With `screen`: the terminal as rendered, rows joined by newlines, trailing spaces trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
    /// With `screen`: the cursor as `[row, col]`, 0-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<[u32; 2]>,
    /// With `grep`: the matching lines and their context, in order (`stdout`/`stderr` are then
    /// absent). `next_seq` is where to search on; `has_more` that the search stopped before the
    /// end (`max_matches`, `max_output_bytes`); `truncated` that output in the searched range
    /// is retained nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<SearchLineView>>,
}

/// A line `read` with `grep` returns.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SearchLineView {
    /// Where the line starts (`read` from `since_seq` here shows what follows it).
    pub seq: u64,
    /// The line without its newline; past 1000 bytes, cut around its match ("…" marks a cut).
    pub text: String,
    /// True for a line of context around a match (absent for a match).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub context: bool,
    /// True for a line of stderr (absent for stdout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stderr: bool,
}

impl ReadView {
    /// Adds a rendered screen (`read` with `screen`).
    pub fn with_screen(mut self, screen: Option<&pb::Screen>) -> ReadView {
        if let Some(s) = screen {
            self.screen = Some(s.text.clone());
            self.cursor = Some([s.cursor_row, s.cursor_col]);
        }
        self
    }

    /// Adds the lines a search found (`read` with `grep`), in place of the output text.
    pub fn with_search(mut self, search: Option<&pb::Search>) -> ReadView {
        let Some(search) = search else {
            return self;
        };
        self.stdout = None;
        self.stderr = None;
        let lines = search
            .lines
            .iter()
            .map(|l| {
                let (text, lossy) = text(&l.text);
                self.lossy |= lossy;
                SearchLineView {
                    seq: l.seq,
                    text,
                    context: l.context,
                    stderr: l.stream == pb::Stream::Stderr as i32,
                }
            })
            .collect();
        self.lines = Some(lines);
        self
    }

    /// Builds the view of a process and an output window.
    pub fn new(p: &pb::ProcessInfo, out: &pb::Output, streams: StreamSelection) -> ReadView {
        let (stdout, lossy_out) = text(&out.stdout);
        let (stderr, lossy_err) = text(&out.stderr);
        ReadView {
            process_id: p.process_id.clone(),
            status: process_status_name(p.status).to_string(),
            exit_code: p.exit_code,
            signal: p.signal.clone(),
            next_seq: out.next_seq,
            first_seq: out.first_seq,
            truncated: out.truncated,
            has_more: out.has_more,
            stdout: (streams != StreamSelection::Stderr).then_some(stdout),
            stderr: (streams != StreamSelection::Stdout).then_some(stderr),
            stdout_lines: p.stdout_lines,
            stderr_lines: p.stderr_lines,
            descendants_running: p.descendants_running,
            lossy: lossy_out || lossy_err,
            waiting_for_input: p.waiting_for_input == Some(true),
            tty: p.tty,
            echo_off: p.echo_off == Some(true),
            listening: p.listening.clone(),
            screen: None,
            cursor: None,
            lines: None,
        }
    }
}

/// Response of the `wait` tool: `read`'s fields plus the outcome of the wait.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WaitView {
    /// The output and state, as `read` returns them.
    #[serde(flatten)]
    pub read: ReadView,
    /// `exited`, `deadline_reached` (the process keeps running), `matched` (`until` matched) or
    /// `input_wanted` (`for_input`: it waits for its stdin).
    pub wait_result: String,
    /// The output line that matched `until`.
    pub matched_line: Option<String>,
    /// Run time so far (or in total, once exited).
    pub duration_ms: u64,
}

impl From<&pb::WaitResponse> for WaitView {
    fn from(r: &pb::WaitResponse) -> WaitView {
        let p = r.process.clone().unwrap_or_default();
        let out = r.output.clone().unwrap_or_default();
        let wait_result = wait_result_name(r.result);
        WaitView {
            read: ReadView::new(&p, &out, StreamSelection::Both),
            wait_result: wait_result.to_string(),
            matched_line: r
                .matched_seq
                .map(|_| String::from_utf8_lossy(&r.matched_line).into_owned()),
            duration_ms: p.duration_ms,
        }
    }
}

/// Response of the `write` tool. The fields after `error_kind` are present only for a write
/// with `until` (write, then wait for the answer).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct WriteView {
    /// The process written to.
    pub process_id: String,
    /// True when every byte was written (and stdin closed, if asked).
    pub ok: bool,
    /// Why the write failed.
    pub error: Option<String>,
    /// Machine-readable error kind when `error` is set.
    pub error_kind: Option<String>,
    /// `matched` (a line matched `until`), `exited` or `deadline_reached` (`timeout_ms` passed;
    /// the process keeps running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_result: Option<String>,
    /// The output line that matched `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_line: Option<String>,
    /// stdout printed after the write (from its start, at most `max_output_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// stderr printed after the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Pass as `since_seq` to `read` for the output after this response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_seq: Option<u64>,
    /// True when more output than returned followed the write (page it with `read`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
    /// The process's status after the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Exit code, once it exited normally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// True when output had invalid UTF-8 that was replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lossy: bool,
}

impl WriteView {
    /// The body of a successful write; with `until`, the answer that followed it.
    pub fn written(process_id: &str, r: &pb::WriteResponse) -> WriteView {
        let mut view = WriteView {
            process_id: process_id.to_string(),
            ok: true,
            ..Default::default()
        };
        let (Some(p), Some(out)) = (r.process.as_ref(), r.output.as_ref()) else {
            return view;
        };
        let (stdout, lossy_out) = text(&out.stdout);
        let (stderr, lossy_err) = text(&out.stderr);
        view.wait_result = Some(wait_result_name(r.result).to_string());
        view.matched_line = r
            .matched_seq
            .map(|_| String::from_utf8_lossy(&r.matched_line).into_owned());
        view.stdout = Some(stdout);
        view.stderr = Some(stderr);
        view.next_seq = Some(out.next_seq);
        view.has_more = Some(out.has_more);
        view.status = Some(process_status_name(p.status).to_string());
        view.exit_code = p.exit_code;
        view.lossy = lossy_out || lossy_err;
        view
    }

    /// The body of a write that failed.
    pub fn failed(process_id: &str, error: String, error_kind: &str) -> WriteView {
        WriteView {
            process_id: process_id.to_string(),
            ok: false,
            error: Some(error),
            error_kind: Some(error_kind.to_string()),
            ..Default::default()
        }
    }
}

/// The name of a wait's outcome, as `wait` and `write` with `until` report it.
pub fn wait_result_name(result: i32) -> &'static str {
    match pb::WaitResult::try_from(result).unwrap_or_default() {
        pb::WaitResult::Exited => "exited",
        pb::WaitResult::DeadlineReached => "deadline_reached",
        pb::WaitResult::Matched => "matched",
        pb::WaitResult::InputWanted => "input_wanted",
        pb::WaitResult::Unspecified => "unknown",
    }
}

/// Response of the `stop` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StopView {
    /// The process stopped.
    pub process_id: String,
    /// True once the whole process tree is gone because of this call.
    pub stopped: bool,
    /// The signal sent first; when the process had already ended, the signal that ended it
    /// (absent when it exited).
    pub signal: Option<String>,
    /// Status after the call.
    pub status: Option<String>,
    /// Exit code, when the process exited normally.
    pub exit_code: Option<i32>,
    /// True when the grace period ran out and SIGKILL was sent.
    pub escalated: bool,
    /// Why nothing was stopped.
    pub error: Option<String>,
    /// Machine-readable error kind when `error` is set.
    pub error_kind: Option<String>,
}

impl From<&pb::StopResponse> for StopView {
    fn from(r: &pb::StopResponse) -> StopView {
        let p = r.process.clone().unwrap_or_default();
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        StopView {
            process_id: p.process_id.clone(),
            stopped: r.stopped,
            signal: non_empty(&r.signal),
            status: Some(process_status_name(p.status).to_string()),
            exit_code: p.exit_code,
            escalated: r.escalated,
            error: non_empty(&r.error),
            error_kind: non_empty(&r.error_kind),
        }
    }
}

/// One entry of `ps`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProcessSummary {
    /// Process id for the other tools.
    pub process_id: String,
    /// OS process id of the shell.
    pub pid: Option<u32>,
    /// The name given at `exec`, if any.
    pub name: Option<String>,
    /// The command line.
    pub command: String,
    /// Working directory.
    pub cwd: String,
    /// `running`, `completed`, `stopped`, `timed_out`, `failed` or `lost`.
    pub status: String,
    /// Exit code once exited normally.
    pub exit_code: Option<i32>,
    /// Signal name when ended by a signal.
    pub signal: Option<String>,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    /// End time, RFC 3339 UTC.
    pub ended_at: Option<String>,
    /// Run time so far (or in total).
    pub duration_ms: u64,
    /// stdout bytes captured.
    pub stdout_bytes: u64,
    /// stderr bytes captured.
    pub stderr_bytes: u64,
    /// stdout lines captured.
    pub stdout_lines: u64,
    /// stderr lines captured.
    pub stderr_lines: u64,
    /// Descendants still running after the shell exited.
    pub descendants_running: u32,
    /// Why a `lost` process was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_reason: Option<String>,
    /// True while it is blocked reading its stdin (absent otherwise, or where it cannot be told).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// True when it runs on a terminal (`tty`; absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// True while its terminal's echo is off: a password prompt (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo_off: bool,
    /// While running: the TCP addresses its process tree listens on (`127.0.0.1:5173`,
    /// `[::]:8080`), sorted by port (absent when none, or where it cannot be told).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<String>,
    /// While running: CPU use of its process tree over the last second or so, in percent of one
    /// CPU.
    pub cpu_percent: Option<f64>,
    /// While running: resident memory of its process tree.
    pub rss_bytes: Option<u64>,
    /// What the kernel lets it do, when it runs sandboxed (absent: unsandboxed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxView>,
}

impl From<&pb::ProcessInfo> for ProcessSummary {
    fn from(p: &pb::ProcessInfo) -> ProcessSummary {
        ProcessSummary {
            process_id: p.process_id.clone(),
            pid: p.pid,
            name: (!p.name.is_empty()).then(|| p.name.clone()),
            command: String::from_utf8_lossy(&p.command).into_owned(),
            cwd: String::from_utf8_lossy(&p.cwd).into_owned(),
            status: process_status_name(p.status).to_string(),
            exit_code: p.exit_code,
            signal: p.signal.clone(),
            started_at: format_unix_ms(p.started_at_unix_ms),
            ended_at: p.ended_at_unix_ms.map(format_unix_ms),
            duration_ms: p.duration_ms,
            stdout_bytes: p.stdout_bytes,
            stderr_bytes: p.stderr_bytes,
            stdout_lines: p.stdout_lines,
            stderr_lines: p.stderr_lines,
            descendants_running: p.descendants_running,
            lost_reason: p.lost_reason.clone(),
            waiting_for_input: p.waiting_for_input == Some(true),
            tty: p.tty,
            echo_off: p.echo_off == Some(true),
            listening: p.listening.clone(),
            cpu_percent: p.cpu_percent,
            rss_bytes: p.rss_bytes,
            sandbox: p.sandbox.as_ref().map(SandboxView::from),
        }
    }
}

/// Response of the `ps` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PsView {
    /// Newest started first.
    pub processes: Vec<ProcessSummary>,
}

/// Response of the `cleanup` tool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CleanupView {
    /// How many records were removed.
    pub removed: u32,
}

/// Error body of a tool that takes a `process_id`: always echoes the id.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProcessErrorView {
    /// The id the call named.
    pub process_id: String,
    /// What went wrong, in words an agent can act on.
    pub error: String,
    /// Machine-readable kind (`unknown_process`, `process_exited`, …).
    pub error_kind: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_text_is_flagged() {
        assert_eq!(text(b"ok"), ("ok".to_string(), false));
        let (s, lossy) = text(b"a\xffb");
        assert!(lossy);
        assert_eq!(s, "a\u{fffd}b");
    }

    #[test]
    fn read_view_omits_the_unselected_stream() {
        let p = pb::ProcessInfo {
            process_id: "proc_1".into(),
            status: pb::ProcessStatus::Running as i32,
            ..Default::default()
        };
        let out = pb::Output {
            stdout: b"o".to_vec(),
            stderr: b"e".to_vec(),
            ..Default::default()
        };
        let v =
            serde_json::to_value(ReadView::new(&p, &out, StreamSelection::Stdout)).expect("json");
        assert_eq!(v["stdout"], "o");
        assert!(v.get("stderr").is_none());
        assert_eq!(v["exit_code"], serde_json::Value::Null);
        assert_eq!(v["status"], "running");
    }

    #[test]
    fn exec_hints_come_from_the_facts_and_name_the_tools() {
        let p = pb::ProcessInfo {
            process_id: "proc_7".into(),
            ..Default::default()
        };
        let bg = exec_hint("backgrounded", &p, 12).expect("hint");
        assert_eq!(bg, backgrounded_message(12));
        assert!(bg.contains("read(since_seq=12)"), "{bg}");
        assert!(bg.len() < 100, "one short line: {bg}");
        assert_eq!(exec_hint("completed", &p, 12), None);
        let left = pb::ProcessInfo {
            descendants_running: 2,
            ..p.clone()
        };
        assert_eq!(
            exec_hint("completed", &left, 12),
            Some(descendants_message(2, 12))
        );
        assert_eq!(exec_hint("stopped", &left, 12), None);
        let asking = pb::ProcessInfo {
            waiting_for_input: Some(true),
            ..p.clone()
        };
        let input = exec_hint("backgrounded", &asking, 12).expect("hint");
        assert_eq!(input, input_wanted_message("proc_7"));
        assert!(input.contains("write(input="), "{input}");
        assert!(input.contains("yieldctl attach proc_7"), "{input}");
        // One line, even with a 36-character client-chosen id.
        assert!(input.len() < 130, "one short line: {input}");
        // The body of a daemon response carries the hint although the daemon sends no text.
        let resp = pb::ExecResponse {
            status: pb::ExecStatus::Backgrounded as i32,
            process: Some(p),
            output: Some(pb::Output {
                next_seq: 12,
                ..Default::default()
            }),
            yield_ms: 300,
            ..Default::default()
        };
        assert_eq!(ExecView::from(&resp).message, Some(bg));
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(format_unix_ms(1_500), "1970-01-01T00:00:01.500Z");
    }
}
