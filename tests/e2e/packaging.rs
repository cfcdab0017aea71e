//! Packaging and the human-facing CLI around it: the systemd units (checked by systemd itself),
//! socket activation with the real daemon and client, `yieldctl service`, completions, man pages,
//! and `ps` colour.
//!
//! Some tests need a system tool (`systemd-analyze`, `systemd-socket-activate` from `systemd`;
//! `man` from `man-db`; `python3`): they are ignored in the README's test command and run by
//! `.ci/test-extra` (which installs the tools), failing there naming the package if one is
//! missing, so a green run means they ran.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::helper::{
    TIMEOUT, TestDaemon, bin, eventually_blocking, json, require_tool, run, testbin,
};

/// Every file and directory under `dir` (relative paths), sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).expect("under root").to_path_buf());
            if p.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `yieldctl` with a private home: HOME, XDG_CONFIG_HOME and XDG_RUNTIME_DIR inside `home`,
/// and nothing that would point it at another daemon binary or socket.
fn yieldctl_at_home(home: &Path) -> Command {
    let mut c = Command::new(bin("yieldctl"));
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .env("USER", "yieldshell-test")
        .env_remove("YIELDSHELL_DAEMON_BIN")
        .env_remove("YIELDSHELL_SOCKET")
        .env("YIELDSHELL_NO_AUTOSTART", "1")
        .stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The unit files `service install` would write, from its `--json --dry-run` plan.
fn planned_units(home: &Path) -> Vec<(PathBuf, String)> {
    let out = run(yieldctl_at_home(home).args(["--json", "service", "install", "--dry-run"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json(&out);
    assert_eq!(v["dry_run"], true);
    v["plan"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| {
            let w = s.get("write")?;
            Some((
                PathBuf::from(w["path"].as_str()?),
                w["contents"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[test]
#[ignore = "needs systemd-analyze (package systemd): run .ci/test-extra"]
fn the_installed_units_pass_systemd_analyze_verify() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let home = TestDaemon::new_dir();
    let units = planned_units(home.path());
    assert_eq!(units.len(), 2, "a socket and a service unit");
    let dir = TestDaemon::new_dir();
    for (path, contents) in &units {
        let name = path.file_name().expect("file name");
        std::fs::write(dir.path().join(name), contents).expect("write unit");
    }
    // `--user` verification starts a user-manager instance in-process, which needs a runtime
    // directory; containers have no login session, so give it a private one.
    let runtime = TestDaemon::new_dir();
    let verify = |files: &[&str]| {
        let out = Command::new(&analyze)
            .args(["--user", "verify"])
            .args(files.iter().map(|f| dir.path().join(f)))
            .env("XDG_RUNTIME_DIR", runtime.path())
            .stdin(Stdio::null())
            .output()
            .expect("run systemd-analyze");
        (
            out.status.success(),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    };
    let (ok, output) = verify(&["yieldshelld.socket", "yieldshelld.service"]);
    // No running user manager is needed (systemd-analyze starts one in-process, without PID 1
    // being systemd); if it cannot start, say so rather than report the units as broken.
    assert!(
        !output.contains("Failed to initialize manager"),
        "systemd-analyze could not start its in-process user manager (it needs a writable \
         XDG_RUNTIME_DIR): {output}"
    );
    // Unknown keys and bad values are warnings with exit code 0: the output must be empty too.
    assert!(ok && output.is_empty(), "systemd-analyze verify: {output}");

    // The check is real: the same verification reports a misspelt key and a bad value.
    let service = dir.path().join("yieldshelld.service");
    let good = std::fs::read_to_string(&service).expect("read");
    let bad = good.replace("KillMode=process", "KillMode=mixd\nRestrat=always");
    assert_ne!(good, bad);
    std::fs::write(&service, bad).expect("write");
    let (_, output) = verify(&["yieldshelld.socket", "yieldshelld.service"]);
    assert!(
        output.contains("Unknown key") && output.contains("mixd"),
        "{output}"
    );
}

/// A process started by the test, SIGTERMed and reaped on drop.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = eventually_blocking("the activated daemon to exit", || {
            self.0.try_wait().ok().flatten()
        });
    }
}

#[test]
#[ignore = "needs systemd-socket-activate (package systemd): run .ci/test-extra"]
fn a_socket_activated_daemon_serves_a_real_client_without_auto_start() {
    let activate = require_tool("systemd-socket-activate", "systemd");
    let dir = TestDaemon::new_dir();
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).expect("mkdir");
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let socket = run_dir.join("d.sock");
    let state = dir.path().join("state");
    // Type=notify: the daemon must say READY=1 on $NOTIFY_SOCKET once it serves.
    let notify_path = dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    notify.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let stderr = std::fs::File::create(dir.path().join("activate.log")).expect("log");
    let activator = Command::new(activate)
        .arg("--listen")
        .arg(&socket)
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg(bin("yieldshelld"))
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("systemd-socket-activate");
    let activator = Reaped(activator);
    let pid = activator.0.id();
    eventually_blocking("the activation socket", || socket.exists().then_some(()));
    // Nothing has connected yet: the daemon has not started (systemd-socket-activate execs it
    // on the first connection, keeping its pid).
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    assert!(comm.starts_with("systemd-socket"), "{comm}");

    // A real client, with auto-start allowed: it must find the activated daemon instead.
    let yieldctl = || {
        let mut c = Command::new(bin("yieldctl"));
        c.env("YIELDSHELL_SOCKET", &socket)
            .env("YIELDSHELL_STATE_DIR", &state)
            .env_remove("YIELDSHELL_NO_AUTOSTART")
            .env_remove("YIELDSHELL_DAEMON_BIN")
            .current_dir(dir.path())
            .stdin(Stdio::null());
        c
    };
    // The managed shell itself reports whether it holds fd 3 (the listening socket's number).
    let out = run(yieldctl().args([
        "--json",
        "exec",
        "--",
        "if [ -e /proc/$$/fd/3 ]; then echo \"fd 3: $(readlink /proc/$$/fd/3)\"; else echo no fd 3; fi",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json(&out);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["stdout"], "no fd 3\n", "the listening socket leaked: {v}");

    let status = json(&run(yieldctl().args(["--json", "daemon", "status"])));
    assert_eq!(
        status["pid"], pid,
        "the daemon answering is the one systemd-socket-activate started, not an auto-started one"
    );
    assert!(
        !run_dir.join("yieldshelld.start.log").exists(),
        "no client tried to start a daemon"
    );
    let mut ready = [0u8; 64];
    let n = notify.recv(&mut ready).expect("READY=1 on NOTIFY_SOCKET");
    assert_eq!(&ready[..n], b"READY=1");
    let logs = state.join("logs");
    eventually_blocking("the daemon log to record the activation", || {
        tree(&logs).iter().find_map(|f| {
            let log = std::fs::read_to_string(logs.join(f)).ok()?;
            log.contains("yieldshelld ready").then(|| {
                assert!(log.contains("activated=true"), "{log}");
            })
        })
    });
}

#[test]
fn service_install_dry_run_names_everything_and_writes_nothing() {
    let home = TestDaemon::new_dir();
    let daemon = bin("yieldshelld");
    let out = run(yieldctl_at_home(home.path()).args(["service", "install", "--dry-run"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    let unit_dir = home.path().join("config/systemd/user");
    for expected in [
        format!("mkdir -p {}\n", unit_dir.display()),
        format!("cat > {}/yieldshelld.socket <<", unit_dir.display()),
        format!("cat > {}/yieldshelld.service <<", unit_dir.display()),
        "\nListenStream=%t/yieldshell/yieldshelld.sock\n".to_string(),
        format!("\nExecStart={} --log-stderr ", daemon.display()),
        "\nsystemctl --user daemon-reload\nsystemctl --user enable --now yieldshelld.socket\n"
            .to_string(),
    ] {
        assert!(
            script.contains(&expected),
            "missing {expected:?} in:\n{script}"
        );
    }
    assert!(!script.contains("@YIELDSHELLD@"), "{script}");
    assert!(script.contains("nothing has been changed"), "{script}");
    assert_eq!(
        tree(home.path()),
        Vec::<PathBuf>::new(),
        "a dry run writes nothing"
    );

    let out = run(yieldctl_at_home(home.path()).args(["service", "uninstall", "--dry-run"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no YieldShell units are installed"));
    assert_eq!(tree(home.path()), Vec::<PathBuf>::new());
}

#[test]
fn service_install_and_uninstall_write_the_units_and_drive_systemctl() {
    // systemctl --user needs a user manager, which this machine need not have: a stand-in
    // `systemctl` records the calls, and answers queries as systemd does for an idle unit.
    let home = TestDaemon::new_dir();
    let fake_bin = home.path().join("bin");
    std::fs::create_dir(&fake_bin).expect("mkdir");
    let calls = home.path().join("systemctl.calls");
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$2\" in\n  is-active) echo inactive; exit 3 ;;\n  \
         is-enabled) echo disabled; exit 1 ;;\nesac\nexit 0\n",
        calls.display()
    );
    let fake = fake_bin.join("systemctl");
    std::fs::write(&fake, script).expect("fake systemctl");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        fake_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let yieldctl = || {
        let mut c = yieldctl_at_home(home.path());
        c.env("PATH", &path);
        c
    };
    let changes = |calls: &Path| -> Vec<String> {
        std::fs::read_to_string(calls)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.contains(" is-") && !l.contains(" show"))
            .map(str::to_string)
            .collect()
    };

    let out = run(yieldctl().args(["service", "install"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unit_dir = home.path().join("config/systemd/user");
    let service = std::fs::read_to_string(unit_dir.join("yieldshelld.service")).expect("service");
    assert!(service.contains(&format!("\nExecStart={} ", bin("yieldshelld").display())));
    assert!(unit_dir.join("yieldshelld.socket").is_file());
    assert_eq!(
        changes(&calls),
        [
            "--user daemon-reload",
            "--user enable --now yieldshelld.socket"
        ]
    );

    let status = json(&run(yieldctl().args(["--json", "service", "status"])));
    assert_eq!(status["manager"], "systemd");
    assert_eq!(
        status["installed_binary"],
        bin("yieldshelld").display().to_string()
    );
    for unit in status["units"].as_array().expect("units") {
        assert_eq!(unit["installed"], true, "{unit}");
        assert_eq!(unit["up_to_date"], true, "{unit}");
        assert_eq!(unit["active"], "inactive", "{unit}");
    }

    std::fs::remove_file(&calls).expect("reset calls");
    let out = run(yieldctl().args(["service", "uninstall"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!unit_dir.join("yieldshelld.service").exists());
    assert!(!unit_dir.join("yieldshelld.socket").exists());
    assert_eq!(
        changes(&calls),
        [
            "--user disable --now yieldshelld.socket yieldshelld.service",
            "--user daemon-reload"
        ]
    );
}

#[tokio::test]
async fn service_install_refuses_while_a_daemon_outside_systemd_owns_the_socket() {
    // The socket unit would take the path over from a daemon that keeps running its processes.
    let home = TestDaemon::new_dir();
    let mut d = TestDaemon::start().await;
    d.terminate();
    d.socket = home.path().join("run/yieldshell/yieldshelld.sock");
    d.spawn().await;
    let out = run(yieldctl_at_home(home.path()).args(["service", "install", "--dry-run"]));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("(pid {})", d.pid())) && err.contains("yieldctl daemon stop"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "a refused dry run prints no plan");
}

#[test]
fn completions_are_generated_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(Command::new(bin("yieldctl")).args(["completions", shell]));
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        // The script registers `yieldctl` (from PATH, no path of the build machine) as its
        // own completer.
        assert!(
            script.contains("COMPLETE") && script.contains("yieldctl"),
            "{shell}: {script}"
        );
        assert!(
            !script.contains(env!("CARGO_MANIFEST_DIR")),
            "{shell}: {script}"
        );
    }
    // The bash script is valid bash.
    let script = run(Command::new(bin("yieldctl")).args(["completions", "bash"])).stdout;
    let dir = TestDaemon::new_dir();
    let file = dir.path().join("yieldctl.bash");
    std::fs::write(&file, script).expect("write");
    let check = run(Command::new("bash").arg("-n").arg(&file));
    assert!(check.status.success(), "{}", text(&check.stderr));
    // What the registered completer answers: the subcommands, as the clap definition has them.
    let out = run(Command::new(bin("yieldctl"))
        .args(["--", "yieldctl", ""])
        .env("COMPLETE", "fish"));
    let words: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect();
    for sub in [
        "exec",
        "ps",
        "read",
        "top",
        "service",
        "completions",
        "daemon",
    ] {
        assert!(
            words.iter().any(|w| w == sub),
            "completion lacks {sub}: {words:?}"
        );
    }
    let bad = run(Command::new(bin("yieldctl")).args(["completions", "tcsh"]));
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_are_printed_or_written_per_subcommand() {
    let out = run(Command::new(bin("yieldctl")).arg("man"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{page}");
    assert!(
        page.contains(".TH yieldctl 1") && page.contains("service"),
        "{page}"
    );

    let dir = TestDaemon::new_dir();
    let out = run(Command::new(bin("yieldctl"))
        .args(["--json", "man", "--dir"])
        .arg(dir.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let files = tree(dir.path());
    for name in [
        "yieldctl.1",
        "yieldctl-ps.1",
        "yieldctl-service-install.1",
        "yieldctl-daemon-status.1",
        "yieldctl-completions.1",
    ] {
        assert!(files.contains(&PathBuf::from(name)), "{name} in {files:?}");
    }
    assert_eq!(
        json(&out)["pages"].as_array().expect("pages").len(),
        files.len()
    );
}

/// The pages render: man(1) reads one without complaint.
#[test]
#[ignore = "needs man (package man-db): run .ci/test-extra"]
fn a_written_man_page_renders_with_man() {
    let dir = TestDaemon::new_dir();
    let out = run(Command::new(bin("yieldctl"))
        .args(["man", "--dir"])
        .arg(dir.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let man = require_tool("man", "man-db");
    let shown = run(Command::new(man)
        .arg("-l")
        .arg(dir.path().join("yieldctl-service-install.1"))
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat"));
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(
        text(&shown.stdout).contains("dry"),
        "{}",
        text(&shown.stdout)
    );
}

/// Runs `cmd` with stdout on a fresh pseudo-terminal and returns what it printed there.
fn run_on_a_terminal(mut cmd: Command) -> (std::process::ExitStatus, Vec<u8>) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut child = cmd
        .stdout(Stdio::from(pty.slave))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn on a pty");
    // The command keeps its copy of the slave end until dropped; once only the child holds it,
    // reading the master ends when the child exits.
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // Linux reports the end of a pty whose other side has closed as EIO.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => panic!("reading the pty: {e}"),
        }
    }
    (child.wait().expect("wait"), out)
}

#[tokio::test]
async fn ps_colours_status_only_for_terminals_or_when_asked() {
    let d = TestDaemon::start().await;
    let c = d.session();
    c.exec("true").await;
    c.exec("exit 3").await;
    let running = c.spawn_bg(&format!("{} ready-sleep 60", testbin())).await;
    c.ready_pids(&running, 1).await;

    let has_escape = |b: &[u8]| b.contains(&0x1b);
    let plain = run(d.yieldctl().arg("ps"));
    assert!(plain.status.success());
    assert!(!has_escape(&plain.stdout), "{}", text(&plain.stdout));
    let table = text(&plain.stdout);
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains("STARTED") && table.contains(" ago"),
        "{table}"
    );

    let always = run(d
        .yieldctl()
        .args(["ps", "--color", "always"])
        .env("NO_COLOR", "1"));
    let coloured = text(&always.stdout);
    assert!(
        coloured.contains("\x1b[33mrunning\x1b[0m")
            && coloured.contains("\x1b[32mcompleted\x1b[0m")
            && coloured.contains("\x1b[31mcompleted\x1b[0m"),
        "--color always colours even with NO_COLOR: {coloured:?}"
    );
    // Colour never changes the JSON.
    let json_out = run(d.yieldctl().args(["--json", "ps", "--color", "always"]));
    assert!(!has_escape(&json_out.stdout));
    assert_eq!(
        json(&json_out)["processes"]
            .as_array()
            .expect("array")
            .len(),
        3
    );

    let on_terminal = |no_color: Option<&str>, args: &[&str]| {
        let mut cmd = d.yieldctl();
        match no_color {
            Some(v) => cmd.env("NO_COLOR", v),
            None => cmd.env_remove("NO_COLOR"),
        };
        cmd.args(args);
        let (status, out) = run_on_a_terminal(cmd);
        assert!(status.success(), "{args:?}");
        out
    };
    let tty = on_terminal(None, &["ps"]);
    assert!(
        text(&tty).contains("\x1b[33mrunning\x1b[0m"),
        "a terminal gets colour: {:?}",
        text(&tty)
    );
    let tty = on_terminal(Some("1"), &["ps"]);
    assert!(!has_escape(&tty), "NO_COLOR: {:?}", text(&tty));
    let tty = on_terminal(None, &["ps", "--color", "never"]);
    assert!(!has_escape(&tty), "--color never: {:?}", text(&tty));
}

#[test]
#[ignore = "needs python3: run .ci/test-extra"]
fn the_launchd_plist_is_a_valid_property_list() {
    // plutil is macOS-only; Python's plistlib reads the same format on any machine.
    let python = require_tool("python3", "python3");
    let template = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/launchd/dev.yieldshell.yieldshelld.plist");
    let plist = std::fs::read_to_string(&template)
        .expect("plist")
        .replace("@YIELDSHELLD@", "/Users/me/.cargo/bin/yieldshelld")
        .replace(
            "@SOCKET@",
            "/var/folders/x/T/yieldshell-501/yieldshelld.sock",
        )
        .replace("@HOME@", "/Users/me");
    let dir = TestDaemon::new_dir();
    let file = dir.path().join("agent.plist");
    std::fs::write(&file, plist).expect("write");
    let check = run(Command::new(python)
        .arg("-c")
        .arg(
            "import json, plistlib, sys\n\
         print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
        )
        .arg(&file));
    assert!(check.status.success(), "{}", text(&check.stderr));
    let v = json(&check);
    assert_eq!(v["Label"], "dev.yieldshell.yieldshelld");
    assert_eq!(
        v["ProgramArguments"],
        serde_json::json!([
            "/Users/me/.cargo/bin/yieldshelld",
            "--socket",
            "/var/folders/x/T/yieldshell-501/yieldshelld.sock"
        ])
    );
    assert_eq!(v["RunAtLoad"], true);
    assert_eq!(v["KeepAlive"]["SuccessfulExit"], false);
    assert_eq!(
        v["StandardErrorPath"],
        "/Users/me/Library/Logs/yieldshelld.log"
    );
}
