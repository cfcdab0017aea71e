//! Parsers of the `/proc` text the judgement reads: an fd's link (`pipe:[inode]`), a thread's
//! `syscall` line, an fd's `fdinfo` flags, and which syscall numbers are reads. Pure functions of
//! text, kept apart from the rules so each format is tested on kernel samples.

/// The inode of a `pipe:[inode]` fd link.
pub fn parse_pipe_link(link: &str) -> Option<u64> {
    link.trim()
        .strip_prefix("pipe:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// What `/proc/<pid>/syscall` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallState {
    /// On a CPU (`running`).
    Running,
    /// Blocked in system call `nr` with these arguments.
    Blocked {
        /// Syscall number (of the kernel's native table).
        nr: i64,
        /// Its six arguments (the fd first, for the read family).
        args: [u64; 6],
    },
    /// Not in a system call (`-1 …`: stopped in user space, say).
    Outside,
}

/// Parses `/proc/<pid>/syscall`: `running`, `-1 sp pc`, or `nr arg0 … arg5 sp pc` with the
/// arguments in hex.
pub fn parse_syscall(text: &str) -> Option<SyscallState> {
    let mut fields = text.split_ascii_whitespace();
    let first = fields.next()?;
    if first == "running" {
        return Some(SyscallState::Running);
    }
    let nr: i64 = first.parse().ok()?;
    if nr < 0 {
        return Some(SyscallState::Outside);
    }
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some(SyscallState::Blocked { nr, args })
}

/// Linux's numbers of the syscalls that read one fd's data (`read`, `readv`, `pread64`,
/// `preadv`, `preadv2`), as `/proc/<pid>/syscall` reports them.
#[cfg(target_os = "linux")]
const READ_SYSCALLS: [libc::c_long; 5] = [
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_preadv,
    libc::SYS_preadv2,
];

/// Elsewhere no process reports its syscall, so none is known to be a read.
#[cfg(all(unix, not(target_os = "linux")))]
const READ_SYSCALLS: [libc::c_long; 0] = [];

/// Whether `nr` is a read of one fd's data (one of [`READ_SYSCALLS`]).
// `c_long` is `i64` here but `i32` on 32-bit targets: the conversion is not useless there.
#[allow(clippy::useless_conversion)]
#[cfg(unix)]
pub fn is_read_syscall(nr: i64) -> bool {
    READ_SYSCALLS.iter().any(|n| i64::from(*n) == nr)
}

/// Whether `/proc/<pid>/fdinfo/<n>` describes an fd open for reading (its octal `flags` have
/// access mode `O_RDONLY` or `O_RDWR`).
#[cfg(unix)]
pub fn fdinfo_readable(text: &str) -> Option<bool> {
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())?;
    Some(matches!(
        flags & libc::O_ACCMODE,
        libc::O_RDONLY | libc::O_RDWR
    ))
}

// The tests speak Linux syscall numbers, the only ones a process reports.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::sample_process::read_syscall;
    use super::*;

    #[test]
    #[allow(clippy::useless_conversion)] // `c_long` is `i32` on 32-bit targets
    fn parses_pipe_links_syscalls_and_fdinfo() {
        assert_eq!(parse_pipe_link("pipe:[1738101]"), Some(1738101));
        assert_eq!(parse_pipe_link("pipe:[1738101]\n"), Some(1738101));
        assert_eq!(parse_pipe_link("socket:[5]"), None);
        assert_eq!(parse_pipe_link("/dev/pts/3"), None);
        assert_eq!(parse_syscall("running\n"), Some(SyscallState::Running));
        assert_eq!(
            parse_syscall("-1 0x7ffd1 0x7f2"),
            Some(SyscallState::Outside)
        );
        assert_eq!(
            parse_syscall(&read_syscall(0)),
            Some(SyscallState::Blocked {
                nr: i64::from(libc::SYS_read),
                args: [0, 0x7f4bae5d7000, 0x20000, 0x7f4bae66ab60, 0xffffffff, 0]
            })
        );
        assert_eq!(
            parse_syscall("7 0x5556c3f1ad30 0x1 0xffffffff 0x0 0x0 0x0 0x7ffcad1a4e88 0x7f9e"),
            Some(SyscallState::Blocked {
                nr: 7,
                args: [0x5556c3f1ad30, 1, 0xffffffff, 0, 0, 0]
            })
        );
        assert_eq!(parse_syscall(""), None);
        // Fewer than six arguments is not the kernel's format: not trusted.
        assert_eq!(parse_syscall("7 0x1 0x2"), None);
        #[cfg(target_os = "linux")]
        {
            assert!(is_read_syscall(i64::from(libc::SYS_read)));
            assert!(is_read_syscall(i64::from(libc::SYS_readv)));
            assert!(!is_read_syscall(i64::from(libc::SYS_wait4)));
            assert!(!is_read_syscall(i64::from(libc::SYS_write)));
        }
        let fdinfo =
            |flags: &str| format!("pos:\t0\nflags:\t{flags}\nmnt_id:\t16\nino:\t1738101\n");
        assert_eq!(fdinfo_readable(&fdinfo("00")), Some(true));
        assert_eq!(fdinfo_readable(&fdinfo("02000002")), Some(true));
        assert_eq!(fdinfo_readable(&fdinfo("01")), Some(false));
        assert_eq!(fdinfo_readable(&fdinfo("02004001")), Some(false));
        assert_eq!(fdinfo_readable("pos:\t0\n"), None);
    }
}
