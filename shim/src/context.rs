//! The ground floor every tool set stands on: the daemon [`Session`] and the validated
//! [`SessionConfig`] ([`Context`]), and the small helpers all profiles share — wording a client
//! error for an agent ([`describe`]), JSON Schemas of result types ([`schema_of`]) and reading the
//! shim's own environment ([`env_var`]).
//!
//! Nothing here knows a profile: `tools/`, `jobs/` and `shell/` import this module, never each
//! other, [`crate::profile`] or [`crate::server`].

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::Value;
use yieldshell_proto::client::{ClientError, ConnectOptions, Session};
use yieldshell_proto::session_config::SessionConfig;

/// What every tool handler works with.
#[derive(Debug)]
pub struct Context {
    /// The daemon session all tools use. It connects lazily on the first call (starting the
    /// daemon if need be), so `initialize` and `tools/list` work even when no daemon can run.
    pub session: Session,
    /// The validated session configuration (its defaults show in the tool schemas).
    pub config: SessionConfig,
}

impl Context {
    /// A context for `config`, connecting with `opts`; nothing is sent until the first call.
    pub fn new(config: SessionConfig, opts: ConnectOptions) -> Context {
        Context {
            session: Session::new(opts, &config),
            config,
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

/// A JSON value as a schema object (anything else becomes the empty schema).
pub fn schema_object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// The JSON Schema of `T`, without the `$schema` key (MCP tool schemas are plain objects),
/// without schemars' numeric `format`s (`uint32`, `int64`, `double`, …): they are not JSON
/// Schema formats, and strict validators (the MCP Inspector's ajv) warn about every one — and
/// without `null` (schemars writes an `Option` as `[X, "null"]`, one strict-mode warning per
/// field): an answer leaves an empty field out ([`without_nulls`]), so optional is the truth.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
    }
    drop_numeric_formats(&mut v);
    drop_null_types(&mut v);
    v
}

/// Removes `null` from every `type` list and `anyOf`/`oneOf` alternative, everywhere in a schema:
/// `["integer", "null"]` becomes `"integer"`, `anyOf: [{$ref}, {type: null}]` the `$ref` alone.
fn drop_null_types(v: &mut Value) {
    let is_null = |t: &Value| t.as_str() == Some("null");
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| !is_null(t));
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    m.insert("type".into(), only);
                }
            }
            for key in ["anyOf", "oneOf"] {
                let Some(Value::Array(alternatives)) = m.get_mut(key) else {
                    continue;
                };
                alternatives.retain(|a| !a.get("type").is_some_and(is_null));
                if let [only] = alternatives.as_slice() {
                    let only = only.clone();
                    m.remove(key);
                    if let Value::Object(fields) = only {
                        m.extend(fields);
                    }
                }
            }
            m.values_mut().for_each(drop_null_types);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_types),
        _ => {}
    }
}

/// An answer body without its `null` fields, at every depth (list items are kept): the output
/// schemas say such fields are optional ([`schema_of`]), so an answer leaves them out.
pub fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// Removes `format` keys that name Rust number types, everywhere in a schema.
fn drop_numeric_formats(v: &mut Value) {
    const NUMERIC: [&str; 14] = [
        "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
        "uint64", "uint128", "float", "double",
    ];
    match v {
        Value::Object(m) => {
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| NUMERIC.contains(&f))
            {
                m.remove("format");
            }
            m.values_mut().for_each(drop_numeric_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_numeric_formats),
        _ => {}
    }
}

/// Looks a variable up in a session's environment snapshot (the shim's own environment), where
/// each profile finds its own variables (`MCP_BG_*`, `ALLOW_COMMANDS`, …).
pub fn env_var(config: &SessionConfig, name: &str) -> Option<String> {
    config
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.to_string_lossy().into_owned())
}

/// Like [`env_var`], but a value of only spaces counts as unset.
pub fn env_var_set(config: &SessionConfig, name: &str) -> Option<String> {
    env_var(config, name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_carry_no_rust_number_formats() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Sample {
            count: u32,
            items: Vec<i64>,
            ratio: f64,
        }
        let text = schema_of::<Sample>().to_string();
        assert!(!text.contains("\"format\""), "{text}");
        assert!(text.contains("\"integer\""), "{text}");
    }

    #[test]
    fn optional_fields_are_optional_not_null() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            n: u32,
        }
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Sample {
            code: Option<i32>,
            name: Option<String>,
            inner: Option<Inner>,
        }
        let schema = schema_of::<Sample>();
        let text = schema.to_string();
        assert!(!text.contains("null"), "{text}");
        let props = &schema["properties"];
        assert_eq!(props["code"]["type"], "integer", "{text}");
        assert_eq!(props["name"]["type"], "string", "{text}");
        assert_eq!(props["inner"]["$ref"], "#/$defs/Inner", "{text}");
        assert!(schema.get("required").is_none(), "{text}");
    }

    #[test]
    fn answers_leave_null_fields_out_at_every_depth() {
        let body =
            serde_json::json!({"a": null, "b": 0, "c": {"d": null, "e": ""}, "f": [null, 1]});
        assert_eq!(
            without_nulls(body),
            serde_json::json!({"b": 0, "c": {"e": ""}, "f": [null, 1]})
        );
    }
}
