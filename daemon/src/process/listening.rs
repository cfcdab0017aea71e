//! The TCP sockets a running process's tree listens on (Linux): the port a dev server, a
//! database or a preview bound, reported as `listening` by `ps`, `read`, `wait` and `exec`, so an
//! agent learns where its server is without parsing its log.
//!
//! # The rule
//! The tree is the shell and the live members of its session or process group
//! ([`super::sessions`]), as for input waits. Their `/proc/<pid>/fd` links name their sockets
//! (`socket:[inode]`); the daemon's `/proc/net/tcp` and `/proc/net/tcp6` give, for each socket
//! in state LISTEN, its inode and local address. A socket any member holds is the tree's, whoever
//! opened it. Addresses read `127.0.0.1:5173`, `0.0.0.0:8080`, `[::1]:5173`, `[::]:8080`, sorted
//! by port, each once.
//!
//! # What it does not show
//! UDP (it has no listening state), Unix sockets, sockets in another network namespace than the
//! daemon's (a member that ran `unshare -n` or a container's own network), sockets held by a
//! process outside the tree (`docker run -p` binds in `docker-proxy`; a socket-activated service
//! in systemd), members that left the session (`setsid`), a member whose fds the daemon may not
//! read (not dumpable: setuid, file capabilities such as `cap_net_bind_service`), sockets past
//! the first [`MAX_LINKS_PER_TREE`] fds of a tree, addresses past the first [`MAX_LISTED`].
//! Elsewhere than Linux: nothing (the field is absent).
//!
//! # Cost
//! One check reads each member's fd links and, when some member holds a socket, the two TCP
//! tables once for all the processes checked together (`ps`). It runs off the runtime, with the
//! input-wait check, in [`super::live_facts`] (at most two checks at once, an answer waiting
//! for one at most 2 s).

#[cfg(target_os = "linux")]
use std::collections::HashMap;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::tree::Identity;

/// The most descriptors of one tree whose links are read: a server has a few hundred; a tree
/// with far more (a process holding tens of thousands of files) would make every check slow.
/// Sockets past it are not seen.
pub const MAX_LINKS_PER_TREE: usize = 16 * 1024;

/// The most addresses one answer lists (by port, the lowest): a process listening on hundreds of
/// ports is one an agent knows about already.
pub const MAX_LISTED: usize = 32;

/// The TCP state LISTEN, as the tables write it (`st` column, hex).
const TCP_LISTEN: &str = "0A";

/// A listening socket of a `/proc/net/tcp{,6}` line: its inode and local address; `None` for a
/// header, another state, or a line that does not parse.
pub fn parse_tcp_line(line: &str) -> Option<(u64, SocketAddr)> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
    if fields.len() < 10 || fields[3] != TCP_LISTEN {
        return None;
    }
    let (addr, port) = fields[1].split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let inode: u64 = fields[9].parse().ok()?;
    Some((inode, SocketAddr::new(parse_address(addr)?, port)))
}

/// An address as the tables write it: the address's bytes in 32-bit words, each printed as a
/// native-endian number (`0100007F` is 127.0.0.1 on a little-endian machine).
fn parse_address(hex: &str) -> Option<IpAddr> {
    let words: Vec<[u8; 4]> = (0..hex.len() / 8)
        .map(|i| {
            u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16)
                .ok()
                .map(u32::to_ne_bytes)
        })
        .collect::<Option<_>>()?;
    match (hex.len(), words.as_slice()) {
        (8, [w]) => Some(IpAddr::V4(Ipv4Addr::from(*w))),
        (32, [a, b, c, d]) => {
            let mut bytes = [0u8; 16];
            for (chunk, word) in bytes.chunks_exact_mut(4).zip([a, b, c, d]) {
                chunk.copy_from_slice(word);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The socket inode of an fd link (`socket:[12345]`).
pub fn parse_socket_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The addresses of `inodes` among `listening` (inode → address), sorted by port then address,
/// each once, as the answers show them.
pub fn addresses_of(inodes: &HashSet<u64>, listening: &[(u64, SocketAddr)]) -> Vec<String> {
    let mut found: Vec<SocketAddr> = listening
        .iter()
        .filter(|(inode, _)| inodes.contains(inode))
        .map(|(_, addr)| *addr)
        .collect();
    found.sort_unstable_by_key(|a| (a.port(), a.ip()));
    found.dedup();
    found.truncate(MAX_LISTED);
    found.iter().map(SocketAddr::to_string).collect()
}

/// The listening addresses of each shell's tree now (empty when none, or where it cannot be
/// told). One pass for all of them (`ps`). Blocking: call it on the blocking pool.
#[cfg(target_os = "linux")]
pub fn check_many(shells: &[Identity]) -> Vec<Vec<String>> {
    use super::tree::{self, ProcStat};
    // Each live shell's socket inodes, its own first, and the links it may still read.
    let mut sockets: HashMap<i32, (HashSet<u64>, usize)> = HashMap::new();
    for shell in shells {
        if tree::read_stat(shell.pid)
            .is_some_and(|s| s.is_alive() && s.start_time == shell.start_time)
        {
            let mut found = (HashSet::new(), MAX_LINKS_PER_TREE);
            sockets_of(shell.pid, &mut found.0, &mut found.1);
            sockets.insert(shell.pid, found);
        }
    }
    if !sockets.is_empty()
        && let Some(snap) = super::sessions::snapshot()
    {
        let leaders: HashSet<i32> = sockets.keys().copied().collect();
        for (pid, leader) in snap.members(|p| leaders.contains(&p)) {
            if let Some((found, budget)) = sockets.get_mut(&leader)
                && *budget > 0
                && tree::read_stat(pid).is_some_and(|s: ProcStat| s.is_alive())
            {
                sockets_of(pid, found, budget);
            }
        }
    }
    let listening = if sockets.values().any(|(s, _)| !s.is_empty()) {
        listening_sockets()
    } else {
        Vec::new()
    };
    shells
        .iter()
        .map(|shell| {
            sockets
                .get(&shell.pid)
                .map(|(inodes, _)| addresses_of(inodes, &listening))
                .unwrap_or_default()
        })
        .collect()
}

/// Elsewhere it cannot be told: none.
#[cfg(not(target_os = "linux"))]
pub fn check_many(shells: &[Identity]) -> Vec<Vec<String>> {
    vec![Vec::new(); shells.len()]
}

/// Adds the socket inodes a process holds to `found`, reading at most `budget` fd links (and
/// taking them off it). Nothing when its fds cannot be read (another user's, or not dumpable:
/// `/proc/<pid>/fd` needs ptrace read access).
#[cfg(target_os = "linux")]
fn sockets_of(pid: i32, found: &mut HashSet<u64>, budget: &mut usize) {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return;
    };
    for fd in fds.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if let Some(inode) = std::fs::read_link(fd.path())
            .ok()
            .and_then(|link| parse_socket_link(link.to_str()?))
        {
            found.insert(inode);
        }
    }
}

/// Every TCP socket in state LISTEN in the daemon's network namespace: (inode, local address).
#[cfg(target_os = "linux")]
fn listening_sockets() -> Vec<(u64, SocketAddr)> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| text.lines().filter_map(parse_tcp_line).collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    #[test]
    fn table_lines_give_listening_sockets_only() {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
        assert_eq!(parse_tcp_line(header), None);
        // The address words are native-endian numbers: write them from the bytes.
        let v4 = |b: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(b));
        let line = |local: String, st: &str, inode: u64| {
            format!(
                "   0: {local} 00000000:0000 {st} 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 0000000000000000 100 0 0 10 0"
            )
        };
        assert_eq!(
            parse_tcp_line(&line(format!("{}:1435", v4([127, 0, 0, 1])), "0A", 4242)),
            Some((4242, addr("127.0.0.1:5173")))
        );
        // ESTABLISHED (01) and TIME_WAIT (06) are not listening.
        assert_eq!(
            parse_tcp_line(&line(format!("{}:1435", v4([127, 0, 0, 1])), "01", 1)),
            None
        );
        let v6 = |b: [u8; 16]| {
            b.chunks_exact(4)
                .map(|w| format!("{:08X}", u32::from_ne_bytes(w.try_into().expect("4 bytes"))))
                .collect::<String>()
        };
        let any6 = v6([0; 16]);
        assert_eq!(
            parse_tcp_line(&line(format!("{any6}:1F90"), "0A", 7)),
            Some((7, addr("[::]:8080")))
        );
        let mut loopback6 = [0u8; 16];
        loopback6[15] = 1;
        assert_eq!(
            parse_tcp_line(&line(format!("{}:0050", v6(loopback6)), "0A", 8)),
            Some((8, addr("[::1]:80")))
        );
        assert_eq!(parse_tcp_line(&line("XYZ:0050".into(), "0A", 9)), None);
        assert_eq!(parse_socket_link("socket:[981]"), Some(981));
        assert_eq!(parse_socket_link("pipe:[981]"), None);
    }

    #[test]
    fn a_trees_addresses_are_its_own_sorted_by_port_once_each() {
        let listening: Vec<(u64, SocketAddr)> = [
            (1, "0.0.0.0:8080"),
            (2, "[::]:8080"),
            (3, "127.0.0.1:5173"),
            (4, "127.0.0.1:9999"),
            (5, "127.0.0.1:5173"),
        ]
        .iter()
        .map(|(i, a)| (*i, addr(a)))
        .collect();
        let ours: HashSet<u64> = [1, 2, 3, 5, 77].into();
        assert_eq!(
            addresses_of(&ours, &listening),
            vec!["127.0.0.1:5173", "0.0.0.0:8080", "[::]:8080"]
        );
        assert!(addresses_of(&HashSet::new(), &listening).is_empty());
    }

    /// A real listener in a child's tree: found, with its port; gone once closed.
    #[cfg(target_os = "linux")]
    #[test]
    #[ignore = "needs python3: run .ci/test-extra"]
    fn a_real_listener_in_a_childs_session_is_found() {
        use std::io::{BufRead, Write};
        use std::os::unix::process::CommandExt;
        // The shell forks Python, which listens on an ephemeral port, prints it, and closes
        // the socket when told.
        let mut child = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                "python3 -c \"import socket, sys\n\
                 s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                 print(s.getsockname()[1], flush=True); sys.stdin.readline(); s.close()\n\
                 print('closed', flush=True); sys.stdin.readline()\"; :",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh and python3 (installed by .ci/test-extra)");
        let shell = super::super::tree::identify(child.id() as i32).expect("identity");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut port = String::new();
        out.read_line(&mut port).expect("port");
        let expected = format!("127.0.0.1:{}", port.trim());
        // The member may be missing from a pass taken before it was forked (shared for 250 ms).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while check_many(&[shell]) != vec![vec![expected.clone()]] {
            assert!(
                std::time::Instant::now() < deadline,
                "{expected} never seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Another pid with this one's number but another start time is not this tree.
        let recycled = Identity {
            start_time: shell.start_time + 1,
            ..shell
        };
        assert_eq!(check_many(&[recycled]), vec![Vec::<String>::new()]);
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"\n").expect("close it");
        let mut closed = String::new();
        out.read_line(&mut closed).expect("closed");
        assert_eq!(check_many(&[shell]), vec![Vec::<String>::new()]);
        drop(stdin);
        child.wait().expect("reap");
    }
}
