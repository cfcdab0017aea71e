//! `mcp-yieldshell`: the stdio MCP server of YieldShell.
//!
//! A thin layer over the daemon, the owner of every process; the shim owns no process and no
//! state a restart would lose. Its modules, from the ground floor up:
//!
//! - [`context`]: the daemon session and the session configuration every tool uses, plus the
//!   helpers all profiles share (error wording, JSON Schemas, the shim's environment).
//! - [`args`]: validates tool arguments into agent-readable errors.
//! - [`progress`]: heartbeats during long calls and [`progress::run_until_settled`], the one loop
//!   that waits on a process in slices.
//! - [`tool_set`]: the [`tool_set::ToolSet`] trait each profile implements.
//! - The profiles' tool sets, each importing only the modules above: [`tools`] (the default),
//!   [`jobs`] and [`shell`] (the specifications of the MCP Background Job Server and MCP Shell
//!   Server), [`mcp_background_job`] and [`mcp_shell_server`] (the published packages; they reuse
//!   the `jobs` machinery and the `shell` quoting).
//! - [`profile`]: picks the profile and builds its tool set — the only place that branches on it.
//! - [`tasks`]: MCP Tasks — a call whose process keeps running becomes a task whose state is
//!   looked up through the daemon (task id = process id), and pushed task status.
//! - [`server`]: answers the MCP protocol (rmcp) through the tool set.
//! - [`stdio_transport`]: the newline-delimited JSON-RPC framing on stdio that rmcp serves over;
//!   every request whose `id` can be read gets an answer, even one that does not decode.
//! - [`request_ids`]: aliases for request ids a client reuses while rmcp may still answer under
//!   them (a cancelled request's), so each request gets its own answer.

pub mod args;
pub mod context;
pub mod jobs;
pub mod mcp_background_job;
pub mod mcp_shell_server;
pub mod profile;
pub mod progress;
pub mod request_ids;
pub mod server;
pub mod shell;
pub mod stdio_transport;
pub mod tasks;
pub mod tool_set;
pub mod tools;
