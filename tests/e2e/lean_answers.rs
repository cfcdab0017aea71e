//! Lean answers (README, "An agent session", issue 11 item 3): what the model reads is small. The tool list plus
//! instructions of each profile stays within 5,000 bytes; text blocks leave out fields without
//! information while `structuredContent` stays complete and valid against the tool's
//! `outputSchema`, which uses standard JSON Schema keywords only.

use serde_json::{Map, Value, json};

use crate::helper::TestDaemon;
use crate::mcp::{Mcp, assert_lean_copy, body, is_error};

/// The bound on the model-facing tool list plus instructions, per profile.
const MAX_MODEL_FACING_BYTES: usize = 5_000;

/// What the model is given of a server: each tool's name, description and input schema (as
/// compact JSON), plus the instructions.
fn model_facing_bytes(tools: &[rmcp::model::Tool], instructions: &str) -> usize {
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "inputSchema": t.input_schema.as_ref(),
            })
        })
        .collect();
    serde_json::to_string(&listed).expect("json").len() + instructions.len()
}

#[tokio::test]
async fn each_profiles_tool_list_plus_instructions_is_at_most_5000_bytes() {
    let d = TestDaemon::start().await;
    for profile in ["default", "jobs", "shell"] {
        let mcp = Mcp::start_profile(&d, profile, &[]).await;
        let tools = mcp.tools().await;
        assert!(!tools.is_empty(), "{profile}");
        let bytes = model_facing_bytes(&tools, &mcp.instructions());
        assert!(
            bytes <= MAX_MODEL_FACING_BYTES,
            "{profile}: the tool list plus instructions is {bytes} bytes"
        );
        mcp.close().await;
    }
}

/// JSON Schema keywords (draft 2020-12 core, applicator, validation and annotation vocabularies)
/// an output schema may use.
const STANDARD_KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "pattern",
    "format",
];

/// `format` values JSON Schema defines.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "uuid",
    "regex",
];

/// Fails on any keyword or `format` outside the standard ones, anywhere in `schema`.
fn assert_standard(schema: &Value, at: &str) {
    let Value::Object(m) = schema else {
        assert!(
            schema.is_boolean(),
            "{at}: a schema is an object or a boolean"
        );
        return;
    };
    for (k, v) in m {
        assert!(
            STANDARD_KEYWORDS.contains(&k.as_str()),
            "{at}: non-standard keyword {k}"
        );
        match k.as_str() {
            "format" => assert!(
                v.as_str().is_some_and(|f| STANDARD_FORMATS.contains(&f)),
                "{at}: non-standard format {v}"
            ),
            "properties" | "$defs" => {
                for (name, sub) in v.as_object().expect("a map of schemas") {
                    assert_standard(sub, &format!("{at}.{k}.{name}"));
                }
            }
            "items" | "additionalProperties" | "not" => assert_standard(v, &format!("{at}.{k}")),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                for (i, sub) in v.as_array().expect("a list of schemas").iter().enumerate() {
                    assert_standard(sub, &format!("{at}.{k}[{i}]"));
                }
            }
            _ => {}
        }
    }
}

/// Validates `value` against `schema` (the subset of JSON Schema the tools' output schemas use:
/// `type`, `properties`, `required`, `items`, `enum`, `anyOf`, `$ref` into `$defs`, `minimum`);
/// the errors found, empty when valid.
fn validate(value: &Value, schema: &Value, root: &Value, at: &str) -> Vec<String> {
    let Value::Object(s) = schema else {
        return Vec::new();
    };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "{at}: $ref {r} does not resolve");
        return validate(value, target, root, at);
    }
    let mut errors = Vec::new();
    if let Some(any) = s.get("anyOf").and_then(Value::as_array)
        && !any
            .iter()
            .any(|sub| validate(value, sub, root, at).is_empty())
    {
        errors.push(format!("{at}: matches no anyOf branch"));
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let fits = |ty: &str| match ty {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        };
        if !types.iter().any(|ty| fits(ty)) {
            errors.push(format!("{at}: {value} is not of type {t}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(value)
    {
        errors.push(format!("{at}: {value} is not in the enum"));
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), value.as_f64())
        && n < min
    {
        errors.push(format!("{at}: {n} is below {min}"));
    }
    if let Value::Object(obj) = value {
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = r.as_str().unwrap_or_default();
            if !obj.contains_key(name) {
                errors.push(format!("{at}: lacks required {name}"));
            }
        }
        let empty = Map::new();
        let props = s
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        for (k, v) in obj {
            if let Some(sub) = props.get(k) {
                errors.extend(validate(v, sub, root, &format!("{at}.{k}")));
            }
        }
    }
    if let (Value::Array(items), Some(sub)) = (value, s.get("items")) {
        for (i, v) in items.iter().enumerate() {
            errors.extend(validate(v, sub, root, &format!("{at}[{i}]")));
        }
    }
    errors
}

#[tokio::test]
async fn output_schemas_use_standard_keywords_only_in_every_profile() {
    let d = TestDaemon::start().await;
    for profile in ["default", "jobs", "shell"] {
        let mcp = Mcp::start_profile(&d, profile, &[]).await;
        for t in mcp.tools().await {
            let out = Value::Object(
                t.output_schema
                    .clone()
                    .expect("outputSchema")
                    .as_ref()
                    .clone(),
            );
            assert_standard(&out, &format!("{profile}/{}", t.name));
            // An empty field is left out of an answer, so the schema says optional, never
            // nullable (`[X, "null"]` is a warning per field in the Inspector's `--strict`).
            assert!(
                !out.to_string().contains("\"null\""),
                "{profile}/{}: a nullable field in {out}",
                t.name
            );
            assert_standard(
                &Value::Object(t.input_schema.as_ref().clone()),
                &format!("{profile}/{} input", t.name),
            );
        }
        mcp.close().await;
    }
}

#[tokio::test]
async fn text_blocks_are_lean_and_structured_content_is_complete_and_schema_valid() {
    let d = TestDaemon::start().await;
    let mcp = Mcp::start(&d, &[]).await;
    let schemas: Map<String, Value> = mcp
        .tools()
        .await
        .into_iter()
        .map(|t| {
            let s = Value::Object(t.output_schema.expect("outputSchema").as_ref().clone());
            (t.name.to_string(), s)
        })
        .collect();
    let check = |tool: &str, r: &rmcp::model::CallToolResult| -> (Value, Value) {
        let structured = body(r);
        let schema = &schemas[tool];
        let errors = validate(&structured, schema, schema, tool);
        assert!(errors.is_empty(), "{tool}: {errors:?}\n{structured}");
        let text: Value = serde_json::from_str(&crate::mcp::text_of(r)).expect("JSON text");
        let mut compared = text.clone();
        if let Some(id) = structured.get("process_id").filter(|id| id.is_string())
            && ["read", "write", "wait", "stop"].contains(&tool)
        {
            // The id the call named is not echoed back to the model.
            assert!(
                text.get("process_id").is_none(),
                "{tool} echoes the id: {text}"
            );
            compared["process_id"] = id.clone();
        }
        assert_lean_copy(&compared, &structured, tool);
        (structured, text)
    };

    // `wc -l` with stdin: everything the model needs in a small text block.
    let r = mcp
        .call(
            "exec",
            json!({"command": "wc -l", "side_effects": ["NONE"], "stdin": "a\nb\nc\n", "close_stdin": true}),
        )
        .await;
    let (structured, text) = check("exec", &r);
    assert_eq!(text["stdout"].as_str().map(str::trim), Some("3"));
    assert_eq!(text["exit_code"], 0, "exit_code 0 is information");
    for empty in ["stderr", "truncated", "stderr_lines"] {
        assert!(structured.get(empty).is_some(), "structured keeps {empty}");
        assert!(text.get(empty).is_none(), "the text omits {empty}: {text}");
    }
    // An absent value is an absent field in both (the schemas say optional, not nullable).
    for absent in ["signal", "error", "message"] {
        assert!(structured.get(absent).is_none(), "{absent}: {structured}");
        assert!(text.get(absent).is_none(), "{absent}: {text}");
    }
    let text_len = crate::mcp::text_of(&r).len();
    assert!(text_len <= 160, "wc -l answer is {text_len} bytes: {text}");

    // A backgrounded exec: one short hint line.
    let r = mcp
        .call(
            "exec",
            json!({"command": "echo started; exec sleep 600", "side_effects": ["NONE"], "until": "started"}),
        )
        .await;
    let (structured, text) = check("exec", &r);
    assert!(
        text["process_id"].is_string(),
        "exec names the new id: {text}"
    );
    let hint = text["message"].as_str().expect("a hint");
    assert!(hint.len() < 100 && !hint.contains('\n'), "{hint}");
    let id = structured["process_id"].as_str().expect("id").to_string();
    for (tool, args) in [
        ("read", json!({"process_id": id})),
        ("wait", json!({"process_id": id, "timeout_ms": 0})),
        ("write", json!({"process_id": id, "input": ""})),
        ("ps", json!({})),
        ("stop", json!({"process_id": id})),
        ("cleanup", json!({})),
        ("read", json!({"process_id": "proc_nonexistent"})),
    ] {
        let r = mcp.call(tool, args).await;
        check(tool, &r);
        if tool == "stop" {
            assert!(!is_error(&r));
        }
    }
    mcp.close().await;
}
