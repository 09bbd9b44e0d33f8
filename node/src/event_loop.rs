//! The event loop: owns the swarm, feeds it commands from [`crate::handle::NodeHandle`],
//! validates gossip through the [`GossipValidator`] seam, keeps peer state, publishes
//! heartbeats and hellos. Blob transfers run beside it on the cloneable [`BlobNode`].
//!
//! Longer than our usual file on purpose: the swarm's events, the commands and the gossip
//! verdicts all act on the one `Swarm` and [`NodeState`] this loop owns, and keeping that
//! `&mut self` in one place is what makes the loop easy to reason about.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use futures::{FutureExt, StreamExt};
use iroh::EndpointId;
use libp2p::core::ConnectedPoint;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{Multiaddr, PeerId, Swarm, identify, kad, ping};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use crate::behaviour::{Behaviour, BehaviourEvent};
use crate::blobs::BlobNode;
use crate::config::{NodeConfig, Role};
use crate::events::NodeEvent;
use crate::hello;
use crate::inbound::{GossipTicket, Inbound};
use crate::scoring;
use crate::state::{HeartbeatStats, NodeState, PeerInfo, ReceivedMessage};
use crate::topics::{self, HELLO_TOPIC, JOBS_TOPIC};
use crate::validation::{GossipValidator, Verdict};
use crate::wire::{
    Hardware, Heartbeat, MAX_MESSAGE_SIZE, Message, NodeHello, WireRole, encode_blob_endpoint,
    kind_name, now_us, parse_blob_endpoint,
};
use gpuchain_protocol::signing::{Sig65, SigningKey};
use gpuchain_protocol::types::Address;

/// Bounded command queue between the handles and the loop.
pub const COMMAND_QUEUE: usize = 256;
/// Connections we open on our own to peers found through Kademlia, beyond which we stop.
pub const TARGET_PEERS: usize = 24;
/// A node's first hello goes out this long after the first peer joins the hello topic, so
/// that the mesh it is published to has formed.
const HELLO_DEBOUNCE: Duration = Duration::from_millis(300);
/// Heartbeat `seq` values within this distance of our clock are taken as send times for the
/// latency figures (see `publish_heartbeats`).
const LATENCY_WINDOW_US: u64 = 60_000_000;
/// And in any case this often, so late joiners and lost messages are covered.
const HELLO_PERIOD: Duration = Duration::from_secs(30);
const HOUSEKEEPING: Duration = Duration::from_millis(100);
/// The most swarm events one `Sync` handles before replying: a backlog of a few seconds of
/// heartbeats from every watched provider, and a bound on the wait.
const CATCH_UP_EVENTS: usize = 1_000;

#[derive(Debug)]
pub enum Command {
    Status(oneshot::Sender<Status>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    Publish {
        topic: String,
        data: Vec<u8>,
        reply: oneshot::Sender<Result<String>>,
    },
    Subscribe {
        topic: String,
        reply: oneshot::Sender<Result<()>>,
    },
    Unsubscribe {
        topic: String,
    },
    Heartbeat {
        topic: String,
        on: bool,
        reply: oneshot::Sender<Result<()>>,
    },
    Messages {
        since: u64,
        reply: oneshot::Sender<Vec<ReceivedMessage>>,
    },
    HeartbeatStats {
        raw: bool,
        reset: bool,
        reply: oneshot::Sender<HeartbeatStats>,
    },
    /// Endpoints to fetch a blob from, best first: the named peers, then connected peers,
    /// then peers we know but are not connected to.
    BlobSources {
        preferred: Vec<PeerId>,
        reply: oneshot::Sender<Vec<EndpointId>>,
    },
    /// The peers that said hello with this Ethereum address (roles speak in addresses).
    PeersOf {
        address: Address,
        reply: oneshot::Sender<Vec<PeerId>>,
    },
    /// The role machines' final verdict on a gossip message that passed the stateless
    /// checks: only now is it forwarded (Accept) or its sender penalised (Reject).
    Verdict {
        ticket: GossipTicket,
        verdict: gpuchain_protocol::validation::Verdict,
    },
    /// Replies once the swarm has handled every event it already had ready: a caller about
    /// to act on silence first hears what reached this node meanwhile (see
    /// `roles::late_timer`), and the time the reply took says how far behind the swarm was.
    Sync(oneshot::Sender<()>),
    /// Testnets only: refuse and disconnect these peers (`blocked`), or take them back; a
    /// blocked peer is no blob source either.
    Partition {
        peers: Vec<PeerId>,
        blocked: bool,
        reply: oneshot::Sender<()>,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub peer_id: String,
    pub eth_address: String,
    pub roles: Vec<Role>,
    pub listen_addrs: Vec<String>,
    pub blob_endpoint: String,
    pub blob_addrs: Vec<std::net::SocketAddr>,
    pub connected_peers: usize,
    pub topics: Vec<String>,
    pub mesh_peers: usize,
    pub heartbeat_topics: Vec<String>,
    pub heartbeat_period_ms: u64,
    pub counters: crate::state::Counters,
    pub uptime_ms: u64,
}

pub struct EventLoop<V: GossipValidator> {
    swarm: Swarm<Behaviour>,
    blobs: BlobNode,
    validator: V,
    commands: mpsc::Receiver<Command>,
    shutdown: watch::Receiver<bool>,
    /// Accepted gossip and lost peers, for the role machines (absent on a plain relay).
    roles_tx: Option<mpsc::Sender<Inbound>>,
    hardware: Hardware,
    state: NodeState,
    roles: BTreeSet<Role>,
    eth_key: SigningKey,
    eth_address: Address,
    heartbeat_period: Duration,
    heartbeat_topics: BTreeSet<String>,
    heartbeat_seq: u64,
    last_heartbeat_us: u64,
    hello_due: Option<Instant>,
    /// Whether this node's hello has gone out as gossip yet. Later joiners hear it through
    /// the direct exchange (`hello`) and the periodic broadcast, not a new broadcast each.
    hello_published: bool,
    /// Connections whose peer has had its direct hello request answered.
    hello_answered: HashSet<ConnectionId>,
    bootstrap_dials: HashSet<ConnectionId>,
    bootstrap_errors: Vec<String>,
    bootstrapped: bool,
    kad_bootstrapped: bool,
    started: Instant,
}

impl<V: GossipValidator> EventLoop<V> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        swarm: Swarm<Behaviour>,
        blobs: BlobNode,
        validator: V,
        commands: mpsc::Receiver<Command>,
        shutdown: watch::Receiver<bool>,
        config: &NodeConfig,
        eth_key: SigningKey,
        roles_tx: Option<mpsc::Sender<Inbound>>,
    ) -> Self {
        Self {
            swarm,
            blobs,
            validator,
            commands,
            shutdown,
            roles_tx,
            hardware: crate::hardware::local(config.memory_bytes),
            state: NodeState::default(),
            roles: config.roles.clone(),
            eth_address: eth_key.address(),
            eth_key,
            heartbeat_period: config.heartbeat_period,
            heartbeat_topics: BTreeSet::new(),
            heartbeat_seq: 0,
            last_heartbeat_us: 0,
            hello_due: None,
            hello_published: false,
            hello_answered: HashSet::new(),
            bootstrap_dials: HashSet::new(),
            bootstrap_errors: Vec::new(),
            bootstrapped: config.bootstrap.is_empty(),
            kad_bootstrapped: false,
            started: Instant::now(),
        }
    }

    /// The path's round trip to a peer, for the client's detector of a provider behind it;
    /// once both its address (hello) and a measurement (ping) are known.
    fn report_rtt(&mut self, peer: PeerId) {
        let Some(rec) = self.state.peers.get(&peer) else {
            return;
        };
        let address = rec
            .eth_address
            .as_deref()
            .and_then(|a| a.parse::<Address>().ok());
        if let (Some(address), Some(rtt)) = (address, rec.path_rtt) {
            // A full queue is reported there; a shorter round trip or a hello sends it again.
            let _ = self.send_to_roles(Inbound::PathRtt { address, rtt });
        }
    }

    /// Hands accepted gossip and lost connections to the role runtime; false when it did not
    /// take it (no roles, or its queue is full).
    fn send_to_roles(&mut self, ev: Inbound) -> bool {
        let Some(tx) = &self.roles_tx else {
            return false;
        };
        // Never block the swarm on the roles: a full queue drops (gossip is lossy anyway,
        // and the detector tolerates a lost heartbeat) and says so.
        match tx.try_send(ev) {
            Ok(()) => true,
            Err(e) => {
                crate::events::emit(
                    NodeEvent::RolesQueueFull {
                        error: e.to_string(),
                    },
                    "role runtime is behind; message dropped",
                );
                false
            }
        }
    }

    /// Listens, dials the bootstrap peers and subscribes; errors here are configuration
    /// problems reported before the loop starts.
    pub fn start(&mut self, config: &NodeConfig) -> Result<()> {
        for addr in &config.listen {
            self.swarm.listen_on(addr.clone()).map_err(|e| {
                anyhow!("cannot listen on {addr}: {e}; pick another address or port")
            })?;
        }
        self.subscribe(JOBS_TOPIC)?;
        self.subscribe(HELLO_TOPIC)?;
        for topic in &config.heartbeat_topics {
            self.subscribe(topic)?;
            self.heartbeat_topics.insert(topic.clone());
        }
        for addr in &config.bootstrap {
            let opts = DialOpts::unknown_peer_id().address(addr.clone()).build();
            let id = opts.connection_id();
            self.swarm
                .dial(opts)
                .map_err(|e| anyhow!("cannot dial bootstrap peer {addr}: {e}"))?;
            self.bootstrap_dials.insert(id);
        }
        Ok(())
    }

    pub async fn run(mut self, bootstrap_timeout: Duration) -> Result<()> {
        let mut heartbeat = tokio::time::interval(self.heartbeat_period);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        let bootstrap_deadline = tokio::time::sleep(bootstrap_timeout);
        tokio::pin!(bootstrap_deadline);
        let mut next_hello = Instant::now() + hello_period();
        loop {
            tokio::select! {
                event = self.swarm.select_next_some() => self.on_swarm_event(event)?,
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd)?,
                    None => break,
                },
                _ = heartbeat.tick(), if !self.heartbeat_topics.is_empty() => self.publish_heartbeats(),
                _ = housekeeping.tick() => {
                    let now = Instant::now();
                    let due = self.hello_due.is_some_and(|t| now >= t) || now >= next_hello;
                    if due {
                        self.hello_due = None;
                        next_hello = now + hello_period();
                        self.publish_hello();
                    }
                }
                _ = &mut bootstrap_deadline, if !self.bootstrapped => {
                    bail!(
                        "no bootstrap peer answered within {}s ({}); check the --bootstrap address and that the peer is running",
                        bootstrap_timeout.as_secs(),
                        if self.bootstrap_errors.is_empty() { "no reply".to_string() } else { self.bootstrap_errors.join("; ") }
                    );
                }
                changed = self.shutdown.changed() => {
                    if changed.is_err() || *self.shutdown.borrow() {
                        break;
                    }
                }
            }
        }
        crate::events::emit(NodeEvent::Shutdown, "event loop stopped");
        Ok(())
    }

    fn subscribe(&mut self, topic: &str) -> Result<()> {
        topics::check_topic(topic)?;
        let t = IdentTopic::new(topic);
        let gs = &mut self.swarm.behaviour_mut().gossipsub;
        gs.subscribe(&t)
            .map_err(|e| anyhow!("cannot subscribe to {topic}: {e}"))?;
        gs.set_topic_params(t, scoring::topic_params())
            .map_err(|e| anyhow!("topic score params for {topic}: {e}"))?;
        Ok(())
    }

    fn publish(&mut self, topic: &str, data: Vec<u8>) -> Result<String> {
        topics::check_topic(topic)?;
        if data.len() > MAX_MESSAGE_SIZE {
            bail!(
                "message of {} bytes exceeds the {MAX_MESSAGE_SIZE}-byte limit",
                data.len()
            );
        }
        match self
            .swarm
            .behaviour_mut()
            .gossipsub
            .publish(IdentTopic::new(topic), data)
        {
            Ok(id) => {
                self.state.counters.published += 1;
                // Every heartbeat goes out here, the provider machine's and this driver's.
                if topics::heartbeat_job_of(topic).is_some() {
                    crate::metrics::global().heartbeat_sent();
                }
                Ok(id.to_string())
            }
            Err(e) => {
                self.state.counters.publish_failed += 1;
                // A heartbeat topic's one subscriber is the job's client, and gossip reaches
                // it only over a direct connection: no subscribed peer means we lost it.
                if matches!(e, gossipsub::PublishError::NoPeersSubscribedToTopic)
                    && topics::heartbeat_job_of(topic).is_some()
                {
                    self.reach_clients();
                }
                Err(anyhow!("publish on {topic} failed: {e}"))
            }
        }
    }

    /// Heartbeats from this driver (tests, benchmarks) carry the send time in microseconds
    /// as `seq`: strictly increasing, as the protocol requires, and it lets every receiver
    /// measure gossip latency. The provider state machine will own `seq` once jobs run.
    fn publish_heartbeats(&mut self) {
        let topics: Vec<String> = self.heartbeat_topics.iter().cloned().collect();
        for topic in topics {
            let Some(job_id) = topics::heartbeat_job_of(&topic) else {
                continue;
            };
            self.heartbeat_seq += 1;
            let seq = now_us().max(self.last_heartbeat_us + 1);
            self.last_heartbeat_us = seq;
            let msg = Message::Heartbeat(
                Heartbeat {
                    job_id,
                    epoch: 0,
                    provider: self.eth_address,
                    seq,
                    step: self.heartbeat_seq,
                    loss: 0.0,
                    checkpointing: false,
                    starved_ms: 0,
                    signature: Sig65::ZERO,
                }
                .sign(&self.eth_key),
            );
            match self.publish(&topic, msg.encode()) {
                Ok(_) => self.state.counters.heartbeats_sent += 1,
                Err(e) => tracing::debug!(%topic, error = %e, "heartbeat not sent"),
            }
        }
    }

    /// This node's signed hello, encoded as it goes out, on gossip and directly alike.
    fn hello(&self) -> Vec<u8> {
        let roles = self
            .roles
            .iter()
            .map(|r| match r {
                Role::Client => WireRole::Client,
                Role::Provider => WireRole::Provider,
                Role::Verifier => WireRole::Verifier,
            })
            .collect();
        let hello = NodeHello {
            peer_id: self.swarm.local_peer_id().to_bytes(),
            address: self.eth_address,
            roles,
            hardware: self.hardware,
            blob_endpoint: encode_blob_endpoint(
                &hex::encode(self.blobs.id().as_bytes()),
                &self.blobs.socket_addrs(),
            ),
            issued_at: now_us() / 1_000_000,
            signature: Sig65::ZERO,
        };
        Message::NodeHello(hello.sign(&self.eth_key)).encode()
    }

    fn publish_hello(&mut self) {
        match self.publish(HELLO_TOPIC, self.hello()) {
            Ok(_) => self.hello_published = true,
            Err(e) => tracing::debug!(error = %e, "hello not sent"),
        }
    }

    /// Handles the swarm events that are ready now, at most [`CATCH_UP_EVENTS`] of them.
    fn catch_up(&mut self) -> Result<()> {
        for _ in 0..CATCH_UP_EVENTS {
            match self.swarm.next().now_or_never() {
                Some(Some(event)) => self.on_swarm_event(event)?,
                _ => break,
            }
        }
        Ok(())
    }

    fn on_command(&mut self, cmd: Command) -> Result<()> {
        // A dropped reply receiver only means the caller gave up waiting.
        match cmd {
            Command::Sync(reply) => {
                self.catch_up()?;
                let _ = reply.send(());
            }
            Command::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Command::Peers(reply) => {
                let _ = reply.send(self.peers());
            }
            Command::Publish { topic, data, reply } => {
                let _ = reply.send(self.publish(&topic, data));
            }
            Command::Subscribe { topic, reply } => {
                let _ = reply.send(self.subscribe(&topic));
            }
            Command::Unsubscribe { topic } => {
                let t = IdentTopic::new(topic.as_str());
                if !self.heartbeat_topics.contains(&topic) {
                    self.swarm.behaviour_mut().gossipsub.unsubscribe(&t);
                }
            }
            Command::Heartbeat { topic, on, reply } => {
                let r = topics::heartbeat_topic_of(&topic).and_then(|topic| {
                    if on {
                        self.subscribe(&topic)?;
                        self.heartbeat_topics.insert(topic);
                    } else {
                        self.heartbeat_topics.remove(&topic);
                    }
                    Ok(())
                });
                let _ = reply.send(r);
            }
            Command::Messages { since, reply } => {
                let v = self
                    .state
                    .messages
                    .iter()
                    .filter(|m| m.seq >= since)
                    .cloned()
                    .collect();
                let _ = reply.send(v);
            }
            Command::HeartbeatStats { raw, reset, reply } => {
                let _ = reply.send(self.state.heartbeat_stats(raw, reset));
            }
            Command::BlobSources { preferred, reply } => {
                let _ = reply.send(self.blob_sources(&preferred));
            }
            Command::PeersOf { address, reply } => {
                let _ = reply.send(self.peers_of(address));
            }
            Command::Verdict { ticket, verdict } => self.settle(ticket, verdict.into()),
            Command::Partition {
                peers,
                blocked,
                reply,
            } => {
                let list = &mut self.swarm.behaviour_mut().blocked;
                for p in peers {
                    if blocked {
                        list.block_peer(p);
                    } else {
                        list.unblock_peer(p);
                    }
                }
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    fn peers_of(&self, address: Address) -> Vec<PeerId> {
        let want = address.to_string();
        let mut v: Vec<(PeerId, bool)> = self
            .state
            .peers
            .iter()
            .filter(|(_, r)| r.eth_address.as_deref() == Some(want.as_str()))
            .map(|(p, r)| (*p, r.connections > 0))
            .collect();
        v.sort_by_key(|(_, connected)| !connected);
        v.into_iter().map(|(p, _)| p).collect()
    }

    fn blob_sources(&self, preferred: &[PeerId]) -> Vec<EndpointId> {
        let mut out: Vec<EndpointId> = Vec::new();
        let blocked = self.swarm.behaviour().blocked.blocked_peers();
        let push = |p: &PeerId, out: &mut Vec<EndpointId>| {
            if blocked.contains(p) {
                return;
            }
            if let Some(id) = crate::identity::endpoint_id(p)
                && self.blobs.knows(id)
                && !out.contains(&id)
            {
                out.push(id);
            }
        };
        for p in preferred {
            push(p, &mut out);
        }
        let mut known: Vec<(&PeerId, bool)> = self
            .state
            .peers
            .iter()
            .filter(|(_, r)| !r.blob_addrs.is_empty())
            .map(|(p, r)| (p, r.connections > 0))
            .collect();
        // Connected peers first: a peer we lost the libp2p link to is likely gone.
        known.sort_by_key(|(_, connected)| !connected);
        for (p, _) in known {
            push(p, &mut out);
        }
        out
    }

    fn status(&self) -> Status {
        let gs = &self.swarm.behaviour().gossipsub;
        Status {
            peer_id: self.swarm.local_peer_id().to_string(),
            eth_address: self.eth_address.to_string(),
            roles: self.roles.iter().copied().collect(),
            listen_addrs: self.swarm.listeners().map(|a| a.to_string()).collect(),
            blob_endpoint: hex::encode(self.blobs.id().as_bytes()),
            blob_addrs: self.blobs.socket_addrs(),
            connected_peers: self.swarm.connected_peers().count(),
            topics: gs.topics().map(|t| t.to_string()).collect(),
            mesh_peers: gs.all_mesh_peers().count(),
            heartbeat_topics: self.heartbeat_topics.iter().cloned().collect(),
            heartbeat_period_ms: self.heartbeat_period.as_millis() as u64,
            counters: self.state.counters.clone(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    fn peers(&self) -> Vec<PeerInfo> {
        let gs = &self.swarm.behaviour().gossipsub;
        let mut v: Vec<PeerInfo> = self
            .state
            .peers
            .iter()
            .map(|(id, r)| PeerInfo {
                peer_id: id.to_string(),
                connected: r.connections > 0,
                addrs: r.addrs.iter().map(|a| a.to_string()).collect(),
                agent: r.agent.clone(),
                score: gs.peer_score(id),
                blob_endpoint: if r.blob_addrs.is_empty() {
                    None
                } else {
                    crate::identity::endpoint_id_hex(id)
                },
                blob_addrs: r.blob_addrs.clone(),
                roles: r.roles.clone(),
                eth_address: r.eth_address.clone(),
                rejected_messages: r.rejected_messages,
                path_rtt_ms: r.path_rtt.map(|d| d.as_secs_f64() * 1000.0),
                hellos_direct: r.hellos_direct,
                hellos_gossip: r.hellos_gossip,
            })
            .collect();
        v.sort_by(|a, b| a.peer_id.cmp(&b.peer_id));
        v
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) -> Result<()> {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                let full = address.clone().with(libp2p::multiaddr::Protocol::P2p(
                    *self.swarm.local_peer_id(),
                ));
                crate::events::emit(
                    NodeEvent::Listening {
                        addr: full.to_string(),
                    },
                    "listening",
                );
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                num_established,
                ..
            } => {
                // One exchange per pair of peers: the dialer of their first connection asks.
                if endpoint.is_dialer() && num_established.get() == 1 {
                    let hello = self.hello();
                    self.swarm
                        .behaviour_mut()
                        .hello
                        .send_request(&peer_id, hello);
                }
                if self.bootstrap_dials.remove(&connection_id) && !self.bootstrapped {
                    self.bootstrapped = true;
                    crate::events::emit(
                        NodeEvent::Bootstrapped {
                            peer: peer_id.to_string(),
                        },
                        "joined the swarm",
                    );
                }
                let now = now_us();
                let rec = self.state.peer(peer_id);
                if rec.connections == 0 {
                    // Perhaps a new path: measured afresh.
                    rec.path_rtt = None;
                }
                rec.connections += 1;
                rec.last_seen = now;
                if let ConnectedPoint::Dialer { address, .. } = &endpoint {
                    let addr = strip_p2p(address);
                    if !rec.addrs.contains(&addr) {
                        rec.addrs.push(addr.clone());
                    }
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                }
                crate::metrics::global().set_peers(self.swarm.connected_peers().count());
                crate::events::emit(
                    NodeEvent::Connected {
                        peer: peer_id.to_string(),
                    },
                    "",
                );
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                ..
            } => {
                self.hello_answered.remove(&connection_id);
                let rec = self.state.peer(peer_id);
                rec.connections = rec.connections.saturating_sub(1);
                rec.last_seen = now_us();
                // The last connection to a peer gone: a strong hint that a provider died
                // (kill -9 closes its sockets at once), long before heartbeats time out.
                let lost = (rec.connections == 0)
                    .then(|| {
                        rec.eth_address
                            .as_ref()
                            .and_then(|a| a.parse::<Address>().ok())
                    })
                    .flatten();
                if let Some(address) = lost {
                    // A full queue is reported there; the detector's timeout still applies.
                    let _ = self.send_to_roles(Inbound::ConnectionClosed { address });
                }
                crate::metrics::global().set_peers(self.swarm.connected_peers().count());
                crate::events::emit(
                    NodeEvent::Disconnected {
                        peer: peer_id.to_string(),
                    },
                    "",
                );
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                error,
                ..
            } if self.bootstrap_dials.remove(&connection_id) => {
                self.bootstrap_errors.push(error.to_string());
                if self.bootstrap_dials.is_empty() && !self.bootstrapped {
                    bail!(
                        "could not reach any bootstrap peer: {}; check the --bootstrap address and that the peer is running",
                        self.bootstrap_errors.join("; ")
                    );
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(ev)) => self.on_gossip(ev),
            SwarmEvent::Behaviour(BehaviourEvent::Hello(ev)) => self.on_direct_hello(ev),
            SwarmEvent::Behaviour(BehaviourEvent::Ping(ping::Event {
                peer,
                result: Ok(rtt),
                ..
            })) => {
                let rec = self.state.peer(peer);
                if rec.path_rtt.is_none_or(|r| rtt < r) {
                    rec.path_rtt = Some(rtt);
                    self.report_rtt(peer);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                peer_id,
                info,
                ..
            })) => {
                let kad = &mut self.swarm.behaviour_mut().kad;
                for addr in &info.listen_addrs {
                    if is_dialable(addr) {
                        kad.add_address(&peer_id, addr.clone());
                    }
                }
                if !self.kad_bootstrapped && kad.bootstrap().is_ok() {
                    self.kad_bootstrapped = true;
                }
                let rec = self.state.peer(peer_id);
                rec.agent = Some(info.agent_version);
                for addr in info.listen_addrs.into_iter().filter(is_dialable) {
                    if !rec.addrs.contains(&addr) && rec.addrs.len() < 16 {
                        rec.addrs.push(addr);
                    }
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::RoutingUpdated {
                peer, ..
            })) => {
                let connected = self.swarm.is_connected(&peer);
                if !connected && self.swarm.connected_peers().count() < TARGET_PEERS {
                    // Widen the mesh beyond the bootstrap node; failures are routine.
                    let _ = self.swarm.dial(peer);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Tells gossipsub what to do with a message (forward, drop, or drop and penalise its
    /// propagator), and counts it.
    fn settle(&mut self, ticket: GossipTicket, verdict: Verdict) {
        let acceptance = match &verdict {
            Verdict::Accept => MessageAcceptance::Accept,
            Verdict::Ignore(_) => MessageAcceptance::Ignore,
            Verdict::Reject(_) => MessageAcceptance::Reject,
        };
        let GossipTicket {
            message_id,
            propagation_source: peer,
            topic,
        } = ticket;
        self.swarm
            .behaviour_mut()
            .gossipsub
            .report_message_validation_result(&message_id, &peer, acceptance);
        match verdict {
            Verdict::Accept => {
                self.state.counters.accepted += 1;
                crate::metrics::global().gossip_accepted();
            }
            Verdict::Ignore(reason) => {
                self.state.counters.ignored += 1;
                crate::events::emit(
                    NodeEvent::GossipIgnored {
                        peer: peer.to_string(),
                        topic: topic.to_string(),
                        reason: reason.to_string(),
                    },
                    "",
                );
            }
            Verdict::Reject(reason) => {
                self.state.counters.rejected += 1;
                self.state.peer(peer).rejected_messages += 1;
                crate::events::emit(
                    NodeEvent::GossipRejected {
                        peer: peer.to_string(),
                        topic: topic.to_string(),
                        reason: reason.to_string(),
                    },
                    "rejected gossip message",
                );
            }
        }
    }

    fn on_gossip(&mut self, ev: gossipsub::Event) {
        match ev {
            gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            } => {
                let topic = message.topic.as_str().to_string();
                let (verdict, decoded) =
                    self.validator
                        .validate(&topic, message.source.as_ref(), &message.data);
                let ticket = GossipTicket {
                    message_id: message_id.clone(),
                    propagation_source,
                    topic: topic.clone(),
                };
                // What the machines judge is held until they have; the rest is settled here.
                let Some(checked) = decoded.filter(|_| verdict == Verdict::Accept) else {
                    self.settle(ticket, verdict);
                    return;
                };
                let to_roles =
                    self.roles_tx.is_some() && !matches!(checked.message(), Message::NodeHello(_));
                if to_roles {
                    let ev = Inbound::Gossip {
                        checked: Box::new(checked.clone()),
                        ticket: ticket.clone(),
                    };
                    if !self.send_to_roles(ev) {
                        // Not judged, so not forwarded; no penalty either.
                        self.settle(ticket, Verdict::Ignore("RolesBusy".into()));
                        return;
                    }
                } else {
                    self.settle(ticket, Verdict::Accept);
                }
                let received_at_us = now_us();
                let kind = kind_name(checked.message());
                self.state.push_message(ReceivedMessage {
                    seq: 0,
                    topic: topic.clone(),
                    source: message.source.map(|s| s.to_string()),
                    propagation_source: propagation_source.to_string(),
                    message_id: message_id.to_string(),
                    kind: kind.to_string(),
                    size: message.data.len(),
                    received_at_us,
                    data_hex: hex::encode(&message.data),
                });
                match checked.into_message() {
                    Message::NodeHello(h) => {
                        if let Some(source) = message.source {
                            self.on_hello(source, h, false);
                        }
                    }
                    Message::Heartbeat(hb) => {
                        let latency = (received_at_us.abs_diff(hb.seq) < LATENCY_WINDOW_US)
                            .then(|| received_at_us.saturating_sub(hb.seq));
                        self.state.record_heartbeat(&topic, latency);
                    }
                    _ => {}
                }
            }
            gossipsub::Event::Subscribed { peer_id, topic } => {
                if topic.as_str() == HELLO_TOPIC
                    && !self.hello_published
                    && self.hello_due.is_none()
                {
                    self.hello_due = Some(Instant::now() + HELLO_DEBOUNCE);
                }
                tracing::debug!(peer = %peer_id, %topic, "peer subscribed");
            }
            _ => {}
        }
    }

    /// The direct exchange (`hello`): a request is answered with this node's own hello.
    fn on_direct_hello(&mut self, ev: hello::Event) {
        use libp2p::request_response::{Event, Message as Rr};
        match ev {
            Event::Message {
                peer,
                connection_id,
                message: Rr::Request {
                    request, channel, ..
                },
            } => {
                // One per connection: a peer cannot make us verify signatures in a loop
                // without paying for a new connection each time.
                if !self.hello_answered.insert(connection_id) {
                    // Dropping the channel closes the stream unanswered.
                    tracing::debug!(%peer, "a second hello request on one connection; dropped");
                    return;
                }
                self.take_direct_hello(peer, &request);
                let mine = self.hello();
                if self
                    .swarm
                    .behaviour_mut()
                    .hello
                    .send_response(channel, mine)
                    .is_err()
                {
                    tracing::debug!(%peer, "hello answer not sent: the connection closed");
                }
            }
            Event::Message {
                peer,
                message: Rr::Response { response, .. },
                ..
            } => {
                if response.is_empty() {
                    // Not answered (see above): it knows us already from this connection.
                    tracing::debug!(%peer, "hello request declined");
                } else {
                    self.take_direct_hello(peer, &response);
                }
            }
            Event::OutboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "hello exchange failed");
            }
            Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "hello request not answered");
            }
            Event::ResponseSent { .. } => {}
        }
    }

    /// A hello the peer itself sent on a connection: judged like gossip, the connection's
    /// authenticated peer standing in for the signed author.
    fn take_direct_hello(&mut self, peer: PeerId, data: &[u8]) {
        let (verdict, checked) = self.validator.validate(HELLO_TOPIC, Some(&peer), data);
        match (verdict, checked.map(|c| c.into_message())) {
            (Verdict::Accept, Some(Message::NodeHello(h))) => self.on_hello(peer, h, true),
            (verdict, _) => {
                self.state.peer(peer).rejected_messages += 1;
                crate::events::emit(
                    NodeEvent::HelloRefused {
                        peer: peer.to_string(),
                        reason: format!("{verdict:?}"),
                    },
                    "refused a direct hello",
                );
            }
        }
    }

    fn on_hello(&mut self, source: PeerId, h: NodeHello, direct: bool) {
        // The validator checked that the endpoint id is the one derived from `source`.
        let addrs = parse_blob_endpoint(&h.blob_endpoint)
            .map(|(_, a)| a)
            .unwrap_or_default();
        if let Some(id) = crate::identity::endpoint_id(&source) {
            self.blobs.learn(id, &addrs);
        }
        let rec = self.state.peer(source);
        rec.blob_addrs = addrs;
        rec.roles = h
            .roles
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect();
        rec.eth_address = Some(h.address.to_string());
        rec.last_seen = now_us();
        if direct {
            rec.hellos_direct += 1;
        } else {
            rec.hellos_gossip += 1;
        }
        // Ping may have measured the path before the peer said who it is.
        self.report_rtt(source);
        if h.roles.contains(&WireRole::Client) {
            self.reach_clients();
        }
        crate::events::emit(
            NodeEvent::Hello {
                peer: source.to_string(),
                direct,
            },
            "",
        );
    }
}

impl<V: GossipValidator> EventLoop<V> {
    /// A provider keeps a direct connection to every client it has heard of: heartbeats go on
    /// a topic only the job's client subscribes to, and gossipsub hands a message only to
    /// subscribed peers it is connected to. The addresses come from Kademlia and identify.
    fn reach_clients(&mut self) {
        if !self.roles.contains(&Role::Provider) {
            return;
        }
        let clients: Vec<PeerId> = self
            .state
            .peers
            .iter()
            .filter(|(_, r)| r.roles.iter().any(|x| x == "client"))
            .map(|(p, _)| *p)
            .filter(|p| !self.swarm.is_connected(p))
            .collect();
        for peer in clients {
            let opts = DialOpts::peer_id(peer)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(%peer, error = %e, "cannot dial a client");
            }
        }
    }
}

/// The wait until the next periodic hello: [`HELLO_PERIOD`] give or take a quarter, so that
/// nodes started together (a testnet, a data centre after a power cut) do not all hello, and
/// all validate each other's hellos, in the same instant every period.
fn hello_period() -> Duration {
    HELLO_PERIOD.mul_f64(rand::random_range(0.75..1.25))
}

fn strip_p2p(addr: &Multiaddr) -> Multiaddr {
    addr.iter()
        .filter(|p| !matches!(p, libp2p::multiaddr::Protocol::P2p(_)))
        .collect()
}

fn is_dialable(addr: &Multiaddr) -> bool {
    !addr.iter().any(|p| match p {
        libp2p::multiaddr::Protocol::Ip4(ip) => ip.is_unspecified(),
        libp2p::multiaddr::Protocol::Ip6(ip) => ip.is_unspecified(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_are_spread_over_half_a_period() {
        let waits: Vec<Duration> = (0..400).map(|_| hello_period()).collect();
        let least = waits.iter().min().copied().unwrap_or_default();
        let most = waits.iter().max().copied().unwrap_or_default();
        assert!(least >= HELLO_PERIOD.mul_f64(0.75), "{least:?}");
        assert!(most <= HELLO_PERIOD.mul_f64(1.25), "{most:?}");
        // Nodes started together drift apart: 400 draws span most of the range.
        assert!(
            most - least > HELLO_PERIOD.mul_f64(0.4),
            "{least:?}..{most:?}"
        );
    }
}
