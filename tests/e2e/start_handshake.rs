//! Issue 29, item 5: a command that stops its holder at once (`kill -STOP $PPID`: the shell's
//! parent is its holder) used to beat the start handshake: the holder, stopped before it
//! greeted, never answered, the `exec` answered `failed_to_start` after 10 s, and the command
//! ran on, listed nowhere (3 of 6 fresh daemons on the machine that found it). The daemon now
//! continues a holder it finds stopped while it waits for its greeting, and when a start fails
//! all the same it ends the command's whole tree before it answers.
//!
//! Whether the command wins that race depends on the machine; fault injection makes it win
//! every time (`holder_greets_when_continued`: the holder greets only once it has been stopped
//! and continued, as a holder slower than its shell does), and makes the start fail for certain
//! (`holder_left_stopped`: the daemon does not continue it). Terminal `exec`s, whose holder
//! always spawns the shell itself (as one without a launcher does).

use std::path::{Path, PathBuf};

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually_blocking, exec_req, marked_processes};

/// What the faults below apply to: a word of the tests' commands.
const MARK: &str = "stops-its-holder";

/// A client-chosen process id (a test knows the marker of a command that did not start).
const ID: &str = "5a7d0c3e-1f2b-4c5d-8e9f-0a1b2c3d4e5f";

/// Whatever of a test's command is left when it ends (only where it failed): its holder
/// continued and its processes killed, so a failing test leaks nothing.
struct Leftovers(Vec<PathBuf>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let from_files = self.0.iter().filter_map(|f| pid_in(f));
        for pid in marked_processes(ID).into_iter().chain(from_files) {
            if let Some(parent) = parent_of(pid) {
                signal(parent, nix::sys::signal::Signal::SIGCONT);
            }
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// The pid a command wrote to `file`, if it did.
fn pid_in(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The parent pid of `pid` (`/proc/<pid>/stat`, field 4).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// `echo $$ > file`, written whole (a reader never sees half a pid).
fn write_pid(file: &Path) -> String {
    let f = file.display();
    format!("echo $$ > {f}.tmp && mv {f}.tmp {f}")
}

async fn exec_tty(d: &TestDaemon, command: &str) -> pb::ExecResponse {
    d.session()
        .exec_with(pb::ExecRequest {
            process_id: Some(ID.into()),
            yield_ms: Some(0),
            tty: true,
            ..exec_req(&format!("{command} # {MARK}"))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_stops_its_holder_before_it_greets_starts_and_is_listed() {
    let faults = format!("holder_greets_when_continued:{MARK}");
    let d = TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", &faults)]).await;
    let shell = d.dir.path().join("shell.pid");
    let _leftovers = Leftovers(vec![shell.clone()]);
    let r = exec_tty(
        &d,
        &format!("kill -STOP $PPID; {}; exec sleep 600", write_pid(&shell)),
    )
    .await;
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    let pid = eventually_blocking("the command to write its pid", || pid_in(&shell));
    let c = d.session();
    let listed = c.list(pb::Scope::All, false).await;
    let p = listed
        .iter()
        .find(|p| p.process_id == ID)
        .expect("the command is listed");
    assert_eq!(p.status, pb::ProcessStatus::Running as i32, "{p:?}");
    assert_eq!(p.pid, Some(pid as u32), "the listed process is the command");
    // Its holder runs again: the process is stopped as any other is.
    let stopped = c.stop(ID, "", 5_000).await.expect("stop");
    assert!(stopped.stopped, "{stopped:?}");
    c.wait_exit(ID).await;
    assert!(!alive(pid), "{pid} outlived its stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_leaves_nothing_of_its_command_running() {
    let faults = format!("holder_greets_when_continued:{MARK},holder_left_stopped:{MARK}");
    let d = TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", &faults)]).await;
    let dir = d.dir.path();
    let (shell, away, scrubbed) = (
        dir.join("shell.pid"),
        dir.join("away.pid"),
        dir.join("scrubbed.pid"),
    );
    let _leftovers = Leftovers(vec![shell.clone(), away.clone(), scrubbed.clone()]);
    // The shell, a child in a session of its own, and one that also dropped its environment
    // (the marker with it): the whole tree, however it left.
    let command = format!(
        "kill -STOP $PPID; \
         setsid sh -c '{away}; exec sleep 600' & \
         env -i sh -c \"setsid sh -c '{scrubbed}; exec sleep 600'\" & \
         {shell}; wait",
        away = write_pid(&away),
        scrubbed = write_pid(&scrubbed),
        shell = write_pid(&shell),
    );
    let r = exec_tty(&d, &command).await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32, "{r:?}");
    // The command did run (its holder spawned it, then never greeted): each wrote its pid…
    let pids: Vec<i32> = [&shell, &away, &scrubbed]
        .iter()
        .map(|f| pid_in(f).unwrap_or_else(|| panic!("{} was written", f.display())))
        .collect();
    // …and none of it runs once the exec said it did not start.
    for pid in &pids {
        assert!(!alive(*pid), "{pid} runs on after failed_to_start: {r:?}");
    }
    assert_eq!(marked_processes(ID), Vec::<i32>::new());
    let listed = d.session().list(pb::Scope::All, true).await;
    assert!(listed.iter().all(|p| p.process_id != ID), "{listed:?}");
}
