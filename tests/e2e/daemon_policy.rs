//! Per-session policy, enforced by the daemon: every refusal names its rule and starts nothing.

use yieldshell_proto::pb;

use crate::helper::{Client, TestDaemon, eventually, exec_req, testbin};

async fn refused(c: &Client, req: pb::ExecRequest) -> (String, String) {
    let r = c
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            ..req
        })
        .await;
    assert_eq!(
        r.status,
        pb::ExecStatus::FailedToStart as i32,
        "not refused: {r:?}"
    );
    assert!(
        r.process.is_none(),
        "a refused exec must not create a process"
    );
    (r.error_kind, r.error)
}

#[tokio::test]
async fn side_effects_are_required_valid_exclusive_and_checked_against_the_block_list() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let marker = d.dir.path().join("ran");
    let cmd = format!("touch {}", marker.display());
    let with = |effects: &[&str]| pb::ExecRequest {
        side_effects: effects.iter().map(|s| s.to_string()).collect(),
        ..exec_req(&cmd)
    };
    let (kind, msg) = refused(&c, with(&[])).await;
    assert_eq!(kind, "invalid_argument");
    assert!(msg.contains("NONE"), "{msg}");
    let (kind, _) = refused(&c, with(&["NONE", "DELETES_FILES"])).await;
    assert_eq!(kind, "invalid_argument");
    let (kind, msg) = refused(&c, with(&["BOGUS"])).await;
    assert_eq!(kind, "invalid_argument");
    assert!(
        msg.contains("MAKES_NETWORK_REQUESTS"),
        "lists valid values: {msg}"
    );
    let (kind, msg) = refused(
        &c,
        with(&["MODIFIES_WORKSPACE_FILES", "BREAKS_OPERATING_SYSTEM"]),
    )
    .await;
    assert_eq!(kind, "side_effect_blocked");
    assert!(
        msg.contains("BREAKS_OPERATING_SYSTEM")
            && msg.contains("MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS")
    );
    assert!(!marker.exists(), "a refused command ran");

    let custom = d.session_with(&[("MCP_YIELDSHELL_BLOCKED_SIDE_EFFECTS", "DELETES_FILES")]);
    let ok = custom
        .exec_with(pb::ExecRequest {
            yield_ms: Some(30_000),
            ..with(&["BREAKS_OPERATING_SYSTEM"])
        })
        .await;
    assert_eq!(ok.status, pb::ExecStatus::Completed as i32);
    assert!(marker.exists());
}

#[tokio::test]
async fn deny_and_allow_regexes_refuse_without_echoing_the_command() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[
        ("YIELDSHELL_DENY_COMMAND_REGEX", "rm\\s+-rf"),
        ("YIELDSHELL_ALLOW_COMMAND_REGEX", "^(echo|rm) "),
    ]);
    let (kind, msg) = refused(&c, exec_req("rm -rf /tmp/very-secret-path")).await;
    assert_eq!(kind, "command_denied");
    assert!(msg.contains("YIELDSHELL_DENY_COMMAND_REGEX"));
    assert!(!msg.contains("very-secret-path"));
    let (kind, msg) = refused(&c, exec_req("ls /")).await;
    assert_eq!(kind, "command_denied");
    assert!(msg.contains("YIELDSHELL_ALLOW_COMMAND_REGEX"));
    assert_eq!(
        c.exec("echo fine").await.status,
        pb::ExecStatus::Completed as i32
    );
}

#[tokio::test]
async fn allow_commands_checks_every_simple_command_with_a_real_parser() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_ALLOW_COMMANDS", "echo, cat ,true")]);
    assert_eq!(
        c.exec("echo a | cat && true; echo \"$(echo nested)\"")
            .await
            .status,
        pb::ExecStatus::Completed as i32
    );
    for bypass in [
        "echo ok; rm -rf x",
        "echo $(rm -rf x)",
        "echo `rm -rf x`",
        "echo \"$(rm -rf x)\"",
        "cat <<EOF\n$(rm -rf x)\nEOF",
        "true && (rm x)",
        "/bin/rm x",
        "env rm x",
        "echo 'unterminated",
    ] {
        let (kind, _) = refused(&c, exec_req(bypass)).await;
        assert_eq!(kind, "command_denied", "{bypass}");
    }
}

/// Issue 29, item 1: `/bin/sh` (dash) reads a `'` in the word of `"${x:-…}"` and its
/// siblings, or of `${…}` in an unquoted here-document, as a plain character, and joins
/// `$\⏎(` in a here-document into `$(`; a bash reading took the `'` for a quote and missed
/// the `touch`. Each line is first run by `/bin/sh` itself, so it is known to run `touch`
/// there; through the daemon it is refused and `touch` never runs.
#[tokio::test]
async fn allow_commands_sees_what_sh_runs_behind_quotes_it_reads_differently() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_ALLOW_COMMANDS", "echo,cat")]);
    let marker = d.dir.path().join("touched");
    let m = marker.display();
    let mut lines: Vec<String> = ["-", ":-", "+", ":+", "=", ":=", "?", ":?"]
        .iter()
        .map(|op| format!("u=1; echo \"${{u{op}'}}\"; touch {m}; #'}}\""))
        .collect();
    lines.extend([
        format!("echo \"${{u:-'$(touch {m})'}}\""),
        format!("echo \"${{u:-'`touch {m}`'}}\""),
        format!("(echo \"${{u/'}}\"); touch {m}; #'/x}}\")"),
        format!("echo ${{u:-\"${{v:-'$(touch {m})'}}\"}}"),
        format!("cat <<EOF\n${{u:-'$(touch {m})'}}\nEOF"),
        format!("cat <<EOF\n$\\\n(touch {m})\nEOF"),
    ]);
    for line in &lines {
        let sh = std::process::Command::new("/bin/sh")
            .args(["-c", line])
            .output()
            .expect("/bin/sh");
        assert!(
            marker.exists(),
            "/bin/sh did not run touch for {line:?}: {sh:?}"
        );
        std::fs::remove_file(&marker).expect("remove");
        let (kind, msg) = refused(&c, exec_req(line)).await;
        assert_eq!(kind, "command_denied", "{line:?}: {msg}");
        assert!(
            !marker.exists(),
            "touch ran through the daemon for {line:?}"
        );
    }
    // What both shells read alike still runs.
    let ok = c
        .exec("echo \"${u:-$(echo nested)}\" ${u:-'a b'} \"${u#'x'}\" \"${u:-\"'\"}\"")
        .await;
    assert_eq!(ok.status, pb::ExecStatus::Completed as i32, "{ok:?}");
    let out = ok.output.expect("output");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "nested a b  '\n");
}

#[tokio::test]
async fn allowed_cwds_use_component_containment_after_resolving_symlinks() {
    let d = TestDaemon::start().await;
    let root = d.dir.path().join("a").join("b");
    let sibling = d.dir.path().join("a").join("bc");
    std::fs::create_dir_all(root.join("inner")).expect("mkdir");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::os::unix::fs::symlink(&sibling, root.join("escape")).expect("symlink");
    let root_s = root.display().to_string();
    let c = d.session_with(&[
        ("YIELDSHELL_ALLOWED_CWDS", root_s.as_str()),
        ("YIELDSHELL_DEFAULT_CWD", root_s.as_str()),
    ]);
    assert_eq!(c.exec("pwd").await.status, pb::ExecStatus::Completed as i32);
    let inside = c
        .exec_with(pb::ExecRequest {
            cwd: Some(b"inner".to_vec()),
            yield_ms: Some(30_000),
            ..exec_req("pwd")
        })
        .await;
    assert_eq!(inside.status, pb::ExecStatus::Completed as i32);
    for bad in [
        sibling.display().to_string(),
        "escape".into(),
        "../bc".into(),
        "/".into(),
    ] {
        let (kind, msg) = refused(
            &c,
            pb::ExecRequest {
                cwd: Some(bad.as_bytes().to_vec()),
                ..exec_req("pwd")
            },
        )
        .await;
        assert_eq!(kind, "cwd_denied", "{bad}");
        assert!(
            msg.contains("YIELDSHELL_ALLOWED_CWDS") || msg.contains("cannot be used"),
            "{msg}"
        );
    }
    // Processes outside the roots are invisible to this session.
    let outsider = d.session();
    let other = outsider.spawn_bg("sleep 60").await;
    assert!(
        c.list(pb::Scope::All, true)
            .await
            .iter()
            .all(|p| p.process_id != other)
    );
    assert!(c.stop(&other, "TERM", 100).await.is_err());
}

#[tokio::test]
async fn the_running_process_limit_counts_this_sessions_processes() {
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "2")]);
    let a = c.spawn_bg("sleep 60").await;
    let _b = c.spawn_bg("sleep 60").await;
    let (kind, msg) = refused(&c, exec_req("sleep 60")).await;
    assert_eq!(kind, "limit_reached");
    assert!(msg.contains("YIELDSHELL_MAX_PROCESSES"));
    // Another session has its own budget.
    let other = d.session_with(&[("YIELDSHELL_MAX_PROCESSES", "2")]);
    other.spawn_bg("sleep 60").await;
    // Stopping one frees a slot.
    assert!(c.stop(&a, "TERM", 1_000).await.expect("stop").stopped);
    c.spawn_bg("sleep 60").await;
}

#[tokio::test]
async fn secrets_are_redacted_even_when_split_across_reads() {
    let d = TestDaemon::start().await;
    let secret = "s3cr3t-token-value-0123456789";
    let c = d.session_with(&[("MY_API_TOKEN", secret)]);
    // Print the secret in two writes, the second only after the daemon has read the first, so
    // it certainly spans two pipe reads: the redactor then releases "before " and holds back
    // the possible start of a secret, and the gate opens once a read shows exactly that.
    let gate = d.dir.path().join("gate");
    std::fs::write(&gate, b"").expect("gate");
    let cmd = format!(
        "printf 'before s3cr3t-token-'; while [ -e {} ]; do sleep 0.01; done; printf 'value-0123456789 after\\n'; echo $MY_API_TOKEN >&2; {} env MY_API_TOKEN",
        gate.display(),
        testbin()
    );
    let id = c.spawn_bg(&cmd).await;
    eventually("the daemon to read the first half", || async {
        let (out, _) = c.read_all(&id, 1 << 20).await;
        (out == b"before ").then_some(())
    })
    .await;
    std::fs::remove_file(&gate).expect("open the gate");
    c.wait_exit(&id).await;
    let (out, err) = c.read_all(&id, 1 << 20).await;
    let out = String::from_utf8(out).expect("utf8");
    let err = String::from_utf8(err).expect("utf8");
    assert!(
        !out.contains("s3cr3t") && !err.contains("s3cr3t"),
        "leaked: {out} {err}"
    );
    assert_eq!(
        out,
        "before [REDACTED:MY_API_TOKEN] after\n[REDACTED:MY_API_TOKEN]\n"
    );
    assert_eq!(err, "[REDACTED:MY_API_TOKEN]\n");
    // Overlay values are redacted too, and nothing secret reaches the spool on disk.
    let r = c
        .exec_with(pb::ExecRequest {
            env: vec![pb::EnvVar {
                name: b"DB_PASSWORD".to_vec(),
                value: b"hunter2hunter2".to_vec(),
            }],
            yield_ms: Some(30_000),
            ..exec_req("echo $DB_PASSWORD")
        })
        .await;
    assert_eq!(
        r.output.expect("output").stdout,
        b"[REDACTED:DB_PASSWORD]\n"
    );
    let spools: Vec<_> = walk(&d.state)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("out."))
        })
        .collect();
    assert!(!spools.is_empty(), "no spool files found");
    let spool_hit = spools.iter().any(|p| {
        std::fs::read(p).is_ok_and(|b| b.windows(6).any(|w| w == b"s3cr3t" || w == b"hunter"))
    });
    assert!(!spool_hit, "a secret reached the output spool on disk");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
