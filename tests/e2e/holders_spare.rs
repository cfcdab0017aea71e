//! Spare directories (issue 13, Linux): each idle holder waits in a directory of its own under
//! `<state>/spare`, its socket bound and its exit file created, and an `exec` renames that
//! directory into place as the process directory. What a user relies on: nothing is left behind
//! by holders that were never used (whatever ended the daemon), a process's exit status is still
//! found where a later daemon looks, and a directory already there is never taken over.

use std::os::unix::fs::PermissionsExt;

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually, exec_req, idle_holders_in, idle_launchers_in};

/// Entries of `<state>/spare`.
fn spares(d: &TestDaemon) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(d.state.join("spare"))
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Pids of the idle holders and their launchers waiting in `<state>/spare`.
fn idle_holders(d: &TestDaemon) -> Vec<i32> {
    let mut pids = idle_holders_in(&d.state);
    pids.extend(idle_launchers_in(&d.state));
    pids
}

#[tokio::test]
async fn idle_holders_wait_in_private_spare_directories_that_go_with_them_however_the_daemon_ends()
{
    let mut d = TestDaemon::start().await;
    d.idle_holders_ready().await;
    for dir in spares(&d) {
        let mode = std::fs::metadata(&dir).expect("spare").permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        assert!(dir.join("holder.sock").exists(), "{}", dir.display());
        let exit = std::fs::read(dir.join("exit")).expect("exit file created ahead");
        assert!(
            exit.is_empty(),
            "an idle holder's exit file says nothing yet"
        );
    }
    // Each spare has its holder and the holder's launcher: the shell's process, started ahead.
    let mut names: Vec<String> = idle_holders(&d)
        .into_iter()
        .map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap_or_default()
                .trim_end()
                .to_string()
        })
        .collect();
    names.sort();
    let n = spares(&d).len();
    let mut want = vec!["yieldshell-hold".to_string(); n];
    want.extend(vec!["yieldshell-lnch".to_string(); n]);
    assert_eq!(names, want);
    // kill -9: nobody tells the idle holders; their connection closes and each removes its
    // own directory, ends its launcher and exits.
    d.kill9();
    eventually(
        "the idle holders to remove their spares and exit",
        || async { (spares(&d).is_empty() && idle_holders(&d).is_empty()).then_some(()) },
    )
    .await;
    // A spare left by a holder that could not clean up (killed -9 itself) is cleared by the
    // next daemon, which makes its own.
    let stale = d.state.join("spare").join("1-0");
    std::fs::create_dir_all(&stale).expect("plant a stale spare");
    std::fs::write(stale.join("exit"), b"").expect("plant");
    d.spawn().await;
    d.idle_holders_ready().await;
    assert!(!stale.exists(), "the stale spare was cleared");
    // A stop that ends everything lets the idle holders go too.
    d.terminate();
    eventually("the idle holders to be gone after a stop", || async {
        (spares(&d).is_empty() && idle_holders(&d).is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_exec_takes_over_a_spare_and_its_exit_status_is_where_a_later_daemon_looks() {
    let mut d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    let before = spares(&d);
    let r = c.exec("exit 7").await;
    let p = r.process.expect("process");
    assert_eq!(p.exit_code, Some(7));
    let dir = d.state.join("procs").join(&p.process_id);
    // The process directory is one of the spares, moved (the pool makes new ones with new names).
    assert!(
        before.iter().any(|s| !s.exists()),
        "no spare was taken: {before:?}"
    );
    // The holder writes the file once the frames are sent (the `exec` may answer first).
    let exit = eventually("the exit file", || async {
        std::fs::read_to_string(dir.join("exit"))
            .ok()
            .filter(|text| !text.is_empty())
    })
    .await;
    assert!(exit.starts_with("code 7 "), "{exit:?}");
    // The next daemon reads the same process as ended with 7.
    d.terminate();
    d.spawn().await;
    let c = d.session();
    let w = c.wait_exit(&p.process_id).await;
    assert_eq!(w.process.expect("process").exit_code, Some(7));
}

#[tokio::test]
async fn a_chosen_id_whose_directory_exists_is_refused_and_the_directory_left_alone() {
    let d = TestDaemon::start().await;
    let c = d.session();
    d.idle_holders_ready().await;
    // An empty directory nobody registered (a plain rename would silently replace it).
    let id = "3c1d2e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    let planted = d.state.join("procs").join(id);
    std::fs::create_dir(&planted).expect("plant");
    let r = c
        .exec_with(pb::ExecRequest {
            process_id: Some(id.to_string()),
            ..exec_req("echo taken")
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32);
    assert!(r.error.contains("already in use"), "{}", r.error);
    assert_eq!(
        std::fs::read_dir(&planted).expect("still there").count(),
        0,
        "the directory was not replaced"
    );
    // The next exec still gets a process of its own.
    let r = c.exec("echo fine").await;
    assert_eq!(r.process.expect("process").exit_code, Some(0));
}

/// One failed preparation (a holder killed in its prepare window, a moment of a full disk) costs
/// one idle holder, not spare directories for the daemon's life: the next refill uses them again.
#[tokio::test]
async fn a_failed_preparation_is_retried_by_the_next_refill() {
    let d =
        TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", "spare_prepare_fails:1")]).await;
    let c = d.session();
    // The first refill (at start) failed; an exec's refill prepares spares again.
    let r = c.exec("echo one").await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
    d.idle_holders_ready().await;
    let log = d.log();
    assert!(log.contains("the next refill tries again"), "{log}");
    // And an exec takes one of them.
    let r = c.exec("echo two").await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
    assert_eq!(r.output.expect("output").stdout, b"two\n");
}

/// Failures in a row are the filesystem's: holders go on without spare directories, and every
/// exec still runs.
#[tokio::test]
async fn failures_in_a_row_turn_spares_off_and_execs_still_run() {
    let d =
        TestDaemon::start_with_env(&[("YIELDSHELL_TEST_FAULTS", "spare_prepare_fails:3")]).await;
    let c = d.session();
    let mut n = 0;
    eventually("spares given up after failures in a row", || {
        n += 1;
        let c = &c;
        let d = &d;
        let command = format!("echo run{n}");
        async move {
            let r = c.exec(&command).await;
            assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
            d.log().contains("from now on").then_some(())
        }
    })
    .await;
    for i in 0..5 {
        let r = c.exec(&format!("echo after{i}")).await;
        assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
        assert_eq!(
            r.output.expect("output").stdout,
            format!("after{i}\n").into_bytes()
        );
    }
    assert!(spares(&d).is_empty(), "{:?}", spares(&d));
}
