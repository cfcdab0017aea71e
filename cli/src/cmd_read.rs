//! `yieldctl read` (including `--follow`) and `yieldctl wait`.

use clap::{Args, ValueEnum};
use yieldshell_proto::client::ClientError;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::views::{ProcessErrorView, ReadView, StreamSelection, WaitView};

use crate::follow_stream::ResumingFollow;
use crate::{Ctx, exit, render};

/// Which output to print.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StreamArg {
    /// stdout and stderr.
    Both,
    /// stdout only.
    Stdout,
    /// stderr only.
    Stderr,
}

impl StreamArg {
    /// Prints a window of output. With both streams each goes to its own descriptor, as the
    /// process wrote it; a single selected stream is this command's output, so it goes to stdout
    /// whichever it is (`read --stream stderr > errors.log` captures it).
    fn print(self, stdout: &[u8], stderr: &[u8]) -> std::io::Result<()> {
        render::stdout_bytes(stdout)?;
        match self {
            StreamArg::Both => render::stderr_bytes(stderr),
            StreamArg::Stdout | StreamArg::Stderr => render::stdout_bytes(stderr),
        }
    }

    fn selection(self) -> StreamSelection {
        match self {
            StreamArg::Both => StreamSelection::Both,
            StreamArg::Stdout => StreamSelection::Stdout,
            StreamArg::Stderr => StreamSelection::Stderr,
        }
    }
}

/// Arguments of `read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// Process id, or the name given at exec.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::process_names::complete))]
    id: String,
    /// Keep printing new output until the process ends.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Start at this sequence number (from a previous `next_seq`).
    #[arg(long, value_name = "SEQ")]
    since: Option<u64>,
    /// Which stream to print.
    #[arg(long, value_enum, default_value_t = StreamArg::Both)]
    stream: StreamArg,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    tail: Option<u32>,
    /// Accepted for scripts written before every read included the on-disk log (it does now).
    #[arg(long, hide = true)]
    all: bool,
    /// Terminal process: print its screen as it looks now (rendered rows), not its output log.
    #[arg(long, conflicts_with_all = ["follow", "since", "tail", "all", "raw", "grep"])]
    screen: bool,
    /// Print only the lines that match this regex (from --since, or the start), each as
    /// `SEQ:line` (`SEQ-line` for context); exit 1 when none matched.
    #[arg(long, value_name = "REGEX", conflicts_with_all = ["follow", "tail"])]
    grep: Option<String>,
    /// With --grep: print N lines of context before and after each match (at most 20).
    #[arg(long, short = 'C', value_name = "N", requires = "grep")]
    context: Option<u32>,
    /// With --grep: stop after N matching lines.
    #[arg(long, short = 'm', value_name = "N", requires = "grep")]
    max_count: Option<u32>,
    /// Terminal process: the output as the program wrote it, escape sequences included (they
    /// are removed otherwise).
    #[arg(long)]
    raw: bool,
}

fn process_error(ctx: &Ctx, id: &str, e: ClientError) -> anyhow::Result<u8> {
    match e {
        ClientError::Rpc(status) if ctx.json => {
            let kind = ErrorKind::of_status(&status);
            render::json(&ProcessErrorView {
                process_id: id.to_string(),
                error: status.message().to_string(),
                error_kind: kind.as_str().to_string(),
            })?;
            Ok(exit::for_kind(kind))
        }
        e => Err(e.into()),
    }
}

pub async fn read(ctx: &Ctx, mut a: ReadArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    a.id = crate::process_names::resolve(&session, &a.id).await?;
    let streams = a.stream.selection();
    let base = pb::ReadRequest {
        process_id: a.id.clone(),
        since_seq: a.since,
        max_output_bytes: None,
        streams: streams.to_pb() as i32,
        tail_lines: a.tail,
        raw: a.raw,
        screen: a.screen,
        grep: a.grep.clone(),
        context: a.context,
        max_matches: a.max_count.map(|n| n.min(MAX_MATCHES_PER_CALL)),
        ..Default::default()
    };
    if a.screen && !ctx.json {
        return print_screen(&session, base).await;
    }
    if ctx.json {
        return match session.read(base).await {
            Ok(r) => {
                let view = ReadView::new(
                    &r.process.unwrap_or_default(),
                    &r.output.unwrap_or_default(),
                    streams,
                )
                .with_screen(r.screen.as_ref())
                .with_search(r.search.as_ref());
                render::json(&view)?;
                Ok(exit::OK)
            }
            Err(e) => process_error(ctx, &a.id, e),
        };
    }
    if a.grep.is_some() {
        return print_matches(&session, base, a.max_count).await;
    }
    // Whether bytes in the range asked for were retained nowhere (no spool, past the spool's
    // cap, or never written because the disk was full).
    let mut incomplete = false;
    // Where printing starts: the tail, or a page-by-page walk from --since / the oldest byte.
    let mut since = match (a.tail, a.since) {
        (Some(_), _) => {
            let r = session.read(base.clone()).await?;
            let out = r.output.unwrap_or_default();
            a.stream.print(&out.stdout, &out.stderr)?;
            out.next_seq
        }
        (None, since) => {
            let mut since = since.unwrap_or(1);
            loop {
                let req = pb::ReadRequest {
                    since_seq: Some(since),
                    tail_lines: None,
                    ..base.clone()
                };
                let out = session.read(req).await?.output.unwrap_or_default();
                if out.truncated {
                    // Said where the bytes are missing, and in the exit code.
                    incomplete = true;
                    eprintln!(
                        "[yieldctl: {} bytes (seq {}..{}) are retained nowhere]",
                        out.first_seq.saturating_sub(since),
                        since,
                        out.first_seq,
                    );
                }
                a.stream.print(&out.stdout, &out.stderr)?;
                since = out.next_seq;
                if !out.has_more {
                    break;
                }
            }
            since
        }
    };
    let done = if incomplete {
        exit::INCOMPLETE
    } else {
        exit::OK
    };
    if !a.follow {
        return Ok(done);
    }
    let req = pb::FollowRequest {
        process_id: a.id.clone(),
        since_seq: Some(since),
        streams: streams.to_pb() as i32,
        raw: a.raw,
        ..Default::default()
    };
    let mut stream = ResumingFollow::open(&session, req, false).await?;
    while let Some(ev) = stream.next().await {
        let ev = ev?;
        if ev.dropped_to > ev.dropped_from {
            incomplete = true;
            eprintln!(
                "[yieldctl: {} bytes (seq {}..{}) are retained nowhere]",
                ev.dropped_to - ev.dropped_from,
                ev.dropped_from,
                ev.dropped_to
            );
        }
        match pb::Stream::try_from(ev.stream) {
            Ok(pb::Stream::Stderr) => a.stream.print(&[], &ev.data)?,
            _ => a.stream.print(&ev.data, &[])?,
        }
        since = since.max(ev.seq + ev.data.len() as u64);
        if ev.ended.is_some() {
            break;
        }
    }
    Ok(if incomplete { exit::INCOMPLETE } else { done })
}

/// Most matching lines one `read --grep` request asks for (the daemon's bound); more are
/// fetched with further requests.
const MAX_MATCHES_PER_CALL: u32 = 1000;

/// `read --grep`: every matching line from `--since` (or the start) to the end, as grep prints
/// them (`SEQ:line`, `SEQ-line` for context), fetched search by search from each answer's
/// `next_seq`. Exit 0 when a line matched, 1 when none did (as grep), 5 when output in the
/// range was retained nowhere (said on stderr, where it occurs).
async fn print_matches(
    session: &yieldshell_proto::client::Session,
    mut req: pb::ReadRequest,
    max_count: Option<u32>,
) -> anyhow::Result<u8> {
    let mut left = max_count;
    let mut matched = false;
    let mut incomplete = false;
    let mut since = req.since_seq.unwrap_or(1);
    loop {
        req.since_seq = Some(since);
        req.max_matches = left.map(|n| n.min(MAX_MATCHES_PER_CALL));
        let resp = session.read(req.clone()).await?;
        let out = resp.output.unwrap_or_default();
        if out.truncated {
            incomplete = true;
            eprintln!(
                "[yieldctl: some output in seq {since}..{} is retained nowhere; it was not searched]",
                out.next_seq
            );
        }
        let lines = resp.search.map(|s| s.lines).unwrap_or_default();
        let mut text = Vec::new();
        for line in &lines {
            let mark = if line.context { '-' } else { ':' };
            text.extend_from_slice(format!("{}{mark}", line.seq).as_bytes());
            text.extend_from_slice(&line.text);
            text.push(b'\n');
        }
        render::stdout_bytes(&text)?;
        let found = u32::try_from(lines.iter().filter(|l| !l.context).count()).unwrap_or(u32::MAX);
        matched |= found > 0;
        if let Some(n) = left.as_mut() {
            *n = n.saturating_sub(found);
        }
        if !out.has_more || left == Some(0) || out.next_seq <= since {
            break;
        }
        since = out.next_seq;
    }
    Ok(if incomplete {
        exit::INCOMPLETE
    } else if matched {
        exit::OK
    } else {
        exit::FAILURE
    })
}

/// `read --screen`: the rendered rows of a terminal process's screen, then a newline.
async fn print_screen(
    session: &yieldshell_proto::client::Session,
    req: pb::ReadRequest,
) -> anyhow::Result<u8> {
    let id = req.process_id.clone();
    let resp = session
        .read(pb::ReadRequest {
            // Only the screen is printed; the smallest output window keeps the answer small.
            max_output_bytes: Some(1),
            ..req
        })
        .await?;
    let Some(screen) = resp.screen else {
        anyhow::bail!(
            "{id} has no screen: it does not run under a terminal (`yieldctl exec --tty` starts one that does); `yieldctl read {id}` prints its output"
        );
    };
    render::stdout_bytes(screen.text.as_bytes())?;
    render::stdout_bytes(b"\n")?;
    Ok(exit::OK)
}

/// Arguments of `wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Process id, or the name given at exec.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::process_names::complete))]
    id: String,
    /// Give up after this many milliseconds (the process keeps running) [default: wait forever].
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Return as soon as an output line matches this regex (e.g. "listening on").
    #[arg(long, value_name = "REGEX")]
    until: Option<String>,
    /// With --until: match output from this sequence number on [default: 1].
    #[arg(long, value_name = "SEQ")]
    since: Option<u64>,
    /// Also return as soon as the process waits for input on its stdin (Linux).
    #[arg(long)]
    for_input: bool,
}

pub async fn wait(ctx: &Ctx, mut a: WaitArgs) -> anyhow::Result<u8> {
    let session = ctx.session()?;
    a.id = crate::process_names::resolve(&session, &a.id).await?;
    let req = pb::WaitRequest {
        process_id: a.id.clone(),
        timeout_ms: a.timeout_ms,
        until: a.until,
        since_seq: a.since,
        max_output_bytes: None,
        streams: pb::Streams::Both as i32,
        for_input: a.for_input,
        ..Default::default()
    };
    let resp = match session.wait(req).await {
        Ok(r) => r,
        Err(e) => return process_error(ctx, &a.id, e),
    };
    let info = resp.process.clone().unwrap_or_default();
    let result = pb::WaitResult::try_from(resp.result).unwrap_or_default();
    let code = match result {
        pb::WaitResult::Exited => match pb::ProcessStatus::try_from(info.status) {
            Ok(pb::ProcessStatus::TimedOut) => exit::TIMED_OUT,
            _ => exit::for_exit(info.exit_code, info.signal.as_deref()),
        },
        pb::WaitResult::DeadlineReached => exit::TIMED_OUT,
        pb::WaitResult::Matched | pb::WaitResult::InputWanted | pb::WaitResult::Unspecified => {
            exit::OK
        }
    };
    if ctx.json {
        render::json(&WaitView::from(&resp))?;
        return Ok(code);
    }
    let status = yieldshell_proto::views::process_status_name(info.status);
    match result {
        pb::WaitResult::Matched => {
            render::stdout_bytes(&resp.matched_line)?;
            render::stdout_bytes(b"\n")?;
        }
        pb::WaitResult::InputWanted if info.echo_off == Some(true) => eprintln!(
            "{id} is waiting for input with echo off (a password?); type it yourself: \
             yieldctl attach {id}",
            id = a.id
        ),
        pb::WaitResult::InputWanted => eprintln!(
            "{id} is waiting for input on its stdin (yieldctl write --newline {id} TEXT, or type \
             it yourself: yieldctl attach {id})",
            id = a.id
        ),
        pb::WaitResult::DeadlineReached => eprintln!(
            "{} is still {status} after the deadline ({} so far); it keeps running",
            a.id,
            render::duration_ms(info.duration_ms)
        ),
        _ => {
            let how = match (info.exit_code, &info.signal) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => s.clone(),
                _ => "no exit status".into(),
            };
            eprintln!(
                "{} {status} ({how}) after {}",
                a.id,
                render::duration_ms(info.duration_ms)
            );
            render::sandbox_denial(&info);
        }
    }
    Ok(code)
}
