//! `yieldshell-holder`: the per-process holder (DESIGN §10), started by `yieldshelld` for each
//! managed process. The same code as `yieldshelld hold` (`yieldshelld::holder::serve`), in a
//! binary that links nothing else, so each held process costs little memory.

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    yieldshelld::holder::serve::main()
}

/// Windows has no holders (processes end with the daemon); the binary exists only because a
/// Cargo target cannot be left out per platform.
#[cfg(windows)]
fn main() -> std::process::ExitCode {
    eprintln!("yieldshell-holder: there are no holders on Windows; nothing to do");
    std::process::ExitCode::from(2)
}
