//! Reading tool arguments by hand, so every bad argument becomes a tool result the agent can act
//! on (README, "Tools": validate in the handler, never as a JSON-RPC `-32602`).
//!
//! Lenient where models commonly slip (numbers sent as strings, a list sent as one string), strict
//! where a guess could be wrong (unknown enum values, negative numbers, wrong types).

use serde_json::{Map, Value};

/// A bad argument, with a message naming the parameter and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The arguments of one call.
#[derive(Debug)]
pub struct Args<'a> {
    map: &'a Map<String, Value>,
}

/// Largest string argument accepted (a command, stdin text, a regex); more is refused rather
/// than forwarded.
pub const MAX_STRING_BYTES: usize = 8 * 1024 * 1024;

impl<'a> Args<'a> {
    /// Wraps the argument object.
    pub fn new(map: &'a Map<String, Value>) -> Args<'a> {
        Args { map }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A required, non-empty string.
    pub fn string(&self, name: &str) -> Result<String, ArgError> {
        match self.opt_string(name)? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err(ArgError(format!("{name} must not be empty"))),
            None => Err(ArgError(format!("missing required parameter {name}"))),
        }
    }

    /// An optional string (`null` counts as absent).
    pub fn opt_string(&self, name: &str) -> Result<Option<String>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.len() > MAX_STRING_BYTES => Err(ArgError(format!(
                "{name} is {} bytes; at most {MAX_STRING_BYTES} bytes are accepted",
                s.len()
            ))),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ArgError(format!(
                "{name} must be a string, not {}",
                kind(other)
            ))),
        }
    }

    /// An optional non-negative integer (numeric strings and integral floats are accepted).
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, ArgError> {
        let bad = |v: &Value| {
            ArgError(format!(
                "{name} must be a non-negative integer, not {}",
                match v {
                    Value::String(s) => format!("{s:?}"),
                    other => other.to_string(),
                }
            ))
        };
        match self.get(name) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => {
                if let Some(u) = n.as_u64() {
                    Ok(Some(u))
                } else if let Some(f) = n
                    .as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1.8e19)
                {
                    Ok(Some(f as u64))
                } else {
                    Err(bad(v))
                }
            }
            Some(v @ Value::String(s)) => s.trim().parse::<u64>().map(Some).map_err(|_| bad(v)),
            Some(other) => Err(bad(other)),
        }
    }

    /// An optional boolean (`"true"`/`"false"` strings are accepted).
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(other) => Err(ArgError(format!(
                "{name} must be true or false, not {other}"
            ))),
        }
    }

    /// An optional value from a fixed set.
    pub fn opt_enum(
        &self,
        name: &str,
        allowed: &[&'static str],
    ) -> Result<Option<&'static str>, ArgError> {
        match self.opt_string(name)? {
            None => Ok(None),
            Some(s) => allowed
                .iter()
                .find(|a| **a == s)
                .copied()
                .map(Some)
                .ok_or_else(|| {
                    ArgError(format!(
                        "{name} must be one of {}, not {s:?}",
                        allowed.join(", ")
                    ))
                }),
        }
    }

    /// A list of strings. A single string is accepted too: a JSON array in a string, or a
    /// comma-separated list (models sometimes send `"NONE"` or `"[\"NONE\"]"`).
    pub fn string_list(&self, name: &str) -> Result<Option<Vec<String>>, ArgError> {
        let bad = || ArgError(format!("{name} must be an array of strings"));
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(Value::String(s)) => {
                let t = s.trim();
                if t.starts_with('[') {
                    let parsed: Vec<String> = serde_json::from_str(t).map_err(|_| bad())?;
                    Ok(Some(parsed))
                } else {
                    Ok(Some(
                        t.split(',')
                            .map(str::trim)
                            .filter(|x| !x.is_empty())
                            .map(str::to_string)
                            .collect(),
                    ))
                }
            }
            Some(_) => Err(bad()),
        }
    }

    /// An optional object of strings (numbers and booleans are turned into their text).
    pub fn string_map(&self, name: &str) -> Result<Vec<(String, String)>, ArgError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Number(n) => Ok((k.clone(), n.to_string())),
                    Value::Bool(b) => Ok((k.clone(), b.to_string())),
                    _ => Err(ArgError(format!(
                        "{name}.{k} must be a string, not {}",
                        kind(v)
                    ))),
                })
                .collect(),
            Some(other) => Err(ArgError(format!(
                "{name} must be an object of strings, not {}",
                kind(other)
            ))),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn numbers_accept_numeric_strings_and_refuse_negatives() {
        let m = with(json!({"a": 5, "b": "7", "c": -1, "d": 2.0, "e": 2.5, "f": "x"}));
        let a = Args::new(&m);
        assert_eq!(a.opt_u64("a"), Ok(Some(5)));
        assert_eq!(a.opt_u64("b"), Ok(Some(7)));
        assert!(a.opt_u64("c").is_err());
        assert_eq!(a.opt_u64("d"), Ok(Some(2)));
        assert!(a.opt_u64("e").is_err());
        assert!(a.opt_u64("f").expect_err("x").0.contains("\"x\""));
        assert_eq!(a.opt_u64("missing"), Ok(None));
    }

    #[test]
    fn lists_accept_arrays_json_strings_and_comma_lists() {
        let m = with(json!({"a": ["NONE"], "b": "[\"X\",\"Y\"]", "c": "A, B", "d": [1]}));
        let a = Args::new(&m);
        assert_eq!(a.string_list("a"), Ok(Some(vec!["NONE".into()])));
        assert_eq!(a.string_list("b"), Ok(Some(vec!["X".into(), "Y".into()])));
        assert_eq!(a.string_list("c"), Ok(Some(vec!["A".into(), "B".into()])));
        assert!(a.string_list("d").is_err());
    }

    #[test]
    fn enums_name_the_allowed_values() {
        let m = with(json!({"streams": "stdin"}));
        let err = Args::new(&m)
            .opt_enum("streams", &["both", "stdout", "stderr"])
            .expect_err("stdin");
        assert!(err.0.contains("both, stdout, stderr") && err.0.contains("stdin"));
    }

    #[test]
    fn required_strings_must_be_present_and_non_empty() {
        let m = with(json!({"a": "", "b": 3}));
        let a = Args::new(&m);
        assert!(a.string("a").expect_err("empty").0.contains("empty"));
        assert!(a.string("b").expect_err("number").0.contains("a number"));
        assert!(a.string("c").expect_err("missing").0.contains("missing"));
    }
}

/// Property tests: no argument object, however odd, makes a reader panic, and every accepted
/// value reads back as sent. Cases: `PROPTEST_CASES` (default 256); a longer run is
/// `PROPTEST_CASES=100000 cargo test -p mcp-yieldshell prop_`.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256);
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Names the tools read, plus anything else.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "command",
                "side_effects",
                "process_id",
                "since_seq",
                "max_output_bytes",
                "streams",
                "yield_ms",
                "timeout_ms",
                "env",
                "stdin",
                "cwd",
                "name",
                "signal",
                "input",
                "eof",
                "until",
                "tail_lines",
                "limit",
                "scope",
                "include_completed",
            ])
            .prop_map(str::to_string),
            any::<String>(),
        ]
    }

    /// Arbitrary JSON, biased towards what models send by mistake.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            prop::sample::select(vec![
                "",
                "NONE",
                "both",
                "stdin",
                "-1",
                "1e309",
                "[\"NONE\"]",
                "[1,",
                "true",
                " 7 ",
                "18446744073709551616",
            ])
            .prop_map(|s| Value::String(s.to_string())),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn prop_no_argument_object_makes_a_reader_panic(
            map in prop::collection::btree_map(key(), value(), 0..10)
        ) {
            let map: Map<String, Value> = map.into_iter().collect();
            let a = Args::new(&map);
            for name in map.keys().map(String::as_str).chain(["command", "absent"]) {
                let _ = a.string(name);
                let _ = a.opt_string(name);
                let _ = a.opt_u64(name);
                let _ = a.opt_bool(name);
                let _ = a.opt_enum(name, &["both", "stdout", "stderr"]);
                let _ = a.string_list(name);
                let _ = a.string_map(name);
            }
        }

        #[test]
        fn prop_accepted_values_read_back_exactly(n in any::<u64>(), words in prop::collection::vec("[A-Z_]{1,12}", 1..5)) {
            let map: Map<String, Value> = [
                ("num".to_string(), Value::from(n)),
                ("text".to_string(), Value::String(n.to_string())),
                ("list".to_string(), Value::from(words.clone())),
                ("csv".to_string(), Value::String(words.join(","))),
            ]
            .into_iter()
            .collect();
            let a = Args::new(&map);
            prop_assert_eq!(a.opt_u64("num"), Ok(Some(n)));
            prop_assert_eq!(a.opt_u64("text"), Ok(Some(n)));
            prop_assert_eq!(a.string_list("list"), Ok(Some(words.clone())));
            prop_assert_eq!(a.string_list("csv"), Ok(Some(words)));
        }
    }
}
