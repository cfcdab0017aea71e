//! MCP clients nobody here wrote, run by node against the built shim: the official TypeScript
//! SDK 1.x (`tests/clients/ts-sdk`, every package pinned by its lock file), installed once per
//! test run with `npm ci` into the target directory, and driven by its `client.mjs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{TestDaemon, bin, require_tool};

/// Where the TypeScript SDK client is installed, once per test binary.
static TS_SDK: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The sources of the TypeScript SDK client.
fn ts_sdk_sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/ts-sdk")
}

/// The installed TypeScript SDK client: `package.json`, its lock and `client.mjs` copied into
/// the target directory (`client.mjs` must sit beside its `node_modules`), then `npm ci`.
fn ts_sdk() -> PathBuf {
    let mut installed = TS_SDK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = installed.as_ref() {
        return dir.clone();
    }
    let npm = require_tool("npm", "npm");
    let dir = bin("mcp-yieldshell")
        .parent()
        .expect("target dir")
        .join("e2e-clients/ts-sdk");
    std::fs::create_dir_all(&dir).expect("client dir");
    let mut changed = false;
    for name in ["package.json", "package-lock.json", "client.mjs"] {
        let source = std::fs::read(ts_sdk_sources().join(name)).expect("client source");
        let target = dir.join(name);
        if std::fs::read(&target).ok().as_ref() != Some(&source) {
            std::fs::write(&target, &source).expect("copy the client");
            changed |= name != "client.mjs";
        }
    }
    if changed || !dir.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
        let out = Command::new(npm)
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .expect("run npm ci");
        assert!(
            out.status.success(),
            "npm ci of the TypeScript SDK failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    *installed = Some(dir.clone());
    dir
}

/// What the client printed: one `(kind, value)` per JSON line.
pub type Events = Vec<(String, Value)>;

/// The first event of `kind`.
pub fn event<'a>(events: &'a Events, kind: &str) -> &'a Value {
    events
        .iter()
        .find(|(k, _)| k == kind)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {kind:?} event in {events:#?}"))
}

/// Every event of `kind`, in order.
pub fn events_of<'a>(events: &'a Events, kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|(k, _)| k == kind)
        .map(|(_, v)| v)
        .collect()
}

/// Runs the TypeScript SDK client in `mode` with the `exec` arguments `args` against the shim
/// of `d` (in its project directory), and returns what it printed. It must end within
/// `limit`; a client still running then is killed and the test fails.
pub fn ts_sdk_client(d: &TestDaemon, mode: &str, args: &Value, limit: Duration) -> Events {
    let node = require_tool("node", "nodejs");
    let dir = ts_sdk();
    let mut child = Command::new(node)
        .arg(dir.join("client.mjs"))
        .arg(mode)
        .arg(args.to_string())
        .env("MCP_SHIM", bin("mcp-yieldshell"))
        .env("YIELDSHELL_SOCKET", &d.socket)
        .env("YIELDSHELL_STATE_DIR", &d.state)
        .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .current_dir(d.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    // Read while it runs, so a full pipe never stalls it.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<_>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<_>));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the TypeScript SDK client did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    assert!(
        status.success(),
        "the TypeScript SDK client failed ({status}): {stdout}\n{stderr}"
    );
    stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line from the client ({e}): {line}"));
            (
                v["kind"].as_str().unwrap_or_default().to_string(),
                v["value"].clone(),
            )
        })
        .collect()
}
