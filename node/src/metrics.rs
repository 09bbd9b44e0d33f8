//! The node's Prometheus metrics, served as OpenMetrics text on the control API's `GET
//! /metrics`. Almost every series is moved by [`Metrics::observe`], which [`crate::events::emit`]
//! calls for every typed event, so the log and the metrics always count the same things.
//! Only what has no event of its own is counted at its source: gossip accepts (one per
//! message, too many to log), heartbeats sent, connected peers and blob bytes.
//!
//! The names are listed in node/README.md.

use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::events::NodeEvent;

/// What `/metrics` answers with: prometheus-client writes OpenMetrics 1.0 text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VoteLabels {
    vote: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GossipLabels {
    verdict: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

/// The last step seen, to time the next one: (job, epoch, step, when).
type LastStep = Option<(String, u64, u64, Instant)>;

pub struct Metrics {
    registry: Registry,
    steps: Counter,
    step_duration: Histogram,
    last_step: Mutex<LastStep>,
    heartbeats_sent: Counter,
    heartbeats_heard: Counter,
    detections: Counter,
    detection_latency: Histogram,
    votes: Family<VoteLabels, Counter>,
    transactions: Family<OutcomeLabels, Counter>,
    gossip: Family<GossipLabels, Counter>,
    peers: Gauge,
    blob_bytes: Family<DirectionLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gpuchain");
        let steps = Counter::default();
        registry.register(
            "steps",
            "Training steps this provider completed",
            steps.clone(),
        );
        // 10 ms .. ~82 s: a CPU step of a small model up to a large model on a slow card.
        let step_duration = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register_with_unit(
            "step_duration",
            "Time between consecutive training steps of one epoch",
            Unit::Seconds,
            step_duration.clone(),
        );
        let heartbeats_sent = Counter::default();
        registry.register(
            "heartbeats_sent",
            "Heartbeats this node published",
            heartbeats_sent.clone(),
        );
        let heartbeats_heard = Counter::default();
        registry.register(
            "heartbeats_heard",
            "Heartbeats of this client's jobs that it accepted",
            heartbeats_heard.clone(),
        );
        let detections = Counter::default();
        registry.register(
            "detections",
            "Providers this client declared lost",
            detections.clone(),
        );
        // 50 ms .. ~205 s: from a closed connection (fast) to a long heartbeat timeout.
        let detection_latency = Histogram::new(exponential_buckets(0.05, 2.0, 13));
        registry.register_with_unit(
            "detection_latency",
            "How long a lost provider had been silent when this client declared it lost",
            Unit::Seconds,
            detection_latency.clone(),
        );
        let votes = Family::<VoteLabels, Counter>::default();
        registry.register("votes", "Votes this verifier published", votes.clone());
        let transactions = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "transactions",
            "Escrow transactions this node sent, by outcome",
            transactions.clone(),
        );
        let gossip = Family::<GossipLabels, Counter>::default();
        registry.register(
            "gossip_messages",
            "Gossip messages validated, by verdict and the reason for an ignore or reject",
            gossip.clone(),
        );
        let peers = Gauge::default();
        registry.register("peers", "Peers connected now", peers.clone());
        let blob_bytes = Family::<DirectionLabels, Counter>::default();
        registry.register_with_unit(
            "blob",
            "Blob payload bytes fetched from peers (in) and served to them (out)",
            Unit::Bytes,
            blob_bytes.clone(),
        );
        // The series a dashboard sums over exist from the start, at zero.
        for vote in ["accept", "reject"] {
            let _ = votes.get_or_create(&VoteLabels { vote });
        }
        for outcome in ["mined", "failed"] {
            let _ = transactions.get_or_create(&OutcomeLabels { outcome });
        }
        for direction in ["in", "out"] {
            let _ = blob_bytes.get_or_create(&DirectionLabels { direction });
        }
        let _ = gossip.get_or_create(&GossipLabels {
            verdict: "accept",
            reason: String::new(),
        });
        Self {
            registry,
            steps,
            step_duration,
            last_step: Mutex::new(None),
            heartbeats_sent,
            heartbeats_heard,
            detections,
            detection_latency,
            votes,
            transactions,
            gossip,
            peers,
            blob_bytes,
        }
    }

    /// Moves the series an event counts. The one mapping from events to metrics.
    pub fn observe(&self, ev: &NodeEvent) {
        match ev {
            NodeEvent::Step {
                job_id,
                epoch,
                step,
                ..
            } => {
                self.steps.inc();
                let now = Instant::now();
                if let Ok(mut last) = self.last_step.lock() {
                    if let Some((j, e, s, at)) = last.as_ref()
                        && j == job_id
                        && e == epoch
                        && *s + 1 == *step
                    {
                        self.step_duration
                            .observe(now.duration_since(*at).as_secs_f64());
                    }
                    *last = Some((job_id.clone(), *epoch, *step, now));
                }
            }
            NodeEvent::Heartbeat { .. } => {
                self.heartbeats_heard.inc();
            }
            NodeEvent::ProviderLost { silent_for_ms, .. } => {
                self.detections.inc();
                self.detection_latency
                    .observe(*silent_for_ms as f64 / 1000.0);
            }
            NodeEvent::VotePublished { accept, .. } => {
                let vote = if *accept { "accept" } else { "reject" };
                self.votes.get_or_create(&VoteLabels { vote }).inc();
            }
            NodeEvent::TxMined { .. } => {
                self.transactions
                    .get_or_create(&OutcomeLabels { outcome: "mined" })
                    .inc();
            }
            NodeEvent::TxFailed { .. } => {
                self.transactions
                    .get_or_create(&OutcomeLabels { outcome: "failed" })
                    .inc();
            }
            NodeEvent::GossipIgnored { reason, .. } => {
                self.gossip_verdict("ignore", reason_label(reason));
            }
            NodeEvent::GossipRejected { reason, .. } => {
                self.gossip_verdict("reject", reason_label(reason));
            }
            _ => {}
        }
    }

    /// A gossip message accepted (accepts have no event: there is one per message).
    pub fn gossip_accepted(&self) {
        self.gossip_verdict("accept", "");
    }

    fn gossip_verdict(&self, verdict: &'static str, reason: &str) {
        self.gossip
            .get_or_create(&GossipLabels {
                verdict,
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn heartbeat_sent(&self) {
        self.heartbeats_sent.inc();
    }

    pub fn set_peers(&self, n: usize) {
        self.peers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn blob_bytes_in(&self, n: u64) {
        self.blob_bytes
            .get_or_create(&DirectionLabels { direction: "in" })
            .inc_by(n);
    }

    pub fn blob_bytes_out(&self, n: u64) {
        self.blob_bytes
            .get_or_create(&DirectionLabels { direction: "out" })
            .inc_by(n);
    }

    /// Every series as OpenMetrics text (ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A bounded label for a verdict's reason: the leading identifier (the protocol's reason
/// names, `StaleEpoch`, `BadSignature`, and the node's own, `WrongTopic: …`). Reasons are
/// free text after it (peer ids, topics); as a label they would make a series per peer.
pub fn reason_label(reason: &str) -> &str {
    let end = reason
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(reason.len());
    match &reason[..end] {
        r if r.is_empty() || r.len() > 40 => "other",
        r => r,
    }
}

/// The node's metrics: process-wide because their one writer, [`crate::events::emit`], is a
/// free function called from the event loop, the role runtime, training threads and blob
/// tasks alike; threading a handle through all of them would change every one of those
/// signatures for no gain, as a process runs exactly one node.
static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);

pub fn global() -> &'static Metrics {
    &GLOBAL
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name` whose labels include all of `labels`.
    fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).ok()?;
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .and_then(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => Some(v),
                _ => None,
            })
    }

    /// Every line is a comment the format knows or a sample a Prometheus parser reads.
    fn assert_parses(text: &str) {
        assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");
        for line in text.lines() {
            let known = ["# HELP ", "# TYPE ", "# UNIT ", "# EOF"]
                .iter()
                .any(|p| line.starts_with(p));
            assert!(
                known
                    || matches!(
                        prometheus_parse::LineInfo::parse(line),
                        prometheus_parse::LineInfo::Sample { .. }
                    ),
                "not Prometheus text: {line:?}"
            );
        }
    }

    fn step(step: u64) -> NodeEvent {
        NodeEvent::Step {
            job_id: "1".into(),
            epoch: 1,
            step,
            loss: 0.5,
        }
    }

    #[test]
    fn events_move_their_series() {
        let m = Metrics::new();
        let before = m.encode();
        assert_parses(&before);
        assert_eq!(sample(&before, "gpuchain_steps_total", &[]), Some(0.0));
        assert_eq!(
            sample(
                &before,
                "gpuchain_transactions_total",
                &[("outcome", "mined")]
            ),
            Some(0.0)
        );

        for s in 1..=3 {
            m.observe(&step(s));
        }
        m.observe(&NodeEvent::Heartbeat {
            job_id: "1".into(),
            epoch: 1,
            provider: "0xab".into(),
            seq: 1,
            step: 3,
            loss: 0.5,
            starved_ms: 0,
            checkpointing: false,
        });
        m.observe(&NodeEvent::ProviderLost {
            job_id: "1".into(),
            epoch: 1,
            provider: "0xab".into(),
            silent_for_ms: 1_500,
            reason: "lost".into(),
        });
        for accept in [true, true, false] {
            m.observe(&NodeEvent::VotePublished {
                job_id: "1".into(),
                epoch: 1,
                step: 10,
                accept,
                checkpoint: "0x01".into(),
            });
        }
        m.observe(&NodeEvent::TxMined {
            call: "createJob".into(),
            tx_hash: "0x01".into(),
            block: 3,
            gas_used: 1,
        });
        m.observe(&NodeEvent::TxFailed {
            tx: 2,
            reason: "reverted".into(),
        });
        m.observe(&NodeEvent::GossipRejected {
            peer: "p".into(),
            topic: "t".into(),
            reason: "WrongTopic: belongs on a, sent on b".into(),
        });
        m.observe(&NodeEvent::GossipIgnored {
            peer: "p".into(),
            topic: "t".into(),
            reason: "StaleEpoch".into(),
        });
        m.gossip_accepted();
        m.gossip_accepted();
        m.heartbeat_sent();
        m.set_peers(4);
        m.blob_bytes_in(100);
        m.blob_bytes_out(7);
        // An event with no series moves nothing (and does not panic).
        m.observe(&NodeEvent::Signal);

        let text = m.encode();
        assert_parses(&text);
        let get = |name, labels: &[(&str, &str)]| {
            sample(&text, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}:\n{text}"))
        };
        assert_eq!(get("gpuchain_steps_total", &[]), 3.0);
        assert_eq!(get("gpuchain_heartbeats_heard_total", &[]), 1.0);
        assert_eq!(get("gpuchain_heartbeats_sent_total", &[]), 1.0);
        assert_eq!(get("gpuchain_detections_total", &[]), 1.0);
        assert_eq!(get("gpuchain_votes_total", &[("vote", "accept")]), 2.0);
        assert_eq!(get("gpuchain_votes_total", &[("vote", "reject")]), 1.0);
        assert_eq!(
            get("gpuchain_transactions_total", &[("outcome", "mined")]),
            1.0
        );
        assert_eq!(
            get("gpuchain_transactions_total", &[("outcome", "failed")]),
            1.0
        );
        assert_eq!(
            get(
                "gpuchain_gossip_messages_total",
                &[("verdict", "reject"), ("reason", "WrongTopic")]
            ),
            1.0
        );
        assert_eq!(
            get(
                "gpuchain_gossip_messages_total",
                &[("verdict", "ignore"), ("reason", "StaleEpoch")]
            ),
            1.0
        );
        assert_eq!(
            get("gpuchain_gossip_messages_total", &[("verdict", "accept")]),
            2.0
        );
        assert_eq!(get("gpuchain_peers", &[]), 4.0);
        assert_eq!(
            get("gpuchain_blob_bytes_total", &[("direction", "in")]),
            100.0
        );
        assert_eq!(
            get("gpuchain_blob_bytes_total", &[("direction", "out")]),
            7.0
        );
        // Histograms: the 1.5 s silence counted once, below 1.6 s and not below 0.8 s; two
        // step intervals timed (steps 1→2, 2→3).
        assert!(
            text.contains("gpuchain_detection_latency_seconds_count 1\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuchain_detection_latency_seconds_sum 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuchain_detection_latency_seconds_bucket{le=\"0.8\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuchain_detection_latency_seconds_bucket{le=\"1.6\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("gpuchain_step_duration_seconds_count 2\n"),
            "{text}"
        );
    }

    #[test]
    fn a_step_is_timed_only_after_its_predecessor() {
        let m = Metrics::new();
        m.observe(&step(5));
        m.observe(&step(7)); // a gap: not one step's time
        m.observe(&NodeEvent::Step {
            job_id: "1".into(),
            epoch: 2,
            step: 8,
            loss: 0.1,
        }); // another epoch
        assert!(
            m.encode()
                .contains("gpuchain_step_duration_seconds_count 0\n")
        );
        assert!(m.encode().contains("gpuchain_steps_total 3\n"));
    }

    #[test]
    fn reasons_become_bounded_labels() {
        assert_eq!(reason_label("StaleEpoch"), "StaleEpoch");
        assert_eq!(
            reason_label("HelloPeerMismatch: NodeHello for another peer, signed by 12D3"),
            "HelloPeerMismatch"
        );
        assert_eq!(reason_label("belongs on x"), "belongs");
        assert_eq!(reason_label(": x"), "other");
        assert_eq!(reason_label(""), "other");
    }
}
