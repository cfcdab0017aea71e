//! A launchd agent (macOS): `~/Library/LaunchAgents/dev.yieldshell.yieldshelld.plist`, loaded
//! into the user's GUI domain with `launchctl bootstrap`.
//!
//! Untested: YieldShell is built and tested on Linux only. The plist is the one in
//! `packaging/launchd/`, compiled in, with its placeholders filled in. launchd has no socket
//! activation we use: the agent runs the daemon at login and restarts it after a crash, and it
//! serves the socket this shell's clients use (passed explicitly, because a launchd agent need
//! not see the same temporary directory as a terminal).

use std::path::{Path, PathBuf};

use super::plan::{Plan, Step, query};
use super::{Status, UnitStatus, probe_daemon};

/// The agent's label (and plist file name without `.plist`).
pub const LABEL: &str = "dev.yieldshell.yieldshelld";

const PLIST_TEMPLATE: &str =
    include_str!("../../../packaging/launchd/dev.yieldshell.yieldshelld.plist");

fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("HOME is not set: cannot find ~/Library/LaunchAgents"))
}

/// `~/Library/LaunchAgents`.
pub fn agent_dir() -> anyhow::Result<PathBuf> {
    Ok(home()?.join("Library/LaunchAgents"))
}

/// Text for a plist `<string>`: XML-escaped; control characters are refused.
fn xml_text(p: &Path) -> anyhow::Result<String> {
    let text = p
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("{} is not valid UTF-8", p.display()))?;
    if text.chars().any(char::is_control) {
        anyhow::bail!("cannot put {text:?} into a plist: it has control characters");
    }
    Ok(text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;"))
}

/// The plist for this binary, socket and home directory.
pub fn render_plist(bin: &Path, socket: &Path, home: &Path) -> anyhow::Result<String> {
    if !bin.is_absolute() {
        anyhow::bail!("the daemon path {} must be absolute", bin.display());
    }
    Ok(PLIST_TEMPLATE
        .replace("@YIELDSHELLD@", &xml_text(bin)?)
        .replace("@SOCKET@", &xml_text(socket)?)
        .replace("@HOME@", &xml_text(home)?))
}

fn domain() -> String {
    format!("gui/{}", yieldshell_proto::paths::current_uid())
}

fn service_target() -> String {
    format!("{}/{LABEL}", domain())
}

/// `launchctl print` output when the agent is loaded.
fn loaded() -> Option<String> {
    query(&["launchctl", "print", &service_target()]).ok()
}

/// Writes the plist and loads it (unless it is loaded already).
pub async fn install_plan(bin: PathBuf) -> anyhow::Result<Plan> {
    let dir = agent_dir()?;
    let socket = yieldshell_proto::paths::default_socket_path();
    let is_loaded = loaded().is_some();
    if !is_loaded && let Some(hello) = probe_daemon(&socket).await {
        anyhow::bail!(
            "yieldshelld {} (pid {}) already serves {} outside launchd; the agent's daemon would \
             fail on its instance lock. Stop it first with `yieldctl daemon stop` (this stops the \
             processes it runs), then install again",
            hello.daemon_version,
            hello.pid,
            socket.display()
        );
    }
    let path = dir.join(format!("{LABEL}.plist"));
    let mut steps = vec![
        Step::CreateDir(dir),
        Step::Write {
            path: path.clone(),
            contents: render_plist(&bin, &socket, &home()?)?,
        },
    ];
    let mut notes = Vec::new();
    if is_loaded {
        notes.push(format!(
            "the agent is loaded already: the running daemon keeps its current settings until \
             `launchctl kickstart -k {}`, which stops every process it runs",
            service_target()
        ));
    } else {
        steps.push(Step::Run(vec![
            "launchctl".into(),
            "enable".into(),
            service_target(),
        ]));
        steps.push(Step::Run(vec![
            "launchctl".into(),
            "bootstrap".into(),
            domain(),
            path.to_string_lossy().into_owned(),
        ]));
    }
    Ok(Plan {
        action: "install",
        manager: "launchd",
        binary: Some(bin),
        steps,
        notes,
    })
}

/// Unloads the agent (stopping the daemon and its processes) and removes the plist.
pub async fn uninstall_plan() -> anyhow::Result<Plan> {
    let path = agent_dir()?.join(format!("{LABEL}.plist"));
    let mut plan = Plan {
        action: "uninstall",
        manager: "launchd",
        binary: None,
        steps: Vec::new(),
        notes: Vec::new(),
    };
    if loaded().is_some() {
        plan.steps.push(Step::Run(vec![
            "launchctl".into(),
            "bootout".into(),
            service_target(),
        ]));
        plan.notes
            .push("unloading the agent stops the daemon and every process it runs".into());
    }
    if path.exists() {
        plan.steps.push(Step::Remove(path));
    }
    if plan.steps.is_empty() {
        plan.notes.push(format!("{LABEL} is not installed"));
    }
    Ok(plan)
}

/// What is installed and loaded.
pub async fn status(bin: Option<PathBuf>) -> anyhow::Result<Status> {
    let dir = agent_dir()?;
    let path = dir.join(format!("{LABEL}.plist"));
    let socket = yieldshell_proto::paths::default_socket_path();
    let contents = std::fs::read_to_string(&path).ok();
    let expected = match &bin {
        Some(b) => render_plist(b, &socket, &home()?).ok(),
        None => None,
    };
    let up_to_date = contents
        .as_ref()
        .zip(expected.as_ref())
        .map(|(c, e)| c == e);
    let printed = loaded();
    let active = match &printed {
        Some(text) => text
            .lines()
            .find_map(|l| l.trim().strip_prefix("state = "))
            .unwrap_or("loaded")
            .to_string(),
        None => "not loaded".into(),
    };
    let daemon = probe_daemon(&socket).await;
    Ok(Status {
        manager: "launchd",
        dir,
        installed_binary: None,
        units: vec![UnitStatus {
            name: format!("{LABEL}.plist"),
            path,
            installed: contents.is_some(),
            up_to_date,
            enabled: if printed.is_some() {
                "loaded"
            } else {
                "not loaded"
            }
            .into(),
            active,
        }],
        socket: Some(socket),
        daemon_pid: daemon.map(|h| h.pid),
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plist_gets_escaped_paths_and_no_placeholder() {
        let plist = render_plist(
            Path::new("/Users/a&b/bin/yieldshelld"),
            Path::new("/var/folders/x/T/yieldshell-501/yieldshelld.sock"),
            Path::new("/Users/a&b"),
        )
        .expect("render");
        assert!(plist.contains("<string>/Users/a&amp;b/bin/yieldshelld</string>"));
        assert!(
            plist.contains("<string>/var/folders/x/T/yieldshell-501/yieldshelld.sock</string>")
        );
        assert!(plist.contains("<string>/Users/a&amp;b/Library/Logs/yieldshelld.log</string>"));
        assert!(plist.contains(&format!("<string>{LABEL}</string>")));
        assert!(!plist.contains('@'), "{plist}");
        assert!(render_plist(Path::new("yieldshelld"), Path::new("/s"), Path::new("/h")).is_err());
    }
}
