//! Windows: the actor of a process started in a Job Object (`process::job`). The same actor
//! as on Unix, with the job as its tree ([`JobTree`]), the job's pipe readers instead of a holder
//! link, and the exit status from waiting on the shell's process handle.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Actor, ActorContext, Io, Readers, managed};
use crate::output::{OutputLog, Stream};
use crate::policy::redact::Redactor;
use crate::process::io::stdin_writer;
use crate::process::job::{Started, read_into};
use crate::process::tree::{self, Identity, JobTree};
use crate::process::{ManagedProcess, ProcessFacts};
use crate::status::ExitHow;

/// Starts the pipe readers, the stdin writer, the exit waiter and the actor of a process just
/// started in its job.
pub fn launch(
    facts: Arc<ProcessFacts>,
    running_slot: crate::limits::RunningSlot,
    started: Started,
    output: Arc<OutputLog>,
    redactor: Option<Arc<Redactor>>,
    timeout: Option<std::time::Duration>,
    ctx: ActorContext,
) -> (Arc<ManagedProcess>, JoinHandle<()>) {
    let now = std::time::Instant::now();
    let identity = Identity {
        pid: i32::try_from(started.pid).unwrap_or(i32::MAX),
        start_time: 0,
    };
    let (proc, control_rx, stdin_rx) = managed(
        facts,
        identity,
        now,
        output.clone(),
        running_slot,
        None,
        None,
    );
    tree::register(&proc.facts.id, &started.job);
    let out = tokio::spawn(read_into(
        started.stdout,
        Stream::Stdout,
        output.clone(),
        redactor.clone(),
    ));
    let err = tokio::spawn(read_into(started.stderr, Stream::Stderr, output, redactor));
    let aborts = vec![out.abort_handle(), err.abort_handle()];
    let join = tokio::spawn(async move {
        // An aborted reader (the cutoff) ends its wait too.
        let _ = out.await;
        let _ = err.await;
    });
    let stdin_close = CancellationToken::new();
    let stdin = started.stdin;
    let stdin_done = stdin_close.clone();
    tokio::spawn(async move {
        // The child opened its end before it started; this only confirms the connection.
        if let Err(e) = stdin.connect().await {
            tracing::debug!("stdin pipe: {e}");
        }
        // Closing our (only) end is the process's EOF: nothing else to close.
        stdin_writer(Some(stdin), stdin_rx, stdin_done, || {}).await;
    });
    let (exit_tx, exit_rx) = oneshot::channel();
    let mut child = started.child;
    tokio::spawn(async move {
        match child.wait().await {
            // A Windows exit code is a u32 (NTSTATUS values for crashes): kept bit for bit.
            Ok(status) => {
                let code = status.code().unwrap_or(-1);
                let _ = exit_tx.send(ExitHow::Code(code));
            }
            // Dropping the sender tells the actor the exit is unknowable: it stops what is left
            // and records the process as lost.
            Err(e) => tracing::error!("waiting for a process failed: {e}"),
        }
    });
    let actor = Actor::new(
        proc.clone(),
        identity.pid,
        JobTree::new(started.job),
        ctx,
        control_rx,
        Io {
            readers: Readers { join, aborts },
            stdin_close,
        },
        timeout.map(|t| Instant::from_std(now) + t),
    );
    let handle = tokio::spawn(actor.run(exit_rx));
    (proc, handle)
}
