//! Which process a pid is: its pid paired with its start time ([`Identity`]), read from
//! `/proc/<pid>/stat` on Linux (field 22) or `proc_pidinfo` on macOS, so that a pid the kernel
//! has handed to another process since is never taken for the one we started. Also the other
//! fields of that reading the daemon uses ([`ProcStat`]: parent, group, session, terminal's
//! foreground group, state).
//!
//! Below the holder and the daemon's process handling: the holder identifies the shell it
//! starts, the daemon every process it signals.

/// A process identified by pid and start time, immune to pid reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Process id.
    pub pid: i32,
    /// Start time (0 where unknown), in the platform's unit: clock ticks after boot on Linux,
    /// microseconds since the epoch on macOS. Only compared with readings on the same machine.
    pub start_time: u64,
}

/// Fields of `/proc/<pid>/stat` (Linux) or `proc_bsdinfo` (macOS) we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Parent pid.
    pub ppid: i32,
    /// Process group.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
    /// The foreground process group of its controlling terminal (`-1`, or `0` on macOS, when it
    /// has none).
    pub tpgid: i32,
    /// State letter (`R`, `S`, `Z`, …).
    pub state: u8,
    /// Start time, in the unit of [`Identity::start_time`].
    pub start_time: u64,
}

impl ProcStat {
    /// Alive means: not a zombie and not dead. A zombie has finished; it only waits to be
    /// reaped, which our reaper does.
    #[cfg(unix)]
    pub fn is_alive(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so parsing starts after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.as_bytes().first().copied()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Field 7 is tty_nr, 8 tpgid; fields 9..=21 precede starttime (field 22).
    let tpgid = fields.nth(1)?.parse().ok()?;
    let start_time = fields.nth(13)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        pgrp,
        session,
        tpgid,
        state,
        start_time,
    })
}

/// Reads `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Reads `proc_pidinfo` and `getsid` (macOS).
#[cfg(target_os = "macos")]
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    read_stat_darwin(pid)
}

/// Without a process table read here (Windows, other Unixes), no stat is available.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn read_stat(_pid: i32) -> Option<ProcStat> {
    None
}

/// The identity of a live process now.
#[cfg(unix)]
pub fn identify(pid: i32) -> Option<Identity> {
    if cfg!(any(target_os = "linux", target_os = "macos")) {
        let stat = read_stat(pid)?;
        stat.is_alive().then_some(Identity {
            pid,
            start_time: stat.start_time,
        })
    } else {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            .ok()
            .map(|()| Identity { pid, start_time: 0 })
    }
}

/// Windows records no start time, so a pid alone is never verified (as
/// `process/tree_windows.rs` says): nothing is known.
#[cfg(not(unix))]
pub fn identify(_pid: i32) -> Option<Identity> {
    None
}

/// The identity of our own child `pid`, which may have exited already (a zombie until we reap
/// it): its start time is still there to read. [`identify`] would give nothing for a zombie,
/// and an identity without a start time matches whatever process takes the pid next — a `stop`
/// would then signal a stranger's group.
#[cfg(unix)]
pub fn identify_child(pid: i32) -> Identity {
    let start_time = if cfg!(any(target_os = "linux", target_os = "macos")) {
        read_stat(pid).map_or(0, |s| s.start_time)
    } else {
        0
    };
    Identity { pid, start_time }
}

/// Whether this exact process (same pid *and* start time) is still alive.
pub fn is_alive(id: Identity) -> bool {
    identify(id.pid).is_some_and(|now| id.start_time == 0 || now.start_time == id.start_time)
}

/// `proc_bsdinfo` of `pid`, `None` if it is gone or a zombie.
#[cfg(target_os = "macos")]
pub(crate) fn bsd_info(pid: i32) -> Option<libc::proc_bsdinfo> {
    let size = std::mem::size_of::<libc::proc_bsdinfo>();
    // SAFETY: an all-zero proc_bsdinfo is a valid value of this plain C struct.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer is a proc_bsdinfo of the size passed; argument 0 excludes zombies.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            (&raw mut info).cast(),
            libc::c_int::try_from(size).ok()?,
        )
    };
    (usize::try_from(got).ok() == Some(size)).then_some(info)
}

/// The fields of a live process the daemon uses; `None` when it is gone or a zombie.
#[cfg(target_os = "macos")]
fn read_stat_darwin(pid: i32) -> Option<ProcStat> {
    let info = bsd_info(pid)?;
    // SAFETY: getsid has no memory preconditions.
    let session = unsafe { libc::getsid(pid) };
    let state = match info.pbi_status {
        libc::SIDL => b'I',
        libc::SRUN => b'R',
        libc::SSLEEP => b'S',
        libc::SSTOP => b'T',
        libc::SZOMB => b'Z',
        _ => b'?',
    };
    Some(ProcStat {
        ppid: i32::try_from(info.pbi_ppid).ok()?,
        pgrp: i32::try_from(info.pbi_pgid).ok()?,
        // A process that exited between the two calls has no session: -1 matches no group.
        session: if session < 0 { -1 } else { session },
        tpgid: i32::try_from(info.e_tpgid).unwrap_or(0),
        state,
        start_time: info
            .pbi_start_tvsec
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec),
    })
}
