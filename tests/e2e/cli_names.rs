//! Processes named on `yieldctl`'s command line by id or by name, and the shell completions
//! that offer both (issue 28, item 4): bash through its real completion function, zsh and fish
//! through the protocol their registered scripts speak to `yieldctl`.

use std::process::Command;

use crate::helper::{TestDaemon, bin, daemon_pids_for, run};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `yieldctl` in completion mode for `shell`, completing the last of `words`.
fn complete(d: &TestDaemon, shell: &str, words: &[&str]) -> String {
    let mut c = d.yieldctl();
    c.env("COMPLETE", shell)
        .env("_CLAP_IFS", "\n")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .arg("--")
        .args(words);
    let out = run(&mut c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[tokio::test]
async fn ids_and_names_are_completed_in_bash_zsh_and_fish() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let web = c
        .exec_with(yieldshell_proto::pb::ExecRequest {
            name: Some("webserver".into()),
            yield_ms: Some(0),
            ..crate::helper::exec_req("sleep 600")
        })
        .await
        .process
        .expect("process")
        .process_id;
    // Bash: the script `yieldctl completions bash` prints, sourced into a real bash, its
    // completion function called as bash calls it on Tab.
    let script = d.dir.path().join("yieldctl.bash");
    std::fs::write(
        &script,
        run(Command::new(bin("yieldctl")).args(["completions", "bash"])).stdout,
    )
    .expect("script");
    let bash = |word: &str| {
        let out = run(Command::new("bash")
            .arg("-c")
            .arg(
                r#"source "$1"; COMP_WORDS=(yieldctl stop "$2"); COMP_CWORD=2;
                   _clap_complete_yieldctl yieldctl "$2" stop; printf '%s\n' "${COMPREPLY[@]}""#,
            )
            .arg("bash")
            .arg(&script)
            .arg(word)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin("yieldctl").parent().expect("dir").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("YIELDSHELL_SOCKET", &d.socket)
            .env("YIELDSHELL_STATE_DIR", &d.state));
        text(&out.stdout)
    };
    assert_eq!(bash("webs").trim(), "webserver");
    assert_eq!(bash(&web[..8]).trim(), web);
    // Zsh and fish get descriptions beside each candidate.
    let zsh = complete(&d, "zsh", &["yieldctl", "read", "proc_"]);
    assert!(
        zsh.lines()
            .any(|l| l.starts_with(&format!("{web}:")) && l.contains("running")),
        "{zsh}"
    );
    let fish = complete(&d, "fish", &["yieldctl", "attach", "web"]);
    assert!(
        fish.lines()
            .any(|l| l.starts_with("webserver\t") && l.contains(&web)),
        "{fish}"
    );
    // Without a daemon a Tab offers nothing (and starts none).
    let mut stopped = d;
    stopped.terminate();
    let mut c = Command::new(bin("yieldctl"));
    c.env("YIELDSHELL_SOCKET", &stopped.socket)
        .env("YIELDSHELL_STATE_DIR", &stopped.state)
        .env("COMPLETE", "fish")
        .args(["--", "yieldctl", "stop", "proc_"]);
    let out = run(&mut c);
    assert!(out.status.success());
    assert!(text(&out.stdout).trim().is_empty(), "{}", text(&out.stdout));
    assert!(
        daemon_pids_for(&stopped.socket).is_empty(),
        "a Tab started a daemon"
    );
}

#[tokio::test]
async fn a_name_stands_for_its_process_unless_it_names_several() {
    let d = TestDaemon::start().await;
    let run_named = |name: &str, command: &str| {
        let out = run(d.yieldctl().args([
            "--json",
            "exec",
            "--yield-ms",
            "0",
            "--name",
            name,
            "--",
            command,
        ]));
        crate::helper::json(&out)["process_id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    let web = run_named("web", "sleep 600");
    let out = run(d.yieldctl().args(["stop", "web"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&web), "{}", text(&out.stderr));
    // Two of the same name: the running one is meant, and two running ones are refused.
    let again = run_named("web", "sleep 600");
    let out = run(d.yieldctl().args(["--json", "stop", "web"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&again), "{}", text(&out.stdout));
    let a = run_named("twin", "sleep 600");
    let b = run_named("twin", "sleep 600");
    let out = run(d.yieldctl().args(["stop", "twin"]));
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("names 2 processes") && said.contains(&a) && said.contains(&b),
        "{said}"
    );
    // A name nobody has is an unknown process, as an unknown id is.
    let out = run(d.yieldctl().args(["read", "nobody-has-this"]));
    assert!(
        text(&out.stderr).contains("Unknown process_id"),
        "{}",
        text(&out.stderr)
    );
}
