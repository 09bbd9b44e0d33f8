//! Property tests of the role machines under arbitrary (validly signed but adversarially
//! ordered, stale, duplicated or unlisted) inputs: no panics, and the safety rules hold.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::eip712::{BidFields, VoteFields};
use gpuchain_protocol::io::QualityReport;
use gpuchain_protocol::signing::{Scheme, SigningKey};
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{
    Client, ClientConfig, Hash, Input, Output, Provider, ProviderConfig, StateMachine, U256,
    Verifier, VerifierConfig,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Action {
    Vote {
        who: usize,
        epoch: u64,
        step: u64,
        tag: u8,
        accept: bool,
    },
    Heartbeat {
        who: usize,
        epoch: u64,
        seq: u64,
        step: u64,
    },
    Announce {
        who: usize,
        epoch: u64,
        parent: u64,
        step: u64,
        tag: u8,
    },
    Bid {
        who: usize,
        epoch: u64,
        price: u64,
    },
    Assigned {
        who: usize,
        epoch: u64,
        start: u64,
    },
    Accepted {
        who: usize,
        epoch: u64,
        step: u64,
        tag: u8,
    },
    Rejected {
        who: usize,
        epoch: u64,
        step: u64,
        tag: u8,
    },
    Ended {
        epoch: u64,
        code: u8,
    },
    StepDone {
        epoch: u64,
        step: u64,
    },
    CheckpointReady {
        epoch: u64,
        step: u64,
        parent: u64,
        tag: u8,
    },
    Blob {
        step: u64,
        tag: u8,
        ok: bool,
    },
    Quality {
        epoch: u64,
        step: u64,
        tag: u8,
        pass: bool,
    },
    Spot {
        epoch: u64,
        step: u64,
        tag: u8,
        pass: bool,
    },
    Closed {
        who: usize,
    },
    Wait {
        ms: u64,
    },
    /// Both listed verifiers vote the same way on one checkpoint (makes quorums likely).
    Quorum {
        epoch: u64,
        step: u64,
        tag: u8,
        accept: bool,
    },
    /// The blob arrives and both tests report (makes votes likely).
    Check {
        epoch: u64,
        step: u64,
        tag: u8,
        pass: bool,
    },
}

// Small domains on purpose: random inputs must often hit the live epoch and step, or the
// safety properties below would only ever see refusals.
fn step50() -> impl Strategy<Value = u64> {
    (0u64..4).prop_map(|i| i * 50)
}

fn action() -> impl Strategy<Value = Action> {
    let who = 0usize..6;
    let epoch = 0u64..3;
    let tag = 0u8..2;
    prop_oneof![
        (
            who.clone(),
            epoch.clone(),
            step50(),
            tag.clone(),
            any::<bool>()
        )
            .prop_map(|(who, epoch, step, tag, accept)| Action::Vote {
                who,
                epoch,
                step,
                tag,
                accept
            }),
        (who.clone(), epoch.clone(), 0u64..20, 0u64..400).prop_map(|(who, epoch, seq, step)| {
            Action::Heartbeat {
                who,
                epoch,
                seq,
                step,
            }
        }),
        (0usize..3, epoch.clone(), step50(), 1u64..3, tag.clone()).prop_map(
            |(who, epoch, parent, d, tag)| {
                Action::Announce {
                    who,
                    epoch,
                    parent,
                    step: parent + d * 50,
                    tag,
                }
            }
        ),
        (who.clone(), epoch.clone(), 0u64..6000).prop_map(|(who, epoch, price)| Action::Bid {
            who,
            epoch,
            price
        }),
        (0usize..3, 1u64..3, step50()).prop_map(|(who, epoch, start)| Action::Assigned {
            who,
            epoch,
            start
        }),
        (epoch.clone(), step50(), tag.clone(), any::<bool>()).prop_map(
            |(epoch, step, tag, accept)| Action::Quorum {
                epoch,
                step,
                tag,
                accept
            }
        ),
        (epoch.clone(), step50(), tag.clone(), any::<bool>()).prop_map(
            |(epoch, step, tag, pass)| Action::Check {
                epoch,
                step,
                tag,
                pass
            }
        ),
        (who.clone(), epoch.clone(), step50(), tag.clone()).prop_map(|(who, epoch, step, tag)| {
            Action::Accepted {
                who,
                epoch,
                step,
                tag,
            }
        }),
        (who.clone(), epoch.clone(), step50(), tag.clone()).prop_map(|(who, epoch, step, tag)| {
            Action::Rejected {
                who,
                epoch,
                step,
                tag,
            }
        }),
        (epoch.clone(), 0u8..6).prop_map(|(epoch, code)| Action::Ended { epoch, code }),
        (epoch.clone(), 0u64..450).prop_map(|(epoch, step)| Action::StepDone { epoch, step }),
        (epoch.clone(), step50(), 0u64..3, tag.clone()).prop_map(|(epoch, parent, d, tag)| {
            Action::CheckpointReady {
                epoch,
                step: parent + d * 50,
                parent,
                tag,
            }
        }),
        (step50(), tag.clone(), any::<bool>()).prop_map(|(step, tag, ok)| Action::Blob {
            step,
            tag,
            ok
        }),
        (epoch.clone(), step50(), tag.clone(), any::<bool>()).prop_map(
            |(epoch, step, tag, pass)| Action::Quality {
                epoch,
                step,
                tag,
                pass
            }
        ),
        (epoch.clone(), step50(), tag.clone(), any::<bool>()).prop_map(
            |(epoch, step, tag, pass)| Action::Spot {
                epoch,
                step,
                tag,
                pass
            }
        ),
        who.prop_map(|who| Action::Closed { who }),
        (0u64..400).prop_map(|ms| Action::Wait { ms }),
    ]
}

fn key(k: &Keys, who: usize) -> &SigningKey {
    [&k.a, &k.p, &k.b, &k.v1, &k.v2, &k.outsider][who]
}

/// Actions around one verifier's happy path (assignments by providers, announcements from
/// them, complete checks), with the general noise mixed in.
fn verifier_action() -> impl Strategy<Value = Action> {
    let epoch = 1u64..3;
    prop_oneof![
        2 => (0usize..3, epoch.clone(), 0u64..2)
            .prop_map(|(who, epoch, s)| Action::Assigned { who, epoch, start: s * 50 }),
        4 => (0usize..3, epoch.clone(), 0u64..2, 0u8..2).prop_map(|(who, epoch, p, tag)| {
            Action::Announce { who, epoch, parent: p * 50, step: p * 50 + 50, tag }
        }),
        4 => (epoch.clone(), 1u64..3, 0u8..2, any::<bool>())
            .prop_map(|(epoch, s, tag, pass)| Action::Check { epoch, step: s * 50, tag, pass }),
        3 => action(),
    ]
}

/// Actions around one provider's happy path: its assignment and its trainer's checkpoints.
fn provider_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0usize..2, 1u64..3, 0u64..2)
            .prop_map(|(who, epoch, s)| Action::Assigned { who, epoch, start: s * 50 }),
        4 => (1u64..3, 0u64..3, 0u8..2).prop_map(|(epoch, p, tag)| Action::CheckpointReady {
            epoch,
            step: p * 50 + 50,
            parent: p * 50,
            tag,
        }),
        3 => action(),
    ]
}

/// Applies one action to a machine; returns the new time.
fn apply(m: &mut impl StateMachine, k: &Keys, now: u64, a: &Action) -> u64 {
    let at = t(now);
    match a.clone() {
        Action::Vote {
            who,
            epoch,
            step,
            tag,
            accept,
        } => {
            m.handle_message(at, &vote(key(k, who), epoch, step, ckpt(tag, step), accept));
        }
        Action::Heartbeat {
            who,
            epoch,
            seq,
            step,
        } => {
            m.handle_message(at, &heartbeat(key(k, who), epoch, seq, step));
        }
        Action::Announce {
            who,
            epoch,
            parent,
            step,
            tag,
        } => {
            m.handle_message(at, &announce(key(k, who), epoch, parent, step, tag));
        }
        Action::Bid { who, epoch, price } => {
            m.handle_message(at, &bid(key(k, who), epoch, price, 8));
        }
        Action::Assigned { who, epoch, start } => {
            m.handle_input(at, assigned(epoch, key(k, who), start, ckpt(0, start)))
        }
        Action::Accepted {
            who,
            epoch,
            step,
            tag,
        } => m.handle_input(at, accepted(epoch, step, ckpt(tag, step), key(k, who))),
        Action::Rejected {
            who,
            epoch,
            step,
            tag,
        } => m.handle_input(at, rejected(epoch, step, ckpt(tag, step), key(k, who))),
        Action::Ended { epoch, code } => {
            m.handle_input(at, epoch_ended(epoch, EpochEndReason::from_code(code)))
        }
        Action::StepDone { epoch, step } => m.handle_input(
            at,
            Input::StepDone {
                job_id: job(),
                epoch,
                step,
                loss: 0.1,
            },
        ),
        Action::CheckpointReady {
            epoch,
            step,
            parent,
            tag,
        } => m.handle_input(
            at,
            Input::CheckpointReady {
                job_id: job(),
                epoch,
                step,
                checkpoint_hash: ckpt(tag, step),
                state_hashes: states(tag, parent, step),
            },
        ),
        Action::Blob { step, tag, ok } => m.handle_input(
            at,
            Input::BlobFetched {
                hash: ckpt(tag, step),
                ok,
            },
        ),
        Action::Quality {
            epoch,
            step,
            tag,
            pass,
        } => m.handle_input(
            at,
            Input::QualityResult {
                job_id: job(),
                epoch,
                step,
                checkpoint_hash: ckpt(tag, step),
                report: QualityReport {
                    pass,
                    accuracy: 0.5,
                    loss: 1.0,
                },
            },
        ),
        Action::Spot {
            epoch,
            step,
            tag,
            pass,
        } => m.handle_input(
            at,
            Input::SpotCheckResult {
                job_id: job(),
                epoch,
                step,
                checkpoint_hash: ckpt(tag, step),
                pass,
            },
        ),
        Action::Quorum {
            epoch,
            step,
            tag,
            accept,
        } => {
            m.handle_message(at, &vote(&k.v1, epoch, step, ckpt(tag, step), accept));
            m.handle_message(at, &vote(&k.v2, epoch, step, ckpt(tag, step), accept));
        }
        Action::Check {
            epoch,
            step,
            tag,
            pass,
        } => {
            let hash = ckpt(tag, step);
            m.handle_input(at, Input::BlobFetched { hash, ok: true });
            let report = QualityReport {
                pass,
                accuracy: 0.5,
                loss: 1.0,
            };
            m.handle_input(
                at,
                Input::QualityResult {
                    job_id: job(),
                    epoch,
                    step,
                    checkpoint_hash: hash,
                    report,
                },
            );
            m.handle_input(
                at,
                Input::SpotCheckResult {
                    job_id: job(),
                    epoch,
                    step,
                    checkpoint_hash: hash,
                    pass: true,
                },
            );
        }
        Action::Closed { who } => m.handle_input(
            at,
            Input::ConnectionClosed {
                address: key(k, who).address(),
            },
        ),
        Action::Wait { ms } => {
            let later = t(now + ms);
            if m.poll_timeout().is_some_and(|d| d <= later) {
                m.handle_timeout(later);
            }
            return now + ms;
        }
    }
    now
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever arrives, every decision the client submits carries a real quorum: distinct
    /// listed verifiers, ascending, each signature recovering for exactly that decision; and
    /// every assignment carries a bid signed for the epoch it opens.
    #[test]
    fn client_only_submits_well_formed_quorums(actions in prop::collection::vec(action(), 1..120)) {
        let k = keys();
        let mut c = Client::new(ClientConfig::new(domain()), k.client.clone());
        confirm(&mut c, 0, &k);
        let listed = [k.v1.address(), k.v2.address()];
        let mut now = 0;
        for a in &actions {
            let epoch_before = c.job_status(job()).unwrap().epoch;
            now = apply(&mut c, &k, now, a);
            for out in drain(&mut c) {
                let Output::SubmitTx { tx, .. } = out else { continue };
                let accept = matches!(tx, ChainTx::AcceptCheckpoint { .. });
                match tx {
                    ChainTx::AcceptCheckpoint { epoch, step, checkpoint_hash, sigs, .. }
                    | ChainTx::RejectCheckpoint { epoch, step, checkpoint_hash, sigs, .. } => {
                        prop_assert!(sigs.len() >= 2);
                        let fields = VoteFields { job_id: job(), epoch, step, checkpoint_hash, accept };
                        let signers: Vec<_> = sigs.iter().map(|s| fields.recover(&domain(), Scheme::Secp256k1, s).unwrap()).collect();
                        prop_assert!(signers.windows(2).all(|w| w[0] < w[1]));
                        prop_assert!(signers.iter().all(|s| listed.contains(s)));
                    }
                    ChainTx::Assign { provider, price_per_step, bid_expiry, bid_signature, .. } => {
                        let fields = BidFields { job_id: job(), terms: terms(), epoch: epoch_before + 1, provider, price_per_step, expiry: bid_expiry };
                        prop_assert_eq!(fields.recover(&domain(), Scheme::Secp256k1, &bid_signature), Ok(provider));
                        prop_assert!(price_per_step <= U256::from(MAX_PRICE));
                    }
                    _ => {}
                }
            }
        }
    }

    /// A verifier never votes twice on one checkpoint, and only on checkpoints announced by
    /// the provider the chain assigned for that epoch.
    #[test]
    fn verifier_votes_once_and_only_on_assigned_announcements(actions in prop::collection::vec(verifier_action(), 1..120)) {
        let k = keys();
        let mut v = Verifier::new(VerifierConfig::new(domain(), 9), k.v1.clone());
        confirm(&mut v, 0, &k);
        let mut assigned_to: BTreeMap<u64, gpuchain_protocol::Address> = BTreeMap::new();
        let mut announced: BTreeSet<(u64, u64, Hash, gpuchain_protocol::Address)> = BTreeSet::new();
        let mut voted = BTreeSet::new();
        let mut now = 0;
        for a in &actions {
            if let Action::Assigned { who, epoch, .. } = a {
                assigned_to.entry(*epoch).or_insert(key(&k, *who).address());
            }
            if let Action::Announce { who, epoch, step, tag, .. } = a {
                announced.insert((*epoch, *step, ckpt(*tag, *step), key(&k, *who).address()));
            }
            now = apply(&mut v, &k, now, a);
            for m in published(&drain(&mut v)) {
                let Message::Vote(vote) = m else { continue };
                prop_assert!(voted.insert((vote.epoch, vote.step, vote.checkpoint_hash)), "voted twice");
                let provider = assigned_to.get(&vote.epoch).copied();
                prop_assert!(provider.is_some_and(|p| announced.contains(&(vote.epoch, vote.step, vote.checkpoint_hash, p))));
            }
        }
    }

    /// A provider's heartbeats are strictly increasing within an epoch, and it never heartbeats
    /// or announces for an epoch after it was told to stop training it. Every accept it claims
    /// is of a checkpoint it announced itself, carrying a real quorum of the committee.
    #[test]
    fn provider_respects_fencing(actions in prop::collection::vec(provider_action(), 1..120)) {
        let k = keys();
        let mut p = Provider::new(ProviderConfig::new(domain(), gpu(8), U256::from(1000)), k.a.clone());
        confirm(&mut p, 0, &k);
        p.handle_message(t(0), &offer(&k, 1));
        let mut stopped = BTreeSet::new();
        let mut last_seq: BTreeMap<u64, u64> = BTreeMap::new();
        let mut mine: BTreeSet<(u64, u64, Hash)> = BTreeSet::new();
        let mut claimed = BTreeSet::new();
        let members = [k.v1.address(), k.v2.address()];
        let mut now = 0;
        for a in &actions {
            now = apply(&mut p, &k, now, a);
            for out in drain(&mut p) {
                match out {
                    Output::SubmitTx { tx: ChainTx::AcceptCheckpoint { epoch, step, checkpoint_hash, sigs, .. }, .. } => {
                        prop_assert!(mine.contains(&(epoch, step, checkpoint_hash)), "claimed what it never announced");
                        prop_assert!(claimed.insert((epoch, step)), "claimed twice");
                        prop_assert!(sigs.len() >= 2);
                        let fields = VoteFields { job_id: job(), epoch, step, checkpoint_hash, accept: true };
                        let signers: Vec<_> = sigs.iter().map(|s| fields.recover(&domain(), Scheme::Secp256k1, s).unwrap()).collect();
                        prop_assert!(signers.windows(2).all(|w| w[0] < w[1]));
                        prop_assert!(signers.iter().all(|s| members.contains(s)));
                    }
                    Output::SubmitTx { tx, .. } => prop_assert!(false, "a provider submits only claims: {tx:?}"),
                    Output::StopTraining { epoch, .. } => { stopped.insert(epoch); }
                    Output::StartTraining { epoch, .. } => prop_assert!(!stopped.contains(&epoch)),
                    Output::Publish { message: Message::Heartbeat(h), .. } => {
                        prop_assert!(!stopped.contains(&h.epoch));
                        let prev = last_seq.insert(h.epoch, h.seq);
                        prop_assert!(prev.is_none_or(|s| s < h.seq));
                    }
                    Output::Publish { message: Message::CheckpointAnnounce(c), .. } => {
                        prop_assert!(!stopped.contains(&c.epoch));
                        prop_assert!(c.commitment_is_consistent());
                        mine.insert((c.epoch, c.step, c.checkpoint_hash));
                    }
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn chain_event_job_id_is_uniform() {
    let e = ChainEvent::JobExpired {
        job_id: job(),
        refund: U256::ZERO,
    };
    assert_eq!(e.job_id(), job());
}
