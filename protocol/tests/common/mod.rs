//! Shared fixtures for the role tests: keys, the demo job, and message/event builders.
#![allow(dead_code)]

pub mod world;

use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason, TxId};
use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::escrow::{Block, Call, Escrow, Params};
use gpuchain_protocol::messages::state_root;
use gpuchain_protocol::signing::{Scheme, Sig65, SigningKey};
use gpuchain_protocol::spec::JobSpec;
use gpuchain_protocol::wire::*;
use gpuchain_protocol::{Address, Hash, Input, Notice, Output, StateMachine, Time, U256};

pub const BLOCK_TIME: u64 = 1_000_000;
pub const MAX_PRICE: u64 = 5000;

/// The demo job's token (also the stake token), and the stake each provider bonds.
pub const TOKEN: Address = Address::repeat_byte(0x5d);
pub const MIN_STAKE: u64 = 100_000;
/// What puts a verifier in the escrow's pool.
pub const MIN_VERIFIER_STAKE: u64 = 50_000;
/// The demo job's fee per member per decision: 0.001 USDC.
pub const VERIFIER_FEE: u64 = 1_000;
/// The escrow's decision window, seconds.
pub const DECISION_WINDOW: u64 = 120;
/// The block `JobCreated` of the demo job was mined in.
pub const SEED_BLOCK: u64 = 7;

pub fn domain() -> EscrowDomain {
    EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xee),
    }
}

pub fn job() -> U256 {
    U256::from(1)
}

pub fn t(ms: u64) -> Time {
    Time::from_millis(ms)
}

pub fn spec() -> JobSpec {
    JobSpec::fashion_cnn_demo(
        Hash::repeat_byte(0x10),
        Hash::repeat_byte(0x11),
        Hash::repeat_byte(0x12),
    )
}

pub struct Keys {
    pub client: SigningKey,
    pub a: SigningKey,
    pub p: SigningKey,
    pub b: SigningKey,
    pub v1: SigningKey,
    pub v2: SigningKey,
    pub outsider: SigningKey,
}

pub fn keys() -> Keys {
    Keys {
        client: SigningKey::from_seed(100),
        a: SigningKey::from_seed(101),
        p: SigningKey::from_seed(102),
        b: SigningKey::from_seed(103),
        v1: SigningKey::from_seed(104),
        v2: SigningKey::from_seed(105),
        outsider: SigningKey::from_seed(106),
    }
}

/// A block at `time`, numbered so later blocks have larger numbers.
pub fn block(number: u64, time: u64) -> Block {
    Block { number, time }
}

/// A made-up hash for block `number`: what the model's `blockhash` answers once recorded.
pub fn block_hash(number: u64) -> Hash {
    gpuchain_protocol::types::blake3_hash(&number.to_le_bytes())
}

/// The escrow model deployed at [`domain`]: the client funded for the demo job, providers
/// A, P and B each bonded `MIN_STAKE` (so each can be assigned and slashed once), and the
/// two verifiers in the pool (so they are the demo job's committee). Everything in block 1.
pub fn escrow(k: &Keys) -> Escrow {
    let params = Params {
        min_stake: U256::from(MIN_STAKE),
        unbond_delay: 86_400,
        max_duration: 30 * 86_400,
        max_grace: 86_400,
        decision_window: DECISION_WINDOW,
        min_verifier_stake: U256::from(MIN_VERIFIER_STAKE),
    };
    let mut e = Escrow::new(domain(), Scheme::Secp256k1, TOKEN, params)
        .expect("a token and a minimum stake");
    for key in [&k.client, &k.a, &k.p, &k.b, &k.v1, &k.v2] {
        e.mint(TOKEN, key.address(), U256::from(5_000_000u64));
        e.approve(TOKEN, key.address(), domain().escrow, U256::MAX);
    }
    for key in [&k.a, &k.p, &k.b] {
        let stake = Call::Register {
            amount: U256::from(MIN_STAKE),
        };
        e.apply(&stake, key.address(), block(1, BLOCK_TIME))
            .expect("a funded provider can stake");
    }
    for key in [&k.v1, &k.v2] {
        let stake = Call::RegisterVerifier {
            amount: U256::from(MIN_VERIFIER_STAKE),
        };
        e.apply(&stake, key.address(), block(1, BLOCK_TIME))
            .expect("a funded verifier can stake");
    }
    e.record_block_hash(1, block_hash(1));
    e
}

/// The demo job's terms: a committee of 2, both needed, an hour to run.
pub fn job_params(budget: u64) -> gpuchain_protocol::client::JobParams {
    gpuchain_protocol::client::JobParams {
        token: TOKEN,
        budget: U256::from(budget),
        max_price_per_step: U256::from(MAX_PRICE),
        committee_size: 2,
        quorum: 2,
        verifier_fee: U256::from(VERIFIER_FEE),
        deadline: BLOCK_TIME + 3600,
        grace: 600,
    }
}

/// An honest provider machine with an 8 GiB GPU, bidding `price` a step.
pub fn provider_machine(key: &SigningKey, price: u64) -> Box<dyn StateMachine> {
    Box::new(gpuchain_protocol::provider::Provider::new(
        gpuchain_protocol::provider::ProviderConfig::new(domain(), gpu(8), U256::from(price)),
        key.clone(),
    ))
}

pub fn gpu(memory_gib: u64) -> Hardware {
    Hardware {
        device: DeviceKind::Cuda,
        memory_bytes: memory_gib << 30,
    }
}

pub fn job_created(k: &Keys) -> ChainEvent {
    let spec = spec();
    ChainEvent::JobCreated {
        job_id: job(),
        client: k.client.address(),
        token: TOKEN,
        budget: U256::from(5_000_000u64),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: spec.total_steps,
        checkpoint_interval: spec.checkpoint_interval,
        spec_hash: spec.spec_hash(),
        committee_size: 2,
        quorum: 2,
        verifier_fee: U256::from(VERIFIER_FEE),
        deadline: BLOCK_TIME + 3600,
        grace: 600,
        seed_block: SEED_BLOCK,
    }
}

/// The demo job's committee: the two verifiers.
pub fn committee(k: &Keys) -> Vec<Address> {
    vec![k.v1.address(), k.v2.address()]
}

/// The draw of [`job_created`] with `members`, its terms computed from the creation.
pub fn drawn_with(k: &Keys, members: Vec<Address>) -> ChainEvent {
    let terms = job_created(k)
        .terms_with(&members)
        .expect("a JobCreated has terms");
    ChainEvent::CommitteeDrawn {
        job_id: job(),
        committee: members,
        terms,
    }
}

/// The draw of [`job_created`]: the two verifiers.
pub fn committee_drawn(k: &Keys) -> ChainEvent {
    drawn_with(k, committee(k))
}

/// The terms hash of the drawn demo job: what every bid on it is signed over.
pub fn terms() -> Hash {
    let k = keys();
    job_created(&k)
        .terms_with(&committee(&k))
        .expect("a JobCreated has terms")
}

pub fn chain(event: ChainEvent) -> Input {
    Input::Chain {
        block_time: BLOCK_TIME,
        event,
    }
}

pub fn assigned(
    epoch: u64,
    provider: &SigningKey,
    start_step: u64,
    start_checkpoint: Hash,
) -> Input {
    chain(ChainEvent::ProviderAssigned {
        job_id: job(),
        epoch,
        provider: provider.address(),
        price_per_step: U256::from(1000),
        start_step,
        start_checkpoint,
    })
}

pub fn accepted(epoch: u64, step: u64, hash: Hash, provider: &SigningKey) -> Input {
    chain(ChainEvent::CheckpointAccepted {
        job_id: job(),
        epoch,
        step,
        checkpoint_hash: hash,
        provider: provider.address(),
        amount: U256::from(50_000),
        voters: U256::from(0b11),
        fees: U256::from(2 * VERIFIER_FEE),
    })
}

pub fn rejected(epoch: u64, step: u64, hash: Hash, provider: &SigningKey) -> Input {
    chain(ChainEvent::CheckpointRejected {
        job_id: job(),
        epoch,
        step,
        checkpoint_hash: hash,
        provider: provider.address(),
        slashed: U256::from(1),
        voters: U256::from(0b11),
        fees: U256::from(2 * VERIFIER_FEE),
    })
}

pub fn epoch_ended(epoch: u64, reason: EpochEndReason) -> Input {
    chain(ChainEvent::EpochEnded {
        job_id: job(),
        epoch,
        reason,
    })
}

pub fn offer(k: &Keys, next_epoch: u64) -> Message {
    offer_for(k, next_epoch, committee(k))
}

/// The client's offer naming `members` as the committee.
pub fn offer_for(k: &Keys, next_epoch: u64, members: Vec<Address>) -> Message {
    Message::JobOffer(
        JobOffer {
            job_id: job(),
            client: Address::ZERO,
            next_epoch,
            spec: spec(),
            max_price_per_step: U256::from(MAX_PRICE),
            quorum: (members.len() / 2 + 1) as u8,
            committee: members,
            signature: Sig65::ZERO,
        }
        .sign(&k.client),
    )
}

/// Feeds a machine the demo job's creation and draw, at `at` ms.
pub fn confirm(m: &mut impl StateMachine, at: u64, k: &Keys) {
    m.handle_input(t(at), chain(job_created(k)));
    m.handle_input(t(at), chain(committee_drawn(k)));
}

pub fn bid(key: &SigningKey, epoch: u64, price: u64, memory_gib: u64) -> Message {
    Message::Bid(
        Bid {
            job_id: job(),
            terms: terms(),
            epoch,
            provider: Address::ZERO,
            price_per_step: U256::from(price),
            expiry: BLOCK_TIME + 600,
            hardware: gpu(memory_gib),
            signature: Sig65::ZERO,
        }
        .sign(&domain(), key),
    )
}

pub fn heartbeat(key: &SigningKey, epoch: u64, seq: u64, step: u64) -> Message {
    Message::Heartbeat(
        Heartbeat {
            job_id: job(),
            epoch,
            provider: Address::ZERO,
            seq,
            step,
            loss: 0.5,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(key),
    )
}

/// Deterministic stand-in for the trainer's per-step state hashes.
pub fn state_hash(tag: u8, step: u64) -> Hash {
    let mut bytes = [tag; 32];
    bytes[..8].copy_from_slice(&step.to_le_bytes());
    Hash::from(bytes)
}

pub fn states(tag: u8, parent: u64, step: u64) -> Vec<Hash> {
    (parent..=step).map(|s| state_hash(tag, s)).collect()
}

pub fn ckpt(tag: u8, step: u64) -> Hash {
    let mut bytes = [tag; 32];
    bytes[24..].copy_from_slice(&step.to_be_bytes());
    Hash::from(bytes)
}

pub fn announce(key: &SigningKey, epoch: u64, parent: u64, step: u64, tag: u8) -> Message {
    let hashes = states(tag, parent, step);
    Message::CheckpointAnnounce(
        CheckpointAnnounce {
            job_id: job(),
            epoch,
            provider: Address::ZERO,
            parent_step: parent,
            step,
            checkpoint_hash: ckpt(tag, step),
            state_root: state_root(&hashes),
            state_hashes: hashes.into(),
            anchor_steps: gpuchain_protocol::anchors::anchor_steps(parent, step),
            signature: Sig65::ZERO,
        }
        .sign(key),
    )
}

pub fn vote(key: &SigningKey, epoch: u64, step: u64, hash: Hash, accept: bool) -> Message {
    Message::Vote(
        Vote {
            job_id: job(),
            epoch,
            step,
            checkpoint_hash: hash,
            accept,
            verifier: Address::ZERO,
            signature: Sig65::ZERO,
        }
        .sign(&domain(), key),
    )
}

pub fn drain(m: &mut impl StateMachine) -> Vec<Output> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

pub fn published(outs: &[Output]) -> Vec<Message> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Publish { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

pub fn txs(outs: &[Output]) -> Vec<(TxId, ChainTx)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::SubmitTx { id, tx } => Some((*id, tx.clone())),
            _ => None,
        })
        .collect()
}

pub fn notices(outs: &[Output]) -> Vec<Notice> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Notice(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}
