//! `yieldctl top` as a person uses it (issue 28): a real terminal (tmux), keys typed with
//! `send-keys`, the screen read with `capture-pane`, every wait polled against one timeout.
//!
//! These need tmux, so they are ignored in `cargo test --workspace` (a fresh machine without
//! it must pass) and run by the extra tier; each still asks for tmux first, failing with the
//! package to install when it is missing.
#![cfg(target_os = "linux")]

use yieldshell_proto::pb;

use crate::helper::{TestDaemon, Tmux, eventually, json, run};

/// A window whose shell reaches `d` (auto-start off) and runs `yieldctl top` in it.
fn top_window(d: &TestDaemon, extra: &[(&str, String)], args: &str) -> Tmux {
    let mut env = vec![
        ("YIELDSHELL_SOCKET", d.socket.display().to_string()),
        ("YIELDSHELL_STATE_DIR", d.state.display().to_string()),
        ("YIELDSHELL_NO_AUTOSTART", "1".to_string()),
    ];
    env.extend(extra.iter().cloned());
    // A panic's message must fit on the screen: no backtrace.
    env.push(("RUST_BACKTRACE", "0".to_string()));
    let t = Tmux::open(d.dir.path(), 140, 40, &env);
    t.type_line(&format!("yieldctl top {args}; echo \"top exited $?\""));
    t.wait_for("top's header", |s| {
        s.contains("yieldctl top") && s.contains("sort")
    });
    t
}

/// Starts `command` in the background (named `name`) through `yieldctl exec`; returns its id.
fn exec_named(d: &TestDaemon, name: &str, args: &[&str], command: &str) -> String {
    let out = run(d
        .yieldctl()
        .args(["--json", "exec", "--yield-ms", "200", "--name", name])
        .args(args)
        .args(["--", command]));
    let v = json(&out);
    assert_eq!(v["status"], "backgrounded", "{v}");
    v["process_id"].as_str().expect("id").to_string()
}

/// The table row of `id` on the screen.
fn row<'a>(screen: &'a str, id: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.starts_with(id))
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn rows_show_figures_new_processes_appear_filter_and_stop_work_and_q_restores_the_terminal() {
    let d = TestDaemon::start().await;
    let busy = exec_named(&d, "busy", &[], "while :; do :; done");
    let t = top_window(&d, &[], "");
    // The busy loop's row has a CPU figure above zero and its memory.
    let screen = t.wait_for("the busy loop with CPU and memory", |s| {
        row(s, &busy).is_some_and(|r| {
            let cells: Vec<&str> = r.split_whitespace().collect();
            let cpu = cells
                .iter()
                .find_map(|c| c.strip_suffix('%')?.parse::<f64>().ok());
            let mem = cells.iter().any(|c| {
                c.len() > 1
                    && (c.ends_with('K') || c.ends_with('M'))
                    && c[..c.len() - 1].parse::<f64>().is_ok()
            });
            cpu.is_some_and(|c| c > 1.0) && mem && r.contains("running")
        })
    });
    println!("{screen}");
    // A process started meanwhile appears without a key press.
    let late = exec_named(&d, "late-comer", &[], "sleep 600");
    t.wait_for("the new process's row", |s| row(s, &late).is_some());
    // `/` filters as it is typed; Esc clears the filter.
    t.keys(&["/"]);
    t.keys(&["-l", "late-com"]);
    t.wait_for("only the late process", |s| {
        row(s, &late).is_some() && row(s, &busy).is_none() && s.contains("filter /late-com")
    });
    t.keys(&["Escape"]);
    t.wait_for("both rows again", |s| {
        row(s, &late).is_some() && row(s, &busy).is_some()
    });
    // `s` on the busy loop asks first; `y` stops it, and its row says so.
    t.keys(&["/"]);
    t.keys(&["-l", "busy"]);
    t.keys(&["Enter"]);
    t.wait_for("the busy loop alone", |s| row(s, &late).is_none());
    t.keys(&["s"]);
    t.wait_for("the question", |s| {
        s.contains(&format!("stop {busy} and its whole tree?"))
    });
    t.keys(&["y"]);
    t.wait_for("the stopped row", |s| {
        row(s, &busy).is_some_and(|r| r.contains("stopped SIGTERM"))
    });
    let c = d.session();
    let listed = c.list(pb::Scope::All, true).await;
    let p = listed
        .iter()
        .find(|p| p.process_id == busy)
        .expect("listed");
    assert_eq!(p.status, pb::ProcessStatus::Stopped as i32);
    // `q` quits, the terminal as the shell had it.
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| s.contains("top exited 0"));
    t.assert_restored();
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn enter_attaches_to_a_terminal_process_and_detaching_comes_back_to_the_table() {
    let d = TestDaemon::start().await;
    let id = exec_named(
        &d,
        "asker",
        &["--tty", "--cols", "80", "--rows", "20"],
        "printf 'name? '; read n; echo \"hello $n\"; sleep 600",
    );
    let t = top_window(&d, &[], "");
    // The pane shows the terminal's rendered screen.
    t.wait_for("the prompt in the pane", |s| {
        s.contains("terminal 80×20") && s.contains("name?")
    });
    t.keys(&["Enter"]);
    t.wait_for("the attached screen", |s| {
        !s.contains("sort AGE") && s.contains("name?")
    });
    t.keys(&["-l", "ada"]);
    t.keys(&["Enter"]);
    t.wait_for("the answer", |s| s.contains("hello ada"));
    t.keys(&["C-]"]);
    t.wait_for("the table again", |s| {
        s.contains("yieldctl top") && s.contains(&format!("back from {id}"))
    });
    // Keys reach top again (nothing of the attach still reads them).
    t.keys(&["/"]);
    t.keys(&["-l", "asker"]);
    t.wait_for("the filter typed after the attach", |s| {
        s.contains("filter /asker")
    });
    t.keys(&["Escape"]);
    // Esc and `q` read together are Alt-q (an escape sequence), not a quit: wait for the Esc
    // to take effect first (under load, the two keys reached top in one read).
    t.wait_for("the filter cleared", |s| !s.contains("filter /asker"));
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| s.contains("top exited 0"));
    t.assert_restored();
    let log = d
        .session()
        .read(pb::ReadRequest {
            process_id: id,
            since_seq: Some(1),
            ..Default::default()
        })
        .await
        .expect("read");
    let text = String::from_utf8_lossy(&log.output.expect("output").stdout).into_owned();
    assert!(text.contains("hello ada"), "{text}");
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn escape_sequences_in_output_and_control_characters_in_a_name_render_inert() {
    let d = TestDaemon::start().await;
    // A name with an OSC title sequence and a bell; output that sets a title, clears the
    // screen, moves the cursor home and paints red, then prints a marker.
    let id = exec_named(
        &d,
        "evil\x1b]2;owned-by-name\x07\x1b[2J",
        &[],
        r"printf '\033]2;owned-by-output\007\033[2J\033[H\033[31mRED\033[0m marker-line\n\033[?25l\033[?1000h'; sleep 600",
    );
    let t = top_window(&d, &[], "");
    let screen = t.wait_for("the marker in the pane, the name escaped", |s| {
        s.contains("marker-line") && row(s, &id).is_some_and(|r| r.contains("evil\\x1b]2;"))
    });
    println!("{screen}");
    // Nothing of it reached the terminal: no title set, the table still drawn around the pane,
    // and the pane's text has no escape sequence in it.
    let title = t.display("#{pane_title}");
    assert!(
        !title.contains("owned"),
        "the window title was changed: {title:?}"
    );
    assert!(
        screen.contains("yieldctl top"),
        "the screen was not cleared:\n{screen}"
    );
    let colours = run(std::process::Command::new("tmux")
        .arg("-S")
        .arg(d.dir.path().join("tmux.sock"))
        .args(["capture-pane", "-p", "-e", "-t", "0"]));
    let coloured = String::from_utf8_lossy(&colours.stdout).into_owned();
    let marker_line = coloured
        .lines()
        .find(|l| l.contains("marker-line"))
        .expect("marker line");
    assert!(
        !marker_line.contains("\x1b[31m"),
        "the process's colour reached the terminal: {marker_line:?}"
    );
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| s.contains("top exited 0"));
    t.assert_restored();
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn the_table_keeps_working_across_a_daemon_restart() {
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let before = exec_named(&d, "before", &[], "sleep 600");
    let t = top_window(&d, &[], "");
    t.wait_for("the first row", |s| row(s, &before).is_some());
    let old = d.status().await.pid;
    let restarted = run(d.yieldctl().args(["daemon", "restart"]));
    assert!(restarted.status.success(), "{restarted:?}");
    eventually("a new daemon", || async {
        (d.status().await.pid != old).then_some(())
    })
    .await;
    // A process started on the new daemon appears, and the old one is still there, running.
    let after = exec_named(&d, "after", &[], "sleep 600");
    t.wait_for("both rows from the new daemon", |s| {
        row(s, &after).is_some() && row(s, &before).is_some_and(|r| r.contains("running"))
    });
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| s.contains("top exited 0"));
    t.assert_restored();
    d.stop_autostarted();
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn sigterm_a_panic_and_a_daemon_gone_each_restore_the_terminal() {
    let d = TestDaemon::unstarted();
    let started = run(d.yieldctl().args(["daemon", "start"]));
    assert!(started.status.success(), "{started:?}");
    let faults = [("YIELDSHELL_TEST_FAULTS", "top_panic_on_key:!".to_string())];
    let t = top_window(&d, &faults, "");
    // SIGTERM from outside, to the shell's child: `top`.
    let shell: i32 = t.display("#{pane_pid}").parse().expect("the shell's pid");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
        .expect("the shell's children");
    let top: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("top's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(top),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill -TERM");
    t.wait_for("top's exit on SIGTERM", |s| s.contains("top exited 143"));
    t.assert_restored();
    // A panic.
    t.type_line("clear; yieldctl top; echo \"top exited $?\"");
    t.wait_for("top's header", |s| {
        s.contains("yieldctl top") && s.contains("sort")
    });
    t.keys(&["!"]);
    t.wait_for("the panic's message and exit", |s| {
        s.contains("top_panic_on_key") && s.contains("top exited 101")
    });
    t.assert_restored();
    // The daemon gone, and not coming back within --reconnect-for.
    t.type_line("clear; yieldctl top --reconnect-for 1; echo \"top exited $?\"");
    t.wait_for("top's header", |s| {
        s.contains("yieldctl top") && s.contains("sort")
    });
    d.stop_autostarted();
    t.wait_for("top's exit without a daemon", |s| {
        s.contains("top exited 3")
    });
    t.assert_restored();
}
