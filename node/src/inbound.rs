//! What the swarm hands the role machines: gossip that passed the stateless checks, held
//! by gossipsub until the machines' verdict comes back with its [`GossipTicket`], and lost
//! connections. Its own module so that the swarm and the roles both depend on it and not on
//! each other.

use gpuchain_protocol::Address;
use gpuchain_protocol::validation::Checked;
use libp2p::{PeerId, gossipsub};

/// Queue from the swarm to the role runtime. The swarm never waits on it: when full, a
/// message is dropped unjudged (gossip is lossy and the detector tolerates a lost heartbeat).
pub const INBOUND_QUEUE: usize = 4096;

/// A gossip message held back by gossipsub until the machines have judged it.
#[derive(Debug, Clone)]
pub struct GossipTicket {
    pub message_id: gossipsub::MessageId,
    pub propagation_source: PeerId,
    pub topic: String,
}

#[derive(Debug)]
pub enum Inbound {
    /// Checked by the gossip validator; the machines take it without checking again, and
    /// their combined verdict goes back to gossipsub with the ticket.
    Gossip {
        checked: Box<Checked>,
        ticket: GossipTicket,
    },
    /// The last connection to a peer that said hello with this address is gone.
    ConnectionClosed { address: Address },
    /// The round trip to a peer that said hello with this address.
    PathRtt {
        address: Address,
        rtt: std::time::Duration,
    },
}
