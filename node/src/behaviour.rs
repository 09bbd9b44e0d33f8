//! The one composed libp2p behaviour, and the swarm built around it.

use std::time::Duration;

use anyhow::{Result, anyhow};
use libp2p::allow_block_list::{self, BlockedPeers};
use libp2p::identity::Keypair;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{StreamProtocol, Swarm, gossipsub, identify, kad, noise, ping, tcp, yamux};

use crate::scoring;
use crate::wire::MAX_MESSAGE_SIZE;

pub const IDENTIFY_PROTOCOL: &str = "/gpuchain/id/1.0.0";
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/gpuchain/kad/1.0.0");
/// Gossipsub mesh heartbeat. Shorter than the 1 s default so that a new node joins the mesh
/// quickly and lazy gossip repairs losses within a fraction of the provider heartbeat period.
pub const GOSSIP_HEARTBEAT: Duration = Duration::from_millis(200);
/// Bounded per-connection send queue of gossipsub.
pub const GOSSIP_QUEUE_LEN: usize = 2000;
/// How often Kademlia refreshes the routing table unprompted (libp2p's default). A node
/// that learns a new peer bootstraps within half a second anyway, so discovery does not wait
/// for this. A refresh asks every known peer for its neighbours. At 30 s (with the hellos,
/// also every 30 s then), sixteen nodes on one 2-core host refreshed all at once, as they
/// had started together: every process burned CPU for about 1.5 s and providers' heartbeats
/// went out up to 200 ms late every 30 s (`heartbeat_late`: 12 in 9 minutes of the soak).
/// With the refresh at 5 minutes and the hellos spread, 1 in the same 9 minutes.
pub const KAD_REFRESH: Duration = Duration::from_secs(5 * 60);
/// Connections stay open this long with nothing to do (gossipsub keeps mesh links busy).
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Gossipsub framing around the payload (signature, key, topic, seqno).
const GOSSIP_ENVELOPE_OVERHEAD: usize = 4096;

#[derive(NetworkBehaviour)]
pub struct Behaviour {
    pub gossipsub: gossipsub::Behaviour,
    pub kad: kad::Behaviour<kad::store::MemoryStore>,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    /// Each new connection's two hellos (`hello`), so a joining node does not make the whole
    /// mesh broadcast.
    pub hello: crate::hello::Behaviour,
    /// Peers this node refuses and disconnects: empty unless a testnet partitions it
    /// (`--test-partition-control`).
    pub blocked: allow_block_list::Behaviour<BlockedPeers>,
}

pub fn gossipsub_config() -> Result<gossipsub::Config> {
    gossipsub::ConfigBuilder::default()
        .heartbeat_interval(GOSSIP_HEARTBEAT)
        .validation_mode(gossipsub::ValidationMode::Strict)
        .validate_messages()
        .max_transmit_size(MAX_MESSAGE_SIZE + GOSSIP_ENVELOPE_OVERHEAD)
        .connection_handler_queue_len(GOSSIP_QUEUE_LEN)
        .build()
        .map_err(|e| anyhow!("gossipsub config: {e}"))
}

fn behaviour(key: &Keypair) -> Result<Behaviour> {
    let mut gossipsub = gossipsub::Behaviour::new(
        gossipsub::MessageAuthenticity::Signed(key.clone()),
        gossipsub_config()?,
    )
    .map_err(|e| anyhow!("gossipsub: {e}"))?;
    gossipsub
        .with_peer_score(scoring::peer_score_params(), scoring::thresholds())
        .map_err(|e| anyhow!("gossipsub scoring: {e}"))?;

    let peer_id = key.public().to_peer_id();
    let mut kad_config = kad::Config::new(KAD_PROTOCOL);
    kad_config.set_periodic_bootstrap_interval(Some(KAD_REFRESH));
    let mut kad =
        kad::Behaviour::with_config(peer_id, kad::store::MemoryStore::new(peer_id), kad_config);
    // Loopback and private-network nodes never get a confirmed external address, and in
    // client mode nobody would add them to a routing table.
    kad.set_mode(Some(kad::Mode::Server));

    let identify = identify::Behaviour::new(
        identify::Config::new(IDENTIFY_PROTOCOL.to_string(), key.public())
            .with_agent_version(format!("gpuchain/{}", env!("CARGO_PKG_VERSION"))),
    );
    Ok(Behaviour {
        gossipsub,
        kad,
        identify,
        ping: ping::Behaviour::default(),
        hello: crate::hello::behaviour(),
        blocked: allow_block_list::Behaviour::default(),
    })
}

pub fn build_swarm(key: Keypair) -> Result<Swarm<Behaviour>> {
    let swarm = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )?
        .with_quic()
        .with_behaviour(|key| behaviour(key).map_err(|e| e.into_boxed_dyn_error()))
        .map_err(|e| anyhow!("libp2p behaviour: {e}"))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(IDLE_CONNECTION_TIMEOUT))
        .build();
    Ok(swarm)
}
