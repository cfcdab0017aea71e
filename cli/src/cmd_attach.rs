//! `yieldctl attach ID`: a person's terminal joins a running process, typically to type what an
//! agent cannot (a password) or to look at a full-screen program.
//!
//! - A terminal process (`exec --tty`): the person's terminal goes into raw mode; the program is
//!   resized to the person's window (and again on every SIGWINCH); the current screen is painted
//!   from the daemon's emulator (`read(screen, raw)`), then raw output is followed from exactly
//!   the log position that screen reflects, so nothing is painted twice or missed; every key is
//!   forwarded as typed (`write(input)`), whatever one `read` of stdin returned in one write.
//!   Ctrl-] (0x1d) detaches and leaves the process running.
//! - A pipe process: the last screenful of output, then live output; typed lines go to its stdin.
//!   Ctrl-D (end of input) and Ctrl-C detach; neither reaches the process, and its stdin stays
//!   open (closing it is `yieldctl write ID --eof`).
//!
//! Either way the process's log keeps everything that happened while attached (the daemon logs
//! the process's output; nothing here writes to it), and when the process ends the attach ends
//! with its exit code. The person's terminal mode is restored on every way out (see
//! [`crate::person_terminal`]).

use clap::Args;
use tokio::signal::unix::{Signal, SignalKind, signal};
use yieldshell_proto::client::Session;
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;
use yieldshell_proto::views::process_status_name;

use crate::follow_stream::ResumingFollow;
use crate::person_terminal::{self, RawMode, WindowSize};
use crate::{Ctx, exit, render};

/// The key that detaches from a terminal process: Ctrl-] (as in telnet; programs rarely use it).
pub const DETACH_KEY: u8 = 0x1d;

/// Arguments of `attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Process id, or the name given at exec.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::process_names::complete))]
    id: String,
}

impl AttachArgs {
    /// The arguments of `yieldctl attach ID` (for `yieldctl top`'s Enter).
    pub fn of(id: String) -> AttachArgs {
        AttachArgs { id }
    }
}

/// Why an attach ended.
enum Ending {
    /// The person detached; the process keeps running.
    Detached,
    /// The process ended (its final record).
    Exited(Box<pb::ProcessInfo>),
    /// yieldctl got this signal (SIGTERM, SIGHUP, SIGINT from outside): leave, process running.
    Signalled(i32),
    /// The daemon closed the output stream without saying the process ended.
    StreamClosed,
}

/// Signals that end an attach (the person's terminal mode must be restored first).
struct LeaveSignals {
    term: Signal,
    hup: Signal,
    int: Signal,
}

impl LeaveSignals {
    fn new() -> std::io::Result<LeaveSignals> {
        Ok(LeaveSignals {
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next of these signals, by number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
            _ = self.int.recv() => libc::SIGINT,
        }
    }
}

pub async fn run(ctx: &Ctx, mut a: AttachArgs) -> anyhow::Result<u8> {
    if !person_terminal::stdin_is_terminal() {
        eprintln!(
            "yieldctl: attach needs a terminal on stdin (it is for a person typing); a script \
             sends input with `yieldctl write {id} TEXT` and reads with `yieldctl read {id} \
             --follow`",
            id = a.id
        );
        return Ok(exit::USAGE);
    }
    let session = ctx.session()?;
    a.id = crate::process_names::resolve(&session, &a.id).await?;
    let size = person_terminal::person_window_size().unwrap_or(person_terminal::DEFAULT_SIZE);
    let first = session
        .read(pb::ReadRequest {
            process_id: a.id.clone(),
            tail_lines: Some(size.rows),
            streams: pb::Streams::Both as i32,
            ..Default::default()
        })
        .await?;
    let info = first.process.clone().unwrap_or_default();
    if info.status != pb::ProcessStatus::Running as i32 {
        eprintln!(
            "yieldctl: {} is not running ({}); `yieldctl read {}` shows its output",
            a.id,
            how_it_ended(&info),
            a.id
        );
        return Ok(exit::FAILURE);
    }
    let ending = if info.tty {
        attach_terminal(&session, &a.id, size).await?
    } else {
        attach_pipe(&session, &a.id, first.output.unwrap_or_default()).await?
    };
    Ok(report_ending(&a.id, &ending))
}

/// Says how the attach ended (on stderr, the terminal restored) and picks the exit code.
fn report_ending(id: &str, ending: &Ending) -> u8 {
    // After a SIGHUP the terminal may be gone: a failed message must not panic (`eprintln!`
    // would), the exit code still tells.
    let say = |line: String| {
        let _ = render::stderr_bytes(format!("{line}\n").as_bytes());
    };
    match ending {
        Ending::Detached => {
            say(format!("detached from {id} (still running)"));
            exit::OK
        }
        Ending::Signalled(sig) => {
            say(format!("detached from {id} (still running)"));
            u8::try_from(128 + sig).unwrap_or(exit::FAILURE)
        }
        Ending::Exited(info) => {
            say(format!(
                "{id} {} ({})",
                process_status_name(info.status),
                how_it_ended(info)
            ));
            if info.status == pb::ProcessStatus::TimedOut as i32 {
                exit::TIMED_OUT
            } else {
                exit::for_exit(info.exit_code, info.signal.as_deref())
            }
        }
        Ending::StreamClosed => {
            say(format!(
                "yieldctl: the daemon closed {id}'s output stream; `yieldctl ps` shows whether \
                 it still runs"
            ));
            exit::UNAVAILABLE
        }
    }
}

/// "exit code 3", "SIGKILL", or "running".
fn how_it_ended(info: &pb::ProcessInfo) -> String {
    match (info.exit_code, &info.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => s.clone(),
        _ => process_status_name(info.status).to_string(),
    }
}

/// Sends input to the process. A process that ended meanwhile is not an error here: the output
/// stream reports the end right after.
async fn forward(session: &Session, id: &str, req: pb::WriteRequest) -> anyhow::Result<()> {
    let req = pb::WriteRequest {
        process_id: id.to_string(),
        ..req
    };
    match session.write(req).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::ProcessExited => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Resizes the process's terminal to the person's window.
async fn resize(session: &Session, id: &str, size: WindowSize) -> anyhow::Result<()> {
    forward(
        session,
        id,
        pb::WriteRequest {
            cols: Some(size.cols),
            rows: Some(size.rows),
            ..Default::default()
        },
    )
    .await
}

/// Escape sequences that undo the modes a full-screen program may have left the person's
/// terminal in (attributes, hidden cursor, application cursor keys and keypad, bracketed paste,
/// mouse reporting), printed before the terminal mode is restored.
const RESET_MODES: &[u8] =
    b"\x1b[0m\x1b[?25h\x1b[?1l\x1b>\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l";

/// Tracks whether the program switched the person's terminal to the alternate screen (as `less`
/// and `vim` do), to switch back when leaving. Sees each chunk on its own: a switch split across
/// two chunks is missed, which leaves at worst the alternate screen showing after a detach.
#[derive(Default)]
struct AlternateScreen {
    on: bool,
}

impl AlternateScreen {
    fn observe(&mut self, chunk: &[u8]) {
        let last = |needle: &[u8]| chunk.windows(needle.len()).rposition(|w| w == needle);
        let mut latest: Option<(usize, bool)> = None;
        for (seq, on) in [
            (&b"\x1b[?1049h"[..], true),
            (b"\x1b[?1049l", false),
            (b"\x1b[?1047h", true),
            (b"\x1b[?1047l", false),
            (b"\x1b[?47h", true),
            (b"\x1b[?47l", false),
        ] {
            if let Some(at) = last(seq)
                && latest.is_none_or(|(l, _)| at > l)
            {
                latest = Some((at, on));
            }
        }
        if let Some((_, on)) = latest {
            self.on = on;
        }
    }
}

/// Splits typed bytes at the detach key: what to forward, and whether to detach after it.
fn split_at_detach(typed: &[u8]) -> (&[u8], bool) {
    match typed.iter().position(|b| *b == DETACH_KEY) {
        Some(at) => (&typed[..at], true),
        None => (typed, false),
    }
}

async fn attach_terminal(session: &Session, id: &str, size: WindowSize) -> anyhow::Result<Ending> {
    eprintln!("attached to {id}: Ctrl-] to detach");
    // Resize before taking the screen, so the screen painted and the program agree on the size;
    // the program's redraw for the new size arrives through the followed output.
    resize(session, id, size).await?;
    let read = session
        .read(pb::ReadRequest {
            process_id: id.to_string(),
            screen: true,
            raw: true,
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await?;
    let screen = read.screen.ok_or_else(|| {
        anyhow::anyhow!("the daemon returned no screen for terminal process {id} (is it older?)")
    })?;
    let mut output = ResumingFollow::open(
        session,
        pb::FollowRequest {
            process_id: id.to_string(),
            since_seq: Some(screen.seq),
            streams: pb::Streams::Both as i32,
            raw: true,
            ..Default::default()
        },
        true,
    )
    .await?;
    let mut leave = LeaveSignals::new()?;
    let mut winch = signal(SignalKind::window_change())?;
    let mut alternate = AlternateScreen::default();

    let raw_mode = RawMode::enter()?;
    let mut keys = person_terminal::spawn_stdin_reader();
    // Scroll what the person's window shows into its scrollback (rather than erase it), then
    // clear: the formatted screen paints only cells that are not blank.
    let mut clear = b"\r\n".repeat(usize::try_from(size.rows).unwrap_or(0));
    clear.extend_from_slice(b"\x1b[H\x1b[2J");
    // Whatever happens in raw mode (an error included), the terminal is reset below.
    let ending: anyhow::Result<Ending> = async {
        render::stdout_bytes(&clear)?;
        render::stdout_bytes(&screen.formatted)?;
        Ok(loop {
            tokio::select! {
                event = output.next() => match event {
                    None => break Ending::StreamClosed,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(ev)) => {
                        alternate.observe(&ev.data);
                        render::stdout_bytes(&ev.data)?;
                        if let Some(info) = ev.ended {
                            break Ending::Exited(Box::new(info));
                        }
                    }
                },
                typed = keys.recv() => match typed {
                    // stdin ended (the terminal went away): nothing more can be typed.
                    None => break Ending::Detached,
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(bytes)) if bytes.is_empty() => break Ending::Detached,
                    Some(Ok(bytes)) => {
                        // One read returns every byte already typed, so a paste goes in one write.
                        let (send, detach) = split_at_detach(&bytes);
                        if !send.is_empty() {
                            forward(session, id, pb::WriteRequest {
                                input: send.to_vec(),
                                ..Default::default()
                            }).await?;
                        }
                        if detach {
                            break Ending::Detached;
                        }
                    }
                },
                _ = winch.recv() => {
                    if let Some(size) = person_terminal::person_window_size() {
                        resize(session, id, size).await?;
                    }
                },
                sig = leave.next() => break Ending::Signalled(sig),
            }
        })
    }
    .await;
    let mut reset = RESET_MODES.to_vec();
    if alternate.on {
        reset.extend_from_slice(b"\x1b[?1049l");
    }
    reset.extend_from_slice(b"\r\n");
    // The terminal may be gone (SIGHUP): restoring matters more than these bytes.
    let _ = render::stdout_bytes(&reset);
    drop(raw_mode);
    ending
}

async fn attach_pipe(session: &Session, id: &str, tail: pb::Output) -> anyhow::Result<Ending> {
    eprintln!(
        "attached to {id} (not a terminal: typed lines go to its stdin): Ctrl-D or Ctrl-C to \
         detach"
    );
    render::stdout_bytes(&tail.stdout)?;
    render::stderr_bytes(&tail.stderr)?;
    let mut output = ResumingFollow::open(
        session,
        pb::FollowRequest {
            process_id: id.to_string(),
            since_seq: Some(tail.next_seq),
            streams: pb::Streams::Both as i32,
            ..Default::default()
        },
        false,
    )
    .await?;
    // Registered before reading: from here the person's Ctrl-C detaches instead of killing
    // yieldctl (the process, in the daemon's own session, never sees it either way).
    let mut leave = LeaveSignals::new()?;
    let mut lines = person_terminal::spawn_stdin_reader();
    let ending = loop {
        tokio::select! {
            event = output.next() => match event {
                None => break Ending::StreamClosed,
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(ev)) => {
                    if ev.stream == pb::Stream::Stderr as i32 {
                        render::stderr_bytes(&ev.data)?;
                    } else {
                        render::stdout_bytes(&ev.data)?;
                    }
                    if let Some(info) = ev.ended {
                        break Ending::Exited(Box::new(info));
                    }
                }
            },
            typed = lines.recv() => match typed {
                None => break Ending::Detached,
                Some(Err(e)) => return Err(e.into()),
                // Ctrl-D on an empty line: detach, leaving the process's stdin open.
                Some(Ok(line)) if line.is_empty() => break Ending::Detached,
                Some(Ok(line)) => {
                    forward(session, id, pb::WriteRequest {
                        input: line,
                        ..Default::default()
                    }).await?;
                }
            },
            sig = leave.next() => match sig {
                libc::SIGINT => {
                    // The terminal echoed ^C without a newline.
                    let _ = render::stderr_bytes(b"\n");
                    break Ending::Detached;
                }
                sig => break Ending::Signalled(sig),
            },
        }
    };
    Ok(ending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detach_key_ends_what_is_forwarded() {
        assert_eq!(split_at_detach(b"abc"), (&b"abc"[..], false));
        assert_eq!(split_at_detach(b"ab\x1dcd"), (&b"ab"[..], true));
        assert_eq!(split_at_detach(b"\x1d"), (&b""[..], true));
    }

    #[test]
    fn the_last_alternate_screen_switch_in_a_chunk_wins() {
        let mut alt = AlternateScreen::default();
        alt.observe(b"hello");
        assert!(!alt.on);
        alt.observe(b"\x1b[?1049hdraw");
        assert!(alt.on);
        alt.observe(b"x\x1b[?1049l\x1b[?1049hy");
        assert!(alt.on);
        alt.observe(b"\x1b[?47hq\x1b[?1049l");
        assert!(!alt.on);
    }
}
