//! Compiles `proto/` into Rust: prost messages, the tonic service, and proto3-JSON serde impls.
//!
//! protox is a pure-Rust protobuf compiler, so building needs no `protoc` on the machine.

use prost::Message;
use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=tokenscope");
    let fds = protox::compile(["tokenscope/v1/ingest.proto"], ["."])?;
    let descriptor_path = PathBuf::from(env::var("OUT_DIR")?).join("tokenscope_descriptor.bin");
    std::fs::write(&descriptor_path, fds.encode_to_vec())?;

    tonic_prost_build::configure()
        // Decodes from one contiguous buffer (see the module): native exports are mostly varints.
        .codec_path("crate::codec::SliceCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptor_path)?)?
        .build(&[".tokenscope.v1"])?;
    Ok(())
}
