//! docs/RELIABILITY.md load cases L1, L2, L3, L4, L6, at sizes that fit a 2-core CI machine; the
//! full sizes run with `YIELDSHELL_TEST_HEAVY=1` (see `docs/RELIABILITY.md`). nextest runs this
//! module in its `heavy` test group (one at a time); under `cargo test` the tests take
//! [`heavy_lock`] for the same effect.
//!
//! Budgets are for a debug build on a shared 2-core machine — generous, and printed with the
//! figures measured, so a regression shows long before it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use yieldshell_proto::pb;
use yieldshell_tests::is_flood_at;

use crate::helper::{
    Latencies, TIMEOUT, TestDaemon, exec_req, fd_count, heavy, heavy_lock, marked_processes,
    rss_kib, size, testbin,
};
use crate::reliability_clients::Observer;

/// A starvation bound for control calls under load, not a speed target: the latency targets
/// (`ps` p99 < 50 ms, others < 100 ms, release build) are measured by the benchmark, while this
/// debug build shares 2 cores with the load it measures and with the rest of the suite. A call
/// that waits this long is stuck behind the flood, which is what these tests look for.
const RPC_P99_BUDGET: Duration = Duration::from_secs(3);

/// Waits until `id` has exited, however long a full-size flood takes.
async fn wait_done(c: &crate::helper::Client, id: &str, limit: Duration) -> pb::ProcessInfo {
    let deadline = Instant::now() + limit;
    loop {
        let w = c
            .wait(pb::WaitRequest {
                process_id: id.into(),
                timeout_ms: Some(TIMEOUT.as_millis() as u64),
                ..Default::default()
            })
            .await
            .expect("wait");
        if w.result == pb::WaitResult::Exited as i32 {
            return w.process.expect("process");
        }
        assert!(
            Instant::now() < deadline,
            "{id} did not finish in {limit:?}"
        );
    }
}

/// Samples the daemon's RSS until `done`; returns the highest value (KiB).
fn rss_sampler(pid: i32, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut max = 0;
        while !done.load(Ordering::Relaxed) {
            max = max.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        max
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_hundreds_of_sleepers_and_chatty_processes_keep_ps_fast_and_resources_bounded() {
    let _heavy = heavy_lock().await;
    let (sleepers, chatty) = (size(100, 500), size(10, 50));
    let n = sleepers + chatty;
    const RING: u64 = 65_536;
    let d = TestDaemon::start_configured(&[], "max_running_processes = 2000\n").await;
    let c = Arc::new(d.session_with(&[
        ("YIELDSHELL_MAX_PROCESSES", "2000"),
        ("YIELDSHELL_MAX_BUFFER_BYTES", "65536"),
    ]));
    c.exec("true").await;
    d.idle_holders_ready().await;
    let daemon = d.pid();
    let (base_fds, base_rss) = (fd_count(daemon), rss_kib(daemon));
    let tb = testbin();
    let started = Instant::now();
    let mut starters = Vec::new();
    for w in 0..8 {
        let c = c.clone();
        let tb = tb.clone();
        starters.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in (w..n).step_by(8) {
                let command = if i < sleepers {
                    "exec sleep 600".to_string()
                } else {
                    format!("exec {tb} tick 10")
                };
                ids.push(c.spawn_bg(&command).await);
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for s in starters {
        ids.extend(s.await.expect("starter"));
    }
    let spawn_time = started.elapsed();
    let rate = n as f64 / spawn_time.as_secs_f64();
    assert_eq!(ids.len(), n, "every start succeeded");
    let mut ps = Latencies::default();
    for _ in 0..50 {
        let t = Instant::now();
        let listed = c.list(pb::Scope::All, true).await;
        ps.push(t.elapsed());
        assert!(listed.len() > n);
    }
    let (fds, rss) = (fd_count(daemon), rss_kib(daemon));
    let rss_budget = n as u64 * (RING + 64 * 1024) / 1024;
    println!(
        "L1: {n} processes started at {rate:.0}/s; ps {}; fds {base_fds} -> {fds} (+{:.1}/process); RSS {base_rss} -> {rss} KiB (+{} KiB, budget {rss_budget})",
        ps.summary(),
        (fds - base_fds) as f64 / n as f64,
        rss.saturating_sub(base_rss)
    );
    assert!(ps.pct(99.0) < RPC_P99_BUDGET, "ps p99 {:?}", ps.pct(99.0));
    // Three pipes per process, plus the spool's segment and index files while it runs.
    assert!(fds <= base_fds + 5 * n, "{fds} descriptors");
    assert!(rss <= base_rss + rss_budget, "RSS {rss} KiB");
    assert!(rate >= 50.0, "spawn rate {rate:.0}/s");
    // Shutdown takes every one of them down.
    let mut d = d;
    tokio::task::block_in_place(|| d.terminate());
    for id in &ids {
        assert!(
            marked_processes(id).is_empty(),
            "{id} survived the shutdown"
        );
    }
}

/// Control calls in a loop until `done`: `Status`, `List`, and a latest-output `Read` of `id`.
fn rpc_loop(
    d: &TestDaemon,
    id: String,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Latencies> {
    let c = d.session();
    let opts = d.opts();
    tokio::spawn(async move {
        let mut raw = yieldshell_proto::client::connect(&opts)
            .await
            .expect("connect")
            .client;
        let mut lat = Latencies::default();
        while !done.load(Ordering::Relaxed) {
            let t = Instant::now();
            raw.status(pb::StatusRequest::default())
                .await
                .expect("status");
            lat.push(t.elapsed());
            let t = Instant::now();
            c.list(pb::Scope::All, true).await;
            lat.push(t.elapsed());
            let t = Instant::now();
            c.read(pb::ReadRequest {
                process_id: id.clone(),
                ..Default::default()
            })
            .await
            .expect("read");
            lat.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lat
    })
}

/// Spool bytes on disk for a process (its `out.*` segments).
fn spool_bytes(d: &TestDaemon, id: &str) -> u64 {
    std::fs::read_dir(d.state.join("procs").join(id))
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("out."))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

const SPOOL_CAP: u64 = 16 * 1024 * 1024;
const SEGMENT: u64 = 4 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_four_full_speed_floods_keep_memory_flat_rpcs_fast_and_spools_capped() {
    let _heavy = heavy_lock().await;
    let bytes = size(48 << 20, 1 << 30) as u64;
    let d = TestDaemon::start_configured(&[], &format!("spool_max_bytes = {SPOOL_CAP}\n")).await;
    let c = d.session();
    let quiet = c
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    c.ready_pids(&quiet, 1).await;
    let daemon = d.pid();
    let base_rss = rss_kib(daemon);
    let done = Arc::new(AtomicBool::new(false));
    let sampler = rss_sampler(daemon, done.clone());
    let rpcs = rpc_loop(&d, quiet.clone(), done.clone());
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            c.spawn_bg(&format!("exec {} flood {bytes}", testbin()))
                .await,
        );
    }
    let limit = if heavy() { TIMEOUT * 20 } else { TIMEOUT * 4 };
    for id in &ids {
        let p = wait_done(&c, id, limit).await;
        assert_eq!(p.exit_code, Some(0));
        assert_eq!(p.stdout_bytes, bytes, "{id} lost bytes");
    }
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let max_rss = sampler.await.expect("sampler");
    let lat = rpcs.await.expect("rpc loop");
    let mb_s = (4 * bytes) as f64 / took.as_secs_f64() / 1e6;
    let rings = 4 * 262_144 / 1024;
    println!(
        "L2: 4 x {} MiB drained at {mb_s:.0} MB/s; RSS {base_rss} -> max {max_rss} KiB; RPCs during the flood {}",
        bytes >> 20,
        lat.summary()
    );
    assert!(
        max_rss <= base_rss + rings + 32 * 1024,
        "RSS grew to {max_rss} KiB"
    );
    assert!(
        lat.pct(99.0) < RPC_P99_BUDGET,
        "RPC p99 {:?}",
        lat.pct(99.0)
    );
    // The drain rate is printed, not asserted: speed is the benchmark's to measure (a busy
    // 2-core machine drained 85 MB/s here, a quiet one 215), while this test's promise is that
    // every byte arrives in bounded memory and disk.
    for id in &ids {
        let spool = spool_bytes(&d, id);
        assert!(spool <= SPOOL_CAP + SEGMENT, "{id}: spool {spool} bytes");
        // The newest bytes are exact.
        let o = c
            .read(pb::ReadRequest {
                process_id: id.clone(),
                max_output_bytes: Some(4096),
                ..Default::default()
            })
            .await
            .expect("read")
            .output
            .expect("output");
        assert!(is_flood_at(o.first_seq - 1, &o.stdout));
    }
}

/// Follows `id` from seq 1 to its end over its own connection, checking every byte against the
/// flood pattern. Returns (bytes received, gap events).
async fn checking_follower(
    opts: yieldshell_proto::client::ConnectOptions,
    session_id: String,
    id: String,
) -> (u64, u64) {
    let mut client = yieldshell_proto::client::connect(&opts)
        .await
        .expect("connect")
        .client;
    let mut stream = client
        .follow(pb::FollowRequest {
            session_id,
            process_id: id,
            since_seq: Some(1),
            ..Default::default()
        })
        .await
        .expect("follow")
        .into_inner();
    let (mut received, mut gaps, mut next) = (0u64, 0u64, 1u64);
    loop {
        let ev = tokio::time::timeout(TIMEOUT, stream.message())
            .await
            .expect("the follower stalled")
            .expect("follow stream")
            .expect("stream ended without `ended`");
        if ev.ended.is_some() {
            return (received, gaps);
        }
        if ev.dropped_to > 0 {
            assert_eq!(ev.dropped_from, next, "gap not where the data stopped");
            gaps += 1;
            next = ev.dropped_to;
            continue;
        }
        assert_eq!(ev.seq, next, "data not contiguous");
        assert!(
            is_flood_at(ev.seq - 1, &ev.data),
            "wrong bytes at seq {}",
            ev.seq
        );
        received += ev.data.len() as u64;
        next += ev.data.len() as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_stalled_follower_costs_bounded_memory_gets_a_gap_and_cannot_hold_up_shutdown() {
    let _heavy = heavy_lock().await;
    let bytes = size(48 << 20, 1 << 30) as u64;
    let mut d = TestDaemon::start_configured(
        &[],
        &format!("spool_max_bytes = {SPOOL_CAP}\nshutdown_grace_ms = 1000\n"),
    )
    .await;
    let c = d.session();
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    // The flood waits for the gate, so the stalled follower is in place before it starts.
    let id = c
        .spawn_bg(&format!(
            "while [ -e {} ]; do sleep 0.01; done; exec {} flood {bytes}",
            gate.display(),
            testbin()
        ))
        .await;
    let daemon = d.pid();
    let base_rss = rss_kib(daemon);
    let stall = |d: &TestDaemon| {
        let opts = d.opts();
        let session = c.id();
        let id = id.clone();
        async move {
            let mut client = yieldshell_proto::client::connect(&opts)
                .await
                .expect("connect")
                .client;
            let stream = client
                .follow(pb::FollowRequest {
                    session_id: session,
                    process_id: id,
                    since_seq: Some(1),
                    ..Default::default()
                })
                .await
                .expect("follow")
                .into_inner();
            (client, stream)
        }
    };
    // Stalled: never reads (its HTTP/2 window and the daemon's small queue fill up).
    let (_stalled_client, mut stalled) = stall(&d).await;
    let live = tokio::spawn(checking_follower(d.opts(), c.id(), id.clone()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = rss_sampler(daemon, done.clone());
    std::fs::remove_file(&gate).expect("open gate");
    let p = wait_done(&c, &id, if heavy() { TIMEOUT * 20 } else { TIMEOUT * 4 }).await;
    assert_eq!(p.stdout_bytes, bytes);
    let (received, gaps) = live.await.expect("live follower");
    done.store(true, Ordering::Relaxed);
    let max_rss = sampler.await.expect("sampler");
    println!(
        "L3: live follower got {} MiB in order ({gaps} gaps); RSS {base_rss} -> max {max_rss} KiB",
        received >> 20
    );
    assert!(
        max_rss <= base_rss + 262_144 / 1024 + 32 * 1024,
        "RSS grew to {max_rss} KiB"
    );
    // The stalled client reads again: what was queued for it, then a gap, not gigabytes.
    let mut stale = 0u64;
    let gap = loop {
        let ev = tokio::time::timeout(TIMEOUT, stalled.message())
            .await
            .expect("the stalled stream")
            .expect("stream")
            .expect("event");
        if ev.dropped_to > 0 {
            break (ev.dropped_from, ev.dropped_to);
        }
        assert!(ev.ended.is_none(), "ended without a gap");
        stale += ev.data.len() as u64;
        assert!(stale < 8 << 20, "{stale} stale bytes before any gap");
    };
    println!(
        "L3: the stalled follower got {} KiB of queued data, then a gap {gap:?}",
        stale >> 10
    );
    // Stalled again, on a fresh stream: shutdown must not wait for it beyond its 2 s bound.
    let (_client2, _stalled2) = stall(&d).await;
    let t = Instant::now();
    let status = tokio::task::block_in_place(|| d.terminate()).expect("exit");
    let took = t.elapsed();
    println!("L3: shutdown with a stalled follower took {took:?}");
    assert!(status.success());
    assert!(
        took < Duration::from_secs(1 + 2 + 2),
        "shutdown took {took:?}"
    );
    assert!(gap.1 > gap.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_hundreds_of_followers_get_the_same_bytes_and_leave_nothing_behind() {
    let _heavy = heavy_lock().await;
    let (followers, loops) = (size(50, 200), size(10, 50));
    let bytes = size(16 << 20, 256 << 20) as u64;
    let d = TestDaemon::start().await;
    let c = d.session();
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    let id = c
        .spawn_bg(&format!(
            "while [ -e {} ]; do sleep 0.01; done; exec {} flood {bytes}",
            gate.display(),
            testbin()
        ))
        .await;
    let mut obs = Observer::new(&d).await;
    let base = obs.stable().await;
    let mut tasks = Vec::new();
    for _ in 0..followers {
        tasks.push(tokio::spawn(checking_follower(
            d.opts(),
            c.id(),
            id.clone(),
        )));
    }
    let done = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let mut ps_loops = Vec::new();
    for _ in 0..loops {
        let c = d.session();
        let done = done.clone();
        let calls = calls.clone();
        ps_loops.push(tokio::spawn(async move {
            let mut lat = Latencies::default();
            while !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.list(pb::Scope::All, true).await;
                lat.push(t.elapsed());
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            lat
        }));
    }
    std::fs::remove_file(&gate).expect("open gate");
    let mut covered = Vec::new();
    for t in tasks {
        covered.push(t.await.expect("follower"));
    }
    done.store(true, Ordering::Relaxed);
    let mut lat = Latencies::default();
    for l in ps_loops {
        lat.0.extend(l.await.expect("ps loop").0);
    }
    let full = covered
        .iter()
        .filter(|(b, g)| *b == bytes && *g == 0)
        .count();
    println!(
        "L4: {followers} followers of {} MiB: {full} got every byte, the rest had gaps (all bytes checked); ps {}",
        bytes >> 20,
        lat.summary()
    );
    assert!(lat.pct(99.0) < RPC_P99_BUDGET, "ps p99 {:?}", lat.pct(99.0));
    for (b, g) in &covered {
        assert!(*b == bytes || *g > 0, "a follower lost bytes without a gap");
    }
    let back = obs.back_to(base).await;
    println!("L4: descriptors and tasks back to {base:?} in {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_a_hundred_concurrent_starts_get_a_hundred_ids_and_none_is_lost() {
    let _heavy = heavy_lock().await;
    let d = TestDaemon::start().await;
    let c = Arc::new(d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "200")]));
    c.exec("true").await;
    let mut starts = Vec::new();
    for _ in 0..100 {
        let c = c.clone();
        starts.push(tokio::spawn(async move {
            c.exec_with(pb::ExecRequest {
                yield_ms: Some(0),
                ..exec_req("exec sleep 600")
            })
            .await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for s in starts {
        let r = s.await.expect("start");
        assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{}", r.error);
        ids.insert(r.process.expect("process").process_id);
    }
    assert_eq!(ids.len(), 100, "ids are distinct");
    let running: Vec<_> = c
        .list(pb::Scope::All, false)
        .await
        .into_iter()
        .filter(|p| ids.contains(&p.process_id))
        .collect();
    assert_eq!(running.len(), 100);
    assert!(
        running
            .iter()
            .all(|p| p.status == pb::ProcessStatus::Running as i32)
    );
    assert_eq!(d.status().await.running, 100);
}
