//! Five real node processes on loopback join through one bootstrap address, discover each
//! other, gossip reaches everyone, heartbeats flow, and SIGTERM stops a node cleanly.

use std::time::Duration;

use crate::common::{Node, start_mesh, wait_until};
use gpuchain_node::topics::{heartbeat_topic, job_topic};
use gpuchain_node::wire::{Heartbeat, Message};
use gpuchain_protocol::signing::{Sig65, SigningKey};
use gpuchain_protocol::types::{Address, U256};
use serde_json::json;

#[test]
fn five_nodes_mesh_gossip_and_heartbeats() {
    let root = tempfile::tempdir().expect("tmp");
    let mut nodes = start_mesh(root.path(), 5, &[]);

    // Everyone hears everyone's hello: gossip on the jobs topic reaches all nodes.
    wait_until("all hellos", Duration::from_secs(60), || {
        nodes.iter().all(|n| {
            nodes
                .iter()
                .filter(|m| m.peer_id != n.peer_id)
                .all(|m| n.knows_blobs_of(&m.peer_id))
        })
    });
    // Kademlia found peers beyond the bootstrap node.
    wait_until(
        "discovery beyond bootstrap",
        Duration::from_secs(30),
        || {
            nodes[1..]
                .iter()
                .all(|n| n.status()["connected_peers"].as_u64().unwrap_or(0) >= 2)
        },
    );

    // Every connection is pinged from its start: each connected peer's least round trip is
    // known (what a client raises that peer's liveness floor by).
    wait_until("round trips measured", Duration::from_secs(10), || {
        nodes.iter().all(|n| {
            n.peers()
                .iter()
                .filter(|p| p["connected"] == true)
                .all(|p| {
                    p["path_rtt_ms"]
                        .as_f64()
                        .is_some_and(|ms| ms > 0.0 && ms < 1000.0)
                })
        })
    });

    // A node that comes back learns every peer it connects to from the hello exchange that
    // opens each connection, and they learn it, with no round of gossip broadcasts (`hello`).
    nodes[4].restart();
    let back = nodes[4].peer_id.clone();
    wait_until(
        "direct hellos with the restarted node",
        Duration::from_secs(30),
        || {
            let others: Vec<&Node> = nodes.iter().filter(|n| n.peer_id != back).collect();
            let direct = |p: Option<serde_json::Value>| {
                p.is_some_and(|p| p["hellos_direct"].as_u64().unwrap_or(0) >= 1)
            };
            others.iter().all(|m| {
                nodes[4].knows_blobs_of(&m.peer_id)
                    && direct(nodes[4].peer(&m.peer_id))
                    && direct(m.peer(&back))
            })
        },
    );

    let topic = job_topic(U256::from(7));
    for n in &nodes {
        n.post_ok("/v1/subscribe", json!({ "topic": topic }));
        // Heartbeats have a topic of their own (a job's client is its one subscriber in a
        // real run; here everyone listens, to measure the mesh).
        n.post_ok(
            "/v1/subscribe",
            json!({ "topic": heartbeat_topic(U256::from(7)) }),
        );
    }
    // Give the new topic's mesh a couple of gossip heartbeats to form.
    wait_until("job topic mesh", Duration::from_secs(20), || {
        nodes.iter().all(|n| {
            n.status()["topics"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == topic.as_str()))
        })
    });
    std::thread::sleep(Duration::from_millis(800));

    // One published message reaches all four others.
    let msg = Message::Heartbeat(
        Heartbeat {
            job_id: U256::from(7),
            epoch: 3,
            provider: Address::ZERO,
            seq: 1,
            step: 4242,
            loss: 0.25,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(&SigningKey::from_seed(11)),
    );
    let data_hex = hex::encode(msg.encode());
    nodes[3].post_ok(
        "/v1/publish",
        json!({ "topic": heartbeat_topic(U256::from(7)), "data_hex": data_hex }),
    );
    wait_until(
        "published message everywhere",
        Duration::from_secs(20),
        || {
            nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != 3)
                .all(|(_, n)| {
                    n.get("/v1/messages")
                        .as_array()
                        .is_some_and(|v| v.iter().any(|m| m["data_hex"] == data_hex.as_str()))
                })
        },
    );

    // Heartbeats from node 2 at the default 100 ms period arrive at every other node.
    nodes[2].post_ok("/v1/heartbeat", json!({ "topic": topic }));
    wait_until("heartbeats everywhere", Duration::from_secs(30), || {
        nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .all(|(_, n)| n.get("/v1/heartbeats")["received"].as_u64().unwrap_or(0) >= 20)
    });
    for (i, n) in nodes.iter().enumerate().filter(|(i, _)| *i != 2) {
        let hb = n.get("/v1/heartbeats");
        let p50 = hb["p50_us"].as_u64().expect("p50");
        // Loopback gossip, even on a loaded 2-core machine, is far below a second.
        assert!(p50 < 1_000_000, "node{i} heartbeat p50 {p50} us");
    }
    let sent = nodes[2].status()["counters"]["heartbeats_sent"]
        .as_u64()
        .unwrap_or(0);
    assert!(sent >= 20, "heartbeats sent: {sent}");

    // SIGTERM: a clean exit with status 0.
    let status = nodes[4].terminate(Duration::from_secs(20));
    assert!(
        status.success(),
        "SIGTERM exit: {status}\n{}",
        nodes[4].log_tail()
    );
    assert!(!nodes[4].dir.join("api.addr").exists());
}
