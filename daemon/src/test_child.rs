//! Unit tests that must run in a process of their own (they change the process's directory,
//! or measure its heap): the test re-runs its own test binary on one ignored "child" test, which
//! does the work only when the marker variable is set, and checks what the child printed.

/// Runs the ignored test `child_test` of this test binary in a new process with `marker_var`
/// set, and asserts that it succeeded and printed `expected`.
pub fn run_in_child(child_test: &str, marker_var: &str, expected: &str) {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "--ignored",
            child_test,
            "--test-threads=1",
            "--nocapture",
        ])
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
}
