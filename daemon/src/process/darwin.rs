//! The macOS process table, read through libproc and `sysctl` (macOS has no `/proc`).
//!
//! What [`super::tree`] needs of a process, and where macOS keeps it:
//! - parent, process group, state and start time: `proc_pidinfo(PROC_PIDTBSDINFO)`, which fails
//!   for a zombie (without the "find zombies" argument), so a zombie reads as gone — as on Linux,
//!   where a zombie is not alive either;
//! - session: `getsid(2)` (not in `proc_bsdinfo`);
//! - the environment (for the `YIELDSHELL_PROCESS_ID` marker): `sysctl(KERN_PROCARGS2)`, which
//!   the kernel answers for processes of the caller's uid only;
//! - every pid: `proc_listallpids`;
//! - resident memory: `proc_pidinfo(PROC_PIDTASKINFO)`.
//!
//! The start time is in microseconds since the epoch (Linux: clock ticks after boot); it is only
//! ever compared with another reading on the same machine.
//!
//! Nothing here has run: it is built for macOS and linked, but this project's CI is Linux-only.
//! The parser of `KERN_PROCARGS2`'s layout is plain Rust and tested on every platform.

#[cfg(target_os = "macos")]
use crate::spawn::identity::bsd_info;

/// The owner of `pid` (its effective uid, like the owner of `/proc/<pid>` on Linux).
#[cfg(target_os = "macos")]
pub fn uid_of(pid: i32) -> Option<u32> {
    bsd_info(pid).map(|i| i.pbi_uid)
}

/// Every pid on the machine (`None` if the kernel would not list them).
#[cfg(target_os = "macos")]
pub fn all_pids() -> Option<Vec<i32>> {
    // SAFETY: a null buffer asks for the number of pids.
    let estimate = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
    let estimate = usize::try_from(estimate).ok()?;
    // Room for processes started between the two calls.
    let mut pids = vec![0i32; estimate + 64];
    let bytes = libc::c_int::try_from(pids.len() * std::mem::size_of::<i32>()).ok()?;
    // SAFETY: the buffer holds `bytes` bytes of c_int.
    let got = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(usize::try_from(got).ok()?);
    pids.retain(|p| *p > 0);
    Some(pids)
}

/// The environment of `pid` as `KEY=VALUE` entries separated by NUL bytes (the layout of Linux's
/// `/proc/<pid>/environ`); `None` for another user's process or one that is gone.
#[cfg(target_os = "macos")]
pub fn environ(pid: i32) -> Option<Vec<u8>> {
    // One `kern.argmax`-sized buffer (1 MiB by default) per thread, reused: a scan reads every
    // process of the user, and allocating and zeroing a fresh one each time would cost more
    // than the reads.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        if buf.is_empty() {
            buf.resize(args_max()?, 0);
        }
        let mut len = buf.len();
        let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, pid];
        // SAFETY: `buf` has `len` bytes; the kernel writes at most that and updates `len`.
        let rc = unsafe {
            libc::sysctl(
                mib.as_mut_ptr(),
                3,
                buf.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if rc != 0 {
            return None;
        }
        environ_of_procargs(buf.get(..len)?).map(<[u8]>::to_vec)
    })
}

/// `kern.argmax`: the largest argument and environment area, the buffer `KERN_PROCARGS2` needs.
#[cfg(target_os = "macos")]
fn args_max() -> Option<usize> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>();
    let mut mib = [libc::CTL_KERN, libc::KERN_ARGMAX];
    // SAFETY: `value` is a c_int and `len` says so.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            2,
            (&raw mut value).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0).then(|| usize::try_from(value).ok()).flatten()
}

/// Resident memory of `pid` in bytes.
#[cfg(target_os = "macos")]
pub fn resident_bytes(pid: i32) -> Option<u64> {
    let size = std::mem::size_of::<libc::proc_taskinfo>();
    // SAFETY: an all-zero proc_taskinfo is a valid value of this plain C struct.
    let mut info: libc::proc_taskinfo = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer is a proc_taskinfo of the size passed.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTASKINFO,
            0,
            (&raw mut info).cast(),
            libc::c_int::try_from(size).ok()?,
        )
    };
    (usize::try_from(got).ok() == Some(size)).then_some(info.pti_resident_size)
}

/// CPU time (user + system, nanoseconds, the whole life of `pid`) and resident memory (bytes),
/// from one `proc_pidinfo(PROC_PIDTASKINFO)`. The kernel gives the times in Mach absolute time
/// units, which are nanoseconds on Intel and ticks of `mach_timebase_info` on Apple silicon.
#[cfg(target_os = "macos")]
// libc marks `mach_timebase_info` (the struct and the call) deprecated in favour of the mach2
// crate; it is the same system call, and one use does not justify another dependency.
#[allow(deprecated)]
pub fn cpu_and_resident(pid: i32) -> Option<(u64, u64)> {
    let size = std::mem::size_of::<libc::proc_taskinfo>();
    // SAFETY: an all-zero proc_taskinfo is a valid value of this plain C struct.
    let mut info: libc::proc_taskinfo = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer is a proc_taskinfo of the size passed.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTASKINFO,
            0,
            (&raw mut info).cast(),
            libc::c_int::try_from(size).ok()?,
        )
    };
    if usize::try_from(got).ok() != Some(size) {
        return None;
    }
    let mut base = libc::mach_timebase_info { numer: 1, denom: 1 };
    // SAFETY: mach_timebase_info writes one struct into the pointer, a live local of that type.
    let rc = unsafe { libc::mach_timebase_info(&raw mut base) };
    let (numer, denom) = if rc == 0 && base.denom != 0 {
        (u128::from(base.numer), u128::from(base.denom))
    } else {
        (1, 1)
    };
    let units = u128::from(info.pti_total_user) + u128::from(info.pti_total_system);
    let ns = u64::try_from(units * numer / denom).unwrap_or(u64::MAX);
    Some((ns, info.pti_resident_size))
}

/// The environment part of a `KERN_PROCARGS2` answer, whose layout is: `argc` (a native-endian
/// 32-bit int), the executable's path and its NUL, NUL padding, `argc` NUL-terminated
/// arguments, then the environment's NUL-terminated `KEY=VALUE` strings, ended by an empty
/// string (or by the end of the buffer). The result keeps the NUL after each entry.
pub fn environ_of_procargs(buf: &[u8]) -> Option<&[u8]> {
    let argc = usize::try_from(i32::from_ne_bytes(buf.get(..4)?.try_into().ok()?)).ok()?;
    let mut at = 4;
    // The executable's path, then the padding after it.
    at += buf.get(at..)?.iter().position(|b| *b == 0)?;
    at += buf.get(at..)?.iter().position(|b| *b != 0)?;
    for _ in 0..argc {
        at += buf.get(at..)?.iter().position(|b| *b == 0)? + 1;
    }
    let env = buf.get(at..)?;
    let mut end = 0;
    while end < env.len() && env[end] != 0 {
        end += env[end..]
            .iter()
            .position(|b| *b == 0)
            .map_or(env.len() - end, |n| n + 1);
    }
    Some(&env[..end])
}

#[cfg(test)]
mod tests {
    use super::environ_of_procargs;

    fn procargs(argv: &[&str], env: &[&str], trailer: &[u8]) -> Vec<u8> {
        let mut b = i32::try_from(argv.len())
            .expect("argc")
            .to_ne_bytes()
            .to_vec();
        b.extend_from_slice(b"/bin/sh\0\0\0\0");
        for a in argv.iter().chain(env) {
            b.extend_from_slice(a.as_bytes());
            b.push(0);
        }
        b.extend_from_slice(trailer);
        b
    }

    #[test]
    fn the_environment_follows_path_padding_and_arguments() {
        let buf = procargs(
            &["sh", "-c", "sleep 5"],
            &["HOME=/h", "YIELDSHELL_PROCESS_ID=p1"],
            b"\0ptr_munge=\0\0",
        );
        let env = environ_of_procargs(&buf).expect("parsed");
        assert_eq!(env, b"HOME=/h\0YIELDSHELL_PROCESS_ID=p1\0");
    }

    #[test]
    fn an_environment_at_the_end_of_the_buffer_or_empty_is_read() {
        let buf = procargs(&["sh"], &["A=1"], b"");
        assert_eq!(environ_of_procargs(&buf), Some(&b"A=1\0"[..]));
        let buf = procargs(&["sh"], &[], b"\0");
        assert_eq!(environ_of_procargs(&buf), Some(&b""[..]));
    }

    #[test]
    fn a_truncated_answer_is_refused() {
        assert_eq!(environ_of_procargs(b"\x02\0"), None);
        let mut buf = procargs(&["sh", "-c"], &[], b"");
        buf.truncate(buf.len() - 2);
        assert_eq!(environ_of_procargs(&buf), None);
    }
}
