//! Integration tests against real `gpuchain node` processes on loopback. One test binary
//! (rather than one per file) so the heavy libp2p/iroh graph is linked once.

mod bad_input;
mod blobs;
#[allow(dead_code)]
mod common;
mod garbage_peer;
mod mesh;
mod security;
