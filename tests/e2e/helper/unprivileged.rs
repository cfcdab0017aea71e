//! A daemon run as an unprivileged user, driven through `yieldctl` as that user: what CI (root)
//! otherwise never sees. A process of another user is not ours to read: a non-dumpable one's
//! `/proc/<pid>` belongs to root, and `ulimit -u` binds only a user that is not root.
//!
//! Each test passes a uid of its own that no account and no other test uses (the fixture runs as
//! root, through `setpriv`): `ulimit -u` counts every process of a uid, so two tests sharing
//! one would limit each other, and on drop every process left with that uid is killed
//! ([`kill_uid`]: as that uid, `kill -9 -1`, until none is left), however the test ends.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::binaries::{bin, json};
use super::poll::{TIMEOUT, eventually};
use super::prerequisites::{require_root, require_tool};

/// The binaries the unprivileged user runs: the workspace's, linked (or copied) into a
/// directory anyone may read, since the target directory may be private to root.
const BINARIES: [&str; 4] = [
    "yieldshelld",
    "yieldshell-holder",
    "yieldctl",
    "yieldshell-testbin",
];

/// A daemon running as `uid`, on a socket and state directory that uid owns.
pub struct AsUser {
    /// The uid everything here runs as.
    pub uid: u32,
    setpriv: PathBuf,
    bins: tempfile::TempDir,
    /// Owned by `uid`, mode 0700: `run/d.sock`, `state/`, `config.toml`.
    pub dir: tempfile::TempDir,
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The daemon's state directory.
    pub state: PathBuf,
    daemon: Option<Child>,
}

impl AsUser {
    /// Starts a daemon as `uid` and waits until it answers. Needs root (and `setpriv`).
    pub async fn start(uid: u32) -> AsUser {
        require_root("run a daemon as an unprivileged user (through setpriv)");
        let setpriv = require_tool("setpriv", "util-linux");
        // An earlier run of this test that was killed before its guard ran may have left
        // processes of the uid behind: they would count against its `ulimit -u`.
        let stale = kill_uid(&setpriv, uid);
        assert!(stale.is_empty(), "cannot clear uid {uid}: {stale:?} remain");
        let bins = tempfile::Builder::new()
            .prefix("ys-bin-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(bins.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        for name in BINARIES {
            let to = bins.path().join(name);
            if std::fs::hard_link(bin(name), &to).is_err() {
                std::fs::copy(bin(name), &to).expect("copy a binary");
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("ys-u-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::write(dir.path().join("config.toml"), "").expect("config");
        for p in [dir.path().to_path_buf(), dir.path().join("config.toml")] {
            nix::unistd::chown(&p, Some(uid.into()), Some(uid.into())).expect("chown");
        }
        let mut me = AsUser {
            uid,
            setpriv,
            socket: dir.path().join("run").join("d.sock"),
            state: dir.path().join("state"),
            bins,
            dir,
            daemon: None,
        };
        me.spawn().await;
        me
    }

    /// `program` run as the user, with a clean environment of its own (`HOME` is the private
    /// directory) and the daemon's socket.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(&self.setpriv);
        c.args(["--reuid", &self.uid.to_string()])
            .args(["--regid", &self.uid.to_string()])
            .arg("--clear-groups")
            .arg("--")
            .arg(program)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.dir.path())
            .env("YIELDSHELL_SOCKET", &self.socket)
            .env("YIELDSHELL_STATE_DIR", &self.state)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    /// Path of one of the linked binaries.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bins.path().join(name)
    }

    /// The testbin, as a command line word.
    pub fn testbin(&self) -> String {
        self.bin("yieldshell-testbin").display().to_string()
    }

    /// (Re)starts the daemon as the user and waits until `yieldctl ps` answers.
    pub async fn spawn(&mut self) {
        let mut c = self.command(&self.bin("yieldshelld"));
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.daemon = Some(c.spawn().expect("spawn yieldshelld as the user"));
        eventually("the unprivileged daemon to answer", || async {
            self.yieldctl(&["ps"]).status.success().then_some(())
        })
        .await;
    }

    /// Runs `yieldctl ARGS` as the user.
    pub fn yieldctl(&self, args: &[&str]) -> Output {
        self.command(&self.bin("yieldctl"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run yieldctl as the user")
    }

    /// Runs `yieldctl SUBCOMMAND --json ARGS` as the user: its JSON answer.
    pub fn yieldctl_json(&self, subcommand: &str, args: &[&str]) -> serde_json::Value {
        let mut all = vec![subcommand, "--json"];
        all.extend_from_slice(args);
        json(&self.yieldctl(&all))
    }

    /// Starts `command` in the background (`exec --yield-ms 0`); its process id.
    pub fn spawn_bg(&self, command: &str) -> String {
        let r = self.yieldctl_json("exec", &["--yield-ms", "0", "--", command]);
        r["process_id"]
            .as_str()
            .unwrap_or_else(|| panic!("exec answered {r}"))
            .to_string()
    }

    /// Everything the process printed so far (stdout).
    pub fn output(&self, id: &str) -> String {
        let r = self.yieldctl_json("read", &[id]);
        r["stdout"].as_str().unwrap_or_default().to_string()
    }

    /// Pid of the process's holder: the live `hold` process working in its directory.
    pub fn holder_of(&self, id: &str) -> super::procfs::Pid {
        super::procfs::holders_in(&self.state)
            .into_iter()
            .find(|(_, dir)| dir.file_name().is_some_and(|n| n == id))
            .map(|(p, _)| p)
            .unwrap_or_else(|| panic!("no holder for {id}"))
    }

    /// Live processes of the user whose command line contains `needle`.
    pub fn processes_with(&self, needle: &str) -> Vec<i32> {
        processes_of_uid(self.uid)
            .into_iter()
            .filter(|pid| cmdline_contains(*pid, needle))
            .collect()
    }

    /// SIGTERMs the daemon and waits for it (bounded); its exit status and how long it took.
    pub fn terminate(&mut self) -> Option<(std::process::ExitStatus, Duration)> {
        let mut c = self.daemon.take()?;
        // setpriv execs the daemon: the child's pid is the daemon's.
        let started = Instant::now();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + 3 * TIMEOUT;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return Some((s, started.elapsed()));
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok().map(|s| (s, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for AsUser {
    fn drop(&mut self) {
        let _ = self.terminate();
        // Whatever still runs as this test's own uid is a leak of the test: end it.
        let left = kill_uid(&self.setpriv, self.uid);
        if !left.is_empty() {
            let msg = format!(
                "processes of uid {} outlived their test: {left:?}",
                self.uid
            );
            if std::thread::panicking() {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }
}

/// Kills every process of `uid` (a test's own uid: no account has it) until none is left, as
/// that uid: `kill -9 -1` signals every process the caller may signal but itself, in one
/// pass of the kernel over the process table, so a fork bomb cannot fork away from it the way it
/// outruns a kill per pid read from `/proc`. Repeated (a fork can race the pass) for at most
/// [`TIMEOUT`]; returns what is still left then (nothing, normally).
pub fn kill_uid(setpriv: &Path, uid: u32) -> Vec<i32> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = processes_of_uid(uid);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        let _ = Command::new(setpriv)
            .args(["--reuid", &uid.to_string()])
            .args(["--regid", &uid.to_string()])
            .arg("--clear-groups")
            // procps `kill` reads `-1` after a signal as the pid -1 (and takes no `--`).
            .args(["--", "kill", "-9", "-1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Live (not zombie) processes whose real uid is `uid` (from `/proc/<pid>/status`, readable
/// whatever the process's dumpability).
pub fn processes_of_uid(uid: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
                    .map(str::to_string)
            };
            let zombie = field("State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
            let real = field("Uid:").and_then(|u| u.split_whitespace().next()?.parse::<u32>().ok());
            !zombie && real == Some(uid)
        })
        .collect()
}

/// Whether `pid`'s command line contains `needle`.
pub fn cmdline_contains(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
}
