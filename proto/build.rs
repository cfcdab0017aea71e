//! Compiles the control-plane `.proto` with protox (pure Rust), so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors = protox::compile(["yieldshell/v1/control.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .emit_rerun_if_changed(false)
        .compile_fds(descriptors)?;
    // The descriptor set carries no file names, so cargo must be told what to watch.
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
