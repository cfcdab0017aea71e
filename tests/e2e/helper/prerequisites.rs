//! What a test needs from the machine beyond the workspace: a system tool on `PATH`, or root.
//!
//! Every test with such a prerequisite is `#[ignore = "needs …: run .ci/test-extra"]`, so the
//! README's test command passes on a fresh machine with only a Rust toolchain; `.ci/test-extra`
//! installs the packages and runs them (CI runs it). Inside, a missing prerequisite fails the
//! test with the fix (the package to install, or how to run), never a silent early return: a
//! test that did not run must not show green.

use std::path::PathBuf;

/// The path of `name` on `PATH`; fails the test naming the Debian `package` that provides it.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "this test needs `{name}` on PATH: install the `{package}` package \
             (Debian: `apt-get install --no-install-recommends {package}`; `.ci/test-extra` does as root)"
        )
    })
}

/// Fails the test unless it runs as root; `why` says what root is needed for.
pub fn require_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root to {why}: run the suite as root (CI does), or leave this test out \
         with `--skip`"
    );
}
