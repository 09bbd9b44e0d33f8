//! The network model: per-message latency (log-normal), loss, partitions that heal, and
//! per-node bandwidth for blob transfers. Blob transfers do not contend with each other (a
//! checkpoint is a few MB against links of hundreds of Mbit/s; contention would matter only
//! for much larger models and is left out on purpose).

use crate::config::NetworkConfig;
use crate::queue::Millis;
use crate::rng::SimRng;

/// The largest latency `Network::latency_ms` can draw.
pub fn max_latency_ms(cfg: &NetworkConfig) -> Millis {
    (cfg.latency_median_ms * 20.0 + 1.0).round() as Millis
}

pub struct Network {
    cfg: NetworkConfig,
    /// Per node, Mbit/s.
    bandwidth: Vec<f64>,
    /// Per node: inside the current partition's minority side.
    cut: Vec<bool>,
    pub partitioned: bool,
    pub sent: u64,
    pub dropped: u64,
}

impl Network {
    pub fn new(cfg: NetworkConfig, nodes: usize, rng: &mut SimRng) -> Self {
        let bandwidth = (0..nodes)
            .map(|_| {
                rng.lognormal(cfg.bandwidth_median_mbps, cfg.bandwidth_sigma)
                    .max(1.0)
            })
            .collect();
        Network {
            cfg,
            bandwidth,
            cut: vec![false; nodes],
            partitioned: false,
            sent: 0,
            dropped: 0,
        }
    }

    pub fn latency_ms(&self, rng: &mut SimRng) -> Millis {
        let m = self.cfg.latency_median_ms;
        // Clamp the tail: a log-normal draw can be absurd, real stacks time out first.
        rng.lognormal(m, self.cfg.latency_sigma)
            .clamp(0.0, m * 20.0 + 1.0)
            .round() as Millis
    }

    pub fn reachable(&self, a: usize, b: usize) -> bool {
        !self.partitioned || self.cut.get(a) == self.cut.get(b)
    }

    /// When a gossip message sent now arrives, or `None` if it is lost. `faulty` is false
    /// once faults have stopped: no loss then.
    pub fn deliver(
        &mut self,
        from: usize,
        to: usize,
        rng: &mut SimRng,
        faulty: bool,
    ) -> Option<Millis> {
        self.sent += 1;
        if !self.reachable(from, to) || (faulty && rng.chance(self.cfg.loss)) {
            self.dropped += 1;
            return None;
        }
        Some(self.latency_ms(rng))
    }

    /// Duration of a blob transfer, or `None` when the two cannot reach each other.
    pub fn transfer_ms(
        &self,
        from: usize,
        to: usize,
        bytes: u64,
        rng: &mut SimRng,
    ) -> Option<Millis> {
        if !self.reachable(from, to) {
            return None;
        }
        let mbps = self.bandwidth[from].min(self.bandwidth[to]);
        let secs = bytes as f64 * 8.0 / (mbps * 1e6);
        Some(self.latency_ms(rng) * 2 + (secs * 1000.0).ceil() as Millis)
    }

    /// Cuts a random fraction of nodes off from the rest.
    pub fn start_partition(&mut self, rng: &mut SimRng) {
        for c in self.cut.iter_mut() {
            *c = rng.chance(self.cfg.partition_fraction);
        }
        self.partitioned = true;
    }

    pub fn heal(&mut self) {
        self.partitioned = false;
    }

    pub fn is_cut(&self, node: usize) -> bool {
        self.partitioned && self.cut.get(node).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Purpose, stream};

    #[test]
    fn partitions_drop_across_the_cut_and_heal() {
        let cfg = NetworkConfig {
            partition_fraction: 0.5,
            ..NetworkConfig::default()
        };
        let mut rng = stream(3, Purpose::Network, 0);
        let mut net = Network::new(cfg, 20, &mut rng);
        net.start_partition(&mut rng);
        let (a, b) = (0..20)
            .flat_map(|a| (0..20).map(move |b| (a, b)))
            .find(|&(a, b)| net.is_cut(a) != net.is_cut(b))
            .expect("some pair across the cut");
        assert_eq!(net.deliver(a, b, &mut rng, true), None);
        assert_eq!(net.transfer_ms(a, b, 1, &mut rng), None);
        net.heal();
        assert!(net.deliver(a, b, &mut rng, true).is_some());
    }

    #[test]
    fn transfer_time_grows_with_size() {
        let mut rng = stream(3, Purpose::Network, 0);
        let net = Network::new(
            NetworkConfig {
                latency_sigma: 0.0,
                bandwidth_sigma: 0.0,
                ..NetworkConfig::default()
            },
            2,
            &mut rng,
        );
        let small = net.transfer_ms(0, 1, 1 << 10, &mut rng).expect("reachable");
        let big = net
            .transfer_ms(0, 1, 100 << 20, &mut rng)
            .expect("reachable");
        // 100 MiB over 200 Mbit/s ≈ 4.2 s.
        assert!(big > small + 4000, "{small} {big}");
    }
}
