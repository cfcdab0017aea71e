//! MCP Tasks (README, "MCP Tasks"): the `io.modelcontextprotocol/tasks` extension (SEP-2663,
//! protocol 2026-07-28), where a call whose process is still running when it would yield answers
//! with a task instead of `backgrounded`; and, in [`legacy`], the 2025-11-25 revision's own tasks
//! for the sessions that began with `initialize`.
//!
//! The task id **is** the process id, and nothing about a task lives in the shim: `tasks/get`
//! and `tasks/cancel` are a lookup (`Read`, `Wait`) or a `Stop` through the daemon, so any shim —
//! a later one, after the editor restarted it — answers for a task an earlier one created, and
//! `yieldctl`, `ps` and `read` work on it too. What a task says is derived from the process:
//!
//! | process | task |
//! |---|---|
//! | running | `working`, `statusMessage` = elapsed, line count, last line; `pollIntervalMs` backs off |
//! | stopped (`tasks/cancel`, `stop`, daemon shutdown) | `cancelled` |
//! | any other end (exit, timeout, lost) | `completed`, the result = the `wait` body (or the profile's own, [`ToolSet::task_result`]); a non-zero exit is a result, not `isError` |
//!
//! Which answers become tasks: a tool result saying its process is still running
//! ([`running_process`]: `status: "backgrounded"` with a `process_id`) of a call that is not a
//! ready-wait ([`eligible`]: no `until`), when a 2026-07-28 request declared the extension
//! ([`task_mode`](crate::tool_set::task_mode)) and the tool set offers tasks
//! ([`ToolSet::task_session`]). A request without the extension — or with it, on a session that
//! began with `initialize`, which cannot read such an answer — gets exactly the classic answer.
//! Status changes are pushed to clients listening for them ([`listen`]).

pub mod legacy;
pub mod listen;

use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, ErrorCode, ErrorData as McpError, JsonObject,
    Task, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use yieldshell_proto::client::{ClientError, Session};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::views::{WaitView, format_unix_ms, process_status_name};

use crate::context::describe;
use crate::progress::last_line;
use crate::tool_set::ToolSet;

/// Both task wires of one shim, shared by its transport (which carries what rmcp 3.11 does not
/// model) and its server handler.
#[derive(Clone)]
pub struct TaskWire {
    /// `subscriptions/listen` streams with `taskIds` (2026-07-28).
    pub subscriptions: listen::TaskSubscriptions,
    /// The 2025-11-25 tasks.
    pub legacy: legacy::LegacyWire,
}

/// Grace of the `stop` a cancelled call sends before SIGKILL: the `stop` tool's default.
const CANCEL_FORCE_AFTER_MS: u64 = yieldshell_proto::deadlines::STOP_GRACE_DEFAULT_MS;

/// Longest last line quoted in a `statusMessage` (it is shown to the model: keep it short).
const STATUS_LINE_CHARS: usize = 120;

/// The process a tool result says is still running: a body with `status: "backgrounded"` and a
/// `process_id`. Not when it carries an `error`, nor a `matched_line` (an `until` that matched
/// answers at once: the agent asked for that line now, not for the end of the process).
pub fn running_process(result: &CallToolResult) -> Option<String> {
    let body = result.structured_content.as_ref()?.as_object()?;
    let present = |key: &str| body.get(key).is_some_and(|v| !v.is_null());
    if body.get("status")?.as_str()? != "backgrounded" || present("error") {
        return None;
    }
    if present("matched_line") {
        return None;
    }
    body.get("process_id")?
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

/// Whether a call with these arguments may become a task. Not a ready-wait (`until`): it asks
/// for the moment a line appears, which a task (that completes when the process ends — never,
/// for a dev server) cannot deliver; its yield stays the classic `backgrounded` answer.
pub fn eligible(arguments: &JsonObject) -> bool {
    arguments
        .get("until")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

/// How long a client should wait before the next `tasks/get`: short while a command may still
/// end quickly, longer the longer it runs (1 s, 2 s, 5 s, then 10 s).
pub fn poll_interval_ms(elapsed_ms: u64) -> u64 {
    match elapsed_ms {
        0..10_000 => 1_000,
        10_000..60_000 => 2_000,
        60_000..300_000 => 5_000,
        _ => 10_000,
    }
}

/// The `statusMessage` of a working task: elapsed time, lines so far and the last line.
pub fn working_message(info: &pb::ProcessInfo, out: &pb::Output) -> String {
    let lines = info.stdout_lines + info.stderr_lines;
    let elapsed = info.duration_ms / 1000;
    let mut message = format!(
        "running for {elapsed}s, {lines} line{}",
        if lines == 1 { "" } else { "s" }
    );
    if let Some(line) = last_line(&out.stdout, &out.stderr) {
        let short: String = line.chars().take(STATUS_LINE_CHARS).collect();
        message.push_str("; last: ");
        message.push_str(short.trim_end());
    }
    message
}

/// The `statusMessage` of a task whose process was stopped.
fn cancelled_message(info: &pb::ProcessInfo) -> String {
    let by = match info.ended_by.as_deref() {
        Some("daemon_shutdown") => "stopped when the daemon shut down",
        _ => "stopped",
    };
    match info.signal.as_deref() {
        Some(signal) => format!(
            "{by} ({signal}); read process_id {} for its output",
            info.process_id
        ),
        None => format!("{by}; read process_id {} for its output", info.process_id),
    }
}

/// The `statusMessage` of a completed task: how the process ended and after how long.
fn ended_message(info: &pb::ProcessInfo) -> String {
    let status = process_status_name(info.status);
    let secs = info.duration_ms / 1000;
    match (info.exit_code, info.signal.as_deref()) {
        (Some(code), _) => format!("{status}, exit code {code}, after {secs}s"),
        (None, Some(signal)) => format!("{status} by {signal} after {secs}s"),
        (None, None) => format!("{status} after {secs}s"),
    }
}

/// Now, as the RFC 3339 timestamps tasks carry.
fn now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    format_unix_ms(ms)
}

/// The base [`Task`] of a process in `status`.
fn base_task(info: &pb::ProcessInfo, status: TaskStatus) -> Task {
    let updated = info.ended_at_unix_ms.map_or_else(now, format_unix_ms);
    let task = Task::new(
        info.process_id.clone(),
        status,
        format_unix_ms(info.started_at_unix_ms),
        updated,
    );
    if status == TaskStatus::Working {
        task.with_poll_interval_ms(poll_interval_ms(info.duration_ms))
    } else {
        task
    }
}

/// The JSON-RPC error for a task id the daemon cannot answer for.
pub fn lookup_error(task_id: &str, e: &ClientError) -> McpError {
    let (message, _) = describe(e);
    if e.kind() == ErrorKind::UnknownProcess {
        McpError::invalid_params(
            format!(
                "unknown task {task_id:?}: no process with this id is known to the daemon \
                 (it never existed, or its record was cleaned up)"
            ),
            Some(json!({"taskId": task_id})),
        )
    } else {
        McpError::internal_error(
            format!("cannot look task {task_id:?} up: {message}"),
            Some(json!({"taskId": task_id})),
        )
    }
}

/// The daemon session of a tool set that offers tasks (the extension is advertised only then,
/// so a request reaching here without one is a protocol error).
pub fn session_of(tools: &dyn ToolSet) -> Result<&Session, McpError> {
    tools.task_session().ok_or_else(|| {
        McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            "tasks are not supported by this profile: its calls always answer inline",
            None,
        )
    })
}

/// The latest state of a process: its info and last output line.
async fn look_up(session: &Session, task_id: &str) -> Result<pb::ReadResponse, McpError> {
    session
        .read(pb::ReadRequest {
            process_id: task_id.to_string(),
            tail_lines: Some(1),
            max_output_bytes: Some(4096),
            streams: pb::Streams::Both as i32,
            ..Default::default()
        })
        .await
        .map_err(|e| lookup_error(task_id, &e))
}

/// The seed of a task for `process_id`, whose call just answered that it keeps running.
pub async fn create(tools: &dyn ToolSet, process_id: &str) -> Result<CreateTaskResult, McpError> {
    let session = session_of(tools)?;
    let state = look_up(session, process_id).await?;
    let info = state.process.unwrap_or_default();
    let out = state.output.unwrap_or_default();
    // Seeded as working even if it ended meanwhile: the first `tasks/get` says how it ended.
    let task =
        base_task(&info, TaskStatus::Working).with_status_message(working_message(&info, &out));
    Ok(CreateTaskResult::new(task))
}

/// A task as it is now, looked up through the daemon.
pub struct Looked {
    /// The task (its status says how the process is).
    pub task: Task,
    /// The `Wait` answer of its process, once that has ended (what the result is made of).
    pub ended: Option<pb::WaitResponse>,
}

/// The task of `info` (and its latest output, for a working task's last line): what each
/// process status means for a task (see the module doc).
pub fn task_of(info: &pb::ProcessInfo, out: &pb::Output) -> Task {
    match pb::ProcessStatus::try_from(info.status).unwrap_or_default() {
        pb::ProcessStatus::Running => {
            base_task(info, TaskStatus::Working).with_status_message(working_message(info, out))
        }
        pb::ProcessStatus::Stopped => {
            base_task(info, TaskStatus::Cancelled).with_status_message(cancelled_message(info))
        }
        _ => base_task(info, TaskStatus::Completed).with_status_message(ended_message(info)),
    }
}

/// Looks a task up: its process's state and, once it has ended, its final `Wait` answer.
pub async fn look(tools: &dyn ToolSet, task_id: &str) -> Result<Looked, McpError> {
    let session = session_of(tools)?;
    let state = look_up(session, task_id).await?;
    let info = state.process.unwrap_or_default();
    let out = state.output.unwrap_or_default();
    if info.status == pb::ProcessStatus::Running as i32 {
        return Ok(Looked {
            task: task_of(&info, &out),
            ended: None,
        });
    }
    let ended = ended_state(session, task_id).await?;
    let info = ended.process.clone().unwrap_or(info);
    Ok(Looked {
        task: task_of(&info, &out),
        ended: Some(ended),
    })
}

/// The tool result a task whose process ended carries: the tool set's own rendering, else the
/// `wait` body.
pub fn result_of(tools: &dyn ToolSet, ended: &pb::WaitResponse) -> CallToolResult {
    tools
        .task_result(ended)
        .unwrap_or_else(|| crate::tools::respond_with(&WaitView::from(ended)))
}

/// What a task is now (`tasks/get`, and each pushed status).
pub async fn detailed(tools: &dyn ToolSet, task_id: &str) -> Result<DetailedTask, McpError> {
    let Looked { task, ended } = look(tools, task_id).await?;
    let payload = match (task.status, ended) {
        (TaskStatus::Cancelled, _) => TaskPayload::Cancelled,
        (_, Some(ended)) => TaskPayload::Completed {
            result: result_object(&result_of(tools, &ended)),
        },
        _ => TaskPayload::Working,
    };
    Ok(DetailedTask::new(task, payload))
}

/// The `Wait` answer for a process that has ended: its final state and latest output.
async fn ended_state(session: &Session, task_id: &str) -> Result<pb::WaitResponse, McpError> {
    session
        .wait(pb::WaitRequest {
            process_id: task_id.to_string(),
            timeout_ms: Some(0),
            streams: pb::Streams::Both as i32,
            ..Default::default()
        })
        .await
        .map_err(|e| lookup_error(task_id, &e))
}

/// A tool result as the JSON object a completed task inlines.
pub fn result_object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(Value::Object(m)) => m,
        // A CallToolResult always serialises to an object; keep the task well-formed anyway.
        _ => JsonObject::new(),
    }
}

/// `tasks/cancel`: stops the whole process tree (as `stop`: SIGTERM, SIGKILL after the grace
/// period), returning once it is gone. A task that already ended cannot be cancelled.
pub async fn cancel(tools: &dyn ToolSet, task_id: &str) -> Result<(), McpError> {
    let session = session_of(tools)?;
    let state = look_up(session, task_id).await?;
    let info = state.process.unwrap_or_default();
    if info.status != pb::ProcessStatus::Running as i32 {
        return Err(McpError::invalid_params(
            format!(
                "task {task_id:?} cannot be cancelled: its process already ended ({})",
                process_status_name(info.status)
            ),
            Some(json!({"taskId": task_id})),
        ));
    }
    let stopped = session
        .stop(pb::StopRequest {
            process_id: task_id.to_string(),
            signal: "SIGTERM".into(),
            force_after_ms: Some(CANCEL_FORCE_AFTER_MS),
            ..Default::default()
        })
        .await
        .map_err(|e| lookup_error(task_id, &e))?;
    // Not stopped because it ended on its own in the meantime: the task completed, which the
    // next `tasks/get` shows; cancellation is cooperative, so that is not an error.
    if !stopped.stopped && !stopped.error.is_empty() && stopped.error_kind != "process_exited" {
        return Err(McpError::internal_error(
            format!("cannot cancel task {task_id:?}: {}", stopped.error),
            Some(json!({"taskId": task_id})),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_set::still_running;

    fn body(v: Value) -> CallToolResult {
        CallToolResult::structured(v)
    }

    #[test]
    fn only_a_body_still_running_names_a_process() {
        let running =
            body(json!({"status": "backgrounded", "process_id": "proc_1", "error": null}));
        assert_eq!(running_process(&running).as_deref(), Some("proc_1"));
        for other in [
            json!({"status": "completed", "process_id": "proc_1"}),
            json!({"status": "backgrounded", "process_id": ""}),
            json!({"status": "backgrounded"}),
            json!({"status": "backgrounded", "process_id": "proc_1", "error": "boom"}),
            json!({"status": "backgrounded", "process_id": "proc_1", "matched_line": "ready"}),
        ] {
            assert_eq!(running_process(&body(other.clone())), None, "{other}");
        }
        assert_eq!(
            running_process(&still_running("proc_9")).as_deref(),
            Some("proc_9")
        );
    }

    #[test]
    fn a_ready_wait_never_becomes_a_task() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(eligible(&args(json!({"command": "make test"}))));
        assert!(eligible(&args(json!({"command": "x", "until": ""}))));
        assert!(!eligible(&args(
            json!({"command": "npm run dev", "until": "listening on"})
        )));
    }

    #[test]
    fn the_poll_interval_backs_off_with_elapsed_time() {
        let steps: Vec<u64> = [0, 9_999, 10_000, 59_999, 60_000, 299_999, 300_000, u64::MAX]
            .into_iter()
            .map(poll_interval_ms)
            .collect();
        assert_eq!(
            steps,
            [1_000, 1_000, 2_000, 2_000, 5_000, 5_000, 10_000, 10_000]
        );
    }

    #[test]
    fn the_working_message_is_short_and_names_the_last_line() {
        let info = pb::ProcessInfo {
            duration_ms: 12_345,
            stdout_lines: 2,
            stderr_lines: 1,
            ..Default::default()
        };
        let out = pb::Output {
            stdout: format!("a\n{}\n", "x".repeat(500)).into_bytes(),
            ..Default::default()
        };
        let message = working_message(&info, &out);
        assert!(
            message.starts_with("running for 12s, 3 lines; last: xxx"),
            "{message}"
        );
        assert!(message.len() < 160, "{message}");
        let quiet = working_message(&pb::ProcessInfo::default(), &pb::Output::default());
        assert_eq!(quiet, "running for 0s, 0 lines");
    }
}
