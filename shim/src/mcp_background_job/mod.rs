//! The `mcp-background-job` profile: the tools of the published `mcp-background-job` 0.1.2
//! package, so a client configured for `uvx mcp-background-job` works with only its command
//! changed.
//!
//! Tools `execute_command`, `list_jobs`, `get_job_status`, `get_job_output`, `tail_job_output`,
//! `kill_job` and `interact_with_job`, with the package's parameters, result objects (sent as
//! `structuredContent` and as compact JSON text, as FastMCP sends them) and error texts. The
//! machinery is the `jobs` profile's ([`crate::jobs`]: job ids are process ids, statuses fold the
//! same way); what differs is what the package does differently from the specification the `jobs`
//! profile follows:
//!
//! - a command is not given to a shell: it is split like `shlex.split` and run as one program
//!   ([`command_line`]), a missing program is an error, and the package's dangerous-pattern
//!   refusals apply;
//! - output is returned as lines joined by `\n`, without the final newline;
//! - `list_jobs` shows `started` with microseconds, as pydantic writes a `datetime`.
//!
//! What stays deliberately better (and is listed in the README): jobs survive a restart of the
//! server, `kill_job` ends the whole process tree, `MCP_BG_JOB_TIMEOUT` and `MCP_BG_WORKING_DIR`
//! take effect, `MCP_BG_ALLOWED_COMMANDS` names programs checked with a shell parser rather than
//! regexes searched in the text, and `interact_with_job` waits for the answer instead of 0.1 s.

pub mod command_line;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use serde::Serialize;
use serde_json::{Map, Value, json};
use yieldshell_proto::views::format_unix_ms;

use crate::args::Args;
use crate::context::{Context, env_var, schema_object};
use crate::jobs::{
    ExecuteOutput, JobStatus, ProcessOutput, ToolError, interact, job_status, tools,
};
use crate::tool_set::{BoxFuture, ToolSet};
use command_line::{
    BlockedPatterns, SHELL_BUILTINS, as_lines, exec_line, find_program, shlex_split,
};

/// The package's tool names, in its listing order.
pub const TOOL_NAMES: [&str; 7] = [
    "list_jobs",
    "get_job_status",
    "get_job_output",
    "tail_job_output",
    "execute_command",
    "interact_with_job",
    "kill_job",
];

/// The profile's tool set.
pub struct BackgroundJobTools {
    ctx: Context,
    blocked: BlockedPatterns,
    tools: Vec<Tool>,
}

impl BackgroundJobTools {
    /// The seven tools over `ctx` (the `MCP_BG_*` settings are already applied to its session).
    pub fn new(ctx: Context) -> BackgroundJobTools {
        BackgroundJobTools {
            ctx,
            blocked: BlockedPatterns::new(),
            tools: definitions(),
        }
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Option<CallToolResult> {
        let ctx = &self.ctx;
        let args = Args::new(arguments);
        let result = match name {
            "execute_command" => self.execute(&args).await.map(structured),
            "list_jobs" => list(ctx).await.map(structured),
            "get_job_status" => tools::status(ctx, &args).await.map(structured),
            "get_job_output" => tools::output(ctx, &args).await.map(lines).map(structured),
            "tail_job_output" => tools::tail(ctx, &args).await.map(lines).map(structured),
            "kill_job" => tools::kill(ctx, &args).await.map(structured),
            "interact_with_job" => interact::interact(ctx, &args)
                .await
                .map(lines)
                .map(structured),
            _ => return None,
        };
        Some(result.unwrap_or_else(ToolError::into_result))
    }

    async fn execute(&self, args: &Args<'_>) -> Result<ExecuteOutput, ToolError> {
        let command = args
            .opt_string("command")
            .map_err(|e| ToolError(format!("Invalid parameter: {e}")))?
            .unwrap_or_default();
        let command = command.trim();
        if command.is_empty() {
            return Err(ToolError("Invalid command: Command cannot be empty".into()));
        }
        self.blocked
            .check(command)
            .map_err(|m| ToolError(format!("Invalid command: {m}")))?;
        let words = shlex_split(command).map_err(|m| ToolError(format!("Invalid command: {m}")))?;
        let program = words.first().map(String::as_str).unwrap_or_default();
        let path = env_var(&self.ctx.config, "PATH");
        let full = find_program(program, path.as_deref(), &self.ctx.config.default_cwd)
            .map_err(|m| ToolError(format!("Failed to execute command: {m}")))?;
        // With an allowlist the daemon checks names, so a builtin's name stays a name there.
        let by_path =
            SHELL_BUILTINS.contains(&program) && self.ctx.config.policy.allow_commands.is_empty();
        let first = if by_path {
            full.to_string_lossy().into_owned()
        } else {
            program.to_string()
        };
        tools::start(
            &self.ctx,
            exec_line(&first, &words).into_bytes(),
            Some(command.to_string()),
        )
        .await
    }
}

impl ToolSet for BackgroundJobTools {
    fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The package sends no instructions.
    fn instructions(&self) -> String {
        String::new()
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a JsonObject,
        _request: &'a RequestContext<RoleServer>,
    ) -> BoxFuture<'a, Option<CallToolResult>> {
        Box::pin(self.call_tool(name, arguments))
    }
}

/// One job in `list_jobs`.
#[derive(Debug, Serialize)]
struct JobSummary {
    job_id: String,
    status: JobStatus,
    command: String,
    started: String,
}

/// `list_jobs`'s result.
#[derive(Debug, Serialize)]
struct ListOutput {
    jobs: Vec<JobSummary>,
}

/// A start time as pydantic writes a UTC `datetime`: microseconds, omitted when zero.
fn pydantic_time(unix_ms: i64) -> String {
    let millis = format_unix_ms(unix_ms);
    match millis.strip_suffix(".000Z") {
        Some(whole) => format!("{whole}Z"),
        None => millis.replace('Z', "000Z"),
    }
}

async fn list(ctx: &Context) -> Result<ListOutput, ToolError> {
    let jobs = tools::list_as(ctx, |p| JobSummary {
        job_id: p.process_id.clone(),
        status: job_status(p),
        // The command as given; the line that ran is its `exec` rewrite.
        command: if p.name.is_empty() {
            String::from_utf8_lossy(&p.command).into_owned()
        } else {
            p.name.clone()
        },
        started: pydantic_time(p.started_at_unix_ms),
    })
    .await?;
    Ok(ListOutput { jobs })
}

/// Output in the package's form: lines joined by `\n`.
fn lines(out: ProcessOutput) -> ProcessOutput {
    ProcessOutput {
        stdout: as_lines(&out.stdout),
        stderr: as_lines(&out.stderr),
    }
}

fn structured<T: Serialize>(value: T) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => ToolError(format!("internal error: {e}")).into_result(),
    }
}

fn hints(read_only: bool, destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
}

fn job_id_schema(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn output_schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn streams_schema() -> Value {
    output_schema(
        json!({
            "stdout": {"type": "string", "description": "Standard output content"},
            "stderr": {"type": "string", "description": "Standard error content"}
        }),
        &["stdout", "stderr"],
    )
}

fn status_enum() -> Value {
    json!({"type": "string", "enum": ["running", "completed", "failed", "killed"], "description": "Current job status"})
}

fn define(
    name: &'static str,
    description: &'static str,
    properties: Value,
    required: &[&str],
    output: Value,
    annotations: ToolAnnotations,
) -> Tool {
    let input = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    Tool::new(
        Cow::Borrowed(name),
        Cow::Borrowed(description),
        Arc::new(schema_object(input)),
    )
    .with_raw_output_schema(Arc::new(schema_object(output)))
    .with_annotations(annotations)
}

/// The seven tool definitions: the package's names, parameters and docstring summaries.
pub fn definitions() -> Vec<Tool> {
    vec![
        define(
            "list_jobs",
            "List all background jobs with their status.",
            json!({}),
            &[],
            output_schema(
                json!({"jobs": {"type": "array", "items": output_schema(json!({
                    "job_id": {"type": "string"},
                    "status": status_enum(),
                    "command": {"type": "string"},
                    "started": {"type": "string", "format": "date-time"}
                }), &["job_id", "status", "command", "started"])}}),
                &["jobs"],
            ),
            hints(true, false, true),
        ),
        define(
            "get_job_status",
            "Get the current status of a background job.",
            json!({"job_id": job_id_schema("Job ID to check")}),
            &["job_id"],
            output_schema(json!({"status": status_enum()}), &["status"]),
            hints(true, false, true),
        ),
        define(
            "get_job_output",
            "Get the complete stdout and stderr output of a job.",
            json!({"job_id": job_id_schema("Job ID to get output from")}),
            &["job_id"],
            streams_schema(),
            hints(true, false, true),
        ),
        define(
            "tail_job_output",
            "Get the last N lines of stdout and stderr from a job.",
            json!({
                "job_id": job_id_schema("Job ID to tail"),
                "lines": {"type": "integer", "default": tools::DEFAULT_TAIL_LINES, "minimum": 1, "maximum": tools::MAX_TAIL_LINES, "description": "Number of lines to return"}
            }),
            &["job_id"],
            streams_schema(),
            hints(true, false, true),
        ),
        define(
            "execute_command",
            "Execute a command as a background job and return job ID.",
            json!({"command": {"type": "string", "description": "Shell command to execute"}}),
            &["command"],
            output_schema(json!({"job_id": {"type": "string"}}), &["job_id"]),
            hints(false, false, false),
        ),
        define(
            "interact_with_job",
            "Send input to a job's stdin and return any immediate output.",
            json!({
                "job_id": job_id_schema("Job ID to interact with"),
                "input": {"type": "string", "description": "Input to send to the job's stdin"}
            }),
            &["job_id", "input"],
            streams_schema(),
            hints(false, false, false),
        ),
        define(
            "kill_job",
            "Kill a running background job.",
            json!({"job_id": job_id_schema("Job ID to kill")}),
            &["job_id"],
            output_schema(
                json!({"status": {"type": "string", "description": "Kill result: 'killed', 'already_terminated', or 'not_found'"}}),
                &["status"],
            ),
            hints(false, true, false),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_the_packages() {
        let names: Vec<String> = definitions().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, TOOL_NAMES);
    }

    #[test]
    fn start_times_have_microseconds() {
        assert_eq!(
            pydantic_time(1_764_598_911_310),
            "2025-12-01T14:21:51.310000Z"
        );
        assert_eq!(pydantic_time(1_764_598_911_000), "2025-12-01T14:21:51Z");
    }
}
