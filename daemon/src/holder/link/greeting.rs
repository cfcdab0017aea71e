//! A holder's first answer: its [`Hello`] (or its [`Kind::Failed`] error), read under a
//! timeout, with stdin's write end and a kept proxy listener passed alongside; a holder stopped
//! by its own command before it answered is continued; a holder of a protocol this daemon does
//! not speak is refused by name. Every way to a holder (the pool, a fresh start, an attach)
//! goes through here.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::holder::{Hello, Kind, OLDEST_PROTOCOL, PROTOCOL, recv_frame_with_fds};
use crate::spawn::identity::{self, Identity};

/// How long a holder may take to answer the first frame (it is a fresh exec, or a live process
/// that only has to write a few bytes).
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A holder that has answered: its account of the process and the connection.
#[derive(Debug)]
pub struct Held {
    /// What the holder said.
    pub hello: Hello,
    /// The holder process.
    pub holder: Identity,
    /// Write end of the process's stdin, while open.
    pub stdin: Option<OwnedFd>,
    /// A sandboxed command's proxy listener, which the holder keeps (`Kind::Keep`): the daemon
    /// serves the allowlist proxy on it.
    pub listener: Option<OwnedFd>,
    /// The connection (blocking until [`Link::run`](super::Link::run) takes it).
    pub sock: UnixStream,
}

impl Held {
    /// The shell's identity.
    pub fn shell(&self) -> Identity {
        Identity {
            pid: self.hello.shell_pid,
            start_time: self.hello.shell_start_time,
        }
    }
}

/// Reads the holder's first frame. `known` is the holder's identity when the caller already
/// has it (a holder from the pool), which spares a `/proc` read on the `exec` path.
pub(super) fn greeted(sock: UnixStream, known: Option<Identity>) -> io::Result<Held> {
    greeted_continuing(sock, known, true)
}

/// [`greeted`], continuing the holder (`known`) when it is found stopped meanwhile unless
/// `continue_stopped` is false (fault injection: `holder_left_stopped`).
pub(super) fn greeted_continuing(
    sock: UnixStream,
    known: Option<Identity>,
    continue_stopped: bool,
) -> io::Result<Held> {
    if let Some(holder) = known.filter(|_| continue_stopped) {
        answer_arrives(&sock, holder)?;
    }
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let (hello, stdin, listener) = read_hello(&sock)?;
    sock.set_read_timeout(None)?;
    let holder = match known {
        Some(id) if id.pid == hello.holder_pid => id,
        _ => identity::identify(hello.holder_pid).unwrap_or(Identity {
            pid: hello.holder_pid,
            start_time: 0,
        }),
    };
    Ok(Held {
        hello,
        holder,
        stdin,
        listener,
        sock,
    })
}

/// How long a holder may leave its first answer unsent before the daemon looks whether it was
/// stopped (and continues it).
pub(super) const STALL_CHECK: Duration = Duration::from_millis(50);

/// Continues `holder` if it is stopped, and says whether it was. Its own command can stop it
/// before it greeted (`kill -STOP $PPID` as the first thing it runs: the shell's parent is its
/// holder), and a stopped holder never answers: the `exec` would fail to start while its
/// command runs on. Checked against the holder's start time, so a recycled pid is left alone.
pub(super) fn continue_if_stopped(holder: Identity) -> bool {
    let stopped = identity::read_stat(holder.pid).is_some_and(|s| {
        s.state == b'T' && (holder.start_time == 0 || s.start_time == holder.start_time)
    });
    if stopped {
        tracing::warn!(
            holder = holder.pid,
            "the holder was stopped before it answered (by its own command?); continuing it"
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(holder.pid),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
    stopped
}

/// Blocks until `holder`'s answer can be read on `sock`, continuing the holder whenever it is
/// found stopped meanwhile ([`continue_if_stopped`]); an error once [`HANDSHAKE_TIMEOUT`]
/// passed without one.
fn answer_arrives(sock: &UnixStream, holder: Identity) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(STALL_CHECK).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the holder did not answer in time",
            ));
        }
        continue_if_stopped(holder);
    }
}

/// Reads a [`Hello`] (a [`Kind::Failed`] is the holder's error), with stdin's write end while
/// stdin is open and the kept proxy listener when there is one. A holder of a newer protocol
/// than this daemon's is refused by name ([`newer_holder`]).
pub(super) fn read_hello(
    sock: &UnixStream,
) -> io::Result<(Hello, Option<OwnedFd>, Option<OwnedFd>)> {
    let (payload, fds) = expect_frame(sock, Kind::Hello, "the holder did not greet")?;
    let hello = Hello::decode(&payload)?;
    let protocol = crate::faults::holder_protocol_seen(hello.protocol);
    if !(OLDEST_PROTOCOL..=PROTOCOL).contains(&protocol) {
        return Err(newer_holder(protocol));
    }
    let mut fds = fds.into_iter();
    let stdin = if hello.stdin_open { fds.next() } else { None };
    let listener = if hello.listener { fds.next() } else { None };
    Ok((hello, stdin, listener))
}

/// The refusal of a holder whose protocol this daemon does not speak: it is left running (its
/// output stays readable from disk), and the error says how to take it back.
pub fn newer_holder(protocol: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "its holder speaks holder protocol {protocol}, this yieldshelld {} (protocols {}–{}); \
             it keeps running and its output stays readable, but only a yieldshelld that speaks \
             its protocol can control it",
            yieldshell_proto::VERSION,
            OLDEST_PROTOCOL,
            PROTOCOL
        ),
    )
}

/// The payload (and descriptors) of the next frame when it is a `want`; the holder's own error
/// when it is a [`Kind::Failed`]; `otherwise` when it is anything else.
pub(super) fn expect_frame(
    sock: &UnixStream,
    want: Kind,
    otherwise: &str,
) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let (kind, payload, fds) = recv_frame_with_fds(sock)?;
    if kind == want {
        Ok((payload, fds))
    } else if kind == Kind::Failed {
        Err(io::Error::other(
            String::from_utf8_lossy(&payload).into_owned(),
        ))
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            otherwise.to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    /// The refusal reads as one sentence a person can act on: the holder's protocol and the
    /// daemon's range, with no run of spaces left by a broken line continuation (there was one).
    #[test]
    fn the_refusal_names_both_protocols_in_one_clean_sentence() {
        let m = super::newer_holder(9).to_string();
        assert!(m.contains("holder protocol 9"), "{m}");
        let range = format!("(protocols {}–{})", super::OLDEST_PROTOCOL, super::PROTOCOL);
        assert!(m.contains(&range), "{m}");
        assert!(!m.contains("  "), "{m}");
    }
}
