//! `yieldshell-holder`: the per-process holder (ARCHITECTURE.md, "Who owns what"), started by `yieldshelld` for each
//! managed process. The same code as `yieldshelld hold` (`yieldshelld::holder::serve`), in a
//! binary that links nothing else, so each held process costs little memory. As
//! `yieldshell-holder zygote` it is the daemon's holder zygote (`yieldshelld::holder::zygote`),
//! which forks the holders; as `yieldshell-holder sandbox-probe`, the trial of what the kernel
//! lets the sandbox use (`yieldshelld::sandbox::probe`).

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            yieldshelld::holder::zygote::ZYGOTE_ARG,
        ))
    {
        return yieldshelld::holder::zygote::main();
    }
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(yieldshelld::sandbox::probe::PROBE_ARG))
    {
        return yieldshelld::sandbox::probe::main();
    }
    yieldshelld::holder::serve::main()
}

/// Windows has no holders (processes end with the daemon); the binary exists only because a
/// Cargo target cannot be left out per platform.
#[cfg(windows)]
fn main() -> std::process::ExitCode {
    eprintln!("yieldshell-holder: there are no holders on Windows; nothing to do");
    std::process::ExitCode::from(2)
}
