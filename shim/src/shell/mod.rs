//! The `shell` profile: the MCP Shell Server specification's one synchronous tool,
//! `shell_execute`.
//!
//! `command` is an argv array. [`argv`] checks every command in it (the first element, and the
//! first after each `;`, `&&`, `||` or `|` element) against `ALLOW_COMMANDS`, then builds a
//! `/bin/sh -c` line with every other element single-quoted; the daemon runs it as any `exec`,
//! re-checking the line against the same allowlist, and its timeout stops the whole process tree.
//! The call blocks until the command has ended (sending progress notifications when the client
//! asked for them), then returns `{stdout, stderr, status, execution_time}` plus `error` when it
//! failed: refused, timed out, stopped or lost. A refusal is the specification's object (the
//! published package answers in plain text instead: that is the `mcp-shell-server` profile,
//! [`crate::mcp_shell_server`]):
//! `{"error": "Command not allowed: rm", "status": 1, "stdout": "", "stderr": "Command not allowed: rm", "execution_time": 0}`.
//!
//! A request that declares the MCP tasks extension blocks at most
//! [`TASK_WINDOW_MS`]: a command still running then becomes a
//! task ([`crate::tasks`]), which completes with the same `{stdout, stderr, status, …}` body.

pub mod argv;
pub mod config;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};
use yieldshell_proto::client::ClientError;
use yieldshell_proto::pb;
use yieldshell_proto::views::text;

use crate::context::{Context, describe, schema_object, schema_of};
use crate::jobs::tools::in_profile_terms;
use crate::progress::{
    Progress, SettleSpec, Settled, backgrounded, heartbeat_ms, run_until_settled,
};
use crate::tool_set::{
    BoxFuture, TASK_WINDOW_MS, TaskMode, ToolSet, still_running, task_mode, task_requested,
};
use config::{OUTPUT_LIMIT_BYTES, ShellSettings, TIMEOUT_SLACK_MS};

/// The tool's name, as the original server names it.
pub const TOOL_NAME: &str = "shell_execute";

/// Side effects every command declares: the original has no such notion (`UNKNOWN` is not
/// blocked by default).
const SIDE_EFFECTS: &str = "UNKNOWN";

/// The shell profile's tool set: one tool.
pub struct ShellTools {
    ctx: Context,
    settings: ShellSettings,
    tools: Vec<Tool>,
}

impl ShellTools {
    /// `shell_execute` over `ctx`, with the profile's `settings`.
    pub fn new(ctx: Context, settings: ShellSettings) -> ShellTools {
        let tools = vec![definition(&settings)];
        ShellTools {
            ctx,
            settings,
            tools,
        }
    }
}

impl ToolSet for ShellTools {
    fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tool's description, as the original server's only documentation.
    fn instructions(&self) -> String {
        self.tools
            .first()
            .and_then(|t| t.description.as_deref())
            .unwrap_or_default()
            .to_string()
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a JsonObject,
        request: &'a RequestContext<RoleServer>,
    ) -> BoxFuture<'a, Option<CallToolResult>> {
        Box::pin(call(&self.ctx, &self.settings, name, arguments, request))
    }

    fn task_session(&self) -> Option<&yieldshell_proto::client::Session> {
        Some(&self.ctx.session)
    }

    /// A finished task of `shell_execute` carries the body the call would have returned (the
    /// daemon's timeout ended it when it ran for its whole timeout).
    fn task_result(&self, ended: &pb::WaitResponse) -> Option<CallToolResult> {
        let info = ended.process.clone().unwrap_or_default();
        let out = ended.output.clone().unwrap_or_default();
        Some(finished(info.duration_ms.div_ceil(1000), &info, &out).into_result())
    }

    fn task_tools(&self) -> &[&'static str] {
        &[TOOL_NAME]
    }
}

/// The response of `shell_execute`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ShellResult {
    /// The command's standard output.
    pub stdout: String,
    /// The command's standard error.
    pub stderr: String,
    /// Exit status: the exit code; minus the signal number when a signal ended it; 1 for a
    /// refusal, -1 for a timeout or another failure.
    pub status: i32,
    /// Seconds the command ran.
    pub execution_time: f64,
    /// Why the call failed; present only when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ShellResult {
    /// A refusal, in the specification's shape.
    pub fn refused(message: impl Into<String>) -> ShellResult {
        let message = message.into();
        ShellResult {
            stdout: String::new(),
            stderr: message.clone(),
            status: 1,
            execution_time: 0.0,
            error: Some(message),
        }
    }

    fn into_result(self) -> CallToolResult {
        let failed = self.error.is_some();
        let body = serde_json::to_value(&self).unwrap_or_else(|e| json!({"error": e.to_string()}));
        let body = crate::context::without_nulls(body);
        if failed {
            CallToolResult::structured_error(body)
        } else {
            CallToolResult::structured(body)
        }
    }
}

/// The tool definition, naming the allowed commands and limits as the original does.
pub fn definition(s: &ShellSettings) -> Tool {
    let allowed = if s.allowed.is_empty() {
        "none (set ALLOW_COMMANDS)".to_string()
    } else {
        s.allowed.join(", ")
    };
    let description = format!(
        "Execute a shell command\nAllowed commands: {allowed}\nDefault timeout: {}s; maximum timeout: {}s; \
         output cap: {OUTPUT_LIMIT_BYTES} bytes\ncommand is an argv array: [\"ls\", \"-l\"]. Separate \
         commands with \";\", \"&&\", \"||\" or \"|\" as their own elements; every command must be allowed. \
         Arguments are passed as they are, never interpreted by a shell.",
        s.default_timeout_secs, s.max_timeout_secs
    );
    let input = json!({
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "Command and its arguments as array"},
            "stdin": {"type": "string", "description": "Input to be passed to the command via stdin"},
            "directory": {"type": "string", "description": "Working directory for the command (default: the server's working directory; relative paths are resolved against it)"},
            "timeout": {"type": "integer", "minimum": 1, "default": s.default_timeout_secs, "description": "Maximum execution time in seconds; clamped to the server maximum"}
        },
        "required": ["command"]
    });
    Tool::new(
        Cow::Borrowed(TOOL_NAME),
        Cow::Owned(description),
        Arc::new(schema_object(input)),
    )
    .with_raw_output_schema(Arc::new(schema_object(schema_of::<ShellResult>())))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

/// The validated arguments of one call.
#[derive(Debug)]
struct Call {
    argv: Vec<String>,
    stdin: Option<String>,
    directory: Option<String>,
    timeout_secs: u64,
}

fn parse(args: &Map<String, Value>, s: &ShellSettings) -> Result<Call, String> {
    let get = |name: &str| args.get(name).filter(|v| !v.is_null());
    let argv: Vec<String> = match get("command") {
        None => return Err("No command provided".into()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("'command' must be an array of strings")?,
        // Models sometimes send the array as JSON text; a plain string is not an argv.
        Some(Value::String(t)) if t.trim_start().starts_with('[') => {
            serde_json::from_str(t).map_err(|_| "'command' must be an array of strings")?
        }
        Some(_) => return Err("'command' must be an array".into()),
    };
    if argv.is_empty() {
        return Err("No command provided".into());
    }
    let string = |name: &str| -> Result<Option<String>, String> {
        match get(name) {
            None => Ok(None),
            Some(Value::String(t)) => Ok(Some(t.clone())),
            Some(_) => Err(format!("'{name}' must be a string")),
        }
    };
    let timeout = match get("timeout") {
        None => None,
        Some(Value::Number(n)) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        Some(Value::String(t)) => t.trim().parse::<i64>().ok(),
        Some(_) => None,
    };
    let timeout_secs = match (get("timeout"), timeout) {
        (None, _) => s.default_timeout_secs,
        (Some(_), None) => return Err("'timeout' must be an integer".into()),
        (Some(_), Some(t)) if t <= 0 => return Err("'timeout' must be greater than 0".into()),
        (Some(_), Some(t)) => u64::try_from(t).unwrap_or(u64::MAX).min(s.max_timeout_secs),
    };
    let directory = match string("directory")? {
        // The original refuses a blank directory rather than running in the default one.
        Some(d) if d.trim().is_empty() => return Err("Directory cannot be empty".into()),
        other => other,
    };
    Ok(Call {
        argv,
        stdin: string("stdin")?,
        directory,
        timeout_secs,
    })
}

/// Checks a working directory as the original does, with its wording: it must exist and be a
/// directory. `base` is where a relative one is resolved (the session's default cwd).
pub(crate) fn check_directory(directory: &str, base: &std::path::Path) -> Result<(), String> {
    let path = base.join(directory);
    match std::fs::metadata(&path) {
        Err(_) => Err(format!("Directory does not exist: {}", path.display())),
        Ok(m) if !m.is_dir() => Err(format!("Not a directory: {}", path.display())),
        Ok(_) => Ok(()),
    }
}

/// Exit status of a process that a signal ended: minus its number, as Python reports it.
fn signal_status(name: Option<&str>) -> i32 {
    #[cfg(unix)]
    {
        use std::str::FromStr;
        if let Some(sig) = name.and_then(|n| nix::sys::signal::Signal::from_str(n).ok()) {
            return -(sig as i32);
        }
    }
    let _ = name;
    -1
}

/// The final result of a command that ran with a timeout of `timeout_secs`.
fn finished(timeout_secs: u64, p: &pb::ProcessInfo, out: &pb::Output) -> ShellResult {
    let mut r = ShellResult {
        stdout: text(&out.stdout).0,
        stderr: text(&out.stderr).0,
        status: -1,
        execution_time: p.duration_ms as f64 / 1000.0,
        error: None,
    };
    let failure = match pb::ProcessStatus::try_from(p.status).unwrap_or_default() {
        pb::ProcessStatus::Completed => {
            r.status = p
                .exit_code
                .unwrap_or_else(|| signal_status(p.signal.as_deref()));
            None
        }
        pb::ProcessStatus::TimedOut => {
            Some(format!("Command timed out after {timeout_secs} seconds"))
        }
        pb::ProcessStatus::Stopped => Some(format!(
            "Command was stopped ({})",
            p.signal.as_deref().unwrap_or("by request")
        )),
        pb::ProcessStatus::Running => Some("Command is still running".to_string()),
        pb::ProcessStatus::Failed | pb::ProcessStatus::Lost | pb::ProcessStatus::Unspecified => {
            Some(format!(
                "Command failed: {}",
                p.lost_reason
                    .as_deref()
                    .or(p.ended_by.as_deref())
                    .unwrap_or("the daemon could not finish it")
            ))
        }
    };
    if let Some(message) = failure {
        // Keep what the command printed, and say why it ended where an agent looks first.
        if !r.stderr.is_empty() && !r.stderr.ends_with('\n') {
            r.stderr.push('\n');
        }
        r.stderr.push_str(&message);
        r.error = Some(message);
    }
    r
}

fn daemon_error(e: &ClientError) -> ShellResult {
    ShellResult::refused(describe(e).0)
}

async fn stop(ctx: &Context, id: &str) {
    let req = pb::StopRequest {
        process_id: id.to_string(),
        signal: "SIGTERM".into(),
        force_after_ms: Some(2_000),
        ..Default::default()
    };
    // Best effort: the caller has gone, or the command outlived every deadline.
    let _ = ctx.session.stop(req).await;
}

/// How a call ends: with its body, or (only for a request that asked for tasks) still running
/// after [`TASK_WINDOW_MS`], as this process.
enum Answer {
    Done(ShellResult),
    Running(String),
}

async fn run(
    ctx: &Context,
    s: &ShellSettings,
    c: &Call,
    request: &RequestContext<RoleServer>,
) -> Answer {
    if let Err(message) = argv::check(&c.argv, &s.allowed) {
        return Answer::Done(ShellResult::refused(message));
    }
    if let Some(dir) = &c.directory
        && let Err(message) = check_directory(dir, &ctx.config.default_cwd)
    {
        return Answer::Done(ShellResult::refused(message));
    }
    let timeout_ms = c.timeout_secs.saturating_mul(1000);
    // A request that asked for tasks blocks one short window (none for a 2025-11-25 task,
    // which is answered at once); the task follows the rest.
    let budget_ms = match task_mode(request) {
        TaskMode::Inline => timeout_ms + TIMEOUT_SLACK_MS,
        TaskMode::AfterWindow => TASK_WINDOW_MS.min(timeout_ms + TIMEOUT_SLACK_MS),
        TaskMode::AtOnce => 0,
    };
    let started = Instant::now();
    let progress = Progress::for_call(request, budget_ms);
    let req = pb::ExecRequest {
        command: argv::shell_line(&c.argv).into_bytes(),
        side_effects: vec![SIDE_EFFECTS.to_string()],
        cwd: c.directory.clone().map(String::into_bytes),
        stdin: c.stdin.clone().map(String::into_bytes),
        // Always closed: a command reading stdin gets EOF instead of waiting for its timeout.
        close_stdin: true,
        name: Some(TOOL_NAME.to_string()),
        // The first slice: one heartbeat when progress is reported, else the whole budget.
        yield_ms: Some(if progress.is_some() {
            heartbeat_ms()
        } else {
            budget_ms
        }),
        timeout_ms: Some(timeout_ms),
        max_output_bytes: Some(OUTPUT_LIMIT_BYTES),
        ..Default::default()
    };
    let resp = match ctx.session.exec(req).await {
        Ok(r) => r,
        Err(e) => return Answer::Done(daemon_error(&e)),
    };
    let Some(info) = resp.process.as_ref() else {
        return Answer::Done(ShellResult::refused(in_profile_terms(
            &resp.error,
            config::ENV_ALLOW_COMMANDS,
        )));
    };
    // A 2025-11-25 task is the process, however quickly it ends.
    if task_mode(request) == TaskMode::AtOnce {
        return Answer::Running(info.process_id.clone());
    }
    if resp.status != pb::ExecStatus::Backgrounded as i32 {
        return Answer::Done(finished(
            c.timeout_secs,
            info,
            &resp.output.unwrap_or_default(),
        ));
    }
    let spec = SettleSpec {
        request,
        progress: progress.as_ref(),
        what: "running",
        wait: pb::WaitRequest {
            process_id: info.process_id.clone(),
            max_output_bytes: Some(OUTPUT_LIMIT_BYTES),
            ..Default::default()
        },
        budget_ms,
        started,
    };
    let settled = run_until_settled(&ctx.session, spec, Some(backgrounded(&resp))).await;
    let state = match settled {
        Settled::Done(state) => state,
        // The window of a task-augmented call passed: the task follows the command.
        Settled::OutOfTime(_) if task_requested(request) => {
            return Answer::Running(info.process_id.clone());
        }
        Settled::OutOfTime(state) => {
            // The daemon's timeout should have ended it long ago; do not block for ever.
            stop(ctx, &info.process_id).await;
            state
        }
        Settled::Cancelled(_) => {
            // Nobody waits for the answer any more; the original kills the command too.
            stop(ctx, &info.process_id).await;
            return Answer::Done(ShellResult::refused("the call was cancelled"));
        }
        Settled::Failed(e, _) => return Answer::Done(daemon_error(&e)),
    };
    Answer::Done(finished(
        c.timeout_secs,
        &state.process.unwrap_or_default(),
        &state.output.unwrap_or_default(),
    ))
}

/// Runs `shell_execute`. `None` for any other name.
async fn call(
    ctx: &Context,
    s: &ShellSettings,
    name: &str,
    arguments: &Map<String, Value>,
    request: &RequestContext<RoleServer>,
) -> Option<CallToolResult> {
    if name != TOOL_NAME {
        return None;
    }
    let answer = match parse(arguments, s) {
        Ok(c) => run(ctx, s, &c, request).await,
        Err(message) => Answer::Done(ShellResult::refused(message)),
    };
    Some(match answer {
        Answer::Done(result) => result.into_result(),
        Answer::Running(process_id) => still_running(&process_id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ShellSettings {
        ShellSettings {
            allowed: vec!["ls".into()],
            default_timeout_secs: 30,
            max_timeout_secs: 300,
        }
    }

    fn parsed(v: Value) -> Result<Call, String> {
        parse(v.as_object().expect("object"), &settings())
    }

    #[test]
    fn arguments_follow_the_original() {
        let c = parsed(json!({"command": ["ls", "-l"], "stdin": "x", "directory": "/tmp"}))
            .expect("call");
        assert_eq!(c.argv, ["ls", "-l"]);
        assert_eq!(c.timeout_secs, 30);
        assert_eq!(c.stdin.as_deref(), Some("x"));
        assert_eq!(c.directory.as_deref(), Some("/tmp"));
        assert_eq!(
            parsed(json!({"command": ["ls"], "timeout": 900}))
                .expect("call")
                .timeout_secs,
            300
        );
        assert_eq!(
            parsed(json!({"command": "[\"ls\", \"-a\"]"}))
                .expect("call")
                .argv,
            ["ls", "-a"]
        );
        for (args, message) in [
            (json!({}), "No command provided"),
            (json!({"command": []}), "No command provided"),
            (json!({"command": "ls -l"}), "'command' must be an array"),
            (
                json!({"command": ["ls", 3]}),
                "'command' must be an array of strings",
            ),
            (
                json!({"command": ["ls"], "timeout": 0}),
                "'timeout' must be greater than 0",
            ),
            (
                json!({"command": ["ls"], "timeout": -3}),
                "'timeout' must be greater than 0",
            ),
            (
                json!({"command": ["ls"], "timeout": "soon"}),
                "'timeout' must be an integer",
            ),
            (
                json!({"command": ["ls"], "stdin": 5}),
                "'stdin' must be a string",
            ),
            (
                json!({"command": ["ls"], "directory": " "}),
                "Directory cannot be empty",
            ),
        ] {
            assert_eq!(
                parsed(args.clone()).expect_err("refused"),
                message,
                "{args}"
            );
        }
    }

    #[test]
    fn refusals_have_the_original_shape() {
        let v =
            serde_json::to_value(ShellResult::refused("Command not allowed: rm")).expect("json");
        assert_eq!(
            v,
            json!({"error": "Command not allowed: rm", "status": 1, "stdout": "", "stderr": "Command not allowed: rm", "execution_time": 0.0})
        );
        let ok = ShellResult {
            stdout: "a".into(),
            stderr: String::new(),
            status: 0,
            execution_time: 0.5,
            error: None,
        };
        assert!(
            serde_json::to_value(ok)
                .expect("json")
                .get("error")
                .is_none()
        );
    }

    #[test]
    fn signals_become_negative_statuses() {
        assert_eq!(signal_status(Some("SIGKILL")), -9);
        assert_eq!(signal_status(Some("SIGTERM")), -15);
        assert_eq!(signal_status(None), -1);
    }
}
