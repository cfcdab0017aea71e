//! Processes survive the daemon (ARCHITECTURE.md, "Who owns what", issue 13): a `kill -9` of the daemon loses no
//! running process and no output; the next daemon re-adopts every holder; a holder that dies
//! itself gives `lost`, never a hang.

use std::path::PathBuf;

use yieldshell_proto::pb;

use crate::helper::{Pid, TestDaemon, eventually, eventually_blocking, holders_in, testbin, ticks};

/// The holder of process `id`.
fn holder_of(d: &TestDaemon, id: &str) -> Option<Pid> {
    let dir = std::fs::canonicalize(proc_dir(d, id)).ok()?;
    holders_in(&d.state)
        .into_iter()
        .find_map(|(pid, cwd)| (cwd == dir).then_some(pid))
}

fn proc_dir(d: &TestDaemon, id: &str) -> PathBuf {
    d.state.join("procs").join(id)
}

fn find<'a>(all: &'a [pb::ProcessInfo], id: &str) -> &'a pb::ProcessInfo {
    all.iter()
        .find(|p| p.process_id == id)
        .unwrap_or_else(|| panic!("{id} listed"))
}

/// 30 bursts of 40 000 flood bytes, 50 ms apart: 1.2 MB written across the crash.
const BURSTS: u64 = 30;
const BURST: u64 = 40_000;

#[tokio::test]
async fn a_daemon_killed_mid_output_loses_no_process_and_no_byte() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    let ticker = c.spawn_bg(&format!("exec {tb} tick 20")).await;
    let flood = c
        .spawn_bg(&format!(
            "for i in $(seq 1 {BURSTS}); do {tb} flood {BURST}; sleep 0.05; done"
        ))
        .await;
    let gate = d.dir.path().join("gate-7");
    let seven = c
        .spawn_bg(&format!(
            "while [ ! -e {} ]; do sleep 0.02; done; exit 7",
            gate.display()
        ))
        .await;
    let cat = c.spawn_bg("cat").await;
    c.write(&cat, b"before\n", false).await.expect("write");
    eventually("ticks and the first bursts before the crash", || async {
        let (out, _) = c.read_all(&ticker, 1 << 20).await;
        let (flooded, _) = c.read_all(&flood, 1 << 20).await;
        (ticks(&out).len() >= 10 && !flooded.is_empty()).then_some(())
    })
    .await;
    let before = c.list(pb::Scope::All, true).await;
    let ticker_pid = find(&before, &ticker).pid.expect("pid");
    println!("before the crash:");
    for p in &before {
        println!(
            "  {} pid {:?} status {}",
            p.process_id,
            p.pid,
            p.status().as_str_name()
        );
    }

    d.kill9();
    // While no daemon runs, the holders carry on: `seven` ends now, and its holder records how.
    std::fs::write(&gate, b"").expect("open the gate");
    eventually_blocking("the exit-7 process ends while no daemon runs", || {
        std::fs::read_to_string(proc_dir(&d, &seven).join("exit"))
            .ok()
            .filter(|t| t.starts_with("code 7 "))
    });

    d.spawn().await;
    let c = d.session();
    let after = c.list(pb::Scope::All, true).await;
    println!("after the restart:");
    for p in &after {
        println!(
            "  {} pid {:?} status {} exit {:?}",
            p.process_id,
            p.pid,
            p.status().as_str_name(),
            p.exit_code
        );
    }
    let t = find(&after, &ticker);
    assert_eq!(
        t.status,
        pb::ProcessStatus::Running as i32,
        "the ticker runs"
    );
    assert_eq!(t.pid, Some(ticker_pid), "the same process");
    let s = find(&after, &seven);
    assert_eq!(s.status, pb::ProcessStatus::Completed as i32);
    assert_eq!(s.exit_code, Some(7), "its real exit code");

    // The ticker's output has every number, across the crash, and goes on.
    let seen_at_restart = ticks(c.read_all(&ticker, 1 << 20).await.0).len() as u64;
    let numbers = eventually("the ticker to go on after the restart", || async {
        let (out, _) = c.read_all(&ticker, 1 << 20).await;
        let n = ticks(&out);
        (n.len() as u64 >= seen_at_restart + 10).then_some(n)
    })
    .await;
    assert_eq!(
        numbers,
        (0..numbers.len() as u64).collect::<Vec<_>>(),
        "no tick lost or repeated"
    );

    // stdin still works, and EOF reaches the re-adopted process.
    c.write(&cat, b"after\n", true).await.expect("write after");
    let w = c.wait_exit(&cat).await;
    assert_eq!(w.process.expect("process").exit_code, Some(0));
    let (out, _) = c.read_all(&cat, 1 << 20).await;
    assert_eq!(out, b"before\nafter\n");

    // The flood, byte-exact through `yieldctl read --all`.
    let w = c.wait_exit(&flood).await;
    assert_eq!(w.process.expect("process").exit_code, Some(0));
    let out = d
        .yieldctl()
        .args(["read", &flood, "--all"])
        .output()
        .expect("yieldctl read --all");
    assert!(out.status.success(), "{out:?}");
    let burst: Vec<u8> = (0..BURST).map(yieldshell_tests::flood_byte).collect();
    let expected = burst.repeat(BURSTS as usize);
    assert_eq!(out.stdout.len(), expected.len(), "every byte of the flood");
    assert!(out.stdout == expected, "the flood is byte-exact");

    // `stop` ends the re-adopted tree.
    let ticker_proc = Pid::of(ticker_pid as i32).expect("ticker alive");
    let holder = holder_of(&d, &ticker).expect("ticker's holder");
    let r = c.stop(&ticker, "TERM", 2000).await.expect("stop");
    assert!(r.process.is_some());
    let w = c.wait_exit(&ticker).await;
    assert_eq!(
        w.process.expect("process").status,
        pb::ProcessStatus::Stopped as i32
    );
    assert!(!ticker_proc.alive(), "the ticker is gone");
    eventually("the ticker's holder exits", || async {
        (!holder.alive()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_holder_killed_gives_lost_and_takes_its_tree_down() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    let pid = c.ready_pids(&id, 1).await[0];
    let holder = holder_of(&d, &id).expect("holder");
    // Named for what it is in `ps` and `top` (not after the descriptor it was started through).
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", holder.pid)).expect("comm");
    assert_eq!(comm.trim_end(), "yieldshell-hold");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the holder");
    let w = c.wait_exit(&id).await;
    let p = w.process.expect("process");
    assert_eq!(p.status, pb::ProcessStatus::Lost as i32);
    assert_eq!(p.lost_reason.as_deref(), Some("holder_died"));
    eventually("the orphaned process is stopped", || async {
        (!pid.alive()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn read_follow_carries_on_through_a_daemon_crash_without_a_gap() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg(&format!("exec {} tick 10", testbin())).await;
    let out = d.dir.path().join("follow.out");
    let err = d.dir.path().join("follow.err");
    let mut follower = d
        .yieldctl()
        .args(["read", &id, "--follow"])
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("yieldctl read --follow");
    let seen = || ticks(std::fs::read_to_string(&out).unwrap_or_default());
    let before = eventually_blocking("the follower printing", || {
        let n = seen().len();
        (n >= 20).then_some(n)
    });
    d.kill9();
    // Auto-start is off for the follower: it waits for a daemon to come back.
    d.spawn().await;
    eventually_blocking("the follower printing again after the crash", || {
        (seen().len() >= before + 20).then_some(())
    });
    d.session()
        .stop(&id, "SIGTERM", 1000)
        .await
        .expect("stop the ticker");
    let status = eventually_blocking("the follower to exit with the process", || {
        follower.try_wait().ok().flatten()
    });
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(status.success(), "{status:?}: {said}");
    assert!(said.contains(&format!("following {id} again")), "{said}");
    let ticks = seen();
    assert_eq!(
        ticks,
        (0..ticks.len() as u64).collect::<Vec<_>>(),
        "every line once, in order, across the crash"
    );
}
