//! The servers under test and how to start them: YieldShell (`mcp-yieldshell` + `yieldshelld`
//! built next to this binary), the original Python server from a virtualenv, and the echo floor.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

/// Version of the original server measured against.
pub const ORIGINAL_VERSION: &str = "1.1.2";

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// YieldShell.
    Ours,
    /// The original Python `mcp-yieldshell`.
    Original,
    /// The one-tool echo server (MCP floor).
    Echo,
}

/// Paths and the running YieldShell daemon shared by all measurements.
pub struct Bench {
    /// Temporary root (sockets, state, work dir).
    pub dir: tempfile::TempDir,
    /// Directory of our binaries.
    pub bin_dir: PathBuf,
    /// The original server's executable, if installed.
    pub original: Option<PathBuf>,
    /// Where commands run.
    pub work: PathBuf,
    /// Our daemon's socket.
    pub socket: PathBuf,
    /// Our daemon's state dir.
    pub state: PathBuf,
    /// Our daemon's pid.
    pub daemon_pid: u32,
    daemon: std::process::Child,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.daemon.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.daemon.wait();
    }
}

/// The directory of this benchmark's own build (its daemon and shim lie beside it).
pub fn own_bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("binary directory")?.to_path_buf();
    for b in ["yieldshelld", "mcp-yieldshell"] {
        if !dir.join(b).is_file() {
            bail!(
                "{} not found next to the benchmark: build with `cargo build --release --workspace` (or run with `cargo run --release -p yieldshell-bench` after it)",
                b
            );
        }
    }
    Ok(dir)
}

/// Creates (or reuses) the virtualenv with the original server.
pub fn install_original(venv: &Path) -> anyhow::Result<PathBuf> {
    // Servers run in a work directory of their own: the path must not be relative.
    let venv = &std::path::absolute(venv)?;
    let exe = venv.join("bin").join("mcp-yieldshell");
    let marker = venv.join(format!(".installed-{ORIGINAL_VERSION}"));
    if exe.is_file() && marker.is_file() {
        return Ok(exe);
    }
    eprintln!(
        "installing the original mcp-yieldshell {ORIGINAL_VERSION} into {}",
        venv.display()
    );
    let status = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .context("python3 -m venv")?;
    if !status.success() {
        bail!("creating the virtualenv failed");
    }
    let status = std::process::Command::new(venv.join("bin").join("pip"))
        .args([
            "install",
            "--quiet",
            &format!("mcp-yieldshell=={ORIGINAL_VERSION}"),
        ])
        .status()
        .context("pip install")?;
    if !status.success() || !exe.is_file() {
        bail!("installing mcp-yieldshell {ORIGINAL_VERSION} failed");
    }
    std::fs::write(&marker, b"")?;
    Ok(exe)
}

impl Bench {
    /// A session straight on the daemon's control plane (no MCP), for measurements that split
    /// the shim's share of a round trip from the daemon's.
    pub fn control_session(
        &self,
        client_name: &str,
    ) -> anyhow::Result<yieldshell_proto::client::Session> {
        self.control_session_with(client_name, &[])
    }

    /// [`Bench::control_session`] with these session variables besides (a sandbox mode).
    pub fn control_session_with(
        &self,
        client_name: &str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<yieldshell_proto::client::Session> {
        let opts = yieldshell_proto::client::ConnectOptions {
            socket: self.socket.clone(),
            state_dir: Some(self.state.clone()),
            autostart: false,
            daemon_bin: None,
            client_name: client_name.into(),
            start_timeout: Duration::from_secs(10),
            deadlines: Default::default(),
        };
        // The same session limit the MCP servers get (see `command`): start-rate runs hold
        // hundreds of processes.
        let mut vars: Vec<_> = std::env::vars_os().collect();
        vars.push(("YIELDSHELL_MAX_PROCESSES".into(), "5000".into()));
        vars.extend(extra.iter().map(|(k, v)| (k.into(), v.into())));
        let config = yieldshell_proto::session_config::SessionConfig::from_vars(vars, &self.work)?;
        Ok(yieldshell_proto::client::Session::new(opts, &config))
    }

    /// Starts our daemon in a temp dir; installs the original unless `skip_original`.
    pub async fn setup(venv: &Path, skip_original: bool) -> anyhow::Result<Bench> {
        Bench::setup_in(own_bin_dir()?, venv, skip_original).await
    }

    /// [`Bench::setup`] with the daemon (and shim) of the build in `bin_dir`.
    pub async fn setup_in(
        bin_dir: PathBuf,
        venv: &Path,
        skip_original: bool,
    ) -> anyhow::Result<Bench> {
        Bench::setup_with_env(bin_dir, venv, skip_original, &[]).await
    }

    /// [`Bench::setup_in`] with these variables in the daemon's own environment (a fault that
    /// makes it act as on another machine).
    pub async fn setup_with_env(
        bin_dir: PathBuf,
        venv: &Path,
        skip_original: bool,
        daemon_env: &[(&str, &str)],
    ) -> anyhow::Result<Bench> {
        let original = if skip_original {
            None
        } else {
            Some(install_original(venv)?)
        };
        // /tmp unless TMPDIR says otherwise: a short path (socket addresses are ~107 bytes at
        // most), and TMPDIR lets a run use a tmpfs, away from one filesystem's cost of creating
        // files (docs/BENCHMARKS.md).
        let root = std::env::var_os("TMPDIR").map_or_else(|| "/tmp".into(), PathBuf::from);
        let dir = tempfile::Builder::new().prefix("ysb-").tempdir_in(root)?;
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work)?;
        let socket = dir.path().join("run").join("d.sock");
        let state = dir.path().join("state");
        let config = dir.path().join("config.toml");
        // The benchmark runs up to 1000 processes at once.
        std::fs::write(&config, "max_running_processes = 5000\n")?;
        let daemon = std::process::Command::new(bin_dir.join("yieldshelld"))
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state)
            .arg("--config")
            .arg(&config)
            .envs(daemon_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting yieldshelld")?;
        let daemon_pid = daemon.id();
        let opts = yieldshell_proto::client::ConnectOptions {
            socket: socket.clone(),
            state_dir: Some(state.clone()),
            autostart: false,
            daemon_bin: None,
            client_name: "bench".into(),
            start_timeout: Duration::from_secs(10),
            deadlines: Default::default(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while yieldshell_proto::client::connect(&opts).await.is_err() {
            if Instant::now() > deadline {
                bail!("yieldshelld did not answer");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(Bench {
            dir,
            bin_dir,
            original,
            work,
            socket,
            state,
            daemon_pid,
            daemon,
        })
    }

    /// The command starting a server of `kind`, with the environment both servers share.
    pub fn command(&self, kind: Kind) -> tokio::process::Command {
        let mut c = match kind {
            Kind::Ours => {
                let mut c = tokio::process::Command::new(self.bin_dir.join("mcp-yieldshell"));
                c.env("YIELDSHELL_SOCKET", &self.socket)
                    .env("YIELDSHELL_STATE_DIR", &self.state)
                    .env("YIELDSHELL_NO_AUTOSTART", "1");
                c
            }
            Kind::Original => tokio::process::Command::new(
                self.original.clone().unwrap_or_else(|| "false".into()),
            ),
            Kind::Echo => {
                let mut c =
                    tokio::process::Command::new(std::env::current_exe().unwrap_or_default());
                c.arg("--echo-server");
                c
            }
        };
        c.current_dir(&self.work)
            .env("YIELDSHELL_MAX_PROCESSES", "5000")
            .env("YIELDSHELL_DEFAULT_CWD", &self.work)
            .stderr(Stdio::null())
            .kill_on_drop(true);
        c
    }
}

/// A connected MCP client and the server's pid.
pub struct Client {
    /// The rmcp client.
    pub service: RunningService<RoleClient, ()>,
    /// The server process.
    pub pid: u32,
}

impl Client {
    /// Spawns the server and completes `initialize`.
    pub async fn start(cmd: tokio::process::Command) -> anyhow::Result<Client> {
        // The original server logs every request to stderr; keep the table readable.
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()?;
        let pid = transport.id().unwrap_or(0);
        let service = ().serve(transport).await?;
        Ok(Client { service, pid })
    }

    /// One tool call; the structured body, or an error for protocol failures and error results.
    pub async fn call(&self, tool: &str, args: Value) -> anyhow::Result<Value> {
        let Value::Object(map) = args else {
            bail!("arguments must be an object");
        };
        let r: CallToolResult = self
            .service
            .peer()
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(map))
            .await?;
        let body = body_of(&r);
        if r.is_error == Some(true) {
            let text: Vec<String> = r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            bail!("{tool} failed: {body} {}", text.join(" "));
        }
        Ok(body)
    }

    /// Closes the session.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The JSON body of a tool result: its structured content, else the JSON in its text block
/// (the original server returns text only).
pub fn body_of(r: &CallToolResult) -> Value {
    r.structured_content
        .clone()
        .or_else(|| {
            r.content
                .iter()
                .find_map(|c| c.as_text().and_then(|t| serde_json::from_str(&t.text).ok()))
        })
        .unwrap_or(Value::Null)
}

/// Resident memory of a process, in bytes (VmRSS).
pub fn rss(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:") * 1024
}

/// Peak resident memory since the last [`reset_peak`], in bytes (VmHWM).
pub fn peak_rss(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

/// Resets a process's peak-RSS counter (Linux `clear_refs` 5).
pub fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), b"5");
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
