//! Remote hosts over OpenSSH, exactly as the README's recipes use them: an MCP client whose
//! server command is `ssh -T host mcp-yieldshell`, `yieldctl` against the remote daemon through
//! `ssh -L local.sock:remote.sock`, and a dropped connection that leaves the remote processes
//! running for the next connection to find.
//!
//! The "remote host" is a real `sshd` (Debian's `openssh-server`) listening on 127.0.0.1 only,
//! on a free high port, with its own config, a throwaway host key and user key in a temp dir, and
//! no other address ever contacted. Its sessions get `PATH` with this build's binaries first and
//! a private socket, state directory and config (`SetEnv` in the sshd config), so the remote
//! shim starts this build's daemon in a temp dir. Without `sshd`/`ssh` the tests fail naming the
//! packages (`.ci/test-extra` installs them); as root, sshd also needs `/run/sshd`, created here.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::helper::{
    TestDaemon, bin, eventually_blocking, json, marked_processes, require_tool, run,
    started_daemon_exe, testbin,
};
use crate::mcp::{Mcp, body};

/// The client config's name for the test host.
const HOST: &str = "yieldshell-test-host";

/// A real sshd on 127.0.0.1 whose sessions run this build's binaries against a private daemon
/// location (`remote`); stopped on drop, and the remote daemon with it.
struct Sshd {
    dir: tempfile::TempDir,
    child: Child,
    /// The `ssh -F` config naming [`HOST`], its port, user, key and pinned host key.
    client_config: PathBuf,
    /// Where the remote daemon lives (socket, state dir); stops it on drop.
    remote: TestDaemon,
}

/// `name` on PATH or in the sbin directories (not on a non-root user's PATH), or a failure
/// naming the package.
fn system_tool(name: &str, package: &str) -> PathBuf {
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| require_tool(name, package))
}

fn keygen(path: &Path) {
    let out = run(Command::new(require_tool("ssh-keygen", "openssh-client"))
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "yieldshell-test",
            "-f",
        ])
        .arg(path)
        .stdin(Stdio::null()));
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Sshd {
    fn start() -> Sshd {
        let sshd = system_tool("sshd", "openssh-server");
        require_tool("ssh", "openssh-client");
        if nix::unistd::geteuid().is_root() {
            // sshd refuses to start as root without its privilege-separation directory, which
            // Debian's service unit creates at boot; there is no service here.
            std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        }
        let remote = TestDaemon::unstarted();
        let dir = TestDaemon::new_dir();
        let p = |name: &str| dir.path().join(name);
        keygen(&p("host_key"));
        keygen(&p("user_key"));
        std::fs::copy(p("user_key.pub"), p("authorized_keys")).expect("authorized_keys");
        std::fs::write(p("remote-config.toml"), "").expect("remote config");
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .expect("getpwuid")
            .expect("a passwd entry for this uid")
            .name;
        let bin_dir = bin("mcp-yieldshell")
            .parent()
            .expect("bin dir")
            .to_path_buf();
        // A port that was free a moment ago; sshd fails loudly below if it was taken since.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = format!(
            "ListenAddress 127.0.0.1:{port}\n\
             HostKey {host_key}\n\
             PidFile none\n\
             AuthorizedKeysFile {authorized}\n\
             AllowUsers {user}\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\n\
             UsePAM no\n\
             StrictModes no\n\
             AllowStreamLocalForwarding yes\n\
             StreamLocalBindUnlink yes\n\
             LogLevel ERROR\n\
             SetEnv PATH={bin}:/usr/bin:/bin YIELDSHELL_SOCKET={socket} \
             YIELDSHELL_STATE_DIR={state} YIELDSHELL_CONFIG={remote_config}\n",
            host_key = p("host_key").display(),
            authorized = p("authorized_keys").display(),
            bin = bin_dir.display(),
            socket = remote.socket.display(),
            state = remote.state.display(),
            remote_config = p("remote-config.toml").display(),
        );
        std::fs::write(p("sshd_config"), config).expect("sshd_config");
        let host_pub = std::fs::read_to_string(p("host_key.pub")).expect("host key");
        std::fs::write(
            p("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", host_pub.trim()),
        )
        .expect("known_hosts");
        let client_config = p("ssh_config");
        std::fs::write(
            &client_config,
            format!(
                "Host {HOST}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  \
                 IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  \
                 StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
                key = p("user_key").display(),
                known = p("known_hosts").display(),
            ),
        )
        .expect("ssh_config");
        let log = std::fs::File::create(p("sshd.log")).expect("sshd log");
        // -D: stay in the foreground as our child; -e: log to stderr (the log file).
        let mut child = Command::new(&sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(p("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        eventually_blocking("sshd to listen on 127.0.0.1", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "sshd exited ({status}): {}",
                    std::fs::read_to_string(p("sshd.log")).unwrap_or_default()
                );
            }
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()
        });
        Sshd {
            dir,
            child,
            client_config,
            remote,
        }
    }

    /// `ssh -F <config>` with `args` (the host and command among them).
    fn ssh(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ssh");
        c.arg("-F").arg(&self.client_config).args(args);
        c
    }

    /// The README's MCP server command, `ssh -T host mcp-yieldshell`, for an MCP client; its
    /// ssh client's pid is written to `pid_file` (the shell execs ssh, keeping the pid).
    fn mcp_command(&self, pid_file: &Path) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$0"; exec ssh -F "$1" -T "$2" mcp-yieldshell"#)
            .arg(pid_file)
            .arg(&self.client_config)
            .arg(HOST)
            .kill_on_drop(true);
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed and reaped on drop (the port-forwarding ssh).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Live `mcp-yieldshell` processes serving the remote daemon's socket.
fn remote_shims(socket: &Path) -> Vec<u32> {
    let shim = bin("mcp-yieldshell");
    let needle = format!("YIELDSHELL_SOCKET={}", socket.display()).into_bytes();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == shim)
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == needle.as_slice()))
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs sshd and ssh (packages openssh-server, openssh-client): run .ci/test-extra"]
async fn an_mcp_client_whose_command_is_ssh_runs_commands_on_the_remote_host() {
    let sshd = Sshd::start();
    let mcp = Mcp::start_command(sshd.mcp_command(&sshd.dir.path().join("ssh.pid"))).await;
    let tools = mcp.tools().await;
    assert!(tools.iter().any(|t| t.name == "exec"), "{}", sshd.log());
    // The command runs in the ssh session's environment, passed on by the remote shim.
    let b = body(
        &mcp.call(
            "exec",
            json!({"command": "echo \"$SSH_CONNECTION\"", "side_effects": ["NONE"]}),
        )
        .await,
    );
    assert_eq!(b["status"], "completed", "{b}");
    let connection = b["stdout"].as_str().expect("stdout");
    assert!(connection.starts_with("127.0.0.1 "), "{connection:?}");
    // The remote shim started the remote daemon: this build's, in the private state dir.
    assert_eq!(
        started_daemon_exe(&sshd.remote).await,
        bin("mcp-yieldshell").with_file_name("yieldshelld")
    );
    mcp.close().await;
}

#[tokio::test]
#[ignore = "needs sshd and ssh (packages openssh-server, openssh-client): run .ci/test-extra"]
async fn a_dropped_connection_leaves_remote_processes_running_for_yieldctl_over_a_forwarded_socket()
{
    let sshd = Sshd::start();
    let pid_file = sshd.dir.path().join("ssh.pid");
    let first = Mcp::start_command(sshd.mcp_command(&pid_file)).await;
    let b = body(
        &first
            .call(
                "exec",
                // Until its `ready` line: testbin prints it after `sh` has exec'd it. While a
                // process is inside execve its /proc environ reads empty, and the check below
                // would find no marked process (seen once under CI's load).
                json!({
                    "command": format!("exec {} ready-sleep 600", testbin()),
                    "side_effects": ["NONE"],
                    "until": "^ready ",
                    "yield_ms": 60_000,
                    "name": "remote-devserver",
                }),
            )
            .await,
    );
    assert_eq!(b["status"], "backgrounded", "{b}");
    assert!(
        b["matched_line"]
            .as_str()
            .is_some_and(|l| l.starts_with("ready ")),
        "{b}"
    );
    let id = b["process_id"].as_str().expect("process_id").to_string();
    assert!(!remote_shims(&sshd.remote.socket).is_empty());

    // The connection drops: the local ssh client dies without a word to anyone.
    let ssh_pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("ssh pid")
        .trim()
        .parse()
        .expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ssh_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill ssh");
    drop(first);
    // sshd closes the session; the remote shim sees its stdin end and exits...
    eventually_blocking("the remote shim to exit", || {
        remote_shims(&sshd.remote.socket).is_empty().then_some(())
    });
    // ...and the remote process keeps running under the remote daemon.
    assert!(!marked_processes(&id).is_empty(), "the remote process died");

    // A new connection: the remote socket forwarded to a local one, `yieldctl` pointed at it.
    let local = sshd.dir.path().join("fwd.sock");
    let forward = format!("{}:{}", local.display(), sshd.remote.socket.display());
    let _forward = Killed(
        sshd.ssh(&["-N", "-o", "ExitOnForwardFailure=yes", "-L", &forward, HOST])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("ssh -L"),
    );
    eventually_blocking("the forwarded socket", || local.exists().then_some(()));
    let yieldctl = || {
        let mut c = Command::new(bin("yieldctl"));
        c.env("YIELDSHELL_SOCKET", &local)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .env_remove("YIELDSHELL_STATE_DIR")
            .stdin(Stdio::null());
        c
    };
    let ps = json(&run(yieldctl().args(["--json", "ps"])));
    let found = ps["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {ps}"))
        .clone();
    assert_eq!(found["status"], "running", "{found}");
    assert_eq!(found["name"], "remote-devserver", "{found}");

    // A new MCP connection finds it too: its instructions list the running processes.
    let second = Mcp::start_command(sshd.mcp_command(&pid_file)).await;
    assert!(
        second.instructions().contains(&id),
        "{}",
        second.instructions()
    );
    second.close().await;

    // And yieldctl stops it through the forward.
    let out = run(yieldctl().args(["--json", "stop", &id]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually_blocking("the remote process to stop", || {
        marked_processes(&id).is_empty().then_some(())
    });
}

#[tokio::test]
#[ignore = "needs tmux: run .ci/test-extra"]
async fn yieldctl_top_works_through_a_forwarded_socket_with_the_daemons_figures() {
    let sshd = Sshd::start();
    // A busy process on the "remote" host, started through the forward below.
    let local = sshd.dir.path().join("fwd.sock");
    let forward = format!("{}:{}", local.display(), sshd.remote.socket.display());
    // The remote daemon is started by a first remote command (the shim, over ssh -T, starts it).
    let pid_file = sshd.dir.path().join("ssh.pid");
    let mcp = Mcp::start_command(sshd.mcp_command(&pid_file)).await;
    let b = body(
        &mcp.call(
            "exec",
            json!({
                "command": "while :; do :; done",
                "side_effects": ["NONE"],
                "yield_ms": 0,
                "name": "remote-busy",
            }),
        )
        .await,
    );
    let id = b["process_id"].as_str().expect("process_id").to_string();
    let _forward = Killed(
        sshd.ssh(&["-N", "-o", "ExitOnForwardFailure=yes", "-L", &forward, HOST])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("ssh -L"),
    );
    eventually_blocking("the forwarded socket", || local.exists().then_some(()));
    // Only the socket: no state directory of the remote daemon's, figures from the daemon.
    let t = crate::helper::Tmux::open(
        sshd.dir.path(),
        140,
        40,
        &[
            ("YIELDSHELL_SOCKET", local.display().to_string()),
            ("YIELDSHELL_NO_AUTOSTART", "1".to_string()),
            ("RUST_BACKTRACE", "0".to_string()),
        ],
    );
    t.type_line("yieldctl top; echo \"top exited $?\"");
    let screen = t.wait_for("the remote process with its CPU figure", |s| {
        s.lines().any(|l| {
            l.starts_with(&id)
                && l.contains("remote-busy")
                && l.split_whitespace().any(|c| {
                    c.strip_suffix('%')
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| v > 1.0)
                })
        })
    });
    println!("{screen}");
    t.keys(&["s"]);
    t.wait_for("the question", |s| s.contains("and its whole tree?"));
    t.keys(&["y"]);
    t.wait_for("the stopped row", |s| {
        s.lines()
            .any(|l| l.starts_with(&id) && l.contains("stopped"))
    });
    t.keys(&["q"]);
    t.wait_for("the shell again", |s| s.contains("top exited 0"));
    t.assert_restored();
    mcp.close().await;
}
