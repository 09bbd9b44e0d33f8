//! One test per client transition: the draw, offer, selection (the chain record included),
//! refusals, failure detection and failover, quorum handling (the reject's full wait),
//! rejection, release, late accepts and superseded epochs, completion, restart, and the
//! withhold-pay fault.
//! Long because it is one test per transition of the longest machine, on shared fixtures.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason, TxId};
use gpuchain_protocol::client::{DRAW_RETRY_AFTER, JobParams, Phase, REJECT_FULL_WAIT};
use gpuchain_protocol::detector::Suspicion;
use gpuchain_protocol::faults::{ClientFault, FaultyClient};
use gpuchain_protocol::signing::Scheme;
use gpuchain_protocol::signing::SigningKey;
use gpuchain_protocol::topics::{JOBS_TOPIC, heartbeat_topic, job_topic};
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{
    Client, ClientConfig, Hash, IgnoreReason, Input, Notice, Output, RejectReason, StateMachine,
    U256, Verdict,
};

fn client(k: &Keys) -> Client {
    Client::new(ClientConfig::new(domain()), k.client.clone())
}

fn params() -> JobParams {
    job_params(5_000_000)
}

/// A client whose job exists on chain with its committee drawn, its first offer drained.
fn created(k: &Keys) -> Client {
    let mut c = client(k);
    c.create_job(spec(), params());
    drain(&mut c);
    c.handle_input(t(0), chain(job_created(k)));
    drain(&mut c);
    c.handle_input(t(0), chain(committee_drawn(k)));
    drain(&mut c);
    c
}

/// A client running epoch 1 with provider A, standby bids from P (cheaper) and B for epoch 2.
fn running(k: &Keys) -> Client {
    let mut c = created(k);
    assert!(c.handle_message(t(10), &bid(&k.a, 1, 1000, 8)).is_accept());
    c.handle_timeout(t(500));
    drain(&mut c);
    c.handle_input(t(600), assigned(1, &k.a, 0, Hash::ZERO));
    assert!(c.handle_message(t(610), &bid(&k.p, 2, 2000, 8)).is_accept());
    assert!(c.handle_message(t(610), &bid(&k.b, 2, 3000, 8)).is_accept());
    drain(&mut c);
    c
}

fn assign_of(outs: &[Output]) -> Option<gpuchain_protocol::Address> {
    txs(outs).into_iter().find_map(|(_, tx)| match tx {
        ChainTx::Assign { provider, .. } => Some(provider),
        _ => None,
    })
}

#[test]
fn create_job_submits_create_then_draws_then_offers_on_the_drawn_committee() {
    let k = keys();
    let mut c = client(&k);
    c.create_job(spec(), params());
    let outs = drain(&mut c);
    assert!(matches!(
        &txs(&outs)[..],
        [(_, ChainTx::CreateJob { spec_hash, committee_size: 2, quorum: 2, verifier_fee, .. })]
            if *spec_hash == spec().spec_hash() && *verifier_fee == U256::from(VERIFIER_FEE)
    ));
    c.handle_input(t(0), chain(job_created(&k)));
    let outs = drain(&mut c);
    assert!(outs.contains(&Output::Subscribe {
        topic: job_topic(job())
    }));
    // The job's heartbeats have a topic of their own, which the client alone follows.
    assert!(outs.contains(&Output::Subscribe {
        topic: heartbeat_topic(job())
    }));
    // No offer yet: there are no terms to bid on before the committee is drawn.
    assert!(published(&outs).is_empty(), "{outs:?}");
    assert!(matches!(
        &txs(&outs)[..],
        [(_, ChainTx::DrawCommittee { job_id })] if *job_id == job()
    ));
    assert!(matches!(
        c.job_status(job()).unwrap().phase,
        Phase::Drawing { .. }
    ));
    // A bid before the draw was not made from the chain.
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 1, 1000, 8)),
        Verdict::Ignore(IgnoreReason::UnknownJob)
    );
    c.handle_input(t(0), chain(committee_drawn(&k)));
    let outs = drain(&mut c);
    let offer = outs.iter().find_map(|o| match o {
        Output::Publish {
            topic,
            message: Message::JobOffer(m),
        } if topic == JOBS_TOPIC => Some(m.clone()),
        _ => None,
    });
    let offer = offer.expect("an offer on the jobs topic");
    assert_eq!(offer.next_epoch, 1);
    assert_eq!(offer.committee, committee(&k));
    assert_eq!(c.job_status(job()).unwrap().committee, committee(&k));
    assert_eq!(offer.spec.spec_hash(), spec().spec_hash());
    assert_eq!(offer.check_signature(Scheme::Secp256k1), Ok(()));
    assert_eq!(c.poll_timeout(), Some(t(500)));
}

#[test]
fn jobs_of_other_clients_are_not_adopted() {
    let k = keys();
    let mut c = Client::new(ClientConfig::new(domain()), k.outsider.clone());
    c.handle_input(t(0), chain(job_created(&k)));
    assert!(drain(&mut c).is_empty());
    assert!(c.job_status(job()).is_none());
    // Their bids are still valid gossip to relay.
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 1, 1000, 8)),
        Verdict::Accept
    );
}

#[test]
fn selection_prefers_price_then_fit_then_reputation() {
    let k = keys();
    let mut c = created(&k);
    // P is cheapest but lacks memory; A and B tie on price.
    c.handle_message(t(1), &bid(&k.p, 1, 500, 0));
    c.handle_message(t(1), &bid(&k.a, 1, 1000, 8));
    c.handle_message(t(1), &bid(&k.b, 1, 1000, 8));
    c.handle_timeout(t(499));
    assert!(assign_of(&drain(&mut c)).is_none(), "window still open");
    c.handle_timeout(t(500));
    let outs = drain(&mut c);
    let lowest = k.a.address().min(k.b.address());
    assert_eq!(
        assign_of(&outs),
        Some(lowest),
        "tie broken deterministically by address"
    );
    assert!(matches!(
        c.job_status(job()).unwrap().phase,
        Phase::Assigning { .. }
    ));
}

#[test]
fn no_usable_bid_reopens_bidding_with_a_fresh_offer() {
    let k = keys();
    let mut c = created(&k);
    c.handle_timeout(t(500));
    let outs = drain(&mut c);
    assert!(notices(&outs).contains(&Notice::NoUsableBids {
        job_id: job(),
        epoch: 1
    }));
    assert!(
        published(&outs)
            .iter()
            .any(|m| matches!(m, Message::JobOffer(_)))
    );
    assert_eq!(
        c.job_status(job()).unwrap().phase,
        Phase::Bidding { until: t(1000) }
    );
}

#[test]
fn bids_are_refused_or_ignored_with_reasons() {
    let k = keys();
    let mut c = created(&k);
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 0, 1000, 8)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 9, 1000, 8)),
        Verdict::Ignore(IgnoreReason::FutureEpoch)
    );
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 1, MAX_PRICE + 1, 8)),
        Verdict::Reject(RejectReason::PriceAboveMax)
    );
    // A bid signed over another job's terms would be refused by the escrow: refused here.
    let Message::Bid(b) = bid(&k.a, 1, 1000, 8) else {
        unreachable!()
    };
    let other = gpuchain_protocol::messages::Bid {
        terms: Hash::repeat_byte(9),
        ..b
    }
    .sign(&domain(), &k.a);
    assert_eq!(
        c.handle_message(t(1), &Message::Bid(other)),
        Verdict::Reject(RejectReason::TermsMismatch)
    );
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 1, 1000, 8)),
        Verdict::Accept
    );
    assert_eq!(
        c.handle_message(t(1), &bid(&k.a, 1, 1000, 8)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    let Message::Bid(mut forged) = bid(&k.a, 1, 10, 8) else {
        unreachable!()
    };
    forged.provider = k.b.address();
    assert_eq!(
        c.handle_message(t(1), &Message::Bid(forged)),
        Verdict::Reject(RejectReason::BadSignature)
    );
    let Message::Bid(mut expired) = bid(&k.b, 1, 1000, 8) else {
        unreachable!()
    };
    expired.expiry = BLOCK_TIME - 1;
    let expired = expired.sign(&domain(), &k.b);
    assert_eq!(
        c.handle_message(t(1), &Message::Bid(expired)),
        Verdict::Ignore(IgnoreReason::Expired)
    );
}

#[test]
fn assignment_starts_running_and_heartbeats_are_checked() {
    let k = keys();
    let mut c = running(&k);
    let s = c.job_status(job()).unwrap();
    assert_eq!(
        (s.phase, s.epoch, s.provider),
        (Phase::Running, 1, Some(k.a.address()))
    );
    assert_eq!(
        c.handle_message(t(700), &heartbeat(&k.a, 1, 1, 5)),
        Verdict::Accept
    );
    assert_eq!(
        c.handle_message(t(701), &heartbeat(&k.a, 1, 1, 5)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    assert_eq!(
        c.handle_message(t(800), &heartbeat(&k.a, 1, 3, 9)),
        Verdict::Accept
    );
    assert_eq!(
        c.handle_message(t(801), &heartbeat(&k.a, 1, 2, 7)),
        Verdict::Ignore(IgnoreReason::Replayed)
    );
    assert_eq!(
        c.handle_message(t(802), &heartbeat(&k.b, 1, 10, 9)),
        Verdict::Reject(RejectReason::NotAssignedProvider)
    );
    assert_eq!(
        c.handle_message(t(803), &heartbeat(&k.a, 0, 10, 9)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    assert_eq!(c.job_status(job()).unwrap().last_reported_step, 9);
}

#[test]
fn one_lost_heartbeat_is_not_death() {
    let k = keys();
    let mut c = running(&k);
    for (seq, at) in [(1, 700), (2, 800), /* 900 lost */ (4, 1000), (5, 1100)] {
        c.handle_message(t(at), &heartbeat(&k.a, 1, seq, seq));
        c.handle_timeout(t(at + 99));
    }
    assert!(
        notices(&drain(&mut c))
            .iter()
            .all(|n| !matches!(n, Notice::ProviderLost { .. }))
    );
    assert_eq!(c.job_status(job()).unwrap().phase, Phase::Running);
}

#[test]
fn dead_provider_is_detected_within_300ms_and_replaced_from_standby_bids() {
    let k = keys();
    let mut c = running(&k);
    c.handle_message(t(1000), &heartbeat(&k.a, 1, 1, 10));
    // A dies at 1050; the driver wakes at poll_timeout.
    let wake = c.poll_timeout().unwrap();
    assert!(wake.since(t(1050)) <= Duration::from_millis(300));
    c.handle_timeout(wake);
    let outs = drain(&mut c);
    assert!(
        notices(&outs).iter().any(
            |n| matches!(n, Notice::ProviderLost { provider, .. } if *provider == k.a.address())
        )
    );
    assert_eq!(
        assign_of(&outs),
        Some(k.p.address()),
        "cheapest standby bid, no new bidding round"
    );
    let s = c.job_status(job()).unwrap();
    assert!(s.excluded.contains(&k.a.address()));
    assert!(c.reputation().score(&k.a.address()) < 0);
    // A's late heartbeat for the fenced epoch after P's assignment is stale.
    c.handle_input(wake, assigned(2, &k.p, 0, Hash::ZERO));
    assert_eq!(
        c.handle_message(wake, &heartbeat(&k.a, 1, 2, 11)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    // And A's bids are no longer considered.
    assert_eq!(
        c.handle_message(wake, &bid(&k.a, 3, 1, 8)),
        Verdict::Ignore(IgnoreReason::ProviderExcluded)
    );
}

#[test]
fn a_stalled_provider_is_failed_over_with_reason_stalled() {
    let k = keys();
    let mut c = running(&k);
    // A heartbeats every 100 ms and completes a step every 1 s (10 heartbeats), steps 1 to 20
    // (the checkpoint at 50 is far off)...
    let mut seq = 0;
    let mut now = 700;
    let mut step = 0;
    while step < 20 {
        seq += 1;
        if seq % 10 == 0 {
            step += 1;
        }
        c.handle_message(t(now), &heartbeat(&k.a, 1, seq, step));
        c.handle_timeout(t(now));
        now += 100;
    }
    let last_advance = now - 100;
    assert!(
        notices(&drain(&mut c)).is_empty(),
        "no suspicion while progressing"
    );
    // ...then its GPU hangs: heartbeats go on, the step stays at 20.
    let mut stalled = None;
    while stalled.is_none() && now < last_advance + 20_000 {
        seq += 1;
        c.handle_message(t(now), &heartbeat(&k.a, 1, seq, step));
        let wake = c.poll_timeout().unwrap();
        if wake <= t(now + 100) {
            c.handle_timeout(wake);
            stalled = notices(&drain(&mut c)).into_iter().find_map(|n| match n {
                Notice::ProviderLost {
                    provider, reason, ..
                } => Some((provider, reason, wake)),
                _ => None,
            });
        }
        now += 100;
    }
    let (provider, reason, at) = stalled.expect("a hung provider is noticed");
    assert_eq!(provider, k.a.address());
    assert_eq!(reason, Suspicion::Stalled);
    // 3 × 1 s + 500 ms of slack after the last step was seen.
    assert_eq!(at, t(last_advance + 3500));
    let s = c.job_status(job()).unwrap();
    assert!(s.excluded.contains(&k.a.address()));
    assert_eq!(s.detections.len(), 1);
    assert_eq!(s.detections[0].reason, Suspicion::Stalled);
    assert_eq!(s.detections[0].epoch, 1);
    assert_eq!(s.detections[0].silent_for, Duration::from_millis(3500));
}

#[test]
fn closed_connection_speeds_detection() {
    let k = keys();
    let mut c = running(&k);
    c.handle_message(t(1000), &heartbeat(&k.a, 1, 1, 10));
    c.handle_input(
        t(1010),
        Input::ConnectionClosed {
            address: k.a.address(),
        },
    );
    assert_eq!(c.poll_timeout(), Some(t(1060)));
    c.handle_timeout(t(1060));
    assert!(
        notices(&drain(&mut c))
            .iter()
            .any(|n| matches!(n, Notice::ProviderLost { .. }))
    );
}

#[test]
fn a_measured_round_trip_widens_that_providers_floor() {
    let k = keys();
    // The node's detector: adaptive between a 300 ms floor and a 750 ms ceiling.
    let mut config = ClientConfig::new(domain());
    config.detector.timeout = Duration::from_millis(750);
    config.detector.floor = Duration::from_millis(300);
    let mut c = Client::new(config, k.client.clone());
    c.create_job(spec(), params());
    drain(&mut c);
    c.handle_input(t(0), chain(job_created(&k)));
    c.handle_input(t(0), chain(committee_drawn(&k)));
    assert!(c.handle_message(t(10), &bid(&k.a, 1, 1000, 8)).is_accept());
    c.handle_timeout(t(500));
    // Measured before the assignment: the detector the assignment arms has it.
    c.handle_input(
        t(550),
        Input::PathRtt {
            address: k.a.address(),
            rtt: Duration::from_millis(160),
        },
    );
    c.handle_input(t(600), assigned(1, &k.a, 0, Hash::ZERO));
    drain(&mut c);
    let mut now = 600;
    for seq in 1..=20 {
        now += 100;
        c.handle_message(t(now), &heartbeat(&k.a, 1, seq, 0));
    }
    // A steady rhythm, but one heartbeat lost on a 160 ms path and resent costs
    // 200 + 160 + 40 ms: the floor is that and half a period, not 300.
    assert_eq!(c.poll_timeout(), Some(t(now + 450)));
    c.handle_timeout(t(now + 300));
    assert!(notices(&drain(&mut c)).is_empty());
    // A shorter round trip measured now lowers the floor from the next heartbeat on; the
    // deadline already set stands.
    c.handle_input(
        t(now + 310),
        Input::PathRtt {
            address: k.a.address(),
            rtt: Duration::from_micros(300),
        },
    );
    assert_eq!(c.poll_timeout(), Some(t(now + 450)));
    c.handle_timeout(t(now + 450));
    assert!(
        notices(&drain(&mut c))
            .iter()
            .any(|n| matches!(n, Notice::ProviderLost { .. }))
    );
}

#[test]
fn failed_assign_moves_to_next_bid() {
    let k = keys();
    let mut c = created(&k);
    c.handle_message(t(1), &bid(&k.a, 1, 1000, 8));
    c.handle_message(t(1), &bid(&k.b, 1, 3000, 8));
    c.handle_timeout(t(500));
    let outs = drain(&mut c);
    let (id, _) = txs(&outs)[0].clone();
    assert_eq!(assign_of(&outs), Some(k.a.address()));
    c.handle_input(
        t(510),
        Input::TxFailed {
            id,
            reason: "bid expired".into(),
        },
    );
    assert_eq!(assign_of(&drain(&mut c)), Some(k.b.address()));
}

#[test]
fn accept_quorum_submits_once_with_sorted_signatures() {
    let k = keys();
    let mut c = running(&k);
    let h = ckpt(0xa, 50);
    assert_eq!(
        c.handle_message(t(700), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Accept
    );
    assert!(drain(&mut c).contains(&Output::FetchBlob {
        hash: h,
        from: Some(k.a.address())
    }));
    assert_eq!(
        c.handle_message(t(700), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    assert_eq!(
        c.handle_message(t(710), &vote(&k.v1, 1, 50, h, true)),
        Verdict::Accept
    );
    // The same vote again (a replay) counts once: still no quorum.
    assert_eq!(
        c.handle_message(t(711), &vote(&k.v1, 1, 50, h, true)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    assert!(txs(&drain(&mut c)).is_empty());
    // A verifier off the committee cannot make up the quorum.
    assert_eq!(
        c.handle_message(t(712), &vote(&k.outsider, 1, 50, h, true)),
        Verdict::Reject(RejectReason::NotListedVerifier)
    );
    assert!(txs(&drain(&mut c)).is_empty());
    assert_eq!(
        c.handle_message(t(720), &vote(&k.v2, 1, 50, h, true)),
        Verdict::Accept
    );
    let outs = drain(&mut c);
    let [
        (
            _,
            ChainTx::AcceptCheckpoint {
                epoch: 1,
                step: 50,
                checkpoint_hash,
                sigs,
                ..
            },
        ),
    ] = &txs(&outs)[..]
    else {
        panic!("expected one acceptCheckpoint, got {outs:?}")
    };
    assert_eq!(*checkpoint_hash, h);
    let Message::Vote(v1) = vote(&k.v1, 1, 50, h, true) else {
        unreachable!()
    };
    let Message::Vote(v2) = vote(&k.v2, 1, 50, h, true) else {
        unreachable!()
    };
    let expected = if k.v1.address() < k.v2.address() {
        [v1.signature, v2.signature]
    } else {
        [v2.signature, v1.signature]
    };
    assert_eq!(sigs[..], expected[..]);
    // Late votes after submission do not resubmit.
    assert_eq!(
        c.handle_message(t(730), &vote(&k.v2, 1, 50, h, true)),
        Verdict::Ignore(IgnoreReason::AlreadyDecided)
    );
    c.handle_input(t(800), accepted(1, 50, h, &k.a));
    assert_eq!(c.job_status(job()).unwrap().last_accepted, 50);
    assert_eq!(
        c.handle_message(t(810), &vote(&k.v1, 1, 50, h, false)),
        Verdict::Ignore(IgnoreReason::AlreadyDecided)
    );
}

#[test]
fn a_decision_that_failed_to_land_is_sent_again_on_a_repeated_vote() {
    let k = keys();
    let mut c = running(&k);
    let h = ckpt(0xa, 50);
    c.handle_message(t(700), &announce(&k.a, 1, 0, 50, 0xa));
    c.handle_message(t(710), &vote(&k.v1, 1, 50, h, true));
    c.handle_message(t(720), &vote(&k.v2, 1, 50, h, true));
    let first = txs(&drain(&mut c));
    let [(id, tx)] = &first[..] else {
        panic!("expected one decision, got {first:?}")
    };
    // The chain RPC was down: the decision never reached the chain.
    c.handle_input(
        t(730),
        Input::TxFailed {
            id: *id,
            reason: "cannot reach the chain RPC".into(),
        },
    );
    assert!(txs(&drain(&mut c)).is_empty());
    // Every vote is already in the tally; a verifier's repeat sends the same decision again,
    // once.
    assert_eq!(
        c.handle_message(t(740), &vote(&k.v1, 1, 50, h, true)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    let again = txs(&drain(&mut c));
    assert!(
        matches!(&again[..], [(_, resent)] if resent == tx),
        "expected the same decision again, got {again:?}"
    );
    assert_eq!(
        c.handle_message(t(750), &vote(&k.v2, 1, 50, h, true)),
        Verdict::Ignore(IgnoreReason::AlreadyDecided)
    );
    assert!(txs(&drain(&mut c)).is_empty());
}

#[test]
fn equivocating_and_stale_votes_are_refused() {
    let k = keys();
    let mut c = running(&k);
    let h = ckpt(0xa, 50);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, true));
    assert_eq!(
        c.handle_message(t(701), &vote(&k.v1, 1, 50, h, false)),
        Verdict::Reject(RejectReason::Equivocation)
    );
    assert_eq!(
        c.handle_message(t(702), &vote(&k.v2, 0, 50, h, true)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    assert!(txs(&drain(&mut c)).is_empty());
}

#[test]
fn reject_quorum_then_rejection_reassigns_and_excludes() {
    let k = keys();
    let mut c = running(&k);
    let h = ckpt(0xa, 50);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, false));
    c.handle_message(t(701), &vote(&k.v2, 1, 50, h, false));
    let outs = drain(&mut c);
    assert!(matches!(
        &txs(&outs)[..],
        [(_, ChainTx::RejectCheckpoint { step: 50, .. })]
    ));
    c.handle_input(t(800), rejected(1, 50, h, &k.a));
    c.handle_input(t(800), epoch_ended(1, EpochEndReason::Rejected));
    let outs = drain(&mut c);
    assert_eq!(txs(&outs).len(), 1, "one reassignment despite two events");
    assert_eq!(assign_of(&outs), Some(k.p.address()));
    assert!(c.reputation().is_banned(&k.a.address()));
}

#[test]
fn released_epoch_is_reassigned() {
    let k = keys();
    let mut c = running(&k);
    c.handle_input(t(800), epoch_ended(1, EpochEndReason::Released));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.p.address()));
    // A replaced epoch (our own assign) does not trigger another assignment.
    c.handle_input(t(900), assigned(2, &k.p, 0, Hash::ZERO));
    c.handle_input(t(900), epoch_ended(1, EpochEndReason::Replaced));
    assert!(txs(&drain(&mut c)).is_empty());
}

#[test]
fn last_step_accepted_finishes_and_completion_unsubscribes() {
    let k = keys();
    let mut c = running(&k);
    c.handle_input(t(900), accepted(1, 400, ckpt(0xa, 400), &k.a));
    assert_eq!(c.job_status(job()).unwrap().phase, Phase::Finished);
    assert_eq!(c.poll_timeout(), None, "no detector once done");
    c.handle_input(
        t(901),
        chain(gpuchain_protocol::chain::ChainEvent::JobCompleted {
            job_id: job(),
            refund: U256::from(1),
        }),
    );
    let outs = drain(&mut c);
    assert!(outs.contains(&Output::Unsubscribe {
        topic: job_topic(job())
    }));
    assert!(outs.contains(&Output::Unsubscribe {
        topic: heartbeat_topic(job())
    }));
    // What the job did not spend waits in the escrow until someone settles it: we do.
    assert!(
        matches!(&txs(&outs)[..], [(_, ChainTx::Settle { job_id })] if *job_id == job()),
        "{outs:?}"
    );
    c.handle_timeout(t(100_000));
    assert!(txs(&drain(&mut c)).is_empty());
}

#[test]
fn a_client_restarted_before_its_settle_landed_settles() {
    let k = keys();
    let completed = |refund: u64| {
        vec![
            (BLOCK_TIME, job_created(&k)),
            (
                BLOCK_TIME,
                gpuchain_protocol::chain::ChainEvent::JobCompleted {
                    job_id: job(),
                    refund: U256::from(refund),
                },
            ),
        ]
    };
    let restore = |history| {
        let mut c = Client::restore(
            ClientConfig::new(domain()),
            k.client.clone(),
            [spec()],
            history,
            t(10),
        );
        txs(&drain(&mut c))
    };
    assert!(matches!(
        &restore(completed(7))[..],
        [(_, ChainTx::Settle { .. })]
    ));
    // Nothing left to refund: the committee's fees still wait for the settle.
    assert!(matches!(
        &restore(completed(0))[..],
        [(_, ChainTx::Settle { .. })]
    ));
    // Already settled: nothing to send.
    let mut settled = completed(7);
    settled.push((
        BLOCK_TIME,
        gpuchain_protocol::chain::ChainEvent::JobSettled {
            job_id: job(),
            client: k.client.address(),
            refund: U256::from(7),
        },
    ));
    assert!(restore(settled).is_empty());
}

#[test]
fn restarted_client_rebuilds_from_chain_history() {
    let k = keys();
    let history = vec![
        (BLOCK_TIME, job_created(&k)),
        (BLOCK_TIME, committee_drawn(&k)),
        (
            BLOCK_TIME,
            gpuchain_protocol::chain::ChainEvent::ProviderAssigned {
                job_id: job(),
                epoch: 1,
                provider: k.a.address(),
                price_per_step: U256::from(1000),
                start_step: 0,
                start_checkpoint: Hash::ZERO,
            },
        ),
        (
            BLOCK_TIME,
            gpuchain_protocol::chain::ChainEvent::CheckpointAccepted {
                job_id: job(),
                epoch: 1,
                step: 50,
                checkpoint_hash: ckpt(0xa, 50),
                provider: k.a.address(),
                amount: U256::from(50_000),
                voters: U256::from(0b11),
                fees: U256::from(2 * VERIFIER_FEE),
            },
        ),
    ];
    let mut c = Client::restore(
        ClientConfig::new(domain()),
        k.client.clone(),
        [spec()],
        history,
        t(5000),
    );
    let outs = drain(&mut c);
    assert_eq!(
        outs,
        vec![
            Output::Subscribe {
                topic: job_topic(job())
            },
            Output::Subscribe {
                topic: heartbeat_topic(job())
            },
        ],
        "history is not replayed outward"
    );
    let s = c.job_status(job()).unwrap();
    assert_eq!(
        (s.phase, s.epoch, s.provider, s.last_accepted),
        (Phase::Running, 1, Some(k.a.address()), 50)
    );
    // Detection re-armed from the restart, and the job carries on: heartbeats and a quorum.
    assert_eq!(c.poll_timeout(), Some(t(5250)));
    assert_eq!(
        c.handle_message(t(5100), &heartbeat(&k.a, 1, 40, 80)),
        Verdict::Accept
    );
    let h = ckpt(0xa, 100);
    c.handle_message(t(5110), &vote(&k.v1, 1, 100, h, true));
    c.handle_message(t(5120), &vote(&k.v2, 1, 100, h, true));
    assert!(matches!(
        &txs(&drain(&mut c))[..],
        [(_, ChainTx::AcceptCheckpoint { step: 100, .. })]
    ));
    // A restart before any assignment re-offers.
    let mut fresh = Client::restore(
        ClientConfig::new(domain()),
        k.client.clone(),
        [spec()],
        [
            (BLOCK_TIME, job_created(&k)),
            (BLOCK_TIME, committee_drawn(&k)),
        ],
        t(10),
    );
    let outs = drain(&mut fresh);
    assert!(
        published(&outs)
            .iter()
            .any(|m| matches!(m, Message::JobOffer(o) if o.next_epoch == 1))
    );
    // A restart before the draw asks for it again, and offers nothing yet.
    let mut drawing = Client::restore(
        ClientConfig::new(domain()),
        k.client.clone(),
        [spec()],
        [(BLOCK_TIME, job_created(&k))],
        t(10),
    );
    let outs = drain(&mut drawing);
    assert!(published(&outs).is_empty());
    assert!(matches!(
        &txs(&outs)[..],
        [(_, ChainTx::DrawCommittee { .. })]
    ));
}

#[test]
fn votes_off_the_checkpoint_grid_are_rejected() {
    let k = keys();
    let mut c = running(&k);
    assert_eq!(
        c.handle_message(t(700), &vote(&k.v1, 1, 49, ckpt(0xa, 49), true)),
        Verdict::Reject(RejectReason::InvalidCheckpointStep)
    );
    assert_eq!(
        c.handle_message(t(700), &vote(&k.v1, 1, 450, ckpt(0xa, 450), true)),
        Verdict::Reject(RejectReason::InvalidCheckpointStep)
    );
}

#[test]
fn a_repeated_assignment_event_does_not_reopen_heartbeat_replays() {
    let k = keys();
    let mut c = running(&k);
    assert_eq!(
        c.handle_message(t(700), &heartbeat(&k.a, 1, 5, 5)),
        Verdict::Accept
    );
    c.handle_input(t(710), assigned(1, &k.a, 0, Hash::ZERO));
    assert_eq!(
        c.handle_message(t(720), &heartbeat(&k.a, 1, 4, 4)),
        Verdict::Ignore(IgnoreReason::Replayed)
    );
}

#[test]
fn rejection_keeps_the_provider_out_whatever_the_event_order() {
    let k = keys();
    let mut c = running(&k);
    // A standby bid from A itself for the next epoch must not be picked after its rejection.
    c.handle_message(t(650), &bid(&k.a, 2, 1, 8));
    c.handle_input(t(800), epoch_ended(1, EpochEndReason::Rejected));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.p.address()));
    assert!(
        c.job_status(job())
            .unwrap()
            .excluded
            .contains(&k.a.address())
    );
}

#[test]
fn an_assign_that_never_confirms_is_given_up_for_the_next_bid() {
    let k = keys();
    let mut c = created(&k);
    c.handle_message(t(1), &bid(&k.a, 1, 1000, 8));
    c.handle_message(t(1), &bid(&k.b, 1, 3000, 8));
    c.handle_timeout(t(500));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.a.address()));
    assert_eq!(c.poll_timeout(), Some(t(30_500)));
    c.handle_timeout(t(30_500));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.b.address()));
    // The first one landing late is adopted: the chain is the authority.
    c.handle_input(t(30_600), assigned(1, &k.a, 0, Hash::ZERO));
    let s = c.job_status(job()).unwrap();
    assert_eq!((s.phase, s.provider), (Phase::Running, Some(k.a.address())));
}

/// A running client that has just taken A's announce of step 50 and asked for its copy; the
/// copy's hash.
fn copying(k: &Keys) -> (Client, Hash) {
    let mut c = running(k);
    c.handle_message(t(700), &announce(&k.a, 1, 0, 50, 0xa));
    drain(&mut c);
    (c, ckpt(0xa, 50))
}

/// How many fetches of `h` the client asked for.
fn fetches_of(c: &mut Client, h: Hash) -> usize {
    drain(c)
        .iter()
        .filter(|o| matches!(o, Output::FetchBlob { hash, .. } if *hash == h))
        .count()
}

#[test]
fn own_checkpoint_copy_is_fetched_again_after_a_backoff_then_given_up() {
    let k = keys();
    let (mut c, h) = copying(&k);
    let failed = Input::BlobFetched { hash: h, ok: false };
    let mut now = 710;
    for wait in [200, 400] {
        c.handle_input(t(now), failed.clone());
        c.handle_input(t(now), failed.clone()); // one failure, answered twice
        assert_eq!(fetches_of(&mut c, h), 0, "no fetch before the wait");
        c.handle_timeout(t(now + wait - 1));
        assert_eq!(fetches_of(&mut c, h), 0, "not yet due after {wait} ms");
        c.handle_timeout(t(now + wait));
        assert_eq!(fetches_of(&mut c, h), 1, "fetched again after {wait} ms");
        now += wait;
    }
    // The third failure is the last try: no more fetches, ever.
    c.handle_input(t(now), failed);
    c.handle_timeout(t(now + 60_000));
    assert_eq!(fetches_of(&mut c, h), 0);
}

#[test]
fn own_checkpoint_copy_is_not_fetched_again_once_it_arrived() {
    let k = keys();
    let (mut c, h) = copying(&k);
    c.handle_input(t(710), Input::BlobFetched { hash: h, ok: false });
    // Fetched for another role of this node meanwhile.
    c.handle_input(t(720), Input::BlobFetched { hash: h, ok: true });
    c.handle_timeout(t(5_000));
    assert_eq!(fetches_of(&mut c, h), 0);
}

#[test]
fn a_failed_or_moved_draw_is_asked_for_again() {
    let k = keys();
    let mut c = client(&k);
    c.create_job(spec(), params());
    drain(&mut c);
    c.handle_input(t(0), chain(job_created(&k)));
    let (id, _) = txs(&drain(&mut c))[0].clone();
    // The seed block was not mined yet: asked again after the retry wait, not at once.
    c.handle_input(
        t(100),
        Input::TxFailed {
            id,
            reason: "SeedNotMined(7)".into(),
        },
    );
    assert!(txs(&drain(&mut c)).is_empty());
    let retry = t(100).saturating_add(DRAW_RETRY_AFTER);
    assert_eq!(c.poll_timeout(), Some(retry));
    c.handle_timeout(retry);
    assert!(matches!(
        &txs(&drain(&mut c))[..],
        [(_, ChainTx::DrawCommittee { .. })]
    ));
    // The seed's hash was gone and moved: asked again at once.
    c.handle_input(
        t(1_200),
        chain(ChainEvent::CommitteeSeedMoved {
            job_id: job(),
            seed_block: 400,
        }),
    );
    assert!(matches!(
        &txs(&drain(&mut c))[..],
        [(_, ChainTx::DrawCommittee { .. })]
    ));
    // Someone else drew it: our draw's failure changes nothing.
    c.handle_input(t(1_300), chain(committee_drawn(&k)));
    assert!(
        published(&drain(&mut c))
            .iter()
            .any(|m| matches!(m, Message::JobOffer(_)))
    );
    c.handle_input(
        t(1_310),
        Input::TxFailed {
            id: TxId(99),
            reason: "WrongStatus(1)".into(),
        },
    );
    assert!(matches!(
        c.job_status(job()).unwrap().phase,
        Phase::Bidding { .. }
    ));
}

/// A client whose job has a committee of three (`v1`, `v2`, `v3`), quorum two, running epoch
/// 1 with A.
fn running_with_three(k: &Keys, v3: &SigningKey) -> Client {
    // A patient detector: these tests are about votes, not heartbeats.
    let mut config = ClientConfig::new(domain());
    config.detector.timeout = Duration::from_secs(60);
    let mut c = Client::new(config, k.client.clone());
    let ChainEvent::JobCreated {
        job_id,
        client,
        token,
        budget,
        max_price_per_step,
        total_steps,
        checkpoint_interval,
        spec_hash,
        verifier_fee,
        deadline,
        grace,
        seed_block,
        ..
    } = job_created(k)
    else {
        unreachable!()
    };
    let created = ChainEvent::JobCreated {
        job_id,
        client,
        token,
        budget,
        max_price_per_step,
        total_steps,
        checkpoint_interval,
        spec_hash,
        committee_size: 3,
        quorum: 2,
        verifier_fee,
        deadline,
        grace,
        seed_block,
    };
    let members = vec![k.v1.address(), k.v2.address(), v3.address()];
    let terms = created.terms_with(&members).unwrap();
    c.handle_input(t(0), chain(created));
    c.handle_input(
        t(0),
        chain(ChainEvent::CommitteeDrawn {
            job_id: job(),
            committee: members,
            terms,
        }),
    );
    c.handle_input(t(600), assigned(1, &k.a, 0, Hash::ZERO));
    drain(&mut c);
    c
}

#[test]
fn a_reject_quorum_waits_for_the_whole_committee_then_goes_with_what_it_has() {
    let k = keys();
    let v3 = SigningKey::from_seed(107);
    let h = ckpt(0xa, 50);
    let mut c = running_with_three(&k, &v3);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, false));
    c.handle_message(t(710), &vote(&k.v2, 1, 50, h, false));
    let outs = drain(&mut c);
    assert!(txs(&outs).is_empty(), "a quorum, but not all: wait");
    let due = t(710).saturating_add(REJECT_FULL_WAIT);
    assert_eq!(c.poll_timeout(), Some(due));
    c.handle_timeout(t(710 + 1_999));
    assert!(txs(&drain(&mut c)).is_empty());
    c.handle_timeout(due);
    let outs = drain(&mut c);
    let [(_, ChainTx::RejectCheckpoint { sigs, step: 50, .. })] = &txs(&outs)[..] else {
        panic!("{outs:?}")
    };
    assert_eq!(sigs.len(), 2, "with what it has");
    // The third reject arriving later changes nothing: it was submitted.
    assert_eq!(
        c.handle_message(t(3_000), &vote(&v3, 1, 50, h, false)),
        Verdict::Ignore(IgnoreReason::AlreadyDecided)
    );

    // All three in within the wait: submitted at once, with all three (so it slashes).
    let mut c = running_with_three(&k, &v3);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, false));
    c.handle_message(t(710), &vote(&k.v2, 1, 50, h, false));
    c.handle_message(t(720), &vote(&v3, 1, 50, h, false));
    let outs = drain(&mut c);
    let [(_, ChainTx::RejectCheckpoint { sigs, .. })] = &txs(&outs)[..] else {
        panic!("{outs:?}")
    };
    assert_eq!(sigs.len(), 3);
    c.handle_timeout(t(10_000));
    assert!(txs(&drain(&mut c)).is_empty(), "submitted once");

    // Accepts do not wait: the quorum goes at once.
    let mut c = running_with_three(&k, &v3);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, true));
    c.handle_message(t(710), &vote(&v3, 1, 50, h, true));
    assert!(matches!(
        &txs(&drain(&mut c))[..],
        [(_, ChainTx::AcceptCheckpoint { .. })]
    ));
}

#[test]
fn a_superseded_epoch_is_reassigned_from_the_new_head() {
    let k = keys();
    let mut c = running(&k);
    // We ended A's epoch; P took over from step 0.
    c.handle_input(t(800), epoch_ended(1, EpochEndReason::Released));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.p.address()));
    c.handle_input(t(900), assigned(2, &k.p, 0, Hash::ZERO));
    assert!(c.handle_message(t(910), &bid(&k.b, 3, 3000, 8)).is_accept());
    drain(&mut c);
    // A's checkpoint 50 lands late (its claim, in the escrow's decision window), which
    // supersedes P's epoch.
    c.handle_input(t(1_000), accepted(1, 50, ckpt(0xa, 50), &k.a));
    assert_eq!(c.job_status(job()).unwrap().last_accepted, 50);
    c.handle_input(t(1_000), epoch_ended(2, EpochEndReason::Superseded));
    let outs = drain(&mut c);
    assert_eq!(assign_of(&outs), Some(k.b.address()));
    let s = c.job_status(job()).unwrap();
    assert!(!s.excluded.contains(&k.p.address()), "no fault of P's");
    assert_eq!(c.reputation().score(&k.p.address()), 0);
    // The next assignment starts from the new head.
    c.handle_input(t(1_100), assigned(3, &k.b, 50, ckpt(0xa, 50)));
    let s = c.job_status(job()).unwrap();
    assert_eq!((s.epoch, s.last_accepted, s.phase), (3, 50, Phase::Running));
}

/// Events of another client's job 2 that give `provider` a record on chain.
fn other_job(provider: &SigningKey, k: &Keys, epochs: &[(bool, bool)]) -> Vec<ChainEvent> {
    let j2 = U256::from(2);
    let mut out = vec![ChainEvent::CommitteeDrawn {
        job_id: j2,
        committee: committee(k),
        terms: Hash::repeat_byte(2),
    }];
    for (i, (rejected, slashed)) in epochs.iter().enumerate() {
        let epoch = i as u64 + 1;
        out.push(ChainEvent::ProviderAssigned {
            job_id: j2,
            epoch,
            provider: provider.address(),
            price_per_step: U256::from(1),
            start_step: 0,
            start_checkpoint: Hash::ZERO,
        });
        if *rejected {
            out.push(ChainEvent::CheckpointRejected {
                job_id: j2,
                epoch,
                step: 50,
                checkpoint_hash: Hash::ZERO,
                provider: provider.address(),
                slashed: U256::from(u64::from(*slashed)),
                voters: U256::from(0b11),
                fees: U256::ZERO,
            });
        }
        let reason = if *rejected {
            EpochEndReason::Rejected
        } else {
            EpochEndReason::Released
        };
        out.push(ChainEvent::EpochEnded {
            job_id: j2,
            epoch,
            reason,
        });
    }
    out
}

#[test]
fn bid_choice_reads_the_chain_record() {
    let k = keys();
    // P was rejected once elsewhere: it ranks below A despite the lower price.
    let mut c = created(&k);
    for e in other_job(&k.p, &k, &[(true, true)]) {
        c.handle_input(t(1), chain(e));
    }
    assert_eq!(c.chain_record().provider(&k.p.address()).epochs_rejected, 1);
    c.handle_message(t(2), &bid(&k.p, 1, 500, 8));
    c.handle_message(t(2), &bid(&k.a, 1, 1000, 8));
    c.handle_timeout(t(500));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.a.address()));

    // Over the limit of rejected epochs: not considered at all, even alone.
    let mut c = created(&k);
    for e in other_job(&k.p, &k, &[(true, false), (true, false), (true, true)]) {
        c.handle_input(t(1), chain(e));
    }
    c.handle_message(t(2), &bid(&k.p, 1, 500, 8));
    c.handle_timeout(t(500));
    let outs = drain(&mut c);
    assert!(assign_of(&outs).is_none());
    assert!(notices(&outs).contains(&Notice::NoUsableBids {
        job_id: job(),
        epoch: 1
    }));

    // Epochs lost to clients (who can end them at will) never exclude, and a cheaper bid
    // with many of them still wins.
    let mut c = created(&k);
    for e in other_job(&k.p, &k, &[(false, false); 40]) {
        c.handle_input(t(1), chain(e));
    }
    assert_eq!(c.chain_record().provider(&k.p.address()).epochs_lost, 40);
    c.handle_message(t(2), &bid(&k.p, 1, 500, 8));
    c.handle_message(t(2), &bid(&k.a, 1, 1000, 8));
    c.handle_timeout(t(500));
    assert_eq!(assign_of(&drain(&mut c)), Some(k.p.address()));
}

#[test]
fn the_withhold_pay_fault_releases_instead_of_accepting() {
    let k = keys();
    let mut c = FaultyClient::new(running(&k), ClientFault::WithholdPay);
    let h = ckpt(0xa, 50);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, true));
    c.handle_message(t(710), &vote(&k.v2, 1, 50, h, true));
    let outs = drain(&mut c);
    assert!(matches!(
        &txs(&outs)[..],
        [(_, ChainTx::ReleaseProvider { job_id })] if *job_id == job()
    ));
    // Rejects are not its business: they go out as the honest client sends them.
    let mut c = FaultyClient::new(running(&k), ClientFault::WithholdPay);
    c.handle_message(t(700), &vote(&k.v1, 1, 50, h, false));
    c.handle_message(t(710), &vote(&k.v2, 1, 50, h, false));
    assert!(matches!(
        &txs(&drain(&mut c))[..],
        [(_, ChainTx::RejectCheckpoint { .. })]
    ));
}
