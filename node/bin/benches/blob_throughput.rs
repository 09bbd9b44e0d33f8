//! Blob transfer throughput between two node processes on loopback, beside a plain TCP copy
//! of the same size in the same run. `cargo bench -p gpuchain-node --profile dev --bench blob_throughput`
//! Size: GPUCHAIN_BENCH_MB (default 256).

#[allow(dead_code)]
#[path = "../tests/it/common.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{Node, random_file, wait_until};
use serde_json::json;

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn plain_tcp_copy(bytes: usize) -> Duration {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0usize;
        loop {
            let n = s.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut sent = 0;
    while sent < bytes {
        let n = chunk.len().min(bytes - sent);
        s.write_all(&chunk[..n]).expect("write");
        sent += n;
    }
    drop(s);
    let got = reader.join().expect("reader");
    assert_eq!(got, bytes);
    start.elapsed()
}

fn main() {
    let mb: usize = std::env::var("GPUCHAIN_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let bytes = mb << 20;
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let b = Node::start("B", &root.path().join("b"), Some(&a.tcp_addr), &[]);
    let file = a.dir.join("import").join("blob.bin");
    random_file(&file, bytes, 42);

    let t = Instant::now();
    let added = a.post_ok("/v1/blobs", json!({ "path": "blob.bin", "share": true }));
    let import = t.elapsed();
    let hash = added["hash"].as_str().expect("hash").to_string();
    wait_until("B hears A", Duration::from_secs(60), || {
        b.knows_blobs_of(&a.peer_id)
    });

    let t = Instant::now();
    let fetched = b.post_ok(
        "/v1/blobs/fetch",
        json!({ "hash": hash, "from": [a.peer_id] }),
    );
    let fetch = t.elapsed();
    assert_eq!(fetched["size"].as_u64(), Some(bytes as u64));

    let tcp = plain_tcp_copy(bytes);
    println!("blob_throughput: {mb} MiB on loopback");
    println!(
        "  import on A (hash + store): {:>8.1} ms  {:>6.2} GB/s",
        import.as_secs_f64() * 1e3,
        gbps(bytes, import)
    );
    println!(
        "  iroh-blobs fetch A -> B:    {:>8.1} ms  {:>6.2} GB/s  (verified, stored, tagged)",
        fetch.as_secs_f64() * 1e3,
        gbps(bytes, fetch)
    );
    println!(
        "  plain TCP copy:             {:>8.1} ms  {:>6.2} GB/s",
        tcp.as_secs_f64() * 1e3,
        gbps(bytes, tcp)
    );
}
