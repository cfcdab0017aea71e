//! The `mcp-shell-server` profile: the published `mcp-shell-server` 1.1.14's one tool,
//! `shell_execute`, so a client configured for `uvx mcp-shell-server` works with only its
//! command changed.
//!
//! It answers as the package does: plain text blocks (stdout, then stderr, each stripped of
//! surrounding whitespace, none when there is no output), and every failure, including a
//! non-zero exit, as an `isError` result whose one text is `Error executing command: …` in the
//! package's words. The checks ([`validate`]), the child environment and variables ([`config`])
//! and the running of programs and pipelines ([`run`]) follow the package; the differences that
//! remain on purpose are listed in the README.

pub mod config;
pub mod run;
pub mod validate;

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

use crate::context::{Context, schema_object};
use crate::tool_set::{BoxFuture, ToolSet};
use config::ShellServerSettings;
use run::{Ended, Ran, os_error, run_program};
use validate::{Stage, plan};

/// The tool's name.
pub const TOOL_NAME: &str = "shell_execute";

/// The package's description, before the lines naming the allowed commands and limits.
const DESCRIPTION: &str = "Execute an allowed command as an argv array on the MCP server host. \
Allowed commands run with the server process's OS authority; the allowlist controls executable \
names, not what an allowed program does.";

/// The profile's tool set.
pub struct ShellServerTools {
    ctx: Context,
    settings: ShellServerSettings,
    tools: Vec<Tool>,
}

impl ShellServerTools {
    /// `shell_execute` over `ctx`, with the profile's `settings`.
    pub fn new(ctx: Context, settings: ShellServerSettings) -> ShellServerTools {
        let tools = vec![definition(&settings)];
        ShellServerTools {
            ctx,
            settings,
            tools,
        }
    }
}

impl ToolSet for ShellServerTools {
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
        Box::pin(async move {
            let answer = if name == TOOL_NAME {
                execute(&self.ctx, &self.settings, arguments).await
            } else {
                // The package answers an unknown tool as a failed call, not a protocol error.
                Err(format!("Error executing command: Unknown tool: {name}"))
            };
            Some(match answer {
                Ok(blocks) => CallToolResult::success(blocks),
                Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
            })
        })
    }
}

/// The tool definition, naming the allowed commands, patterns and limits as the package does.
pub fn definition(s: &ShellServerSettings) -> Tool {
    let description = format!(
        "{DESCRIPTION}\nAllowed commands: {}\nAllowed patterns: {}\nDefault timeout: {}s; maximum timeout: {}s; output cap: {} bytes",
        s.allowed.join(", "),
        s.pattern_sources.join(", "),
        s.default_timeout_secs,
        s.max_timeout_secs,
        s.output_limit
    );
    let input = json!({
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "Command and its arguments as array"},
            "stdin": {"type": "string", "description": "Input to be passed to the command via stdin"},
            "directory": {"type": "string", "description": "Optional working directory. Omit to use the MCP server process current working directory; relative paths are resolved from that same server process CWD."},
            "timeout": {"type": "integer", "description": "Maximum execution time in seconds; clamped to server maximum", "minimum": 1}
        },
        "required": ["command"]
    });
    Tool::new(
        Cow::Borrowed(TOOL_NAME),
        Cow::Owned(description),
        Arc::new(schema_object(input)),
    )
}

/// A JSON value as Python's `repr` shows it, for the schema validator's messages.
fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.contains('\'') && !s.contains('"') => format!("\"{s}\""),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(py_repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("'{k}': {}", py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The arguments of one call, checked against the input schema as the package's MCP SDK does.
struct Call {
    tokens: Vec<String>,
    stdin: Option<String>,
    directory: Option<String>,
    timeout: Option<i64>,
}

fn schema_check(args: &Map<String, Value>) -> Result<Call, String> {
    let invalid = |m: String| format!("Input validation error: {m}");
    let not_of = |v: &Value, ty: &str| invalid(format!("{} is not of type '{ty}'", py_repr(v)));
    let command = args
        .get("command")
        .ok_or_else(|| invalid("'command' is a required property".into()))?;
    let Value::Array(items) = command else {
        return Err(not_of(command, "array"));
    };
    let mut tokens = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(t) => tokens.push(t.clone()),
            other => return Err(not_of(other, "string")),
        }
    }
    let string = |name: &str| -> Result<Option<String>, String> {
        match args.get(name) {
            None => Ok(None),
            Some(Value::String(t)) => Ok(Some(t.clone())),
            Some(other) => Err(not_of(other, "string")),
        }
    };
    let stdin = string("stdin")?;
    let directory = string("directory")?;
    let timeout = match args.get("timeout") {
        None => None,
        Some(v @ Value::Number(n)) => {
            let t = n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| not_of(v, "integer"))?;
            if t < 1 {
                return Err(invalid(format!("{t} is less than the minimum of 1")));
            }
            Some(t)
        }
        Some(other) => return Err(not_of(other, "integer")),
    };
    Ok(Call {
        tokens,
        stdin,
        directory,
        timeout,
    })
}

/// The working directory, resolved and checked with the package's words.
fn directory(requested: Option<&str>, base: &Path) -> Result<PathBuf, String> {
    let dir = match requested {
        None => base.to_path_buf(),
        Some(d) if d.trim().is_empty() => return Err("Directory cannot be empty".into()),
        Some(d) => base.join(d),
    };
    let shown = dir.display();
    match std::fs::metadata(&dir) {
        Err(_) => Err(format!("Directory does not exist: {shown}")),
        Ok(m) if !m.is_dir() => Err(format!("Not a directory: {shown}")),
        // Listing it needs the read and search permissions the package checks for.
        Ok(_) if std::fs::read_dir(&dir).is_err() => {
            Err(format!("Directory is not accessible: {shown}"))
        }
        Ok(_) => Ok(dir),
    }
}

/// A redirection target inside `dir`, refused as the package refuses one that leaves it.
fn redirect_target(target: &str, dir: &Path) -> Result<PathBuf, String> {
    let path = Path::new(target);
    if path.is_absolute() {
        return Err("Redirection target must be relative to the working directory".into());
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err("Redirection target cannot contain parent traversal".into());
    }
    let base = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let joined = base.join(path);
    // A symlink may point out of the directory: resolve what exists of the path.
    let resolved = match std::fs::canonicalize(&joined) {
        Ok(p) => p,
        Err(_) => match (
            joined.parent().map(std::fs::canonicalize),
            joined.file_name(),
        ) {
            (Some(Ok(parent)), Some(name)) => parent.join(name),
            _ => joined.clone(),
        },
    };
    if !resolved.starts_with(&base) {
        return Err("Redirection target escapes the working directory".into());
    }
    Ok(resolved)
}

/// Opens the stdout target before anything runs, as the package does (a `>` truncates it even
/// when the command then fails).
fn open_output(stage: &Stage, dir: &Path) -> Result<Option<std::fs::File>, String> {
    let Some(target) = &stage.redirects.stdout else {
        return Ok(None);
    };
    let path = redirect_target(target, dir)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(stage.redirects.append)
        .truncate(!stage.redirects.append)
        .open(&path)
        .map(Some)
        .map_err(|e| format!("Failed to open output file: {}", os_error(&e, &path)))
}

fn read_input(stage: &Stage, dir: &Path) -> Result<Option<Vec<u8>>, String> {
    let Some(target) = &stage.redirects.stdin else {
        return Ok(None);
    };
    let path = redirect_target(target, dir)?;
    std::fs::read(&path)
        .map(Some)
        .map_err(|_| "Failed to open input file".to_string())
}

fn write_output(file: Option<std::fs::File>, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    match file {
        Some(mut f) => f
            .write_all(bytes)
            .map_err(|e| format!("Failed to write output file: {e}")),
        None => Ok(()),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The package drops a stderr that only complains about job control.
fn shown_stderr(stderr: String) -> Option<String> {
    (!stderr.is_empty() && !stderr.contains("cannot set terminal process group")).then_some(stderr)
}

fn blocks(stdout: String, stderr: Option<String>) -> Vec<ContentBlock> {
    let mut out = Vec::new();
    if !stdout.is_empty() {
        out.push(ContentBlock::text(stdout));
    }
    if let Some(e) = stderr {
        out.push(ContentBlock::text(e));
    }
    out
}

fn failure(ended: &Ended, timeout: u64, limit: u64) -> Option<String> {
    match ended {
        Ended::Exited(_) => None,
        Ended::TimedOut => Some(format!("Command timed out after {timeout} seconds")),
        Ended::OutputLimit(stream) => {
            Some(format!("{stream} exceeded output limit of {limit} bytes"))
        }
        Ended::Failed(m) => Some(m.clone()),
    }
}

/// Runs `shell_execute`: `Ok` text blocks, or `Err` with the whole error text.
async fn execute(
    ctx: &Context,
    s: &ShellServerSettings,
    args: &Map<String, Value>,
) -> Result<Vec<ContentBlock>, String> {
    let call = schema_check(args)?;
    let error = |m: String| format!("Error executing command: {m}");
    if call.tokens.is_empty() {
        return Err(error("No command provided".into()));
    }
    let dir = directory(call.directory.as_deref(), &ctx.config.default_cwd).map_err(error)?;
    let timeout = call.timeout.map_or(s.default_timeout_secs, |t| {
        u64::try_from(t).unwrap_or(1).min(s.max_timeout_secs)
    });
    let tokens: Vec<String> = call.tokens.into_iter().filter(|t| !t.is_empty()).collect();
    let stages = plan(&tokens, s).map_err(error)?;
    // Any `|` element makes a pipeline, even with one stage left (`["echo", "x", "|"]`): its
    // output is not stripped, as in the package.
    match stages.as_slice() {
        [stage] if !tokens.iter().any(|t| t == "|") => {
            single(ctx, s, stage, &dir, call.stdin, timeout).await
        }
        _ => pipeline(ctx, s, &stages, &dir, timeout).await,
    }
    .map_err(error)
}

/// One program: output stripped, a non-zero exit an error carrying the output.
async fn single(
    ctx: &Context,
    s: &ShellServerSettings,
    stage: &Stage,
    dir: &Path,
    stdin: Option<String>,
    timeout: u64,
) -> Result<Vec<ContentBlock>, String> {
    let input =
        read_input(stage, dir)?.or_else(|| stdin.filter(|t| !t.is_empty()).map(String::into_bytes));
    let file = open_output(stage, dir)?;
    let ran = run_program(ctx, s, &stage.argv, dir, input, timeout).await?;
    if let Some(message) = failure(&ran.ended, timeout, s.output_limit) {
        return Err(message);
    }
    let stdout = if file.is_some() {
        write_output(file, &ran.stdout)?;
        String::new()
    } else {
        text(&ran.stdout).trim().to_string()
    };
    let stderr = shown_stderr(text(&ran.stderr).trim().to_string());
    if let Ended::Exited(code) = ran.ended
        && code != 0
    {
        let mut m = if code < 0 {
            format!("Command terminated by signal {}", -code)
        } else {
            format!("Command failed with exit status {code}")
        };
        if !stdout.is_empty() {
            m.push_str(&format!("\nstdout:\n{stdout}"));
        }
        if let Some(e) = &stderr {
            m.push_str(&format!("\nstderr:\n{e}"));
        }
        return Err(m);
    }
    Ok(blocks(stdout, stderr))
}

/// A pipeline, one stage after the other; output is not stripped, as in the package.
async fn pipeline(
    ctx: &Context,
    s: &ShellServerSettings,
    stages: &[Stage],
    dir: &Path,
    timeout: u64,
) -> Result<Vec<ContentBlock>, String> {
    let mut input = match stages.first() {
        Some(first) => read_input(first, dir)?,
        None => None,
    };
    let file = match stages.last() {
        Some(last) => open_output(last, dir)?,
        None => None,
    };
    let mut stderr = Vec::new();
    let mut last = Ran {
        stdout: Vec::new(),
        stderr: Vec::new(),
        ended: Ended::Exited(0),
    };
    for stage in stages {
        let ran = run_program(ctx, s, &stage.argv, dir, input.take(), timeout).await?;
        if let Some(message) = failure(&ran.ended, timeout, s.output_limit) {
            return Err(message);
        }
        stderr.extend_from_slice(&ran.stderr);
        if let Ended::Exited(code) = ran.ended
            && code != 0
        {
            let message = text(&ran.stderr).trim().to_string();
            return Err(if message.is_empty() {
                format!("Command failed with exit code {code}")
            } else {
                message
            });
        }
        input = Some(ran.stdout.clone()).filter(|o| !o.is_empty());
        last = ran;
    }
    let stdout = if file.is_some() {
        write_output(file, &last.stdout)?;
        String::new()
    } else {
        text(&last.stdout)
    };
    Ok(blocks(stdout, shown_stderr(text(&stderr))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(v: Value) -> Result<Call, String> {
        schema_check(v.as_object().expect("object"))
    }

    #[test]
    fn schema_errors_read_like_the_sdks() {
        for (args, message) in [
            (json!({}), "'command' is a required property"),
            (json!({"command": "ls"}), "'ls' is not of type 'array'"),
            (json!({"command": [1]}), "1 is not of type 'string'"),
            (
                json!({"command": ["ls"], "timeout": 0}),
                "0 is less than the minimum of 1",
            ),
            (
                json!({"command": ["ls"], "timeout": "x"}),
                "'x' is not of type 'integer'",
            ),
            (
                json!({"command": ["ls"], "stdin": true}),
                "True is not of type 'string'",
            ),
        ] {
            assert_eq!(
                checked(args.clone()).err(),
                Some(format!("Input validation error: {message}")),
                "{args}"
            );
        }
        let c =
            checked(json!({"command": ["ls", ""], "timeout": 5.0, "directory": "d"})).expect("ok");
        assert_eq!(c.tokens, ["ls", ""]);
        assert_eq!(c.timeout, Some(5));
        assert_eq!(c.directory.as_deref(), Some("d"));
    }

    #[test]
    fn directories_and_redirections_are_checked_with_the_packages_words() {
        let tmp = std::env::temp_dir();
        assert_eq!(
            directory(Some(" "), &tmp),
            Err("Directory cannot be empty".into())
        );
        let missing = tmp.join("no-such-dir-for-this-test");
        assert_eq!(
            directory(Some(missing.to_str().expect("utf-8")), &tmp),
            Err(format!("Directory does not exist: {}", missing.display()))
        );
        assert_eq!(directory(None, &tmp), Ok(tmp.clone()));
        assert_eq!(
            redirect_target("/etc/x", &tmp),
            Err("Redirection target must be relative to the working directory".into())
        );
        assert_eq!(
            redirect_target("a/../../x", &tmp),
            Err("Redirection target cannot contain parent traversal".into())
        );
        assert!(redirect_target("out.txt", &tmp).is_ok());
    }

    #[test]
    fn stderr_about_job_control_is_dropped() {
        assert_eq!(shown_stderr(String::new()), None);
        assert_eq!(
            shown_stderr("sh: cannot set terminal process group".into()),
            None
        );
        assert_eq!(shown_stderr("warning".into()), Some("warning".into()));
    }
}
