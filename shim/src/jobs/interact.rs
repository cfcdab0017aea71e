//! `interact`: write to a job's stdin and return "any immediate output".
//!
//! # The settle window
//! What counts as the answer to an input is a judgement; ours is driven by the output itself,
//! never by a fixed sleep:
//!
//! 1. Note where the job's output log ends (`mark`), then write the input (plus a newline when it
//!    has none: agents send lines, and a program reading lines would otherwise wait for ever).
//! 2. Wait for the first byte after `mark`, at most [`FIRST_OUTPUT`]. A job that prints nothing
//!    in that time answers with empty output.
//! 3. Then keep waiting while output keeps coming: the answer is complete once the job has been
//!    quiet for [`QUIET`], or once [`MAX_WINDOW`] has passed since the input was written.
//! 4. Return every byte from `mark` on, stdout and stderr separately.
//!
//! A job that exits ends the window at once, and so does one that waits for input again (the
//! daemon's `for_input`: it answered and is back at its prompt, or took the input silently). Waiting uses the daemon's `Wait` with `until: "^"`
//! (which matches any line, or any unfinished line such as a prompt), so each step returns the
//! moment output arrives instead of polling. Output printed before step 1 is not part of the
//! answer (`tail` and `output` have it); output printed between step 1 and the write is, as it
//! cannot be told apart from a fast answer.

use std::time::Duration;

use tokio::time::Instant;
use yieldshell_proto::client::ClientError;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use super::tools::{call_error, collect_since, job_id, latest_window};
use super::{JobStatus, ProcessOutput, ToolError, job_status};
use crate::args::Args;
use crate::context::{Context, describe};

/// Longest wait for the first byte of the answer.
pub const FIRST_OUTPUT: Duration = Duration::from_millis(2_000);
/// The answer is complete once the job has printed nothing for this long.
pub const QUIET: Duration = Duration::from_millis(200);
/// Longest the whole window lasts, measured from the write.
pub const MAX_WINDOW: Duration = Duration::from_millis(10_000);

/// Matches any complete line, and any unfinished one (the daemon tests partial lines too).
const ANY_OUTPUT: &str = "^";

fn not_running(job_id: &str) -> ToolError {
    ToolError(format!(
        "Job {job_id} is not running and cannot accept input"
    ))
}

/// Waits until output arrives after `since` or `budget` passes. Returns the end of the log when
/// output arrived, `None` when the budget passed, the job ended or it waits for input again.
async fn next_output(
    ctx: &Context,
    job_id: &str,
    since: u64,
    budget: Duration,
) -> Result<Option<u64>, ClientError> {
    let req = pb::WaitRequest {
        process_id: job_id.to_string(),
        timeout_ms: Some(u64::try_from(budget.as_millis()).unwrap_or(u64::MAX)),
        until: Some(ANY_OUTPUT.to_string()),
        since_seq: Some(since),
        // Only the end position matters here; the answer is read once, at the end.
        max_output_bytes: Some(1),
        streams: pb::Streams::Both as i32,
        for_input: true,
        ..Default::default()
    };
    let resp = ctx.session.wait(req).await?;
    Ok((resp.result == pb::WaitResult::Matched as i32)
        .then(|| resp.output.unwrap_or_default().next_seq))
}

pub(crate) async fn interact(ctx: &Context, args: &Args<'_>) -> Result<ProcessOutput, ToolError> {
    let id = job_id(args)?;
    let mut input = args
        .opt_string("input")
        .map_err(|e| ToolError(format!("Invalid parameter: {e}")))?
        .ok_or_else(|| ToolError("Invalid parameter: missing required parameter input".into()))?;
    if !input.ends_with('\n') {
        input.push('\n');
    }

    // Step 1: where the answer will start, and whether the job can take input at all.
    let before = latest_window(ctx, &id, "interact with job").await?;
    if job_status(&before.process.unwrap_or_default()) != JobStatus::Running {
        return Err(not_running(&id));
    }
    let mark = before.output.unwrap_or_default().next_seq.max(1);
    let write = pb::WriteRequest {
        process_id: id.clone(),
        input: input.into_bytes(),
        eof: false,
        ..Default::default()
    };
    ctx.session.write(write).await.map_err(|e| match e.kind() {
        ErrorKind::ProcessExited => not_running(&id),
        ErrorKind::StdinClosed => ToolError(format!(
            "Job {id} has closed its stdin and cannot accept input"
        )),
        _ => call_error(&e, &id, "interact with job"),
    })?;
    let written = Instant::now();
    let window_err =
        |e: ClientError| ToolError(format!("Failed to interact with job: {}", describe(&e).0));

    // Steps 2 and 3: first output, then until quiet.
    let mut budget = FIRST_OUTPUT;
    let mut cursor = mark;
    loop {
        let left = MAX_WINDOW.saturating_sub(written.elapsed());
        if left.is_zero() {
            break;
        }
        match next_output(ctx, &id, cursor, budget.min(left))
            .await
            .map_err(window_err)?
        {
            Some(end) => {
                cursor = end.max(cursor + 1);
                budget = QUIET;
            }
            None => break,
        }
    }

    // Step 4: everything after the mark.
    let (stdout, stderr) = collect_since(ctx, &id, mark)
        .await
        .map_err(|e| call_error(&e, &id, "interact with job"))?;
    Ok(ProcessOutput {
        stdout: yieldshell_proto::views::text(&stdout).0,
        stderr: yieldshell_proto::views::text(&stderr).0,
    })
}
