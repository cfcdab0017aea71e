//! Does nothing: its presence makes cargo count this crate's build-dependencies, which ask for the
//! host dependencies' features the binaries' build scripts and proc macros want between them.

fn main() {}
