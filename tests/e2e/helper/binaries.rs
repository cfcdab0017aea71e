//! The binaries under test: where `cargo build --workspace` put them, a refusal to test one
//! older than its sources, and running one to completion (`run`, `json`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Newest modification time of the files `binary` was built from, as cargo recorded them in its
/// dep-info file beside it (`<name>.d`: `target: dep dep …`, spaces in paths escaped). That list
/// is exactly what the compiler read for this target — a Linux-only module edited after a
/// Windows build is not in the Windows binary's list, so it does not make the `.exe` look stale
/// (a walk over the crate directories did). Files gone since count as changed.
fn newest_source(binary: &Path) -> std::time::SystemTime {
    let dep_info = binary.with_extension("d");
    let text = std::fs::read_to_string(&dep_info).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo writes it with the binary: rebuild)",
            dep_info.display()
        )
    });
    let deps = text
        .lines()
        .find_map(|l| l.split_once(": "))
        .map_or("", |(_, deps)| deps);
    let mut newest = std::time::UNIX_EPOCH;
    let mut path = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek().is_some_and(|n| *n == ' ' || *n == '\\') => {
                path.extend(chars.next());
            }
            ' ' => newest = newest.max(modified(&std::mem::take(&mut path))),
            c => path.push(c),
        }
    }
    newest.max(modified(&path))
}

/// A dependency's modification time; a missing one as "now" (it changed), none for "".
fn modified(path: &str) -> std::time::SystemTime {
    if path.is_empty() {
        return std::time::UNIX_EPOCH;
    }
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| std::time::SystemTime::now())
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
            built >= newest_source(&path),
            "{} is older than its sources: run `cargo build --workspace` before the tests",
            path.display()
        );
    }
    path
}

/// Path of a Windows binary of this workspace (`<name>.exe`, built by `cargo build --target
/// x86_64-pc-windows-gnu`; `.ci/test-extra windows` builds them before the Wine tests). Like [`bin`], one older
/// than its sources is refused. `YIELDSHELL_WINDOWS_PROFILE` names the cargo profile (default
/// `debug`): `.ci/test-extra` builds and tests the `dist-check` binaries, which `packaging/release.sh`
/// then packs, so CI compiles the Windows build once. `YIELDSHELL_WINDOWS_TARGET_DIR` names the
/// target directory that build used, when not this one (CI builds the release artifacts in a
/// directory of their own, in parallel with the tests).
pub fn windows_bin(name: &str) -> PathBuf {
    let target = match std::env::var_os("YIELDSHELL_WINDOWS_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()
            .expect("current exe")
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .expect("target dir")
            .to_path_buf(),
    };
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
        built >= newest_source(&path),
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
