//! The codec: round trips, typed errors for unknown versions/kinds and oversize, no panics on
//! arbitrary bytes, and the stateless validator's verdicts.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use ciborium::Value;
use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::io::StateMachine;
use gpuchain_protocol::messages::state_root;
use gpuchain_protocol::signing::{Scheme, Sig65, SigningKey};
use gpuchain_protocol::spec::{HyperParams, JobSpec, ModelKind, QualityThresholds};
use gpuchain_protocol::validation::{
    Checked, RejectReason, Verdict, check_message, decode_validated, validate_message,
};
use gpuchain_protocol::wire::*;
use gpuchain_protocol::{Address, Hash, Time, U256};
use proptest::prelude::*;

fn domain() -> EscrowDomain {
    EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xee),
    }
}

fn hash() -> impl Strategy<Value = Hash> {
    any::<[u8; 32]>().prop_map(Hash::from)
}
fn addr() -> impl Strategy<Value = Address> {
    any::<[u8; 20]>().prop_map(Address::from)
}
fn u256() -> impl Strategy<Value = U256> {
    any::<[u8; 32]>().prop_map(U256::from_be_bytes)
}
fn sig() -> impl Strategy<Value = Sig65> {
    prop::collection::vec(any::<u8>(), 65).prop_map(|v| Sig65::from_slice(&v).unwrap())
}
fn finite() -> impl Strategy<Value = f64> {
    -1e12f64..1e12
}
fn hardware() -> impl Strategy<Value = Hardware> {
    (
        prop_oneof![
            Just(DeviceKind::Cpu),
            Just(DeviceKind::Cuda),
            Just(DeviceKind::Metal)
        ],
        any::<u64>(),
    )
        .prop_map(|(device, memory_bytes)| Hardware {
            device,
            memory_bytes,
        })
}

fn spec() -> impl Strategy<Value = JobSpec> {
    (
        (
            prop_oneof![Just(ModelKind::FashionCnn), Just(ModelKind::BertLora)],
            hash(),
            hash(),
            hash(),
        ),
        (
            finite(),
            finite(),
            any::<u64>(),
            prop::collection::btree_map("[a-z_]{1,8}", finite(), 0..3),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
        ),
        (
            finite(),
            any::<u64>(),
            finite(),
            finite(),
            any::<u32>(),
            finite(),
        ),
    )
        .prop_map(
            |((model, m, d, e), (lr, wd, warm, extra), (seed, total, interval, batch, mem), q)| {
                JobSpec {
                    model,
                    model_blob: m,
                    dataset_blob: d,
                    eval_blob: e,
                    hyper: HyperParams {
                        learning_rate: lr,
                        weight_decay: wd,
                        warmup_steps: warm,
                        extra,
                    },
                    seed,
                    total_steps: total,
                    checkpoint_interval: interval,
                    effective_batch: batch,
                    min_memory_bytes: mem,
                    quality: QualityThresholds {
                        min_accuracy: q.0,
                        after_step: q.1,
                        max_accuracy_drop: q.2,
                        max_loss: q.3,
                        spot_check_steps: q.4,
                        spot_check_tolerance: q.5,
                    },
                }
            },
        )
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            prop::collection::vec(any::<u8>(), 0..64),
            addr(),
            prop::collection::vec(
                prop_oneof![
                    Just(Role::Client),
                    Just(Role::Provider),
                    Just(Role::Verifier)
                ],
                0..3
            ),
            hardware(),
            ".{0,40}",
            any::<u64>(),
            sig()
        )
            .prop_map(
                |(peer_id, address, roles, hardware, blob_endpoint, issued_at, signature)| {
                    Message::NodeHello(NodeHello {
                        peer_id,
                        address,
                        roles,
                        hardware,
                        blob_endpoint,
                        issued_at,
                        signature,
                    })
                }
            ),
        (
            u256(),
            addr(),
            any::<u64>(),
            spec(),
            u256(),
            prop::collection::vec(addr(), 0..4),
            any::<u8>(),
            sig()
        )
            .prop_map(
                |(
                    job_id,
                    client,
                    next_epoch,
                    spec,
                    max_price_per_step,
                    committee,
                    quorum,
                    signature,
                )| {
                    Message::JobOffer(JobOffer {
                        job_id,
                        client,
                        next_epoch,
                        spec,
                        max_price_per_step,
                        committee,
                        quorum,
                        signature,
                    })
                }
            ),
        (
            u256(),
            any::<u64>(),
            addr(),
            u256(),
            any::<u64>(),
            hardware(),
            sig(),
            hash()
        )
            .prop_map(
                |(job_id, epoch, provider, price_per_step, expiry, hardware, signature, terms)| {
                    Message::Bid(Bid {
                        job_id,
                        terms,
                        epoch,
                        provider,
                        price_per_step,
                        expiry,
                        hardware,
                        signature,
                    })
                }
            ),
        (
            u256(),
            any::<u64>(),
            addr(),
            any::<u64>(),
            any::<u64>(),
            -1e9f32..1e9,
            sig()
        )
            .prop_map(|(job_id, epoch, provider, seq, step, loss, signature)| {
                Message::Heartbeat(Heartbeat {
                    job_id,
                    epoch,
                    provider,
                    seq,
                    step,
                    loss,
                    checkpointing: false,
                    starved_ms: 0,
                    signature,
                })
            }),
        (
            u256(),
            any::<u64>(),
            addr(),
            any::<u64>(),
            any::<u64>(),
            hash(),
            prop::collection::vec(hash(), 0..60),
            sig()
        )
            .prop_map(
                |(
                    job_id,
                    epoch,
                    provider,
                    parent_step,
                    step,
                    checkpoint_hash,
                    state_hashes,
                    signature,
                )| {
                    Message::CheckpointAnnounce(CheckpointAnnounce {
                        job_id,
                        epoch,
                        provider,
                        parent_step,
                        step,
                        checkpoint_hash,
                        state_root: state_root(&state_hashes),
                        state_hashes: state_hashes.into(),
                        anchor_steps: gpuchain_protocol::anchors::anchor_steps(parent_step, step),
                        signature,
                    })
                }
            ),
        (
            u256(),
            any::<u64>(),
            any::<u64>(),
            hash(),
            any::<bool>(),
            addr(),
            sig()
        )
            .prop_map(
                |(job_id, epoch, step, checkpoint_hash, accept, verifier, signature)| {
                    Message::Vote(Vote {
                        job_id,
                        epoch,
                        step,
                        checkpoint_hash,
                        accept,
                        verifier,
                        signature,
                    })
                }
            ),
    ]
}

proptest! {
    #[test]
    fn every_message_round_trips(msg in message()) {
        let bytes = msg.encode();
        prop_assert!(bytes.len() <= MAX_MESSAGE_SIZE);
        prop_assert_eq!(Message::decode(&bytes), Ok(msg));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Message::decode(&bytes);
        let _ = validate_message(&bytes, &domain());
    }

    #[test]
    fn mutated_messages_never_panic(msg in message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = msg.encode();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= b;
        }
        let _ = Message::decode(&bytes);
        let _ = validate_message(&bytes, &domain());
    }

    #[test]
    fn truncated_messages_are_errors(msg in message(), cut in any::<prop::sample::Index>()) {
        let bytes = msg.encode();
        let cut = cut.index(bytes.len());
        prop_assert!(Message::decode(&bytes[..cut]).is_err());
    }
}

fn envelope(version: u64, kind: u64, body: Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(
        &Value::Array(vec![version.into(), kind.into(), body]),
        &mut out,
    )
    .unwrap();
    out
}

fn vote_body() -> Value {
    let key = SigningKey::from_seed(1);
    let vote = Vote {
        job_id: U256::from(1),
        epoch: 1,
        step: 50,
        checkpoint_hash: Hash::repeat_byte(7),
        accept: true,
        verifier: Address::ZERO,
        signature: Sig65::ZERO,
    }
    .sign(&domain(), &key);
    Value::serialized(&vote).unwrap()
}

#[test]
fn unknown_version_and_kind_are_typed_errors() {
    assert_eq!(
        Message::decode(&envelope(2, 6, vote_body())),
        Err(WireError::UnsupportedVersion(2))
    );
    assert_eq!(
        Message::decode(&envelope(1, 99, vote_body())),
        Err(WireError::UnknownKind(99))
    );
    assert!(matches!(
        Message::decode(&envelope(1, 6, vote_body())),
        Ok(Message::Vote(_))
    ));
    // A Vote body under the Bid tag does not decode as a Bid.
    assert!(matches!(
        Message::decode(&envelope(1, 3, vote_body())),
        Err(WireError::BadBody(_))
    ));
    assert_eq!(
        validate_message(&envelope(7, 6, vote_body()), &domain()),
        Verdict::Reject(RejectReason::UnsupportedVersion)
    );
    assert_eq!(
        validate_message(&envelope(1, 42, vote_body()), &domain()),
        Verdict::Reject(RejectReason::UnknownKind)
    );
}

#[test]
fn oversized_is_refused_before_parsing() {
    let mut bytes = envelope(1, 6, vote_body());
    bytes.resize(MAX_MESSAGE_SIZE + 1, 0);
    assert_eq!(
        Message::decode(&bytes),
        Err(WireError::Oversized {
            size: MAX_MESSAGE_SIZE + 1,
            max: MAX_MESSAGE_SIZE
        })
    );
    assert_eq!(
        validate_message(&bytes, &domain()),
        Verdict::Reject(RejectReason::Oversized)
    );
    let hello = Message::NodeHello(NodeHello {
        peer_id: vec![0; MAX_MESSAGE_SIZE],
        address: Address::ZERO,
        roles: vec![],
        hardware: Hardware {
            device: DeviceKind::Cpu,
            memory_bytes: 0,
        },
        blob_endpoint: String::new(),
        issued_at: 0,
        signature: Sig65::ZERO,
    });
    assert!(matches!(
        hello.try_encode(),
        Err(WireError::Oversized { .. })
    ));
}

#[test]
fn trailing_bytes_and_bad_envelopes_are_refused() {
    let mut bytes = envelope(1, 6, vote_body());
    bytes.push(0);
    assert_eq!(Message::decode(&bytes), Err(WireError::TrailingBytes(1)));
    let mut two = Vec::new();
    ciborium::into_writer(&Value::Array(vec![1u64.into(), 6u64.into()]), &mut two).unwrap();
    assert_eq!(Message::decode(&two), Err(WireError::BadEnvelope));
    assert!(Message::decode(&[]).is_err());
}

#[test]
fn hostile_lengths_and_nesting_do_not_panic_or_allocate_wildly() {
    // A byte string claiming 2^63 bytes, an array claiming 2^32 items, 10k nested arrays.
    let huge_bytes = [0x5b, 0x80, 0, 0, 0, 0, 0, 0, 0];
    let huge_array = [0x9a, 0xff, 0xff, 0xff, 0xff, 0x01];
    let nested = vec![0x81u8; 10_000];
    for bytes in [&huge_bytes[..], &huge_array[..], &nested[..]] {
        assert!(Message::decode(bytes).is_err());
    }
}

#[test]
fn validator_checks_signatures_and_commitments() {
    let key = SigningKey::from_seed(3);
    let hashes: Vec<Hash> = (0..=50u8).map(Hash::repeat_byte).collect();
    let ann = CheckpointAnnounce {
        job_id: U256::from(1),
        epoch: 1,
        provider: Address::ZERO,
        parent_step: 0,
        step: 50,
        checkpoint_hash: Hash::repeat_byte(1),
        state_root: state_root(&hashes),
        anchor_steps: gpuchain_protocol::anchors::anchor_steps(0, 50),
        state_hashes: hashes.into(),
        signature: Sig65::ZERO,
    }
    .sign(&key);
    let good = Message::CheckpointAnnounce(ann.clone()).encode();
    assert_eq!(
        decode_validated(&good, &domain()).map(Checked::into_message),
        Ok(Message::CheckpointAnnounce(ann.clone()))
    );

    let mut forged = ann.clone();
    forged.checkpoint_hash = Hash::repeat_byte(2);
    let bytes = Message::CheckpointAnnounce(forged).encode();
    assert_eq!(
        validate_message(&bytes, &domain()),
        Verdict::Reject(RejectReason::BadSignature)
    );

    // A provider naming fewer anchors than the rule (so keeping fewer states), or others,
    // is refused before any verifier sees it, even with a good signature.
    for anchors in [vec![0], vec![0, 25], vec![0, 16, 33, 49]] {
        let mut off = ann.clone();
        off.anchor_steps = anchors;
        let bytes = Message::CheckpointAnnounce(off.sign(&key)).encode();
        assert_eq!(
            validate_message(&bytes, &domain()),
            Verdict::Reject(RejectReason::InvalidCommitment)
        );
    }

    let mut short = ann;
    let fewer = short.state_hashes.len() - 1;
    short.state_hashes = short.state_hashes[..fewer].into();
    short.state_root = state_root(&short.state_hashes);
    let short = short.sign(&key);
    let bytes = Message::CheckpointAnnounce(short).encode();
    assert_eq!(
        validate_message(&bytes, &domain()),
        Verdict::Reject(RejectReason::InvalidCommitment)
    );

    // A vote signed for another escrow does not verify here.
    let other = EscrowDomain {
        chain_id: 1,
        escrow: Address::repeat_byte(1),
    };
    let vote = Vote {
        job_id: U256::from(1),
        epoch: 1,
        step: 50,
        checkpoint_hash: Hash::repeat_byte(7),
        accept: true,
        verifier: Address::ZERO,
        signature: Sig65::ZERO,
    }
    .sign(&other, &key);
    let bytes = Message::Vote(vote).encode();
    assert_eq!(
        validate_message(&bytes, &domain()),
        Verdict::Reject(RejectReason::BadSignature)
    );
}

#[test]
fn spec_hash_is_order_canonical_for_extra_params() {
    let mut a = JobSpec::fashion_cnn_demo(Hash::ZERO, Hash::ZERO, Hash::ZERO);
    let mut b = a.clone();
    a.hyper.extra = BTreeMap::from([("lora_rank".to_owned(), 8.0), ("alpha".to_owned(), 16.0)]);
    b.hyper.extra = BTreeMap::from([("alpha".to_owned(), 16.0), ("lora_rank".to_owned(), 8.0)]);
    assert_eq!(a.spec_hash(), b.spec_hash());
}

#[test]
fn announce_with_extreme_steps_is_refused_not_a_panic() {
    let key = SigningKey::from_seed(4);
    let hashes = vec![Hash::ZERO; 2];
    let ann = CheckpointAnnounce {
        job_id: U256::from(1),
        epoch: 1,
        provider: Address::ZERO,
        parent_step: 0,
        step: u64::MAX,
        checkpoint_hash: Hash::ZERO,
        state_root: state_root(&hashes),
        anchor_steps: gpuchain_protocol::anchors::anchor_steps(0, u64::MAX),
        state_hashes: hashes.into(),
        signature: Sig65::ZERO,
    }
    .sign(&key);
    let bytes = Message::CheckpointAnnounce(ann).encode();
    assert_eq!(
        validate_message(&bytes, &domain()),
        Verdict::Reject(RejectReason::InvalidCommitment)
    );
}

/// A simulated signature (the simulator's cheap scheme) names its signer and proves nothing:
/// bytes from the network are always judged as secp256k1, so one is refused there; a machine
/// judges under its own key's scheme, so a simulated machine refuses a real signature too.
#[test]
fn simulated_signatures_are_refused_off_the_simulator() {
    let sim = SigningKey::simulated(4);
    let real = SigningKey::from_seed(4);
    let heartbeat = |key: &SigningKey| {
        Heartbeat {
            job_id: U256::from(7),
            epoch: 1,
            provider: Address::ZERO,
            seq: 3,
            step: 10,
            loss: 0.5,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(key)
    };
    let simulated = Message::Heartbeat(heartbeat(&sim));
    let genuine = Message::Heartbeat(heartbeat(&real));
    assert_eq!(
        validate_message(&simulated.encode(), &domain()),
        Verdict::Reject(RejectReason::BadSignature)
    );
    assert_eq!(
        validate_message(&genuine.encode(), &domain()),
        Verdict::Accept
    );
    assert_eq!(
        check_message(&simulated, &domain(), Scheme::Simulated),
        Verdict::Accept
    );
    assert_eq!(
        check_message(&genuine, &domain(), Scheme::Simulated),
        Verdict::Reject(RejectReason::BadSignature)
    );
    // Under the simulated scheme the claimed signer must still be the signer.
    let Message::Heartbeat(mut impostor) = simulated.clone() else {
        unreachable!()
    };
    impostor.provider = SigningKey::simulated(5).address();
    assert_eq!(
        check_message(&Message::Heartbeat(impostor), &domain(), Scheme::Simulated),
        Verdict::Reject(RejectReason::BadSignature)
    );

    // A proof of checking made under another scheme proves nothing to a machine: it checks
    // again under its own, so a real client refuses what a simulated check let through.
    let checked = Checked::new(simulated, &domain(), Scheme::Simulated).expect("passes its checks");
    let mut client = gpuchain_protocol::Client::new(
        gpuchain_protocol::ClientConfig::new(domain()),
        SigningKey::from_seed(9),
    );
    assert_eq!(
        client.handle_checked(Time::from_millis(1), &checked),
        Verdict::Reject(RejectReason::BadSignature)
    );
    let genuine = Checked::new(genuine, &domain(), Scheme::Secp256k1).expect("passes its checks");
    assert!(!matches!(
        client.handle_checked(Time::from_millis(1), &genuine),
        Verdict::Reject(_)
    ));
}
