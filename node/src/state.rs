//! What the event loop remembers and reports: peers, recent messages, counters and
//! heartbeat latencies. Every collection here is bounded.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use libp2p::{Multiaddr, PeerId};
use serde::Serialize;

/// Most recent accepted gossip messages kept for the API.
pub const MESSAGE_RING: usize = 1024;
/// Heartbeat latency samples kept (per node, all topics).
pub const LATENCY_RING: usize = 200_000;
/// Peers remembered (connected or not); the oldest disconnected ones are forgotten first.
pub const MAX_PEERS_REMEMBERED: usize = 4096;

#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerInfo {
    pub peer_id: String,
    pub connected: bool,
    pub addrs: Vec<String>,
    pub agent: Option<String>,
    /// Gossipsub v1.1 score as this node sees it (None until scoring has seen the peer).
    pub score: Option<f64>,
    pub blob_endpoint: Option<String>,
    pub blob_addrs: Vec<SocketAddr>,
    pub roles: Vec<String>,
    pub eth_address: Option<String>,
    pub rejected_messages: u64,
    /// The least ping round trip since this connection opened, ms: what a client raises the
    /// peer's liveness floor by (None until the first ping).
    pub path_rtt_ms: Option<f64>,
    /// Hellos accepted from the peer by the direct exchange on a new connection, and by
    /// gossip (its first and its periodic ones).
    pub hellos_direct: u64,
    pub hellos_gossip: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReceivedMessage {
    pub seq: u64,
    pub topic: String,
    pub source: Option<String>,
    pub propagation_source: String,
    pub message_id: String,
    pub kind: String,
    pub size: usize,
    pub received_at_us: u64,
    pub data_hex: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    pub accepted: u64,
    pub ignored: u64,
    pub rejected: u64,
    pub published: u64,
    pub publish_failed: u64,
    pub heartbeats_sent: u64,
    pub heartbeats_received: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct HeartbeatStats {
    pub received: u64,
    pub samples: usize,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
    pub by_topic: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latencies_us: Option<Vec<u64>>,
}

#[derive(Debug, Default)]
pub struct PeerRecord {
    pub connections: u32,
    pub addrs: Vec<Multiaddr>,
    pub agent: Option<String>,
    pub blob_addrs: Vec<SocketAddr>,
    pub roles: Vec<String>,
    pub eth_address: Option<String>,
    pub rejected_messages: u64,
    pub last_seen: u64,
    /// The least round trip ping measured since the peer last connected: the path's, where
    /// a sample taken while either host was busy measures the host (the detector's adaptive
    /// margin is for jitter).
    pub path_rtt: Option<std::time::Duration>,
    pub hellos_direct: u64,
    pub hellos_gossip: u64,
}

#[derive(Debug, Default)]
pub struct NodeState {
    pub peers: HashMap<PeerId, PeerRecord>,
    pub messages: VecDeque<ReceivedMessage>,
    pub next_seq: u64,
    pub counters: Counters,
    pub latencies_us: VecDeque<u64>,
    pub hb_by_topic: BTreeMap<String, u64>,
}

impl NodeState {
    pub fn peer(&mut self, id: PeerId) -> &mut PeerRecord {
        if !self.peers.contains_key(&id) && self.peers.len() >= MAX_PEERS_REMEMBERED {
            self.forget_oldest_disconnected();
        }
        self.peers.entry(id).or_default()
    }

    fn forget_oldest_disconnected(&mut self) {
        let oldest = self
            .peers
            .iter()
            .filter(|(_, p)| p.connections == 0)
            .min_by_key(|(_, p)| p.last_seen)
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.peers.remove(&id);
        }
    }

    pub fn push_message(&mut self, mut m: ReceivedMessage) {
        m.seq = self.next_seq;
        self.next_seq += 1;
        if self.messages.len() >= MESSAGE_RING {
            self.messages.pop_front();
        }
        self.messages.push_back(m);
    }

    pub fn record_heartbeat(&mut self, topic: &str, latency_us: Option<u64>) {
        self.counters.heartbeats_received += 1;
        *self.hb_by_topic.entry(topic.to_string()).or_default() += 1;
        let Some(latency_us) = latency_us else { return };
        if self.latencies_us.len() >= LATENCY_RING {
            self.latencies_us.pop_front();
        }
        self.latencies_us.push_back(latency_us);
    }

    pub fn heartbeat_stats(&mut self, raw: bool, reset: bool) -> HeartbeatStats {
        let mut sorted: Vec<u64> = self.latencies_us.iter().copied().collect();
        sorted.sort_unstable();
        let stats = HeartbeatStats {
            received: self.counters.heartbeats_received,
            samples: sorted.len(),
            p50_us: percentile(&sorted, 0.50),
            p99_us: percentile(&sorted, 0.99),
            max_us: sorted.last().copied(),
            by_topic: self.hb_by_topic.clone(),
            latencies_us: raw.then(|| self.latencies_us.iter().copied().collect()),
        };
        if reset {
            self.latencies_us.clear();
        }
        stats
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7], 0.99), Some(7));
    }

    #[test]
    fn rings_stay_bounded() {
        let mut s = NodeState::default();
        for i in 0..(MESSAGE_RING + 10) {
            s.push_message(ReceivedMessage {
                seq: 0,
                topic: "t".into(),
                source: None,
                propagation_source: String::new(),
                message_id: i.to_string(),
                kind: "x".into(),
                size: 0,
                received_at_us: 0,
                data_hex: String::new(),
            });
        }
        assert_eq!(s.messages.len(), MESSAGE_RING);
        assert_eq!(
            s.messages.back().map(|m| m.seq),
            Some((MESSAGE_RING + 9) as u64)
        );
    }
}
