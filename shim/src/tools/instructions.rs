//! The default profile's `initialize` instructions: how the seven tools fit together, plus the
//! project's processes that are still running (so an agent resumes them by id after a restart).

use std::time::Duration;

use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

/// How long `initialize` spends looking for this project's running processes.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);

/// Most running processes the instructions list.
const LISTED: u32 = 20;

/// The usage text.
pub const USAGE: &str = "YieldShell runs shell commands for you. Call exec with the command and its side_effects \
(use [\"NONE\"] for read-only commands). Fast commands return their output and exit code at once. A command still \
running after yield_ms keeps running in the background and you get a process_id: use read with since_seq=next_seq \
for new output (nothing is repeated or lost), wait to block until it exits (at most 55 s per call; `until` waits \
for an output line such as a server's \"listening on\"), write to answer prompts, stop to end it with its whole \
tree. Processes survive restarts of this MCP server: ps lists this project's processes (scope=all for every one), \
cleanup removes old records. Prefer exec over re-running a command that is still running in the background.";

/// The instructions with this project's running processes, if a daemon already runs (it is not
/// started just for this). `None` when none answers within [`LOOKUP_TIMEOUT`].
pub async fn with_running_processes(session: &Session) -> Option<String> {
    let lookup = session.list_if_running(pb::ListRequest {
        include_completed: false,
        limit: LISTED,
        scope: pb::Scope::Project as i32,
        ..Default::default()
    });
    let list = tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await.ok()??;
    Some(instructions_with(&list))
}

/// The usage text plus a list of the project's running processes.
pub fn instructions_with(list: &pb::ListResponse) -> String {
    if list.processes.is_empty() {
        return USAGE.to_string();
    }
    let mut text = format!(
        "{USAGE}\n\nStill running in this project (started earlier; use read/wait/stop with these ids):"
    );
    for p in &list.processes {
        let cmd: String = String::from_utf8_lossy(&p.command)
            .chars()
            .take(120)
            .collect();
        text.push_str(&format!(
            "\n- {} (pid {}, running {}s{}): {}",
            p.process_id,
            p.pid.unwrap_or_default(),
            p.duration_ms / 1000,
            if p.name.is_empty() {
                String::new()
            } else {
                format!(", name {:?}", p.name)
            },
            cmd
        ));
    }
    if list.matched as usize > list.processes.len() {
        text.push_str(&format!(
            "\n- … and {} more (ps lists them)",
            list.matched as usize - list.processes.len()
        ));
    }
    text
}
