//! A live MCP session outlives its daemon (issue 11, item 4): after the daemon is stopped, the
//! next call of the same session starts a daemon again and succeeds — the failed connect never
//! delivered the request, so it is sent once more instead of failing with `daemon_unavailable`.

use serde_json::json;

use crate::helper::{TestDaemon, daemon_pids_for, eventually_blocking};
use crate::mcp::{Mcp, body, is_error};

#[tokio::test]
async fn the_first_call_after_a_daemon_restart_succeeds_in_the_same_session() {
    let d = TestDaemon::unstarted();
    let mcp = Mcp::start(&d, &[]).await;
    let first = mcp
        .call(
            "exec",
            json!({"command": "echo one", "side_effects": ["NONE"]}),
        )
        .await;
    assert_eq!(body(&first)["stdout"], "one\n", "{first:?}");
    let before = daemon_pids_for(&d.socket);
    assert_eq!(before.len(), 1, "the shim started one daemon");
    // A graceful stop, as a user would do it; the helper waits until the process is gone.
    d.stop_autostarted();
    eventually_blocking("the daemon to be gone", || {
        daemon_pids_for(&d.socket).is_empty().then_some(())
    });
    for (tool, args) in [
        ("ps", json!({})),
        (
            "exec",
            json!({"command": "echo two", "side_effects": ["NONE"]}),
        ),
    ] {
        let r = mcp.call(tool, args).await;
        assert!(!is_error(&r), "{tool} after the restart: {r:?}");
    }
    let after = daemon_pids_for(&d.socket);
    assert_eq!(after.len(), 1, "a daemon was started again");
    assert_ne!(after, before);
    mcp.close().await;
}
