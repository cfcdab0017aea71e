//! What this machine's kernel lets a sandbox use (Linux): Landlock's ABI, and whether an
//! unprivileged process may have user, mount and network namespaces. The answer decides how a
//! grant is enforced (`super::plan::build`), so it is found out by trying, not guessed from
//! sysctls: Debian's `unprivileged_userns_clone`, Ubuntu's AppArmor restriction and container
//! seccomp profiles each refuse differently.
//!
//! The trial runs in a process of its own, the holder binary in its probe mode
//! ([`PROBE_ARG`], [`main`]), which enters the namespaces, mounts in them, brings up loopback
//! and exits: nothing of the daemon is changed. The daemon runs it once, on its first sandboxed
//! `exec` (`crate::holder::start::sandbox_kernel`).

/// Argument that turns the holder binary into the probe.
pub const PROBE_ARG: &str = "sandbox-probe";

/// Landlock's ABI version on this kernel (0 when it has none or it is disabled).
pub fn landlock_abi() -> i32 {
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag only
    // returns the ABI version (or fails); no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// The probe process: tries the namespaces the way a sandboxed command enters them, prints
/// `namespaces ok` or why not, and exits.
pub fn main() -> std::process::ExitCode {
    match super::linux::try_namespaces() {
        Ok(()) => {
            println!("namespaces ok");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!("namespaces refused: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
