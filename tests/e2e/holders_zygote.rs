//! The holder zygote (issue 13, ARCHITECTURE.md, "Who owns what"; Linux): holders are forked by one small process per
//! daemon, and must be as independent of it as of the daemon — no descriptor of the zygote, no
//! zombie, a process that runs on when the zygote dies — while the zygote itself stays bounded
//! over many `exec`s and is replaced when it dies. Also the upgrade path: a daemon binary of
//! another version takes over every process through `yieldctl daemon restart`, and a client of
//! another protocol version is told to run it.

use std::os::unix::fs::PermissionsExt;

use yieldshell_proto::pb;

use crate::helper::{
    Pid, TestDaemon, bin, eventually, fd_count, fd_target, fd_targets, holders_in,
    marked_processes, pid_of, run, stop_and_see_gone, testbin, ticks, ticks_go_on_unbroken,
    zombies_of,
};

/// Children of `parent` (from `/proc/<pid>/task/*/children`).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|l| {
            l.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// Process group and session of a process (fields 5 and 6 of `/proc/<pid>/stat`).
fn groups_of(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat[stat.rfind(')')? + 1..].split_ascii_whitespace();
    let pgrp = after.nth(2)?.parse().ok()?;
    let session = after.next()?.parse().ok()?;
    Some((pgrp, session))
}

/// The daemon's zygote: its child named `yieldshell-zygo` that leads its own session. The name
/// alone is not enough: a holder the zygote just forked is re-parented to the daemon with the
/// zygote's name, until it names itself (it never leads a session).
fn zygote_of(daemon: i32) -> Option<Pid> {
    children_of(daemon)
        .into_iter()
        .find(|&p| comm(p) == "yieldshell-zygo" && groups_of(p).is_some_and(|(_, sid)| sid == p))
        .and_then(Pid::of)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zygote_stays_bounded_and_its_holders_owe_it_nothing() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let daemon = d.pid();
    let zygote = eventually("the daemon's holder zygote", || async { zygote_of(daemon) }).await;
    // Two hundred commands, each through a holder the zygote forked.
    for i in 0..200 {
        let r = c.exec(&format!("echo {i}")).await;
        assert_eq!(r.status, pb::ExecStatus::Completed as i32, "exec {i}");
    }
    assert!(
        zygote.alive(),
        "one zygote serves them all; the daemon's log says:\n{}",
        d.log()
    );
    // A refill may be forking the next idle holder right now (the zygote then holds that
    // holder's socket for an instant, and its short-lived middle child may not be reaped yet):
    // what must hold is that it comes back to its own four descriptors and no zombie.
    eventually(
        "the zygote back to its standard descriptors and its socket, no zombie",
        || async { (fd_count(zygote.pid) == 4 && zombies_of(zygote.pid).is_empty()).then_some(()) },
    )
    .await;
    eventually(
        "the ended holders reaped and only the idle ones left",
        || async {
            let holders: Vec<i32> = children_of(daemon)
                .into_iter()
                .filter(|&p| comm(p) == "yieldshell-hold")
                .collect();
            (zombies_of(daemon).is_empty() && holders.len() <= 2).then_some(())
        },
    )
    .await;

    // A holder the zygote forked: outside the daemon's session (in the zygote's, with a process
    // group of its own), a child of the daemon (not of the zygote), named like any holder,
    // holding none of the zygote's descriptors.
    let id = c.spawn_bg(&format!("exec {} tick 20", testbin())).await;
    let (holder, _) = eventually("the ticker's holder", || async {
        holders_in(&d.state)
            .into_iter()
            .find(|(_, dir)| dir.ends_with(&id))
    })
    .await;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid)).expect("cmdline");
    assert_eq!(
        cmdline.split(|b| *b == 0).nth(1),
        Some(&b"hold"[..]),
        "shown as a holder"
    );
    assert!(
        children_of(daemon).contains(&holder.pid),
        "the daemon adopted it"
    );
    assert_eq!(
        groups_of(holder.pid),
        Some((holder.pid, zygote.pid)),
        "its own process group, in the zygote's session"
    );
    assert_ne!(groups_of(daemon).map(|g| g.1), Some(zygote.pid));
    let zygote_socket = fd_target(zygote.pid, 3).expect("the zygote's socket");
    assert!(
        !fd_targets(holder.pid).contains(&zygote_socket),
        "the holder has the zygote's socket: {:?}",
        fd_targets(holder.pid)
    );

    // The zygote dies: the ticker and its holder go on, and the next exec gets a new zygote.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(zygote.pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the zygote");
    eventually("the zygote gone", || async {
        (!zygote.alive()).then_some(())
    })
    .await;
    let seen = ticks(&c.read_all(&id, 1 << 20).await.0).len();
    let r = c.exec("echo after").await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32);
    let again = eventually("a new zygote", || async {
        zygote_of(daemon).filter(|z| *z != zygote)
    })
    .await;
    assert!(again.alive());
    let numbers = eventually("the ticker going on", || async {
        let n = ticks(&c.read_all(&id, 1 << 20).await.0);
        (n.len() >= seen + 5).then_some(n)
    })
    .await;
    assert_eq!(numbers, (0..numbers.len() as u64).collect::<Vec<_>>());
    assert!(holder.alive());
    c.stop(&id, "TERM", 2000).await.expect("stop");
    let w = c.wait_exit(&id).await;
    assert_eq!(
        w.process.expect("process").status,
        pb::ProcessStatus::Stopped as i32
    );
    assert!(marked_processes(&id).is_empty());
}

/// Issue 13: "a new daemon binary (a build with another version string) takes over from an old
/// one". The new binary is an installed copy started through a wrapper that gives it another
/// version (`YIELDSHELL_TEST_VERSION_SUFFIX`, honoured by debug builds only).
#[cfg_attr(
    not(debug_assertions),
    ignore = "the version override exists in debug builds only"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_of_another_version_takes_over_every_process() {
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let old = d.status().await;
    let c = d.session();
    let id = c.spawn_bg(&format!("exec {} tick 20", testbin())).await;
    let ticker = pid_of(&c, &id).await;
    eventually("a few ticks", || async {
        (ticks(&c.read_all(&id, 1 << 20).await.0).len() >= 3).then_some(())
    })
    .await;

    // The "upgrade": another binary, reporting another version.
    let install = d.dir.path().join("new-install");
    std::fs::create_dir_all(&install).expect("mkdir");
    let new_daemon = install.join("yieldshelld");
    std::fs::copy(bin("yieldshelld"), &new_daemon).expect("copy the daemon");
    let wrapper = install.join("yieldshelld-next");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nYIELDSHELL_TEST_VERSION_SUFFIX=+next exec '{}' \"$@\"\n",
            new_daemon.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let restarted = run(d
        .yieldctl()
        .env("YIELDSHELL_DAEMON_BIN", &wrapper)
        .args(["daemon", "restart"]));
    let said = String::from_utf8_lossy(&restarted.stderr).into_owned();
    assert!(restarted.status.success(), "{restarted:?}");
    assert!(said.contains("1 running process(es) kept"), "{said}");

    let new = d.status().await;
    assert_eq!(
        new.daemon_version,
        format!("{}+next", old.daemon_version),
        "the new binary serves"
    );
    assert_ne!(new.pid, old.pid);
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/exe", new.pid)).expect("exe"),
        new_daemon
    );
    let c = d.session();
    let listed = c.list(pb::Scope::All, false).await;
    let p = listed
        .iter()
        .find(|p| p.process_id == id)
        .expect("re-adopted");
    assert_eq!(p.status, pb::ProcessStatus::Running as i32);
    assert_eq!(p.pid, Some(ticker.pid as u32), "the same process");
    assert!(ticker.alive());
    ticks_go_on_unbroken(&c, &id, "the takeover").await;
    stop_and_see_gone(&c, &id, &ticker).await;
}

/// A client of another protocol version is told the remedy that keeps every process.
#[tokio::test]
async fn a_client_of_another_protocol_is_told_to_run_daemon_restart() {
    let d = TestDaemon::start().await;
    let mut raw = yieldshell_proto::client::connect_any_version(&d.opts())
        .await
        .expect("connect");
    let refused = raw
        .hello(pb::HelloRequest {
            protocol_version: yieldshell_proto::PROTOCOL_VERSION + 1,
            client_name: "yieldctl".into(),
            client_version: "99.0.0".into(),
        })
        .await
        .expect_err("another protocol is refused");
    let message = refused.message();
    assert!(
        message.contains("yieldctl daemon restart") && message.contains("processes are kept"),
        "{message}"
    );
}
