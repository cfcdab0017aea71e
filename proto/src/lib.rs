//! The YieldShell control-plane contract and the client code every YieldShell client shares.
//!
//! - [`pb`]: the gRPC messages and the `Control` service generated from
//!   `proto/yieldshell/v1/control.proto` (built with protox, so no `protoc` is needed).
//! - [`paths`]: where the daemon's socket, state and config live, and the private-directory
//!   checks both sides apply.
//! - [`ids`]: the accepted forms of process ids (client-chosen ids are lowercase UUIDs).
//! - [`errors`]: the `ys-error-kind` metadata that names each domain error, so clients branch on
//!   kinds instead of parsing messages.
//! - [`sandbox_settings`]: `YIELDSHELL_SANDBOX` and `YIELDSHELL_SANDBOX_NETWORK`, parsed once for
//!   clients and the daemon.
//! - [`session_config`]: a client session's environment, default cwd and policy, read from the
//!   `YIELDSHELL_*` variables and validated before anything is sent.
//! - [`client`]: connect, version handshake, race-safe daemon auto-start, and a [`client::Session`]
//!   that reopens itself after a daemon restart.
//! - [`deadlines`]: how long a client waits for each call before it calls the daemon
//!   unresponsive.
//! - [`instance_lock`]: the daemon's instance lock as clients read it (its pid; whether it has
//!   exited).
//! - [`status_names`]: the lowercase names of the status enums (`running`, `backgrounded`, …).
//! - `views` (feature `views`): the JSON objects the MCP tools return, with the hints they carry;
//!   `yieldctl --json` prints the same ones. Behind a feature: the daemon returns facts only and
//!   never uses them.

pub mod client;
pub mod deadlines;
pub mod errors;
pub mod ids;
pub mod instance_lock;
pub mod paths;
pub mod sandbox_settings;
pub mod session_config;
pub mod status_names;
#[cfg(feature = "views")]
pub mod views;

/// Generated gRPC types for `yieldshell.v1`.
#[allow(missing_docs, clippy::all)] // generated code: documented in the .proto file
pub mod pb {
    tonic::include_proto!("yieldshell.v1");
}

/// This build's version, reported in the handshake and in `Status`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Control-plane protocol version. Clients and daemons must agree on it; a change here is a
/// breaking change of `control.proto`.
pub const PROTOCOL_VERSION: u32 = 1;

/// What every binary's `--version` prints after its name: the workspace version (one for all
/// three binaries) and the protocol version beside it, so two installs can be compared at a
/// glance. A literal because clap needs a `&'static str`; a test keeps it equal to
/// [`PROTOCOL_VERSION`].
pub const VERSION_WITH_PROTOCOL: &str = concat!(env!("CARGO_PKG_VERSION"), " (protocol 1)");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_version_names_this_protocol() {
        assert_eq!(
            VERSION_WITH_PROTOCOL,
            format!("{VERSION} (protocol {PROTOCOL_VERSION})")
        );
    }
}
