//! docs/RELIABILITY.md F13 and F15: what `stop` reaches, written down as a matrix and checked
//! against real process trees.
//!
//! Containment on Linux (`docs/RELIABILITY.md`): every command runs in its own session and
//! process group (`killpg` reaches everything that stays in it); descendants that leave it are
//! found as live descendants of the process's holder (its tree's child subreaper: every orphan of
//! the tree comes back to it and is reaped at once), and by the `YIELDSHELL_PROCESS_ID` marker in
//! their environment when no holder is alive to be their ancestor. A stop sends SIGTERM
//! (plus SIGCONT) to all of them, rescans for new forks, and SIGKILLs what is left after the
//! grace period.
//!
//! | row | descendant | leaves the group | process group alone | group + holder's descendants + marker (ours) |
//! |---|---|---|---|---|
//! | a | `child &` | no | stopped | stopped |
//! | b | `setsid` grandchild | yes | **missed** | stopped |
//! | c | double-forked daemon (fork, setsid, fork) | yes | **missed** | stopped |
//! | c′ | same, stdio on `/dev/null`, its shell already exited | yes | **missed** | stopped |
//! | d | child ignoring SIGTERM | no | stopped (SIGKILL after grace) | stopped (SIGKILL after grace) |
//! | e | bounded fork loop ignoring SIGTERM | no | stopped (rescans, SIGKILL) | stopped (rescans, SIGKILL) |
//! | f | double-forked daemon that also clears its environment (`env -i`) | yes | **missed** | stopped (a descendant of the holder; missed before issue 29) |
//!
//! The test checks each row's premise too: the escapees of b, c, c′ and f really run outside the
//! shell's process group, so only the holder's ancestry or the marker can have stopped them.

use std::time::{Duration, Instant};

use yieldshell_proto::pb;

use crate::helper::{Pid, TestDaemon, assert_no_zombies, eventually, marked_processes, testbin};

/// Grace before SIGKILL in these stops.
const GRACE_MS: u64 = 500;
/// How long a stop may take beyond its grace (RELIABILITY asks for 1 s; a loaded 2-core CI box
/// gets more).
const STOP_SLACK: Duration = Duration::from_secs(4);

/// The process group of a live process.
fn pgrp(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

struct Row {
    name: &'static str,
    command: String,
    /// `ready` lines to wait for before stopping.
    ready: usize,
    /// The tracked descendants run outside the shell's process group.
    leaves_group: bool,
    /// The shell exits on its own before the stop.
    shell_exits: bool,
    /// Our containment stops it (false: the documented escape).
    stopped: bool,
}

#[tokio::test]
async fn f13_stop_takes_down_each_kind_of_descendant_as_the_matrix_says() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    let rows = [
        Row {
            name: "a: child &",
            command: format!("{tb} ready-sleep 600 & wait"),
            ready: 1,
            leaves_group: false,
            shell_exits: false,
            stopped: true,
        },
        Row {
            name: "b: setsid grandchild",
            command: format!("{tb} setsid 600 & wait"),
            ready: 1,
            leaves_group: true,
            shell_exits: false,
            stopped: true,
        },
        Row {
            name: "c: double-forked daemon",
            command: format!("{tb} double-fork 600; exec sleep 600"),
            ready: 1,
            leaves_group: true,
            shell_exits: false,
            stopped: true,
        },
        Row {
            name: "c': detached double-forked daemon after its shell exited",
            command: format!("{tb} double-fork 600 detach; exit 0"),
            ready: 1,
            leaves_group: true,
            shell_exits: true,
            stopped: true,
        },
        Row {
            name: "d: child ignoring SIGTERM",
            command: format!("{tb} ignore-term 600 & wait"),
            ready: 1,
            leaves_group: false,
            shell_exits: false,
            stopped: true,
        },
        Row {
            name: "e: bounded fork loop",
            command: format!("{tb} fork-loop 100 5 & wait"),
            ready: 1,
            leaves_group: false,
            shell_exits: false,
            stopped: true,
        },
        Row {
            name: "f: double-forked daemon with a cleared environment",
            command: format!("env -i {tb} double-fork 600 detach; exec sleep 600"),
            ready: 1,
            leaves_group: true,
            shell_exits: false,
            stopped: true,
        },
    ];
    let mut report = Vec::new();
    for row in rows {
        let id = c.spawn_bg(&row.command).await;
        let shell = c
            .list(pb::Scope::All, true)
            .await
            .into_iter()
            .find(|p| p.process_id == id)
            .and_then(|p| p.pid)
            .expect("shell pid") as i32;
        let tracked = c.ready_pids(&id, row.ready).await;
        for p in &tracked {
            assert!(p.alive(), "{}: {p:?} is not running", row.name);
            assert_eq!(
                pgrp(p.pid) != Some(shell),
                row.leaves_group,
                "{}: premise about the process group",
                row.name
            );
        }
        if row.shell_exits {
            let w = c.wait_exit(&id).await;
            assert_eq!(
                w.process.expect("process").status,
                pb::ProcessStatus::Completed as i32
            );
        }
        let started = Instant::now();
        let r = c.stop(&id, "TERM", GRACE_MS).await.expect("stop");
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(GRACE_MS) + STOP_SLACK,
            "{}: stop took {took:?}",
            row.name
        );
        // Everything the tree printed a `ready` line for, including forks made during the stop.
        let (out, _) = c.read_all(&id, 1 << 20).await;
        let all = Pid::all_from_ready_lines(&String::from_utf8_lossy(&out));
        let survivors: Vec<Pid> = all.iter().copied().filter(Pid::alive).collect();
        if row.stopped {
            assert!(r.stopped, "{}: stop said {:?}", row.name, r);
            assert!(
                survivors.is_empty(),
                "{}: survivors {survivors:?}",
                row.name
            );
            assert!(
                marked_processes(&id).is_empty(),
                "{}: marked processes {:?}",
                row.name,
                marked_processes(&id)
            );
        } else {
            // The documented escape: it left the group and shed the marker.
            assert_eq!(survivors, tracked, "{}: expected to escape", row.name);
            for p in &survivors {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            eventually("the escapee to be killed", || async {
                survivors.iter().all(|p| !p.alive()).then_some(())
            })
            .await;
        }
        assert_no_zombies(d.pid()).await;
        report.push(format!(
            "{:<58} {:>4} pids  stop {:>8.1?}  escalated={:<5} stopped={}",
            row.name,
            all.len(),
            took,
            r.escalated,
            survivors.is_empty()
        ));
    }
    println!("F13 containment matrix (session + process group + holder's descendants + marker):");
    for line in report {
        println!("  {line}");
    }
}

#[tokio::test]
async fn f15_a_grandchild_holding_the_output_does_not_delay_the_exit_and_stop_still_takes_it() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let leader_gate = d.dir.path().join("leader");
    let late_gate = d.dir.path().join("late");
    std::fs::write(&leader_gate, b"").expect("gate");
    std::fs::write(&late_gate, b"").expect("gate");
    let id = c
        .spawn_bg(&format!(
            "{} setsid-hold {} & while [ -e {} ]; do sleep 0.01; done; exit 0",
            testbin(),
            late_gate.display(),
            leader_gate.display()
        ))
        .await;
    let holder = c.ready_pids(&id, 1).await[0];
    // The leader exits now; `wait` must return at once, not when the holder lets go.
    let exited = Instant::now();
    std::fs::remove_file(&leader_gate).expect("open gate");
    let w = c.wait_exit(&id).await;
    let took = exited.elapsed();
    println!("F15: wait returned {took:?} after the leader was released");
    assert!(took < Duration::from_secs(3), "wait took {took:?}");
    let p = w.process.expect("process");
    assert_eq!(p.status, pb::ProcessStatus::Completed as i32);
    assert_eq!(p.exit_code, Some(0));
    assert!(
        p.descendants_running >= 1,
        "the output is still open: descendants_running = {}",
        p.descendants_running
    );
    // The holder's later output is still captured.
    std::fs::remove_file(&late_gate).expect("open gate");
    eventually("the late output", || async {
        let (out, _) = c.read_all(&id, 1 << 20).await;
        out.ends_with(b"late\n").then_some(())
    })
    .await;
    // And `stop` after the exit takes the holder down (F13 row b).
    let r = c.stop(&id, "TERM", GRACE_MS).await.expect("stop");
    assert!(r.stopped, "{r:?}");
    assert!(!holder.alive());
    assert!(marked_processes(&id).is_empty());
    assert_no_zombies(d.pid()).await;
}
