//! The table `yieldctl top` shows: the rows the daemon's `Watch` stream sent, the person's sort
//! order, filter and selection. Pure state, no terminal: unit-tested on its own.

use std::collections::HashMap;

use yieldshell_proto::pb;
use yieldshell_proto::views::process_status_name;

/// The column the table is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Start time (the default, newest first, as `ps`).
    Started,
    /// CPU use.
    Cpu,
    /// Resident memory.
    Memory,
    /// Status (running first).
    Status,
    /// Name, then id.
    Name,
}

impl SortKey {
    const ORDER: [SortKey; 5] = [
        SortKey::Started,
        SortKey::Cpu,
        SortKey::Memory,
        SortKey::Status,
        SortKey::Name,
    ];

    /// The next key (`>`), or the previous one (`<`).
    pub fn step(self, forward: bool) -> SortKey {
        let at = Self::ORDER.iter().position(|k| *k == self).unwrap_or(0);
        let n = Self::ORDER.len();
        Self::ORDER[if forward {
            (at + 1) % n
        } else {
            (at + n - 1) % n
        }]
    }

    /// The column title it sorts.
    pub fn column(self) -> &'static str {
        match self {
            SortKey::Started => "AGE",
            SortKey::Cpu => "CPU",
            SortKey::Memory => "MEM",
            SortKey::Status => "STATUS",
            SortKey::Name => "NAME",
        }
    }
}

/// What the person sees of the daemon's table.
#[derive(Debug)]
pub struct Table {
    rows: HashMap<String, pb::ProcessInfo>,
    /// The daemon's clock minus ours (ms), from the last event: ages are the daemon's.
    clock_offset_ms: i64,
    /// Sort column.
    pub sort: SortKey,
    /// Largest first (for `Started`: newest first).
    pub descending: bool,
    /// Case-insensitive text every shown row contains (in its id, name, command, directory,
    /// status or ports).
    pub filter: String,
    /// Ended processes are shown too.
    pub show_ended: bool,
    selected: Option<String>,
    /// Where the selection was in the shown rows, to stay near it when its row goes.
    selected_at: usize,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            rows: HashMap::new(),
            clock_offset_ms: 0,
            sort: SortKey::Started,
            descending: true,
            filter: String::new(),
            show_ended: true,
            selected: None,
            selected_at: 0,
        }
    }
}

impl Table {
    /// Applies one event of the stream (received at `now`, our clock in Unix ms).
    pub fn apply(&mut self, ev: pb::WatchEvent, now_unix_ms: i64) {
        if ev.reset {
            self.rows.clear();
        }
        for change in ev.changes {
            if let Some(p) = change.process {
                self.rows.insert(p.process_id.clone(), p);
            }
        }
        for id in ev.removed {
            self.rows.remove(&id);
        }
        if ev.now_unix_ms > 0 {
            self.clock_offset_ms = ev.now_unix_ms - now_unix_ms;
        }
        self.keep_selection();
    }

    /// The daemon's clock now, given ours.
    pub fn daemon_now(&self, now_unix_ms: i64) -> i64 {
        now_unix_ms + self.clock_offset_ms
    }

    /// Every row (filter and ended toggle not applied).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// How many rows are of running processes.
    pub fn running(&self) -> usize {
        self.rows.values().filter(|p| is_running(p)).count()
    }

    /// The rows shown, in order.
    pub fn shown(&self) -> Vec<&pb::ProcessInfo> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&pb::ProcessInfo> = self
            .rows
            .values()
            .filter(|p| self.show_ended || is_running(p))
            .filter(|p| needle.is_empty() || haystack(p).contains(&needle))
            .collect();
        rows.sort_by(|a, b| {
            let order = match self.sort {
                SortKey::Started => a.started_at_unix_ms.cmp(&b.started_at_unix_ms),
                SortKey::Cpu => a
                    .cpu_percent
                    .unwrap_or(-1.0)
                    .total_cmp(&b.cpu_percent.unwrap_or(-1.0)),
                SortKey::Memory => a.rss_bytes.cmp(&b.rss_bytes),
                // Running last in ascending order, so first in the default descending one.
                SortKey::Status => {
                    (is_running(a), status_text(a)).cmp(&(is_running(b), status_text(b)))
                }
                SortKey::Name => (a.name.as_str(), a.process_id.as_str())
                    .cmp(&(b.name.as_str(), b.process_id.as_str())),
            };
            let order = if self.descending {
                order.reverse()
            } else {
                order
            };
            // Ties: newest first, then by id, so the order never flickers.
            order
                .then_with(|| b.started_at_unix_ms.cmp(&a.started_at_unix_ms))
                .then_with(|| a.process_id.cmp(&b.process_id))
        });
        rows
    }

    /// The selected row (the first shown when nothing was selected).
    pub fn selected(&self) -> Option<&pb::ProcessInfo> {
        let shown = self.shown();
        self.selected
            .as_ref()
            .and_then(|id| shown.iter().find(|p| &p.process_id == id).copied())
            .or_else(|| shown.first().copied())
    }

    /// Index of the selected row among the shown ones.
    pub fn selected_index(&self) -> Option<usize> {
        let shown = self.shown();
        let id = self.selected()?.process_id.clone();
        shown.iter().position(|p| p.process_id == id)
    }

    /// Moves the selection by `delta` rows (clamped to the table).
    pub fn move_selection(&mut self, delta: isize) {
        let shown = self.shown();
        if shown.is_empty() {
            return;
        }
        let at = self.selected_index().unwrap_or(0);
        let to = at.saturating_add_signed(delta).min(shown.len() - 1);
        self.selected = Some(shown[to].process_id.clone());
        self.selected_at = to;
    }

    /// Selects the first (`first`) or last shown row.
    pub fn select_end(&mut self, first: bool) {
        let shown = self.shown();
        let at = if first {
            0
        } else {
            shown.len().saturating_sub(1)
        };
        if let Some(p) = shown.get(at) {
            self.selected = Some(p.process_id.clone());
            self.selected_at = at;
        }
    }

    /// After the rows or the filter changed: the selected row if it is still shown, else the one
    /// now at its place.
    pub fn keep_selection(&mut self) {
        let shown = self.shown();
        let still = self
            .selected
            .as_ref()
            .and_then(|id| shown.iter().position(|p| &p.process_id == id));
        match still {
            Some(at) => self.selected_at = at,
            None => {
                let at = self.selected_at.min(shown.len().saturating_sub(1));
                self.selected = shown.get(at).map(|p| p.process_id.clone());
            }
        }
    }
}

/// Whether the row is of a running process.
pub fn is_running(p: &pb::ProcessInfo) -> bool {
    p.status == pb::ProcessStatus::Running as i32
}

/// What the filter searches in a row, lowercased.
fn haystack(p: &pb::ProcessInfo) -> String {
    format!(
        "{} {} {} {} {} {}",
        p.process_id,
        p.name,
        String::from_utf8_lossy(&p.command),
        String::from_utf8_lossy(&p.cwd),
        status_text(p),
        p.listening.join(" ")
    )
    .to_lowercase()
}

/// The STATUS cell: `running`, `running+2` (descendants), `input` or `password` while it waits
/// for a person, and how it ended: `completed 0`, `failed 127`, `stopped SIGTERM`.
pub fn status_text(p: &pb::ProcessInfo) -> String {
    if is_running(p) {
        if p.waiting_for_input == Some(true) {
            return if p.echo_off == Some(true) {
                "password".into()
            } else {
                "input".into()
            };
        }
        return "running".into();
    }
    let status = process_status_name(p.status);
    let mut text = match (p.exit_code, p.signal.as_deref()) {
        (Some(code), _) => format!("{status} {code}"),
        (None, Some(signal)) => format!("{status} {signal}"),
        _ => status.to_string(),
    };
    if p.descendants_running > 0 {
        text.push_str(&format!("+{}", p.descendants_running));
    }
    text
}

/// A compact age: `5s`, `3m`, `2h`, `4d`.
pub fn age(daemon_now_ms: i64, started_ms: i64) -> String {
    let secs = u64::try_from(daemon_now_ms - started_ms).unwrap_or(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        id: &str,
        name: &str,
        started: i64,
        cpu: Option<f64>,
        running: bool,
    ) -> pb::ProcessChange {
        pb::ProcessChange {
            kinds: vec![pb::ChangeKind::Started as i32],
            process: Some(pb::ProcessInfo {
                process_id: id.into(),
                name: name.into(),
                command: format!("run {name}").into_bytes(),
                started_at_unix_ms: started,
                cpu_percent: cpu,
                status: if running {
                    pb::ProcessStatus::Running
                } else {
                    pb::ProcessStatus::Completed
                } as i32,
                exit_code: (!running).then_some(0),
                ..Default::default()
            }),
        }
    }

    fn ids(t: &Table) -> Vec<&str> {
        t.shown().iter().map(|p| p.process_id.as_str()).collect()
    }

    fn table() -> Table {
        let mut t = Table::default();
        t.apply(
            pb::WatchEvent {
                reset: true,
                changes: vec![
                    row("proc_a", "web", 1000, Some(5.0), true),
                    row("proc_b", "build", 2000, Some(90.0), true),
                    row("proc_c", "test", 3000, None, false),
                ],
                now_unix_ms: 10_000,
                ..Default::default()
            },
            9_000,
        );
        t
    }

    #[test]
    fn rows_are_newest_first_and_sort_by_any_column() {
        let mut t = table();
        assert_eq!(ids(&t), ["proc_c", "proc_b", "proc_a"]);
        t.sort = SortKey::Cpu;
        assert_eq!(ids(&t), ["proc_b", "proc_a", "proc_c"]);
        t.descending = false;
        assert_eq!(ids(&t), ["proc_c", "proc_a", "proc_b"]);
        t.sort = SortKey::Started.step(false);
        assert_eq!(t.sort, SortKey::Name);
        assert_eq!(t.daemon_now(9_500), 10_500, "ages use the daemon's clock");
    }

    #[test]
    fn the_filter_and_the_ended_toggle_narrow_the_rows_and_keep_the_selection_near() {
        let mut t = table();
        t.move_selection(1);
        assert_eq!(t.selected().map(|p| p.process_id.as_str()), Some("proc_b"));
        t.filter = "WEB".into();
        t.keep_selection();
        assert_eq!(ids(&t), ["proc_a"]);
        assert_eq!(t.selected().map(|p| p.process_id.as_str()), Some("proc_a"));
        t.filter.clear();
        t.show_ended = false;
        t.keep_selection();
        assert_eq!(ids(&t), ["proc_b", "proc_a"]);
        t.move_selection(10);
        assert_eq!(t.selected_index(), Some(1), "clamped to the last row");
    }

    #[test]
    fn events_update_and_remove_rows_and_a_reset_replaces_them() {
        let mut t = table();
        t.apply(
            pb::WatchEvent {
                changes: vec![row("proc_a", "web2", 1000, Some(1.0), false)],
                removed: vec!["proc_b".into()],
                ..Default::default()
            },
            0,
        );
        assert_eq!(ids(&t), ["proc_c", "proc_a"]);
        assert_eq!(status_text(t.shown()[1]), "completed 0");
        t.apply(
            pb::WatchEvent {
                reset: true,
                changes: vec![row("proc_z", "", 5, None, true)],
                ..Default::default()
            },
            0,
        );
        assert_eq!(ids(&t), ["proc_z"]);
        assert_eq!(t.running(), 1);
    }

    #[test]
    fn statuses_say_who_waits_and_how_it_ended() {
        let mut p = pb::ProcessInfo {
            status: pb::ProcessStatus::Running as i32,
            waiting_for_input: Some(true),
            ..Default::default()
        };
        assert_eq!(status_text(&p), "input");
        p.echo_off = Some(true);
        assert_eq!(status_text(&p), "password");
        p.status = pb::ProcessStatus::Stopped as i32;
        p.signal = Some("SIGTERM".into());
        assert_eq!(status_text(&p), "stopped SIGTERM");
        assert_eq!(age(125_000, 5_000), "2m");
        assert_eq!(age(0, 5_000), "0s", "a start in the future is now");
    }
}
