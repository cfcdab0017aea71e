//! Naming a process on the command line: by its id, or by the name it was given at `exec`
//! (`yieldctl stop devserver`), and completing both in the shell.
//!
//! - [`resolve`]: an argument that is not shaped like an id (`proc_…`, or a client-chosen UUID)
//!   is looked up by name: the one running process of that name, else the one process of that
//!   name; several are refused with their ids, none leaves the argument as it is (the daemon
//!   then says the id is unknown).
//! - [`complete`]: the candidates of an id argument for clap's dynamic completion
//!   (`COMPLETE=bash yieldctl -- …`, registered by `yieldctl completions SHELL`): ids and names
//!   of the processes the daemon has, each with its status and command as the description. It
//!   asks a daemon that already runs (never starts one for a Tab press), within a short deadline.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use yieldshell_proto::client::{ConnectOptions, Session};
use yieldshell_proto::ids::is_client_process_id;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::SessionConfig;
use yieldshell_proto::views::process_status_name;

/// Whether `arg` has the form of a process id (then it is never taken for a name).
fn is_id_shaped(arg: &str) -> bool {
    arg.strip_prefix("proc_")
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        || is_client_process_id(arg)
}

/// Every process, running or ended (for names and completion).
fn all() -> pb::ListRequest {
    pb::ListRequest {
        include_completed: true,
        scope: pb::Scope::All as i32,
        ..Default::default()
    }
}

/// The id `arg` names (see the module doc).
pub async fn resolve(session: &Session, arg: &str) -> anyhow::Result<String> {
    if is_id_shaped(arg) || arg.is_empty() {
        return Ok(arg.to_string());
    }
    let listed = session.list(all()).await?;
    let named: Vec<&pb::ProcessInfo> = listed.processes.iter().filter(|p| p.name == arg).collect();
    let running: Vec<&pb::ProcessInfo> = named
        .iter()
        .copied()
        .filter(|p| p.status == pb::ProcessStatus::Running as i32)
        .collect();
    match (running.as_slice(), named.as_slice()) {
        ([one], _) | ([], [one]) => Ok(one.process_id.clone()),
        ([], []) => Ok(arg.to_string()),
        (_, _) => {
            let candidates = if running.is_empty() { named } else { running };
            let ids: Vec<String> = candidates
                .iter()
                .map(|p| format!("{} ({})", p.process_id, process_status_name(p.status)))
                .collect();
            anyhow::bail!(
                "the name {arg:?} names {} processes: {}; use an id",
                candidates.len(),
                ids.join(", ")
            )
        }
    }
}

/// How long a Tab press waits for the daemon.
const COMPLETION_DEADLINE: Duration = Duration::from_millis(1500);

/// The processes, from a daemon that already runs; empty when none answers in time.
fn list_for_completion() -> Vec<pb::ProcessInfo> {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let mut opts = ConnectOptions::from_env("yieldctl");
    opts.autostart = false;
    let Ok(config) = SessionConfig::from_process_env() else {
        return Vec::new();
    };
    let session = Session::new(opts, &config);
    runtime.block_on(async {
        tokio::time::timeout(COMPLETION_DEADLINE, session.list_if_running(all()))
            .await
            .ok()
            .flatten()
            .map(|r| r.processes)
            .unwrap_or_default()
    })
}

/// A candidate's description: status, name or id, and the start of the command, on one line
/// with nothing a terminal would act on.
fn describe(p: &pb::ProcessInfo, other: &str) -> String {
    let command: String = crate::render::escape(&p.command).chars().take(50).collect();
    format!(
        "{} {} {command}",
        process_status_name(p.status),
        crate::render::escape(other.as_bytes())
    )
}

/// Completes a process id or name: ids first (running first), then names.
pub fn complete(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let mut processes = list_for_completion();
    // Running first, then newest first (the List order).
    processes.sort_by_key(|p| p.status != pb::ProcessStatus::Running as i32);
    let mut out = Vec::new();
    for p in &processes {
        if p.process_id.starts_with(current) {
            out.push(
                CompletionCandidate::new(&p.process_id).help(Some(describe(p, &p.name).into())),
            );
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for p in &processes {
        let name = p.name.as_str();
        // A name a shell could not pass as one word, or that looks like an id, is left out.
        let plain = !name.is_empty()
            && !is_id_shaped(name)
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || "-_.:@+=,/".contains(c));
        if plain && name.starts_with(current) && !names.contains(&name) {
            names.push(name);
            out.push(CompletionCandidate::new(name).help(Some(describe(p, &p.process_id).into())));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_told_from_names_by_their_form() {
        assert!(is_id_shaped("proc_1a2b3c4d5e6f"));
        assert!(is_id_shaped("0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b"));
        assert!(!is_id_shaped("devserver"));
        assert!(!is_id_shaped("proc_"));
        assert!(!is_id_shaped("proc_web"));
    }
}
