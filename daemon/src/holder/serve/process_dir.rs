//! The holder's files in the process directory: `holder.sock`, bound relative to it so a long
//! state directory never hits the socket address limit; the exit file, for a daemon that was
//! not there to get the exit frame; and the spare directory an idle holder prepares
//! ([`Prepared`]) so an `exec` pays for none of it.

use std::io;
// The launcher, its descriptors and its greeting exist on Linux only.
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

#[cfg(target_os = "linux")]
use crate::holder::Hello;
use crate::holder::{EXIT_FILE, ExitNote, Kind, SOCKET_NAME, send_with_fd};
use crate::spawn::Shell;
use crate::spawn::identity::Identity;

/// Records the exit status where a daemon that was not there to see it finds it (the holder's
/// directory is the process directory). No fsync: an fsync would add milliseconds to every short
/// command's `exec`. Into the file created ahead when there is one: a single write at offset 0
/// of a file that was empty, so a reader sees either nothing (no status yet) or all of it, as
/// with the atomic rename, without creating a file (on some filesystems creating one costs a
/// tenth of a millisecond or more) while the daemon answers the `exec`.
pub(super) fn write_exit_file(note: ExitNote, ahead: Option<&std::fs::File>) {
    use std::os::unix::fs::FileExt;
    let text = note.file_text();
    if let Some(file) = ahead
        && file.write_all_at(text.as_bytes(), 0).is_ok()
    {
        return;
    }
    let _ = crate::record::write_private_atomically(
        std::path::Path::new("."),
        EXIT_FILE,
        text.as_bytes(),
    );
}

/// Binds `holder.sock` in the working directory (the process directory, or the spare one that
/// becomes it), relative, so a long state-dir path never hits the ~107-byte limit of socket
/// addresses.
pub(super) fn bind_socket() -> io::Result<UnixListener> {
    let _ = std::fs::remove_file(SOCKET_NAME);
    let listener = UnixListener::bind(SOCKET_NAME)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// What an idle holder sets up in its spare directory before any `exec` needs it (the daemon's
/// `Prepare`): the two files a holder creates, made while nothing waits for them, and on Linux
/// the shell's process itself ([`crate::holder::launcher`]). Creating a file or binding a socket
/// allocates an inode, which on some filesystems (ext4 without a journal scans for recently
/// deleted inodes) costs 0.1–0.2 ms each; a fork and a holder's wake-up cost as much again. The
/// `exec` then pays only the daemon's rename of the directory and one wake-up, the launcher's.
pub(super) struct Prepared {
    dir: PathBuf,
    listener: UnixListener,
    exit_file: std::fs::File,
    #[cfg(target_os = "linux")]
    launcher: Option<crate::holder::launcher::Launcher>,
    /// The launcher's spec pipe, until it is handed to the daemon.
    #[cfg(target_os = "linux")]
    launch: Option<OwnedFd>,
}

impl Prepared {
    pub(super) fn make(dir: PathBuf, user_umask: nix::sys::stat::Mode) -> io::Result<Prepared> {
        use std::os::unix::fs::OpenOptionsExt;
        std::env::set_current_dir(&dir)?;
        let listener = bind_socket()?;
        let exit_file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(EXIT_FILE)?;
        #[cfg(target_os = "linux")]
        let (launcher, launch) = match crate::holder::launcher::Launcher::start(user_umask.bits()) {
            Ok((l, w)) => (Some(l), Some(w)),
            Err(_) => (None, None),
        };
        #[cfg(not(target_os = "linux"))]
        let _ = user_umask;
        Ok(Prepared {
            dir,
            listener,
            exit_file,
            #[cfg(target_os = "linux")]
            launcher,
            #[cfg(target_os = "linux")]
            launch,
        })
    }

    /// Tells the daemon this holder is ready: `Ready`, with the launcher's spec pipe when there
    /// is a launcher, then the launcher's `Hello` (with its stdin), as a holder greets once its
    /// shell runs — the daemon has all it needs before the `exec`.
    pub(super) fn announce(mut self, sock: &UnixStream) -> io::Result<Prepared> {
        match self.send_ready(sock) {
            Ok(()) => Ok(self),
            Err(e) => {
                // The daemon is gone: nothing of this holder will be used.
                self.discard();
                Err(e)
            }
        }
    }

    fn send_ready(&mut self, sock: &UnixStream) -> io::Result<()> {
        let ready = crate::holder::Encoder::new(Kind::Ready).finish();
        #[cfg(target_os = "linux")]
        if let (Some(l), Some(launch)) = (self.launcher.as_ref(), self.launch.take()) {
            send_with_fd(sock, &ready, Some(launch.as_raw_fd()))?;
            // Dropped here: the daemon holds the only write end, so its death ends the wait.
            drop(launch);
            let hello = Hello {
                holder_pid: std::process::id() as i32,
                shell_pid: l.identity.pid,
                shell_start_time: l.identity.start_time,
                next_seq: 1,
                exit: None,
                eof: crate::holder::PipesAtEof::default(),
                dropped: 0,
                stdin_open: true,
                terminal: false,
                protocol: crate::holder::PROTOCOL,
                listener: false,
                redact: crate::holder::Secrets::default(),
            };
            return send_with_fd(sock, &hello.encode(), Some(l.stdin.as_raw_fd()));
        }
        send_with_fd(sock, &ready, None)
    }

    /// What the holder keeps once its spec came: the socket, the exit file, and the launcher as
    /// the shell with its identity — unless the command wants a terminal, which needs a shell
    /// of its own (the launcher then goes).
    pub(super) fn into_parts(
        self,
        terminal: bool,
    ) -> (UnixListener, std::fs::File, Option<(Shell, Identity)>) {
        #[cfg(target_os = "linux")]
        let shell = match self.launcher {
            Some(l) if terminal => {
                l.discard();
                None
            }
            Some(l) => Some((
                Shell {
                    pid: l.identity.pid,
                    stdin: l.stdin,
                    stdout: l.stdout,
                    stderr: l.stderr,
                },
                l.identity,
            )),
            None => None,
        };
        #[cfg(not(target_os = "linux"))]
        let shell = {
            let _ = terminal;
            None
        };
        (self.listener, self.exit_file, shell)
    }

    /// Removes the spare directory of a holder that was never used, and ends its launcher.
    pub(super) fn discard(self) {
        #[cfg(target_os = "linux")]
        if let Some(l) = self.launcher {
            l.discard();
        }
        drop(self.listener);
        let _ = std::fs::remove_file(SOCKET_NAME);
        let _ = std::fs::remove_file(EXIT_FILE);
        let _ = std::fs::remove_dir(&self.dir);
    }
}
