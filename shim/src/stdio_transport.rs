//! The shim's stdio transport: newline-delimited JSON-RPC on stdin/stdout, as rmcp's
//! `AsyncRwTransport`, plus a promise that one does not keep: **a request whose `id` can be read
//! always gets an answer**.
//!
//! rmcp drops a line that serde_json refuses (a lone surrogate escape such as `"\udcff"`,
//! invalid UTF-8 inside a string) without a reply, and answers a well-formed message of the
//! wrong shape with an error that carries no `id`; either way the client waits for ever on
//! that request. Here every line that fails to decode is read a second time, leniently
//! ([`read_envelope`]: unknown members are skipped without decoding their strings), and when
//! that finds a top-level `id` the line is answered with a JSON-RPC error carrying it:
//!
//! - `-32700` (parse error) when the line is not strictly valid JSON;
//! - `-32602` (invalid params) when it is a JSON-RPC 2.0 request whose params do not fit;
//! - `-32600` (invalid request) otherwise.
//!
//! Lines without a readable `id` keep rmcp's behaviour, but for notifications: not JSON →
//! ignored (as the official SDKs do: replying to garbage can start an error storm with a peer
//! that echoes it); a notification (`method` without `id`) that does not decode → ignored
//! (JSON-RPC never answers notifications; rmcp answered some); other JSON → `-32600` without an
//! `id`. A line longer than [`MAX_LINE`] is never buffered: it is dropped unread and answered
//! with `-32600` when [`IdScanner`], which follows it in constant memory, finds a top-level `id`
//! in it (anywhere: first, or last as the TypeScript SDK writes it).
//!
//! Writes: one shared `Outbox` behind a (tokio) mutex, used by rmcp's `send` and by the replies
//! written here, so frames never interleave. A frame is queued whole, under the lock, before
//! any byte is written, and bytes a cancelled write did not get out stay queued for the next
//! writer — rmcp polls `receive` inside a `select!`, so any await here can be cancelled.
//!
//! Backpressure (docs/RELIABILITY.md L7): `receive` reads the next line only while fewer than
//! [`MAX_REQUESTS_AT_ONCE`] requests are unanswered (answered or cancelled ones count no more)
//! and fewer than [`MAX_UNSENT_FRAMES`] frames wait for stdout. A client that pipelines
//! requests, or does not read its answers, finds its further lines left in the pipe; the
//! shim's memory stays bounded whatever it sends.
//!
//! Reused ids: a request whose `id` rmcp may still answer under (a cancelled request's, whose
//! handler runs on) reaches rmcp under an alias, turned back in what goes out
//! ([`RequestIds`]), so the new request gets its own answer.
//!
//! Tasks: rmcp 3.11 drops the `taskIds` of a `subscriptions/listen` request, so the transport
//! shows each such line to [`TaskSubscriptions`] and lets it add the accepted ids to the
//! acknowledgement rmcp writes (see [`crate::tasks::listen`]); and it models none of the
//! 2025-11-25 tasks, so each line passes [`LegacyWire::rewrite_line`] before it is decoded and
//! the answers to `initialize` and `tools/list` get what that wire adds (see
//! [`crate::tasks::legacy`]).

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ErrorData, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::request_ids::RequestIds;
use crate::tasks::TaskWire;
use crate::tasks::legacy::LegacyWire;
use crate::tasks::listen::TaskSubscriptions;

/// Longest incoming line (one JSON-RPC message), as rmcp's default: a peer that never sends a
/// newline must not grow the buffer without bound.
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// Longest `id` value an [`IdScanner`] keeps (ids are short; a longer one is not read).
const MAX_ID_BYTES: usize = 1024;

/// UTF-8 byte order mark, which RFC 8259 §8.1 lets a parser ignore (rmcp does).
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The stdio transport rmcp serves the shim over (see the module doc).
pub struct StdioTransport<R, W> {
    read: BufReader<R>,
    /// The line being read; survives a cancelled `receive`, which resumes it.
    line: Vec<u8>,
    /// Set while the rest of an oversized line is skipped (up to its newline): what looks for
    /// its `id` meanwhile.
    discarding: Option<IdScanner>,
    outbox: Arc<Mutex<Option<Outbox<W>>>>,
    /// A reply decided but not yet queued (the wait for the outbox lock was cancelled).
    reply: Option<TxJsonRpcMessage<RoleServer>>,
    /// A queued reply whose flush was cancelled.
    flush_owed: bool,
    /// Where `subscriptions/listen` lines are noted and acknowledgements patched.
    subscriptions: Option<TaskSubscriptions>,
    /// Where 2025-11-25 task requests are renamed for rmcp.
    legacy: Option<LegacyWire>,
    /// Aliases of reused request ids.
    ids: RequestIds,
    /// What is being answered and written: reading pauses while either is at its bound.
    load: Load,
}

/// Requests the shim works on at once: a request past this waits in stdin (unread) until one
/// is answered or cancelled (docs/RELIABILITY.md L7: 50,000 pipelined reads took the shim to
/// 1.26 GB). Generous, because `subscriptions/listen` and task results stay open for long.
pub const MAX_REQUESTS_AT_ONCE: usize = 256;
/// Frames waiting for stdout: while this many are, stdin is not read (a client that does not
/// read its answers gets no more of them made).
pub const MAX_UNSENT_FRAMES: usize = 64;

/// Requests in progress and frames not yet written, shared by `send`'s futures and `receive`.
#[derive(Debug, Default)]
struct Load {
    /// Ids (as rmcp knows them) of the requests delivered and not yet answered or cancelled.
    answering: std::collections::HashSet<RequestId>,
    unsent: Arc<Unsent>,
}

/// Frames given to `send` and not yet written out.
#[derive(Debug, Default)]
struct Unsent {
    frames: std::sync::atomic::AtomicUsize,
    /// Wakes a paused `receive` when a frame has been written or a request answered.
    changed: tokio::sync::Notify,
}

/// One frame counted in [`Unsent`] until its `send` future is done or dropped.
struct UnsentFrame(Arc<Unsent>);

impl UnsentFrame {
    fn new(unsent: &Arc<Unsent>) -> UnsentFrame {
        unsent
            .frames
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        UnsentFrame(unsent.clone())
    }
}

impl Drop for UnsentFrame {
    fn drop(&mut self) {
        self.0
            .frames
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

impl Load {
    fn paused(&self) -> bool {
        self.answering.len() >= MAX_REQUESTS_AT_ONCE
            || self
                .unsent
                .frames
                .load(std::sync::atomic::Ordering::Acquire)
                >= MAX_UNSENT_FRAMES
    }

    /// Waits until another request may be read. Cancel-safe (it changes nothing).
    async fn room(&self) {
        loop {
            let changed = self.unsent.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.paused() {
                return;
            }
            changed.await;
        }
    }

    /// Notes what rmcp is given: a request to answer, or a cancellation that ends one.
    fn incoming(&mut self, message: &RxJsonRpcMessage<RoleServer>) {
        match message {
            rmcp::model::JsonRpcMessage::Request(request) => {
                self.answering.insert(request.id.clone());
            }
            rmcp::model::JsonRpcMessage::Notification(notification) => {
                if let rmcp::model::ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.answering.remove(id);
                }
            }
            _ => {}
        }
    }

    /// Notes what rmcp sends: an answer ends its request.
    fn outgoing(&mut self, message: &TxJsonRpcMessage<RoleServer>) {
        let id = match message {
            rmcp::model::JsonRpcMessage::Response(response) => Some(&response.id),
            rmcp::model::JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id
            && self.answering.remove(id)
        {
            self.unsent.changed.notify_one();
        }
    }
}

/// The writing half: frames queued whole, then written out.
struct Outbox<W> {
    out: W,
    queued: Vec<u8>,
    /// How much of `queued` is written already.
    written: usize,
    /// Patches the acknowledgements of task subscriptions on their way out.
    subscriptions: Option<TaskSubscriptions>,
    /// Patches the answers the 2025-11-25 tasks add to.
    legacy: Option<LegacyWire>,
}

impl<W: AsyncWrite + Unpin> Outbox<W> {
    /// Appends one frame (JSON plus newline). Synchronous, so a frame is never half queued.
    fn queue(&mut self, message: &TxJsonRpcMessage<RoleServer>) -> std::io::Result<()> {
        let mut frame = match (&self.subscriptions, &self.legacy, message) {
            // Only notifications can be a subscription's acknowledgement.
            (Some(subscriptions), _, rmcp::model::JsonRpcMessage::Notification(_)) => {
                let mut value = serde_json::to_value(message)?;
                subscriptions.patch_frame(&mut value);
                serde_json::to_vec(&value)?
            }
            (_, Some(legacy), rmcp::model::JsonRpcMessage::Response(response))
                if legacy.patches(&response.id) =>
            {
                let mut value = serde_json::to_value(message)?;
                legacy.patch_response(&mut value);
                serde_json::to_vec(&value)?
            }
            _ => serde_json::to_vec(message)?,
        };
        frame.push(b'\n');
        self.queued.extend_from_slice(&frame);
        Ok(())
    }

    /// Writes out everything queued. Cancel-safe: what is not written stays queued.
    async fn flush(&mut self) -> std::io::Result<()> {
        while self.written < self.queued.len() {
            let n = self.out.write(&self.queued[self.written..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.written += n;
        }
        self.queued.clear();
        self.written = 0;
        self.out.flush().await
    }
}

/// One step of [`StdioTransport::read_line`].
enum LineRead {
    /// A whole line (newline included) is in `line`.
    Line,
    /// A line longer than [`MAX_LINE`] ended (dropped); its `id`, if one was found.
    Oversized(Option<RequestId>),
    Eof,
    Failed(std::io::Error),
}

impl<R, W> StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading requests from `read` and writing frames to `write`.
    pub fn new(read: R, write: W) -> StdioTransport<R, W> {
        StdioTransport::with(read, write, None)
    }

    /// A transport that also carries the tasks wire rmcp does not model: `subscriptions/listen`
    /// requests and their acknowledgements (`taskIds`), and the 2025-11-25 tasks.
    pub fn with_tasks(read: R, write: W, tasks: TaskWire) -> StdioTransport<R, W> {
        StdioTransport::with(read, write, Some(tasks))
    }

    fn with(read: R, write: W, tasks: Option<TaskWire>) -> StdioTransport<R, W> {
        let (subscriptions, legacy) = match tasks {
            Some(t) => (Some(t.subscriptions), Some(t.legacy)),
            None => (None, None),
        };
        StdioTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: None,
            outbox: Arc::new(Mutex::new(Some(Outbox {
                out: write,
                queued: Vec::new(),
                written: 0,
                subscriptions: subscriptions.clone(),
                legacy: legacy.clone(),
            }))),
            reply: None,
            flush_owed: false,
            subscriptions,
            legacy,
            ids: RequestIds::default(),
            load: Load::default(),
        }
    }

    /// Shows a delivered `subscriptions/listen` line to the task subscriptions (a cheap byte
    /// search first: only those lines are parsed a second time), under the `alias` rmcp got
    /// its id as, if any.
    fn note_listen(&self, line: &[u8], alias: Option<RequestId>) {
        const METHOD: &[u8] = b"subscriptions/listen";
        let Some(subscriptions) = &self.subscriptions else {
            return;
        };
        if line.windows(METHOD.len()).any(|w| w == METHOD)
            && let Ok(mut value) = serde_json::from_slice::<Value>(line)
        {
            if let (Some(alias), Some(object)) = (alias, value.as_object_mut())
                && let Ok(alias) = serde_json::to_value(alias)
            {
                object.insert("id".into(), alias);
            }
            subscriptions.note_request(&value);
        }
    }

    /// Reads one line into `self.line` without ever holding more than [`MAX_LINE`] bytes of it.
    /// Cancel-safe: bytes are moved from the reader's buffer into `line` with no await in
    /// between, so a cancelled read resumes the same line.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (consumed, ended) = {
                let available = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => return LineRead::Failed(e),
                };
                if available.is_empty() {
                    return LineRead::Eof;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding.is_none() && self.line.len() + take > MAX_LINE {
                    // From here on the line is only scanned for its `id`, never kept.
                    let mut scanner = IdScanner::default();
                    scanner.feed(&self.line);
                    self.line.clear();
                    self.discarding = Some(scanner);
                }
                match self.discarding.as_mut() {
                    Some(scanner) => scanner.feed(&available[..take]),
                    None => self.line.extend_from_slice(&available[..take]),
                }
                (take, newline.is_some())
            };
            self.read.consume(consumed);
            if ended {
                return match self.discarding.take() {
                    Some(scanner) => LineRead::Oversized(scanner.found),
                    None => LineRead::Line,
                };
            }
        }
    }

    /// Queues and writes a reply decided by [`StdioTransport::receive`]; `false` when stdout is
    /// gone. Cancel-safe through `reply` and `flush_owed`.
    async fn write_reply(&mut self) -> bool {
        let mut outbox = self.outbox.lock().await;
        let Some(outbox) = outbox.as_mut() else {
            return false;
        };
        if let Some(reply) = self.reply.take() {
            if let Err(e) = outbox.queue(&reply) {
                // Serialising our own error frame cannot really fail; never let it stop reading.
                eprintln!("mcp-yieldshell: cannot encode an error reply: {e}");
                return true;
            }
            self.flush_owed = true;
        }
        if outbox.flush().await.is_err() {
            return false;
        }
        self.flush_owed = false;
        true
    }
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Synchronously, in the order rmcp sends: an answer frees its id before a request
        // that reuses it is read.
        self.load.outgoing(&item);
        let item = self.ids.outgoing(item);
        let outbox = self.outbox.clone();
        let unsent = UnsentFrame::new(&self.load.unsent);
        async move {
            let _unsent = unsent;
            let mut outbox = outbox.lock().await;
            let Some(outbox) = outbox.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the transport is closed",
                ));
            };
            outbox.queue(&item)?;
            outbox.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if (self.reply.is_some() || self.flush_owed) && !self.write_reply().await {
                return None;
            }
            // Backpressure: the next line waits in stdin while the shim is at its bounds.
            self.load.room().await;
            let verdict = match self.read_line().await {
                LineRead::Line => {
                    let renamed = self
                        .legacy
                        .as_ref()
                        .and_then(|legacy| legacy.rewrite_line(trim_line(&self.line)));
                    let mut verdict =
                        judge_line(renamed.as_deref().unwrap_or(trim_line(&self.line)));
                    if let Verdict::Deliver(message) = &mut verdict {
                        let alias = self.ids.incoming(message);
                        self.load.incoming(message);
                        self.note_listen(trim_line(&self.line), alias);
                    }
                    verdict
                }
                LineRead::Oversized(id) => judge_oversized(id),
                // Bytes left in `line` at EOF are a message without its newline: not delivered.
                LineRead::Eof => return None,
                LineRead::Failed(e) => {
                    eprintln!("mcp-yieldshell: cannot read stdin: {e}");
                    return None;
                }
            };
            // Cleared only now that the line is judged; the capacity stays for the next one.
            self.line.clear();
            match verdict {
                Verdict::Deliver(message) => return Some(*message),
                Verdict::Ignore => {}
                Verdict::Reply(reply) => self.reply = Some(*reply),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut outbox = self.outbox.lock().await;
        if let Some(mut out) = outbox.take() {
            // Best effort: a reply still queued goes out before stdout is dropped.
            out.flush().await?;
        }
        Ok(())
    }
}

/// The line without its newline, a trailing `\r` and a leading byte order mark.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(UTF8_BOM).unwrap_or(line)
}

/// What to do with one incoming line.
#[derive(Debug)]
pub enum Verdict {
    /// A message for rmcp.
    Deliver(Box<RxJsonRpcMessage<RoleServer>>),
    /// Nothing to do (blank, not JSON, a notification that does not decode).
    Ignore,
    /// Answer with this error frame.
    Reply(Box<TxJsonRpcMessage<RoleServer>>),
}

/// Decides what a complete line (without its newline) gets.
pub fn judge_line(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore;
    }
    let decode_error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => return Verdict::Deliver(Box::new(message)),
        Err(e) => e,
    };
    let envelope = read_envelope(line);
    // Strictly: `IgnoredAny` would skip the very escapes and bytes that made decoding fail.
    let strict_json = serde_json::from_slice::<Value>(line);
    let error = match (&strict_json, envelope.id.is_some()) {
        // Not JSON and no id to answer: ignored, as rmcp and the official SDKs do.
        (Err(_), false) => return Verdict::Ignore,
        (Err(e), true) => ErrorData::parse_error(
            format!("Parse error: the message is not valid JSON ({e}); it was not processed"),
            None,
        ),
        // JSON-RPC never answers a notification, even one that does not decode.
        (Ok(_), false) if envelope.method.is_some() && !envelope.has_id => {
            return Verdict::Ignore;
        }
        (Ok(_), _) => match (&envelope.method, envelope.version_2_0) {
            (Some(method), true) if envelope.id.is_some() => ErrorData::invalid_params(
                format!(
                    "Invalid params: the params of {method:?} do not fit its schema \
                     ({decode_error}); the request was not processed"
                ),
                None,
            ),
            _ => ErrorData::invalid_request(
                format!(
                    "Invalid request: not a JSON-RPC 2.0 message this server takes ({decode_error})"
                ),
                None,
            ),
        },
    };
    Verdict::Reply(Box::new(TxJsonRpcMessage::<RoleServer>::error(
        error,
        envelope.id,
    )))
}

/// Decides what a line over [`MAX_LINE`] gets, given the `id` found in it.
pub fn judge_oversized(id: Option<RequestId>) -> Verdict {
    eprintln!(
        "mcp-yieldshell: dropped an incoming message over the {} MiB limit",
        MAX_LINE / (1024 * 1024)
    );
    match id {
        Some(id) => Verdict::Reply(Box::new(TxJsonRpcMessage::<RoleServer>::error(
            ErrorData::invalid_request(
                format!(
                    "Invalid request: the message is over the {} MiB limit; it was not read",
                    MAX_LINE / (1024 * 1024)
                ),
                None,
            ),
            Some(id),
        ))),
        None => Verdict::Ignore,
    }
}

/// What a lenient reading of a line's top-level object found.
#[derive(Debug, Default, PartialEq)]
pub struct Envelope {
    /// The request id, when it is a string or an integer (what JSON-RPC ids are).
    pub id: Option<RequestId>,
    /// An `id` member was there (even `null` or unusable).
    pub has_id: bool,
    /// The `method`, when it is a string.
    pub method: Option<String>,
    /// `"jsonrpc": "2.0"` was there.
    pub version_2_0: bool,
}

/// Reads the top-level members that decide the reply, leniently: other members are skipped
/// without decoding their strings (serde_json does not check escapes or UTF-8 in what it
/// skips), and what was read before a syntax error is kept — so `id` is found in a message
/// that serde_json refuses, as long as the `id` itself is readable.
pub fn read_envelope(line: &[u8]) -> Envelope {
    let mut envelope = Envelope::default();
    let mut de = serde_json::Deserializer::from_slice(line);
    // The error only says where reading stopped; what was read is in `envelope`.
    let _ = serde::Deserializer::deserialize_map(&mut de, EnvelopeVisitor(&mut envelope));
    envelope
}

/// Fills an [`Envelope`] member by member, so a later error keeps the earlier members.
struct EnvelopeVisitor<'a>(&'a mut Envelope);

impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => {
                    self.0.has_id = true;
                    self.0.id = match map.next_value::<Value>()? {
                        Value::String(s) => Some(RequestId::String(s.into())),
                        Value::Number(n) => n.as_i64().map(RequestId::Number),
                        _ => None,
                    };
                }
                "method" => {
                    self.0.method = match map.next_value::<Value>()? {
                        Value::String(s) => Some(s),
                        _ => None,
                    };
                }
                "jsonrpc" => {
                    self.0.version_2_0 = map.next_value::<Value>()? == "2.0";
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Follows a JSON object fed in pieces, in constant memory, and notes its top-level `id` (a
/// string or an integer): how a line too long to keep still gets its answer. It tracks only
/// nesting, strings and escapes, so lone surrogates or invalid UTF-8 anywhere do not disturb it.
#[derive(Debug, Default)]
pub struct IdScanner {
    /// Nesting outside strings; 1 is inside the top-level object.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1 in an object, the next string is a member name (after `{` or `,`).
    expect_key: bool,
    /// Reading a top-level member name.
    in_key: bool,
    /// The member name so far; three bytes are enough to tell `id` from the rest.
    key: Vec<u8>,
    /// The bytes of the top-level `id`'s value while it is read.
    id_value: Option<Vec<u8>>,
    /// The last complete top-level `id` seen.
    pub found: Option<RequestId>,
}

impl IdScanner {
    /// Follows the next bytes of the object.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        let ends_member = !self.in_string && self.depth == 1 && (b == b',' || b == b'}');
        if ends_member && let Some(value) = self.id_value.take() {
            self.found = match serde_json::from_slice::<Value>(&value) {
                Ok(Value::String(s)) => Some(RequestId::String(s.into())),
                Ok(Value::Number(n)) => n.as_i64().map(RequestId::Number),
                _ => None,
            };
        } else if let Some(value) = self.id_value.as_mut()
            && value.len() < MAX_ID_BYTES
        {
            value.push(b);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.in_key = false;
                return;
            }
            if self.in_key && self.key.len() < 3 {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.expect_key = false;
                    self.in_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => self.expect_key = true,
            b':' if self.depth == 1 && self.key == b"id" => self.id_value = Some(Vec::new()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_of(line: &str) -> Value {
        match judge_line(line.as_bytes()) {
            Verdict::Reply(r) => serde_json::to_value(&r).expect("json"),
            other => panic!("expected a reply to {line:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_lone_surrogate_gets_a_parse_error_with_the_id() {
        let r = reply_of(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo \udcff"}}}"#,
        );
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], -32700);
        // The id may come last (the TypeScript SDK writes it after the params).
        let r = reply_of(
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"c":"\ud800"}},"id":"abc"}"#,
        );
        assert_eq!(r["id"], "abc");
        assert_eq!(r["error"]["code"], -32700);
    }

    #[test]
    fn invalid_utf8_in_a_string_gets_a_parse_error_with_the_id() {
        let mut line =
            br#"{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"c":""#.to_vec();
        line.extend_from_slice(b"\xff\xfe");
        line.extend_from_slice(br#""}},"id":3}"#);
        let Verdict::Reply(r) = judge_line(&line) else {
            panic!("no reply")
        };
        let r = serde_json::to_value(&r).expect("json");
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (3.into(), (-32700).into())
        );
    }

    #[test]
    fn params_of_the_wrong_type_get_invalid_params_with_the_id() {
        // (Wrong member types inside `params` decode as rmcp's `CustomRequest`, which rmcp
        // answers itself; `params` that is not an object does not decode.)
        let r = reply_of(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":5}"#);
        assert_eq!(r["id"], 4);
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn wrong_shapes_with_an_id_get_invalid_request_with_the_id() {
        let r = reply_of(r#"{"jsonrpc":"2.0","id":2,"method":42}"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (2.into(), (-32600).into())
        );
        let r = reply_of(r#"{"jsonrpc":"1.0","id":"x","method":"tools/list"}"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            ("x".into(), (-32600).into())
        );
    }

    #[test]
    fn an_id_before_a_syntax_error_is_answered() {
        let r = reply_of(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (9.into(), (-32700).into())
        );
    }

    #[test]
    fn lines_without_a_readable_id_keep_the_old_behaviour() {
        for ignored in [
            "{this is not json",
            "\u{1}\u{2}garbage",
            "   ",
            // A notification is never answered, even one that does not decode.
            r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
            // An id that is neither a string nor an integer, in a line that is not JSON.
            r#"{"id":[1],"method":"x","params":"\udcff"}"#,
        ] {
            assert!(
                matches!(judge_line(ignored.as_bytes()), Verdict::Ignore),
                "{ignored:?}"
            );
        }
        // JSON that is not a message, without an id: an Invalid Request without an id.
        let r = reply_of(r#"{"foo":"bar"}"#);
        assert_eq!(r["error"]["code"], -32600);
        assert!(r.get("id").is_none(), "{r}");
    }

    #[test]
    fn valid_messages_are_delivered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo \ud83d\ude00"}}}"#,
        ] {
            assert!(
                matches!(judge_line(line.as_bytes()), Verdict::Deliver(_)),
                "{line}"
            );
        }
    }

    /// The scanner's `id`, feeding `line` in pieces of `chunk` bytes.
    fn scanned_id(line: &[u8], chunk: usize) -> Option<RequestId> {
        let mut scanner = IdScanner::default();
        for piece in line.chunks(chunk) {
            scanner.feed(piece);
        }
        scanner.found
    }

    #[test]
    fn the_scanner_finds_only_the_top_level_id_wherever_it_is() {
        let number = |n| Some(RequestId::Number(n));
        let string = |s: &str| Some(RequestId::String(s.into()));
        let cases: [(&[u8], Option<RequestId>); 8] = [
            (
                br#"{"jsonrpc":"2.0","id":11,"method":"x","params":{"a":"b"}}"#,
                number(11),
            ),
            (
                br#"{"method":"x","params":{"id":1,"s":"\"id\":2,"},"id":"last"}"#,
                string("last"),
            ),
            (br#"{ "id" : -3 , "method":"x"}"#, number(-3)),
            (
                br#"{"params":{"c":"\udcff \\"},"id":"a,}b"}"#,
                string("a,}b"),
            ),
            (b"{\"params\":{\"c\":\"\xff\xfe\"},\"id\":4}", number(4)),
            (br#"{"method":"x","params":{"id":1}}"#, None),
            (br#"[{"id":1}]"#, None),
            (br#"{"idx":1,"id":1.5,"xid":2}"#, None),
        ];
        for (line, id) in cases {
            for chunk in [1, 3, line.len()] {
                assert_eq!(
                    scanned_id(line, chunk),
                    id,
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
    }

    #[test]
    fn an_oversized_message_is_answered_when_it_has_an_id() {
        let Verdict::Reply(r) = judge_oversized(Some(RequestId::Number(11))) else {
            panic!("no reply")
        };
        let r = serde_json::to_value(&r).expect("json");
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (11.into(), (-32600).into())
        );
        assert!(matches!(judge_oversized(None), Verdict::Ignore));
    }

    /// Whether `receive` has a message at once (its line is already in the transport's input).
    async fn received_at_once<R, W>(
        transport: &mut StdioTransport<R, W>,
    ) -> Option<RxJsonRpcMessage<RoleServer>>
    where
        R: AsyncRead + Send + Unpin,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        // A zero timeout polls `receive` once: ready only if nothing holds it back.
        tokio::time::timeout(std::time::Duration::ZERO, transport.receive())
            .await
            .ok()
            .flatten()
    }

    fn pings(ids: std::ops::Range<usize>) -> Vec<u8> {
        ids.flat_map(|id| {
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").into_bytes()
        })
        .collect()
    }

    #[tokio::test]
    async fn requests_past_the_bound_stay_unread_until_one_is_answered() {
        use tokio::io::AsyncWriteExt;

        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let (server_r, server_w) = tokio::io::split(server_io);
        let (_client_r, mut client_w) = tokio::io::split(client_io);
        let mut transport = StdioTransport::new(server_r, server_w);
        client_w
            .write_all(&pings(0..MAX_REQUESTS_AT_ONCE + 2))
            .await
            .expect("write");
        for _ in 0..MAX_REQUESTS_AT_ONCE {
            transport
                .receive()
                .await
                .expect("a request within the bound");
        }
        assert!(
            received_at_once(&mut transport).await.is_none(),
            "a request past the bound was read while {MAX_REQUESTS_AT_ONCE} were unanswered"
        );
        // Answered (the write itself may wait: nobody reads stdout here, and that is counted
        // apart), one more request is read.
        let answer = transport.send(rmcp::model::JsonRpcMessage::response(
            rmcp::model::ServerResult::empty(()),
            rmcp::model::NumberOrString::Number(7),
        ));
        let _written = tokio::spawn(answer);
        let next = transport.receive().await.expect("the next request");
        assert_eq!(
            serde_json::to_value(&next).expect("json")["id"],
            MAX_REQUESTS_AT_ONCE
        );
    }

    #[tokio::test]
    async fn stdin_is_not_read_while_stdout_is_backed_up() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let (server_r, _) = tokio::io::split(server_io);
        // stdout holds 64 bytes and nobody reads it yet.
        let (stdout_w, mut stdout_r) = tokio::io::duplex(64);
        let (_client_r, mut client_w) = tokio::io::split(client_io);
        let mut transport = StdioTransport::new(server_r, stdout_w);
        client_w.write_all(&pings(0..2)).await.expect("write");
        let mut writes = Vec::new();
        for n in 0..MAX_UNSENT_FRAMES {
            writes.push(tokio::spawn(transport.send(
                rmcp::model::JsonRpcMessage::notification(
                    rmcp::model::ServerNotification::ProgressNotification(
                        rmcp::model::Notification::new(
                            rmcp::model::ProgressNotificationParam::new(
                                rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(1)),
                                n as f64,
                            ),
                        ),
                    ),
                ),
            )));
        }
        assert!(
            received_at_once(&mut transport).await.is_none(),
            "stdin was read while {MAX_UNSENT_FRAMES} frames waited for stdout"
        );
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = stdout_r.read_to_end(&mut sink).await;
        });
        let next = transport
            .receive()
            .await
            .expect("a request once stdout drains");
        assert_eq!(serde_json::to_value(&next).expect("json")["id"], 0);
        for w in writes {
            w.await.expect("write task").expect("frame written");
        }
        drop(transport);
        drain.await.expect("drain");
    }

    #[tokio::test]
    async fn the_session_goes_on_after_a_reply_and_frames_stay_whole() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

        let (server_io, client_io) = tokio::io::duplex(64);
        let (server_r, server_w) = tokio::io::split(server_io);
        let (client_r, mut client_w) = tokio::io::split(client_io);
        let mut transport = StdioTransport::new(server_r, server_w);
        // The pipe holds 64 bytes, less than a reply: the reply is written in pieces while the
        // peer reads and writes at the same time, as a real client does.
        let writer = tokio::spawn(async move {
            client_w
                .write_all(
                    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\\udcff\"}}\n\
                      {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n",
                )
                .await
                .expect("write");
            client_w
        });
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(client_r).lines();
            lines.next_line().await.expect("read").expect("a reply")
        });
        let next = transport.receive().await.expect("the next request");
        assert_eq!(serde_json::to_value(&next).expect("json")["id"], 2);
        let _client_w = writer.await.expect("writer");
        let first = reader.await.expect("reader");
        let reply: Value = serde_json::from_str(&first).expect("a whole frame");
        assert_eq!(
            (reply["id"].clone(), reply["error"]["code"].clone()),
            (1.into(), (-32700).into())
        );
    }
}
