//! The `jobs` profile: the MCP Background Job Server's tools over the YieldShell daemon.
//!
//! Tools `execute`, `list`, `status`, `output`, `tail`, `kill` and `interact`, with the spec's
//! parameter names, defaults, annotations and response shapes. Each maps onto the same
//! control-plane calls the default tools use:
//!
//! - **Job ids are process ids.** `execute` picks a UUID v4 and asks the daemon to use it as the
//!   process id (`ExecRequest.process_id`), so a job id works unchanged with `yieldctl` and the
//!   default tools, and no mapping has to survive a restart of the shim. Ids that are not such
//!   UUIDs (the daemon's own `proc_…`) are not jobs: this profile reports them as not found.
//! - **Statuses** fold the daemon's six into the spec's four ([`job_status`]).
//! - **Errors** are what FastMCP's `ToolError` produces: an `isError` result whose one text block
//!   is the message (`Job <id> not found`), so clients of the original see the same thing.
//! - **`interact`** writes to stdin and returns the output that follows, within the settle window
//!   described in [`interact`].

pub mod config;
pub(crate) mod interact;
pub(crate) mod tools;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};
use yieldshell_proto::pb;

use crate::args::Args;
use crate::context::{Context, schema_object, schema_of};
use crate::tool_set::{BoxFuture, ToolSet};

/// Names of the jobs profile's tools, in listing order.
pub const TOOL_NAMES: [&str; 7] = [
    "execute", "list", "status", "output", "tail", "kill", "interact",
];

/// The `initialize` instructions.
const USAGE: &str = "Runs shell commands as background jobs. execute starts one (through /bin/sh -c) and returns \
its job_id at once; status says running, completed, failed or killed; tail shows the last lines and output everything \
kept; interact writes a line to its stdin and returns the output that follows; kill ends it with every process it \
started; list shows the jobs of this project, also those an earlier session started.";

/// The jobs profile's tool set.
pub struct JobsTools {
    ctx: Context,
    tools: Vec<Tool>,
}

impl JobsTools {
    /// The seven tools over `ctx` (the profile's settings are already applied to its session).
    pub fn new(ctx: Context) -> JobsTools {
        JobsTools {
            ctx,
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
            "execute" => tools::execute(ctx, &args).await.map(structured),
            "list" => tools::list(ctx).await.map(structured),
            "status" => tools::status(ctx, &args).await.map(structured),
            "output" => tools::output(ctx, &args).await.map(structured),
            "tail" => tools::tail(ctx, &args).await.map(structured),
            "kill" => tools::kill(ctx, &args).await.map(structured),
            "interact" => interact::interact(ctx, &args).await.map(structured),
            _ => return None,
        };
        Some(result.unwrap_or_else(ToolError::into_result))
    }
}

impl ToolSet for JobsTools {
    fn tools(&self) -> &[Tool] {
        &self.tools
    }

    fn instructions(&self) -> String {
        USAGE.to_string()
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

/// A tool error as FastMCP reports a `ToolError`: `isError` with the message as the only text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError(pub String);

impl ToolError {
    /// The error for a job id that names no job.
    pub fn not_found(job_id: &str) -> ToolError {
        ToolError(format!("Job {job_id} not found"))
    }

    pub(crate) fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.0)])
    }
}

/// A job's status, as the spec names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Still running.
    Running,
    /// Exited with status 0.
    Completed,
    /// Exited non-zero, by a signal it did not get from `kill`, by its timeout, or was lost.
    Failed,
    /// Ended by `kill` (or any other stop), or by SIGKILL or SIGTERM from outside.
    Killed,
}

/// The signals that make an ended job `killed` rather than `failed`: the two a `kill` sends,
/// whoever sent them (the original reports exit status -9 and -15 as `killed`).
const KILL_SIGNALS: [&str; 2] = ["SIGKILL", "SIGTERM"];

/// Folds a process's status into a job status: completed with exit 0 is `completed`; `stopped`,
/// or ended by SIGKILL or SIGTERM, is `killed`; another exit or signal, `timed_out`, `failed`
/// and `lost` are `failed`.
pub fn job_status(p: &pb::ProcessInfo) -> JobStatus {
    let killed_by_signal = p
        .signal
        .as_deref()
        .is_some_and(|s| KILL_SIGNALS.contains(&s));
    match pb::ProcessStatus::try_from(p.status).unwrap_or(pb::ProcessStatus::Unspecified) {
        pb::ProcessStatus::Running => JobStatus::Running,
        pb::ProcessStatus::Completed if p.exit_code == Some(0) => JobStatus::Completed,
        pb::ProcessStatus::Completed if killed_by_signal => JobStatus::Killed,
        pb::ProcessStatus::Stopped => JobStatus::Killed,
        pb::ProcessStatus::Completed
        | pb::ProcessStatus::TimedOut
        | pb::ProcessStatus::Failed
        | pb::ProcessStatus::Lost
        | pb::ProcessStatus::Unspecified => JobStatus::Failed,
    }
}

/// `execute`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecuteOutput {
    /// The new job's id (a UUID v4).
    pub job_id: String,
}

/// One job in `list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobSummary {
    /// The job's id.
    pub job_id: String,
    /// Its status.
    pub status: JobStatus,
    /// The command line.
    pub command: String,
    /// Start time, ISO 8601 UTC.
    pub started: String,
}

/// `list`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Jobs, newest started first.
    pub jobs: Vec<JobSummary>,
}

/// `status`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatusOutput {
    /// The job's status.
    pub status: JobStatus,
}

/// What `output`, `tail` and `interact` return.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct ProcessOutput {
    /// stdout text (invalid UTF-8 replaced).
    pub stdout: String,
    /// stderr text (invalid UTF-8 replaced).
    pub stderr: String,
}

/// `kill`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct KillOutput {
    /// `killed`, `already_terminated` or `not_found`.
    pub status: String,
}

/// The annotations the spec lists: read-only, destructive and idempotent hints only.
fn hints(read_only: bool, destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
}

fn job_id_schema(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn define<T: JsonSchema>(
    name: &'static str,
    description: &str,
    properties: Value,
    required: &[&str],
    annotations: ToolAnnotations,
) -> Tool {
    let input = json!({
        "type": "object",
        "properties": properties,
        "required": required,
    });
    Tool::new(
        Cow::Borrowed(name),
        Cow::Owned(description.to_string()),
        Arc::new(schema_object(input)),
    )
    .with_raw_output_schema(Arc::new(schema_object(schema_of::<T>())))
    .with_annotations(annotations)
}

/// The seven tool definitions. Descriptions start with the spec's docstrings.
pub fn definitions() -> Vec<Tool> {
    vec![
        define::<ExecuteOutput>(
            "execute",
            "Execute a command as a background job and return job ID. The command runs with /bin/sh -c \
             (pipes, && and redirections work); follow it with status, tail, output, interact and kill.",
            json!({"command": {"type": "string", "description": "Shell command to execute"}}),
            &["command"],
            hints(false, false, false),
        ),
        define::<ListOutput>(
            "list",
            "List all background jobs with their status. Newest first; includes jobs an earlier \
             session of this server started in the same project.",
            json!({}),
            &[],
            hints(true, false, true),
        ),
        define::<StatusOutput>(
            "status",
            "Get the current status of a background job: running, completed (exit 0), failed \
             (non-zero exit, timeout) or killed.",
            json!({"job_id": job_id_schema("Job ID to check")}),
            &["job_id"],
            hints(true, false, true),
        ),
        define::<ProcessOutput>(
            "output",
            "Get the complete stdout and stderr output of a job (as much as its output buffer keeps).",
            json!({"job_id": job_id_schema("Job ID to get output from")}),
            &["job_id"],
            hints(true, false, true),
        ),
        define::<ProcessOutput>(
            "tail",
            "Get the last N lines of stdout and stderr from a job.",
            json!({
                "job_id": job_id_schema("Job ID to tail"),
                "lines": {"type": "integer", "default": tools::DEFAULT_TAIL_LINES, "minimum": 1, "maximum": tools::MAX_TAIL_LINES, "description": "Number of lines to return"}
            }),
            &["job_id"],
            hints(true, false, true),
        ),
        define::<KillOutput>(
            "kill",
            "Kill a running background job and every process it started. Returns killed, \
             already_terminated or not_found.",
            json!({"job_id": job_id_schema("Job ID to kill")}),
            &["job_id"],
            hints(false, true, false),
        ),
        define::<ProcessOutput>(
            "interact",
            &format!(
                "Send input to a job's stdin and return any immediate output. A newline is added \
                 when the input does not end with one. The output that follows the input is \
                 collected until the job has been quiet for {} ms (waiting at most {} ms for the \
                 first output and {} ms in all); later output is in tail and output.",
                interact::QUIET.as_millis(),
                interact::FIRST_OUTPUT.as_millis(),
                interact::MAX_WINDOW.as_millis()
            ),
            json!({
                "job_id": job_id_schema("Job ID to interact with"),
                "input": {"type": "string", "description": "Input to send to the job's stdin"}
            }),
            &["job_id", "input"],
            hints(false, false, false),
        ),
    ]
}

fn structured<T: Serialize>(value: T) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(v) => CallToolResult::structured(crate::context::without_nulls(v)),
        Err(e) => ToolError(format!("internal error: {e}")).into_result(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(status: pb::ProcessStatus, exit_code: Option<i32>) -> pb::ProcessInfo {
        pb::ProcessInfo {
            status: status as i32,
            exit_code,
            ..Default::default()
        }
    }

    #[test]
    fn statuses_fold_into_the_four_of_the_spec() {
        use pb::ProcessStatus as S;
        assert_eq!(job_status(&info(S::Running, None)), JobStatus::Running);
        assert_eq!(
            job_status(&info(S::Completed, Some(0))),
            JobStatus::Completed
        );
        assert_eq!(job_status(&info(S::Completed, Some(3))), JobStatus::Failed);
        assert_eq!(job_status(&info(S::Completed, None)), JobStatus::Failed);
        let signalled = |name: &str| pb::ProcessInfo {
            signal: Some(name.to_string()),
            ..info(S::Completed, None)
        };
        assert_eq!(job_status(&signalled("SIGKILL")), JobStatus::Killed);
        assert_eq!(job_status(&signalled("SIGTERM")), JobStatus::Killed);
        assert_eq!(job_status(&signalled("SIGSEGV")), JobStatus::Failed);
        assert_eq!(job_status(&info(S::TimedOut, None)), JobStatus::Failed);
        assert_eq!(job_status(&info(S::Failed, None)), JobStatus::Failed);
        assert_eq!(job_status(&info(S::Lost, None)), JobStatus::Failed);
        assert_eq!(job_status(&info(S::Stopped, None)), JobStatus::Killed);
    }

    #[test]
    fn annotations_are_exactly_the_specs() {
        let tools = definitions();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, TOOL_NAMES);
        let hints_of = |n: &str| {
            let a = tools
                .iter()
                .find(|t| t.name == n)
                .and_then(|t| t.annotations.clone())
                .expect("annotations");
            (
                a.read_only_hint,
                a.destructive_hint,
                a.idempotent_hint,
                a.open_world_hint,
            )
        };
        let (t, f) = (Some(true), Some(false));
        assert_eq!(hints_of("execute"), (f, f, f, None));
        for n in ["list", "status", "output", "tail"] {
            assert_eq!(hints_of(n), (t, f, t, None), "{n}");
        }
        assert_eq!(hints_of("kill"), (f, t, f, None));
        assert_eq!(hints_of("interact"), (f, f, f, None));
    }
}
