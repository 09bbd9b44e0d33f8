//! Gossipsub v1.1 peer-scoring parameters. Scores are what make garbage expensive: a peer
//! whose messages we Reject (undecodable, wrongly signed, off-topic) collects invalid-delivery
//! penalties (P4, squared), falls below the graylist threshold after a few messages, and is
//! then ignored until the penalty decays.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use libp2p::gossipsub::{PeerScoreParams, PeerScoreThresholds, TopicScoreParams};

/// Below this, we stop gossiping (IHAVE/IWANT) with the peer.
pub const GOSSIP_THRESHOLD: f64 = -10.0;
/// Below this, we do not publish our own messages to the peer.
pub const PUBLISH_THRESHOLD: f64 = -50.0;
/// Below this, every RPC from the peer is dropped unread.
pub const GRAYLIST_THRESHOLD: f64 = -80.0;
/// Peer exchange is only accepted from peers at least this good.
pub const ACCEPT_PX_THRESHOLD: f64 = 10.0;
/// Median mesh score below which we graft better peers opportunistically.
pub const OPPORTUNISTIC_GRAFT_THRESHOLD: f64 = 3.0;

/// Weight of one invalid (Rejected) message, counted squared: 1 message = -20,
/// 2 = -80 (graylisted), 3 = -180.
pub const INVALID_MESSAGE_WEIGHT: f64 = -20.0;
/// Per decay interval the invalid count keeps this share: about 5 minutes to halve.
pub const INVALID_MESSAGE_DECAY: f64 = 0.9977;
/// Reward for being first to deliver a message we accept, capped so it cannot buy off
/// many invalid messages.
pub const FIRST_DELIVERY_WEIGHT: f64 = 0.5;
pub const FIRST_DELIVERY_CAP: f64 = 20.0;
pub const FIRST_DELIVERY_DECAY: f64 = 0.99;
/// Small reward for time in our mesh (per second, capped at 10 points).
pub const TIME_IN_MESH_WEIGHT: f64 = 0.01;
pub const TIME_IN_MESH_CAP: f64 = 1000.0;
/// Protocol misbehaviour (broken promises, GRAFT during backoff), counted squared above
/// [`BEHAVIOUR_PENALTY_THRESHOLD`].
pub const BEHAVIOUR_PENALTY_WEIGHT: f64 = -10.0;
pub const BEHAVIOUR_PENALTY_DECAY: f64 = 0.99;
/// Misbehaviour counts up to this cost nothing. A node that crashes breaks the promises its
/// last gossip made (messages it advertised and never sent): about two counts a crash, seen
/// in the detection bench as a client's score of -36 to -39 for a provider killed once.
/// Counted from the first, a provider killed twice within a couple of minutes fell to -109
/// and -182, below the graylist: the client dropped its heartbeats unread, and every job it
/// was assigned afterwards failed it over at the 750 ms ceiling. Six counts (three crashes
/// within the decay's minute) are forgiven; a peer that breaks promises on purpose does so
/// every heartbeat and still crosses the graylist within seconds.
pub const BEHAVIOUR_PENALTY_THRESHOLD: f64 = 6.0;
/// More than this many peers from one IP address cost score (sybil resistance) -- except
/// loopback, where every local test node shares one address.
pub const IP_COLOCATION_THRESHOLD: f64 = 3.0;
pub const IP_COLOCATION_WEIGHT: f64 = -5.0;
pub const DECAY_INTERVAL: Duration = Duration::from_secs(1);

/// Mesh-delivery penalties (P3/P3b) stay off: job topics carry bursts (heartbeats of one
/// provider, then silence), and P3 would punish honest peers for a quiet topic.
pub fn topic_params() -> TopicScoreParams {
    TopicScoreParams {
        topic_weight: 1.0,
        time_in_mesh_weight: TIME_IN_MESH_WEIGHT,
        time_in_mesh_quantum: Duration::from_secs(1),
        time_in_mesh_cap: TIME_IN_MESH_CAP,
        first_message_deliveries_weight: FIRST_DELIVERY_WEIGHT,
        first_message_deliveries_decay: FIRST_DELIVERY_DECAY,
        first_message_deliveries_cap: FIRST_DELIVERY_CAP,
        mesh_message_deliveries_weight: 0.0,
        mesh_failure_penalty_weight: 0.0,
        invalid_message_deliveries_weight: INVALID_MESSAGE_WEIGHT,
        invalid_message_deliveries_decay: INVALID_MESSAGE_DECAY,
        ..TopicScoreParams::default()
    }
}

pub fn peer_score_params() -> PeerScoreParams {
    let whitelist: HashSet<IpAddr> = [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]
    .into_iter()
    .collect();
    PeerScoreParams {
        topic_score_cap: 100.0,
        app_specific_weight: 1.0,
        ip_colocation_factor_weight: IP_COLOCATION_WEIGHT,
        ip_colocation_factor_threshold: IP_COLOCATION_THRESHOLD,
        ip_colocation_factor_whitelist: whitelist,
        behaviour_penalty_weight: BEHAVIOUR_PENALTY_WEIGHT,
        behaviour_penalty_threshold: BEHAVIOUR_PENALTY_THRESHOLD,
        behaviour_penalty_decay: BEHAVIOUR_PENALTY_DECAY,
        decay_interval: DECAY_INTERVAL,
        decay_to_zero: 0.01,
        retain_score: Duration::from_secs(3600),
        ..PeerScoreParams::default()
    }
}

pub fn thresholds() -> PeerScoreThresholds {
    PeerScoreThresholds {
        gossip_threshold: GOSSIP_THRESHOLD,
        publish_threshold: PUBLISH_THRESHOLD,
        graylist_threshold: GRAYLIST_THRESHOLD,
        accept_px_threshold: ACCEPT_PX_THRESHOLD,
        opportunistic_graft_threshold: OPPORTUNISTIC_GRAFT_THRESHOLD,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_accepted_by_gossipsub() {
        assert!(peer_score_params().validate().is_ok());
        assert!(thresholds().validate().is_ok());
        assert!(topic_params().validate().is_ok());
        // Two rejected messages must be enough to graylist a peer with no good history.
        assert!(2.0_f64.powi(2) * INVALID_MESSAGE_WEIGHT <= GRAYLIST_THRESHOLD);
    }

    /// gossipsub's P7: `weight × (count - threshold)²` once the count passes the threshold.
    fn behaviour_score(count: f64) -> f64 {
        let excess = (count - BEHAVIOUR_PENALTY_THRESHOLD).max(0.0);
        BEHAVIOUR_PENALTY_WEIGHT * excess * excess
    }

    #[test]
    fn crashes_cost_nothing_but_broken_promises_on_purpose_graylist() {
        // Three crashes' worth of broken promises (about two each) cost nothing.
        assert_eq!(behaviour_score(6.0), 0.0);
        // The counts that graylisted a provider killed twice before the threshold.
        assert!(BEHAVIOUR_PENALTY_WEIGHT * 3.5_f64.powi(2) < GRAYLIST_THRESHOLD);
        assert!(behaviour_score(3.5) > GRAYLIST_THRESHOLD);
        // A peer breaking a promise every gossip heartbeat (one a second) is graylisted
        // within 10 s, decay included.
        let mut count = 0.0;
        for _ in 0..10 {
            count = count * BEHAVIOUR_PENALTY_DECAY + 1.0;
        }
        assert!(behaviour_score(count) <= GRAYLIST_THRESHOLD, "{count}");
    }
}
