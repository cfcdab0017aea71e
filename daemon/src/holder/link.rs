//! The daemon's side of a holder: starting one ([`start`]), reconnecting to one a previous
//! daemon left ([`attach`]), and the task that turns its frames into the process's output log
//! and exit status ([`Link::run`]).

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;

#[cfg(target_os = "linux")]
use super::zygote::ForkError;
use super::{Encoder, ExitNote, Hello, HoldSpec, Kind, PipesAtEof, SOCKET_NAME, stream_of};
use crate::output::OutputLog;
use crate::spawn::identity::{self, Identity};
use crate::spawn::reaper::{ExitHow, Reaper};

/// How long a holder may take to answer the first frame (it is a fresh exec, or a live process
/// that only has to write a few bytes).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The connection (blocking until [`Link::run`] takes it).
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
fn greeted(sock: UnixStream, known: Option<Identity>) -> io::Result<Held> {
    greeted_continuing(sock, known, true)
}

/// [`greeted`], continuing the holder (`known`) when it is found stopped meanwhile unless
/// `continue_stopped` is false (fault injection: `holder_left_stopped`).
fn greeted_continuing(
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
const STALL_CHECK: Duration = Duration::from_millis(50);

/// Continues `holder` if it is stopped, and says whether it was. Its own command can stop it
/// before it greeted (`kill -STOP $PPID` as the first thing it runs: the shell's parent is its
/// holder), and a stopped holder never answers: the `exec` would fail to start while its
/// command runs on. Checked against the holder's start time, so a recycled pid is left alone.
fn continue_if_stopped(holder: Identity) -> bool {
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
fn read_hello(sock: &UnixStream) -> io::Result<(Hello, Option<OwnedFd>, Option<OwnedFd>)> {
    let (payload, fds) = expect_frame(sock, Kind::Hello, "the holder did not greet")?;
    let hello = Hello::decode(&payload)?;
    let protocol = crate::faults::holder_protocol_seen(hello.protocol);
    if !(super::OLDEST_PROTOCOL..=super::PROTOCOL).contains(&protocol) {
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
            "its holder speaks holder protocol {protocol}, this yieldshelld {} (protocols {}–{});              it keeps running and its output stays readable, but only a yieldshelld that speaks              its protocol can control it",
            yieldshell_proto::VERSION,
            super::OLDEST_PROTOCOL,
            super::PROTOCOL
        ),
    )
}

/// The payload (and descriptors) of the next frame when it is a `want`; the holder's own error
/// when it is a [`Kind::Failed`]; `otherwise` when it is anything else.
fn expect_frame(
    sock: &UnixStream,
    want: Kind,
    otherwise: &str,
) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let (kind, payload, fds) = super::recv_frame_with_fds(sock)?;
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

/// A prepared holder's launcher (`super::launcher`): the shell's process, waiting for the spec
/// on a socket the daemon writes to, and the holder's greeting for it.
#[derive(Debug)]
struct Launch {
    /// The daemon's end of the launcher's socket.
    pipe: OwnedFd,
    hello: Hello,
    stdin: Option<OwnedFd>,
}

/// An idle holder, waiting for its spec.
#[derive(Debug)]
pub struct Idle {
    sock: UnixStream,
    /// The holder's identity, read when it was started (off the `exec` path).
    id: Identity,
    /// Its spare directory (Linux), where its socket and exit file already are: the `exec`
    /// renames it to the process directory instead of creating one.
    spare: Option<PathBuf>,
    /// Its launcher, when it has one (Linux).
    launch: Option<Launch>,
}

impl Idle {
    /// The spare directory to rename to the process directory, when the holder has one. A
    /// holder with one must be given the process directory it was renamed to: it works in it.
    pub fn spare_dir(&self) -> Option<&Path> {
        self.spare.as_deref()
    }

    /// Whether the holder and its launcher still wait: neither ever speaks while idle, so a
    /// readable end (EOF or a reset) means one of them died (killed, or the OOM killer). One
    /// non-blocking `poll`, so a dead one is let go before an `exec` pays for it.
    fn waiting(&self) -> bool {
        use std::os::fd::AsRawFd;
        let fd = |raw| libc::pollfd {
            fd: raw,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [fd(self.sock.as_raw_fd()), fd(-1)];
        if let Some(launch) = &self.launch {
            fds[1] = fd(launch.pipe.as_raw_fd());
        }
        // SAFETY: two initialised pollfd entries (a negative fd is ignored); no wait.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        ready == 0
    }
}

/// Holders started ahead of need, each waiting for its spec: `exec` then pays for a message,
/// not for starting a process. New holders are forked by the zygote (Linux, [`super::zygote`]):
/// a fork of a small process instead of an `exec` of the holder binary and its dynamic linking;
/// without one (elsewhere, or while it cannot be started) the daemon spawns them itself. On
/// Linux each idle holder also waits in a spare directory of its own, its socket bound and its
/// exit file created (see `serve::Prepared`): the files a process needs exist before its `exec`.
#[derive(Debug)]
pub struct HolderPool {
    reaper: Arc<Reaper>,
    idle: std::sync::Mutex<Vec<Idle>>,
    /// Idle holders kept ready.
    size: usize,
    /// A refill runs (one at a time, so the pool never grows past `size`).
    refilling: std::sync::atomic::AtomicBool,
    /// Where spare directories are made (`<state dir>/spare`, beside `procs` on the same
    /// filesystem, so a rename moves one into place); `None` where holders make none.
    spare_root: Option<PathBuf>,
    /// Names spare directories (with the daemon's pid: an idle holder of an earlier daemon may
    /// still be removing its own).
    spares_made: std::sync::atomic::AtomicU64,
    /// Preparations of idle holders that failed in a row; at [`SPARE_FAILURE_LIMIT`], spare
    /// directories are given up for the daemon's life.
    spare_failures: std::sync::atomic::AtomicU32,
    #[cfg(target_os = "linux")]
    zygote: std::sync::Mutex<ZygoteSlot>,
}

/// The zygote, started on first need and restarted when it died.
#[cfg(target_os = "linux")]
#[derive(Debug, Default)]
struct ZygoteSlot {
    zygote: Option<super::zygote::Zygote>,
    /// Starting one failed: holders are spawned directly from then on (no retry per holder).
    unavailable: bool,
}

impl HolderPool {
    /// A pool that keeps `size` idle holders (started by [`HolderPool::refill`]). With
    /// `spare_root` (Linux) they wait in spare directories made there; whatever an earlier
    /// daemon left in it is removed first (its idle holders exit with it).
    pub fn new(reaper: Arc<Reaper>, size: usize, spare_root: Option<PathBuf>) -> HolderPool {
        let spare_root = spare_root.filter(|root| {
            if let Err(e) = std::fs::remove_dir_all(root)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %root.display(), "clearing spare holder directories failed: {e}");
            }
            match crate::record::create_private_dir(root) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(dir = %root.display(), "no spare holder directories ({e}); each exec creates its process directory");
                    false
                }
            }
        });
        HolderPool {
            reaper,
            idle: std::sync::Mutex::new(Vec::new()),
            size,
            refilling: std::sync::atomic::AtomicBool::new(false),
            spare_root,
            spares_made: std::sync::atomic::AtomicU64::new(0),
            spare_failures: std::sync::atomic::AtomicU32::new(0),
            #[cfg(target_os = "linux")]
            zygote: std::sync::Mutex::new(ZygoteSlot::default()),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// A new holder waiting for its spec on the returned socket, and its pid.
    fn spawn(&self) -> io::Result<(UnixStream, i32)> {
        let (ours, theirs) = UnixStream::pair()?;
        #[cfg(target_os = "linux")]
        if let Some(pid) = self.fork_from_zygote(&theirs) {
            return Ok((ours, pid));
        }
        let pid = super::start::spawn_holder(&self.reaper, &theirs)?;
        Ok((ours, pid))
    }

    /// Has the zygote fork a holder on `theirs`: `None` when there is no working zygote (one
    /// that fails is replaced once; if the new one fails too, this holder is spawned directly).
    #[cfg(target_os = "linux")]
    fn fork_from_zygote(&self, theirs: &UnixStream) -> Option<i32> {
        let mut slot = self.zygote.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..2 {
            if slot.unavailable {
                return None;
            }
            let zygote = match slot.zygote.take() {
                Some(z) => z,
                None => match super::zygote::Zygote::start(&self.reaper) {
                    Ok(z) => z,
                    Err(e) => {
                        tracing::warn!(
                            "the holder zygote did not start ({e}); holders are spawned directly"
                        );
                        slot.unavailable = true;
                        return None;
                    }
                },
            };
            // Registered with the reaper under its lock: the holder becomes the daemon's child
            // (an orphan re-parented to this subreaper) during the call.
            let mut failure = None;
            let forked = self.reaper.spawn_with(|| match zygote.fork_holder(theirs) {
                Ok(pid) => Ok((pid, pid)),
                Err(e) => {
                    let err = match &e {
                        ForkError::Refused(e) | ForkError::Broken(e) => {
                            io::Error::new(e.kind(), e.to_string())
                        }
                    };
                    failure = Some(e);
                    Err(err)
                }
            });
            match (forked, failure) {
                (Ok((pid, _exit)), _) => {
                    slot.zygote = Some(zygote);
                    return Some(pid);
                }
                (Err(_), Some(ForkError::Refused(e))) => {
                    // The zygote is fine; this fork failed (e.g. a process limit): the daemon
                    // tries itself, and says why if it fails too.
                    tracing::warn!("the holder zygote could not fork ({e})");
                    slot.zygote = Some(zygote);
                    return None;
                }
                (Err(e), _) => {
                    tracing::warn!("the holder zygote failed ({e}); starting a new one");
                    zygote.kill();
                }
            }
        }
        None
    }

    /// An idle holder, if one is ready. One whose holder or launcher died while it waited is
    /// let go instead (dropping it closes its sockets: a holder still alive removes its spare
    /// directory and exits): handed out, its `exec` would fail.
    pub fn take_idle(&self) -> Option<Idle> {
        loop {
            let idle = self.idle().pop()?;
            if idle.waiting() {
                return Some(idle);
            }
            tracing::warn!(
                holder = idle.id.pid,
                "an idle holder or its launcher died while it waited; not used"
            );
        }
    }

    /// A new idle holder for the pool: spawned, identified, and (with a spare root) prepared in
    /// a spare directory of its own. Blocking.
    fn start_idle(&self) -> io::Result<Idle> {
        let (sock, pid) = self.spawn()?;
        let id = identity::identify(pid).unwrap_or(Identity { pid, start_time: 0 });
        let spares = self.spare_root.as_ref().filter(|_| {
            self.spare_failures
                .load(std::sync::atomic::Ordering::Relaxed)
                < SPARE_FAILURE_LIMIT
        });
        let Some(root) = spares else {
            return Ok(Idle {
                sock,
                id,
                spare: None,
                launch: None,
            });
        };
        let n = self
            .spares_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}", std::process::id()));
        let prepared = if crate::faults::spare_prepare_should_fail() {
            Err(io::Error::other("injected fault: spare_prepare_fails"))
        } else {
            crate::record::create_private_dir(&dir).and_then(|()| prepare(&sock, &dir))
        };
        match prepared {
            Ok(launch) => {
                self.spare_failures
                    .store(0, std::sync::atomic::Ordering::Relaxed);
                Ok(Idle {
                    sock,
                    id,
                    spare: Some(dir),
                    launch,
                })
            }
            Err(e) => {
                // The holder exits once its socket closes; the directory is removed here, as
                // the holder may not have got as far as to remove it itself. A failure may be
                // this holder's (killed in its prepare window, stalled by a loaded machine):
                // the next refill tries again. Several in a row are the filesystem's (full, or
                // refusing sockets): holders then wait without spare directories, and each exec
                // creates its process directory, as where there are no spares.
                drop(sock);
                let _ = std::fs::remove_dir_all(&dir);
                let failures = self
                    .spare_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                if failures >= SPARE_FAILURE_LIMIT {
                    tracing::warn!(dir = %dir.display(), "preparing an idle holder failed ({e}), {failures} times in a row; holders wait without spare directories from now on");
                } else {
                    tracing::warn!(dir = %dir.display(), "preparing an idle holder failed ({e}); the next refill tries again");
                }
                Err(e)
            }
        }
    }

    /// Whether no idle holder is left (the next `exec` would start one itself).
    pub fn is_empty(&self) -> bool {
        self.idle().is_empty()
    }

    /// Starts idle holders until `size` are ready (blocking; run off the `exec` path, see
    /// [`HolderPool::refill_later`]). The lock is not held while spawning, and one refill runs
    /// at a time (a refill asked for meanwhile is covered by the running one's loop, or by the
    /// next `exec`'s).
    pub fn refill(&self) {
        use std::sync::atomic::Ordering;
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        while self.idle().len() < self.size {
            match self.start_idle() {
                Ok(idle) => self.idle().push(idle),
                Err(e) => {
                    tracing::warn!("starting an idle holder failed: {e}");
                    break;
                }
            }
        }
        self.refilling.store(false, Ordering::Release);
    }

    /// Refills on a blocking thread when the pool is short (a no-op when it is full or a refill
    /// runs). `exec` calls it once it has answered: starting a holder then no longer competes
    /// with the command, its holder and the answer for the same cores.
    pub fn refill_later(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.idle().len() >= self.size || self.refilling.load(Ordering::Acquire) {
            return;
        }
        let pool = self.clone();
        tokio::task::spawn_blocking(move || pool.refill());
    }

    /// Lets every idle holder go (they exit when their socket closes), and the zygote with them.
    pub fn drain(&self) {
        self.idle().clear();
        #[cfg(target_os = "linux")]
        {
            self.zygote
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .zygote
                .take();
        }
    }
}

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

/// Failed preparations in a row after which idle holders stop using spare directories.
const SPARE_FAILURE_LIMIT: u32 = 3;

/// Specs up to this size are written to an idle holder from the runtime: its socket is empty,
/// and the kernel takes this much in one write without blocking.
const INLINE_SPEC_BYTES: usize = 64 * 1024;

/// Has a new holder prepare in the spare directory `dir` and waits for it to say it has: with
/// its launcher's spec pipe and greeting when it started one.
fn prepare(sock: &UnixStream, dir: &Path) -> io::Result<Option<Launch>> {
    use std::os::unix::ffi::OsStrExt;
    let frame = Encoder::new(Kind::Prepare)
        .rest(dir.as_os_str().as_bytes())
        .finish();
    (&mut &*sock).write_all(&frame)?;
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let (_, pipe) = expect_frame(sock, Kind::Ready, "the holder did not say it was ready")?;
    let launch = match pipe.into_iter().next() {
        Some(pipe) => {
            let (hello, stdin, _) = read_hello(sock)?;
            Some(Launch { pipe, hello, stdin })
        }
        None => None,
    };
    sock.set_read_timeout(None)?;
    Ok(launch)
}

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
            if let Err(e) = super::send_with_fd(&held.sock, &keep, Some(listener.as_raw_fd())) {
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
                super::recv_frame_with_fd(&std_pipe)
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

/// Connects to the holder of the process whose directory is `dir`, left by an earlier daemon.
pub fn attach(dir: &Path) -> io::Result<Held> {
    let path = dir.join(SOCKET_NAME);
    let sock = if path.as_os_str().len() < 100 {
        UnixStream::connect(&path)?
    } else {
        connect_long(dir)?
    };
    wake_listener(&sock);
    greeted(sock, None)
}

/// Resumes (SIGCONT) the holder that listens on the other end of `sock`, in case its own command
/// stopped it (`kill -STOP $PPID`): a stopped holder accepts no connection and greets no daemon,
/// and the next daemon would wait out the handshake for each such process before it serves.
/// The peer is the process that bound the socket in our own private process directory (Linux:
/// `SO_PEERCRED`), and of our uid: a holder of ours.
#[cfg(target_os = "linux")]
fn wake_listener(sock: &UnixStream) {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    if let Ok(cred) = getsockopt(sock, PeerCredentials)
        && cred.uid() == nix::unistd::geteuid().as_raw()
        && cred.pid() > 1
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(cred.pid()),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
}

/// Elsewhere the peer's pid is not at hand: a stopped holder is waited for (the handshake's
/// timeout), as before.
#[cfg(not(target_os = "linux"))]
fn wake_listener(_sock: &UnixStream) {}

/// Connects to the holder socket in `dir` when its path is too long for a socket address (104
/// bytes on macOS, 108 on Linux): on Linux through the directory's descriptor, a short path
/// whatever `dir` is.
#[cfg(target_os = "linux")]
fn connect_long(dir: &Path) -> io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir)?;
    UnixStream::connect(format!("/proc/self/fd/{}/{SOCKET_NAME}", d.as_raw_fd()))
}

/// Connects to the holder socket in `dir` when its path is too long for a socket address. macOS
/// has no `/proc/self/fd`, and its `connectat` is not in the SDK stubs the cross-build links
/// against; so a symlink with a short name in the user's temporary directory stands for `dir`
/// while connecting. This is the common case there: the state directory under
/// `~/Library/Application Support` makes process directories longer than 104 bytes.
#[cfg(not(target_os = "linux"))]
fn connect_long(dir: &Path) -> io::Result<UnixStream> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A name no one else uses (pid and counter); `symlink` never replaces an existing entry.
    let link = std::env::temp_dir().join(format!("yieldshell-{}-{n}", std::process::id()));
    std::os::unix::fs::symlink(dir, &link)?;
    let connected = UnixStream::connect(link.join(SOCKET_NAME));
    let _ = std::fs::remove_file(&link);
    connected
}

/// The exit status a holder left in `dir` (it may have exited since).
pub fn exit_file(dir: &Path) -> Option<ExitNote> {
    ExitNote::parse_file(&std::fs::read_to_string(dir.join(super::EXIT_FILE)).ok()?)
}

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
