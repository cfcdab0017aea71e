//! Test fixtures: a real `yieldshelld` in a temp dir, a control-plane client, `yieldctl` runs,
//! and process-identity checks. Waits poll against one generous [`TIMEOUT`]; nothing sleeps and
//! hopes.

#![allow(dead_code)] // each test module uses a different subset

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use yieldshell_proto::client::{ConnectOptions, Session};
use yieldshell_proto::pb;
use yieldshell_proto::session_config::SessionConfig;

/// The one timeout every poll uses: generous, because CI machines are slow and shared.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace directories a product binary is built from: its own crate, the crates it
/// depends on, and files it compiles in (`yieldctl` embeds the unit files of `packaging/`).
///
/// Per binary, because `cargo build --workspace` relinks only the binaries whose inputs changed:
/// after an edit to `cli/` alone, `yieldshelld` is rightly left as it was.
fn source_dirs(name: &str) -> &'static [&'static str] {
    match name {
        "yieldshelld" => &["proto", "daemon"],
        "yieldctl" => &["proto", "cli", "packaging"],
        "mcp-yieldshell" => &["proto", "shim"],
        _ => &["proto", "daemon", "cli", "shim", "packaging"],
    }
}

/// Newest modification time of the sources `name` is built from.
fn newest_source(name: &str) -> std::time::SystemTime {
    fn walk(dir: &Path, newest: &mut std::time::SystemTime) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, newest);
            } else if p.extension().is_some_and(|x| {
                // Sources, manifests, and the unit files `yieldctl` includes (not their README).
                ["rs", "proto", "toml", "service", "socket", "plist"]
                    .iter()
                    .any(|ext| x == *ext)
            }) && let Ok(m) = e.metadata().and_then(|m| m.modified())
            {
                *newest = (*newest).max(m);
            }
        }
    }
    type Cache = std::sync::Mutex<std::collections::HashMap<String, std::time::SystemTime>>;
    static NEWEST: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let mut cache = NEWEST
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *cache.entry(name.to_string()).or_insert_with(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut newest = std::time::UNIX_EPOCH;
        for dir in source_dirs(name) {
            walk(&root.join(dir), &mut newest);
        }
        newest
    })
}

/// Path of a binary built by this workspace (next to the test executable's `deps` dir).
///
/// `cargo test` builds the binaries of a package only for that package's own integration tests,
/// so the product binaries come from `cargo build --workspace` (the README's test command runs
/// it first). A binary older than its sources would test old code: refuse it.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf();
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests",
        path.display()
    );
    if name != "yieldshell-testbin" {
        let built = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("binary mtime");
        assert!(
            built >= newest_source(name),
            "{} is older than its sources: run `cargo build --workspace` before the tests",
            path.display()
        );
    }
    path
}

/// The test helper program.
pub fn testbin() -> String {
    bin("yieldshell-testbin").display().to_string()
}

/// Polls `check` until it returns `Some` or [`TIMEOUT`] passes.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Blocking variant of [`eventually`].
pub fn eventually_blocking<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A process identity read from `/proc`: pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pid {
    /// Process id.
    pub pid: i32,
    /// Start time (clock ticks after boot).
    pub start: u64,
}

fn stat_fields(pid: i32) -> Option<(u8, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.as_bytes()[0];
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

impl Pid {
    /// Parses `ready <pid> <start>` lines printed by the testbin.
    pub fn all_from_ready_lines(text: &str) -> Vec<Pid> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("ready ")?.split_whitespace();
                Some(Pid {
                    pid: w.next()?.parse().ok()?,
                    start: w.next()?.parse().ok()?,
                })
            })
            .collect()
    }

    /// The identity of a live process now.
    pub fn of(pid: i32) -> Option<Pid> {
        let (state, start) = stat_fields(pid)?;
        (state != b'Z' && state != b'X').then_some(Pid { pid, start })
    }

    /// Whether this very process (same start time) is alive and not a zombie.
    pub fn alive(&self) -> bool {
        matches!(stat_fields(self.pid), Some((state, start)) if start == self.start && state != b'Z' && state != b'X')
    }
}

/// Live processes whose environment carries `YIELDSHELL_PROCESS_ID=<id>` (a managed process and
/// every descendant that kept its environment).
pub fn marked_processes(process_id: &str) -> Vec<i32> {
    let needle = format!("YIELDSHELL_PROCESS_ID={process_id}").into_bytes();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let alive = stat_fields(*pid).is_some_and(|(state, _)| state != b'Z' && state != b'X');
            alive
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == needle.as_slice()))
        })
        .collect()
}

/// Whether the full-size reliability runs were asked for (`YIELDSHELL_TEST_HEAVY=1`).
pub fn heavy() -> bool {
    std::env::var("YIELDSHELL_TEST_HEAVY").is_ok_and(|v| v == "1")
}

/// `light` in the normal run, `full` under `YIELDSHELL_TEST_HEAVY=1`.
pub fn size(light: usize, full: usize) -> usize {
    if heavy() { full } else { light }
}

/// Serialises the load tests of one `cargo test` run (nextest runs them in its `heavy` test
/// group instead): two floods at once would measure each other.
pub async fn heavy_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Open descriptors of a process (`/proc/<pid>/fd`).
pub fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of a process in KiB (`VmRSS`).
pub fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Zombies whose parent is `parent`.
pub fn zombies_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                let rest = &s[s.rfind(')').map_or(0, |i| i + 1)..];
                let mut f = rest.split_whitespace();
                let state = f.next().unwrap_or("");
                let ppid: i32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                state == "Z" && ppid == parent
            })
        })
        .collect()
}

/// Waits (bounded) until `parent` has no zombie children: the reaper collects them on SIGCHLD,
/// so one may be seen for an instant.
pub async fn assert_no_zombies(parent: i32) {
    eventually("no zombies of the daemon", || async {
        zombies_of(parent).is_empty().then_some(())
    })
    .await;
}

/// Latencies of repeated calls, for percentile reports.
#[derive(Debug, Default, Clone)]
pub struct Latencies(pub Vec<Duration>);

impl Latencies {
    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// The `p`-th percentile (0–100), zero without samples.
    pub fn pct(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort_unstable();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v[i.min(v.len() - 1)]
    }

    /// `n=…, p50=…, p99=…, max=…` for the test log.
    pub fn summary(&self) -> String {
        format!(
            "n={} p50={:?} p99={:?} max={:?}",
            self.0.len(),
            self.pct(50.0),
            self.pct(99.0),
            self.pct(100.0)
        )
    }
}

/// Live `yieldshelld` processes serving `socket` (found by their command line).
pub fn daemon_pids_for(socket: &Path) -> Vec<i32> {
    let needle = socket.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Pid::of(*pid).is_some()
                && args.first().is_some_and(|a| a.ends_with("yieldshelld"))
                && args.contains(&needle)
        })
        .collect()
}

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

/// A control-plane client bound to one session.
pub struct Client {
    pub session: Session,
}

/// An exec request with `NONE` side effects.
pub fn exec_req(command: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        command: command.as_bytes().to_vec(),
        side_effects: vec!["NONE".into()],
        ..Default::default()
    }
}

impl Client {
    pub fn id(&self) -> String {
        self.session.id().to_string()
    }

    pub async fn exec_with(&self, mut req: pb::ExecRequest) -> pb::ExecResponse {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.exec(req).await }
            })
            .await
            .expect("exec rpc")
    }

    /// Runs a command with a yield long enough for anything quick.
    pub async fn exec(&self, command: &str) -> pb::ExecResponse {
        self.exec_with(pb::ExecRequest {
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req(command)
        })
        .await
    }

    /// Starts a command and returns at once (yield 0): a background process id.
    pub async fn spawn_bg(&self, command: &str) -> String {
        let r = self
            .exec_with(pb::ExecRequest {
                yield_ms: Some(0),
                ..exec_req(command)
            })
            .await;
        r.process.expect("process").process_id
    }

    pub async fn read(&self, mut req: pb::ReadRequest) -> Result<pb::ReadResponse, tonic::Status> {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.read(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn read_since(&self, id: &str, since: u64, max: u64) -> pb::ReadResponse {
        self.read(pb::ReadRequest {
            process_id: id.into(),
            since_seq: Some(since),
            max_output_bytes: Some(max),
            ..Default::default()
        })
        .await
        .expect("read")
    }

    pub async fn wait(&self, mut req: pb::WaitRequest) -> Result<pb::WaitResponse, tonic::Status> {
        req.session_id = self.id();
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.wait(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    /// Waits (bounded by [`TIMEOUT`]) until the process has settled.
    pub async fn wait_exit(&self, id: &str) -> pb::WaitResponse {
        let r = self
            .wait(pb::WaitRequest {
                process_id: id.into(),
                timeout_ms: Some(TIMEOUT.as_millis() as u64),
                ..Default::default()
            })
            .await
            .expect("wait");
        assert_eq!(
            r.result,
            pb::WaitResult::Exited as i32,
            "process did not exit in time"
        );
        r
    }

    pub async fn stop(
        &self,
        id: &str,
        signal: &str,
        force_after_ms: u64,
    ) -> Result<pb::StopResponse, tonic::Status> {
        let req = pb::StopRequest {
            session_id: self.id(),
            process_id: id.into(),
            signal: signal.into(),
            force_after_ms: Some(force_after_ms),
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.stop(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn write(
        &self,
        id: &str,
        input: &[u8],
        eof: bool,
    ) -> Result<pb::WriteResponse, tonic::Status> {
        let req = pb::WriteRequest {
            session_id: self.id(),
            process_id: id.into(),
            input: input.to_vec(),
            eof,
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.write(req).await }
            })
            .await
            .map_err(rpc_status)
    }

    pub async fn list(&self, scope: pb::Scope, include_completed: bool) -> Vec<pb::ProcessInfo> {
        let req = pb::ListRequest {
            session_id: self.id(),
            include_completed,
            limit: 0,
            scope: scope as i32,
        };
        self.session
            .call(|mut c| {
                let req = req.clone();
                async move { c.list(req).await }
            })
            .await
            .expect("list")
            .processes
    }

    /// Reads everything from seq 1 by following `next_seq` with the given page size.
    pub async fn read_all(&self, id: &str, page: u64) -> (Vec<u8>, Vec<u8>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut seq = 1;
        loop {
            let r = self.read_since(id, seq, page).await;
            let o = r.output.expect("output");
            assert!(!o.truncated, "unexpected gap at seq {seq}");
            out.extend_from_slice(&o.stdout);
            err.extend_from_slice(&o.stderr);
            seq = o.next_seq;
            if !o.has_more {
                return (out, err);
            }
        }
    }

    /// Polls `read` until the process's stdout holds `n` testbin `ready` lines.
    pub async fn ready_pids(&self, id: &str, n: usize) -> Vec<Pid> {
        eventually("testbin ready lines", || async {
            let (out, _) = self.read_all(id, 1 << 20).await;
            let pids = Pid::all_from_ready_lines(&String::from_utf8_lossy(&out));
            (pids.len() >= n).then_some(pids)
        })
        .await
    }
}

fn rpc_status(e: yieldshell_proto::client::ClientError) -> tonic::Status {
    match e {
        yieldshell_proto::client::ClientError::Rpc(s) => s,
        other => panic!("unexpected client error: {other}"),
    }
}

/// Output of a finished `yieldctl` run.
pub fn run(cmd: &mut Command) -> std::process::Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.output().expect("run command")
}

/// Parses `yieldctl --json` output.
pub fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={:?} stderr={:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
