//! Pid reuse: a tree's process group is its shell's pid, and once the shell and everything in
//! its group are gone the kernel may give that pid to an unrelated program that leads a group
//! and session of its own (`setsid`). A stop must then leave that program alone. The kernel is
//! steered to hand out a chosen pid through `/proc/sys/kernel/ns_last_pid`, which needs root and
//! makes every process started meanwhile anywhere on the machine reuse recent pids: the test is
//! ignored in the suite and run on its own by `.ci/test-extra pid-reuse`.
#![cfg(target_os = "linux")]

use std::process::{Child, Command};

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually, exec_req, require_root, testbin};

/// `setsid sleep 600` under pid `pid` (util-linux `setsid` does not fork in a process that
/// leads no group, so the pid stays): a program leading group and session `pid`.
fn take_pid(pid: i32) -> Child {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("steering the next pid needs root");
        let mut child = Command::new("setsid")
            .args(["sleep", "600"])
            .env_remove("YIELDSHELL_PROCESS_ID")
            .spawn()
            .expect("setsid sleep");
        if i32::try_from(child.id()) == Ok(pid) {
            return child;
        }
        // Another process took it first (tests run in parallel): try again.
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("pid {pid} could not be taken: something else keeps taking it");
}

/// Clock ticks since boot (the unit of a process's start time), from `/proc/uptime`.
fn uptime_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").expect("/proc/uptime");
    let seconds: f64 = text
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("uptime seconds");
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .expect("clock ticks per second");
    (seconds * hz as f64) as u64
}

#[tokio::test]
#[ignore = "needs root and the machine to itself: run .ci/test-extra pid-reuse"]
async fn stop_spares_a_program_that_took_an_exited_shells_pid() {
    require_root("steer pid allocation through /proc/sys/kernel/ns_last_pid");
    let d = TestDaemon::start().await;
    let c = d.session();
    // The shell exits at once, leaving a descendant in a session of its own (still the tree's:
    // it carries the marker).
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(0),
            ..exec_req(&format!("{} setsid 600 & exit 0", testbin()))
        })
        .await;
    let p = r.process.expect("process");
    let shell = i32::try_from(p.pid.expect("pid")).expect("pid");
    let escaped = c.ready_pids(&p.process_id, 1).await;
    eventually("the shell reaped, its pid free", || async {
        (!std::path::Path::new(&format!("/proc/{shell}")).exists()).then_some(())
    })
    .await;
    // A process is known by its pid and start time, and start times count clock ticks: a
    // program started within the shell's own tick could not be told from it. Real reuse needs
    // the whole pid space to wrap first; here the pid is handed out at once, so wait for the
    // clock to pass the tick of the descendant, which started after the shell.
    let started = escaped.iter().map(|e| e.start).max().expect("descendant");
    eventually("a clock tick after the tree's start", || async {
        (uptime_ticks() > started + 1).then_some(())
    })
    .await;
    let mut stranger = take_pid(shell);
    let stopped = c.stop(&p.process_id, "SIGTERM", 300).await.expect("stop");
    let ended = stranger.try_wait().expect("try_wait");
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(
        ended.is_none(),
        "the program that took pid {shell} ended ({ended:?}): {stopped:?}"
    );
    assert!(
        escaped.iter().all(|e| !e.alive()),
        "the tree's own descendant is stopped"
    );
}
