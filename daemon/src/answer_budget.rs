//! The memory one connection's answers may hold at once (docs/RELIABILITY.md L7).
//!
//! A client can pipeline calls on one HTTP/2 connection and never read the answers. Each call
//! that returns output (`read`, `read` with `grep`, `wait`, `write` with `until`, `exec`) builds
//! an answer of up to its `max_output_bytes` per stream, and HTTP/2 keeps the encoded answer
//! until the client reads it: 400 pipelined 8 MB reads held 3.1 GB. So every connection has an
//! [`AnswerBudget`] of [`PER_CONNECTION_BYTES`]: a call reserves its answer's largest size
//! ([`reserve`]) just before it reads the output, and the reservation is released only when the
//! answer's body has been handed to HTTP/2 in full ([`HoldAnswersLayer`]), i.e. once the
//! client has read (nearly) all of it, or the call or connection is gone. A call over the budget
//! waits (backpressure, never an error); the connection's other calls and every other
//! connection go on. It cannot deadlock the daemon: a call reserves at most once, and it waits
//! without holding anything, only for answers that are complete and merely unsent.
//!
//! The reservation travels in a task-local ([`CALL`]) that the layer sets around the handler's
//! future, so the output readers reserve without every handler threading the budget through.
//! Long polls (`wait`, `exec`'s yield, `follow`, `Watch`) hold nothing while they wait: they
//! reserve when they build their answer. `follow` and `Watch` are streams that HTTP/2 already
//! paces (one page at a time), so they reserve nothing.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codegen::http;

/// Bytes of answers one connection may have built but not yet sent: two of the largest `read`s
/// of both streams at once (16 MiB each, `service::HARD_MAX_READ_BYTES`), or thousands of
/// default-sized ones (20 kB each).
pub const PER_CONNECTION_BYTES: usize = 32 * 1024 * 1024;

/// One connection's budget for answers not yet sent.
#[derive(Debug, Clone)]
pub struct AnswerBudget(Arc<Semaphore>);

impl AnswerBudget {
    /// A full budget of [`PER_CONNECTION_BYTES`], for a new connection.
    pub fn new() -> AnswerBudget {
        AnswerBudget(Arc::new(Semaphore::new(PER_CONNECTION_BYTES)))
    }
}

impl Default for AnswerBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// The call being answered: its connection's budget and what it reserved.
#[derive(Debug, Clone)]
struct Call {
    budget: AnswerBudget,
    held: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

tokio::task_local! {
    /// Set by [`HoldAnswers`] around each call's handler.
    static CALL: Call;
}

/// Reserves room for an answer of up to `bytes` in the calling connection's budget, waiting
/// while the connection's earlier answers are unsent. A call reserves once (later reservations
/// of the same call are free, so no call can wait on itself); outside a call (unit tests, a
/// spawned task) there is nothing to reserve.
pub async fn reserve(bytes: usize) {
    let Ok(call) = CALL.try_with(Call::clone) else {
        return;
    };
    if call
        .held
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some()
    {
        return;
    }
    let weight = bytes.clamp(1, PER_CONNECTION_BYTES);
    let weight = u32::try_from(weight).unwrap_or(u32::MAX);
    // The semaphore is never closed, so this only fails if it were; then go on unbounded
    // rather than fail a read.
    if let Ok(permit) = call.budget.0.clone().acquire_many_owned(weight).await {
        *call.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(permit);
    }
}

/// The largest answer `max_bytes` per stream allows: both streams count when both are read.
pub fn answer_bytes(max_bytes: usize, streams: crate::output::StreamFilter) -> usize {
    match streams {
        crate::output::StreamFilter::Both => max_bytes.saturating_mul(2),
        _ => max_bytes,
    }
}

/// The connection's budget, from what the listener attached to the connection.
fn budget_of(extensions: &http::Extensions) -> Option<AnswerBudget> {
    #[cfg(unix)]
    {
        extensions
            .get::<crate::listener::ConnectionInfo>()
            .map(|c| c.answers.clone())
    }
    #[cfg(not(unix))]
    {
        extensions.get::<AnswerBudget>().cloned()
    }
}

/// Runs each call with its connection's budget and keeps its reservation with the answer's
/// body until that body has been sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct HoldAnswersLayer;

impl<S> tower::Layer<S> for HoldAnswersLayer {
    type Service = HoldAnswers<S>;

    fn layer(&self, inner: S) -> HoldAnswers<S> {
        HoldAnswers { inner }
    }
}

/// See [`HoldAnswersLayer`].
#[derive(Debug, Clone)]
pub struct HoldAnswers<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for HoldAnswers<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<HeldBody<ResBody>>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one that serves this call (tower's rule).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let Some(budget) = budget_of(req.extensions()) else {
            let answer = inner.call(req);
            return Box::pin(
                async move { Ok(answer.await?.map(|body| HeldBody::new(body, None))) },
            );
        };
        let call = Call {
            budget,
            held: Arc::default(),
        };
        let held = call.held.clone();
        let answer = CALL.sync_scope(call.clone(), || inner.call(req));
        Box::pin(async move {
            let response = CALL.scope(call, answer).await?;
            let reservation = held.lock().unwrap_or_else(|e| e.into_inner()).take();
            Ok(response.map(|body| HeldBody::new(body, reservation)))
        })
    }
}

/// An answer's body with its reservation, released once the body has ended (or is dropped:
/// the client cancelled the call or went away).
///
/// hyper hands a data frame to HTTP/2 as soon as the stream has any send capacity and asks for
/// the next frame at once, and tonic encodes a whole message as one frame: an 8 MB answer would
/// be in HTTP/2's buffer, and its reservation gone, before a byte of it was sent. So a reserved
/// answer is handed over in copied pieces of [`PIECE_BYTES`]: HTTP/2 takes new data for a
/// stream only while less than its send buffer (hyper's 400 KiB) waits, so the answer leaves
/// this body (and its reservation ends) only as fast as the client reads it, and at most a send
/// buffer of it outlives the reservation. A piece is a copy so that the answer's one large
/// allocation is freed with the reservation, not with its last piece.
#[derive(Debug)]
pub struct HeldBody<B> {
    inner: B,
    reservation: Option<OwnedSemaphorePermit>,
    /// What is left of the current data frame.
    rest: Bytes,
}

/// Bytes of a reserved answer handed to HTTP/2 at a time (its largest frame is 16 KiB).
const PIECE_BYTES: usize = 64 * 1024;

impl<B> HeldBody<B> {
    fn new(inner: B, reservation: Option<OwnedSemaphorePermit>) -> HeldBody<B> {
        HeldBody {
            inner,
            reservation,
            rest: Bytes::new(),
        }
    }

    fn next_piece(&mut self) -> http_body::Frame<Bytes> {
        let n = self.rest.len().min(PIECE_BYTES);
        let piece = Bytes::copy_from_slice(&self.rest[..n]);
        self.rest.advance(n);
        if self.rest.is_empty() {
            // Drop the frame's allocation now rather than with the next frame.
            self.rest = Bytes::new();
        }
        http_body::Frame::data(piece)
    }
}

impl<B> tonic::codegen::Body for HeldBody<B>
where
    B: tonic::codegen::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        if !self.rest.is_empty() {
            return Poll::Ready(Some(Ok(self.next_piece())));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => {
                match frame.into_data() {
                    Ok(data) if self.reservation.is_some() && data.len() > PIECE_BYTES => {
                        self.rest = data;
                        Poll::Ready(Some(Ok(self.next_piece())))
                    }
                    Ok(data) => Poll::Ready(Some(Ok(http_body::Frame::data(data)))),
                    // `is_data` said it is.
                    Err(frame) => Poll::Ready(Some(Ok(frame))),
                }
            }
            Poll::Ready(other) => {
                // The answer's data has all been handed over (trailers, the end, an error).
                self.reservation = None;
                Poll::Ready(other)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint.set_lower(inner.lower().saturating_add(rest));
        hint
    }
}
