//! One test per provider transition: vetting the drawn job, bidding, assignment, heartbeats,
//! checkpoints, fencing, refusal, claims of its own accepted checkpoints, and completion.
//! Long because it is one test per transition, claims included, on shared fixtures.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::io::Output;
use gpuchain_protocol::provider::{
    CLAIM_AFTER, CLAIM_KEPT_FOR, DEFAULT_MAX_DURATION_SECS, DEFAULT_MAX_GRACE_SECS, StakeBudget,
    VetRule, Vetting,
};
use gpuchain_protocol::signing::{Scheme, SigningKey};
use gpuchain_protocol::topics::{heartbeat_topic, job_topic};
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{
    Address, Hash, IgnoreReason, Input, Notice, Provider, ProviderConfig, RejectReason,
    StateMachine, U256, Verdict,
};

fn provider(key: &SigningKey, price: u64, memory_gib: u64) -> Provider {
    Provider::new(
        ProviderConfig::new(domain(), gpu(memory_gib), U256::from(price)),
        key.clone(),
    )
}

fn bids(outs: &[Output]) -> Vec<(u64, U256)> {
    published(outs)
        .into_iter()
        .filter_map(|m| match m {
            Message::Bid(b) => Some((b.epoch, b.price_per_step)),
            _ => None,
        })
        .collect()
}

/// Provider A assigned epoch 1 from step 0.
fn training(k: &Keys) -> Provider {
    let mut p = provider(&k.a, 1000, 8);
    confirm(&mut p, 0, k);
    p.handle_message(t(1), &offer(k, 1));
    p.handle_input(t(100), assigned(1, &k.a, 0, Hash::ZERO));
    drain(&mut p);
    p
}

#[test]
fn bids_on_fitting_offers_only() {
    let k = keys();
    let mut fits = provider(&k.a, 1000, 8);
    confirm(&mut fits, 0, &k);
    assert_eq!(fits.handle_message(t(1), &offer(&k, 1)), Verdict::Accept);
    let outs = drain(&mut fits);
    assert_eq!(bids(&outs), vec![(1, U256::from(1000))]);
    let Message::Bid(b) = &published(&outs)[0] else {
        unreachable!()
    };
    assert_eq!(b.check_signature(&domain(), Scheme::Secp256k1), Ok(()));
    assert_eq!(b.expiry, BLOCK_TIME + 600);
    // The same offer again does not produce a second bid.
    fits.handle_message(t(2), &offer(&k, 1));
    assert!(bids(&drain(&mut fits)).is_empty());

    let mut small = provider(&k.b, 1000, 0);
    assert_eq!(
        small.handle_message(t(1), &offer(&k, 1)),
        Verdict::Accept,
        "relayed, not bid on"
    );
    assert!(bids(&drain(&mut small)).is_empty());
    let mut dear = provider(&k.b, MAX_PRICE + 1, 8);
    dear.handle_message(t(1), &offer(&k, 1));
    assert!(bids(&drain(&mut dear)).is_empty());
}

#[test]
fn offers_that_contradict_the_chain_are_rejected_and_stale_ones_ignored() {
    let k = keys();
    let mut p = provider(&k.a, 1000, 8);
    confirm(&mut p, 0, &k);
    let Message::JobOffer(mut o) = offer(&k, 1) else {
        unreachable!()
    };
    o.spec.seed += 1;
    let forged = o.sign(&k.client);
    assert_eq!(
        p.handle_message(t(1), &Message::JobOffer(forged)),
        Verdict::Reject(RejectReason::OfferMismatch)
    );
    p.handle_input(t(2), assigned(1, &k.b, 0, Hash::ZERO));
    assert_eq!(
        p.handle_message(t(3), &offer(&k, 1)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
}

#[test]
fn assignment_starts_training_and_heartbeats_at_once() {
    let k = keys();
    let mut p = provider(&k.a, 1000, 8);
    confirm(&mut p, 0, &k);
    p.handle_message(t(1), &offer(&k, 1));
    drain(&mut p);
    p.handle_input(t(100), assigned(1, &k.a, 0, Hash::ZERO));
    let outs = drain(&mut p);
    assert!(outs.contains(&Output::StartTraining {
        job_id: job(),
        epoch: 1,
        spec_hash: spec().spec_hash(),
        from_step: 0,
        from_checkpoint: Hash::ZERO,
        until_step: 400,
        checkpoint_interval: 50,
    }));
    assert!(outs.contains(&Output::Subscribe {
        topic: job_topic(job())
    }));
    assert!(matches!(&published(&outs)[..], [Message::Heartbeat(h)] if h.seq == 1 && h.epoch == 1));
    // The heartbeat goes on the job's heartbeat topic, which the provider publishes to
    // without subscribing (only the client listens there).
    assert!(outs.iter().any(|o| matches!(o,
        Output::Publish { topic, message: Message::Heartbeat(_) } if *topic == heartbeat_topic(job()))));
    assert!(!outs.iter().any(|o| matches!(o,
        Output::Subscribe { topic } if *topic == heartbeat_topic(job()))));
    assert_eq!(p.poll_timeout(), Some(t(200)));
}

#[test]
fn heartbeats_follow_the_period_and_report_progress() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(
        t(150),
        Input::StepDone {
            job_id: job(),
            epoch: 1,
            step: 1,
            loss: 2.3,
        },
    );
    p.handle_timeout(t(199));
    assert!(drain(&mut p).is_empty());
    p.handle_timeout(t(200));
    let outs = drain(&mut p);
    let [Message::Heartbeat(h)] = &published(&outs)[..] else {
        panic!("{outs:?}")
    };
    assert_eq!((h.seq, h.step, h.loss), (2, 1, 2.3));
    assert_eq!(h.check_signature(Scheme::Secp256k1), Ok(()));
    // A result from another epoch does not leak into the heartbeat.
    p.handle_input(
        t(210),
        Input::StepDone {
            job_id: job(),
            epoch: 7,
            step: 99,
            loss: 0.0,
        },
    );
    p.handle_timeout(t(300));
    let [Message::Heartbeat(h)] = &published(&drain(&mut p))[..] else {
        panic!()
    };
    assert_eq!((h.seq, h.step), (3, 1));
}

#[test]
fn heartbeats_say_when_a_checkpoint_is_being_made_and_how_starved_the_host_is() {
    let k = keys();
    let mut p = training(&k);
    let beat = |p: &mut gpuchain_protocol::provider::Provider, at: u64| {
        p.handle_timeout(t(at));
        let outs = drain(p);
        let [Message::Heartbeat(h)] = &published(&outs)[..] else {
            panic!("{outs:?}")
        };
        h.clone()
    };
    let step = |p: &mut gpuchain_protocol::provider::Provider, at: u64, step: u64| {
        p.handle_input(
            t(at),
            Input::StepDone {
                job_id: job(),
                epoch: 1,
                step,
                loss: 1.0,
            },
        );
    };
    step(&mut p, 150, 49);
    p.handle_input(t(160), Input::ComputeStarved { total_ms: 40 });
    let h = beat(&mut p, 200);
    assert_eq!((h.step, h.checkpointing, h.starved_ms), (49, false, 40));
    // Step 50 is a checkpoint step: until its checkpoint is ready, the trainer is making it.
    step(&mut p, 250, 50);
    let h = beat(&mut p, 300);
    assert_eq!((h.step, h.checkpointing), (50, true));
    // The node's figure never goes back.
    p.handle_input(t(310), Input::ComputeStarved { total_ms: 10 });
    p.handle_input(
        t(350),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            state_hashes: states(0xa, 0, 50),
        },
    );
    let outs = {
        p.handle_timeout(t(400));
        drain(&mut p)
    };
    let h = published(&outs)
        .into_iter()
        .find_map(|m| match m {
            Message::Heartbeat(h) => Some(h),
            _ => None,
        })
        .expect("a heartbeat");
    assert_eq!((h.step, h.checkpointing, h.starved_ms), (50, false, 40));
    assert_eq!(h.check_signature(Scheme::Secp256k1), Ok(()));
}

#[test]
fn checkpoints_are_announced_with_their_parent_and_commitment() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(
        t(200),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            state_hashes: states(0xa, 0, 50),
        },
    );
    p.handle_input(
        t(300),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 100,
            checkpoint_hash: ckpt(0xa, 100),
            state_hashes: states(0xa, 50, 100),
        },
    );
    let anns: Vec<_> = published(&drain(&mut p))
        .into_iter()
        .filter_map(|m| match m {
            Message::CheckpointAnnounce(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(anns.len(), 2);
    assert_eq!((anns[0].parent_step, anns[0].step), (0, 50));
    assert_eq!((anns[1].parent_step, anns[1].step), (50, 100));
    assert!(
        anns.iter()
            .all(|a| a.commitment_is_consistent() && a.check_signature(Scheme::Secp256k1).is_ok())
    );
}

fn announced_steps(outs: &[Output]) -> Vec<u64> {
    published(outs)
        .into_iter()
        .filter_map(|m| match m {
            Message::CheckpointAnnounce(a) => Some(a.step),
            _ => None,
        })
        .collect()
}

/// Provider A, training epoch 1, announced steps 50 (at 200 ms) and 100 (at 300 ms).
fn announced_two(k: &Keys) -> Provider {
    let mut p = training(k);
    for (at, from, step) in [(200, 0, 50), (300, 50, 100)] {
        p.handle_input(
            t(at),
            Input::CheckpointReady {
                job_id: job(),
                epoch: 1,
                step,
                checkpoint_hash: ckpt(0xa, step),
                state_hashes: states(0xa, from, step),
            },
        );
    }
    assert_eq!(announced_steps(&drain(&mut p)), vec![50, 100]);
    p
}

#[test]
fn the_oldest_undecided_announcement_is_published_again_with_backoff() {
    use gpuchain_protocol::provider::REGOSSIP_BACKOFF_MAX;
    let k = keys();
    let mut p = announced_two(&k);
    let after = gpuchain_protocol::provider::REGOSSIP_AFTER;
    // Heartbeats before then carry no announcement.
    p.handle_timeout(t(200).saturating_add(after / 2));
    assert!(announced_steps(&drain(&mut p)).is_empty());
    // The escrow has decided neither: only 50 goes out again, since the escrow decides in
    // step order and 100 waits on it.
    let first = t(300).saturating_add(after);
    p.handle_timeout(first);
    assert_eq!(announced_steps(&drain(&mut p)), vec![50]);
    // Still undecided: the next time is twice as long after, then four times, up to
    // REGOSSIP_BACKOFF_MAX times.
    let mut at = first;
    let mut sent = Vec::new();
    for factor in [2, 4, 8, 8, 8] {
        let due = at.saturating_add(after * factor);
        // Probed well before it (a heartbeat just before would hold the next one past it).
        p.handle_timeout(at.saturating_add(after * factor - after / 2));
        assert!(
            announced_steps(&drain(&mut p)).is_empty(),
            "not before {factor}× the wait"
        );
        p.handle_timeout(due);
        sent.push(announced_steps(&drain(&mut p)));
        at = due;
    }
    assert_eq!(sent, vec![vec![50]; 5]);
    assert_eq!(REGOSSIP_BACKOFF_MAX, 8);
    // Accepting 50 settles it; 100's wait starts at the decision, when the committee turns
    // to it, not at its publication long before.
    let decided = at.saturating_add(after);
    p.handle_input(decided, accepted(1, 50, ckpt(0xa, 50), &k.a));
    p.handle_timeout(decided.saturating_add(after / 2));
    assert!(announced_steps(&drain(&mut p)).is_empty());
    p.handle_timeout(decided.saturating_add(after));
    assert_eq!(announced_steps(&drain(&mut p)), vec![100]);
    // Another provider's acceptance settles nothing of ours.
    let later = decided.saturating_add(after);
    p.handle_input(later, accepted(1, 100, ckpt(0xa, 100), &k.b));
    p.handle_timeout(later.saturating_add(after * 2));
    assert_eq!(announced_steps(&drain(&mut p)), vec![100]);
    p.handle_input(later, accepted(1, 100, ckpt(0xa, 100), &k.a));
    p.handle_timeout(later.saturating_add(after * 20));
    assert!(announced_steps(&drain(&mut p)).is_empty(), "all decided");
}

#[test]
fn inconsistent_trainer_output_is_not_announced() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(
        t(200),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            state_hashes: states(0xa, 0, 40),
        },
    );
    let outs = drain(&mut p);
    assert!(published(&outs).is_empty());
    assert!(notices(&outs).contains(&Notice::TrainerInconsistent {
        job_id: job(),
        epoch: 1,
        step: 50
    }));
}

#[test]
fn fenced_by_a_new_epoch_stops_and_goes_quiet() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(t(300), assigned(2, &k.b, 0, Hash::ZERO));
    let outs = drain(&mut p);
    assert!(outs.contains(&Output::StopTraining {
        job_id: job(),
        epoch: 1
    }));
    assert!(notices(&outs).contains(&Notice::Fenced {
        job_id: job(),
        epoch: 1
    }));
    assert_eq!(p.poll_timeout(), None, "no more heartbeats");
    // A checkpoint of the fenced epoch finishing late is not announced.
    p.handle_input(
        t(310),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            state_hashes: states(0xa, 0, 50),
        },
    );
    assert!(
        published(&drain(&mut p))
            .iter()
            .all(|m| !matches!(m, Message::CheckpointAnnounce(_)))
    );
}

#[test]
fn epoch_end_and_rejection_stop_training() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(t(300), rejected(1, 50, ckpt(0xa, 50), &k.a));
    assert!(drain(&mut p).contains(&Output::StopTraining {
        job_id: job(),
        epoch: 1
    }));
    let mut p = training(&k);
    p.handle_input(t(300), epoch_ended(1, EpochEndReason::Released));
    assert!(drain(&mut p).contains(&Output::StopTraining {
        job_id: job(),
        epoch: 1
    }));
    p.handle_input(t(301), epoch_ended(1, EpochEndReason::Released));
    assert!(
        drain(&mut p)
            .iter()
            .all(|o| !matches!(o, Output::StopTraining { .. })),
        "idempotent"
    );
}

#[test]
fn unassigned_provider_keeps_a_standby_bid_for_the_next_epoch() {
    let k = keys();
    let mut b = provider(&k.b, 3000, 8);
    confirm(&mut b, 0, &k);
    b.handle_message(t(1), &offer(&k, 1));
    drain(&mut b);
    b.handle_input(t(100), assigned(1, &k.a, 0, Hash::ZERO));
    assert_eq!(bids(&drain(&mut b)), vec![(2, U256::from(3000))]);
    b.handle_input(t(200), assigned(2, &k.p, 150, ckpt(0xa, 150)));
    assert_eq!(bids(&drain(&mut b)), vec![(3, U256::from(3000))]);
}

#[test]
fn completion_stops_and_a_failed_trainer_goes_silent() {
    let k = keys();
    let mut p = training(&k);
    p.handle_input(
        t(300),
        chain(ChainEvent::JobCompleted {
            job_id: job(),
            refund: U256::ZERO,
        }),
    );
    let outs = drain(&mut p);
    assert!(outs.contains(&Output::StopTraining {
        job_id: job(),
        epoch: 1
    }));
    assert!(outs.contains(&Output::Unsubscribe {
        topic: job_topic(job())
    }));
    let mut p = training(&k);
    p.handle_input(
        t(300),
        Input::TrainingFailed {
            job_id: job(),
            epoch: 1,
            reason: "oom".into(),
        },
    );
    drain(&mut p);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn offers_are_bid_on_only_once_the_chain_drew_the_committee() {
    let k = keys();
    let mut p = provider(&k.a, 1000, 8);
    assert_eq!(p.handle_message(t(1), &offer(&k, 1)), Verdict::Accept);
    assert!(
        bids(&drain(&mut p)).is_empty(),
        "anyone can sign an offer for a job that does not exist"
    );
    p.handle_input(t(2), chain(job_created(&k)));
    assert!(
        bids(&drain(&mut p)).is_empty(),
        "no terms to sign before the draw"
    );
    p.handle_input(t(3), chain(committee_drawn(&k)));
    assert_eq!(bids(&drain(&mut p)), vec![(1, U256::from(1000))]);
    // An offer naming another committee than the one drawn is refused.
    let other = vec![k.v1.address(), k.b.address()];
    assert_eq!(
        p.handle_message(t(4), &offer_for(&k, 1, other)),
        Verdict::Reject(RejectReason::OfferMismatch)
    );
}

fn refusals(outs: &[Output]) -> Vec<VetRule> {
    notices(outs)
        .into_iter()
        .filter_map(|n| match n {
            Notice::BidRefused { rule, .. } => Some(rule),
            _ => None,
        })
        .collect()
}

/// A provider with the node's defaults: paid in the test token only, and bonded for one epoch.
fn vetting_provider(key: &SigningKey) -> Provider {
    let mut cfg = ProviderConfig::new(domain(), gpu(8), U256::from(1000));
    cfg.vetting = Vetting {
        tokens: vec![TOKEN],
        stake: Some(StakeBudget {
            bonded: U256::from(MIN_STAKE),
            min_stake: U256::from(MIN_STAKE),
        }),
        ..Vetting::default()
    };
    Provider::new(cfg, key.clone())
}

#[test]
fn bids_carry_the_jobs_terms() {
    let k = keys();
    let mut p = vetting_provider(&k.a);
    confirm(&mut p, 0, &k);
    p.handle_message(t(1), &offer(&k, 1));
    let outs = drain(&mut p);
    let [Message::Bid(b)] = &published(&outs)[..] else {
        panic!("one bid expected: {outs:?}")
    };
    assert_eq!(b.terms, terms());
    assert!(refusals(&outs).is_empty());
}

#[test]
fn terms_a_hostile_client_picks_are_refused_once_each_with_their_rule() {
    let k = keys();
    let me = k.a.address();
    let (v1, v2) = (k.v1.address(), k.v2.address());
    type Edit = Box<dyn Fn(&mut ChainEvent)>;
    let none: fn(&mut ChainEvent) = |_| {};
    // Each case: the rule, an edit of `JobCreated`, the committee drawn, and a wrong terms
    // hash in `CommitteeDrawn` (the drawn terms are otherwise the job's).
    let cases: Vec<(VetRule, Edit, Vec<Address>, bool)> = vec![
        (
            VetRule::Token,
            Box::new(|e| set(e, |c| *c.token = Address::repeat_byte(0x01))),
            vec![v1, v2],
            false,
        ),
        (VetRule::Quorum, Box::new(none), vec![v1], false),
        (
            VetRule::Quorum,
            Box::new(none),
            vec![
                v1,
                v2,
                Address::repeat_byte(0x77),
                Address::repeat_byte(0x78),
            ],
            false,
        ),
        (
            VetRule::Quorum,
            Box::new(|e| set(e, |c| *c.quorum = 1)),
            vec![v1, v2],
            false,
        ),
        (
            VetRule::ClientIsVerifier,
            Box::new(none),
            vec![v1, k.client.address()],
            false,
        ),
        (
            VetRule::ProviderIsVerifier,
            Box::new(none),
            vec![me, v2],
            false,
        ),
        (VetRule::Terms, Box::new(none), vec![v1, v2], true),
        (
            VetRule::Deadline,
            Box::new(|e| {
                set(e, |c| {
                    *c.deadline = BLOCK_TIME + DEFAULT_MAX_DURATION_SECS + 1;
                })
            }),
            vec![v1, v2],
            false,
        ),
        (
            VetRule::Grace,
            Box::new(|e| set(e, |c| *c.grace = DEFAULT_MAX_GRACE_SECS + 1)),
            vec![v1, v2],
            false,
        ),
    ];
    for (rule, edit, members, wrong_terms) in cases {
        let mut created = job_created(&k);
        edit(&mut created);
        let terms = if wrong_terms {
            Hash::repeat_byte(0x66)
        } else {
            created.terms_with(&members).unwrap()
        };
        let drawn = ChainEvent::CommitteeDrawn {
            job_id: job(),
            committee: members.clone(),
            terms,
        };
        let mut p = vetting_provider(&k.a);
        p.handle_input(t(0), chain(created));
        p.handle_input(t(0), chain(drawn));
        p.handle_message(t(1), &offer_for(&k, 1, members.clone()));
        let outs = drain(&mut p);
        assert!(bids(&outs).is_empty(), "{rule:?}: bid anyway");
        assert_eq!(refusals(&outs), vec![rule]);
        // The same offer again is refused again, but reported only once.
        p.handle_message(t(2), &offer_for(&k, 1, members));
        let outs = drain(&mut p);
        assert!(
            bids(&outs).is_empty() && refusals(&outs).is_empty(),
            "{rule:?}"
        );
        assert_eq!(p.refusals().get(&rule), Some(&1));
    }
}

/// The fields of a `JobCreated` the vetting tests change.
struct CreatedFields<'a> {
    token: &'a mut Address,
    quorum: &'a mut u8,
    deadline: &'a mut u64,
    grace: &'a mut u64,
}

fn set(e: &mut ChainEvent, f: impl FnOnce(CreatedFields<'_>)) {
    let ChainEvent::JobCreated {
        token,
        quorum,
        deadline,
        grace,
        ..
    } = e
    else {
        unreachable!("a JobCreated")
    };
    f(CreatedFields {
        token,
        quorum,
        deadline,
        grace,
    });
}

#[test]
fn it_bids_only_with_free_stake_for_one_more_epoch_and_learns_new_stake() {
    let k = keys();
    let mut p = vetting_provider(&k.a);
    p.handle_input(
        t(0),
        Input::StakeChanged {
            bonded: U256::from(MIN_STAKE - 1),
            min_stake: U256::from(MIN_STAKE),
        },
    );
    confirm(&mut p, 0, &k);
    p.handle_message(t(1), &offer(&k, 1));
    let outs = drain(&mut p);
    assert!(bids(&outs).is_empty());
    assert_eq!(refusals(&outs), vec![VetRule::Stake]);
    // Staking more (the node reads it from the chain) lets the refused offer be bid on.
    p.handle_input(
        t(2),
        Input::StakeChanged {
            bonded: U256::from(MIN_STAKE),
            min_stake: U256::from(MIN_STAKE),
        },
    );
    assert_eq!(bids(&drain(&mut p)), vec![(1, U256::from(1000))]);
}

#[test]
fn it_never_bids_again_on_a_job_whose_committee_rejected_its_work() {
    let k = keys();
    let mut p = vetting_provider(&k.a);
    p.handle_input(
        t(0),
        Input::StakeChanged {
            bonded: U256::from(3 * MIN_STAKE),
            min_stake: U256::from(MIN_STAKE),
        },
    );
    confirm(&mut p, 0, &k);
    p.handle_message(t(1), &offer(&k, 1));
    p.handle_input(t(100), assigned(1, &k.a, 0, Hash::ZERO));
    drain(&mut p);
    p.handle_input(t(200), rejected(1, 50, ckpt(0xa, 50), &k.a));
    p.handle_input(t(200), epoch_ended(1, EpochEndReason::Rejected));
    p.handle_message(t(300), &offer(&k, 2));
    let outs = drain(&mut p);
    assert!(bids(&outs).is_empty(), "re-bid on the job that rejected it");
    assert_eq!(refusals(&outs), vec![VetRule::RejectedBefore]);
}

/// Provider A training epoch 1, its checkpoint 50 announced at 200 ms.
fn announced(k: &Keys) -> Provider {
    let mut p = training(k);
    p.handle_input(
        t(200),
        Input::CheckpointReady {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            state_hashes: states(0xa, 0, 50),
        },
    );
    drain(&mut p);
    p
}

/// The claims (accepts of its own checkpoints) a provider submitted, with their notices.
fn claims(outs: &[Output]) -> Vec<(ChainTx, bool)> {
    let late: Vec<bool> = notices(outs)
        .into_iter()
        .filter_map(|n| match n {
            Notice::ClaimSubmitted { late, .. } => Some(late),
            _ => None,
        })
        .collect();
    let txs: Vec<ChainTx> = txs(outs).into_iter().map(|(_, tx)| tx).collect();
    assert_eq!(txs.len(), late.len(), "one notice per claim: {outs:?}");
    txs.into_iter().zip(late).collect()
}

fn sorted_sigs(k: &Keys, epoch: u64, step: u64, h: Hash) -> Vec<gpuchain_protocol::Sig65> {
    let mut votes: Vec<_> = [&k.v1, &k.v2]
        .iter()
        .map(|v| match vote(v, epoch, step, h, true) {
            Message::Vote(v) => (v.verifier, v.signature),
            _ => unreachable!(),
        })
        .collect();
    votes.sort();
    votes.into_iter().map(|(_, s)| s).collect()
}

#[test]
fn it_claims_its_accepted_checkpoint_when_the_client_does_not() {
    let k = keys();
    let h = ckpt(0xa, 50);
    let mut p = announced(&k);
    // Votes off the committee and reject votes do not count toward a claim.
    p.handle_message(t(300), &vote(&k.outsider, 1, 50, h, true));
    p.handle_message(t(300), &vote(&k.v1, 1, 50, h, false));
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_message(t(320), &vote(&k.v2, 1, 50, h, true));
    // The client, whose job it is, gets CLAIM_AFTER to land it first.
    let due = t(320).saturating_add(CLAIM_AFTER);
    p.handle_timeout(t(320 + 2_999));
    assert!(claims(&drain(&mut p)).is_empty());
    assert!(p.poll_timeout().is_some_and(|at| at <= due));
    p.handle_timeout(due);
    let outs = drain(&mut p);
    assert_eq!(
        claims(&outs),
        vec![(
            ChainTx::AcceptCheckpoint {
                job_id: job(),
                epoch: 1,
                step: 50,
                checkpoint_hash: h,
                sigs: sorted_sigs(&k, 1, 50, h),
            },
            false
        )]
    );
    // Once only.
    p.handle_message(t(4_000), &vote(&k.v2, 1, 50, h, true));
    p.handle_timeout(t(10_000));
    assert!(claims(&drain(&mut p)).is_empty());
}

#[test]
fn a_client_that_lands_the_accept_in_time_leaves_nothing_to_claim() {
    let k = keys();
    let h = ckpt(0xa, 50);
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_message(t(320), &vote(&k.v2, 1, 50, h, true));
    p.handle_input(t(1_000), accepted(1, 50, h, &k.a));
    p.handle_timeout(t(10_000));
    assert!(claims(&drain(&mut p)).is_empty());
}

#[test]
fn it_claims_at_once_when_the_client_ends_the_epoch() {
    let k = keys();
    let h = ckpt(0xa, 50);
    // The quorum is in, then the client releases the epoch before the accept lands.
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_message(t(320), &vote(&k.v2, 1, 50, h, true));
    p.handle_input(t(400), epoch_ended(1, EpochEndReason::Released));
    assert_eq!(p.poll_timeout(), Some(t(400)));
    p.handle_timeout(t(400));
    let outs = drain(&mut p);
    let [
        (
            ChainTx::AcceptCheckpoint {
                epoch: 1, step: 50, ..
            },
            true,
        ),
    ] = &claims(&outs)[..]
    else {
        panic!("{outs:?}")
    };

    // The client replaces it first, and the quorum forms after.
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_input(t(400), epoch_ended(1, EpochEndReason::Replaced));
    p.handle_input(t(400), assigned(2, &k.b, 0, Hash::ZERO));
    drain(&mut p);
    p.handle_message(t(500), &vote(&k.v2, 1, 50, h, true));
    p.handle_timeout(t(500));
    assert_eq!(claims(&drain(&mut p)).len(), 1);
}

#[test]
fn a_failed_claim_is_dropped_not_repeated() {
    let k = keys();
    let h = ckpt(0xa, 50);
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_message(t(320), &vote(&k.v2, 1, 50, h, true));
    p.handle_input(t(400), epoch_ended(1, EpochEndReason::Released));
    p.handle_timeout(t(400));
    let outs = drain(&mut p);
    let [(id, _)] = &txs(&outs)[..] else {
        panic!("{outs:?}")
    };
    p.handle_input(
        t(450),
        Input::TxFailed {
            id: *id,
            reason: "WindowClosed(120)".into(),
        },
    );
    // The votes again (regossiped) start nothing: the claim is gone.
    p.handle_message(t(500), &vote(&k.v1, 1, 50, h, true));
    p.handle_message(t(500), &vote(&k.v2, 1, 50, h, true));
    p.handle_timeout(t(60_000));
    assert!(claims(&drain(&mut p)).is_empty());
}

#[test]
fn claims_end_with_what_makes_them_unpayable() {
    let k = keys();
    let h = ckpt(0xa, 50);
    let quorum = |p: &mut Provider| {
        p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
        p.handle_message(t(320), &vote(&k.v2, 1, 50, h, true));
    };
    // Ended by the provider itself, by a reject, by a late accept of another epoch: no
    // decision window, nothing to claim.
    for reason in [
        EpochEndReason::Resigned,
        EpochEndReason::Rejected,
        EpochEndReason::Superseded,
    ] {
        let mut p = announced(&k);
        quorum(&mut p);
        p.handle_input(t(400), epoch_ended(1, reason));
        p.handle_timeout(t(60_000));
        assert!(claims(&drain(&mut p)).is_empty(), "{reason:?}");
    }
    // The job expired.
    let mut p = announced(&k);
    quorum(&mut p);
    p.handle_input(
        t(400),
        chain(ChainEvent::JobExpired {
            job_id: job(),
            refund: U256::ZERO,
        }),
    );
    p.handle_timeout(t(60_000));
    assert!(claims(&drain(&mut p)).is_empty());
    // The client ended the epoch and the head moved on (someone else's checkpoint 50 was
    // accepted): the escrow would refuse it as moved on.
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_input(t(400), epoch_ended(1, EpochEndReason::Released));
    p.handle_input(t(410), accepted(2, 50, ckpt(0xb, 50), &k.b));
    p.handle_message(t(500), &vote(&k.v2, 1, 50, h, true));
    p.handle_timeout(t(60_000));
    assert!(claims(&drain(&mut p)).is_empty());
    // A claim kept past the decision window is dropped, not sent.
    let mut p = announced(&k);
    p.handle_message(t(310), &vote(&k.v1, 1, 50, h, true));
    p.handle_input(t(400), epoch_ended(1, EpochEndReason::Released));
    let late = t(400).saturating_add(CLAIM_KEPT_FOR);
    p.handle_timeout(late);
    p.handle_message(late, &vote(&k.v2, 1, 50, h, true));
    p.handle_timeout(late);
    assert!(claims(&drain(&mut p)).is_empty());
}

/// Needs 4 GiB whatever the job: a stand-in for the node's trainer.
fn fits_in_4_gib(_: &gpuchain_protocol::JobSpec, have: u64) -> Result<(), String> {
    if have >= 4 << 30 {
        Ok(())
    } else {
        Err(format!("needs 4294967296 bytes, offers {have}"))
    }
}

#[test]
fn a_job_that_does_not_fit_the_memory_gets_no_bid_and_the_refusal_says_why() {
    let k = keys();
    let memory_refusals = |outs: &[Output]| -> Vec<String> {
        notices(outs)
            .into_iter()
            .filter_map(|n| match n {
                Notice::BidRefused {
                    rule: VetRule::Memory,
                    detail,
                    ..
                } => Some(detail),
                _ => None,
            })
            .collect()
    };
    for (gib, fits) in [(8, true), (4, true), (2, false)] {
        let mut cfg = ProviderConfig::new(domain(), gpu(gib), U256::from(1000));
        cfg.memory_fit = Some(fits_in_4_gib);
        let mut p = Provider::new(cfg, k.a.clone());
        confirm(&mut p, 0, &k);
        p.handle_message(t(1), &offer(&k, 1));
        let outs = drain(&mut p);
        assert_eq!(bids(&outs).len(), usize::from(fits), "{gib} GiB");
        let refused = memory_refusals(&outs);
        if fits {
            assert!(refused.is_empty(), "{refused:?}");
        } else {
            assert_eq!(
                refused,
                vec![format!("needs 4294967296 bytes, offers {}", 2u64 << 30)]
            );
            assert_eq!(p.refusals().get(&VetRule::Memory), Some(&1));
            // Told once, not on every later event.
            p.handle_message(t(2), &offer(&k, 1));
            assert!(memory_refusals(&drain(&mut p)).is_empty());
        }
    }
    // The spec's own minimum is the same rule, with its figures.
    let mut small = provider(&k.b, 1000, 0);
    confirm(&mut small, 0, &k);
    small.handle_message(t(1), &offer(&k, 1));
    let refused = memory_refusals(&drain(&mut small));
    assert!(
        refused.len() == 1 && refused[0].contains("asks for") && refused[0].contains("offers 0"),
        "{refused:?}"
    );
}
