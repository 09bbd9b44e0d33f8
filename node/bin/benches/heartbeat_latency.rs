//! Heartbeat gossip latency across node processes on loopback: several providers heartbeat
//! on their job topics at the default 100 ms period, every node subscribes to every job
//! topic, and receive-minus-send times are pooled from all nodes.
//! `cargo bench -p gpuchain-node --profile dev --bench heartbeat_latency`
//! GPUCHAIN_BENCH_NODES (default 16), GPUCHAIN_BENCH_PROVIDERS (4), GPUCHAIN_BENCH_SECS (10).

#[allow(dead_code)]
#[path = "../tests/it/common.rs"]
mod common;

use std::time::Duration;

use common::{start_mesh, wait_until};
use gpuchain_node::state::percentile;
use gpuchain_node::topics::heartbeat_topic;
use serde_json::json;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let n = env("GPUCHAIN_BENCH_NODES", 16);
    let providers = env("GPUCHAIN_BENCH_PROVIDERS", 4).min(n);
    let secs = env("GPUCHAIN_BENCH_SECS", 10);
    let root = tempfile::tempdir().expect("tmp");
    let nodes = start_mesh(root.path(), n, &[]);
    wait_until("every node connected", Duration::from_secs(120), || {
        nodes
            .iter()
            .all(|x| x.status()["connected_peers"].as_u64().unwrap_or(0) >= 1)
    });
    let topics: Vec<String> = (0..providers)
        .map(|i| heartbeat_topic(gpuchain_protocol::types::U256::from(100 + i)))
        .collect();
    for x in &nodes {
        for t in &topics {
            x.post_ok("/v1/subscribe", json!({ "topic": t }));
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    for (i, t) in topics.iter().enumerate() {
        nodes[n - 1 - i].post_ok("/v1/heartbeat", json!({ "topic": t }));
    }
    // Warm-up: meshes settle, then measure from a clean slate.
    std::thread::sleep(Duration::from_secs(3));
    let sent_before: u64 = nodes
        .iter()
        .map(|x| {
            x.status()["counters"]["heartbeats_sent"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    for x in &nodes {
        x.get("/v1/heartbeats?reset=true");
    }
    let received_before: u64 = nodes
        .iter()
        .map(|x| x.get("/v1/heartbeats")["received"].as_u64().unwrap_or(0))
        .sum();
    std::thread::sleep(Duration::from_secs(secs as u64));
    let mut all: Vec<u64> = Vec::new();
    let mut received = 0;
    for x in &nodes {
        let hb = x.get("/v1/heartbeats?raw=true");
        received += hb["received"].as_u64().unwrap_or(0);
        if let Some(v) = hb["latencies_us"].as_array() {
            all.extend(v.iter().filter_map(|x| x.as_u64()));
        }
    }
    let sent: u64 = nodes
        .iter()
        .map(|x| {
            x.status()["counters"]["heartbeats_sent"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum::<u64>()
        - sent_before;
    all.sort_unstable();
    let expected = sent * (n as u64 - 1);
    println!(
        "heartbeat_latency: {n} node processes, {providers} providers at 100 ms, {secs} s measured"
    );
    println!(
        "  samples {}  delivered {}/{} ({:.1} %)",
        all.len(),
        received - received_before,
        expected,
        100.0 * (received - received_before) as f64 / expected.max(1) as f64
    );
    let ms = |v: Option<u64>| v.map(|u| u as f64 / 1e3).unwrap_or(f64::NAN);
    println!(
        "  latency p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied())
    );
}
