//! The daemon fixture: a real `yieldshelld` on a private socket and state dir in a short temp
//! dir, started directly or auto-started by a client, with sessions and `yieldctl` pointed at it,
//! and stopped (with every managed process) on drop.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use yieldshell_proto::client::{ConnectOptions, Session};
use yieldshell_proto::deadlines::Deadlines;
use yieldshell_proto::pb;
use yieldshell_proto::session_config::SessionConfig;

use super::binaries::bin;
use super::client::Client;
use super::poll::{TIMEOUT, eventually};
use super::procfs::{daemon_pids_for, fd_target, fd_targets, idle_launchers_in};

/// A real daemon on a private socket and state dir.
pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state: PathBuf,
    /// Extra environment for the daemon process (fault injection).
    pub env: Vec<(String, String)>,
    child: Option<Child>,
}

impl TestDaemon {
    /// A fresh temp dir with a short path (sockets have a ~107-byte limit).
    pub fn new_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ys-")
            .tempdir_in("/tmp")
            .expect("tempdir")
    }

    /// Starts a daemon in a fresh directory and waits until it answers.
    pub async fn start() -> TestDaemon {
        Self::start_with_env(&[]).await
    }

    /// Like [`TestDaemon::start`], with extra variables in the daemon's own environment.
    pub async fn start_with_env(env: &[(&str, &str)]) -> TestDaemon {
        Self::start_configured(env, "").await
    }

    /// Like [`TestDaemon::start_with_env`], with a config file (TOML) written first.
    pub async fn start_configured(env: &[(&str, &str)], config: &str) -> TestDaemon {
        let dir = Self::new_dir();
        std::fs::write(dir.path().join("config.toml"), config).expect("config file");
        let mut d = TestDaemon {
            socket: dir.path().join("run").join("d.sock"),
            state: dir.path().join("state"),
            dir,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        d.spawn().await;
        d
    }

    /// A fresh directory where clients will auto-start the daemon (nothing runs yet). On drop,
    /// an auto-started daemon is stopped with `yieldctl daemon stop`.
    pub fn unstarted() -> TestDaemon {
        let dir = Self::new_dir();
        TestDaemon {
            socket: dir.path().join("run").join("d.sock"),
            state: dir.path().join("state"),
            dir,
            env: Vec::new(),
            child: None,
        }
    }

    /// Stops a daemon that a client auto-started, and waits until its process is gone.
    pub fn stop_autostarted(&self) {
        if daemon_pids_for(&self.socket).is_empty() {
            return;
        }
        let _ = Command::new(bin("yieldctl"))
            .args(["daemon", "stop"])
            .env("YIELDSHELL_SOCKET", &self.socket)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // Never panic here while a test already panics (Drop calls this too).
        let deadline = Instant::now() + TIMEOUT;
        while !daemon_pids_for(&self.socket).is_empty() {
            if Instant::now() > deadline {
                assert!(
                    std::thread::panicking(),
                    "the auto-started daemon did not exit"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A raw control-plane client (no session) for admin calls and streams.
    pub async fn raw(&self) -> yieldshell_proto::client::Client {
        yieldshell_proto::client::connect(&self.opts())
            .await
            .expect("connect")
            .client
    }

    /// The daemon's `Status`.
    pub async fn status(&self) -> pb::StatusResponse {
        self.raw()
            .await
            .status(pb::StatusRequest::default())
            .await
            .expect("status")
            .into_inner()
    }

    /// Whether the instance lock is free (`flock -n` would succeed): no daemon holds it.
    pub fn lock_is_free(&self) -> bool {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.state.join("yieldshelld.lock"))
            .expect("lock file");
        f.try_lock().is_ok()
    }

    /// Whether the daemon process we started still runs (not reaped, not a zombie).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The daemon command line for this directory.
    pub fn command(&self) -> Command {
        let mut c = Command::new(bin("yieldshelld"));
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// (Re)starts the daemon process and waits for it to answer.
    pub async fn spawn(&mut self) {
        // Nobody reads a long-running daemon's stderr: never let a full pipe block it.
        let child = self
            .command()
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn yieldshelld");
        self.child = Some(child);
        let opts = self.opts();
        eventually("the daemon to answer", || {
            let opts = opts.clone();
            async move { yieldshell_proto::client::connect(&opts).await.ok() }
        })
        .await;
    }

    /// Waits until the daemon's pool of idle holders is full: each waits in a spare directory
    /// of its own under `<state>/spare`, and the daemon keeps two (its `IDLE_HOLDERS`). A test
    /// that counts the daemon's descriptors takes its baseline after this, or a refill still
    /// under way would count as a leak. A spare directory exists before its holder is ready:
    /// the pool is full once the daemon holds the stdin of each spare's launcher, the last
    /// descriptor an idle holder hands it.
    pub async fn idle_holders_ready(&self) {
        let daemon = self.child.as_ref().map(|c| c.id() as i32);
        eventually("the pool of idle holders to be full", || async {
            let n = std::fs::read_dir(self.state.join("spare")).ok()?.count();
            (n >= 2).then_some(())?;
            let Some(daemon) = daemon else {
                return Some(());
            };
            let launchers = idle_launchers_in(&self.state);
            let held = fd_targets(daemon);
            (launchers.len() >= 2
                && launchers
                    .iter()
                    .all(|l| fd_target(*l, 0).is_some_and(|stdin| held.contains(&stdin))))
            .then_some(())
        })
        .await;
    }

    /// The daemon's log, every file of `<state>/logs` joined (for failure messages, and for
    /// what it warned about).
    pub fn log(&self) -> String {
        std::fs::read_dir(self.state.join("logs"))
            .map(|r| {
                r.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect::<Vec<_>>()
                    .join("")
            })
            .unwrap_or_default()
    }

    /// Pid of the daemon we started.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("daemon running").id() as i32
    }

    /// Connection options without auto-start.
    pub fn opts(&self) -> ConnectOptions {
        ConnectOptions {
            socket: self.socket.clone(),
            state_dir: Some(self.state.clone()),
            autostart: false,
            daemon_bin: Some(bin("yieldshelld")),
            client_name: "e2e".into(),
            start_timeout: TIMEOUT,
            // The helper's generic `Session::call`s carry long polls of up to TIMEOUT and huge
            // requests a debug daemon takes a minute over (B4's 100k variables): a deadline
            // that only ends a hang. The client deadlines themselves are tested with the real
            // binaries' defaults.
            deadlines: Deadlines {
                rpc: 10 * TIMEOUT,
                ..Deadlines::default()
            },
        }
    }

    /// A session with the given policy variables and the temp dir as default cwd.
    pub fn session_with(&self, vars: &[(&str, &str)]) -> Client {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                !k.starts_with("YIELDSHELL_") && !k.starts_with("MCP_YIELDSHELL")
            })
            .collect();
        for (k, v) in vars {
            env.push((k.into(), v.into()));
        }
        let config = SessionConfig::from_vars(env, self.dir.path()).expect("session config");
        Client {
            session: Session::new(self.opts(), &config),
        }
    }

    /// A session with default policy.
    pub fn session(&self) -> Client {
        self.session_with(&[])
    }

    /// `yieldctl` pointed at this daemon (auto-start off), run in the temp dir.
    pub fn yieldctl(&self) -> Command {
        let mut c = Command::new(bin("yieldctl"));
        c.env("YIELDSHELL_SOCKET", &self.socket)
            .env("YIELDSHELL_STATE_DIR", &self.state)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    /// SIGKILLs the daemon (crash simulation) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERMs the daemon and waits for it; returns its exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        // A graceful stop also stops every managed process, so no test leaks one.
        if self.terminate().is_none() {
            self.stop_autostarted();
        }
    }
}
