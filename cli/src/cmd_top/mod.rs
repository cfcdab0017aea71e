//! `yieldctl top`: one live screen of what the agents are running, and a way to step in.
//!
//! The table comes from the daemon's `Watch` stream (the first event is the whole table, then
//! each change is pushed: nothing here polls), and so do the figures (CPU, memory, ports,
//! waiting for input): the daemon computes them, so `top` works the same through a forwarded
//! socket from another machine, where this machine's `/proc` knows nothing of the processes.
//! The selected process's output is followed into a pane ([`pane`]). Enter runs the ordinary
//! `yieldctl attach` (the screen handed back first, taken again after), `s` stops after a
//! confirmation, `/` filters, `<` `>` `r` sort, `e` hides ended processes, `q` or Esc quits.
//!
//! The terminal is restored on every way out ([`screen`]): quit, an error, a panic, SIGTERM,
//! SIGHUP or SIGINT, and the daemon gone for longer than `--reconnect-for` (a daemon restart
//! takes well under a second: the stream is opened again and the table starts over from the new
//! daemon's). Nothing a process wrote reaches the terminal as it is ([`inert`]).

mod draw;
mod inert;
mod keys;
mod pane;
mod screen;
mod table;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use yieldshell_proto::client::{ClientError, Session};
use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::{Ctx, exit, render};
use draw::Mode;
use keys::Key;
use pane::{Pane, PaneEvent};

/// Arguments of `top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only this project's processes (cwd inside the current directory, or started here).
    #[arg(long)]
    project: bool,
    /// Start with ended processes hidden (`e` shows them again).
    #[arg(long)]
    running: bool,
    /// When the daemon goes away, keep reconnecting this many seconds before quitting.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    reconnect_for: u64,
}

/// What the stream task tells the screen.
enum Feed {
    /// An event of the stream.
    Event(pb::WatchEvent),
    /// The stream broke; reconnecting.
    Lost(String),
    /// No daemon came back in time, or one refused the stream: `top` ends.
    Gone(String),
}

/// Pause between attempts to open the stream again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// Whether an error means "no daemon right now" (worth waiting for) rather than a refusal.
fn daemon_gone(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::DaemonUnavailable | ErrorKind::ShuttingDown)
}

/// Forwards the stream's events, opening it again after the daemon went away, for at most
/// `reconnect_for` without a daemon.
async fn feed(
    session: Arc<Session>,
    req: pb::WatchRequest,
    mut stream: tonic::Streaming<pb::WatchEvent>,
    reconnect_for: Duration,
    tx: mpsc::Sender<Feed>,
) {
    loop {
        let lost = loop {
            match stream.next().await {
                Some(Ok(ev)) => {
                    if tx.send(Feed::Event(ev)).await.is_err() {
                        return;
                    }
                }
                Some(Err(status)) if !daemon_gone(ErrorKind::of_status(&status)) => {
                    let _ = tx.send(Feed::Gone(status.message().to_string())).await;
                    return;
                }
                Some(Err(status)) => break status.message().to_string(),
                None => break "the stream closed".to_string(),
            }
        };
        if tx
            .send(Feed::Lost(format!("daemon gone ({lost}); reconnecting")))
            .await
            .is_err()
        {
            return;
        }
        let give_up = Instant::now() + reconnect_for;
        stream = loop {
            match session.watch(req.clone()).await {
                Ok(s) => break s,
                Err(e) if daemon_gone(e.kind()) && Instant::now() < give_up => {
                    tokio::time::sleep(RECONNECT_EVERY).await;
                }
                Err(e) => {
                    let _ = tx.send(Feed::Gone(format!("{e:#}"))).await;
                    return;
                }
            }
        };
    }
}

/// Why the screen loop ended.
enum Ending {
    /// `q`, Esc or Ctrl-C.
    Quit,
    /// A signal from outside.
    Signalled(i32),
    /// The daemon is gone (or refused the stream).
    DaemonGone(String),
}

/// The screen's state between frames.
struct App {
    table: table::Table,
    mode: Mode,
    message: Option<String>,
    connection: Option<String>,
    pane: Option<Pane>,
    pane_task: Option<JoinHandle<()>>,
    /// The pane's inner size at the last frame (rows, cols).
    pane_size: (u16, u16),
    /// `YIELDSHELL_TEST_FAULTS=top_panic_on_key:<c>`: this key panics (to test that a panic
    /// restores the terminal). Inert otherwise.
    panic_key: Option<char>,
}

impl App {
    /// After the selection may have moved: follows the selected process's output.
    fn follow_selected(&mut self, session: &Arc<Session>, tx: &mpsc::Sender<PaneEvent>) {
        let Some(selected) = self.table.selected() else {
            if let Some(t) = self.pane_task.take() {
                t.abort();
            }
            self.pane = None;
            return;
        };
        if self
            .pane
            .as_ref()
            .is_some_and(|p| p.id == selected.process_id)
        {
            return;
        }
        if let Some(t) = self.pane_task.take() {
            t.abort();
        }
        let (rows, cols) = self.pane_size;
        self.pane = Some(Pane::new(&selected.process_id, rows, cols));
        self.pane_task = Some(tokio::spawn(pane::follow(
            session.clone(),
            selected.process_id.clone(),
            selected.tty,
            tx.clone(),
        )));
    }

    fn on_pane(&mut self, ev: PaneEvent) {
        let Some(pane) = self.pane.as_mut() else {
            return;
        };
        let (rows, cols) = self.pane_size;
        match ev {
            PaneEvent::Start { id, screen } if id == pane.id => pane.start(screen, rows, cols),
            PaneEvent::Data { id, bytes } if id == pane.id => pane.feed(&bytes),
            PaneEvent::Ended { id } if id == pane.id => pane.ended = true,
            PaneEvent::Note { id, text } if id == pane.id => pane.note = Some(text),
            // A late event of the previous selection's task.
            _ => {}
        }
    }
}

/// What a key asks for that the loop itself must do.
enum Action {
    None,
    Quit,
    Attach(String),
    Stop(String),
}

fn on_key(app: &mut App, key: Key) -> Action {
    let ctrl_c = key == Key::CtrlC;
    if let (Some(c), Key::Char(k)) = (app.panic_key, key)
        && c == k
    {
        panic!("yieldctl top: the test fault top_panic_on_key:{c} was asked for");
    }
    app.message = None;
    match std::mem::replace(&mut app.mode, Mode::Normal) {
        Mode::Filter => {
            match key {
                Key::Enter => {}
                Key::Esc => app.table.filter.clear(),
                Key::Backspace => {
                    app.table.filter.pop();
                    app.mode = Mode::Filter;
                }
                _ if ctrl_c => return Action::Quit,
                Key::Char(c) => {
                    app.table.filter.push(c);
                    app.mode = Mode::Filter;
                }
                _ => app.mode = Mode::Filter,
            }
            app.table.keep_selection();
            Action::None
        }
        Mode::ConfirmStop(id) => {
            if key == Key::Char('y') {
                Action::Stop(id)
            } else {
                app.message = Some(format!("{id} left running"));
                Action::None
            }
        }
        Mode::Normal => {
            if ctrl_c {
                return Action::Quit;
            }
            match key {
                Key::Char('q') | Key::Esc => return Action::Quit,
                Key::Up | Key::Char('k') => app.table.move_selection(-1),
                Key::Down | Key::Char('j') => app.table.move_selection(1),
                Key::PageUp => app.table.move_selection(-10),
                Key::PageDown => app.table.move_selection(10),
                Key::Home | Key::Char('g') => app.table.select_end(true),
                Key::End | Key::Char('G') => app.table.select_end(false),
                Key::Char('/') => app.mode = Mode::Filter,
                Key::Char('<') => app.table.sort = app.table.sort.step(false),
                Key::Char('>') => app.table.sort = app.table.sort.step(true),
                Key::Char('r') => app.table.descending = !app.table.descending,
                Key::Char('e') => {
                    app.table.show_ended = !app.table.show_ended;
                    app.table.keep_selection();
                }
                Key::Enter => match app.table.selected() {
                    Some(p) if table::is_running(p) => {
                        return Action::Attach(p.process_id.clone());
                    }
                    Some(p) => {
                        app.message = Some(format!(
                            "{} is not running ({}): nothing to attach to",
                            p.process_id,
                            table::status_text(p)
                        ));
                    }
                    None => {}
                },
                Key::Char('s') => match app.table.selected() {
                    Some(p) if table::is_running(p) => {
                        app.mode = Mode::ConfirmStop(p.process_id.clone());
                    }
                    Some(p) => {
                        app.message = Some(format!(
                            "{} is not running ({})",
                            p.process_id,
                            table::status_text(p)
                        ));
                    }
                    None => {}
                },
                _ => {}
            }
            Action::None
        }
    }
}

/// The signals that end `top` (restoring the terminal first).
struct LeaveSignals {
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl LeaveSignals {
    fn new() -> std::io::Result<LeaveSignals> {
        Ok(LeaveSignals {
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
            _ = self.int.recv() => libc::SIGINT,
        }
    }
}

/// The key of the test fault `top_panic_on_key:<c>`, when `YIELDSHELL_TEST_FAULTS` asks for it.
fn panic_key() -> Option<char> {
    let spec = std::env::var("YIELDSHELL_TEST_FAULTS").ok()?;
    spec.split(',').find_map(|item| {
        let key = item.strip_prefix("top_panic_on_key:")?;
        let mut chars = key.chars();
        let c = chars.next()?;
        chars.next().is_none().then_some(c)
    })
}

pub async fn run(ctx: &Ctx, a: TopArgs) -> anyhow::Result<u8> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        eprintln!(
            "yieldctl: top needs a terminal (it is a screen for a person); a script lists \
             processes with `yieldctl ps` or `yieldctl --json ps`"
        );
        return Ok(exit::USAGE);
    }
    let session = Arc::new(ctx.session()?);
    let req = pb::WatchRequest {
        scope: if a.project {
            pb::Scope::Project
        } else {
            pb::Scope::All
        } as i32,
        include_completed: true,
        ..Default::default()
    };
    // Opened before the screen is taken: a daemon that cannot be reached (or is too old to
    // stream the table) is reported on the person's ordinary terminal.
    let stream = match session.watch(req.clone()).await {
        Ok(s) => s,
        Err(ClientError::Rpc(status)) if status.code() == tonic::Code::Unimplemented => {
            anyhow::bail!(
                "the running yieldshelld is older than this yieldctl and cannot stream its \
                 table: restart it (`yieldctl daemon restart` keeps every process)"
            )
        }
        Err(e) => return Err(e.into()),
    };
    let (feed_tx, mut feed_rx) = mpsc::channel(64);
    let feeder = tokio::spawn(feed(
        session.clone(),
        req,
        stream,
        Duration::from_secs(a.reconnect_for),
        feed_tx,
    ));
    let (pane_tx, mut pane_rx) = mpsc::channel(64);
    let (stop_tx, mut stop_rx) = mpsc::channel::<String>(8);
    let mut leave = LeaveSignals::new()?;
    let mut app = App {
        table: {
            let mut t = table::Table::default();
            t.show_ended = !a.running;
            t
        },
        mode: Mode::Normal,
        message: None,
        connection: None,
        pane: None,
        pane_task: None,
        pane_size: (10, 80),
        panic_key: panic_key(),
    };
    let mut winch = signal(SignalKind::window_change())?;
    let mut screen = screen::Screen::enter()?;
    let mut keys = crate::person_terminal::spawn_stdin_reader();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let ending = 'screen: loop {
        app.follow_selected(&session, &pane_tx);
        let now = render::now_unix_ms();
        let mut pane_size = app.pane_size;
        screen.terminal.draw(|f| {
            pane_size = draw::frame(
                f,
                &draw::View {
                    table: &app.table,
                    pane: app.pane.as_ref(),
                    mode: &app.mode,
                    message: app.message.as_deref(),
                    connection: app.connection.as_deref(),
                    color: ctx.color,
                    now_unix_ms: now,
                },
            );
        })?;
        if pane_size != app.pane_size {
            app.pane_size = pane_size;
            if let Some(p) = app.pane.as_mut() {
                p.resize(pane_size.0, pane_size.1);
            }
        }
        let action = tokio::select! {
            typed = keys.recv() => match typed {
                Some(Ok(bytes)) if !bytes.is_empty() => {
                    let mut action = Action::None;
                    for key in keys::parse(&bytes) {
                        action = on_key(&mut app, key);
                        if !matches!(action, Action::None) {
                            // Keys typed after an attach or a quit in the same read are dropped
                            // (they were typed ahead of a screen that is gone).
                            break;
                        }
                    }
                    action
                }
                // The terminal went away.
                _ => break 'screen Ending::Signalled(libc::SIGHUP),
            },
            // A resize: the next frame is drawn at the new size.
            _ = winch.recv() => Action::None,
            fed = feed_rx.recv() => match fed {
                Some(Feed::Event(ev)) => {
                    app.connection = None;
                    app.table.apply(ev, render::now_unix_ms());
                    Action::None
                }
                Some(Feed::Lost(why)) => {
                    app.connection = Some(why);
                    Action::None
                }
                Some(Feed::Gone(why)) => break 'screen Ending::DaemonGone(why),
                None => break 'screen Ending::DaemonGone("the table's stream ended".into()),
            },
            ev = pane_rx.recv() => {
                if let Some(ev) = ev {
                    app.on_pane(ev);
                }
                Action::None
            },
            said = stop_rx.recv() => {
                app.message = said;
                Action::None
            },
            _ = tick.tick() => Action::None,
            sig = leave.next() => break 'screen Ending::Signalled(sig),
        };
        match action {
            Action::None => {}
            Action::Quit => break 'screen Ending::Quit,
            Action::Stop(id) => {
                app.message = Some(format!("stopping {id}…"));
                let (session, tx) = (session.clone(), stop_tx.clone());
                tokio::spawn(async move {
                    let said = match session
                        .stop(pb::StopRequest {
                            process_id: id.clone(),
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(r) if r.stopped => format!("stopped {id} ({})", r.signal),
                        Ok(r) => format!("{id}: {}", r.error),
                        Err(e) => format!("could not stop {id}: {e}"),
                    };
                    let _ = tx.send(said).await;
                });
            }
            Action::Attach(id) => {
                // The key reader lets go of the terminal first (stopped and joined), so the
                // attach's own reader gets every key.
                drop(keys);
                screen.suspend();
                let attached =
                    crate::cmd_attach::run(ctx, crate::cmd_attach::AttachArgs::of(id.clone()))
                        .await;
                screen.resume()?;
                keys = crate::person_terminal::spawn_stdin_reader();
                // A Ctrl-C that detached from a pipe process was the attach's, not a request to
                // quit: listen afresh (a new listener hears only signals sent from now on).
                leave = LeaveSignals::new()?;
                match attached {
                    Ok(code) if code >= 128 => {
                        break 'screen Ending::Signalled(i32::from(code) - 128);
                    }
                    Ok(_) => app.message = Some(format!("back from {id}")),
                    Err(e) => app.message = Some(format!("attach {id}: {e:#}")),
                }
            }
        }
    };
    if let Some(t) = app.pane_task.take() {
        t.abort();
    }
    feeder.abort();
    drop(screen);
    Ok(match ending {
        Ending::Quit => exit::OK,
        Ending::Signalled(sig) => u8::try_from(128 + sig).unwrap_or(exit::FAILURE),
        Ending::DaemonGone(why) => {
            eprintln!("yieldctl: top: {why}");
            exit::UNAVAILABLE
        }
    })
}
