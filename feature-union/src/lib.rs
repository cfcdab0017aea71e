//! No code: this crate only depends on shared dependencies with the union of the features the
//! YieldShell binaries use, so that building one binary alone (as `packaging/release.sh` does,
//! one package per cargo run) compiles each dependency the same way as building another, and
//! the runs reuse each other's artifacts. See this crate's `Cargo.toml` for the why.
