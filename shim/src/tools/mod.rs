//! The seven tools of the default profile (README, "Tools"): definitions (input and output schemas,
//! annotations, descriptions) and handlers, served by [`DefaultTools`].
//!
//! Every handler returns a tool result: the JSON body as `structuredContent` and, lean (fields
//! without information left out, see [`lean`], and the `process_id` the call named not echoed
//! back), as one text block. `isError` is true exactly
//! when the body carries an `error`. Bodies of tools that take a `process_id` always echo it.

mod exec;
pub mod instructions;
mod output;
mod procs;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};
use yieldshell_proto::errors::ErrorKind;

use crate::args::{ArgError, Args};
use crate::context::{Context, schema_object, schema_of, without_nulls};
use crate::tool_set::{BoxFuture, ToolSet};

/// Longest a single blocking call waits (README, "Tools": MCP clients time out at 60 s).
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
        let echoed = arguments.get("process_id").and_then(Value::as_str);
        let result = match name {
            "exec" => exec::call(ctx, &args, request).await,
            "read" => output::read(ctx, &args).await,
            "write" => procs::write(ctx, &args).await,
            "wait" => output::wait(ctx, &args, request).await,
            "stop" => procs::stop(ctx, &args).await,
            "ps" => procs::ps(ctx, &args).await,
            "cleanup" => procs::cleanup(ctx, &args).await,
            _ => return None,
        };
        Some(match echoed {
            Some(id) => without_echo(result, id),
            None => result,
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

    /// `exec` becomes a task when it would answer `backgrounded` (README, "MCP Tasks").
    fn task_session(&self) -> Option<&yieldshell_proto::client::Session> {
        Some(&self.ctx.session)
    }

    fn task_tools(&self) -> &[&'static str] {
        &["exec"]
    }
}

/// A tool result carrying `body`; an error result when the body has a non-null `error`.
/// `structuredContent` is the whole body but its `null` fields (schema-valid: the output schemas
/// say optional, not nullable); the text block, which is what the model reads, is [`lean`]'s
/// copy of it.
pub fn respond(body: Value) -> CallToolResult {
    let body = without_nulls(body);
    let text = lean(&body).to_string();
    let is_error = body.get("error").is_some_and(|e| !e.is_null());
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(body);
    result
}

/// Leaves the `process_id` echo out of the text block when it is the id the call was given: the
/// model wrote it itself. `structuredContent` keeps it (bodies always echo the id).
fn without_echo(mut result: CallToolResult, id: &str) -> CallToolResult {
    // Rebuilt from the structured body (the text block is its lean copy), not by parsing the text.
    let Some(body) = &result.structured_content else {
        return result;
    };
    if body.get("process_id").and_then(Value::as_str) != Some(id) {
        return result;
    }
    let mut text = lean(body);
    if let Value::Object(m) = &mut text {
        m.remove("process_id");
    }
    result.content = vec![ContentBlock::text(text.to_string())];
    result
}

/// Whether a field's value carries no information, so the text block leaves it out (README, "An agent session",
/// lean answers). The rule, field by field: `null`, `false` and `""` say nothing an absent
/// field would not; `ok` repeats the result's `isError`; so does a zero count (`*_lines`, `*_bytes`, `descendants_running`) and an
/// output window that starts at the first byte (`first_seq: 1`). Everything else stays, zeros
/// that are answers included: `exit_code: 0`, `duration_ms`, `next_seq`, `removed: 0`, and
/// empty lists (`processes: []` is the answer "none").
fn uninformative(key: &str, value: &Value) -> bool {
    match value {
        Value::Null => true,
        // `ok` (write) says what `isError` already says.
        Value::Bool(b) => !b || key == "ok",
        Value::String(s) => s.is_empty(),
        Value::Number(n) => {
            let zero_count = (key.ends_with("_lines")
                || key.ends_with("_bytes")
                || key == "descendants_running")
                && n.as_u64() == Some(0);
            zero_count || (key == "first_seq" && n.as_u64() == Some(1))
        }
        Value::Array(_) | Value::Object(_) => false,
    }
}

/// The body as the text block carries it: the same object, recursively, minus the fields
/// [`uninformative`] names.
pub fn lean(body: &Value) -> Value {
    match body {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !uninformative(k, v))
                .map(|(k, v)| (k.clone(), lean(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(lean).collect()),
        other => other.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lean_drops_fields_without_information_and_keeps_answers() {
        let body = json!({
            "process_id": "proc_1", "status": "completed", "exit_code": 0, "signal": null,
            "stdout": "3\n", "stderr": "", "truncated": false, "first_seq": 1, "next_seq": 3,
            "stdout_lines": 1, "stderr_lines": 0, "descendants_running": 0, "duration_ms": 0,
            "processes": [{"name": null, "stdout_bytes": 0, "pid": 7}], "removed": 0
        });
        assert_eq!(
            lean(&body),
            json!({
                "process_id": "proc_1", "status": "completed", "exit_code": 0, "stdout": "3\n",
                "next_seq": 3, "stdout_lines": 1, "duration_ms": 0,
                "processes": [{"pid": 7}], "removed": 0
            })
        );
        // A window that does not start at the first byte says where it starts.
        assert_eq!(lean(&json!({"first_seq": 9}))["first_seq"], 9);
    }

    #[test]
    fn results_keep_the_whole_body_as_structured_content() {
        let body = json!({"process_id": "p", "ok": true, "error": null, "stdout": "4\n"});
        let r = respond(body.clone());
        // All but the null: the output schemas say optional, not nullable.
        assert_eq!(
            r.structured_content,
            Some(json!({"process_id": "p", "ok": true, "stdout": "4\n"}))
        );
        assert_eq!(r.is_error, Some(false));
        let text = r.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .expect("text");
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        // `ok` repeats `isError`; `error: null` says nothing.
        assert_eq!(parsed, json!({"process_id": "p", "stdout": "4\n"}));
        let failed = respond(json!({"error": "no such process", "error_kind": "not_found"}));
        assert_eq!(failed.is_error, Some(true));
    }
}
