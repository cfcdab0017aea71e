//! `mcp-yieldshell`: the stdio MCP server of YieldShell.
//!
//! A thin layer over the daemon: [`server`] answers the MCP protocol (rmcp), [`tools`] defines
//! and runs the tools by translating each call into one or more control-plane calls, [`args`]
//! validates arguments into agent-readable errors, [`progress`] sends heartbeats during long
//! calls. The shim owns no process and no state a restart would lose.
//!
//! [`profile`] picks the tool set: [`tools`] (the default), [`jobs`] (the MCP Background Job
//! Server's) or [`shell`] (mcp-shell-server's), all over the same daemon.

pub mod args;
pub mod jobs;
pub mod profile;
pub mod progress;
pub mod server;
pub mod shell;
pub mod tools;
