//! The adapter that runs the protocol crate's own role machines inside the simulator: each
//! node hosts one `gpuchain_protocol::roles::Roles`, the composite of `Client`, `Provider`
//! and `Verifier` a node hosts, with the roles that node plays. Gossip is delivered to a
//! topic's subscribers over the simulated network, transactions go to the escrow model
//! (signers recovered from the real EIP-712 signatures), escrow events come back as
//! `Input::Chain`, and the trainer, blob store and verifier runners are answered from the
//! training model and each checkpoint's ground truth.
//!
//! Every message is signed and checked, under `protocol.signatures`: secp256k1 as in the node
//! (what bounds this driver's speed in large runs), or the protocol crate's simulated scheme,
//! which keeps every check and drops the curve. The run's report counts them (`signatures`).
//!
//! What reaches whom, at scale (see README.md, "What reaches whom"): an offer on the
//! jobs topic reaches `offer_fanout` random subscribers (a mesh reaches some, not all); a
//! chain event reaches the nodes that follow its job (client, listed verifiers, providers that
//! know the job); a provider's chain client reads a job from the chain (`JobCreated`, and its
//! end if it has ended) the first time an offer or an assignment for it reaches the machine.
//!
//! Longer than our usual file on purpose: every `Output` of the machines is executed here, and
//! one `match` over them, in one file, is what makes a missed or doubled output easy to see.

use std::collections::{BTreeMap, BTreeSet};

use gpuchain_protocol as gp;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, TxId};
use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::io::{Input, Notice, Output, QualityReport};
use gpuchain_protocol::messages::{DeviceKind, Hardware};
use gpuchain_protocol::roles::{RoleConfigs, Roles};
use gpuchain_protocol::signing::{Scheme, SigningKey};
use gpuchain_protocol::spec::JobSpec;
use gpuchain_protocol::validation::Checked;
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{Address, B256, Time, U256};

use crate::cheat::quality_ok;
use crate::escrow::{self, Call, Epoch, Hash, JobId, Step};
use crate::fasthash::FastMap;
use crate::queue::Millis;
use crate::rng::{Purpose, SimRng, stream};
use crate::training;
use crate::world::{Event, Msg, NodeId, Timer, World, ms};

/// A provider's trainer, as the training model runs it.
#[derive(Clone, Debug)]
struct TrainRun {
    job: JobId,
    epoch: Epoch,
    from_step: Step,
    until: Step,
    interval: Step,
    parent_step: Step,
    parent: B256,
    started: Option<Millis>,
}

impl TrainRun {
    /// The step reached at `now` training at `rate` steps/s (`None` before it starts).
    fn progress(&self, now: Millis, rate: f64) -> Option<Step> {
        let t0 = self.started?;
        let done = ((now - t0) as f64 / 1000.0 * rate).floor() as u64;
        Some((self.from_step + done).min(self.until))
    }
}

/// Bytes of a topic name held inline in the subscriber table ("gpuchain/1/job/<id>/heartbeats"
/// fits for any id below 10^20).
const SHORT_TOPIC: usize = 46;

/// A topic name as the subscriber table keys it: inline when short (every topic the machines
/// publish on), so finding a publication's subscribers reads the table's own slot and not a
/// string allocated elsewhere (that read was a cache miss on every publication). One
/// representation per name, so the derived equality and hash are the name's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TopicKey {
    Short { len: u8, bytes: [u8; SHORT_TOPIC] },
    Long(Box<str>),
}

impl TopicKey {
    fn new(topic: &str) -> TopicKey {
        let b = topic.as_bytes();
        if b.len() > SHORT_TOPIC {
            return TopicKey::Long(topic.into());
        }
        let mut bytes = [0u8; SHORT_TOPIC];
        bytes[..b.len()].copy_from_slice(b);
        TopicKey::Short {
            len: b.len() as u8,
            bytes,
        }
    }
}

/// A topic's subscribers in node order, read on every publication and changed only when a
/// node subscribes or leaves. Up to [`INLINE_SUBSCRIBERS`] of them (a job's topics: its
/// client, its verifiers, its providers) are held in the subscriber table's own slot, more
/// (the jobs topic's thousands of providers) in a sorted vector.
#[derive(Clone, Debug)]
enum Subscribers {
    Inline {
        len: u8,
        nodes: [NodeId; INLINE_SUBSCRIBERS],
    },
    Many(Vec<NodeId>),
}

const INLINE_SUBSCRIBERS: usize = 7;

impl Default for Subscribers {
    fn default() -> Self {
        Subscribers::Inline {
            len: 0,
            nodes: [0; INLINE_SUBSCRIBERS],
        }
    }
}

impl Subscribers {
    fn as_slice(&self) -> &[NodeId] {
        match self {
            Subscribers::Inline { len, nodes } => &nodes[..usize::from(*len)],
            Subscribers::Many(v) => v,
        }
    }

    fn insert(&mut self, node: NodeId) {
        let Err(at) = self.as_slice().binary_search(&node) else {
            return;
        };
        match self {
            Subscribers::Inline { len, nodes } if usize::from(*len) < INLINE_SUBSCRIBERS => {
                let n = usize::from(*len);
                nodes.copy_within(at..n, at + 1);
                nodes[at] = node;
                *len += 1;
            }
            Subscribers::Inline { .. } => {
                let mut v = self.as_slice().to_vec();
                v.insert(at, node);
                *self = Subscribers::Many(v);
            }
            Subscribers::Many(v) => v.insert(at, node),
        }
    }

    fn remove(&mut self, node: NodeId) {
        let Ok(at) = self.as_slice().binary_search(&node) else {
            return;
        };
        match self {
            Subscribers::Inline { len, nodes } => {
                let n = usize::from(*len);
                nodes.copy_within(at + 1..n, at);
                *len -= 1;
            }
            Subscribers::Many(v) => {
                v.remove(at);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &NodeId> {
        self.as_slice().iter()
    }
}

/// One node as the driver holds it: its machines, its armed poll timer and its trainers,
/// together (the first cache line holds the machines and the timer), because every event of
/// a node reads them and the events of 10,000 nodes interleave.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct NodeSlot {
    /// The node's machines; `None` while its process is down.
    roles: Option<Roles>,
    /// The armed `poll_timeout` (never 0: a poll is armed at least 1 ms ahead), so a node
    /// has one pending poll at a time.
    armed: Option<std::num::NonZeroU64>,
    /// Its trainers, in job order (a node has one or two: a vector, not a map over all nodes).
    runs: Vec<TrainRun>,
}

impl NodeSlot {
    fn armed(&self) -> Option<Millis> {
        self.armed.map(std::num::NonZeroU64::get)
    }

    fn arm(&mut self, at: Option<Millis>) {
        self.armed = at.and_then(std::num::NonZeroU64::new);
    }
}

pub struct Driver {
    /// Each node's key, kept for a restarted process (deriving one is a curve multiplication).
    keys: Vec<SigningKey>,
    addresses: Vec<Address>,
    nodes: BTreeMap<Address, NodeId>,
    /// Subscribers per topic (looked up on every publication; never iterated in an order
    /// that matters, so a hash map).
    subs: FastMap<TopicKey, Subscribers>,
    /// The topics each node subscribes to (`subs` inverted), so a process that dies leaves
    /// its own topics, not a walk over every live one.
    topics_of: Vec<BTreeSet<String>>,
    /// A publication's receivers, reused from one publication to the next.
    scratch: Vec<NodeId>,
    /// The training model's ids for checkpoint hashes, and back.
    ids: HashIds,
    domain: EscrowDomain,
    /// How the machines sign (the escrow model recovers bid and vote signers under it too).
    scheme: Scheme,
    /// Per node: what a provider's poll reads (its armed timer, its trainers), together.
    slots: Vec<NodeSlot>,
    tx_ids: FastMap<u64, (NodeId, TxId)>,
    next_tag: u64,
    /// The trainers running, per node and job: like the node's, one per job, side by side
    /// (a provider assigned two jobs at once trains both; no contention is modelled).
    job_counter: u64,
    /// Providers whose machine knows each live job (fed its `JobCreated`): they hear its
    /// chain events. Dropped when the job ends.
    followers: BTreeMap<JobId, BTreeSet<NodeId>>,
    /// The live jobs each node follows (`followers` inverted).
    follows: Vec<BTreeSet<JobId>>,
    /// The event that ended each finished job, for a provider that looks the job up later.
    ended: FastMap<JobId, ChainEvent>,
    /// A `withdraw` of each node's is on its way to the chain: its chain client sends no
    /// second one until it is mined (a second would find nothing left to withdraw).
    withdrawing: Vec<bool>,
    /// Draws which subscribers a topic-wide message reaches.
    gossip_rng: SimRng,
    /// What the report's `signatures` says; `signed` and `delivered` by kind are counted in
    /// `signed` and `delivered` below (an array index per message, not a map look-up by name)
    /// and filled in by [`Driver::crypto`].
    crypto: CryptoCounts,
    signed: [u64; KINDS.len()],
    delivered: [u64; KINDS.len()],
}

/// Signatures made and checked, and messages delivered, by message kind: what the protocol
/// driver's speed is spent on.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CryptoCounts {
    /// How they were made and checked (`protocol.signatures`).
    pub scheme: Scheme,
    /// Messages published by the machines: each signed once by its sender and checked once
    /// (`Checked`) for all of its receivers, as a node checks a message once for its roles.
    pub signed: BTreeMap<&'static str, u64>,
    /// Checked messages handed to a machine.
    pub delivered: BTreeMap<&'static str, u64>,
    /// Bid and vote signatures sent to the escrow model in `assign` and decisions.
    pub recovered_on_chain: u64,
    /// Heartbeats handed to a node other than their job's client. None are: a job's
    /// heartbeats go on its heartbeat topic, and only the client subscribes to it
    /// (`tests/protocol_driver.rs`). Not part of the report.
    #[serde(skip)]
    pub heartbeats_off_client: u64,
}

impl CryptoCounts {
    pub fn signatures(&self) -> u64 {
        self.signed.values().sum()
    }

    /// Signatures checked: one per publication, and the escrow model's.
    pub fn recoveries(&self) -> u64 {
        self.signatures() + self.recovered_on_chain
    }
}

/// The message kinds as the report names them, in [`kind`]'s order.
const KINDS: [&str; 6] = ["hello", "offer", "bid", "heartbeat", "announce", "vote"];

/// `m`'s kind, an index into [`KINDS`].
fn kind(m: &Message) -> usize {
    match m {
        Message::NodeHello(_) => 0,
        Message::JobOffer(_) => 1,
        Message::Bid(_) => 2,
        Message::Heartbeat(_) => 3,
        Message::CheckpointAnnounce(_) => 4,
        Message::Vote(_) => 5,
    }
}

fn u256(x: u128) -> U256 {
    U256::from(x)
}

fn job_u256(j: JobId) -> U256 {
    U256::from(j)
}

fn job_u64(j: U256) -> Option<JobId> {
    u64::try_from(j).ok()
}

/// The training model's state hashes of one job: what an honest trainer's state is at each
/// step (deterministic training), and what a cheater fabricates for a step it skipped. Each
/// is a 256-bit value standing for a state hash: a function of its inputs that nothing
/// mistakes for another's. Not a cryptographic hash: nothing in the model inverts it, and a
/// trainer emits one per step (tens of millions a simulated day), so the job's part of the
/// mix is done once per interval.
struct StateHashes {
    honest: u64,
    fabricated: u64,
}

impl StateHashes {
    const HONEST: u64 = 0x686f_6e65_7374;
    const FABRICATED: u64 = 0x6661_6272_6963;

    fn new(job: JobId) -> StateHashes {
        StateHashes {
            honest: model_seed(Self::HONEST, job),
            fabricated: model_seed(Self::FABRICATED, job),
        }
    }

    fn honest(&self, step: Step) -> B256 {
        model_lanes(self.honest, step, 0)
    }

    fn fabricated(&self, step: Step, epoch: Epoch) -> B256 {
        model_lanes(self.fabricated, step, epoch)
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The part of a state hash that depends on its kind (`tag`) and the job only.
fn model_seed(tag: u64, job: JobId) -> u64 {
    mix(mix(tag) ^ job)
}

fn model_lanes(seed: u64, step: Step, epoch: Epoch) -> B256 {
    let seed = mix(seed ^ step) ^ epoch;
    let mut out = [0u8; 32];
    for (lane, chunk) in out.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(
            &mix(seed ^ (lane as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes(),
        );
    }
    B256::from(out)
}

/// Node `node`'s key: seed `node + 1` (`SigningKey::from_seed`), or its simulated twin.
fn node_key(scheme: Scheme, node: NodeId) -> SigningKey {
    let seed = u64::from(node) + 1;
    match scheme {
        Scheme::Secp256k1 => SigningKey::from_seed(seed),
        Scheme::Simulated => SigningKey::simulated(seed),
    }
}

/// Every node's key. Deriving one is a curve multiplication even for a simulated key (its
/// address is the real key's), a second and a half for 10,000 nodes on one core, so the
/// derivation is split over the machine's cores; each key depends on its node id only.
fn node_keys(scheme: Scheme, n: usize) -> Vec<SigningKey> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..n)
            .step_by(per)
            .map(|from| {
                s.spawn(move || {
                    (from..(from + per).min(n))
                        .map(|node| node_key(scheme, node as NodeId))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

impl Driver {
    pub fn new(w: &World) -> Driver {
        let n = (w.cfg.clients + w.cfg.providers + w.cfg.verifiers) as usize;
        let keys = node_keys(w.cfg.protocol.signatures, n);
        let addresses: Vec<Address> = keys.iter().map(|k| k.address()).collect();
        let nodes = addresses
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, i as NodeId))
            .collect();
        let domain = escrow::domain();
        let mut d = Driver {
            keys: keys.clone(),
            addresses,
            nodes,
            subs: FastMap::default(),
            topics_of: vec![BTreeSet::new(); n],
            scratch: Vec::new(),
            ids: HashIds::default(),
            domain,
            scheme: w.cfg.protocol.signatures,
            slots: (0..n).map(|_| NodeSlot::default()).collect(),
            tx_ids: FastMap::default(),
            next_tag: 1,
            job_counter: 0,
            followers: BTreeMap::new(),
            follows: vec![BTreeSet::new(); n],
            ended: FastMap::default(),
            withdrawing: vec![false; n],
            gossip_rng: stream(w.seed, Purpose::Gossip, 0),
            crypto: CryptoCounts {
                scheme: w.cfg.protocol.signatures,
                ..CryptoCounts::default()
            },
            signed: [0; KINDS.len()],
            delivered: [0; KINDS.len()],
        };
        for (i, key) in keys.iter().enumerate() {
            let node = i as NodeId;
            d.slots[i].roles = Some(d.fresh(w, node, key));
        }
        d
    }

    /// The roles `node` plays, configured as the node would configure them.
    fn configs(&mut self, w: &World, node: NodeId) -> RoleConfigs {
        let period = std::time::Duration::from_millis(w.cfg.protocol.heartbeat_ms);
        let timeout = std::time::Duration::from_millis(w.cfg.protocol.heartbeat_timeout_ms);
        let detector = gp::detector::DetectorConfig {
            period,
            timeout,
            // The protocol's floor, 2.5 periods, for whatever period the preset has.
            floor: (period * 5 / 2).min(timeout),
            ..Default::default()
        };
        if let Some(p) = w.provider_index(node) {
            let st = &w.providers[p];
            let hw = &w.cfg.hardware[st.hardware];
            let hardware = Hardware {
                device: DeviceKind::Cuda,
                memory_bytes: hw.memory_bytes,
            };
            let mut cfg = gp::ProviderConfig::new(self.domain, hardware, u256(st.price));
            cfg.heartbeat_period = detector.period;
            cfg.bid_ttl_secs = w.cfg.protocol.bid_ttl_s.max(60);
            self.subscribe(node, gp::topics::JOBS_TOPIC.to_owned());
            RoleConfigs {
                provider: Some(cfg),
                ..RoleConfigs::default()
            }
        } else if w.verifier_index(node).is_some() {
            let cfg = gp::VerifierConfig::new(self.domain, w.seed ^ u64::from(node));
            RoleConfigs {
                verifier: Some(cfg),
                ..RoleConfigs::default()
            }
        } else {
            let mut cfg = gp::ClientConfig::new(self.domain);
            cfg.detector = detector;
            cfg.bid_window = std::time::Duration::from_millis(w.cfg.protocol.bid_window_ms);
            RoleConfigs {
                client: Some(cfg),
                ..RoleConfigs::default()
            }
        }
    }

    fn subscribe(&mut self, node: NodeId, topic: String) {
        self.subs
            .entry(TopicKey::new(&topic))
            .or_default()
            .insert(node);
        self.topics_of[node as usize].insert(topic);
    }

    fn unsubscribe(&mut self, node: NodeId, topic: &str) {
        self.topics_of[node as usize].remove(topic);
        let key = TopicKey::new(topic);
        if let Some(s) = self.subs.get_mut(&key) {
            s.remove(node);
            // An ended job's topics go with their last subscriber.
            if s.is_empty() {
                self.subs.remove(&key);
            }
        }
    }

    fn fresh(&mut self, w: &World, node: NodeId, key: &SigningKey) -> Roles {
        let configs = self.configs(w, node);
        let mut roles = Roles::new(configs, key);
        // A hostile client runs the honest machine behind the protocol crate's own fault
        // filter: where it would submit an accept, it releases the provider instead.
        if w.is_hostile_client(node) {
            roles.set_client_fault(Some(gp::faults::ClientFault::WithholdPay));
        }
        roles
    }

    pub fn address(&self, node: NodeId) -> Address {
        self.addresses[node as usize]
    }

    /// Signatures made and checked and messages delivered so far, by kind (kinds never seen
    /// are left out).
    pub fn crypto(&self) -> CryptoCounts {
        let by_kind = |counts: &[u64; KINDS.len()]| {
            KINDS
                .iter()
                .zip(counts)
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (*k, *n))
                .collect()
        };
        CryptoCounts {
            signed: by_kind(&self.signed),
            delivered: by_kind(&self.delivered),
            ..self.crypto.clone()
        }
    }

    /// The training model's id for a checkpoint hash it minted (`None` for any other hash).
    pub(crate) fn known_id(&self, h: &B256) -> Option<Hash> {
        self.ids.known(h)
    }

    pub(crate) fn node(&self, a: &Address) -> Option<NodeId> {
        self.nodes.get(a).copied()
    }

    /// `node`'s trainer for `job`.
    fn run(&self, node: NodeId, job: JobId) -> Option<&TrainRun> {
        self.slots[node as usize].runs.iter().find(|r| r.job == job)
    }

    fn run_mut(&mut self, node: NodeId, job: JobId) -> Option<&mut TrainRun> {
        self.slots[node as usize]
            .runs
            .iter_mut()
            .find(|r| r.job == job)
    }

    /// Starts `run` on `node`, replacing its job's trainer there if any; kept in job order.
    fn insert_run(&mut self, node: NodeId, run: TrainRun) {
        let runs = &mut self.slots[node as usize].runs;
        let at = runs.partition_point(|r| r.job < run.job);
        match runs.get_mut(at) {
            Some(r) if r.job == run.job => *r = run,
            _ => runs.insert(at, run),
        }
    }

    fn remove_run(&mut self, node: NodeId, job: JobId) {
        self.slots[node as usize].runs.retain(|r| r.job != job);
    }

    fn id_of(&mut self, h: B256) -> Hash {
        self.ids.id_of(h)
    }

    fn b256_of(&mut self, id: Hash) -> B256 {
        self.ids.b256_of(id)
    }
}

/// The training model's checkpoint ids (counted from 1 by `World::new_hash`) as 256-bit
/// hashes and back. A minted id's hash is the id left-padded, so only the fact that it was
/// minted is kept, a bit per id: two hash maps of every checkpoint of a 10,000-node day
/// were a third of its memory, and each lookup a cache miss. Hashes the model did not mint
/// (spec hashes) are numbered above every checkpoint id, in the order they are first seen.
#[derive(Default)]
struct HashIds {
    minted: fixedbitset::FixedBitSet,
    /// How many distinct hashes have an id, minted or not: the next foreign hash's number.
    count: u64,
    foreign_ids: FastMap<B256, Hash>,
    foreign: FastMap<Hash, B256>,
}

impl HashIds {
    fn is_minted(&self, id: Hash) -> bool {
        usize::try_from(id).is_ok_and(|i| self.minted.contains(i))
    }

    /// The id a minted hash is the padding of.
    fn minted_id(&self, h: &B256) -> Option<Hash> {
        let (pad, low) = h.split_at(24);
        if pad.iter().any(|b| *b != 0) {
            return None;
        }
        let id = u64::from_be_bytes(low.try_into().ok()?);
        self.is_minted(id).then_some(id)
    }

    fn known(&self, h: &B256) -> Option<Hash> {
        self.minted_id(h)
            .or_else(|| self.foreign_ids.get(h).copied())
    }

    fn id_of(&mut self, h: B256) -> Hash {
        if let Some(id) = self.known(&h) {
            return id;
        }
        self.count += 1;
        let id = crate::world::SPEC_HASH_BASE + self.count;
        self.foreign_ids.insert(h, id);
        self.foreign.insert(id, h);
        id
    }

    fn b256_of(&mut self, id: Hash) -> B256 {
        if let Some(h) = self.foreign.get(&id) {
            return *h;
        }
        let h = B256::left_padding_from(&id.to_be_bytes());
        if self.is_minted(id) {
            return h;
        }
        self.count += 1;
        match usize::try_from(id) {
            // Checkpoint ids are counted from 1, far below the foreign ones.
            Ok(i) if id < crate::world::SPEC_HASH_BASE => self.minted.grow_and_insert(i),
            _ => {
                self.foreign_ids.insert(h, id);
                self.foreign.insert(id, h);
            }
        }
        h
    }
}

impl World {
    fn now_t(&self) -> Time {
        Time::from_millis(self.now)
    }

    /// Feeds one input to a node's machine, then executes what it asks for.
    fn feed(&mut self, node: NodeId, f: impl FnOnce(&mut Roles, Time)) {
        let now = self.now_t();
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let Some(m) = d.slots[node as usize].roles.as_mut() else {
            return;
        };
        f(m, now);
        self.drain(node);
    }

    fn drain(&mut self, node: NodeId) {
        loop {
            let Some(d) = self.driver.as_mut() else {
                return;
            };
            let Some(m) = d.slots[node as usize].roles.as_mut() else {
                return;
            };
            let Some(out) = m.poll_output() else {
                break;
            };
            self.execute(node, out);
        }
        // One poll timer per node, re-armed when the machine wants an earlier one.
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let Some(m) = d.slots[node as usize].roles.as_mut() else {
            return;
        };
        let next = m.poll_timeout();
        self.arm(node, next);
    }

    /// Arms the node's poll timer for the machine's next timeout `next`, unless an earlier
    /// one is armed already.
    fn arm(&mut self, node: NodeId, next: Option<Time>) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        if let Some(t) = next {
            // Never zero delay: a machine that keeps reporting a due timeout must not spin
            // the clock in place.
            let at = t.as_millis().max(self.now + 1);
            if d.slots[node as usize]
                .armed()
                .is_none_or(|a| at < a || a < self.now)
            {
                d.slots[node as usize].arm(Some(at));
                let delay = at - self.now;
                self.timer(node, delay, Timer::Poll);
            }
        }
    }

    fn execute(&mut self, node: NodeId, out: Output) {
        match out {
            Output::Publish { topic, message } => {
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                d.signed[kind(&message)] += 1;
                // A scratch list, reused: one publication after another would allocate one.
                let mut subs = std::mem::take(&mut d.scratch);
                subs.clear();
                if let Some(s) = d.subs.get(&TopicKey::new(&topic)) {
                    subs.extend(s.iter().copied().filter(|to| *to != node));
                }
                // The jobs topic spans every provider: within a bid window a mesh reaches
                // some of them, `offer_fanout` drawn at random (all of them in small swarms).
                let fanout = self.cfg.protocol.offer_fanout as usize;
                if topic == gp::topics::JOBS_TOPIC && subs.len() > fanout {
                    for i in 0..fanout {
                        let j = i + d.gossip_rng.below((subs.len() - i) as u64) as usize;
                        subs.swap(i, j);
                    }
                    subs.truncate(fanout);
                    subs.sort_unstable();
                }
                // Checked once for every receiver. A publication that fails the stateless
                // checks would be refused by each receiver without effect: it goes nowhere.
                let Ok(checked) = Checked::new(message, &d.domain, d.scheme) else {
                    d.scratch = subs;
                    return;
                };
                let msg = std::rc::Rc::new(checked);
                for to in &subs {
                    self.send(node, *to, Msg::Wire(msg.clone()));
                }
                if let Some(d) = self.driver.as_mut() {
                    d.scratch = subs;
                }
            }
            Output::Subscribe { topic } => {
                if let Some(d) = self.driver.as_mut() {
                    d.subscribe(node, topic);
                }
            }
            Output::Unsubscribe { topic } => {
                if let Some(d) = self.driver.as_mut() {
                    d.unsubscribe(node, &topic);
                }
            }
            Output::SubmitTx { id, tx } => self.submit_chain_tx(node, id, tx),
            Output::FetchBlob { hash, from } => {
                let source = from
                    .and_then(|a| self.driver.as_ref().and_then(|d| d.node(&a)))
                    .unwrap_or(0);
                let served = self
                    .provider_index(source)
                    .is_none_or(|p| self.providers[p].online);
                let bytes = self.cfg.job.checkpoint_bytes;
                let t = if served {
                    self.net
                        .transfer_ms(source as usize, node as usize, bytes, &mut self.net_rng)
                } else {
                    None
                };
                let (delay, ok) = match t {
                    Some(d) => (d, true),
                    None => (1_000, false),
                };
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let hash = d.id_of(hash);
                if !ok {
                    self.unserved.insert(hash);
                }
                self.timer(node, delay, Timer::Blob { hash, ok });
            }
            Output::StartTraining {
                job_id,
                epoch,
                from_step,
                from_checkpoint,
                until_step,
                checkpoint_interval,
                ..
            } => {
                let Some(job) = job_u64(job_id) else { return };
                let run = TrainRun {
                    job,
                    epoch,
                    from_step,
                    until: until_step,
                    interval: checkpoint_interval.max(1),
                    parent_step: from_step,
                    parent: from_checkpoint,
                    started: None,
                };
                // A new epoch of the same job replaces its trainer: count that first.
                let previous = self
                    .driver
                    .as_ref()
                    .and_then(|d| d.run(node, job))
                    .map(|r| (r.job, r.epoch));
                if let Some((j, e)) = previous {
                    self.stop_run(node, j, e);
                }
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                d.insert_run(node, run);
                // The trainer fetches the start checkpoint from the client or a verifier first.
                let client = self.book(job).map_or(0, |b| b.client);
                let bytes = self.cfg.job.checkpoint_bytes;
                let delay = self
                    .net
                    .transfer_ms(client as usize, node as usize, bytes, &mut self.net_rng)
                    .unwrap_or(1_000);
                self.timer(node, delay, Timer::TrainStart { job, epoch });
            }
            // Job data is not modelled: there is nothing to fetch ahead.
            Output::PrepareJob { .. } => {}
            Output::StopTraining { job_id, epoch } => {
                let Some(job) = job_u64(job_id) else { return };
                self.stop_run(node, job, epoch);
            }
            Output::RunQualityTest {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                baseline,
                ..
            } => {
                let (Some(job), Some(d)) = (job_u64(job_id), self.driver.as_mut()) else {
                    return;
                };
                let hash = d.id_of(checkpoint_hash);
                let baseline = d.id_of(baseline);
                let delay = ms(self.cfg.job.quality_test_s);
                self.timer(
                    node,
                    delay,
                    Timer::Quality {
                        job,
                        hash,
                        baseline,
                        epoch,
                        step,
                    },
                );
            }
            Output::RunSpotCheck {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                steps,
                ..
            } => {
                let job = job_u64(job_id).unwrap_or(0);
                let model = StateHashes::new(job);
                // As the real runner: every hash from the anchor through the sampled step must
                // be the honest one, since it replays them all.
                let pass = steps.iter().all(|s| {
                    !s.hashes.is_empty()
                        && (s.anchor_step..=s.step)
                            .zip(&s.hashes)
                            .all(|(i, h)| *h == model.honest(i))
                });
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let hash = d.id_of(checkpoint_hash);
                // It replays from the anchor, not one step: what it costs is what it replays.
                let replayed: u64 = steps.iter().map(|s| s.replayed()).sum();
                let delay = ms(self.cfg.job.spot_step_s * replayed as f64);
                self.timer(
                    node,
                    delay,
                    Timer::Spot {
                        job,
                        hash,
                        epoch,
                        step,
                        pass,
                    },
                );
            }
            Output::Notice(n) => self.notice(node, n),
        }
    }

    fn quality(
        &self,
        job: JobId,
        epoch: Epoch,
        step: Step,
        id: Hash,
        base_id: Hash,
    ) -> QualityReport {
        let observed = self.observe(id, job, epoch, step);
        let base = self
            .truths
            .get(&base_id)
            .map_or(self.cfg.job.acc_base, |t| t.accuracy);
        let pass = quality_ok(&observed, step, base, &self.cfg.job);
        QualityReport {
            pass,
            accuracy: observed.accuracy,
            loss: observed.loss,
        }
    }

    fn stop_run(&mut self, node: NodeId, job: JobId, epoch: Epoch) {
        let now = self.now;
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let Some(run) = d.run(node, job) else {
            return;
        };
        if run.epoch != epoch {
            return;
        }
        let run = run.clone();
        d.remove_run(node, job);
        if let (Some(t0), Some(p)) = (run.started, self.provider_index(node))
            && let Some(rate) = self.providers[p].rate
        {
            let done = ((now - t0) as f64 / 1000.0 * rate).floor() as u64;
            self.metrics.steps_trained += done.min(run.until - run.from_step);
        }
    }

    fn notice(&mut self, node: NodeId, n: Notice) {
        if let Notice::ProviderLost {
            job_id, provider, ..
        } = n
        {
            let Some(job) = job_u64(job_id) else { return };
            let now = self.now;
            let failed_at = self.book_mut(job).and_then(|b| b.failed_at.take());
            match failed_at {
                Some(t) => self.metrics.detection_ms.push(now - t),
                None => self.metrics.false_detections += 1,
            }
            if let Some(b) = self.book_mut(job) {
                b.recovering = Some((failed_at.unwrap_or(now), false));
            }
            let p = self.driver.as_ref().and_then(|d| d.node(&provider));
            if let Some(p) = p {
                self.note(|w| format!("Job {job}: {} noticed lost by {}", w.name(p), w.name(node)));
            }
        }
    }

    fn submit_chain_tx(&mut self, node: NodeId, id: TxId, tx: ChainTx) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        d.crypto.recovered_on_chain += match &tx {
            ChainTx::Assign { .. } => 1,
            ChainTx::AcceptCheckpoint { sigs, .. } | ChainTx::RejectCheckpoint { sigs, .. } => {
                sigs.len() as u64
            }
            _ => 0,
        };
        let tag = d.next_tag;
        d.next_tag += 1;
        d.tx_ids.insert(tag, (node, id));
        let delay = self.net.latency_ms(&mut self.net_rng);
        self.at(
            delay,
            Event::TxArrive {
                from: node,
                call: Box::new(Call::Tx(tx)),
                tag,
            },
        );
    }
}

impl World {
    /// A gossip message reaches a node's machine.
    pub fn drive_message(&mut self, to: NodeId, msg: &Checked) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        if d.slots[to as usize].roles.is_none() {
            return;
        }
        d.delivered[kind(msg.message())] += 1;
        if let Message::Heartbeat(h) = msg.message()
            && job_u64(h.job_id)
                .and_then(|job| self.job_client(job))
                .is_none_or(|c| c != to)
            && let Some(d) = self.driver.as_mut()
        {
            d.crypto.heartbeats_off_client += 1;
        }
        if let Message::JobOffer(o) = msg.message()
            && let Some(job) = job_u64(o.job_id)
        {
            self.drive_look_up(to, job);
        }
        self.feed(to, |m, now| {
            m.handle_checked(now, msg);
        });
    }

    /// A provider's chain client reads a job it has not followed yet from the chain, as the
    /// first offer or assignment for it arrives: `JobCreated`, and the event that ended it if
    /// it has ended. From then on the provider hears the job's chain events.
    fn drive_look_up(&mut self, node: NodeId, job: JobId) {
        if self.provider_index(node).is_none() {
            return;
        }
        let Some(d) = self.driver.as_ref() else {
            return;
        };
        if d.followers.get(&job).is_some_and(|f| f.contains(&node)) {
            return;
        }
        let ended = d.ended.get(&job).cloned();
        let Some(created) = self.escrow.created_event(job_u256(job)) else {
            return;
        };
        let drawn = self.escrow.drawn_event(job_u256(job));
        let block_time = self.chain_time_s();
        for event in std::iter::once(created).chain(drawn).chain(ended.clone()) {
            self.feed(node, |m, now| {
                m.handle_input(now, Input::Chain { block_time, event })
            });
        }
        if ended.is_none()
            && let Some(d) = self.driver.as_mut()
        {
            d.followers.entry(job).or_default().insert(node);
            d.follows[node as usize].insert(job);
        }
    }

    /// Who hears a chain event of `job` under this driver: the job's client and listed
    /// verifiers, the providers following it (but not decisions on others' checkpoints) and
    /// the one an assignment or a rejection names. A job's end
    /// is remembered (for late look-ups) and its followers dropped.
    pub fn drive_recipients(&mut self, job: JobId, e: &ChainEvent) -> Vec<NodeId> {
        let mut to: Vec<NodeId> = Vec::new();
        if let Some(b) = self.book(job) {
            to.push(b.client);
            to.extend(b.verifiers.iter().copied());
        }
        if let ChainEvent::ProviderAssigned { provider, .. } = e
            && let Some(p) = self.node_of(provider)
        {
            to.push(p);
        }
        // A provider's chain client asks for the events that change what its machine does:
        // a job's epochs and its end, and decisions naming itself (which settle what it
        // announced). Decisions on other providers' checkpoints (nearly all of a run's escrow
        // events, each to the dozens of providers that saw the offer) change nothing in a
        // provider machine, so its log filter leaves them out.
        let bidders_hear = match e {
            ChainEvent::CheckpointAccepted { provider, .. }
            | ChainEvent::CheckpointRejected { provider, .. } => {
                if let Some(p) = self.node_of(provider) {
                    to.push(p);
                }
                false
            }
            _ => true,
        };
        let Some(d) = self.driver.as_mut() else {
            return to;
        };
        if bidders_hear && let Some(f) = d.followers.get(&job) {
            to.extend(f.iter().copied());
        }
        if matches!(
            e,
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. }
        ) {
            for n in d.followers.remove(&job).unwrap_or_default() {
                d.follows[n as usize].remove(&job);
            }
            d.ended.insert(job, e.clone());
        }
        to
    }

    pub fn drive_timer(&mut self, node: NodeId, timer: Timer) {
        match timer {
            Timer::Poll => {
                // A poll superseded by an earlier one is left in the queue; only the armed
                // one runs. (Running stale ones re-armed a duplicate that then fired
                // alongside the real one for the rest of the run.)
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                if d.slots[node as usize].armed() != Some(self.now) {
                    return;
                }
                d.slots[node as usize].arm(None);
                // Armed for a deadline that has moved on since (a client's failure detector
                // moves with every heartbeat): nothing is due, so the machine is not woken
                // (`poll_timeout` is the earliest time `handle_timeout` has something to do);
                // only the timer is armed again.
                let Some(m) = d.slots[node as usize].roles.as_ref() else {
                    return;
                };
                let next = m.poll_timeout();
                if next.is_none_or(|t| t.as_millis() > self.now) {
                    self.arm(node, next);
                    return;
                }
                self.report_progress(node);
                self.feed(node, |m, now| m.handle_timeout(now));
            }
            Timer::CreateJob => self.drive_create_job(node),
            Timer::Expire { job } => {
                let live = self
                    .escrow
                    .job(job_u256(job))
                    .is_some_and(|j| j.status.can_expire());
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                if let (true, Some(c)) = (
                    live,
                    d.slots[node as usize]
                        .roles
                        .as_mut()
                        .and_then(Roles::client_mut),
                ) {
                    c.expire(job_u256(job));
                    self.drain(node);
                }
            }
            Timer::Blob { hash, ok } => {
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let hash = d.b256_of(hash);
                self.feed(node, |m, now| {
                    m.handle_input(now, Input::BlobFetched { hash, ok })
                });
            }
            Timer::TrainStart { job, epoch } => {
                let now = self.now;
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let Some(run) = d.run_mut(node, job) else {
                    return;
                };
                if run.job != job || run.epoch != epoch || run.started.is_some() {
                    return;
                }
                run.started = Some(now);
                let (from, interval, until) = (run.from_step, run.interval, run.until);
                self.training_started(job, node, from, now);
                let next = ((from / interval) + 1) * interval;
                self.schedule_run_checkpoint(node, job, epoch, next.min(until));
            }
            Timer::CheckpointDue { job, epoch, step } => {
                self.drive_checkpoint(node, job, epoch, step)
            }
            Timer::Quality {
                job,
                hash,
                baseline,
                epoch,
                step,
            } => {
                let mut report = self.quality(job, epoch, step, hash, baseline);
                // A byzantine verifier's runner says fail whatever the test found (the
                // node's `--fault reject-all`): its machine votes reject on everything.
                if self.is_byzantine(node) {
                    report.pass = false;
                }
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let checkpoint_hash = d.b256_of(hash);
                self.feed(node, |m, now| {
                    m.handle_input(
                        now,
                        Input::QualityResult {
                            job_id: job_u256(job),
                            epoch,
                            step,
                            checkpoint_hash,
                            report,
                        },
                    )
                });
            }
            Timer::Spot {
                job,
                hash,
                epoch,
                step,
                pass,
            } => {
                let Some(d) = self.driver.as_mut() else {
                    return;
                };
                let checkpoint_hash = d.b256_of(hash);
                self.feed(node, |m, now| {
                    m.handle_input(
                        now,
                        Input::SpotCheckResult {
                            job_id: job_u256(job),
                            epoch,
                            step,
                            checkpoint_hash,
                            pass,
                        },
                    )
                });
            }
        }
    }

    /// The node's trainers report their step (`StepDone`) just before its machine's timer
    /// runs, so the heartbeats it sends carry the step reached by then. The node's trainer
    /// reports every step; the machine reads only the latest when it heartbeats, so
    /// reporting at that moment is what it sees, without an event per report.
    fn report_progress(&mut self, node: NodeId) {
        let now = self.now_t();
        let Some(rate) = self
            .provider_index(node)
            .and_then(|p| self.providers[p].rate)
        else {
            return;
        };
        let job_cfg = &self.cfg.job;
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let slot = &mut d.slots[node as usize];
        let Some(m) = slot.roles.as_mut() else {
            return;
        };
        // Fed without draining: the handle_timeout that follows executes what they ask for
        // and arms the one timer.
        for r in &slot.runs {
            let Some(step) = r.progress(self.now, rate) else {
                continue;
            };
            m.handle_input(
                now,
                Input::StepDone {
                    job_id: job_u256(r.job),
                    epoch: r.epoch,
                    step,
                    loss: training::loss_at(job_cfg, step as f64) as f32,
                },
            );
        }
    }

    fn schedule_run_checkpoint(&mut self, node: NodeId, job: JobId, epoch: Epoch, step: Step) {
        let Some(run) = self.driver.as_ref().and_then(|d| d.run(node, job)) else {
            return;
        };
        let (Some(t0), Some(p)) = (run.started, self.provider_index(node)) else {
            return;
        };
        let Some(rate) = self.providers[p].rate else {
            return;
        };
        let at = t0 + training::train_ms(step - run.from_step, rate);
        self.timer(
            node,
            at.saturating_sub(self.now),
            Timer::CheckpointDue { job, epoch, step },
        );
    }

    fn drive_checkpoint(&mut self, node: NodeId, job: JobId, epoch: Epoch, step: Step) {
        let Some(p) = self.provider_index(node) else {
            return;
        };
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let Some(run) = d.run(node, job).cloned() else {
            return;
        };
        if run.job != job || run.epoch != epoch {
            return;
        }
        let parent = d.id_of(run.parent);
        let (hash, mismatch) = self.produce_checkpoint(p, job, epoch, step, parent);
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let checkpoint_hash = d.b256_of(hash);
        let model = StateHashes::new(job);
        let mut state_hashes = Vec::with_capacity((step - run.parent_step + 1) as usize);
        state_hashes.push(model.honest(run.parent_step));
        for s in run.parent_step + 1..=step {
            let fake =
                mismatch >= 1.0 || (mismatch > 0.0 && self.providers[p].rng.chance(mismatch));
            state_hashes.push(if fake {
                model.fabricated(s, epoch)
            } else {
                model.honest(s)
            });
        }
        if let Some(run) = d.run_mut(node, job) {
            run.parent_step = step;
            run.parent = checkpoint_hash;
        }
        self.feed(node, |m, now| {
            m.handle_input(
                now,
                Input::CheckpointReady {
                    job_id: job_u256(job),
                    epoch,
                    step,
                    checkpoint_hash,
                    state_hashes,
                },
            )
        });
        if step < run.until {
            self.schedule_run_checkpoint(node, job, epoch, (step + run.interval).min(run.until));
        }
    }

    fn drive_create_job(&mut self, c: NodeId) {
        let cfg = self.cfg.job.clone();
        let continuous = cfg.jobs_per_client == 0;
        let cs = &self.clients[c as usize];
        if cs.current.is_some()
            || (continuous && self.now > ms(cfg.last_start_s))
            || (!continuous && cs.jobs_started >= cfg.jobs_per_client)
        {
            return;
        }
        let cs = &mut self.clients[c as usize];
        cs.jobs_started += 1;
        cs.current = Some(0);
        let now_s = self.chain_time_s();
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        d.job_counter += 1;
        let mut spec = JobSpec::fashion_cnn_demo(
            B256::repeat_byte(1),
            B256::repeat_byte(2),
            B256::repeat_byte(3),
        );
        spec.seed = d.job_counter;
        spec.total_steps = cfg.total_steps;
        spec.checkpoint_interval = cfg.checkpoint_interval;
        spec.min_memory_bytes = cfg.min_memory_bytes;
        spec.quality.spot_check_steps = cfg.spot_check_steps;
        let params = gp::client::JobParams {
            token: escrow::TOKEN,
            budget: u256(cfg.budget),
            max_price_per_step: u256(cfg.max_price_per_step),
            committee_size: cfg.committee_size,
            quorum: cfg.quorum,
            verifier_fee: u256(cfg.verifier_fee),
            deadline: now_s + cfg.deadline_s,
            grace: cfg.grace_s,
        };
        if let Some(m) = d.slots[c as usize]
            .roles
            .as_mut()
            .and_then(Roles::client_mut)
        {
            m.create_job(spec, params);
        }
        self.drain(c);
    }

    /// An escrow event reaches a node: to its machine as `Input::Chain`, plus what the node's
    /// own chain client does around the machine (expiry keeper, withdrawals, re-staking).
    pub fn drive_chain(&mut self, to: NodeId, e: &escrow::Event) {
        let Some(event) = e.job() else {
            return;
        };
        let me = to;
        let my_address = self.address_of(me);
        let job_id = escrow::job_no(event.job_id());
        if let ChainEvent::ProviderAssigned { provider, .. } = event
            && *provider == my_address
        {
            self.drive_look_up(to, job_id);
        }
        let block_time = self.chain_time_s();
        // A verifier's chain client reads a job whose committee seats it (`JobCreated`, as
        // `getJob` gives it) before handing the machine the draw: the machine learns its seat
        // from `CommitteeDrawn`, and the job's terms from the creation.
        if let ChainEvent::CommitteeDrawn { committee, .. } = event
            && self.verifier_index(me).is_some()
            && committee.contains(&my_address)
            && let Some(created) = self.escrow.created_event(event.job_id())
        {
            self.feed(to, |m, now| {
                m.handle_input(
                    now,
                    Input::Chain {
                        block_time,
                        event: created,
                    },
                )
            });
        }
        let input = Input::Chain {
            block_time,
            event: event.clone(),
        };
        self.feed(to, |m, now| m.handle_input(now, input));
        match event {
            ChainEvent::JobCreated {
                client,
                deadline,
                grace,
                ..
            } if *client == my_address => {
                self.clients[me as usize].current = Some(job_id);
                let at = deadline
                    .saturating_add(*grace)
                    .saturating_mul(1000)
                    .saturating_add(1);
                self.timer(
                    me,
                    at.saturating_sub(self.now),
                    Timer::Expire { job: job_id },
                );
            }
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. } => {
                if self
                    .escrow
                    .job(event.job_id())
                    .is_some_and(|j| j.client == my_address)
                {
                    self.clients[me as usize].current = None;
                    // A completed job's refund is credited by the `settle` its client machine
                    // sends; an expired one's at once.
                    if matches!(event, ChainEvent::JobExpired { .. }) {
                        self.request_withdraw(me);
                    }
                    self.timer(me, 1_000, Timer::CreateJob);
                }
                if matches!(event, ChainEvent::JobExpired { .. })
                    && self.verifier_index(me).is_some()
                    && !self
                        .escrow
                        .withdrawable(my_address, escrow::TOKEN)
                        .is_zero()
                {
                    self.request_withdraw(me);
                }
                if let Some(run) = self
                    .driver
                    .as_ref()
                    .and_then(|d| d.run(me, job_id))
                    .cloned()
                {
                    self.stop_run(me, run.job, run.epoch);
                }
            }
            ChainEvent::EpochEnded { epoch, .. } => {
                if self
                    .driver
                    .as_ref()
                    .and_then(|d| d.run(me, job_id))
                    .is_some_and(|r| r.epoch == *epoch)
                {
                    self.stop_run(me, job_id, *epoch);
                }
                if self.provider_index(me).is_some()
                    && !self
                        .escrow
                        .withdrawable(my_address, escrow::TOKEN)
                        .is_zero()
                {
                    self.request_withdraw(me);
                }
            }
            ChainEvent::JobSettled { client, .. } if *client == my_address => {
                self.request_withdraw(me);
            }
            // A committee member's fees are credited when the job is settled (or expired,
            // above).
            ChainEvent::JobSettled { .. }
                if self.verifier_index(me).is_some()
                    && !self
                        .escrow
                        .withdrawable(my_address, escrow::TOKEN)
                        .is_zero() =>
            {
                self.request_withdraw(me);
            }
            ChainEvent::CheckpointRejected { provider, .. } if *provider == my_address => {
                let have = self.escrow.stake_of(my_address).bonded;
                let need = self.escrow.min_stake;
                if have < need {
                    self.submit(
                        me,
                        Call::Register {
                            amount: need - have,
                        },
                    );
                }
            }
            _ => {}
        }
    }

    /// The node's chain client withdraws its credits, unless a withdraw of its is pending.
    fn request_withdraw(&mut self, node: NodeId) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        if std::mem::replace(&mut d.withdrawing[node as usize], true) {
            return;
        }
        self.submit(
            node,
            Call::Tx(ChainTx::Withdraw {
                token: escrow::TOKEN,
            }),
        );
    }

    /// A withdraw from `node` was mined (paid or reverted): the next credit is withdrawn
    /// again.
    pub fn drive_withdraw_mined(&mut self, node: NodeId) {
        if let Some(d) = self.driver.as_mut() {
            d.withdrawing[node as usize] = false;
        }
    }

    pub fn drive_tx_failed(&mut self, to: NodeId, tag: u64, error: &escrow::EscrowError) {
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        let Some((node, id)) = d.tx_ids.remove(&tag) else {
            return;
        };
        if node != to {
            return;
        }
        let reason = error.to_string();
        self.feed(to, |m, now| {
            m.handle_input(now, Input::TxFailed { id, reason })
        });
    }

    pub fn drive_tx_done(&mut self, tag: u64) {
        if let Some(d) = self.driver.as_mut() {
            d.tx_ids.remove(&tag);
        }
    }

    /// A provider process dies: its machine, subscriptions and trainer go with it.
    pub fn drive_kill(&mut self, node: NodeId) {
        for (job, epoch) in self.drive_current(node) {
            self.stop_run(node, job, epoch);
        }
        let Some(d) = self.driver.as_mut() else {
            return;
        };
        d.slots[node as usize].roles = None;
        d.slots[node as usize].arm(None);
        for topic in std::mem::take(&mut d.topics_of[node as usize]) {
            d.unsubscribe(node, &topic);
        }
        for job in std::mem::take(&mut d.follows[node as usize]) {
            if let Some(f) = d.followers.get_mut(&job) {
                f.remove(&node);
            }
        }
    }

    /// A provider process restarts: a fresh machine, which follows jobs again as offers or
    /// an assignment for them arrive (its chain client looks each up then).
    pub fn drive_revive(&mut self, node: NodeId) {
        let Some(mut d) = self.driver.take() else {
            return;
        };
        let key = d.keys[node as usize].clone();
        let m = d.fresh(self, node, &key);
        d.slots[node as usize].roles = Some(m);
        self.driver = Some(d);
    }

    /// The epochs a provider is training, per the driver (for failure bookkeeping).
    pub fn drive_current(&self, node: NodeId) -> Vec<(JobId, Epoch)> {
        self.driver.as_ref().map_or_else(Vec::new, |d| {
            d.slots[node as usize]
                .runs
                .iter()
                .map(|r| (r.job, r.epoch))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_and_foreign_hashes_map_both_ways() {
        let mut ids = HashIds::default();
        let spec = B256::repeat_byte(0xab);
        let padded = |id: u64| B256::left_padding_from(&id.to_be_bytes());
        // Not minted yet: unknown, and taken as foreign if an id is asked for.
        assert_eq!(ids.known(&padded(7)), None);
        for id in [1, 2, 64, 65, 1_000] {
            assert_eq!(ids.b256_of(id), padded(id));
            assert_eq!(
                ids.b256_of(id),
                padded(id),
                "asking again mints nothing new"
            );
        }
        assert_eq!(ids.known(&padded(64)), Some(64));
        assert_eq!(ids.known(&padded(63)), None);
        // Foreign hashes are numbered above the checkpoint ids, after every hash seen so far.
        let first = ids.id_of(spec);
        assert_eq!(first, crate::world::SPEC_HASH_BASE + 6);
        assert_eq!(ids.id_of(spec), first);
        assert_eq!(ids.b256_of(first), spec);
        assert_eq!(ids.id_of(padded(65)), 65);
        let unminted = ids.id_of(padded(3));
        assert_eq!(unminted, crate::world::SPEC_HASH_BASE + 7);
        assert_eq!(ids.b256_of(unminted), padded(3));
    }

    /// The state hashes are the values the training model has always minted (a report
    /// carries none of them, but a changed value would move nothing but the announcements'
    /// roots, silently).
    #[test]
    fn state_hashes_are_the_models_mix() {
        fn reference(tag: u64, job: JobId, step: Step, epoch: Epoch) -> B256 {
            let seed = mix(mix(mix(tag) ^ job) ^ step) ^ epoch;
            let mut out = [0u8; 32];
            for (lane, chunk) in out.chunks_exact_mut(8).enumerate() {
                chunk.copy_from_slice(
                    &mix(seed ^ (lane as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes(),
                );
            }
            B256::from(out)
        }
        for (job, step, epoch) in [(1, 0, 1), (7, 500, 2), (u64::MAX, 19_999, 9)] {
            let model = StateHashes::new(job);
            assert_eq!(
                model.honest(step),
                reference(0x686f_6e65_7374, job, step, 0)
            );
            assert_eq!(
                model.fabricated(step, epoch),
                reference(0x6661_6272_6963, job, step, epoch)
            );
        }
        assert_eq!(
            mix(0),
            0xe220_a839_7b1d_cdaf,
            "SplitMix64's finaliser, unchanged"
        );
    }

    /// Subscribers stay sorted and unique through inserts and removals, across the move
    /// from the inline array to a vector.
    #[test]
    fn subscribers_stay_a_sorted_set() {
        let mut s = Subscribers::default();
        let mut model = BTreeSet::new();
        let mut x = 7u32;
        for i in 0..400 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345) % 23;
            if i % 3 == 2 {
                s.remove(x);
                model.remove(&x);
            } else {
                s.insert(x);
                model.insert(x);
            }
            assert_eq!(
                s.iter().copied().collect::<Vec<_>>(),
                model.iter().copied().collect::<Vec<_>>()
            );
            assert_eq!(s.is_empty(), model.is_empty());
        }
    }
}
