//! The seven tools of the default profile (DESIGN §3): definitions (input and output schemas,
//! annotations, descriptions) and handlers.
//!
//! Every handler returns a tool result: the JSON body as `structuredContent` and as one text
//! block. `isError` is true exactly when the body carries an `error`. Bodies of tools that take a
//! `process_id` always echo it.

mod exec;
mod output;
mod procs;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};
use yieldshell_proto::client::ClientError;
use yieldshell_proto::errors::ErrorKind;

use crate::args::{ArgError, Args};
use crate::server::Shim;

/// Longest a single blocking call waits (DESIGN §3, FIELD: MCP clients time out at 60 s).
pub const MAX_BLOCKING_MS: u64 = 55_000;

/// Names of the default profile's tools, in listing order.
pub const TOOL_NAMES: [&str; 7] = ["exec", "read", "write", "wait", "stop", "ps", "cleanup"];

/// The tool definitions, built once per shim from its session defaults.
pub fn definitions(shim: &Shim) -> Vec<Tool> {
    vec![
        exec::definition(shim),
        output::read_definition(shim),
        procs::write_definition(),
        output::wait_definition(shim),
        procs::stop_definition(),
        procs::ps_definition(),
        procs::cleanup_definition(),
    ]
}

/// Runs one tool. `None` for an unknown tool name (a protocol error, not a tool result).
pub async fn call(
    shim: &Arc<Shim>,
    name: &str,
    arguments: &Map<String, Value>,
    ctx: &RequestContext<RoleServer>,
) -> Option<CallToolResult> {
    let args = Args::new(arguments);
    Some(match name {
        "exec" => exec::call(shim, &args, ctx).await,
        "read" => output::read(shim, &args).await,
        "write" => procs::write(shim, &args).await,
        "wait" => output::wait(shim, &args, ctx).await,
        "stop" => procs::stop(shim, &args).await,
        "ps" => procs::ps(shim, &args).await,
        "cleanup" => procs::cleanup(shim, &args).await,
        _ => return None,
    })
}

/// A tool result carrying `body`; an error result when the body has a non-null `error`.
pub fn respond(body: Value) -> CallToolResult {
    if body.get("error").is_some_and(|e| !e.is_null()) {
        CallToolResult::structured_error(body)
    } else {
        CallToolResult::structured(body)
    }
}

/// Serialises a view into a result.
pub fn respond_with<T: serde::Serialize>(view: &T) -> CallToolResult {
    match serde_json::to_value(view) {
        Ok(v) => respond(v),
        Err(e) => {
            respond(json!({"error": format!("internal error: {e}"), "error_kind": "internal"}))
        }
    }
}

/// Message and kind of a client error, worded for an agent.
pub fn describe(e: &ClientError) -> (String, &'static str) {
    let kind = e.kind();
    let message = match e {
        ClientError::Rpc(status) => status.message().to_string(),
        other => other.to_string(),
    };
    (message, kind.as_str())
}

/// The error body of a tool that takes a process id: echoes the id (plus the tool's own flag,
/// added by the caller).
pub fn process_error(process_id: &str, error: &str, kind: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("process_id".into(), Value::String(process_id.to_string()));
    m.insert("error".into(), Value::String(error.to_string()));
    m.insert("error_kind".into(), Value::String(kind.to_string()));
    m
}

/// Error body for a bad argument.
pub fn arg_error(e: &ArgError, process_id: Option<&str>) -> Map<String, Value> {
    let mut m = process_error(
        process_id.unwrap_or_default(),
        &e.0,
        ErrorKind::InvalidArgument.as_str(),
    );
    if process_id.is_none() {
        m.remove("process_id");
    }
    m
}

fn schema_object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// The JSON Schema of `T`, without the `$schema` key (MCP tool schemas are plain objects).
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
    }
    v
}

/// An output schema accepting either the tool's result or its error body. `$defs` of both are
/// hoisted to the top, where JSON-Schema references resolve.
pub fn output_schema<Ok: JsonSchema, Err: JsonSchema>() -> Arc<JsonObject> {
    let mut defs = Map::new();
    let mut take = |mut v: Value| {
        if let Value::Object(m) = &mut v
            && let Some(Value::Object(d)) = m.remove("$defs")
        {
            defs.extend(d);
        }
        v
    };
    let ok = take(schema_of::<Ok>());
    let err = take(schema_of::<Err>());
    let mut top = json!({"type": "object", "anyOf": [ok, err]});
    if !defs.is_empty() {
        top["$defs"] = Value::Object(defs);
    }
    Arc::new(schema_object(top))
}

/// Builds a tool definition.
pub fn tool(
    name: &'static str,
    title: &str,
    description: String,
    input: Value,
    output: Arc<JsonObject>,
    annotations: ToolAnnotations,
) -> Tool {
    Tool::new(
        Cow::Borrowed(name),
        Cow::Owned(description),
        Arc::new(schema_object(input)),
    )
    .with_title(title)
    .with_raw_output_schema(output)
    .with_annotations(annotations)
}

/// Generic error body (tools without a process id).
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
    /// Machine-readable kind.
    pub error_kind: String,
}

/// Latest non-empty output line (for progress messages), at most 200 characters.
pub fn last_line(stdout: &[u8], stderr: &[u8]) -> Option<String> {
    let pick = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.chars().take(200).collect::<String>())
    };
    pick(stdout).or_else(|| pick(stderr))
}
