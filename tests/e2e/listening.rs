//! Listening sockets (`listening` in `ps`, `read`, `wait` and `exec`; the PORTS column of
//! `yieldctl ps`): an agent that started a server learns where it listens without parsing its
//! log. The server here is a child of the shell, not the shell itself, as `npm run dev` makes it.
//! Linux only: the addresses come from `/proc`.
#![cfg(target_os = "linux")]

use serde_json::json;
use yieldshell_proto::pb;

use crate::helper::{TestDaemon, eventually, exec_req, json as parse_json, run};
use crate::mcp::{Mcp, body};

/// A shell whose child listens on an ephemeral loopback port, prints `port N`, and runs until
/// stopped; and one that never listens.
const SERVER: &str = "python3 -c \"import socket, time\n\
    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
    print('port', s.getsockname()[1], flush=True)\n\
    time.sleep(600)\" & wait";

#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn a_servers_address_is_in_ps_read_mcp_and_yieldctl_and_gone_once_stopped() {
    let d = TestDaemon::start().await;
    let c = d.session();
    let r = c
        .exec_with(pb::ExecRequest {
            // The number too: an unbuffered python (PYTHONUNBUFFERED) writes `port `, then the
            // number, and an unfinished line matches `until` as a prompt would.
            until: Some(r"^port \d+".into()),
            yield_ms: Some(30_000),
            ..exec_req(SERVER)
        })
        .await;
    assert_eq!(r.status, pb::ExecStatus::Backgrounded as i32, "{r:?}");
    let line = String::from_utf8(r.matched_line.clone()).expect("the port line");
    let port: u16 = line
        .trim()
        .strip_prefix("port ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let address = format!("127.0.0.1:{port}");
    let id = r.process.expect("process").process_id;
    let quiet = c.spawn_bg("sleep 600").await;

    // `ps` (gRPC): the server's tree listens there; the quiet process on nothing.
    let listed = eventually("the address in ps", || async {
        let ps = c.list(pb::Scope::All, false).await;
        let server = ps.iter().find(|p| p.process_id == id)?.clone();
        (server.listening == [address.clone()]).then_some(ps)
    })
    .await;
    let sleeper = listed
        .iter()
        .find(|p| p.process_id == quiet)
        .expect("the quiet one");
    assert!(sleeper.listening.is_empty(), "{sleeper:?}");
    // `read` says it too.
    let read = c
        .read(pb::ReadRequest {
            process_id: id.clone(),
            max_output_bytes: Some(1),
            ..Default::default()
        })
        .await
        .expect("read");
    assert_eq!(
        read.process.expect("process").listening,
        std::slice::from_ref(&address)
    );

    // The MCP tools: `ps` and `read` carry `listening`; a process listening on nothing has no
    // such field (lean answers).
    let mcp = Mcp::start(&d, &[]).await;
    let ps = body(&mcp.call("ps", json!({"scope": "all"})).await);
    let entries = ps["processes"].as_array().expect("processes");
    let entry = |pid: &str| entries.iter().find(|p| p["process_id"] == pid).cloned();
    assert_eq!(entry(&id).expect("server")["listening"], json!([address]));
    assert!(
        entry(&quiet).expect("sleeper").get("listening").is_none(),
        "{ps}"
    );
    let read = body(&mcp.call("read", json!({"process_id": id})).await);
    assert_eq!(read["listening"], json!([address]), "{read}");
    mcp.close().await;

    // `yieldctl ps`: a PORTS column with the port; `--json ps` with the address.
    let table =
        String::from_utf8(run(d.yieldctl().args(["ps", "--running"])).stdout).expect("utf-8");
    // The column starts where its title does (cells are padded; STARTED reads "0s ago").
    let ports_at = table
        .lines()
        .next()
        .and_then(|h| h.find("PORTS"))
        .expect("a PORTS column");
    let cell = |row_id: &str| {
        let row = table
            .lines()
            .find(|l| l.starts_with(row_id))
            .unwrap_or_else(|| panic!("{row_id} in {table}"));
        row[ports_at..]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(cell(&id), port.to_string(), "{table}");
    assert_eq!(cell(&quiet), "-", "{table}");
    let v = parse_json(&run(d.yieldctl().args(["--json", "ps"])));
    let server = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["process_id"] == id.as_str())
        .expect("server")
        .clone();
    assert_eq!(server["listening"], json!([address]));

    // Stopped, it listens nowhere, and the port is free.
    assert!(c.stop(&id, "SIGTERM", 2_000).await.expect("stop").stopped);
    let ended = c.list(pb::Scope::All, true).await;
    let ended = ended.iter().find(|p| p.process_id == id).expect("listed");
    assert!(ended.listening.is_empty(), "{ended:?}");
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free again");
    c.stop(&quiet, "SIGTERM", 2_000).await.expect("stop");
}

/// `yieldctl exec` says where a server it left in the background listens.
#[tokio::test]
#[ignore = "needs python3: run .ci/test-extra"]
async fn yieldctl_exec_names_the_address_of_a_server_it_leaves_running() {
    let d = TestDaemon::start().await;
    let out = run(d.yieldctl().args([
        "exec",
        "--until",
        r"^port \d+",
        "--yield-ms",
        "30000",
        "--",
        SERVER,
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let port = stdout
        .lines()
        .find_map(|l| l.strip_prefix("port "))
        .unwrap_or_else(|| panic!("{stdout:?}"))
        .trim()
        .to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains(&format!("listening on 127.0.0.1:{port}")),
        "{stderr}"
    );
    let v = parse_json(&run(d.yieldctl().args(["--json", "ps", "--running"])));
    for p in v["processes"].as_array().expect("processes") {
        let id = p["process_id"].as_str().expect("id");
        run(d.yieldctl().args(["stop", id]));
    }
}
