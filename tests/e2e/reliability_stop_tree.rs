//! Issue 29, items 2, 3, 4 and 7: trees that a stop used to miss or misreport, as root and as
//! an unprivileged user (CI runs as root, which reads every process's environment and is bound
//! by no `ulimit -u`: the unprivileged runs are the ones users see).
//!
//! - A non-dumpable daemon (`ssh-agent`, or the testbin's `undumpable-daemon`): an unprivileged
//!   daemon cannot read its environment, so no marker attributes it to its process; every live
//!   descendant of a holder (the tree's child subreaper) is a member, marker or not.
//! - A fork-and-exit chain: one process alive at a time, a new pid each time, so a scan always
//!   names a pid that has just gone; a stop freezes what it finds (SIGSTOP), rescans until
//!   nothing new appears, then kills, and says `stopped` only once the holder has no live child.
//! - A fork bomb whose children each `setsid` (`ulimit -u 300`): every kill frees a slot for a
//!   new fork, so only freezing before killing ends it.
//! - A holder stopped by its own command (`kill -STOP $PPID`): `stop`, the daemon's shutdown and
//!   the next daemon's re-adoption resume it (SIGCONT) instead of waiting for it.

use std::time::{Duration, Instant};

use yieldshell_proto::pb;

use crate::helper::{
    AsUser, Client, Pid, TestDaemon, cmdline_contains, eventually, holders_in, testbin,
};

/// Grace before SIGKILL in these stops.
const GRACE_MS: u64 = 500;
/// How long a stop may take beyond its grace (as F13 allows: a loaded 2-core CI box).
const STOP_SLACK: Duration = Duration::from_secs(4);

/// Live processes (any user) whose command line contains `tag`.
fn tagged(tag: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| Pid::of(*pid).is_some() && cmdline_contains(*pid, tag))
        .collect()
}

/// Kills whatever carries `tag` (a chain or bomb a failed stop left), stopping it first so it
/// cannot fork away meanwhile; bounded.
fn kill_tagged(tag: &str) {
    use nix::sys::signal::{Signal, kill};
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let left = tagged(tag);
        if left.is_empty() {
            return;
        }
        for sig in [Signal::SIGSTOP, Signal::SIGKILL] {
            for p in &left {
                let _ = kill(nix::unistd::Pid::from_raw(*p), sig);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A tag no other test's command line holds.
fn unique_tag(d: &std::path::Path, what: &str) -> String {
    format!(
        "{what}-{}",
        d.file_name().expect("dir name").to_string_lossy()
    )
}

/// How long a chain or bomb lives at most (the testbin's UNTIL argument): long enough for any
/// test to grow and stop it on a loaded machine, short enough that one leaked by a killed test
/// run ends on its own within a minute.
const FORK_LIFETIME: Duration = Duration::from_secs(60);

/// The deadline a forking testbin mode inherits: the testbin's UNTIL argument (milliseconds
/// since the Unix epoch), and the same moment as an `Instant`, by which a stop must have ended
/// (a stop that "succeeds" after it only saw the chain expire proves nothing).
fn fork_deadline() -> (u64, Instant) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    (
        (now + FORK_LIFETIME).as_millis() as u64,
        Instant::now() + FORK_LIFETIME,
    )
}

/// Fails when the forking program may have expired on its own before `at`.
fn assert_before_expiry(expires: Instant, at: Instant) {
    assert!(
        at + Duration::from_secs(1) < expires,
        "the chain or bomb was about to expire on its own when the stop ended: the test proves \
         nothing on a machine this slow"
    );
}

/// Whether a `fork-chain` holding the lock file `lock` has a live process: every process of the
/// chain holds its lock, and a scan of `/proc` mostly misses a process that lives a millisecond.
fn chain_alive(lock: &std::path::Path) -> bool {
    let f = std::fs::File::open(lock).expect("the chain's lock file");
    match f.try_lock() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(e) => panic!("flock: {e:?}"),
    }
}

/// The state letter of `pid` (`T` when stopped).
fn state_of(pid: i32) -> Option<u8> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..].trim_start().bytes().next()
}

/// A process whose command stops its own holder (`$PPID`), told to once `exec` has answered;
/// returns once the holder is stopped: the process's id and its holder.
async fn stopped_by_its_command(d: &TestDaemon, c: &Client) -> (String, Pid) {
    let id = c.spawn_bg("read _; kill -STOP $PPID; exec sleep 600").await;
    let (holder, _) = holders_in(&d.state)
        .into_iter()
        .find(|(_, dir)| dir.ends_with(&id))
        .expect("the holder");
    c.write(&id, b"go\n", false).await.expect("write");
    eventually("the holder to be stopped", || async {
        (state_of(holder.pid) == Some(b'T')).then_some(())
    })
    .await;
    (id, holder)
}

#[tokio::test]
async fn a_fork_and_exit_chain_is_stopped_and_reported_stopped_only_once_gone() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let lock = d.dir.path().join("chain.lock");
    let (until, expires) = fork_deadline();
    let id = c
        .spawn_bg(&format!(
            "{} fork-chain {} 1 {until}; exec sleep 600",
            testbin(),
            lock.display()
        ))
        .await;
    let first = c.ready_pids(&id, 1).await[0];
    // The premise: the chain has moved on to pids of its own (its first process exits only once
    // it has forked the next), and it still runs.
    eventually("the chain to move on", || async {
        (!first.alive()).then_some(())
    })
    .await;
    assert!(chain_alive(&lock), "the chain ended before the stop");
    let started = Instant::now();
    let r = c.stop(&id, "TERM", GRACE_MS).await.expect("stop");
    let took = started.elapsed();
    let escaped = chain_alive(&lock);
    assert_before_expiry(expires, Instant::now());
    let tag = lock.display().to_string();
    kill_tagged(&tag);
    println!("fork-and-exit chain: stop took {took:?}, {r:?}");
    assert!(!escaped, "the chain escaped the stop: {r:?}");
    assert!(r.stopped, "{r:?}");
    assert!(
        took < Duration::from_millis(GRACE_MS) + STOP_SLACK,
        "{took:?}"
    );
    let info = r.process.expect("process");
    assert_eq!(info.status, pb::ProcessStatus::Stopped as i32);
}

#[tokio::test]
async fn a_holder_stopped_by_its_own_command_is_resumed_and_the_stop_is_quick() {
    let d = TestDaemon::start().await;
    let c = d.session();
    // The command stops its holder ($PPID) once told to, after `exec` has answered.
    let (id, holder) = stopped_by_its_command(&d, &c).await;
    let started = Instant::now();
    let r = c.stop(&id, "TERM", GRACE_MS).await.expect("stop");
    let took = started.elapsed();
    println!("stop with a stopped holder: {took:?}");
    assert!(r.stopped, "{r:?}");
    assert!(!r.escalated, "sleep dies of SIGTERM: {r:?}");
    assert!(
        took < Duration::from_millis(GRACE_MS) + STOP_SLACK,
        "{took:?}"
    );
    assert_eq!(
        r.process.expect("process").status,
        pb::ProcessStatus::Stopped as i32
    );
    eventually("the holder to exit", || async {
        (!holder.alive()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_shutdown_and_the_next_daemon_resume_a_stopped_holder() {
    // Shutdown: a stopped holder reaps nothing and reports nothing until it is resumed.
    let mut d = TestDaemon::start_configured(&[], "shutdown_grace_ms = 1000\n").await;
    let c = d.session();
    let (_, holder) = stopped_by_its_command(&d, &c).await;
    let started = Instant::now();
    let status = tokio::task::block_in_place(|| d.terminate()).expect("exit status");
    let took = started.elapsed();
    println!("daemon stop with a stopped holder: {took:?}");
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(1) + STOP_SLACK,
        "shutdown took {took:?}"
    );
    assert!(!holder.alive(), "the holder outlived the daemon's shutdown");

    // Re-adoption: the next daemon greets a stopped holder without waiting out the handshake.
    d.spawn().await;
    let c = d.session();
    let (id, holder) = stopped_by_its_command(&d, &c).await;
    d.kill9();
    let started = Instant::now();
    d.spawn().await;
    let ready = started.elapsed();
    println!("next daemon ready after {ready:?} with a stopped holder");
    let c = d.session();
    let listed = c
        .list(pb::Scope::All, true)
        .await
        .into_iter()
        .find(|p| p.process_id == id)
        .expect("listed");
    assert_eq!(
        listed.status,
        pb::ProcessStatus::Running as i32,
        "re-adopted: {listed:?}"
    );
    // The handshake's own timeout is 10 s: a daemon that waited it out was not resumed.
    assert!(ready < Duration::from_secs(8), "ready after {ready:?}");
    let r = c.stop(&id, "TERM", GRACE_MS).await.expect("stop");
    assert!(r.stopped, "{r:?}");
    assert!(!holder.alive() || state_of(holder.pid) != Some(b'T'));
}

// The same trees under an unprivileged daemon. Each test has a uid of its own (see
// `helper::unprivileged`).

/// `stop` as the user: its JSON answer and how long it took.
fn stop_as(u: &AsUser, id: &str, force_after_ms: u64) -> (serde_json::Value, Duration) {
    let started = Instant::now();
    let r = u.yieldctl_json(
        "stop",
        &[id, "--force-after-ms", &force_after_ms.to_string()],
    );
    (r, started.elapsed())
}

/// The `ready` lines the process printed, once there are `n`.
async fn ready_as(u: &AsUser, id: &str, n: usize) -> Vec<Pid> {
    eventually("testbin ready lines", || async {
        let pids = Pid::all_from_ready_lines(&u.output(id));
        (pids.len() >= n).then_some(pids)
    })
    .await
}

/// A non-dumpable daemon started by `command` (which prints its pid, see `agent_pid`) is stopped
/// with its tree, and its holder exits.
async fn a_non_dumpable_daemon_is_stopped_as(
    uid: u32,
    command: impl FnOnce(&AsUser) -> String,
    agent_pid: impl Fn(&str) -> Option<i32>,
) {
    let u = AsUser::start(uid).await;
    let id = u.spawn_bg(&command(&u));
    let agent = eventually("the agent's pid", || async {
        agent_pid(&u.output(&id)).and_then(Pid::of)
    })
    .await;
    // The premise: its /proc files are root's, so its environment (and marker) is unreadable.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(format!("/proc/{}/environ", agent.pid))
            .expect("proc entry")
            .uid(),
        0,
        "the agent is not non-dumpable"
    );
    let holder = u.holder_of(&id);
    let (r, took) = stop_as(&u, &id, GRACE_MS);
    let survived = agent.alive();
    if survived {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(agent.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    println!("non-dumpable daemon as uid {uid}: stop took {took:?}: {r}");
    assert!(!survived, "the non-dumpable daemon survived the stop: {r}");
    assert_eq!(r["stopped"], true, "{r}");
    assert_eq!(r["status"], "stopped", "{r}");
    eventually("the holder to exit", || async {
        (!holder.alive()).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs root (runs the daemon as another uid): run .ci/test-extra as root"]
async fn as_a_user_a_non_dumpable_daemon_is_stopped_with_its_tree() {
    a_non_dumpable_daemon_is_stopped_as(
        64_202,
        |u| format!("{} undumpable-daemon 600; exec sleep 600", u.testbin()),
        |out| Pid::all_from_ready_lines(out).first().map(|p| p.pid),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs root and ssh-agent (openssh-client): run .ci/test-extra as root"]
async fn as_a_user_ssh_agent_is_stopped_with_its_tree() {
    crate::helper::require_tool("ssh-agent", "openssh-client");
    a_non_dumpable_daemon_is_stopped_as(
        64_205,
        |_| {
            "eval \"$(ssh-agent -s)\" >/dev/null; echo \"agent $SSH_AGENT_PID\"; exec sleep 600"
                .to_string()
        },
        |out| {
            out.lines()
                .find_map(|l| l.strip_prefix("agent ")?.trim().parse().ok())
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs root (runs the daemon as another uid): run .ci/test-extra as root"]
async fn as_a_user_a_fork_and_exit_chain_is_stopped() {
    let u = AsUser::start(64_203).await;
    let lock = u.dir.path().join("chain.lock");
    let (until, expires) = fork_deadline();
    let id = u.spawn_bg(&format!(
        "{} fork-chain {} 1 {until}; exec sleep 600",
        u.testbin(),
        lock.display()
    ));
    let first = ready_as(&u, &id, 1).await[0];
    eventually("the chain to move on", || async {
        (!first.alive()).then_some(())
    })
    .await;
    assert!(chain_alive(&lock), "the chain ended before the stop");
    let (r, took) = stop_as(&u, &id, GRACE_MS);
    let escaped = chain_alive(&lock);
    assert_before_expiry(expires, Instant::now());
    println!("fork-and-exit chain as a user: stop took {took:?}: {r}");
    assert!(!escaped, "the chain escaped the stop: {r}");
    assert_eq!(r["stopped"], true, "{r}");
    assert_eq!(r["status"], "stopped", "{r}");
    assert!(
        took < Duration::from_millis(GRACE_MS) + STOP_SLACK,
        "{took:?}"
    );
}

#[tokio::test]
#[ignore = "needs root (runs the daemon as another uid): run .ci/test-extra as root"]
async fn as_a_user_a_fork_bomb_of_setsid_children_is_stopped() {
    const FORCE_AFTER_MS: u64 = 1000;
    let u = AsUser::start(64_204).await;
    let tag = unique_tag(u.dir.path(), "bomb");
    let (until, expires) = fork_deadline();
    // Each process retries a refused fork every 10 ms. Every `setsid` child is a session, and so
    // (with the kernel's per-session autogroups) a scheduling group of its own, as weighty as
    // the daemon's: at 1 ms ~290 of them keep both cores busy and the machine's every process,
    // this test's daemon and `yieldctl` included, runs at a fraction of its speed (the stop
    // still ends the bomb, measured at 8 s there: docs/RELIABILITY.md). 10 ms still refills every
    // slot a kill frees within milliseconds, which is what defeats kill-what-you-found.
    let id = u.spawn_bg(&format!(
        "exec {} setsid-bomb {tag} 10 300 {until}",
        u.testbin()
    ));
    // The bomb fills the user's process limit (the daemon's own threads count too).
    let grown = eventually("the bomb to grow", || async {
        let n = u.processes_with(&tag).len();
        (n >= 200).then_some(n)
    })
    .await;
    let (r, took) = stop_as(&u, &id, FORCE_AFTER_MS);
    let left = u.processes_with(&tag);
    assert_before_expiry(expires, Instant::now());
    println!(
        "setsid fork bomb as a user ({grown}+ processes): stop took {took:?}, {} left: {r}",
        left.len()
    );
    assert!(
        left.is_empty(),
        "{} bomb processes survived: {r}",
        left.len()
    );
    assert_eq!(r["stopped"], true, "{r}");
    assert_eq!(r["status"], "stopped", "{r}");
    assert!(
        took < Duration::from_millis(FORCE_AFTER_MS) + STOP_SLACK,
        "{took:?}"
    );
}
