//! One test per verifier transition: fetching, quality test, spot check, voting, ordering,
//! refusals and epoch changes.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpuchain_protocol::chain::EpochEndReason;
use gpuchain_protocol::eip712::VoteFields;
use gpuchain_protocol::io::{Output, QualityReport, SpotStep};
use gpuchain_protocol::signing::{Scheme, SigningKey};
use gpuchain_protocol::verifier::spot_check_steps;
use gpuchain_protocol::wire::{Message, Vote};
use gpuchain_protocol::{
    Hash, IgnoreReason, Input, RejectReason, StateMachine, Time, Verdict, Verifier, VerifierConfig,
};
use std::time::Duration;

fn verifier(key: &SigningKey, k: &Keys) -> Verifier {
    let mut v = Verifier::new(VerifierConfig::new(domain(), 42), key.clone());
    confirm(&mut v, 0, k);
    v.handle_input(t(0), assigned(1, &k.a, 0, Hash::ZERO));
    drain(&mut v);
    v
}

fn votes(outs: &[Output]) -> Vec<Vote> {
    published(outs)
        .into_iter()
        .filter_map(|m| match m {
            Message::Vote(v) => Some(v),
            _ => None,
        })
        .collect()
}

/// What the verifier's newly published votes say, in order: accept or reject.
fn accepts(v: &mut Verifier) -> Vec<bool> {
    votes(&drain(v)).iter().map(|v| v.accept).collect()
}

fn quality(step: u64, tag: u8, pass: bool) -> Input {
    Input::QualityResult {
        job_id: job(),
        epoch: 1,
        step,
        checkpoint_hash: ckpt(tag, step),
        report: QualityReport {
            pass,
            accuracy: 0.8,
            loss: 0.5,
        },
    }
}

fn spot(step: u64, tag: u8, pass: bool) -> Input {
    Input::SpotCheckResult {
        job_id: job(),
        epoch: 1,
        step,
        checkpoint_hash: ckpt(tag, step),
        pass,
    }
}

#[test]
fn only_committee_members_track_a_job() {
    let k = keys();
    let mut v = Verifier::new(VerifierConfig::new(domain(), 1), k.outsider.clone());
    confirm(&mut v, 0, &k);
    assert!(drain(&mut v).is_empty());
    // A member learns its seat from the draw, not from the creation.
    let mut member = Verifier::new(VerifierConfig::new(domain(), 1), k.v1.clone());
    member.handle_input(t(0), chain(job_created(&k)));
    assert!(drain(&mut member).is_empty(), "no seat before the draw");
    member.handle_input(t(0), chain(committee_drawn(&k)));
    assert_eq!(
        drain(&mut member),
        vec![Output::Subscribe {
            topic: gpuchain_protocol::topics::job_topic(job())
        }]
    );
    // A draw that seats others leaves it out.
    let mut passed_over = Verifier::new(VerifierConfig::new(domain(), 1), k.v1.clone());
    passed_over.handle_input(t(0), chain(job_created(&k)));
    passed_over.handle_input(
        t(0),
        chain(drawn_with(&k, vec![k.v2.address(), k.outsider.address()])),
    );
    assert!(drain(&mut passed_over).is_empty());
    assert_eq!(passed_over.head(job()), None);
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Accept,
        "relayed"
    );
    assert!(drain(&mut v).is_empty());
}

#[test]
fn passing_checkpoint_is_fetched_tested_and_voted_accept() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Accept
    );
    assert_eq!(
        drain(&mut v),
        vec![Output::FetchBlob {
            hash: ckpt(0xa, 50),
            from: Some(k.a.address())
        }]
    );
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    let outs = drain(&mut v);
    // The runner is told the job's spec and the state the announce committed to, so it
    // keeps no tables of its own.
    assert!(outs.contains(&Output::RunQualityTest {
        job_id: job(),
        spec_hash: spec().spec_hash(),
        epoch: 1,
        step: 50,
        checkpoint_hash: ckpt(0xa, 50),
        committed_state: *states(0xa, 0, 50).last().unwrap(),
        baseline: Hash::ZERO,
        baseline_step: 0,
    }));
    let steps = outs.iter().find_map(|o| match o {
        Output::RunSpotCheck { steps, .. } => Some(steps.clone()),
        _ => None,
    });
    let steps = steps.expect("a spot check");
    assert_eq!(steps.len(), 2, "the spec asks for two steps");
    // Each sample names the nearest anchor of the rule at or before its transition and the
    // committed hashes from there through the sampled step: the runner replays and checks them
    // all, and fetches nothing but the anchor.
    let anchors = gpuchain_protocol::anchors::anchor_steps(0, 50);
    assert_eq!(anchors, vec![0, 16, 33]);
    for s in &steps {
        let anchor_step = *anchors.iter().rev().find(|a| **a < s.step).unwrap();
        assert_eq!(
            *s,
            SpotStep {
                step: s.step,
                anchor_step,
                hashes: (anchor_step..=s.step).map(|i| state_hash(0xa, i)).collect(),
            }
        );
        assert_eq!(s.anchor(), Some(state_hash(0xa, anchor_step)));
        assert!(s.replayed() >= 1 && s.replayed() <= 17, "{s:?}");
    }
    v.handle_input(t(3), quality(50, 0xa, true));
    assert!(votes(&drain(&mut v)).is_empty(), "waits for the spot check");
    v.handle_input(t(4), spot(50, 0xa, true));
    let vs = votes(&drain(&mut v));
    assert_eq!(vs.len(), 1);
    assert!(vs[0].accept);
    assert_eq!(
        VoteFields::recover(
            &vs[0].fields(),
            &domain(),
            Scheme::Secp256k1,
            &vs[0].signature
        ),
        Ok(k.v1.address())
    );
    assert_eq!(v.head(job()), Some((50, ckpt(0xa, 50))));
}

#[test]
fn failed_quality_test_votes_reject_without_waiting() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    drain(&mut v);
    v.handle_input(t(3), quality(50, 0xa, false));
    let vs = votes(&drain(&mut v));
    assert_eq!(vs.iter().map(|v| v.accept).collect::<Vec<_>>(), vec![false]);
    assert_eq!(v.head(job()), Some((0, Hash::ZERO)));
    // The spot check's late result changes nothing.
    v.handle_input(t(4), spot(50, 0xa, true));
    assert!(votes(&drain(&mut v)).is_empty());
}

#[test]
fn non_finite_metrics_fail_and_spot_check_failure_rejects() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    v.handle_input(
        t(3),
        Input::QualityResult {
            job_id: job(),
            epoch: 1,
            step: 50,
            checkpoint_hash: ckpt(0xa, 50),
            report: QualityReport {
                pass: true,
                accuracy: f64::NAN,
                loss: 0.1,
            },
        },
    );
    assert_eq!(accepts(&mut v), vec![false]);

    let mut v = verifier(&k.v2, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    v.handle_input(t(3), spot(50, 0xa, false));
    assert_eq!(accepts(&mut v), vec![false]);
}

#[test]
fn unavailable_checkpoint_is_retried_after_a_backoff_then_rejected() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    drain(&mut v);
    let failed = Input::BlobFetched {
        hash: ckpt(0xa, 50),
        ok: false,
    };
    let refetch = Output::FetchBlob {
        hash: ckpt(0xa, 50),
        from: Some(k.a.address()),
    };
    let mut now = 2_000;
    // The default policy: three tries, 200 ms then 400 ms apart.
    for (attempt, wait_ms) in [(1, 200u64), (2, 400)] {
        v.handle_input(t(now), failed.clone());
        assert!(
            drain(&mut v).is_empty(),
            "try {attempt} failed: no fetch at once"
        );
        // A second answer to the same failed fetch arms nothing twice.
        v.handle_input(t(now), failed.clone());
        let due = now + wait_ms;
        assert_eq!(v.poll_timeout(), Some(t(due)), "try {attempt}");
        v.handle_timeout(t(due - 1));
        assert!(drain(&mut v).is_empty(), "try {attempt}: not yet due");
        v.handle_timeout(t(due));
        assert_eq!(drain(&mut v), vec![refetch.clone()], "try {attempt}");
        now = due;
    }
    assert_eq!(v.poll_timeout(), None);
    v.handle_input(t(now), failed);
    assert_eq!(accepts(&mut v), vec![false]);
    // No fetch is left to retry; the one timer is the vote's, until the escrow acts on it.
    assert_eq!(
        v.poll_timeout(),
        Some(t(now).saturating_add(gpuchain_protocol::provider::REGOSSIP_AFTER))
    );
}

/// A verifier that voted accept on step 50 (at t = 3 ms).
fn voted_on_50(k: &Keys) -> Verifier {
    let mut v = verifier(&k.v1, k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    v.handle_input(t(3), quality(50, 0xa, true));
    v.handle_input(t(3), spot(50, 0xa, true));
    assert_eq!(accepts(&mut v), vec![true]);
    v
}

#[test]
fn a_vote_the_escrow_has_not_acted_on_is_published_again() {
    let k = keys();
    let mut v = voted_on_50(&k);
    let after = gpuchain_protocol::provider::REGOSSIP_AFTER;
    let due = t(3).saturating_add(after);
    assert_eq!(v.poll_timeout(), Some(due));
    v.handle_timeout(t(3).saturating_add(after - Duration::from_millis(1)));
    assert!(drain(&mut v).is_empty(), "not yet");
    v.handle_timeout(due);
    let again = votes(&drain(&mut v));
    assert_eq!(again.len(), 1, "the lost vote goes out again");
    assert_eq!((again[0].step, again[0].accept), (50, true));
    // And again, a period later, while the escrow still has not acted.
    assert_eq!(v.poll_timeout(), Some(due.saturating_add(after)));
    v.handle_timeout(due.saturating_add(after));
    assert_eq!(votes(&drain(&mut v)).len(), 1);
}

#[test]
fn a_vote_the_escrow_acted_on_is_not_published_again() {
    let k = keys();
    for settle in [
        accepted(1, 50, ckpt(0xa, 50), &k.a),
        rejected(1, 50, ckpt(0xa, 50), &k.a),
        // (Released and Replaced keep an accept going: the decision window, tested below.)
        epoch_ended(1, EpochEndReason::Resigned),
        assigned(2, &k.b, 0, Hash::ZERO),
    ] {
        let mut v = voted_on_50(&k);
        v.handle_input(t(5), settle.clone());
        drain(&mut v);
        let after = gpuchain_protocol::provider::REGOSSIP_AFTER;
        v.handle_timeout(t(3).saturating_add(after * 3));
        assert!(
            votes(&drain(&mut v)).is_empty(),
            "settled by {settle:?}, yet published again"
        );
        assert_eq!(v.poll_timeout(), None, "{settle:?}");
    }
}

#[test]
fn a_fetch_that_succeeds_elsewhere_cancels_the_retry() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    drain(&mut v);
    let now = t(2_000);
    v.handle_input(
        now,
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: false,
        },
    );
    // The node's client role fetched the same blob meanwhile.
    v.handle_input(
        now,
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    assert!(
        drain(&mut v)
            .iter()
            .any(|o| matches!(o, Output::RunQualityTest { .. }))
    );
    v.handle_timeout(now + Duration::from_secs(10));
    assert!(
        !drain(&mut v)
            .iter()
            .any(|o| matches!(o, Output::FetchBlob { .. })),
        "a cancelled retry fetched again"
    );
}

#[test]
fn checkpoints_are_checked_in_order_against_the_previous_one() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    // 100 arrives before 50: it waits.
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 50, 100, 0xa)),
        Verdict::Accept
    );
    assert!(drain(&mut v).is_empty());
    v.handle_message(t(2), &announce(&k.a, 1, 0, 50, 0xa));
    assert_eq!(
        drain(&mut v),
        vec![Output::FetchBlob {
            hash: ckpt(0xa, 50),
            from: Some(k.a.address())
        }]
    );
    v.handle_input(
        t(3),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    v.handle_input(t(4), quality(50, 0xa, true));
    v.handle_input(t(5), spot(50, 0xa, true));
    let outs = drain(&mut v);
    assert_eq!(votes(&outs).len(), 1);
    assert!(outs.contains(&Output::FetchBlob {
        hash: ckpt(0xa, 100),
        from: Some(k.a.address())
    }));
    v.handle_input(
        t(6),
        Input::BlobFetched {
            hash: ckpt(0xa, 100),
            ok: true,
        },
    );
    assert!(drain(&mut v).iter().any(|o| matches!(o, Output::RunQualityTest { baseline, baseline_step: 50, .. } if *baseline == ckpt(0xa, 50))));
}

#[test]
fn announcements_are_screened() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    assert_eq!(
        v.handle_message(t(1), &announce(&k.b, 1, 0, 50, 0xb)),
        Verdict::Reject(RejectReason::NotAssignedProvider)
    );
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 0, 0, 50, 0xa)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 2, 0, 50, 0xa)),
        Verdict::Ignore(IgnoreReason::FutureEpoch)
    );
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 0, 49, 0xa)),
        Verdict::Reject(RejectReason::InvalidCheckpointStep)
    );
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Accept
    );
    assert_eq!(
        v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Ignore(IgnoreReason::Duplicate)
    );
    // Votes from outside the job's verifier set are invalid for everyone who knows the set.
    let h = ckpt(0xa, 50);
    assert_eq!(
        v.handle_message(t(1), &vote(&k.outsider, 1, 50, h, true)),
        Verdict::Reject(RejectReason::NotListedVerifier)
    );
    assert_eq!(
        v.handle_message(t(1), &vote(&k.v2, 1, 50, h, true)),
        Verdict::Accept
    );
}

#[test]
fn new_epoch_resets_to_the_chain_and_drops_stale_results() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 0, 50, 0xa));
    v.handle_input(
        t(2),
        Input::BlobFetched {
            hash: ckpt(0xa, 50),
            ok: true,
        },
    );
    drain(&mut v);
    v.handle_input(t(3), epoch_ended(1, EpochEndReason::Released));
    v.handle_input(t(3), assigned(2, &k.b, 0, Hash::ZERO));
    v.handle_input(t(4), quality(50, 0xa, true));
    v.handle_input(t(4), spot(50, 0xa, true));
    assert!(
        votes(&drain(&mut v)).is_empty(),
        "results for a fenced epoch are dropped"
    );
    assert_eq!(
        v.handle_message(t(5), &announce(&k.a, 1, 0, 50, 0xa)),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    assert_eq!(
        v.handle_message(t(5), &announce(&k.b, 2, 0, 50, 0xb)),
        Verdict::Accept
    );
}

#[test]
fn chain_acceptance_moves_a_lagging_verifier_forward() {
    let k = keys();
    let mut v = verifier(&k.v1, &k);
    v.handle_message(t(1), &announce(&k.a, 1, 50, 100, 0xa));
    assert!(drain(&mut v).is_empty());
    v.handle_input(t(2), accepted(1, 50, ckpt(0xa, 50), &k.a));
    assert_eq!(
        drain(&mut v),
        vec![Output::FetchBlob {
            hash: ckpt(0xa, 100),
            from: Some(k.a.address())
        }]
    );
}

#[test]
fn spot_check_steps_are_seeded_distinct_and_in_range() {
    let k = keys();
    let Message::CheckpointAnnounce(a) = announce(&k.a, 1, 150, 200, 0xa) else {
        unreachable!()
    };
    let s1 = spot_check_steps(7, &a, 5);
    assert_eq!(s1, spot_check_steps(7, &a, 5), "replayable from the seed");
    assert_eq!(s1.len(), 5);
    assert!(s1.iter().all(|s| (151..=200).contains(s)));
    assert_ne!(s1, spot_check_steps(8, &a, 5));
    assert_eq!(
        spot_check_steps(7, &a, 500).len(),
        50,
        "capped by the interval"
    );
}

#[test]
fn an_accept_of_an_epoch_the_client_ended_is_published_until_it_can_no_longer_land() {
    let k = keys();
    let after = gpuchain_protocol::provider::REGOSSIP_AFTER;
    let regossiped = |v: &mut Verifier, at: Time| {
        v.handle_timeout(at);
        votes(&drain(v)).len()
    };
    // Released, then another provider assigned: the accept stays out there for the
    // provider's late claim.
    let mut v = voted_on_50(&k);
    v.handle_input(t(10), epoch_ended(1, EpochEndReason::Released));
    v.handle_input(t(10), assigned(2, &k.b, 0, Hash::ZERO));
    drain(&mut v);
    assert_eq!(regossiped(&mut v, t(3).saturating_add(after)), 1);
    // The claim landed (the head moved): nothing more to publish.
    v.handle_input(t(20_000), accepted(1, 50, ckpt(0xa, 50), &k.a));
    assert_eq!(regossiped(&mut v, t(60_000)), 0);
    assert_eq!(v.poll_timeout(), None);

    // Past the decision window it stops on its own.
    let mut v = voted_on_50(&k);
    v.handle_input(t(10), epoch_ended(1, EpochEndReason::Replaced));
    let kept = t(10).saturating_add(gpuchain_protocol::provider::CLAIM_KEPT_FOR);
    v.handle_timeout(kept);
    assert_eq!(votes(&drain(&mut v)).len(), 0);
    assert_eq!(v.poll_timeout(), None);

    // An epoch the provider resigned (or a reject ended) cannot be paid late: dropped.
    let mut v = voted_on_50(&k);
    v.handle_input(t(10), epoch_ended(1, EpochEndReason::Resigned));
    assert_eq!(regossiped(&mut v, t(3).saturating_add(after)), 0);
}

/// A completed job's fees wait for its settle. If nobody (the client) has settled it
/// `SETTLE_FALLBACK_AFTER` later, each member settles it itself, once; a settle that lands
/// first cancels that.
#[test]
fn a_member_settles_a_completed_job_the_client_left_unsettled() {
    use gpuchain_protocol::chain::{ChainEvent, ChainTx};
    use gpuchain_protocol::verifier::SETTLE_FALLBACK_AFTER;
    let k = keys();
    let completed = chain(ChainEvent::JobCompleted {
        job_id: job(),
        refund: gpuchain_protocol::U256::ZERO,
    });
    let settles = |outs: &[Output]| {
        outs.iter()
            .filter(|o| matches!(o, Output::SubmitTx { tx: ChainTx::Settle { job_id }, .. } if *job_id == job()))
            .count()
    };

    let mut v = verifier(&k.v1, &k);
    v.handle_input(t(10), completed.clone());
    drain(&mut v);
    let due = t(10).saturating_add(SETTLE_FALLBACK_AFTER);
    assert_eq!(v.poll_timeout(), Some(due));
    v.handle_timeout(t(10).saturating_add(SETTLE_FALLBACK_AFTER - Duration::from_millis(1)));
    assert_eq!(settles(&drain(&mut v)), 0, "the client's turn first");
    v.handle_timeout(due);
    assert_eq!(settles(&drain(&mut v)), 1, "the member settles it");
    v.handle_timeout(due.saturating_add(SETTLE_FALLBACK_AFTER));
    assert_eq!(settles(&drain(&mut v)), 0, "once");
    assert_eq!(v.poll_timeout(), None);

    // The client settled in time: nothing to do.
    let mut v = verifier(&k.v1, &k);
    v.handle_input(t(10), completed);
    v.handle_input(
        t(11),
        chain(ChainEvent::JobSettled {
            job_id: job(),
            client: k.client.address(),
            refund: gpuchain_protocol::U256::ZERO,
        }),
    );
    drain(&mut v);
    assert_eq!(v.poll_timeout(), None);
    v.handle_timeout(t(10).saturating_add(SETTLE_FALLBACK_AFTER));
    assert_eq!(settles(&drain(&mut v)), 0);

    // A verifier off the committee leaves it to the members.
    let mut outsider = verifier(&k.outsider, &k);
    outsider.handle_input(
        t(10),
        chain(ChainEvent::JobCompleted {
            job_id: job(),
            refund: gpuchain_protocol::U256::ZERO,
        }),
    );
    drain(&mut outsider);
    assert_eq!(outsider.poll_timeout(), None);
}
