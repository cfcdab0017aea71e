//! The holder's `poll` loop: it waits on the children's exits, the pipes (not read while the
//! daemon's backlog is over [`BACKLOG_LIMIT`]), the daemon's connection and the socket later
//! daemons connect to, and handles whatever is ready in an order the daemon relies on: exits
//! reaped before the pipes are read, the last EOF followed by a reap (so the exit usually
//! shares the EOFs' write), the frames written, and only then the exit file.

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::os::fd::AsFd;

use super::process_dir::write_exit_file;
use super::{BACKLOG_LIMIT, Holder, READ_BYTES, STREAMS};
use crate::holder::{ExitNote, Kind, stream_byte};
use crate::spawn::reaper::ExitHow;

impl Holder {
    fn done(&self) -> bool {
        self.exit.is_some()
            && self.pipes.iter().all(Option::is_none)
            && !self.children
            && self.conn.as_ref().is_none_or(|c| c.backlog() == 0)
    }

    fn open_pipes(&self) -> usize {
        self.pipes.iter().filter(|p| p.is_some()).count()
    }

    pub(super) fn serve(&mut self) {
        let mut buf = vec![0u8; READ_BYTES];
        while !self.done() {
            fn readable(fd: &impl AsFd) -> PollFd<'_> {
                PollFd::new(fd.as_fd(), PollFlags::POLLIN)
            }
            let reading = self
                .conn
                .as_ref()
                .is_none_or(|c| c.backlog() < BACKLOG_LIMIT);
            let mut fds = Vec::with_capacity(5);
            // Exits are news only when the signalfd (or the self-pipe) says so.
            fds.push(readable(&self.signals));
            let signals_at = 0;
            let listener_at = self.listener.as_ref().map(|l| {
                fds.push(readable(l));
                fds.len() - 1
            });
            let conn_at = self.conn.as_ref().map(|c| {
                let mut flags = PollFlags::POLLIN;
                if c.backlog() > 0 {
                    flags |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(c.sock.as_fd(), flags));
                fds.len() - 1
            });
            let mut pipe_at = [None, None];
            if reading {
                for (i, p) in self.pipes.iter().enumerate() {
                    if let Some(p) = p {
                        fds.push(readable(p));
                        pipe_at[i] = Some(fds.len() - 1);
                    }
                }
            }
            let timeout = self.spool_due_in().map_or(PollTimeout::NONE, |d| {
                // Rounded up: a wake-up a hair early would find nothing due and poll again.
                let ms = d.as_millis().saturating_add(1);
                PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
            });
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    // Cannot wait: do not spin on an error that will not go away.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            let ready = |at: Option<usize>| {
                at.and_then(|i| fds[i].revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let conn_ready = ready(conn_at);
            let listener_ready = ready(listener_at);
            let pipes_ready = [ready(pipe_at[0]), ready(pipe_at[1])];
            let children_changed = ready(Some(signals_at));
            drop(fds);
            if children_changed {
                self.drain_signals();
                self.reap();
            }
            let open = self.open_pipes();
            for (i, r) in pipes_ready.into_iter().enumerate() {
                if r {
                    self.read_pipe(i, &mut buf);
                }
            }
            if self.exit.is_none() && self.open_pipes() == 0 && open > 0 {
                // The last pipe just closed, most often because the shell exited: the kernel
                // closes an exiting process's descriptors just before it signals the parent.
                // Reaping now usually puts the exit in the same write as the EOFs, which
                // spares the daemon (and a short command's `exec`) a second wake-up.
                self.reap();
            }
            if conn_ready {
                self.serve_conn();
            }
            if listener_ready {
                self.accept();
            }
            if self.spool_due_in() == Some(std::time::Duration::ZERO) {
                self.write_spool();
            }
            self.flush();
            // After the frames: the file is for a daemon that was not there to get them.
            if let Some(note) = self.exit
                && !self.exit_written
            {
                self.exit_written = true;
                write_exit_file(note, self.exit_file.as_ref());
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn drain_signals(&mut self) {
        while let Ok(Some(_)) = self.signals.read_signal() {}
    }

    #[cfg(not(target_os = "linux"))]
    fn drain_signals(&mut self) {
        let mut bytes = [0u8; 64];
        while matches!(nix::unistd::read(&self.signals, &mut bytes), Ok(n) if n > 0) {}
    }

    /// Reaps every exited child: the shell's status is recorded (the daemon first, then the
    /// file); adopted orphans are only collected.
    pub(super) fn reap(&mut self) {
        use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
        let mut shell_ended = None;
        loop {
            let (pid, how) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitHow::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, ExitHow::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) => {
                    self.children = true;
                    break;
                }
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    self.children = false;
                    break;
                }
            };
            if pid.as_raw() == self.shell.pid && self.exit.is_none() {
                let note = ExitNote {
                    how,
                    ended_at_ms: crate::status::unix_ms(std::time::SystemTime::now()),
                };
                self.exit = Some(note);
                shell_ended = Some(note);
            }
        }
        if let Some(note) = shell_ended {
            // The daemon first (a short command's `exec` waits for it), saying whether any child
            // is left (then it looks for leftovers); the exit file, which only a later daemon
            // reads, once this round's frames are sent.
            self.queue(&note.encode(!self.children));
        }
    }

    fn read_pipe(&mut self, i: usize, buf: &mut [u8]) {
        let Some(p) = self.pipes[i].as_ref() else {
            return;
        };
        match nix::unistd::read(p, buf) {
            Ok(0) => self.end_pipe(i),
            Ok(n) => {
                let stream = STREAMS[i];
                match self.redact[i].as_mut() {
                    Some(r) => {
                        let mut clean = Vec::with_capacity(n);
                        r.push(&buf[..n], &mut clean);
                        self.record(stream, &clean);
                    }
                    None => self.record(stream, &buf[..n]),
                }
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => self.end_pipe(i),
        }
    }

    /// EOF (or a read error) on pipe `i`: releases what redaction held back, tells the daemon.
    fn end_pipe(&mut self, i: usize) {
        self.pipes[i] = None;
        if let Some(mut r) = self.redact[i].take() {
            let mut rest = Vec::new();
            r.finish(&mut rest);
            self.record(STREAMS[i], &rest);
        }
        // The daemon may close the log on this EOF and read it from disk from then on.
        self.write_spool();
        let frame = crate::holder::Encoder::new(Kind::Eof)
            .u8(stream_byte(STREAMS[i]))
            .finish();
        self.queue(&frame);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    use super::super::recording::SPOOL_QUIET;
    use super::super::test_holder::{frames, holder_linked_to, on_disk, output, spooling_holder};
    use super::*;
    use crate::holder::split_frame;
    use crate::output::Stream;
    use crate::policy::redact::{RedactStream, Redactor};

    /// A pipe for the holder to read, with `bytes` written into it and its write end closed
    /// (the shell exited).
    fn pipe_with(bytes: &[u8]) -> OwnedFd {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        assert_eq!(
            nix::unistd::write(&write, bytes).expect("write"),
            bytes.len()
        );
        read
    }

    /// A stream's EOF reaches the daemon after its last bytes, including those redaction held
    /// back as the start of a possible secret (released at EOF, since it can no longer
    /// complete): the daemon closes its log on the EOFs, and a byte after them would be lost.
    #[test]
    fn eof_comes_after_the_last_bytes_even_those_redaction_held_back() {
        let (daemon, ours) = UnixStream::pair().expect("socketpair");
        let mut h = holder_linked_to(ours);
        h.pipes = [Some(pipe_with(b"password: hunt")), None];
        let secret = vec![(b"hunter2".to_vec(), b"[REDACTED:PW]".to_vec())];
        h.redact[0] = Redactor::from_pairs(secret).map(RedactStream::new);
        let mut buf = vec![0u8; READ_BYTES];
        h.read_pipe(0, &mut buf);
        assert!(h.pipes[0].is_some(), "the bytes first");
        h.read_pipe(0, &mut buf);
        assert!(h.pipes[0].is_none(), "then EOF");
        h.flush();
        let got = frames(&daemon);
        let (eof, outputs) = got.split_last().expect("frames");
        assert_eq!(*eof, (Kind::Eof, vec![stream_byte(Stream::Stdout)]));
        assert_eq!(
            outputs.first(),
            Some(&output(Stream::Stdout, b"password: ")),
            "what cannot be a secret goes at once"
        );
        let text: Vec<u8> = outputs.iter().flat_map(|(_, p)| p[1..].to_vec()).collect();
        assert_eq!(text, b"password: hunt");
    }

    /// Buffered bytes are due once output pauses for the quiet time (the poll's timeout wakes
    /// the holder for it), and they are written before an EOF goes to the daemon, which may
    /// close the log on it and read the rest from disk.
    #[test]
    fn buffered_output_is_due_after_a_pause_and_written_before_an_eof() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_daemon, holder_end) = UnixStream::pair().expect("socketpair");
        let mut h = spooling_holder(holder_end, dir.path(), 1 << 20);
        h.record(Stream::Stdout, b"one line\n");
        let wait = h.spool_due_in().expect("something buffered");
        assert!(wait <= SPOOL_QUIET, "{wait:?}");
        h.last_output -= SPOOL_QUIET;
        assert_eq!(h.spool_due_in(), Some(std::time::Duration::ZERO));

        let (read_end, _write_end) = nix::unistd::pipe().expect("pipe");
        h.pipes[0] = Some(read_end);
        h.record(Stream::Stdout, b"last\n");
        h.end_pipe(0);
        assert_eq!(on_disk(dir.path()), b"one line\nlast\n");
        let out = &h.conn.as_ref().expect("conn").out;
        let (kind, payload, _) = split_frame(&out[out.len() - 6..])
            .expect("frame")
            .expect("whole");
        assert_eq!(
            (kind, payload),
            (Kind::Eof, &[stream_byte(Stream::Stdout)][..])
        );
    }
}
