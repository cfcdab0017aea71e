//! A followed output stream that outlives the daemon serving it (ARCHITECTURE.md, "Who owns what": processes survive
//! a daemon crash or `daemon restart`, so a person following one should not be dropped when the
//! daemon goes). When the stream breaks before the process ended, it is opened again from the
//! first byte not yet seen — on the daemon that re-adopted the process — so nothing is printed
//! twice and nothing is skipped.

use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use yieldshell_proto::client::{ClientError, Session};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

/// How long a broken stream is retried before giving up: a daemon restart takes well under a
/// second, and with auto-start off a person may need a moment to start it again.
const REOPEN_FOR: Duration = Duration::from_secs(60);

/// Pause between attempts to open the stream again.
const REOPEN_EVERY: Duration = Duration::from_millis(200);

/// Streams opened again in a row without an event before following gives up.
const MAX_FRUITLESS_REOPENS: u32 = 3;

/// `Follow`, opened again after the daemon went away.
pub struct ResumingFollow<'a> {
    session: &'a Session,
    req: pb::FollowRequest,
    stream: tonic::Streaming<pb::FollowEvent>,
    /// The first sequence number not yet delivered.
    next_seq: u64,
    /// The person's terminal is in raw mode (`attach`): notices need `\r\n` line ends.
    raw_terminal: bool,
    /// Streams opened again in a row that delivered nothing: a daemon that keeps closing them
    /// is not one that went away, and following ends.
    fruitless_reopens: u32,
}

impl<'a> ResumingFollow<'a> {
    /// Opens the stream (`req.since_seq` is where it starts). `raw_terminal`: the person's
    /// terminal is in raw mode (then a notice ends its lines with `\r\n`).
    pub async fn open(
        session: &'a Session,
        req: pb::FollowRequest,
        raw_terminal: bool,
    ) -> Result<ResumingFollow<'a>, ClientError> {
        let stream = session.follow(req.clone()).await?;
        Ok(ResumingFollow {
            next_seq: req.since_seq.unwrap_or(1),
            session,
            req,
            stream,
            raw_terminal,
            fruitless_reopens: 0,
        })
    }

    /// The next event; `None` once the stream keeps closing without the process ending (and
    /// without a daemon going away); an error once no daemon came back within a minute.
    pub async fn next(&mut self) -> Option<Result<pb::FollowEvent, ClientError>> {
        loop {
            let lost = match self.stream.next().await {
                Some(Ok(ev)) => {
                    self.fruitless_reopens = 0;
                    let end = ev.seq + ev.data.len() as u64;
                    self.next_seq = self.next_seq.max(end).max(ev.dropped_to);
                    return Some(Ok(ev));
                }
                Some(Err(status)) if !daemon_gone(ErrorKind::of_status(&status)) => {
                    return Some(Err(ClientError::Rpc(status)));
                }
                Some(Err(status)) => status.message().to_string(),
                None if self.fruitless_reopens >= MAX_FRUITLESS_REOPENS => return None,
                None => "the stream closed".to_string(),
            };
            self.fruitless_reopens += 1;
            let notice = format!(
                "[yieldctl: the daemon went away ({lost}); following {} again from seq {}]",
                self.req.process_id, self.next_seq
            );
            if self.raw_terminal {
                eprint!("\r\n{notice}\r\n");
            } else {
                eprintln!("{notice}");
            }
            match self.reopen().await {
                Ok(stream) => self.stream = stream,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Opens the stream again from `next_seq`, retrying while no daemon answers.
    async fn reopen(&self) -> Result<tonic::Streaming<pb::FollowEvent>, ClientError> {
        let req = pb::FollowRequest {
            since_seq: Some(self.next_seq),
            ..self.req.clone()
        };
        let give_up = Instant::now() + REOPEN_FOR;
        loop {
            match self.session.follow(req.clone()).await {
                Ok(stream) => return Ok(stream),
                Err(e) if daemon_gone(e.kind()) && Instant::now() < give_up => {
                    tokio::time::sleep(REOPEN_EVERY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A daemon that went away (crashed, stopped or restarting), as opposed to one that answered.
fn daemon_gone(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::DaemonUnavailable | ErrorKind::ShuttingDown)
}
