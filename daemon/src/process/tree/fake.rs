//! A fake [`ProcessTree`] for the actor's unit tests (after watchexec's `TestChild`): a process
//! set the test controls, signals that act on it, and a log of every signal and scan.
//!
//! The fake also plays the kernel's part that the actor observes through channels: when the
//! shell dies, its exit status goes to the receiver the actor waits on (as the reaper's would),
//! and when the last process holding the output pipes is gone, the "EOF" receiver resolves (as the
//! pipe readers would end).

use std::sync::{Arc, Mutex};

use nix::sys::signal::Signal;
use tokio::sync::oneshot;

use super::{Identity, ProcessTree};
use crate::spawn::reaper::ExitHow;

/// One process of the fake tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeProc {
    /// Its identity.
    pub id: Identity,
    /// In the shell's process group (`killpg` reaches it).
    pub in_group: bool,
    /// Carries the marker (the `/proc` sweep finds it).
    pub marked: bool,
    /// Holds the output pipes open.
    pub holds_pipes: bool,
    /// Survives SIGTERM (and every signal but SIGKILL).
    pub ignores_term: bool,
    /// Forks a child (of the same kind, outside the group) before every scan while it is not
    /// stopped: a fork bomb, which a stop that only kills what it found never catches up with.
    pub breeds: bool,
    /// Survives SIGKILL too (uninterruptible sleep).
    pub unkillable: bool,
}

impl FakeProc {
    /// A descendant that stays in the group, holds the pipes and dies on SIGTERM.
    pub fn child(pid: i32) -> FakeProc {
        FakeProc {
            id: Identity { pid, start_time: 1 },
            in_group: true,
            marked: true,
            holds_pipes: true,
            ignores_term: false,
            breeds: false,
            unkillable: false,
        }
    }
}

/// What the actor asked of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `killpg` with a signal (probes are not logged: they run every poll).
    Group(Signal),
    /// A signal delivered to one live process.
    Member(Identity, Signal),
    /// `find_tree`.
    FindTree,
    /// `split_tree`.
    SplitTree,
    /// `find_escapees`.
    FindEscapees,
}

#[derive(Debug)]
struct State {
    pgid: i32,
    procs: Vec<FakeProc>,
    calls: Vec<Call>,
    shell_exit: Option<oneshot::Sender<ExitHow>>,
    eof: Option<oneshot::Sender<()>>,
    /// Processes outside the tree (invisible to every scan) holding the pipes.
    outside_holders: usize,
    /// Processes stopped by SIGSTOP (and not continued since).
    stopped: std::collections::HashSet<Identity>,
    /// The pid the next fork of a breeder gets.
    next_pid: i32,
    /// How often the holder was woken (SIGCONT).
    holder_wakes: usize,
}

impl State {
    /// `signal` reaches `id`, which dies of it unless it survives that signal.
    fn deliver(&mut self, id: Identity, signal: Signal) {
        let Some(i) = self.procs.iter().position(|p| p.id == id) else {
            return;
        };
        let dies = match signal {
            Signal::SIGKILL => !self.procs[i].unkillable,
            Signal::SIGCONT => {
                self.stopped.remove(&id);
                false
            }
            Signal::SIGSTOP => {
                self.stopped.insert(id);
                false
            }
            _ => !self.procs[i].ignores_term,
        };
        if dies {
            self.procs.remove(i);
            if id.pid == self.pgid
                && let Some(tx) = self.shell_exit.take()
            {
                let _ = tx.send(ExitHow::Signal(signal as i32));
            }
            self.check_eof();
        }
    }

    /// Every breeder that is not stopped forks once.
    fn breed(&mut self) {
        let parents: Vec<FakeProc> = self
            .procs
            .iter()
            .filter(|p| p.breeds && !self.stopped.contains(&p.id))
            .copied()
            .collect();
        for parent in parents {
            self.next_pid += 1;
            self.procs.push(FakeProc {
                id: Identity {
                    pid: self.next_pid,
                    start_time: 1,
                },
                in_group: false,
                holds_pipes: false,
                ..parent
            });
        }
    }

    fn check_eof(&mut self) {
        if self.outside_holders == 0
            && !self.procs.iter().any(|p| p.holds_pipes)
            && let Some(tx) = self.eof.take()
        {
            let _ = tx.send(());
        }
    }
}

/// The fake tree; clones share it.
#[derive(Debug, Clone)]
pub struct FakeTree(Arc<Mutex<State>>);

/// The channels the fake drives: the shell's exit status and the pipes' EOF.
pub struct FakeChannels {
    /// Resolves with the shell's exit status (give it to the actor).
    pub exit: oneshot::Receiver<ExitHow>,
    /// Resolves when no process holds the pipes any more (the readers end then).
    pub eof: oneshot::Receiver<()>,
}

impl FakeTree {
    /// A tree of one running shell (pid = pgid = `shell_pid`) holding the pipes.
    pub fn new(shell_pid: i32) -> (FakeTree, FakeChannels) {
        let (exit_tx, exit) = oneshot::channel();
        let (eof_tx, eof) = oneshot::channel();
        let shell = FakeProc::child(shell_pid);
        let tree = FakeTree(Arc::new(Mutex::new(State {
            pgid: shell_pid,
            procs: vec![shell],
            calls: Vec::new(),
            shell_exit: Some(exit_tx),
            eof: Some(eof_tx),
            outside_holders: 0,
            stopped: std::collections::HashSet::new(),
            next_pid: 100_000,
            holder_wakes: 0,
        })));
        (tree, FakeChannels { exit, eof })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shell's identity.
    pub fn shell(&self) -> Identity {
        Identity {
            pid: self.lock().pgid,
            start_time: 1,
        }
    }

    /// Adds a process (a fork of the shell or of a descendant).
    pub fn spawn(&self, p: FakeProc) {
        self.lock().procs.push(p);
    }

    /// The shell exits on its own with `code`.
    pub fn exit_shell(&self, code: i32) {
        let mut s = self.lock();
        let pgid = s.pgid;
        s.procs.retain(|p| p.id.pid != pgid);
        if let Some(tx) = s.shell_exit.take() {
            let _ = tx.send(ExitHow::Code(code));
        }
        s.check_eof();
    }

    /// A process ends on its own.
    pub fn end(&self, id: Identity) {
        let mut s = self.lock();
        s.procs.retain(|p| p.id != id);
        s.check_eof();
    }

    /// Something outside the tree (invisible to scans) holds the pipes from now on.
    pub fn hold_pipes_outside(&self) {
        self.lock().outside_holders += 1;
    }

    /// The outside holder closes the pipes.
    pub fn release_pipes_outside(&self) {
        let mut s = self.lock();
        s.outside_holders = s.outside_holders.saturating_sub(1);
        s.check_eof();
    }

    /// Whether any process of the fake is alive.
    pub fn anything_alive(&self) -> bool {
        !self.lock().procs.is_empty()
    }

    /// How many processes of the fake are alive.
    pub fn alive_count(&self) -> usize {
        self.lock().procs.len()
    }

    /// How often the holder was woken.
    pub fn holder_wakes(&self) -> usize {
        self.lock().holder_wakes
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The signals `id` received: through its group while it was in it, and directly.
    pub fn signals_to(&self, id: Identity, in_group: bool) -> Vec<Signal> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match *c {
                Call::Group(s) if in_group => Some(s),
                Call::Member(m, s) if m == id => Some(s),
                _ => None,
            })
            .collect()
    }

    fn visible(&self, pick: impl Fn(&FakeProc) -> bool) -> Vec<Identity> {
        let mut s = self.lock();
        s.breed();
        s.procs.iter().filter(|p| pick(p)).map(|p| p.id).collect()
    }
}

impl ProcessTree for FakeTree {
    fn signal_group(&self, _pgid: i32, signal: Option<Signal>) -> bool {
        let mut s = self.lock();
        let members: Vec<Identity> = s
            .procs
            .iter()
            .filter(|p| p.in_group)
            .map(|p| p.id)
            .collect();
        if let Some(sig) = signal {
            s.calls.push(Call::Group(sig));
            for m in &members {
                s.deliver(*m, sig);
            }
        }
        !members.is_empty()
    }

    fn signal_members(&self, members: &[Identity], signal: Signal) {
        let mut s = self.lock();
        for m in members {
            if s.procs.iter().any(|p| p.id == *m) {
                s.calls.push(Call::Member(*m, signal));
                s.deliver(*m, signal);
            }
        }
    }

    fn pause(&self, _pgid: i32, members: &[Identity]) {
        self.signal_group(0, Some(Signal::SIGSTOP));
        self.signal_members(members, Signal::SIGSTOP);
    }

    fn wake_holder(&self) {
        self.lock().holder_wakes += 1;
    }

    fn is_alive(&self, id: Identity) -> bool {
        self.lock().procs.iter().any(|p| p.id == id)
    }

    fn find_tree(&self, _pgid: i32, _process_id: &str) -> Vec<Identity> {
        self.lock().calls.push(Call::FindTree);
        self.visible(|p| p.in_group || p.marked)
    }

    fn split_tree(&self, _pgid: i32, _process_id: &str) -> (Vec<Identity>, Vec<Identity>) {
        self.lock().calls.push(Call::SplitTree);
        (
            self.visible(|p| p.in_group),
            self.visible(|p| !p.in_group && p.marked),
        )
    }

    fn find_escapees(&self, _process_id: &str) -> Vec<Identity> {
        self.lock().calls.push(Call::FindEscapees);
        self.visible(|p| !p.in_group && p.marked)
    }
}
