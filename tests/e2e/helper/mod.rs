//! Test fixtures: a real `yieldshelld` in a temp dir, a control-plane client, `yieldctl` runs,
//! process-identity checks, load sizing, latency summaries, the system tools some tests need, and
//! installed layouts of the binaries driven by a real MCP client.
//! Waits poll against one generous [`TIMEOUT`]; nothing sleeps and hopes.
//!
//! Every name is re-exported here, so test modules say `helper::name` whichever file holds it.

#![allow(dead_code)] // each test module uses a different subset

mod binaries;
mod client;
mod fixture;
mod installs;
mod load;
mod node_clients;
mod poll;
mod prerequisites;
mod procfs;
mod stats;
mod tmux;
mod unprivileged;

// Like the items (`dead_code` above), a re-export no test module uses at the moment must not
// fail `-D warnings`: test modules come and go, the helper stays.
#[allow(unused_imports)]
pub use binaries::{bin, json, run, testbin, windows_bin};
#[allow(unused_imports)]
pub use client::{Client, exec_req};
#[allow(unused_imports)]
pub use fixture::TestDaemon;
#[allow(unused_imports)]
pub use installs::{
    SYSTEM_PATH, installed_shim_command, place_binaries, serve_one_exec, started_daemon_exe,
};
#[allow(unused_imports)]
pub use load::{heavy, heavy_lock, size};
#[allow(unused_imports)]
pub use node_clients::{Events, event, events_of, ts_sdk_client};
#[allow(unused_imports)]
pub use poll::{TIMEOUT, eventually, eventually_blocking};
#[allow(unused_imports)]
pub use prerequisites::{require_root, require_tool};
#[allow(unused_imports)]
pub use procfs::{
    Pid, assert_no_zombies, daemon_pids_for, fd_count, fd_target, fd_targets, holders_in, hwm_kib,
    idle_holders_in, idle_launchers_in, marked_processes, rss_kib, zombies_of,
};
#[allow(unused_imports)]
pub use stats::Latencies;
#[allow(unused_imports)]
pub use tmux::Tmux;
#[allow(unused_imports)]
pub use unprivileged::{AsUser, cmdline_contains, processes_of_uid};

/// The numbers of the `tick <n>` lines a `testbin tick` printed, in order.
pub fn ticks(text: impl AsRef<[u8]>) -> Vec<u64> {
    String::from_utf8_lossy(text.as_ref())
        .lines()
        .filter_map(|l| l.strip_prefix("tick ")?.parse().ok())
        .collect()
}

/// The process of managed process `id` (as `ps` lists it), once it has a pid.
pub async fn pid_of(c: &Client, id: &str) -> Pid {
    eventually("the process's pid", || async {
        let all = c.list(yieldshell_proto::pb::Scope::All, false).await;
        all.iter()
            .find(|p| p.process_id == id)
            .and_then(|p| p.pid)
            .and_then(|pid| Pid::of(pid as i32))
    })
    .await
}

/// Stops process `id` (SIGTERM, SIGKILL after 2 s), checks that it is recorded `stopped`, and
/// waits until its process `pid` is gone.
pub async fn stop_and_see_gone(c: &Client, id: &str, pid: &Pid) {
    c.stop(id, "TERM", 2000).await.expect("stop");
    let w = c.wait_exit(id).await;
    assert_eq!(
        w.process.expect("process").status,
        yieldshell_proto::pb::ProcessStatus::Stopped as i32
    );
    eventually("the process gone", || async {
        (!pid.alive()).then_some(())
    })
    .await;
}

/// Waits for five more ticks of `testbin tick` process `id` than it has printed now, then checks
/// that every tick since the start is there once, in order: nothing was lost or repeated by
/// whatever happened to the daemon before.
pub async fn ticks_go_on_unbroken(c: &Client, id: &str, what: &str) {
    let seen = ticks(&c.read_all(id, 1 << 20).await.0).len();
    let numbers = eventually("more ticks", || async {
        let n = ticks(&c.read_all(id, 1 << 20).await.0);
        (n.len() >= seen + 5).then_some(n)
    })
    .await;
    assert_eq!(
        numbers,
        (0..numbers.len() as u64).collect::<Vec<_>>(),
        "no line lost or repeated across {what}"
    );
}
