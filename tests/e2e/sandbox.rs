//! The enforced sandbox (README, "Sandbox"), on this machine's real kernel: Landlock, seccomp and
//! user, mount and network namespaces, through the daemon's control plane, `yieldctl` and an MCP
//! client. What users rely on: a command can write and reach exactly what its declaration (or
//! the session's mode) grants — every descendant too, after its shell exited — and a sandboxed
//! command cannot get more through YieldShell itself; the answer says what it was granted and
//! which declaration would have allowed a denial.
//!
//! Each test runs twice where the machine matters: with namespaces, and as on a machine that
//! refuses them (`sandbox_namespaces:refused`: Landlock and seccomp alone, for real).

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{
    Client, TIMEOUT, TestDaemon, bin, eventually, eventually_blocking, exec_req, json, run, testbin,
};
use crate::mcp::{Mcp, body};

/// A daemon and the places its sandboxed commands are tried against: a workspace (the
/// session's default cwd) holding a git repository, and a directory outside it.
struct Sandboxed {
    d: TestDaemon,
    ws: PathBuf,
    outside: PathBuf,
}

/// The fault that makes the daemon act as on a machine that refuses user namespaces.
const NO_NAMESPACES: (&str, &str) = ("YIELDSHELL_TEST_FAULTS", "sandbox_namespaces:refused");

impl Sandboxed {
    async fn start(namespaces: bool) -> Sandboxed {
        let env: &[(&str, &str)] = if namespaces { &[] } else { &[NO_NAMESPACES] };
        let d = TestDaemon::start_with_env(env).await;
        let root = d.dir.path().canonicalize().expect("resolve");
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(ws.join(".git")).expect("workspace");
        std::fs::create_dir_all(&outside).expect("outside");
        Sandboxed { d, ws, outside }
    }

    /// A session in `mode` with `network`, its workspace [`Sandboxed::ws`].
    fn session(&self, mode: &str, network: &str) -> Client {
        let ws = self.ws.display().to_string();
        self.d.session_with(&[
            ("YIELDSHELL_SANDBOX", mode),
            ("YIELDSHELL_SANDBOX_NETWORK", network),
            ("YIELDSHELL_DEFAULT_CWD", &ws),
        ])
    }
}

/// Runs `command` declaring `declared` and waits for its end.
async fn run_declared(c: &Client, declared: &[&str], command: &str) -> pb::ExecResponse {
    c.exec_with(pb::ExecRequest {
        side_effects: declared.iter().map(|d| d.to_string()).collect(),
        yield_ms: Some(TIMEOUT.as_millis() as u64),
        ..exec_req(command)
    })
    .await
}

fn stdout(r: &pb::ExecResponse) -> String {
    String::from_utf8_lossy(&r.output.as_ref().expect("output").stdout).into_owned()
}

fn sandbox_of(r: &pb::ExecResponse) -> pb::Sandbox {
    r.process
        .as_ref()
        .expect("process")
        .sandbox
        .clone()
        .unwrap_or_default()
}

/// A listener on the host's loopback that accepts for ever (a connection proves the network
/// reached it).
fn tcp_listener(addr: &str) -> u16 {
    let l = TcpListener::bind((addr, 0)).expect("listener");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || for _ in l.incoming() {});
    port
}

/// One command that tries each kind of write and a TCP connection to the host's loopback, and
/// prints `NAME=yes|no` for each. `tmp` is the temp dir the process is told to use: the sandbox's
/// private one, and where no sandbox applies (nothing restricted) `/tmp` when `TMPDIR` is unset,
/// as for any program (a probe of `$TMPDIR/probe` alone wrote to `/probe` there).
fn probe(s: &Sandboxed, port: u16) -> String {
    format!(
        "w() {{ if (: > \"$1\") 2>/dev/null; then echo \"$2=yes\"; else echo \"$2=no\"; fi; }}; \
         w {ws}/probe ws; w {ws}/.git/probe git; w {out}/probe out; \
         t=\"${{TMPDIR:-/tmp}}/probe.$$\"; w \"$t\" tmp; rm -f \"$t\"; \
         if {bin} tcp-connect 127.0.0.1 {port} >/dev/null; then echo net=yes; else echo net=no; fi",
        ws = s.ws.display(),
        out = s.outside.display(),
        bin = testbin(),
    )
}

/// What [`probe`] printed, in one line (`ws=yes git=no …`).
fn probed(r: &pb::ExecResponse) -> String {
    stdout(r).split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn each_declaration_gets_its_row(namespaces: bool) {
    let s = Sandboxed::start(namespaces).await;
    let c = s.session("declared", "declared");
    let port = tcp_listener("127.0.0.1");
    // (declared, files, network, what the probe finds). Without namespaces `.git` cannot be
    // kept read-only inside a writable workspace: the answer says so (checked below).
    let git_ro = if namespaces { "git=no" } else { "git=yes" };
    let rows: Vec<(&[&str], &str, &str, String)> = vec![
        (
            &["NONE"],
            "read-only",
            "off",
            "ws=no git=no out=no tmp=yes net=no".into(),
        ),
        (
            &["EXPOSES_SECRETS"],
            "read-only",
            "off",
            "ws=no git=no out=no tmp=yes net=no".into(),
        ),
        (
            &["MODIFIES_WORKSPACE_FILES"],
            "workspace",
            "off",
            format!("ws=yes {git_ro} out=no tmp=yes net=no"),
        ),
        (
            &["DELETES_FILES"],
            "workspace",
            "off",
            format!("ws=yes {git_ro} out=no tmp=yes net=no"),
        ),
        (
            &["USES_DESTRUCTIVE_GIT_OPERATION"],
            "workspace",
            "off",
            "ws=yes git=yes out=no tmp=yes net=no".into(),
        ),
        (
            &["MAKES_NETWORK_REQUESTS"],
            "read-only",
            "on",
            "ws=no git=no out=no tmp=yes net=yes".into(),
        ),
        (
            &["INSTALLS_DEPENDENCIES"],
            "anywhere",
            "on",
            "ws=yes git=yes out=yes tmp=yes net=yes".into(),
        ),
        (
            &["MODIFIES_OUTSIDE_WORKSPACE"],
            "anywhere",
            "off",
            "ws=yes git=yes out=yes tmp=yes net=no".into(),
        ),
        (
            &["CHANGES_NETWORK_CONFIGURATION"],
            "anywhere",
            "on",
            "ws=yes git=yes out=yes tmp=yes net=yes".into(),
        ),
        (
            &["UNKNOWN"],
            "workspace",
            "off",
            format!("ws=yes {git_ro} out=no tmp=yes net=no"),
        ),
        (
            &["MODIFIES_WORKSPACE_FILES", "MAKES_NETWORK_REQUESTS"],
            "workspace",
            "on",
            format!("ws=yes {git_ro} out=no tmp=yes net=yes"),
        ),
    ];
    for (declared, files, network, found) in rows {
        let r = run_declared(&c, declared, &probe(&s, port)).await;
        assert_eq!(
            r.status,
            pb::ExecStatus::Completed as i32,
            "{declared:?}: {}",
            r.error
        );
        assert_eq!(probed(&r), found, "{declared:?}");
        if (files, network) == ("anywhere", "on") {
            // Nothing restricted: no sandbox at all, and the answer carries none.
            assert!(
                r.process.as_ref().expect("p").sandbox.is_none(),
                "{declared:?}"
            );
            continue;
        }
        let sb = sandbox_of(&r);
        assert_eq!(
            (sb.files.as_str(), sb.network.as_str()),
            (files, network),
            "{declared:?}"
        );
        let limited = files == "workspace" && !declared.contains(&"USES_DESTRUCTIVE_GIT_OPERATION");
        assert_eq!(
            sb.limits.contains(".git is writable"),
            limited && !namespaces,
            "{declared:?}: {}",
            sb.limits
        );
    }
}

#[tokio::test]
async fn each_declared_side_effect_gets_its_row_and_no_more() {
    each_declaration_gets_its_row(true).await;
}

#[tokio::test]
async fn each_declared_side_effect_gets_its_row_without_namespaces() {
    each_declaration_gets_its_row(false).await;
}

#[tokio::test]
async fn the_modes_bound_every_declaration_and_off_changes_nothing() {
    let s = Sandboxed::start(true).await;
    let port = tcp_listener("127.0.0.1");
    let everything = ["INSTALLS_DEPENDENCIES"];
    let ww = run_declared(
        &s.session("workspace-write", "declared"),
        &everything,
        &probe(&s, port),
    )
    .await;
    assert_eq!(probed(&ww), "ws=yes git=no out=no tmp=yes net=yes");
    let ro = run_declared(
        &s.session("read-only", "declared"),
        &everything,
        &probe(&s, port),
    )
    .await;
    assert_eq!(probed(&ro), "ws=no git=no out=no tmp=yes net=yes");
    let off_net = run_declared(
        &s.session("read-only", "off"),
        &everything,
        &probe(&s, port),
    )
    .await;
    assert_eq!(probed(&off_net), "ws=no git=no out=no tmp=yes net=no");
    // off: the seed's behaviour, whatever is declared; no sandbox in the answer.
    let off = run_declared(&s.session("off", "declared"), &["NONE"], &probe(&s, port)).await;
    assert_eq!(probed(&off), "ws=yes git=yes out=yes tmp=yes net=yes");
    assert!(off.process.as_ref().expect("p").sandbox.is_none());
}

#[tokio::test]
async fn writes_cannot_leave_the_workspace_by_symlink_rename_link_or_the_state_dir() {
    for namespaces in [true, false] {
        let s = Sandboxed::start(namespaces).await;
        let c = s.session("declared", "declared");
        std::fs::write(s.outside.join("kept"), "outside\n").expect("outside file");
        std::fs::create_dir_all(s.ws.join("sub")).expect("sub");
        let state = s.d.state.canonicalize().expect("state");
        let script = format!(
            "cd {ws}; ln -s {out} link; \
             if (: > link/through) 2>/dev/null; then echo symlink=yes; else echo symlink=no; fi; \
             echo x > mine; if mv mine {out}/moved 2>/dev/null; then echo rename-out=yes; else echo rename-out=no; fi; \
             if mv {out}/kept sub/ 2>/dev/null; then echo rename-in=yes; else echo rename-in=no; fi; \
             if ln {out}/kept hard 2>/dev/null; then echo hardlink=yes; else echo hardlink=no; fi; \
             if (: > {state}/planted) 2>/dev/null; then echo state=yes; else echo state=no; fi",
            ws = s.ws.display(),
            out = s.outside.display(),
            state = state.display(),
        );
        let r = run_declared(&c, &["MODIFIES_WORKSPACE_FILES", "DELETES_FILES"], &script).await;
        assert_eq!(
            probed(&r),
            "symlink=no rename-out=no rename-in=no hardlink=no state=no",
            "namespaces {namespaces}: {}",
            String::from_utf8_lossy(&r.output.expect("o").stderr)
        );
        assert_eq!(
            std::fs::read_to_string(s.outside.join("kept")).expect("kept"),
            "outside\n",
            "the outside file is untouched and still there"
        );
        assert!(!s.outside.join("through").exists() && !state.join("planted").exists());
    }
}

#[tokio::test]
async fn with_namespaces_other_processes_spools_and_holder_sockets_are_not_even_visible() {
    let s = Sandboxed::start(true).await;
    let plain = s.d.session();
    let other = plain
        .spawn_bg(&format!("exec {} ready-sleep 600", testbin()))
        .await;
    plain.ready_pids(&other, 1).await;
    let state = s.d.state.canonicalize().expect("state");
    let c = s.session("declared", "declared");
    let r = run_declared(
        &c,
        &["NONE"],
        &format!(
            "ls {state}/procs; {bin} unix-read {state}/procs/{other}/holder.sock",
            state = state.display(),
            bin = testbin()
        ),
    )
    .await;
    let out = stdout(&r);
    assert!(
        !out.contains(&other),
        "another process's directory is hidden: {out}"
    );
    assert!(
        out.contains("refused:"),
        "its holder socket is not there: {out}"
    );
}

#[tokio::test]
async fn without_namespaces_a_holder_will_not_talk_to_a_sandboxed_process() {
    let s = Sandboxed::start(false).await;
    let plain = s.d.session();
    let other = plain.spawn_bg("cat").await;
    let state = s.d.state.canonicalize().expect("state");
    let c = s.session("declared", "declared");
    let r = run_declared(
        &c,
        &["NONE"],
        &format!(
            "{bin} unix-read {state}/procs/{other}/holder.sock",
            state = state.display(),
            bin = testbin()
        ),
    )
    .await;
    assert_eq!(stdout(&r).trim(), "read 0", "the holder said nothing to it");
    // And it still serves its daemon: the process takes input and ends normally.
    plain
        .write(&other, b"still mine\n", true)
        .await
        .expect("write");
    let ended = plain.wait_exit(&other).await;
    let out = plain.read_all(&other, 1 << 16).await.0;
    assert_eq!(out, b"still mine\n", "{ended:?}");
}

#[tokio::test]
async fn a_setsid_nohup_grandchild_stays_inside_after_its_shell_exited() {
    let s = Sandboxed::start(true).await;
    let c = s.session("declared", "declared");
    let gate = s.ws.join("gate");
    std::fs::write(&gate, "").expect("gate");
    let late = s.ws.join("late.rc");
    let script = format!(
        "setsid nohup sh -c 'while [ -e {gate} ]; do sleep 0.02; done; \
         (: > {out}/late) 2>/dev/null; echo $? > {late}' >/dev/null 2>&1 & exit 0",
        gate = gate.display(),
        out = s.outside.display(),
        late = late.display(),
    );
    let r = run_declared(&c, &["MODIFIES_WORKSPACE_FILES"], &script).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
    // The shell has exited; the grandchild only now tries.
    std::fs::remove_file(&gate).expect("open the gate");
    let rc = eventually_blocking("the grandchild's result", || {
        std::fs::read_to_string(&late)
            .ok()
            .filter(|t| !t.is_empty())
    });
    assert_ne!(rc.trim(), "0", "the write outside failed");
    assert!(!s.outside.join("late").exists());
}

#[tokio::test]
async fn network_off_holds_back_tcp_v4_v6_and_udp_and_on_lets_them_through() {
    for namespaces in [true, false] {
        let s = Sandboxed::start(namespaces).await;
        let v4 = tcp_listener("127.0.0.1");
        let v6 = tcp_listener("::1");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let udp_port = udp.local_addr().expect("addr").port();
        udp.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        let script = format!(
            "{bin} tcp-connect 127.0.0.1 {v4}; {bin} tcp-connect ::1 {v6}; \
             {bin} udp-send 127.0.0.1 {udp_port} sandboxed",
            bin = testbin()
        );
        let off = run_declared(&s.session("declared", "declared"), &["NONE"], &script).await;
        let out = stdout(&off);
        assert!(!out.contains("connected"), "namespaces {namespaces}: {out}");
        // The datagram, if one could be sent at all, went nowhere: the first one the host gets
        // is the one sent after it, unsandboxed.
        let marker = run(std::process::Command::new(testbin()).args([
            "udp-send",
            "127.0.0.1",
            &udp_port.to_string(),
            "unsandboxed",
        ]));
        assert!(marker.status.success());
        let mut buf = [0u8; 64];
        let n = udp.recv(&mut buf).expect("a datagram");
        assert_eq!(&buf[..n], b"unsandboxed", "namespaces {namespaces}: {out}");
        if !namespaces {
            // No network namespace: seccomp refuses the sockets themselves.
            assert!(out.contains("Operation not permitted"), "{out}");
        }
        let on = run_declared(
            &s.session("declared", "declared"),
            &["MAKES_NETWORK_REQUESTS"],
            &script,
        )
        .await;
        assert_eq!(
            stdout(&on).matches("connected").count(),
            2,
            "{}",
            stdout(&on)
        );
        let n = udp.recv(&mut buf).expect("the sandboxed datagram");
        assert_eq!(&buf[..n], b"sandboxed");
    }
}

/// A plain HTTP server on the host's loopback that answers every request `200 hello`.
fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut req = [0u8; 4096];
                let _ = s.read(&mut req);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
                );
            });
        }
    });
    port
}

async fn an_allowlist_lets_its_hosts_through(namespaces: bool) {
    let s = Sandboxed::start(namespaces).await;
    let port = http_server();
    let c = s.session("declared", "allow:localhost");
    let bin = testbin();
    let r = run_declared(
        &c,
        &["MAKES_NETWORK_REQUESTS"],
        &format!(
            "{bin} proxy-get http://localhost:{port}/; echo =====; \
             {bin} proxy-connect localhost:{port}; echo =====; \
             {bin} proxy-get http://127.0.0.1:{port}/; echo =====; \
             {bin} tcp-connect 127.0.0.1 {port}; {bin} udp-send 127.0.0.1 {port}"
        ),
    )
    .await;
    let out = stdout(&r);
    let sb = sandbox_of(&r);
    assert_eq!(
        (sb.files.as_str(), sb.network.as_str()),
        ("read-only", "allowlist")
    );
    assert_eq!(sb.hosts, vec!["localhost".to_string()]);
    let mut answers = out.split("=====\n");
    let allowed = answers.next().unwrap_or_default();
    assert!(
        allowed.starts_with("HTTP/1.1 200") && allowed.contains("hello"),
        "{out}"
    );
    let tunnel = answers.next().unwrap_or_default();
    assert!(
        tunnel.starts_with("HTTP/1.1 200"),
        "CONNECT to an allowed host: {out}"
    );
    let refused = answers.next().unwrap_or_default();
    assert!(
        refused.starts_with("HTTP/1.1 403"),
        "an IP the list does not name: {out}"
    );
    assert!(
        refused.contains("127.0.0.1 is not in this command's network allowlist"),
        "{out}"
    );
    // Around the proxy: nothing reaches the host. Without a network namespace even the UDP
    // socket is refused; inside one, a datagram can only go to the command's own loopback.
    let rest = answers.collect::<Vec<_>>().join("\n");
    assert!(!rest.contains("connected"), "{out}");
    if !namespaces {
        assert!(!rest.contains("sent"), "{out}");
    }
    // The failed command's answer names the refused host.
    let failed = run_declared(
        &c,
        &["MAKES_NETWORK_REQUESTS"],
        &format!("{bin} proxy-get http://127.0.0.1:{port}/; exit 7"),
    )
    .await;
    let denied = sandbox_of(&failed).denied;
    assert!(denied.contains("allowlist refused 127.0.0.1"), "{denied}");
}

#[tokio::test]
async fn an_allowlist_lets_through_the_hosts_it_names_and_refuses_the_rest() {
    an_allowlist_lets_its_hosts_through(true).await;
}

#[tokio::test]
async fn an_allowlist_holds_without_namespaces_through_landlocks_port_rule() {
    an_allowlist_lets_its_hosts_through(false).await;
}

#[tokio::test]
async fn an_allowlisted_process_keeps_its_proxy_across_a_daemon_crash() {
    let mut s = Sandboxed::start(true).await;
    let port = http_server();
    let c = s.session("declared", "allow:localhost");
    let gate = s.ws.join("gate");
    std::fs::write(&gate, "").expect("gate");
    let r = c
        .exec_with(pb::ExecRequest {
            side_effects: vec!["MAKES_NETWORK_REQUESTS".into()],
            yield_ms: Some(0),
            ..exec_req(&format!(
                "while [ -e {gate} ]; do sleep 0.02; done; {bin} proxy-get http://localhost:{port}/",
                gate = gate.display(),
                bin = testbin()
            ))
        })
        .await;
    let id = r.process.expect("process").process_id;
    s.d.kill9();
    s.d.spawn().await;
    std::fs::remove_file(&gate).expect("open the gate");
    let c = s.d.session();
    c.wait_exit(&id).await;
    let out = String::from_utf8_lossy(&c.read_all(&id, 1 << 16).await.0).into_owned();
    assert!(out.contains("200 OK") && out.contains("hello"), "{out}");
}

#[tokio::test]
async fn a_sandboxed_command_gets_no_more_through_yieldctl_than_its_own_sandbox() {
    let s = Sandboxed::start(true).await;
    let plain = s.d.session();
    let repl = plain.spawn_bg("cat").await;
    let c = s.session("declared", "declared");
    let yieldctl = bin("yieldctl");
    let inner = |args: &str| {
        format!(
            "YIELDSHELL_SOCKET={sock} YIELDSHELL_NO_AUTOSTART=1 {yieldctl} {args}",
            sock = s.d.socket.display(),
            yieldctl = yieldctl.display()
        )
    };
    let script = format!(
        "{exec}; echo exec=$?; {write}; echo write=$?; {stop}; echo stop=$?",
        exec = inner(&format!(
            "--json exec --sandbox off --side-effects INSTALLS_DEPENDENCIES -- ': > {}/escaped'",
            s.outside.display()
        )),
        write = inner(&format!("write {repl} 'injected'")),
        stop = inner("daemon stop"),
    );
    let r = run_declared(&c, &["NONE"], &script).await;
    let out = stdout(&r);
    let err = String::from_utf8_lossy(&r.output.as_ref().expect("o").stderr).into_owned();
    assert!(!s.outside.join("escaped").exists(), "{out}{err}");
    let first = out.lines().next().unwrap_or_default();
    let inner_answer: serde_json::Value = serde_json::from_str(first).expect("inner exec JSON");
    assert_eq!(
        inner_answer["sandbox"]["files"], "read-only",
        "{inner_answer}"
    );
    assert_eq!(inner_answer["sandbox"]["network"], "off", "{inner_answer}");
    assert!(
        out.contains("write=1") && out.contains("stop=1"),
        "{out}{err}"
    );
    assert!(err.contains("sandbox"), "{err}");
    // The daemon is still up and the unsandboxed process got nothing.
    assert!(!s.d.status().await.daemon_version.is_empty());
    plain.write(&repl, b"", true).await.expect("close stdin");
    plain.wait_exit(&repl).await;
    assert!(plain.read_all(&repl, 1 << 16).await.0.is_empty());
}

#[tokio::test]
async fn yieldshelld_refuses_to_run_inside_a_sandbox() {
    let s = Sandboxed::start(true).await;
    let c = s.session("declared", "declared");
    // Files anywhere, so only the sandbox itself stands in its way.
    let r = run_declared(
        &c,
        &["MODIFIES_OUTSIDE_WORKSPACE"],
        &format!(
            "{} --socket {ws}/d.sock --state-dir {ws}/state; echo rc=$?",
            bin("yieldshelld").display(),
            ws = s.ws.display()
        ),
    )
    .await;
    let out = stdout(&r);
    let err = String::from_utf8_lossy(&r.output.expect("o").stderr).into_owned();
    assert!(!out.contains("rc=0"), "{out}");
    assert!(
        err.contains("cannot run inside a YieldShell sandbox"),
        "{err}"
    );
}

#[tokio::test]
async fn without_namespaces_a_workspace_holding_the_daemons_state_is_refused() {
    let d = TestDaemon::start_with_env(&[NO_NAMESPACES]).await;
    // The default cwd is the daemon's own directory, which holds its state and socket.
    let c = d.session_with(&[("YIELDSHELL_SANDBOX", "workspace-write")]);
    let r = run_declared(&c, &["NONE"], "echo ran").await;
    assert_eq!(r.status, pb::ExecStatus::FailedToStart as i32);
    assert_eq!(r.error_kind, "sandbox_unavailable");
    assert!(
        r.error.contains("state directory") && r.error.contains("did not run"),
        "{}",
        r.error
    );
    // With namespaces the same workspace is fine: the state is hidden from the command.
    let d = TestDaemon::start().await;
    let c = d.session_with(&[("YIELDSHELL_SANDBOX", "workspace-write")]);
    let r = run_declared(&c, &["NONE"], &format!("ls {}", d.state.display())).await;
    assert_eq!(r.status, pb::ExecStatus::Completed as i32, "{}", r.error);
    assert!(stdout(&r).lines().all(|l| l == "procs"), "{}", stdout(&r));
}

#[tokio::test]
async fn a_terminal_process_is_sandboxed_like_a_piped_one() {
    let s = Sandboxed::start(true).await;
    let c = s.session("declared", "declared");
    let r = c
        .exec_with(pb::ExecRequest {
            side_effects: vec!["NONE".into()],
            tty: true,
            yield_ms: Some(TIMEOUT.as_millis() as u64),
            ..exec_req(&format!(
                "if (: > {}/probe) 2>/dev/null; then echo ws=yes; else echo ws=no; fi; \
                 echo prompt > /dev/tty && echo tty=yes",
                s.ws.display()
            ))
        })
        .await;
    let out = stdout(&r);
    assert!(out.contains("ws=no") && out.contains("tty=yes"), "{out}");
    assert_eq!(sandbox_of(&r).files, "read-only");
}

#[tokio::test]
async fn yieldctl_exec_sandbox_flags_and_ps_show_it() {
    let s = Sandboxed::start(true).await;
    // An undeclared write, from the workspace: `--json` first, then as a person runs it.
    let write_undeclared = |format: &[&str]| {
        run(s
            .d
            .yieldctl()
            .current_dir(&s.ws)
            .args(format)
            .args([
                "exec",
                "--sandbox",
                "declared",
                "--side-effects",
                "NONE",
                "--",
            ])
            .arg("echo hi > out.txt"))
    };
    let answer = json(&write_undeclared(&["--json"]));
    assert_eq!(answer["sandbox"]["files"], "read-only", "{answer}");
    let denied = answer["sandbox"]["denied"].as_str().unwrap_or_default();
    assert!(
        denied.contains("out.txt") && denied.contains("MODIFIES_WORKSPACE_FILES"),
        "{answer}"
    );
    let ps = json(&run(s.d.yieldctl().args(["--json", "ps"])));
    let listed = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == answer["process_id"])
        .cloned()
        .expect("listed");
    assert_eq!(listed["sandbox"]["network"], "off", "{listed}");
    let table = String::from_utf8_lossy(&run(s.d.yieldctl().args(["ps"])).stdout).into_owned();
    assert!(table.contains("read-only"), "{table}");

    // A person running it without --json reads the same denial, on stderr after the output.
    let human = write_undeclared(&[]);
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(
        stderr.contains("[yieldctl: sandbox: ")
            && stderr.contains("out.txt")
            && stderr.contains("MODIFIES_WORKSPACE_FILES"),
        "{stderr}"
    );
    assert_ne!(human.status.code(), Some(0), "{stderr}");
}

#[tokio::test]
async fn an_agents_none_command_fails_to_write_and_the_right_declaration_succeeds() {
    let s = Sandboxed::start(true).await;
    let ws = s.ws.display().to_string();
    let mcp = Mcp::start(
        &s.d,
        &[
            ("YIELDSHELL_SANDBOX", "declared"),
            ("YIELDSHELL_DEFAULT_CWD", &ws),
        ],
    )
    .await;
    let denied = body(
        &mcp.call(
            "exec",
            json!({"command": "echo 1 > notes.txt", "side_effects": ["NONE"]}),
        )
        .await,
    );
    assert_eq!(denied["sandbox"]["files"], "read-only", "{denied}");
    assert!(
        denied["sandbox"]["denied"]
            .as_str()
            .is_some_and(|d| d.contains("MODIFIES_WORKSPACE_FILES")),
        "{denied}"
    );
    let allowed = body(
        &mcp.call(
            "exec",
            json!({"command": "echo 1 > notes.txt && cat notes.txt",
                   "side_effects": ["MODIFIES_WORKSPACE_FILES"]}),
        )
        .await,
    );
    assert_eq!(allowed["exit_code"], 0, "{allowed}");
    assert_eq!(allowed["sandbox"]["files"], "workspace", "{allowed}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("notes.txt")).expect("notes"),
        "1\n"
    );
    mcp.close().await;
}

/// The directory the daemon keeps a process's files in.
fn process_dir(d: &TestDaemon, id: &str) -> PathBuf {
    d.state.join("procs").join(id)
}

#[tokio::test]
async fn the_private_temp_dir_goes_with_the_record() {
    let s = Sandboxed::start(true).await;
    let c = s.session("declared", "declared");
    let r = run_declared(&c, &["NONE"], "echo kept > \"$TMPDIR/x\"; echo $TMPDIR").await;
    let id = r.process.as_ref().expect("p").process_id.clone();
    let tmp = PathBuf::from(stdout(&r).trim());
    assert_eq!(
        tmp,
        process_dir(&s.d, &id)
            .canonicalize()
            .expect("dir")
            .join("tmp")
    );
    assert_eq!(std::fs::read_to_string(tmp.join("x")).expect("x"), "kept\n");
    let cleaned = run(s.d.yieldctl().args([
        "cleanup",
        "--completed-older-than-ms",
        "0",
        "--stopped-older-than-ms",
        "0",
    ]));
    assert!(cleaned.status.success(), "{cleaned:?}");
    eventually("the process directory removed", || async {
        (!Path::new(&tmp).exists()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_published_shell_servers_profile_runs_as_workspace_write_under_declared() {
    let s = Sandboxed::start(true).await;
    let ws = s.ws.display().to_string();
    let mcp = Mcp::start_profile(
        &s.d,
        "mcp-shell-server",
        &[
            ("ALLOW_COMMANDS", "sh"),
            ("YIELDSHELL_SANDBOX", "declared"),
            ("YIELDSHELL_DEFAULT_CWD", &ws),
        ],
    )
    .await;
    let script = format!(
        "if (: > {ws}/in) 2>/dev/null; then echo in=yes; else echo in=no; fi; \
         if (: > {out}/out) 2>/dev/null; then echo out=yes; else echo out=no; fi",
        out = s.outside.display()
    );
    let r = mcp
        .call(
            "shell_execute",
            json!({"command": ["sh", "-c", script], "directory": ws}),
        )
        .await;
    let text: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(text.contains("in=yes") && text.contains("out=no"), "{text}");
    mcp.close().await;
}
