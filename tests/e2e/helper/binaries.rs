//! The binaries under test: where `cargo build --workspace` put them, a refusal to test one
//! older than its sources, and running one to completion (`run`, `json`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace directories a product binary is built from: its own crate, the crates it
/// depends on, and files it compiles in (`yieldctl` embeds the unit files of `packaging/`).
///
/// Per binary, because `cargo build --workspace` relinks only the binaries whose inputs changed:
/// after an edit to `cli/` alone, `yieldshelld` is rightly left as it was.
fn source_dirs(name: &str) -> &'static [&'static str] {
    match name {
        "yieldshelld" => &["proto", "daemon"],
        // Only the unit files: the rest of `packaging/` (release.sh, the wheel's and npm's
        // manifests) is not compiled in, and editing it must not make yieldctl look stale.
        "yieldctl" => &["proto", "cli", "packaging/systemd", "packaging/launchd"],
        "mcp-yieldshell" => &["proto", "shim"],
        _ => &[
            "proto",
            "daemon",
            "cli",
            "shim",
            "packaging/systemd",
            "packaging/launchd",
        ],
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

/// Path of a Windows binary of this workspace (`<name>.exe`, built by `cargo build --target
/// x86_64-pc-windows-gnu`; `.ci/run` builds them before the Wine tests). Like [`bin`], one older
/// than its sources is refused. `YIELDSHELL_WINDOWS_PROFILE` names the cargo profile (default
/// `debug`): `.ci/run` builds and tests the `dist-check` binaries, which `packaging/release.sh`
/// then packs, so CI compiles the Windows build once.
pub fn windows_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir");
    let profile =
        std::env::var("YIELDSHELL_WINDOWS_PROFILE").unwrap_or_else(|_| "debug".to_string());
    let path = target
        .join("x86_64-pc-windows-gnu")
        .join(&profile)
        .join(format!("{name}.exe"));
    let build = format!(
        "cargo build --target x86_64-pc-windows-gnu --profile {} --workspace --exclude yieldshell-tests --exclude yieldshell-bench --bins",
        if profile == "debug" { "dev" } else { &profile }
    );
    assert!(
        path.is_file(),
        "{} is missing: run `{build}` first",
        path.display()
    );
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("binary mtime");
    assert!(
        built >= newest_source(name),
        "{} is older than its sources: run `{build}` first",
        path.display()
    );
    path
}

/// The test helper program.
pub fn testbin() -> String {
    bin("yieldshell-testbin").display().to_string()
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
