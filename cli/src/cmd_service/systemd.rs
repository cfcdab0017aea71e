//! systemd user units (Linux): `yieldshelld.socket` + `yieldshelld.service` in the user's unit
//! directory, enabled through `systemctl --user`.
//!
//! The unit files are the ones in `packaging/systemd/`, compiled in, with the daemon's absolute
//! path put into `ExecStart=`. Only the socket unit is enabled: systemd listens on the socket
//! clients use and starts the daemon on the first connection, so clients never start one
//! themselves.
//!
//! One hazard is checked before anything changes: when systemd binds a socket path it first
//! removes whatever socket is there. A daemon started by a client outside systemd would lose its
//! socket while keeping its processes, and every systemd-started daemon would then fail on the
//! instance lock that daemon still holds. So `install` refuses while such a daemon answers.

use std::path::{Path, PathBuf};

use super::plan::{Plan, Step, query};
use super::{Status, UnitStatus, probe_daemon};

/// The socket unit: the one that is enabled.
pub const SOCKET_UNIT: &str = "yieldshelld.socket";
/// The service unit, started by the socket.
pub const SERVICE_UNIT: &str = "yieldshelld.service";

const SOCKET_TEMPLATE: &str = include_str!("../../../packaging/systemd/yieldshelld.socket");
const SERVICE_TEMPLATE: &str = include_str!("../../../packaging/systemd/yieldshelld.service");
/// Replaced by the daemon's path in `ExecStart=`.
const BINARY_PLACEHOLDER: &str = "@YIELDSHELLD@";

/// Where user units go: `$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`.
pub fn unit_dir() -> anyhow::Result<PathBuf> {
    // The XDG base-directory spec says a relative XDG_CONFIG_HOME is invalid and to be ignored.
    if let Some(config) = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from)
        && config.is_absolute()
    {
        return Ok(config.join("systemd").join("user"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow::anyhow!("HOME is not set: cannot find ~/.config/systemd/user"))?;
    Ok(PathBuf::from(home).join(".config/systemd/user"))
}

/// The socket the units listen on, as clients of this shell would find it: `%t` in a user unit
/// is the user manager's `$XDG_RUNTIME_DIR`.
pub fn socket_path() -> Option<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty())?;
    Some(
        PathBuf::from(runtime)
            .join("yieldshell")
            .join(yieldshell_proto::paths::SOCKET_FILE_NAME),
    )
}

/// The binary path as one `ExecStart=` word: quoted when it has spaces or quotes, with `%`
/// (unit specifiers) and `$` (variable expansion) escaped so systemd runs exactly this path.
pub fn exec_start_word(bin: &Path) -> anyhow::Result<String> {
    let text = bin
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("{} is not valid UTF-8", bin.display()))?;
    if !bin.is_absolute() || text.chars().any(char::is_control) {
        anyhow::bail!(
            "cannot put {text:?} into a unit file: it must be an absolute path without control characters"
        );
    }
    let escaped = text.replace('%', "%%").replace('$', "$$");
    if escaped
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@~%$".contains(c))
    {
        Ok(escaped)
    } else {
        Ok(format!(
            "\"{}\"",
            escaped.replace('\\', r"\\").replace('"', "\\\"")
        ))
    }
}

/// The two unit files for this binary: `(file name, contents)`, socket first.
pub fn render_units(bin: &Path) -> anyhow::Result<[(&'static str, String); 2]> {
    let word = exec_start_word(bin)?;
    Ok([
        (SOCKET_UNIT, SOCKET_TEMPLATE.to_string()),
        (
            SERVICE_UNIT,
            SERVICE_TEMPLATE.replace(BINARY_PLACEHOLDER, &word),
        ),
    ])
}

fn systemctl(args: &[&str]) -> Vec<String> {
    ["systemctl", "--user"]
        .iter()
        .chain(args)
        .map(|s| s.to_string())
        .collect()
}

fn is_active(unit: &str) -> Result<String, String> {
    query(&["systemctl", "--user", "is-active", unit])
}

/// Why user services stop at logout, when lingering is off for this user.
fn linger_note() -> Option<String> {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()?;
    let lingering = Path::new("/var/lib/systemd/linger").join(&user).exists();
    (!lingering).then(|| {
        format!(
            "systemd stops user services, and so every process the daemon runs, when {user} logs \
             out; to keep them across logouts: loginctl enable-linger {user}"
        )
    })
}

/// What the socket and service units would be, and the commands that install them.
pub async fn install_plan(bin: PathBuf) -> anyhow::Result<Plan> {
    let dir = unit_dir()?;
    let mut notes = Vec::new();
    match socket_path() {
        Some(socket) => {
            // A listening socket unit owns the path; otherwise whoever answers there is a daemon
            // outside systemd (see the module doc). Probing an active socket unit would start
            // the daemon, so it is left alone.
            let socket_unit_active = is_active(SOCKET_UNIT).is_ok_and(|s| s == "active");
            if !socket_unit_active && let Some(hello) = probe_daemon(&socket).await {
                anyhow::bail!(
                    "yieldshelld {} (pid {}) already serves {} outside systemd; the socket unit would \
                     take that path over while it keeps running. Stop it first with `yieldctl daemon \
                     stop` (this stops the processes it runs), then install again",
                    hello.daemon_version,
                    hello.pid,
                    socket.display()
                );
            }
            if let Some(env) =
                std::env::var_os(yieldshell_proto::paths::ENV_SOCKET).filter(|v| !v.is_empty())
                && Path::new(&env) != socket
            {
                notes.push(format!(
                    "{} points clients at {}, not at the socket unit's {}",
                    yieldshell_proto::paths::ENV_SOCKET,
                    Path::new(&env).display(),
                    socket.display()
                ));
            }
        }
        None => notes.push(
            "XDG_RUNTIME_DIR is not set here, so clients in this shell will not look for the \
             socket where the unit listens (%t/yieldshell/yieldshelld.sock)"
                .into(),
        ),
    }
    if is_active(SERVICE_UNIT).is_ok_and(|s| s == "active") {
        notes.push(format!(
            "the running daemon keeps its current binary until `systemctl --user restart \
             {SERVICE_UNIT}`, which stops every process it runs"
        ));
    }
    notes.extend(linger_note());
    let mut steps = vec![Step::CreateDir(dir.clone())];
    for (name, contents) in render_units(&bin)? {
        steps.push(Step::Write {
            path: dir.join(name),
            contents,
        });
    }
    steps.push(Step::Run(systemctl(&["daemon-reload"])));
    steps.push(Step::Run(systemctl(&["enable", "--now", SOCKET_UNIT])));
    Ok(Plan {
        action: "install",
        manager: "systemd",
        binary: Some(bin),
        steps,
        notes,
    })
}

/// Disabling and stopping both units, removing their files, reloading systemd.
pub async fn uninstall_plan() -> anyhow::Result<Plan> {
    let dir = unit_dir()?;
    let files: Vec<PathBuf> = [SOCKET_UNIT, SERVICE_UNIT]
        .iter()
        .map(|u| dir.join(u))
        .collect();
    let mut plan = Plan {
        action: "uninstall",
        manager: "systemd",
        binary: None,
        steps: Vec::new(),
        notes: Vec::new(),
    };
    if !files.iter().any(|f| f.exists()) {
        plan.notes.push(format!(
            "no YieldShell units are installed in {}",
            dir.display()
        ));
        return Ok(plan);
    }
    plan.steps.push(Step::Run(systemctl(&[
        "disable",
        "--now",
        SOCKET_UNIT,
        SERVICE_UNIT,
    ])));
    plan.steps.extend(files.into_iter().map(Step::Remove));
    plan.steps.push(Step::Run(systemctl(&["daemon-reload"])));
    plan.notes.push(format!(
        "stopping {SERVICE_UNIT} stops every process the daemon runs; clients start a daemon of \
         their own again when they need one"
    ));
    Ok(plan)
}

/// The binary an installed service unit starts (its `ExecStart=` first word).
fn installed_binary(service_file: &str) -> Option<String> {
    let line = service_file
        .lines()
        .find_map(|l| l.trim().strip_prefix("ExecStart="))?;
    let word = match line.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => line.split_whitespace().next()?,
    };
    Some(word.replace("%%", "%").replace("$$", "$"))
}

/// What is installed, enabled and running. `bin` is what `install` would use now (to tell
/// whether the installed files are up to date).
pub async fn status(bin: Option<PathBuf>) -> anyhow::Result<Status> {
    let dir = unit_dir()?;
    let expected = bin.as_deref().and_then(|b| render_units(b).ok());
    let mut units = Vec::new();
    let mut installed_bin = None;
    for name in [SOCKET_UNIT, SERVICE_UNIT] {
        let path = dir.join(name);
        let contents = std::fs::read_to_string(&path).ok();
        if name == SERVICE_UNIT {
            installed_bin = contents.as_deref().and_then(installed_binary);
        }
        let up_to_date = match (&contents, &expected) {
            (Some(c), Some(units)) => units.iter().find(|(n, _)| *n == name).map(|(_, e)| e == c),
            _ => None,
        };
        let answer = |r: Result<String, String>| r.unwrap_or_else(|e| format!("unknown: {e}"));
        units.push(UnitStatus {
            name: name.to_string(),
            path,
            installed: contents.is_some(),
            up_to_date,
            enabled: answer(query(&["systemctl", "--user", "is-enabled", name])),
            active: answer(is_active(name)),
        });
    }
    let socket = socket_path();
    // Connecting to a listening socket unit starts the daemon: ask only when that is moot.
    let service_active = units
        .iter()
        .any(|u| u.name == SERVICE_UNIT && u.active == "active");
    let socket_active = units
        .iter()
        .any(|u| u.name == SOCKET_UNIT && u.active == "active");
    let daemon = match &socket {
        Some(s) if service_active || !socket_active => probe_daemon(s).await,
        _ => None,
    };
    let mut notes = Vec::new();
    if socket_active && !service_active {
        notes.push(
            "systemd listens on the socket and starts the daemon on the first connection".into(),
        );
    }
    if let Some(hello) = &daemon
        && !service_active
    {
        notes.push(format!(
            "a yieldshelld (pid {}) answers on the socket but was not started by systemd",
            hello.pid
        ));
    }
    if units.iter().any(|u| u.installed) {
        notes.extend(linger_note());
    }
    Ok(Status {
        manager: "systemd",
        dir,
        installed_binary: installed_bin,
        units,
        socket,
        daemon_pid: daemon.map(|h| h.pid),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_start_paths_are_escaped_for_systemd() {
        let word = |p: &str| exec_start_word(Path::new(p)).expect("valid");
        assert_eq!(word("/usr/bin/yieldshelld"), "/usr/bin/yieldshelld");
        assert_eq!(word("/opt/a b/yieldshelld"), "\"/opt/a b/yieldshelld\"");
        assert_eq!(word("/opt/50%/x"), "/opt/50%%/x");
        assert_eq!(word("/opt/$HOME/x"), "/opt/$$HOME/x");
        assert_eq!(word("/opt/q\"/x"), "\"/opt/q\\\"/x\"");
        assert!(exec_start_word(Path::new("relative/yieldshelld")).is_err());
        assert!(exec_start_word(Path::new("/a\nb")).is_err());
    }

    #[test]
    fn rendered_units_have_the_binary_and_no_placeholder() {
        let [(socket_name, socket), (service_name, service)] =
            render_units(Path::new("/opt/ys/bin/yieldshelld")).expect("render");
        assert_eq!((socket_name, service_name), (SOCKET_UNIT, SERVICE_UNIT));
        assert!(socket.contains("ListenStream=%t/yieldshell/yieldshelld.sock"));
        assert!(service.contains(
            "\nExecStart=/opt/ys/bin/yieldshelld --log-stderr --socket %t/yieldshell/yieldshelld.sock\n"
        ));
        assert!(!service.contains('@') && !socket.contains('@'));
        assert_eq!(
            installed_binary(&service).as_deref(),
            Some("/opt/ys/bin/yieldshelld")
        );
        let [_, (_, quoted)] = render_units(Path::new("/a b/50%/yieldshelld")).expect("render");
        assert_eq!(
            installed_binary(&quoted).as_deref(),
            Some("/a b/50%/yieldshelld")
        );
    }
}
