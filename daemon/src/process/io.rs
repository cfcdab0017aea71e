//! The process's stdin writer: a pipe, or for a terminal process the PTY master
//! (`terminal::MasterWriter`). Its output comes from the holder (`holder::link`) on Unix, from
//! the job's pipe readers (`job::read_into`) on Windows.
//!
//! It runs beside the actor and never touches [`ProcState`](super::ProcState): it serialises
//! `write` requests, so a process that stops reading its input blocks only the writer (with a
//! timeout), never the actor; writes that arrive meanwhile fail fast (`stdin_busy`) rather than
//! queue. On Unix the holder keeps its own copy of the pipe (so stdin outlives the daemon); `eof`
//! closes both (`on_eof` tells the holder).

use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use yieldshell_proto::errors::ErrorKind;

use super::StdinWrite;
use crate::error::Error;

/// How long a write to stdin may block before it is reported as not accepted.
const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where input goes: the stdin pipe, or a terminal's master.
#[cfg(unix)]
pub(super) type StdinSink = Box<dyn AsyncWrite + Send + Unpin>;

/// Writes `requests` to the process's stdin in order, until the actor closes it (`close`) or
/// every sender is gone. `on_eof` runs once, when an `eof` request has closed our end (to close
/// other copies of the pipe).
///
/// One write at a time: a request that arrives while an earlier one is still blocked (the process
/// is not reading) is answered at once with `stdin_busy` instead of queueing silently behind it,
/// so no `write` ever waits longer than its own [`STDIN_WRITE_TIMEOUT`].
pub(super) async fn stdin_writer<W: AsyncWrite + Unpin>(
    mut pipe: Option<W>,
    mut requests: mpsc::Receiver<StdinWrite>,
    close: CancellationToken,
    on_eof: impl FnOnce(),
) {
    let mut on_eof = Some(on_eof);
    loop {
        let req = tokio::select! {
            r = requests.recv() => match r { Some(r) => r, None => break },
            _ = close.cancelled() => break,
        };
        let Some(p) = pipe.as_mut() else {
            let _ = req.reply.send(Err(Error::new(
                ErrorKind::StdinClosed,
                "stdin was closed earlier (eof/close_stdin); start the process again to send more input",
            )));
            continue;
        };
        let written = {
            let write = tokio::time::timeout(STDIN_WRITE_TIMEOUT, p.write_all(&req.data));
            tokio::pin!(write);
            loop {
                tokio::select! {
                    r = &mut write => break r,
                    // Once every sender is gone this branch is disabled; the write ends alone.
                    Some(later) = requests.recv() => {
                        let _ = later.reply.send(Err(busy(req.data.len())));
                    }
                }
            }
        };
        let result = match written {
            Ok(Ok(())) => Ok(req.data.len()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Error::new(
                ErrorKind::ProcessExited,
                "the process no longer reads stdin (it exited or closed its input)",
            )),
            Ok(Err(e)) => Err(Error::new(
                ErrorKind::Internal,
                format!("writing stdin failed: {e}"),
            )),
            Err(_) => Err(Error::new(
                ErrorKind::StdinClosed,
                format!(
                    "stdin did not accept the input within {}s: the process is not reading it",
                    STDIN_WRITE_TIMEOUT.as_secs()
                ),
            )),
        };
        if req.eof || matches!(&result, Err(e) if e.kind == ErrorKind::ProcessExited) {
            pipe = None;
            if req.eof
                && let Some(f) = on_eof.take()
            {
                // Our end is closed; any other copy must go too for the process to see EOF.
                f();
            }
        }
        let _ = req.reply.send(result);
    }
}

/// The answer to a write that arrives while `pending` bytes of an earlier one are still blocked.
fn busy(pending: usize) -> Error {
    Error::new(
        ErrorKind::StdinBusy,
        format!(
            "an earlier write ({pending} bytes) is still waiting for the process to read its stdin \
             (it gives up after {}s); retry once it has been accepted",
            STDIN_WRITE_TIMEOUT.as_secs()
        ),
    )
}
