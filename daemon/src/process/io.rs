//! The process's I/O tasks: the two pipe readers and the stdin writer.
//!
//! They run beside the actor and never touch [`ProcState`](super::ProcState): a reader only
//! redacts and appends to the [`OutputLog`] until EOF (the actor learns of that by joining it), and
//! the writer serialises `write` requests, so a process that stops reading its input blocks only
//! the writer (with a timeout), never the actor.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use yieldshell_proto::errors::ErrorKind;

use super::StdinWrite;
use crate::error::Error;
use crate::output::{OutputLog, Stream};
use crate::policy::redact::{RedactStream, Redactor};

/// How long a write to stdin may block before it is reported as not accepted.
const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Quiet time after which buffered spool bytes are written.
const SPOOL_FLUSH_DELAY: Duration = Duration::from_millis(50);
/// Size of one pipe read.
const READ_BUFFER: usize = 128 * 1024;

/// Copies one pipe into the log (redacted, if the session has secrets) until EOF, then flushes
/// the spool.
pub(super) async fn pump(
    mut pipe: pipe::Receiver,
    stream: Stream,
    log: Arc<OutputLog>,
    redactor: Option<Arc<Redactor>>,
) {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut redact = redactor.map(RedactStream::new);
    let mut clean = Vec::new();
    // The spool buffers writes (one write per pipe read would make the disk the bottleneck of a
    // flood); when output pauses for SPOOL_FLUSH_DELAY, what is buffered goes to disk, so a
    // daemon crash loses at most that much of a quiet process's output.
    let mut unflushed = false;
    loop {
        let read = if unflushed {
            match tokio::time::timeout(SPOOL_FLUSH_DELAY, pipe.read(&mut buf)).await {
                Ok(r) => r,
                Err(_quiet) => {
                    log.flush_spool();
                    unflushed = false;
                    continue;
                }
            }
        } else {
            pipe.read(&mut buf).await
        };
        match read {
            Ok(0) => break,
            Ok(n) => {
                match redact.as_mut() {
                    Some(r) => {
                        clean.clear();
                        r.push(&buf[..n], &mut clean);
                        log.append(stream, &clean);
                    }
                    None => log.append(stream, &buf[..n]),
                }
                unflushed = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(?stream, "reading process output failed: {e}");
                break;
            }
        }
    }
    if let Some(r) = redact.as_mut() {
        clean.clear();
        r.finish(&mut clean);
        log.append(stream, &clean);
    }
    log.flush_spool();
}

/// Writes `requests` to the process's stdin in order, until the actor closes it (`close`) or
/// every sender is gone.
pub(super) async fn stdin_writer(
    pipe: pipe::Sender,
    mut requests: mpsc::Receiver<StdinWrite>,
    close: CancellationToken,
) {
    let mut pipe = Some(pipe);
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
        let result = match tokio::time::timeout(STDIN_WRITE_TIMEOUT, p.write_all(&req.data)).await {
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
        }
        let _ = req.reply.send(result);
    }
}
