//! A 64 MB checkpoint added on A is fetched by B, and refused by D, whose limit is 16 MiB; A
//! is killed with SIGKILL; C fetches it from B (which keeps serving what it fetched); A's data
//! dir then reopens with the blob.

use std::time::Duration;

use crate::common::{Node, random_file, wait_until};
use serde_json::json;

const SIZE: usize = 64 << 20;

#[test]
fn blob_survives_its_provider() {
    let root = tempfile::tempdir().expect("tmp");
    let b = Node::start("B", &root.path().join("b"), None, &[]);
    let mut a = Node::start("A", &root.path().join("a"), Some(&b.tcp_addr), &[]);
    let c = Node::start("C", &root.path().join("c"), Some(&b.tcp_addr), &[]);

    let file = a.dir.join("import").join("checkpoint.bin");
    random_file(&file, SIZE, 0x5eed);
    let expected = blake3::hash(&std::fs::read(&file).expect("read"));

    let added = a.post_ok(
        "/v1/blobs",
        json!({ "path": "checkpoint.bin", "share": true }),
    );
    let hash = added["hash"].as_str().expect("hash").to_string();
    // iroh-blobs' hash is plain BLAKE3 of the content: what the chain will name.
    assert_eq!(hash, expected.to_hex().as_str());
    assert_eq!(added["size"].as_u64(), Some(SIZE as u64));

    // Unknown content cannot be fetched: a clear error, not a hang or a crash.
    let missing = "00".repeat(32);
    wait_until("B hears A's hello", Duration::from_secs(30), || {
        b.knows_blobs_of(&a.peer_id)
    });
    let (code, err) = b.post(
        "/v1/blobs/fetch",
        json!({ "hash": missing, "from": [a.peer_id] }),
    );
    assert_ne!(code, 200, "fetching a blob nobody has: {err}");
    let (code, err) = b.post("/v1/blobs/fetch", json!({ "hash": "not-a-hash" }));
    assert_eq!(code, 400, "{err}");

    let fetched = b.post_ok(
        "/v1/blobs/fetch",
        json!({ "hash": hash, "from": [a.peer_id] }),
    );
    assert_eq!(fetched["size"].as_u64(), Some(SIZE as u64));
    assert_eq!(fetched["transferred"], true);
    eprintln!("B fetched 64 MB from A in {} ms", fetched["elapsed_ms"]);

    // A node that takes blobs of 16 MiB at most stops the download and says why, and keeps
    // no complete copy.
    let d = Node::start(
        "D",
        &root.path().join("d"),
        Some(&b.tcp_addr),
        &["--max-blob-mb", "16"],
    );
    wait_until("D hears A's hello", Duration::from_secs(30), || {
        d.knows_blobs_of(&a.peer_id)
    });
    let (code, err) = d.post(
        "/v1/blobs/fetch",
        json!({ "hash": hash, "from": [a.peer_id] }),
    );
    assert_ne!(code, 200, "a 64 MB blob past a 16 MiB limit: {err}");
    let said = err.to_string();
    assert!(
        said.contains("--max-blob-mb") && said.contains("16 MiB"),
        "{said}"
    );
    let (code, st) = d.request("GET", &format!("/v1/blobs/{hash}"), None, &[]);
    assert!(code == 404 || st["complete"] != true, "{code} {st}");

    a.kill();

    wait_until("C hears B's hello", Duration::from_secs(30), || {
        c.knows_blobs_of(&b.peer_id)
    });
    let fetched = c.post_ok(
        "/v1/blobs/fetch",
        json!({ "hash": hash, "export": "from-b.bin" }),
    );
    let out = c.dir.join("export").join("from-b.bin");
    assert_eq!(fetched["size"].as_u64(), Some(SIZE as u64));
    let got = std::fs::read(&out).expect("exported file");
    assert_eq!(got.len(), SIZE);
    assert_eq!(
        blake3::hash(&got),
        expected,
        "C's copy differs from A's original"
    );

    // After kill -9, A's data dir (keys, blob store, lock) reopens cleanly with the blob.
    let old_peer = a.peer_id.clone();
    a.restart();
    assert_eq!(a.peer_id, old_peer, "identity must persist across restarts");
    let st = a.get(&format!("/v1/blobs/{hash}"));
    assert_eq!(st["complete"], true, "{st}");
    assert_eq!(st["size"].as_u64(), Some(SIZE as u64));
}
