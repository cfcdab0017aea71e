//! `stop`: whole trees, escalation, idempotence, no zombies.

use std::time::{Duration, Instant};

use yieldshell_proto::errors::ErrorKind;
use yieldshell_proto::pb;

use crate::helper::{Pid, TestDaemon, assert_no_zombies, testbin};

#[tokio::test]
async fn stop_takes_down_a_term_ignoring_grandchild_and_a_setsid_grandchild() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    let id = c
        .spawn_bg(&format!(
            "{tb} ignore-term 60 & {tb} setsid 60 & {tb} ready-sleep 60 & wait"
        ))
        .await;
    let pids = c.ready_pids(&id, 3).await;
    assert!(pids.iter().all(Pid::alive));
    let started = Instant::now();
    let r = c.stop(&id, "SIGTERM", 300).await.expect("stop");
    assert!(r.stopped, "{}", r.error);
    assert!(r.escalated, "the TERM-ignoring child needs SIGKILL");
    assert!(started.elapsed() < Duration::from_secs(10));
    for p in &pids {
        assert!(!p.alive(), "{p:?} survived stop");
    }
    let info = r.process.expect("process");
    assert_eq!(info.status, pb::ProcessStatus::Stopped as i32);
    assert_eq!(info.ended_by.as_deref(), Some("stop"));
    // The exited holder is reaped on its SIGCHLD, an instant after the stop's answer.
    assert_no_zombies(d.pid()).await;
}

#[tokio::test]
async fn stop_is_quick_for_a_cooperative_tree_and_idempotent() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg("sleep 60").await;
    let r = c.stop(&id, "TERM", 3_000).await.expect("stop");
    assert!(r.stopped);
    assert!(!r.escalated);
    assert_eq!(r.signal, "SIGTERM");
    let p = r.process.expect("process");
    assert_eq!(p.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(p.exit_code, None);
    let again = c.stop(&id, "KILL", 3_000).await.expect("second stop");
    assert!(!again.stopped);
    assert_eq!(again.error_kind, ErrorKind::ProcessExited.as_str());
    assert!(again.error.contains("already ended"), "{}", again.error);
    // How it ended (SIGTERM, from the first stop), not the KILL this call asked for.
    assert_eq!(again.signal, "SIGTERM");
}

#[tokio::test]
async fn stop_refuses_unknown_signal_names_and_accepts_short_ones() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c.spawn_bg("sleep 60").await;
    for bad in ["SIGNOPE", "0", "999"] {
        let err = c.stop(&id, bad, 100).await.expect_err("bad signal");
        assert_eq!(
            ErrorKind::of_status(&err),
            ErrorKind::InvalidArgument,
            "{bad}"
        );
    }
    let r = c.stop(&id, "KILL", 100).await.expect("stop");
    assert!(r.stopped);
    assert_eq!(r.process.expect("p").signal.as_deref(), Some("SIGKILL"));
}

#[tokio::test]
async fn stop_after_the_shell_exited_still_takes_down_its_descendants() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let id = c
        .spawn_bg(&format!("{} ready-sleep 60 & exit 0", testbin()))
        .await;
    let pid = c.ready_pids(&id, 1).await[0];
    let w = c.wait_exit(&id).await;
    assert!(w.process.expect("p").descendants_running >= 1);
    let r = c.stop(&id, "TERM", 2_000).await.expect("stop");
    assert!(r.stopped, "{}", r.error);
    assert!(!pid.alive());
    let p = r.process.expect("p");
    assert_eq!(
        p.status,
        pb::ProcessStatus::Completed as i32,
        "the shell had completed on its own"
    );
    assert_eq!(p.descendants_running, 0);
}

/// A stop's rescans (every 100 ms, for new forks) must not signal again what they already
/// signalled: to many programs a second SIGTERM means "give up the graceful shutdown".
#[tokio::test]
async fn a_graceful_process_gets_sigterm_once_however_long_it_takes() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = dir.path().join("gate");
    // The shell counts the SIGTERMs it gets and keeps working (forking a `sleep` per round, so
    // every rescan finds something new) until the test opens the gate.
    let id = c
        .spawn_bg(&format!(
            "n=0; trap 'n=$((n+1)); echo term $n' TERM; echo ready; \
             while [ ! -e '{}' ]; do sleep 0.05; echo tick; done; echo done $n",
            gate.display()
        ))
        .await;
    let output = || async {
        let r = c.read_since(&id, 1, 1 << 20).await;
        String::from_utf8_lossy(&r.output.expect("output").stdout).into_owned()
    };
    crate::helper::eventually("the trap to be set", || async {
        output().await.contains("ready").then_some(())
    })
    .await;
    let (stopped, ()) = tokio::join!(c.stop(&id, "TERM", 60_000), async {
        // Five rounds after the signal span several 100 ms rescans.
        crate::helper::eventually("rounds after the SIGTERM", || async {
            let text = output().await;
            let after = text.split_once("term 1")?.1;
            (after.matches("tick").count() >= 5).then_some(())
        })
        .await;
        std::fs::write(&gate, b"").expect("gate");
    });
    let r = stopped.expect("stop");
    assert!(r.stopped, "{}", r.error);
    assert!(!r.escalated, "a cooperative process needs no SIGKILL");
    let text = output().await;
    assert_eq!(text.matches("term ").count(), 1, "{text}");
    assert!(text.contains("done 1"), "{text}");
}

/// Issue 16 item 4: a descendant that moved to a process group of its own (still in the shell's
/// session) gets the graceful SIGTERM like any other member — while the shell runs, and after it
/// exited — instead of only the SIGKILL after the grace, or nothing at all: after the shell
/// exited, `stop` used to answer `process_exited` and leave it running.
#[tokio::test]
async fn a_descendant_in_its_own_process_group_gets_sigterm_in_both_states() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let tb = testbin();
    for (state, line) in [
        ("shell running", "{tb} setpgid-trap-term {log} 600 & wait"),
        (
            "shell exited",
            "{tb} setpgid-trap-term {log} 600 & echo started; exit 0",
        ),
    ] {
        let log = d
            .dir
            .path()
            .join(format!("term-{}.log", state.replace(' ', "-")));
        let line = line
            .replace("{tb}", &tb)
            .replace("{log}", &log.display().to_string());
        let id = c.spawn_bg(&line).await;
        let moved = c.ready_pids(&id, 1).await[0];
        if state == "shell exited" {
            crate::helper::eventually("the shell to exit, leaving its descendant", || async {
                let p = c.read_since(&id, 1, 1).await.process.expect("process");
                (p.status == pb::ProcessStatus::Completed as i32 && p.descendants_running == 1)
                    .then_some(())
            })
            .await;
        }
        let r = c.stop(&id, "TERM", 1_000).await.expect("stop");
        assert!(r.stopped, "{state}: {r:?}");
        assert!(!moved.alive(), "{state}: the descendant outlived the stop");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap_or_default(),
            "TERM\n",
            "{state}: the descendant got SIGTERM exactly once before SIGKILL"
        );
    }
}
