//! Unit tests that must run in a process of their own (they change the process's directory,
//! or measure its heap): the test re-runs its own test binary on itself, with a marker variable
//! set, and in that child process the marker makes it do the work instead.
//!
//! One test, not a parent and an ignored "child" test: `cargo test -- --ignored` (which the
//! extra tiers run, see `.ci/test-extra`) must never pick up a half that fails on its own.

/// In the test `test` (its full path, e.g. `spawn::shell::tests::name`): when `marker_var`
/// is unset, runs this test binary again on `test` alone with `marker_var` set and asserts that
/// it succeeded and printed `expected`; when set (that child), runs `body`, which prints
/// `expected` on success.
pub fn in_own_process(test: &str, marker_var: &str, expected: &str, body: impl FnOnce()) {
    if std::env::var_os(marker_var).is_some() {
        body();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env(marker_var, "1")
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(expected), "{stdout}");
    // The child ran the test once: a filter that matched nothing would print no line at all.
    assert!(stdout.contains("1 passed"), "{stdout}");
}
