//! The daemon's side of a holder: starting one ([`start`]), reconnecting to one a previous
//! daemon left ([`attach`]), and the task that turns its frames into the process's output log
//! and exit status ([`Link::run`]).
//!
//! # Where things are
//! [`greeting`] reads a holder's first answer (its [`Hello`]), continuing a holder its own
//! command stopped; [`pool`] keeps idle holders ready for the next `exec`; [`exec_start`] hands
//! a command to one and waits for its shell; [`reattach`] reconnects to a holder an earlier daemon
//! left; this module runs the link: the frames into the log, the exit, the control frames.

mod exec_start;
mod greeting;
mod pool;
mod reattach;

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;

pub use exec_start::{Given, LAUNCHER_GONE, start};
pub use greeting::Held;
pub use pool::{HolderPool, Idle};
pub use reattach::{attach, exit_file};

use super::{Encoder, ExitNote, Hello, Kind, PipesAtEof, stream_of};
use crate::output::OutputLog;
use crate::spawn::reaper::ExitHow;

/// Sends small control frames to a holder; clones share the connection.
#[derive(Debug, Clone)]
pub struct HolderControl(Arc<OwnedWriteHalf>);

impl HolderControl {
    fn send(&self, kind: Kind) {
        let frame = Encoder::new(kind).finish();
        // Five bytes into a socket the holder drains: only a dead holder refuses them, and then
        // there is nothing left to control. Written straight to the socket, not with tokio's
        // `try_write`: that one answers WouldBlock until the reactor has seen the socket's
        // first writable event, and a frame sent right after the link started (an `exec` with
        // `close_stdin`) was lost that way.
        let sock: &tokio::net::UnixStream = self.0.as_ref().as_ref();
        let mut rest = frame.as_slice();
        while !rest.is_empty() {
            match nix::unistd::write(sock, rest) {
                Ok(n) => rest = &rest[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    tracing::debug!("holder control {kind:?} not sent: {e}");
                    return;
                }
            }
        }
    }

    /// The daemon's `eof`: the holder closes its copy of stdin, so the process sees EOF.
    pub fn close_stdin(&self) {
        self.send(Kind::CloseStdin);
    }

    /// The daemon stopped waiting for output: the holder closes the pipes.
    pub fn close_output(&self) {
        self.send(Kind::CloseOutput);
    }
}

/// A running link: what the actor waits on.
#[derive(Debug)]
pub struct Link {
    /// Answered when both streams reached EOF, or the holder is gone.
    pub output_done: oneshot::Receiver<()>,
    /// The shell's exit; dropped unanswered when the holder vanished without telling it.
    pub exit: oneshot::Receiver<ExitHow>,
    /// Controls for the holder.
    pub control: HolderControl,
    /// Set (before the exit is sent) when the holder said it had no child left once it reaped
    /// the shell: nothing of the tree runs, so no leftovers need looking for.
    pub left_alone: Arc<AtomicBool>,
}

impl Link {
    /// Starts the task that reads `held`'s frames into `log` (on the current runtime). `eof` and
    /// `exit` are what the holder had already said (a re-adopted process).
    pub fn run(sock: UnixStream, log: Arc<OutputLog>, hello: &Hello) -> io::Result<Link> {
        sock.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(sock)?.into_split();
        let control = HolderControl(Arc::new(write));
        let (done_tx, output_done) = oneshot::channel();
        let (exit_tx, exit) = oneshot::channel();
        let mut exit_tx = Some(exit_tx);
        if let Some(note) = hello.exit
            && let Some(tx) = exit_tx.take()
        {
            let _ = tx.send(note.how);
        }
        let left_alone = Arc::new(AtomicBool::new(false));
        tokio::spawn(pump(
            read,
            log,
            hello.eof,
            done_tx,
            (exit_tx, left_alone.clone()),
            control.clone(),
        ));
        Ok(Link {
            output_done,
            exit,
            control,
            left_alone,
        })
    }
}

/// Reads frames until the holder closes the connection.
async fn pump(
    read: OwnedReadHalf,
    log: Arc<OutputLog>,
    mut eof: PipesAtEof,
    done_tx: oneshot::Sender<()>,
    (mut exit_tx, left_alone): (Option<oneshot::Sender<ExitHow>>, Arc<AtomicBool>),
    // Keeps the write half (and so the connection) open while frames come.
    _control: HolderControl,
) {
    let mut done_tx = Some(done_tx);
    if eof.both()
        && let Some(tx) = done_tx.take()
    {
        let _ = tx.send(());
    }
    let mut read = tokio::io::BufReader::with_capacity(128 * 1024, read);
    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 4];
        if read.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_le_bytes(head) as usize;
        if len == 0 || len > super::MAX_FRAME {
            tracing::warn!("holder sent a frame of {len} bytes; dropping the connection");
            break;
        }
        body.resize(len, 0);
        if read.read_exact(&mut body).await.is_err() {
            break;
        }
        let payload = &body[1..];
        match Kind::from_byte(body[0]) {
            Some(Kind::Output) => {
                if let Some((&s, data)) = payload.split_first()
                    && let Ok(stream) = stream_of(s)
                {
                    log.append(stream, data);
                }
            }
            Some(Kind::Eof) => {
                if let Some(&s) = payload.first() {
                    eof = eof.and(PipesAtEof::from_byte(s));
                }
                if eof.both()
                    && let Some(tx) = done_tx.take()
                {
                    let _ = tx.send(());
                }
            }
            Some(Kind::Exit) => {
                if let Ok(Some((note, alone))) = ExitNote::decode(payload)
                    && let Some(tx) = exit_tx.take()
                {
                    left_alone.store(alone, Ordering::Release);
                    let _ = tx.send(note.how);
                }
            }
            Some(Kind::Health) => {
                let mut d = super::Decoder::new(payload);
                if let Ok(lost) = d.u64() {
                    let why = String::from_utf8_lossy(d.rest()).into_owned();
                    log.set_held_health(lost, (!why.is_empty()).then_some(why));
                }
            }
            _ => {}
        }
        // A flood's frame buffer is not kept by a quiet process.
        if body.capacity() > 256 * 1024 {
            body = Vec::new();
        }
    }
    // The holder is gone: the output is as complete as it will get; an exit it never told is
    // dropped unanswered (the actor takes that as the holder's death).
    drop(exit_tx);
    if let Some(tx) = done_tx.take() {
        let _ = tx.send(());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_control_frame_sent_right_after_the_link_starts_arrives() {
        let (ours, mut theirs) = UnixStream::pair().expect("pair");
        ours.set_nonblocking(true).expect("nonblocking");
        let (_read, write) = tokio::net::UnixStream::from_std(ours)
            .expect("register")
            .into_split();
        // No reactor turn in between: the socket's first writable event is not seen yet.
        HolderControl(Arc::new(write)).close_stdin();
        let mut frame = vec![0u8; Encoder::new(Kind::CloseStdin).finish().len()];
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        theirs.read_exact(&mut frame).expect("the frame arrived");
        assert_eq!(frame, Encoder::new(Kind::CloseStdin).finish());
    }
}
