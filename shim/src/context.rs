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

/// The JSON Schema of `T`, without the `$schema` key (MCP tool schemas are plain objects) and
/// without schemars' numeric `format`s (`uint32`, `int64`, `double`, …): they are not JSON
/// Schema formats, and strict validators (the MCP Inspector's ajv) warn about every one.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
    }
    drop_numeric_formats(&mut v);
    v
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
}
