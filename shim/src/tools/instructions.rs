//! The default profile's `initialize` instructions: how the seven tools fit together, plus the
//! project's processes that are still running (so an agent resumes them by id after a restart).

use std::time::Duration;

use yieldshell_proto::client::Session;
use yieldshell_proto::pb;

/// How long `initialize` spends looking for this project's running processes. Paid only when a
/// daemon runs but answers slowly (none running is known at once); half a second was too short
/// for a daemon busy on a loaded 2-core machine, and an agent resumed without its process list
/// starts a second dev server.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Most running processes the instructions list.
const LISTED: u32 = 20;

/// The usage text.
pub const USAGE: &str = "Run commands with exec (side_effects [\"NONE\"] if read-only). A command still running \
after yield_ms continues in the background as process_id: wait for it, read new output with since_seq=next_seq, \
write to its stdin, stop its tree. until=REGEX returns at a matching line. Processes outlive this server: ps \
finds them.";

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
    let mut text = format!("{USAGE}\n\nRunning in this project:");
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
