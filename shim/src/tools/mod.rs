//! The seven tools of the default profile (DESIGN §3): definitions (input and output schemas,
//! annotations, descriptions) and handlers, served by [`DefaultTools`].
//!
//! Every handler returns a tool result: the JSON body as `structuredContent` and as one text
//! block. `isError` is true exactly when the body carries an `error`. Bodies of tools that take a
//! `process_id` always echo it.

mod exec;
pub mod instructions;
mod output;
mod procs;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};
use yieldshell_proto::errors::ErrorKind;

use crate::args::{ArgError, Args};
use crate::context::{Context, schema_object, schema_of};
use crate::tool_set::{BoxFuture, ToolSet};

/// Longest a single blocking call waits (DESIGN §3, FIELD: MCP clients time out at 60 s).
pub const MAX_BLOCKING_MS: u64 = 55_000;

/// Names of the default profile's tools, in listing order.
pub const TOOL_NAMES: [&str; 7] = ["exec", "read", "write", "wait", "stop", "ps", "cleanup"];

/// The default profile's tool set.
pub struct DefaultTools {
    ctx: Context,
    tools: Vec<Tool>,
    /// The usage text, extended on `initialize` with the project's running processes.
    instructions: Mutex<String>,
}

impl DefaultTools {
    /// The seven tools over `ctx`, their schemas showing its session defaults.
    pub fn new(ctx: Context) -> DefaultTools {
        let tools = vec![
            exec::definition(&ctx),
            output::read_definition(&ctx),
            procs::write_definition(),
            output::wait_definition(&ctx),
            procs::stop_definition(),
            procs::ps_definition(),
            procs::cleanup_definition(),
        ];
        DefaultTools {
            ctx,
            tools,
            instructions: Mutex::new(instructions::USAGE.to_string()),
        }
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        request: &RequestContext<RoleServer>,
    ) -> Option<CallToolResult> {
        let ctx = &self.ctx;
        let args = Args::new(arguments);
        Some(match name {
            "exec" => exec::call(ctx, &args, request).await,
            "read" => output::read(ctx, &args).await,
            "write" => procs::write(ctx, &args).await,
            "wait" => output::wait(ctx, &args, request).await,
            "stop" => procs::stop(ctx, &args).await,
            "ps" => procs::ps(ctx, &args).await,
            "cleanup" => procs::cleanup(ctx, &args).await,
            _ => return None,
        })
    }
}

impl ToolSet for DefaultTools {
    fn tools(&self) -> &[Tool] {
        &self.tools
    }

    fn instructions(&self) -> String {
        self.instructions
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    fn refresh_instructions(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // The lock is taken only after the lookup, never across an await.
            if let Some(text) = instructions::with_running_processes(&self.ctx.session).await
                && let Ok(mut s) = self.instructions.lock()
            {
                *s = text;
            }
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a JsonObject,
        request: &'a RequestContext<RoleServer>,
    ) -> BoxFuture<'a, Option<CallToolResult>> {
        Box::pin(self.call_tool(name, arguments, request))
    }

    /// `exec` becomes a task when it would answer `backgrounded` (DESIGN §8).
    fn task_session(&self) -> Option<&yieldshell_proto::client::Session> {
        Some(&self.ctx.session)
    }
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
