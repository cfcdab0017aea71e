//! Issue 26 item 5: holders outlive daemon upgrades. A daemon of the previous release (built from
//! `PREVIOUS_RELEASE` in `.ci/lib.sh` by `.ci/test-extra previous`, which names it in
//! `YIELDSHELL_PREVIOUS_DAEMON`) starts processes, so they are held by that release's holders,
//! which speak its holder protocol; `yieldctl daemon restart` then puts this build's daemon in
//! its place, and it must re-adopt them: the same processes, their output without a byte lost
//! or repeated, stdin still writable, and `stop` still taking the whole tree down.

use std::path::PathBuf;

use yieldshell_proto::pb;

use crate::helper::{
    TestDaemon, bin, eventually, pid_of, run, stop_and_see_gone, testbin, ticks,
    ticks_go_on_unbroken,
};

/// The previous release's daemon binary.
fn previous_daemon() -> PathBuf {
    let path = std::env::var_os("YIELDSHELL_PREVIOUS_DAEMON")
        .map(PathBuf::from)
        .expect("YIELDSHELL_PREVIOUS_DAEMON names the previous release's yieldshelld: run .ci/test-extra previous");
    assert!(path.is_file(), "{} is not built", path.display());
    path
}

#[ignore = "needs a yieldshelld of the previous release: run .ci/test-extra previous"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_upgrade_re_adopts_the_previous_releases_holders() {
    let old_daemon = previous_daemon();
    let d = TestDaemon::unstarted();
    let started = run(d
        .yieldctl()
        .env("YIELDSHELL_DAEMON_BIN", &old_daemon)
        .args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let old = d.status().await;
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/exe", old.pid)).expect("exe"),
        old_daemon,
        "the previous release serves"
    );
    let c = d.session();
    let ticker_id = c.spawn_bg(&format!("exec {} tick 20", testbin())).await;
    let cat_id = c.spawn_bg("exec cat").await;
    let ticker = pid_of(&c, &ticker_id).await;
    let cat = pid_of(&c, &cat_id).await;
    eventually("a few ticks", || async {
        (ticks(&c.read_all(&ticker_id, 1 << 20).await.0).len() >= 3).then_some(())
    })
    .await;
    c.write(&cat_id, b"before\n", false)
        .await
        .expect("write before the upgrade");

    let restarted = run(d
        .yieldctl()
        .env("YIELDSHELL_DAEMON_BIN", bin("yieldshelld"))
        .args(["daemon", "restart"]));
    let said = String::from_utf8_lossy(&restarted.stderr).into_owned();
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(said.contains("2 running process(es) kept"), "{said}");
    let new = d.status().await;
    assert_ne!(new.pid, old.pid);
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/exe", new.pid)).expect("exe"),
        bin("yieldshelld"),
        "this build serves now"
    );

    let c = d.session();
    let listed = c.list(pb::Scope::All, false).await;
    for (id, pid) in [(&ticker_id, &ticker), (&cat_id, &cat)] {
        let p = listed
            .iter()
            .find(|p| &p.process_id == id)
            .unwrap_or_else(|| panic!("{id} re-adopted: {listed:?}"));
        assert_eq!(p.status, pb::ProcessStatus::Running as i32, "{p:?}");
        assert_eq!(p.pid, Some(pid.pid as u32), "the same process");
        assert!(pid.alive());
    }
    ticks_go_on_unbroken(&c, &ticker_id, "the upgrade").await;

    c.write(&cat_id, b"after\n", true)
        .await
        .expect("write after the upgrade");
    let w = c.wait_exit(&cat_id).await;
    assert_eq!(
        w.process.expect("process").status,
        pb::ProcessStatus::Completed as i32,
        "cat ends at the EOF this daemon gave it"
    );
    assert_eq!(c.read_all(&cat_id, 1 << 20).await.0, b"before\nafter\n");

    stop_and_see_gone(&c, &ticker_id, &ticker).await;
}
