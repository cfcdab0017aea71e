//! Drawing one frame of `yieldctl top`: a header line, the table, the selected process's output
//! pane and a footer with the keys (or the filter being typed, or a question). Every text that
//! came from a process goes through [`super::inert`] first.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use yieldshell_proto::pb;

use super::inert;
use super::pane::Pane;
use super::table::{self, is_running, status_text};

/// What the footer shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The keys.
    Normal,
    /// The person types a filter (`/`).
    Filter,
    /// `s` asks before stopping this process.
    ConfirmStop(String),
}

/// Everything a frame shows.
pub struct View<'a> {
    /// The rows.
    pub table: &'a table::Table,
    /// The selected process's output, when there is one.
    pub pane: Option<&'a Pane>,
    /// The footer's mode.
    pub mode: &'a Mode,
    /// A message for the footer (the last action's outcome), shown until the next key.
    pub message: Option<&'a str>,
    /// Why the table may be stale (the daemon went away), for the header.
    pub connection: Option<&'a str>,
    /// Colour (`NO_COLOR`, `--color`).
    pub color: bool,
    /// Our clock, Unix ms.
    pub now_unix_ms: i64,
}

/// The colour of a status (as `yieldctl ps` colours it), when colour is on.
fn status_style(p: &pb::ProcessInfo, color: bool) -> Style {
    if !color {
        return Style::new();
    }
    let c = match pb::ProcessStatus::try_from(p.status) {
        Ok(pb::ProcessStatus::Running) if p.waiting_for_input == Some(true) => Color::Cyan,
        Ok(pb::ProcessStatus::Running) => Color::Yellow,
        Ok(pb::ProcessStatus::Completed) if p.exit_code == Some(0) => Color::Green,
        Ok(pb::ProcessStatus::Stopped | pb::ProcessStatus::TimedOut) => Color::Magenta,
        _ => Color::Red,
    };
    Style::new().fg(c)
}

/// The last component of a directory, as the project's name.
fn project(cwd: &[u8]) -> String {
    let text = String::from_utf8_lossy(cwd);
    let name = text.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    inert::escaped(if name.is_empty() {
        b"/"
    } else {
        name.as_bytes()
    })
}

/// Draws the frame; returns the pane's inner size (rows, cols), for sizing its emulator.
pub fn frame(f: &mut Frame, v: &View) -> (u16, u16) {
    let area = f.area();
    let pane_height = (area.height * 2 / 5)
        .max(5)
        .min(area.height.saturating_sub(6));
    let [head, body, pane_area, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(pane_height),
        Constraint::Length(1),
    ])
    .areas(area);
    header(f, head, v);
    rows(f, body, v);
    let inner = pane(f, pane_area, v);
    footer(f, foot, v);
    (inner.height, inner.width)
}

fn header(f: &mut Frame, area: Rect, v: &View) {
    let t = v.table;
    let arrow = if t.descending { "▼" } else { "▲" };
    let mut spans = vec![
        Span::styled(" yieldctl top ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " {} processes, {} running   sort {} {arrow}",
            t.len(),
            t.running(),
            t.sort.column()
        )),
    ];
    if !t.filter.is_empty() {
        spans.push(Span::raw(format!(
            "   filter /{}",
            inert::escaped(t.filter.as_bytes())
        )));
    }
    if !t.show_ended {
        spans.push(Span::raw("   running only"));
    }
    if let Some(why) = v.connection {
        let style = if v.color {
            Style::new().fg(Color::Red)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        spans.push(Span::styled(format!("   {why}"), style));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn rows(f: &mut Frame, area: Rect, v: &View) {
    let wide = area.width >= 120;
    let mut titles = vec!["ID", "NAME"];
    if wide {
        titles.extend(["PROJECT", "SESSION"]);
    }
    titles.extend(["STATUS", "CPU", "MEM", "PORTS", "AGE", "COMMAND"]);
    let sort_column = v.table.sort.column();
    let head = Row::new(titles.iter().map(|t| {
        let style = if *t == sort_column {
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        };
        Cell::from(*t).style(style)
    }));
    let now = v.table.daemon_now(v.now_unix_ms);
    let shown = v.table.shown();
    let body: Vec<Row> = shown
        .iter()
        .map(|p| {
            let mut cells = vec![
                Cell::from(inert::escaped(p.process_id.as_bytes())),
                Cell::from(if p.name.is_empty() {
                    "-".to_string()
                } else {
                    inert::escaped(p.name.as_bytes())
                }),
            ];
            if wide {
                cells.push(Cell::from(project(&p.cwd)));
                cells.push(Cell::from(p.session_id.chars().take(8).collect::<String>()));
            }
            cells.extend([
                Cell::from(status_text(p)).style(status_style(p, v.color)),
                Cell::from(crate::render::cpu(p.cpu_percent)),
                Cell::from(crate::render::memory(p.rss_bytes)),
                Cell::from(inert::escaped(
                    crate::cmd_procs::ports(&p.listening).as_bytes(),
                )),
                Cell::from(table::age(now, p.started_at_unix_ms)),
                Cell::from(inert::escaped(&p.command)),
            ]);
            let row = Row::new(cells);
            if is_running(p) || !v.color {
                row
            } else {
                row.style(Style::new().add_modifier(Modifier::DIM))
            }
        })
        .collect();
    let mut widths = vec![Constraint::Length(17), Constraint::Length(14)];
    if wide {
        widths.extend([Constraint::Length(14), Constraint::Length(8)]);
    }
    widths.extend([
        Constraint::Length(16),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(11),
        Constraint::Length(4),
        Constraint::Min(10),
    ]);
    let widget = Table::new(body, widths)
        .header(head)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(v.table.selected_index());
    f.render_stateful_widget(widget, area, &mut state);
    if shown.is_empty() {
        let empty = if v.table.len() == 0 {
            "  no processes yet: they appear here as agents start them"
        } else {
            "  no process matches (/ to change the filter, e for ended ones)"
        };
        let y = area
            .y
            .saturating_add(1)
            .min(area.bottom().saturating_sub(1));
        f.render_widget(
            Paragraph::new(empty),
            Rect {
                y,
                height: 1,
                ..area
            },
        );
    }
}

fn pane(f: &mut Frame, area: Rect, v: &View) -> Rect {
    let selected = v.table.selected();
    let title = match (selected, v.pane) {
        (Some(p), Some(pane)) => {
            let mut t = format!(" {} ", inert::escaped(p.process_id.as_bytes()));
            if !p.name.is_empty() {
                t.push_str(&format!("· {} ", inert::escaped(p.name.as_bytes())));
            }
            if pane.tty {
                let (rows, cols) = pane.size();
                t.push_str(&format!("· terminal {cols}×{rows} "));
            }
            if let Some(note) = &pane.note {
                t.push_str(&format!("· {} ", inert::escaped(note.as_bytes())));
            } else if pane.ended {
                t.push_str("· ended ");
            }
            t
        }
        (Some(p), None) => format!(" {} ", inert::escaped(p.process_id.as_bytes())),
        (None, _) => " output ".to_string(),
    };
    let block = Block::bordered().title(title);
    let inner = block.inner(area);
    let lines: Vec<Line> = match v.pane {
        Some(pane) if selected.is_some() => pane
            .lines(inner.height, inner.width)
            .into_iter()
            .map(Line::from)
            .collect(),
        _ => Vec::new(),
    };
    f.render_widget(Paragraph::new(lines).block(block), area);
    inner
}

fn footer(f: &mut Frame, area: Rect, v: &View) {
    let line = match v.mode {
        Mode::Filter => format!(
            " /{}█   Enter keeps it, Esc clears it",
            inert::escaped(v.table.filter.as_bytes())
        ),
        Mode::ConfirmStop(id) => format!(
            " stop {} and its whole tree? y stops it, any other key does not",
            inert::escaped(id.as_bytes())
        ),
        Mode::Normal => match v.message {
            Some(m) => format!(" {}", inert::escaped(m.as_bytes())),
            None => {
                " ↑↓ select  Enter attach  s stop  / filter  < > sort  r reverse  e ended  q quit"
                    .to_string()
            }
        },
    };
    f.render_widget(
        Paragraph::new(line).style(Style::new().add_modifier(Modifier::REVERSED)),
        area,
    );
}
