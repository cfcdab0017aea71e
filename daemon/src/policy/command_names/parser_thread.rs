//! The threads that run brush-parser, off the async runtime and on a big stack.
//!
//! brush-parser recurses once per nesting level and needs far more stack than a runtime
//! worker has (see [`PARSER_STACK_BYTES`]), and a parse is
//! CPU work that must not hold up a runtime worker. `tokio::task::spawn_blocking` cannot
//! choose a stack size, and a fresh thread per command costs a clone and a 64 MiB mapping
//! per `exec` and lets a burst of requests start a burst of such threads. So a fixed
//! pool of [`PARSER_THREADS`] long-lived threads, started on first use, takes lines from
//! one channel; async callers await the answer, synchronous ones (tests) block on it.
//!
//! One thread would do for ordering (none is needed) but would make every session's
//! check wait behind one slow line; the parse time is bounded by the guards of the
//! parent module (line length, nesting, linear-time here-document scan), so two threads
//! keep a slow line from stalling everyone without adding much memory. A parser panic is
//! caught per line and becomes a refusal; the thread lives on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use super::{CommandParseError, Inspection, PARSER_STACK_BYTES, inspect_here, syntax};

/// How many parser threads run.
const PARSER_THREADS: usize = 2;

/// What a parser thread answers.
type Answer = Result<Inspection, CommandParseError>;

/// A line to inspect and where its answer goes.
struct Job {
    line: String,
    reply: Box<dyn FnOnce(Answer) + Send>,
}

/// The channel into the pool, or why the pool could not start.
fn pool() -> &'static Result<mpsc::Sender<Job>, String> {
    static POOL: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let mut started = 0;
        let mut last_error = String::new();
        for index in 0..PARSER_THREADS {
            let receiver = receiver.clone();
            match std::thread::Builder::new()
                .name(format!("command-names-{index}"))
                .stack_size(PARSER_STACK_BYTES)
                .spawn(move || serve(&receiver))
            {
                Ok(_) => started += 1,
                Err(e) => last_error = e.to_string(),
            }
        }
        if started == 0 {
            return Err(last_error);
        }
        Ok(sender)
    })
}

/// Answers jobs until the process ends (the sender lives in a static).
fn serve(receiver: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never while parsing.
        let job = match receiver.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(mpsc::RecvError) => return,
        };
        // Nothing outlives one inspection, so a panic leaves no broken state behind.
        let answer = catch_unwind(AssertUnwindSafe(|| inspect_here(&job.line)))
            .unwrap_or_else(|_| Err(syntax("the parser panicked")));
        (job.reply)(answer);
    }
}

/// Hands `line` to the pool; `reply` gets the answer, or a refusal if the pool is gone.
fn submit(line: String, reply: Box<dyn FnOnce(Answer) + Send>) {
    match pool() {
        Ok(sender) => {
            if let Err(mpsc::SendError(job)) = sender.send(Job { line, reply }) {
                (job.reply)(Err(syntax("the parser threads have stopped")));
            }
        }
        Err(e) => reply(Err(syntax(format!("cannot start the parser: {e}")))),
    }
}

/// Inspects `line` on a parser thread without blocking the async runtime.
pub async fn inspect(line: String) -> Answer {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    submit(
        line,
        Box::new(move |answer| {
            // The caller may have gone away (its request was dropped); nothing to do then.
            let _ = sender.send(answer);
        }),
    );
    receiver
        .await
        .unwrap_or_else(|_| Err(syntax("the parser dropped the line")))
}

/// Inspects `line` on a parser thread, blocking the calling thread until it answers.
/// For tests and synchronous callers only: async code uses [`inspect`].
pub fn inspect_blocking(line: &str) -> Answer {
    let (sender, receiver) = mpsc::sync_channel(1);
    submit(
        line.to_string(),
        Box::new(move |answer| {
            let _ = sender.send(answer);
        }),
    );
    receiver
        .recv()
        .unwrap_or_else(|_| Err(syntax("the parser dropped the line")))
}
