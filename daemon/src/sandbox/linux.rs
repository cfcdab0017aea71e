//! Applying a [`Plan`] (Linux), in the command's own process just before it `exec`s the shell:
//! the launcher (`crate::holder::launcher`) or a process the holder forked for a terminal. The
//! caller is single-threaded (a fork of the one-threaded holder), so namespaces can be entered
//! and every restriction covers the whole process.
//!
//! In order, because each step needs what the previous one leaves:
//! 1. the private temp dir (0700) is made;
//! 2. with namespaces: a user namespace mapping only the caller's own uid and gid, a mount
//!    namespace (every mount private) and, unless the network is on, a network namespace whose
//!    loopback is brought up; in it the `.git` directories and the socket directory are
//!    bind-mounted read-only onto themselves, the daemon's state directory is covered by an empty
//!    tmpfs with the temp dir bound back, `/dev/shm` gets a tmpfs of its own, and an allowlist's
//!    proxy listener is bound on `127.0.0.1:3128` there;
//! 3. every capability goes (the bounding set too, so root keeps none across `exec`);
//! 4. `no_new_privs`, then Landlock: writes only beneath the writable roots, the temp dir and a
//!    few devices (when files are restricted); TCP only to the proxy's port, or none (network
//!    restricted without a network namespace); no signals to processes outside the sandbox and no
//!    abstract Unix sockets outside it (Landlock ABI 6 and newer);
//! 5. seccomp: the marker that tells a sandboxed caller apart ([`MARKER_PRCTL`]), no io_uring
//!    (whose operations seccomp cannot see), no x32 system calls (numbers seccomp's rules do not
//!    match), and, without a network namespace, no sockets but Unix and netlink ones (network off)
//!    or only TCP ones besides those (allowlist: UDP and raw sockets refused).
//!
//! Landlock cannot stop `chmod`/`chown`/`utime` of files outside the writable roots, nor
//! connections to other Unix sockets of the user below ABI 9: the README's "Sandbox" says so.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::plan::{NetPlan, Plan};

/// The newest Landlock ABI this code asks for and is tested against: features of later ABIs
/// (9 restricts connecting to pathname Unix sockets) are left out rather than enabled untested.
/// Best effort below it: an older kernel gets what it supports.
const LANDLOCK_ABI: ABI = ABI::V7;

/// `prctl` option no kernel defines ("YSBX"): outside a sandbox it fails with `EINVAL`, inside
/// one the seccomp filter answers [`MARKER_ERRNO`]. A process cannot drop its seccomp filters, so
/// this tells a sandboxed process from one that is not, whatever it did to its environment.
pub const MARKER_PRCTL: libc::c_int = 0x5953_4258;
/// What the marker `prctl` returns inside a sandbox.
pub const MARKER_ERRNO: i32 = libc::EOWNERDEAD;

/// Whether the calling process runs inside a YieldShell sandbox ([`MARKER_PRCTL`]).
pub fn inside_a_sandbox() -> bool {
    // SAFETY: an unknown prctl option only returns an error; no memory is passed.
    let rc = unsafe { libc::prctl(MARKER_PRCTL, 0, 0, 0, 0) };
    rc == -1 && io::Error::last_os_error().raw_os_error() == Some(MARKER_ERRNO)
}

/// Applies `plan` to the calling process; `terminal` is the path of its terminal's slave, if it
/// runs on one (it stays writable). Returns the proxy's listener when the plan made one (a
/// namespaced allowlist): the caller hands it to the daemon, which serves the proxy on it.
pub fn enter(plan: &Plan, terminal: Option<&Path>) -> io::Result<Option<OwnedFd>> {
    make_private_dir(&plan.tmp)?;
    let mut listener = None;
    if plan.namespaces {
        enter_namespaces(plan)?;
        if let NetPlan::Proxy { port } = plan.network {
            let l = std::net::TcpListener::bind(("127.0.0.1", port))?;
            listener = Some(OwnedFd::from(l));
        }
    }
    drop_capabilities();
    restrict(plan, terminal)?;
    filter_system_calls(plan)?;
    Ok(listener)
}

/// The probe's trial (`super::probe`): enters the namespaces a sandboxed command would, mounts
/// a tmpfs and a read-only bind in them and brings up loopback. Only for a process that exits
/// right after (the holder binary in its probe mode).
pub fn try_namespaces() -> io::Result<()> {
    let probe = Plan {
        restrict_files: true,
        writable: Vec::new(),
        tmp: PathBuf::from("/tmp"),
        read_only: vec![PathBuf::from("/")],
        hidden: vec![PathBuf::from("/tmp")],
        rebound: Vec::new(),
        network: NetPlan::Off,
        namespaces: true,
    };
    enter_namespaces(&probe)
}

/// Creates `dir` (0700) if it does not exist.
fn make_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("creating the private temp dir {}: {e}", dir.display()),
        )),
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains a NUL byte"))
}

/// `mount(2)`, with the path in the error.
fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let target_c = cpath(target)?;
    let source_c = source.map(CString::new).transpose()?;
    let fstype_c = fstype.map(CString::new).transpose()?;
    let data_c = data.map(CString::new).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or null.
    let rc = unsafe {
        libc::mount(
            ptr(&source_c),
            target_c.as_ptr(),
            ptr(&fstype_c),
            flags,
            ptr(&data_c).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("mounting on {}: {e}", target.display()),
        ))
    }
}

fn write_file(path: &str, text: &str) -> io::Result<()> {
    std::fs::write(path, text).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// Steps 2 of the module doc.
fn enter_namespaces(plan: &Plan) -> io::Result<()> {
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if plan.network != NetPlan::On {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    if unsafe { libc::unshare(flags) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("entering user and mount namespaces: {e}"),
        ));
    }
    // An unprivileged process may map only its own ids, and only once setgroups is denied.
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_file("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    // Nothing mounted here may reach the outer namespace.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    for path in &plan.read_only {
        bind_read_only(path, path)?;
    }
    // Descriptors of what is bound back, opened before the tmpfs covers their paths.
    let keep = |p: &Path| -> io::Result<OwnedFd> {
        let c = cpath(p)?;
        // SAFETY: a NUL-terminated path; the descriptor returned is ours.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display())));
        }
        // SAFETY: a descriptor just opened and owned by nobody else.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    };
    let tmp = keep(&plan.tmp)?;
    let rebound: Vec<(PathBuf, OwnedFd)> = plan
        .rebound
        .iter()
        .map(|p| keep(p).map(|fd| (p.clone(), fd)))
        .collect::<io::Result<_>>()?;
    for hidden in &plan.hidden {
        mount(
            Some("tmpfs"),
            hidden,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=0700,size=64k,nr_inodes=1k"),
        )?;
    }
    let covered = |p: &Path| plan.hidden.iter().any(|h| p.starts_with(h));
    if covered(&plan.tmp) {
        std::fs::create_dir_all(&plan.tmp)?;
        bind_fd(&tmp, &plan.tmp, false)?;
    }
    for (path, fd) in &rebound {
        std::fs::create_dir_all(path)?;
        bind_fd(fd, path, true)?;
    }
    // Shared memory of its own, not the user's: semaphores and shm_open work, and touch no one's.
    let shm = Path::new("/dev/shm");
    if plan.restrict_files && shm.is_dir() {
        mount(
            Some("tmpfs"),
            shm,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=0700,size=64m"),
        )?;
    }
    if plan.network != NetPlan::On {
        loopback_up()?;
    }
    Ok(())
}

/// Bind-mounts `source` onto `target`, then makes the bind read-only, keeping the flags the
/// original mount locks in a user namespace (nosuid, nodev, noexec, the atime ones): a remount
/// that drops one is refused.
fn bind_read_only(source: &Path, target: &Path) -> io::Result<()> {
    mount(
        Some(&source.to_string_lossy()),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    remount_read_only(target)
}

fn remount_read_only(target: &Path) -> io::Result<()> {
    let c = cpath(target)?;
    // SAFETY: statvfs writes one struct into a valid out-pointer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let locked = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(st_flag, _)| st.f_flag & *st_flag != 0)
    .fold(0, |flags, (_, ms)| flags | ms);
    mount(
        None,
        target,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked,
        None,
    )
}

/// Bind-mounts the directory open as `fd` (an `O_PATH` descriptor taken before its path was
/// covered) onto `target`; read-only when `read_only`.
fn bind_fd(fd: &OwnedFd, target: &Path, read_only: bool) -> io::Result<()> {
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    mount(
        Some(&source),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    if read_only {
        remount_read_only(target)?;
    }
    Ok(())
}

/// Brings up `lo` in the new network namespace (it starts down), so loopback works inside.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket for the interface ioctls, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just opened and is owned here.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(sock) };
    // SAFETY: an all-zero ifreq is a valid value of this plain C struct.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq passed, which lives here.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("bringing up lo: {e}")));
        }
    }
    Ok(())
}

/// Step 3: no capability survives into the command, not even root's across `exec` (an empty
/// bounding set gives an exec'd root nothing). Best effort: without `CAP_SETPCAP` (an
/// unprivileged caller outside a user namespace) there is nothing to drop.
fn drop_capabilities() {
    // SAFETY: prctl and capset only change this process's capability sets; the capset
    // structures are valid and zeroed (no capability).
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                break;
            }
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        // _LINUX_CAPABILITY_VERSION_3: two data structs (64 capabilities).
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr());
    }
}

/// Step 4: `no_new_privs` and the Landlock ruleset.
fn restrict(plan: &Plan, terminal: Option<&Path>) -> io::Result<()> {
    let to_io = |e: landlock::RulesetError| io::Error::other(format!("Landlock: {e}"));
    let write = AccessFs::from_write(LANDLOCK_ABI);
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if plan.restrict_files {
        ruleset = ruleset.handle_access(write).map_err(to_io)?;
    }
    let landlock_network = !plan.namespaces && plan.network != NetPlan::On;
    if landlock_network {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(to_io)?;
    }
    let mut created = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(to_io)?
        .create()
        .map_err(to_io)?;
    if plan.restrict_files {
        let mut paths: Vec<&Path> = plan.writable.iter().map(PathBuf::as_path).collect();
        paths.push(&plan.tmp);
        paths.extend(terminal);
        // Files every program may write whatever it was granted (best effort: a missing one is
        // skipped). The private /dev/shm exists only with namespaces.
        let devices = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/tty",
            "/dev/ptmx",
        ];
        paths.extend(devices.iter().map(Path::new));
        if plan.namespaces {
            paths.push(Path::new("/dev/shm"));
        }
        for path in paths {
            let fd = match PathFd::new(path) {
                Ok(fd) => fd,
                Err(_) if !path.exists() => continue,
                Err(e) => return Err(io::Error::other(format!("Landlock: {e}"))),
            };
            created = created
                .add_rule(PathBeneath::new(fd, write))
                .map_err(to_io)?;
        }
    }
    if landlock_network && let NetPlan::Proxy { port } = plan.network {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(to_io)?;
    }
    let status = created.restrict_self().map_err(to_io)?;
    if !status.no_new_privs {
        return Err(io::Error::other("no_new_privs could not be set"));
    }
    Ok(())
}

/// One seccomp filter: `rules` answer `errno`, everything else is allowed.
fn install(rules: Vec<(i64, Vec<seccompiler::SeccompRule>)>, errno: i32) -> io::Result<()> {
    fn to_io(e: impl std::fmt::Display) -> io::Error {
        io::Error::other(format!("seccomp: {e}"))
    }
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).map_err(to_io)?;
    let filter = seccompiler::SeccompFilter::new(
        rules.into_iter().collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(to_io)?;
    let program: seccompiler::BpfProgram = filter.try_into().map_err(to_io)?;
    seccompiler::apply_filter(&program).map_err(to_io)
}

fn arg_is(
    index: u8,
    op: seccompiler::SeccompCmpOp,
    value: u64,
) -> io::Result<seccompiler::SeccompCondition> {
    seccompiler::SeccompCondition::new(index, seccompiler::SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| io::Error::other(format!("seccomp: {e}")))
}

fn rule(conditions: Vec<seccompiler::SeccompCondition>) -> io::Result<seccompiler::SeccompRule> {
    seccompiler::SeccompRule::new(conditions).map_err(|e| io::Error::other(format!("seccomp: {e}")))
}

/// Step 5 of the module doc.
fn filter_system_calls(plan: &Plan) -> io::Result<()> {
    use seccompiler::SeccompCmpOp::{Eq, MaskedEq, Ne};
    x32_guard()?;
    install(
        vec![(
            libc::SYS_prctl,
            vec![rule(vec![arg_is(0, Eq, MARKER_PRCTL as u64)?])?],
        )],
        MARKER_ERRNO,
    )?;
    install(
        vec![
            (libc::SYS_io_uring_setup, vec![]),
            (libc::SYS_io_uring_enter, vec![]),
            (libc::SYS_io_uring_register, vec![]),
        ],
        libc::ENOSYS,
    )?;
    if plan.namespaces {
        // The network namespace holds the network back; sockets inside it reach only loopback.
        return Ok(());
    }
    let domain_not = |d: libc::c_int| arg_is(0, Ne, d as u64);
    match plan.network {
        NetPlan::On => Ok(()),
        NetPlan::Off => install(
            vec![(
                libc::SYS_socket,
                vec![rule(vec![
                    domain_not(libc::AF_UNIX)?,
                    domain_not(libc::AF_NETLINK)?,
                ])?],
            )],
            libc::EPERM,
        ),
        NetPlan::Proxy { .. } => {
            // Landlock allows TCP to the proxy's port only; here every other family is refused,
            // and every IP socket that is not a stream socket (UDP, raw, …): seccompiler has no
            // "masked not-equal", so the other socket types (the type's low four bits; flags
            // sit above them) are listed.
            let mut refused = vec![rule(vec![
                domain_not(libc::AF_UNIX)?,
                domain_not(libc::AF_NETLINK)?,
                domain_not(libc::AF_INET)?,
                domain_not(libc::AF_INET6)?,
            ])?];
            for family in [libc::AF_INET, libc::AF_INET6] {
                for ty in (0..16u64).filter(|t| *t != libc::SOCK_STREAM as u64) {
                    refused.push(rule(vec![
                        arg_is(0, Eq, family as u64)?,
                        arg_is(1, MaskedEq(0xf), ty)?,
                    ])?);
                }
            }
            install(vec![(libc::SYS_socket, refused)], libc::EPERM)
        }
    }
}

/// A hand-written four-instruction filter (seccompiler matches exact numbers): any system call
/// of the x32 ABI (its numbers have bit 30 set, on the x86-64 audit arch) fails with `ENOSYS`,
/// so the rules above cannot be bypassed through its numbering. A no-op elsewhere.
fn x32_guard() -> io::Result<()> {
    if !cfg!(target_arch = "x86_64") {
        return Ok(());
    }
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    let filter = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    let program = [
        // A = seccomp_data.nr (offset 0)
        filter(BPF_LD_W_ABS, 0, 0, 0),
        // if A >= 0x40000000 fall through to ENOSYS, else skip to ALLOW
        filter(BPF_JGE_K, 0, 1, 0x4000_0000),
        filter(
            BPF_RET_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
        filter(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    seccompiler::apply_filter(&program).map_err(|e| io::Error::other(format!("seccomp: {e}")))
}

/// Whether process `pid` is held more tightly than this one: `no_new_privs` this one lacks, or
/// more seccomp filters (from `/proc/<pid>/status`; a sandboxed command cannot lower either, and
/// ours adds several to whatever another tool's sandbox or the service manager gave both).
/// `None` when either cannot be read (the process is gone).
pub fn more_confined_than_me(pid: i32) -> Option<bool> {
    let level = |pid: &str| -> Option<(u32, u32)> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        };
        Some((field("NoNewPrivs:"), field("Seccomp_filters:")))
    };
    let (peer, me) = (level(&pid.to_string())?, level("self")?);
    Some(peer.0 > me.0 || peer.1 > me.1)
}
