//! End-to-end tests: a real `yieldshelld` per test on its own socket and state dir, real
//! processes, real sockets; `yieldctl` as a subprocess; the MCP shim through a real MCP client.

mod helper;
mod mcp;

mod attach;
mod cli;
mod cli_terminal;
mod client_robustness;
mod daemon_exec;
mod daemon_inputs;
mod daemon_lifecycle;
mod daemon_output;
mod daemon_policy;
mod daemon_stop;
mod daemon_until;
mod holders_crash;
mod holders_restart;
mod holders_zygote;
mod input_wait;
mod lean_answers;
mod mcp_tasks;
mod mcp_tasks_wire;
mod packaging;
mod packaging_dist;
mod packaging_layouts;
mod pid_reuse;
mod policy_env;
mod profile_jobs;
mod profile_published_jobs;
mod profile_published_shell;
mod profile_shell;
mod ready_waits;
mod reliability_clients;
mod reliability_containment;
mod reliability_faults;
mod reliability_input;
mod reliability_load;
mod reliability_output_race;
mod reliability_security;
mod reliability_spool;
mod remote_ssh;
mod session_reconnect;
mod shim;
mod shim_jsonrpc;
mod terminal;
mod windows_wine;
