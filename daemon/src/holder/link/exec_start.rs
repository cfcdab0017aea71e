//! The `exec` path's start ([`start`]): the spec handed to an idle holder (and its launcher,
//! which runs the command at once) or to a new holder, and the wait until the shell runs. A
//! start that fails says which processes got the command ([`Given`]), so the caller can end
//! what of it runs, and a launcher that died before it took the command may be retried
//! ([`LAUNCHER_GONE`]).

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use super::greeting::{
    HANDSHAKE_TIMEOUT, Held, STALL_CHECK, continue_if_stopped, greeted, greeted_continuing,
};
use super::pool::{HolderPool, Idle, Launch};
use crate::holder::{Encoder, HoldSpec, Kind, recv_frame_with_fd, send_with_fd};
use crate::spawn::identity::{self, Identity};

/// The processes [`start`] gave the command to, as far as it got: what may be left of the
/// command when the start fails.
#[derive(Debug, Default)]
pub struct Given {
    /// The holder that got the spec.
    pub holder: Option<Identity>,
    /// The shell's process, when it was known before the spec went out (an idle holder's
    /// launcher).
    pub shell: Option<Identity>,
}

/// The kind of [`start`]'s error when the idle holder's launcher died before it took the
/// command: nothing ran, so the start may be tried again with another holder.
pub const LAUNCHER_GONE: io::ErrorKind = io::ErrorKind::ConnectionAborted;

/// Specs up to this size are written to an idle holder from the runtime: its socket is empty,
/// and the kernel takes this much in one write without blocking.
const INLINE_SPEC_BYTES: usize = 64 * 1024;

/// Starts a holder for `spec` and waits until it has started the shell: `idle` (taken from the
/// pool by the caller, which renamed its spare directory to `spec.dir` if it had one), or, when
/// there was none ready (a burst of `exec`s emptied the pool), a new one. The common case costs
/// no thread hand-off: the idle holder gets the spec from the calling task, which then awaits
/// the answer. Starting a new holder (a fork, or an exec) and writing a spec too large for one
/// write are blocking work, done on the blocking pool.
///
/// `given` is filled in as the spec goes out: should this fail, the command may have started
/// all the same (a holder that did not answer in time, or died, may have spawned the shell), and
/// the caller ends whatever of it runs before it says the command did not start.
pub async fn start(
    pool: &Arc<HolderPool>,
    idle: Option<Idle>,
    spec: &HoldSpec,
    given: &mut Given,
) -> io::Result<Held> {
    let frame = spec.encode();
    let continue_stopped = !crate::faults::holder_left_stopped(&spec.command);
    let Some(Idle {
        sock: mut ours,
        id: known,
        launch,
        ..
    }) = idle
    else {
        let pool = pool.clone();
        let (holder, answer) = tokio::task::spawn_blocking(move || {
            let (mut ours, pid) = match pool.spawn() {
                Ok(spawned) => spawned,
                Err(e) => return (None, Err(e)),
            };
            let holder = identity::identify(pid).unwrap_or(Identity { pid, start_time: 0 });
            let sent = ours.write_all(&frame);
            (
                Some(holder),
                with_send_error(
                    greeted_continuing(ours, Some(holder), continue_stopped),
                    sent,
                ),
            )
        })
        .await
        .map_err(io::Error::other)?;
        given.holder = holder;
        return answer;
    };
    given.holder = Some(known);
    // A terminal needs a shell of its own: the holder ends its launcher (whose pipe and stdin
    // go here) and greets anew once it started one.
    if let Some(launch) = launch.filter(|_| spec.terminal.is_none()) {
        // The holder first, so it knows how to keep the output before there is any; then the
        // launcher, which runs the command. Nothing to wait for: the holder greeted already.
        let Launch { pipe, hello, stdin } = launch;
        given.shell = Some(Identity {
            pid: hello.shell_pid,
            start_time: hello.shell_start_time,
        });
        let held = Held {
            hello,
            holder: known,
            stdin,
            listener: None,
            sock: ours,
        };
        let pipe = UnixStream::from(pipe);
        let inline = frame.len() <= INLINE_SPEC_BYTES;
        let abort = crate::faults::launch_should_abort(&spec.command);
        let send = move |held: Held, mut pipe: UnixStream| {
            let sent = (&held.sock).write_all(&frame).and_then(|()| {
                if abort {
                    Ok(())
                } else {
                    pipe.write_all(&frame)
                }
            });
            (held, pipe, sent)
        };
        let (held, pipe, sent) = if inline {
            // An empty socket takes this much at once.
            send(held, pipe)
        } else {
            tokio::task::spawn_blocking(move || send(held, pipe))
                .await
                .map_err(io::Error::other)?
        };
        let started = match sent {
            // As if the daemon died here: the holder has the spec, the launcher sees EOF.
            Ok(()) if abort => return Ok(held),
            Ok(()) => launched(pipe).await,
            Err(e) => Err(e),
        };
        // A launcher (or holder) that died between the pool's check and its spec never took the
        // command (the spec could not be written, or lay unread when it closed: a reset):
        // nothing ran, and the caller may start it again on another holder.
        let started = started.map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => io::Error::new(
                LAUNCHER_GONE,
                format!("the idle holder's launcher died before it took the command ({e})"),
            ),
            _ => e,
        });
        let listener = match started {
            Ok(listener) => listener,
            Err(e) => {
                let shell = held.hello.shell_pid;
                let stuck = e.kind() == io::ErrorKind::TimedOut;
                tokio::task::spawn_blocking(move || let_go(held.sock, shell, stuck))
                    .await
                    .map_err(io::Error::other)?;
                return Err(e);
            }
        };
        let mut held = held;
        if let Some(listener) = listener {
            // The holder keeps it for every later daemon; a holder that cannot take it has
            // died, which the link sees next.
            use std::os::fd::AsRawFd;
            let keep = Encoder::new(Kind::Keep).finish();
            if let Err(e) = send_with_fd(&held.sock, &keep, Some(listener.as_raw_fd())) {
                tracing::warn!("handing the proxy listener to the holder failed: {e}");
            }
            held.listener = Some(listener);
        }
        return Ok(held);
    }
    if frame.len() > INLINE_SPEC_BYTES {
        return tokio::task::spawn_blocking(move || {
            let sent = ours.write_all(&frame);
            with_send_error(
                greeted_continuing(ours, Some(known), continue_stopped),
                sent,
            )
        })
        .await
        .map_err(io::Error::other)?;
    }
    let sent = ours.write_all(&frame);
    let answer = async {
        ours.set_nonblocking(true)?;
        let ready = tokio::net::UnixStream::from_std(ours)?;
        let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        loop {
            match tokio::time::timeout(STALL_CHECK, ready.readable()).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => return Err(e),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the holder did not answer in time",
                    ));
                }
                // A terminal's shell (or any the holder spawns itself) runs before the holder
                // greets, and may stop it.
                Err(_) => {
                    if continue_stopped {
                        continue_if_stopped(known);
                    }
                }
            }
        }
        // The answer has arrived (one small frame, written at once): reading it does not
        // block.
        let sock = ready.into_std()?;
        sock.set_nonblocking(false)?;
        greeted(sock, Some(known))
    };
    with_send_error(answer.await, sent)
}

/// Lets go of a holder whose launcher did not run the command, once the holder is done with
/// the process directory, which the caller then removes: the holder got the spec too, so it
/// sets up its output files there and records the launcher's end until it sees its connection
/// close, and it exits then (its "shell" ended). A launcher that did not answer in time is
/// ended first (its group: it made itself a session leader), or the holder would wait for it.
fn let_go(sock: UnixStream, shell: i32, stuck: bool) {
    use std::io::Read;
    if stuck {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(shell),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let _ = sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let mut sink = [0u8; 4096];
    while matches!((&sock).read(&mut sink), Ok(n) if n > 0) {}
}

/// Waits for the launcher to run the shell: its socket is close-on-exec, so EOF says the shell
/// runs. Before that it may send the proxy listener its sandbox made (`Kind::Listener`, with
/// the descriptor), which is returned; a `Kind::Failed` is why it could not run (the launcher
/// then exits 127, and the `exec` fails to start as a spawn would). Answered by the exec itself
/// (about a tenth of a millisecond), while nothing else of the `exec` waits on it.
async fn launched(pipe: UnixStream) -> io::Result<Option<OwnedFd>> {
    pipe.set_nonblocking(true)?;
    let pipe = tokio::net::UnixStream::from_std(pipe)?;
    let read = async {
        let mut listener = None;
        loop {
            pipe.readable().await?;
            // Frames are small and whole when readable; a partial one is waited out by the
            // blocking read below, which the launcher finishes at once.
            let got = pipe.try_io(tokio::io::Interest::READABLE, || {
                let std_pipe = std::os::fd::AsFd::as_fd(&pipe);
                recv_frame_with_fd(&std_pipe)
            });
            match got {
                Ok((Kind::Listener, _, fd)) => listener = fd,
                Ok((Kind::Failed, why, _)) => {
                    return Err(io::Error::other(String::from_utf8_lossy(&why).into_owned()));
                }
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the launcher sent an unexpected frame",
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(listener),
                // A reset is the launcher gone without a word (killed).
                Err(e) => return Err(e),
            }
        }
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the shell did not start in time",
        )),
    }
}

/// The holder's answer, or why there was none: a holder that could not start the shell says
/// why (and may have stopped reading first); one that died without a word leaves the write's
/// error.
fn with_send_error(answer: io::Result<Held>, sent: io::Result<()>) -> io::Result<Held> {
    match answer {
        Ok(held) => sent.map(|()| held),
        Err(e) => Err(match sent {
            Err(w) if e.kind() == io::ErrorKind::UnexpectedEof => w,
            _ => e,
        }),
    }
}
