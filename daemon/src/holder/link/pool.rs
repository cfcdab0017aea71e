//! Holders started ahead of need ([`HolderPool`]): spawned (by the zygote on Linux), each
//! prepared in a spare directory of its own and waiting for its spec, so an `exec` pays for a
//! message rather than for starting a process. A holder that died while it waited is let go
//! before an `exec` gets it.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::greeting::{HANDSHAKE_TIMEOUT, expect_frame, read_hello};
#[cfg(target_os = "linux")]
use crate::holder::zygote::ForkError;
use crate::holder::{Encoder, Hello, Kind};
use crate::spawn::identity::{self, Identity};
use crate::spawn::reaper::Reaper;

/// A prepared holder's launcher (`holder::launcher`): the shell's process, waiting for the spec
/// on a socket the daemon writes to, and the holder's greeting for it.
#[derive(Debug)]
pub(super) struct Launch {
    /// The daemon's end of the launcher's socket.
    pub(super) pipe: OwnedFd,
    pub(super) hello: Hello,
    pub(super) stdin: Option<OwnedFd>,
}

/// An idle holder, waiting for its spec.
#[derive(Debug)]
pub struct Idle {
    pub(super) sock: UnixStream,
    /// The holder's identity, read when it was started (off the `exec` path).
    pub(super) id: Identity,
    /// Its spare directory (Linux), where its socket and exit file already are: the `exec`
    /// renames it to the process directory instead of creating one.
    spare: Option<PathBuf>,
    /// Its launcher, when it has one (Linux).
    pub(super) launch: Option<Launch>,
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
/// not for starting a process. New holders are forked by the zygote (Linux,
/// [`crate::holder::zygote`]): a fork of a small process instead of an `exec` of the holder
/// binary and its dynamic linking; without one (elsewhere, or while it cannot be started) the
/// daemon spawns them itself. On Linux each idle holder also waits in a spare directory of its
/// own, its socket bound and its exit file created (see `serve::process_dir::Prepared`): the
/// files a process needs exist before its `exec`.
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
    zygote: Option<crate::holder::zygote::Zygote>,
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
    pub(super) fn spawn(&self) -> io::Result<(UnixStream, i32)> {
        let (ours, theirs) = UnixStream::pair()?;
        #[cfg(target_os = "linux")]
        if let Some(pid) = self.fork_from_zygote(&theirs) {
            return Ok((ours, pid));
        }
        let pid = crate::holder::start::spawn_holder(&self.reaper, &theirs)?;
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
                None => match crate::holder::zygote::Zygote::start(&self.reaper) {
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

/// Failed preparations in a row after which idle holders stop using spare directories.
const SPARE_FAILURE_LIMIT: u32 = 3;

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
