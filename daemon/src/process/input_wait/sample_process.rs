//! Processes described by hand for the judgement's tests: their fd links, memory and epoll
//! `fdinfo` as a [`ProcessView`], and the `/proc` text of their syscalls.

use std::collections::HashMap;

use super::judge::{InputEndpoint, ProcessView};

/// Fds of a sample process.
#[derive(Default)]
pub(super) struct Fds {
    pub(super) links: HashMap<u64, String>,
    pub(super) readable: Option<Vec<String>>,
    /// Memory by address (a read must fall inside one region).
    pub(super) memory: HashMap<u64, Vec<u8>>,
    pub(super) fdinfo: HashMap<u64, String>,
    /// Not in its terminal's foreground group.
    pub(super) background: bool,
}

impl ProcessView for Fds {
    fn link(&self, fd: u64) -> Option<String> {
        self.links.get(&fd).cloned()
    }
    fn readable_pipes(&self) -> Option<Vec<String>> {
        self.readable.clone()
    }
    fn memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let (start, bytes) = self
            .memory
            .iter()
            .find(|(start, bytes)| **start <= addr && addr - **start < bytes.len() as u64)?;
        let from = usize::try_from(addr - start).ok()?;
        bytes.get(from..from + len).map(<[u8]>::to_vec)
    }
    fn fdinfo(&self, fd: u64) -> Option<(String, bool)> {
        self.fdinfo.get(&fd).map(|t| (t.clone(), false))
    }
    fn holds_more_than_once(&self, link: &str) -> Option<bool> {
        Some(self.links.values().filter(|l| *l == link).count() > 1)
    }
    fn in_foreground(&self) -> Option<bool> {
        Some(!self.background)
    }
}

pub(super) const STDIN: InputEndpoint = InputEndpoint::Pipe { inode: 1738101 };

pub(super) fn fds(links: &[(u64, &str)]) -> Fds {
    Fds {
        links: links.iter().map(|(f, l)| (*f, l.to_string())).collect(),
        ..Fds::default()
    }
}

/// `/proc/<pid>/syscall` of a process blocked in syscall `nr` with these first arguments.
pub(super) fn blocked_in(nr: libc::c_long, args: &[u64]) -> String {
    let mut all = [0u64; 6];
    all[..args.len()].copy_from_slice(args);
    let args: Vec<String> = all.iter().map(|a| format!("{a:#x}")).collect();
    format!("{nr} {} 0x7ffc25e0fc18 0x7f4bae7532ad", args.join(" "))
}

/// A `select` read set (whole `unsigned long` words) with these fds.
pub(super) fn select_set(fds: &[u64], words: usize) -> Vec<u8> {
    let bits = 8 * std::mem::size_of::<std::ffi::c_ulong>();
    let mut set: Vec<std::ffi::c_ulong> = vec![0; words];
    for fd in fds {
        set[*fd as usize / bits] |= 1 << (*fd as usize % bits);
    }
    set.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// A `poll` array of (fd, events).
pub(super) fn poll_array(entries: &[(i32, i16)]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|(fd, events)| {
            let mut e = fd.to_ne_bytes().to_vec();
            e.extend(events.to_ne_bytes());
            e.extend(0i16.to_ne_bytes());
            e
        })
        .collect()
}

/// `/proc/<pid>/syscall` of a process blocked in read(fd, …) (x86-64 or aarch64 number).
pub(super) fn read_syscall(fd: u64) -> String {
    format!(
        "{} {fd:#x} 0x7f4bae5d7000 0x20000 0x7f4bae66ab60 0xffffffff 0x0 0x7ffc25e0fc18 0x7f4bae7532ad",
        libc::SYS_read
    )
}

pub(super) const TTY: &str = "/dev/pts/7";

pub(super) fn terminal() -> InputEndpoint {
    InputEndpoint::Terminal { path: TTY.into() }
}
