//! The product page's 4 Nov run, played through the three roles in virtual time with
//! the escrow model and scripted trainer/verifier results, asserting every decision:
//! fashion-cnn, 400 steps, checkpoint every 50; the escrow draws the committee (the two
//! pooled verifiers); A trains and 50..150 are accepted; A dies at step 158 and is noticed
//! within 0.3 s; P resumes from 150 in a new epoch, its checkpoint fails the quality test and
//! both verifiers reject it (unanimous: slashed); B resumes from 150 and finishes.
//! Payouts: A 150 steps, B 250 steps, P nothing and slashed, each verifier a fee per decision
//! it signed; the refund is what is left. The chain is the escrow model
//! (`gpuchain_protocol::escrow`), the one the simulator runs and the differential test holds
//! to the contract, so every transaction the machines submit meets the contract's checks.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::world::World;
use common::*;
use gpuchain_protocol::chain::ChainEvent;
use gpuchain_protocol::chain_record::ChainRecord;
use gpuchain_protocol::escrow::{Event as EscrowEvent, Status};
use gpuchain_protocol::{
    Address, Client, ClientConfig, Hash, Notice, StateMachine, U256, Verdict, Verifier,
    VerifierConfig,
};

const CLIENT: usize = 0;
const A: usize = 1;
const P: usize = 2;
const B: usize = 3;
const V1: usize = 4;
const V2: usize = 5;

const BUDGET: u64 = 5_000_000;

fn tag(node: usize) -> u8 {
    [0, 0xa, 0xf, 0xb, 0, 0][node]
}

#[test]
fn four_november_story() {
    let k = keys();
    let mut client = Client::new(ClientConfig::new(domain()), k.client.clone());
    client.create_job(spec(), job_params(BUDGET));
    let nodes: Vec<Box<dyn StateMachine>> = vec![
        Box::new(client),
        provider_machine(&k.a, 1000),
        provider_machine(&k.p, 2000),
        provider_machine(&k.b, 3000),
        Box::new(Verifier::new(
            VerifierConfig::new(domain(), 1),
            k.v1.clone(),
        )),
        Box::new(Verifier::new(
            VerifierConfig::new(domain(), 2),
            k.v2.clone(),
        )),
    ];
    let addresses = [&k.client, &k.a, &k.p, &k.b, &k.v1, &k.v2]
        .iter()
        .map(|key| key.address())
        .collect();
    let mut w = World::new(nodes, addresses, (0..6).map(tag).collect(), escrow(&k));
    w.junk.insert(P);
    w.kill = Some((A, 158));
    w.route(CLIENT);
    w.run(Duration::from_secs(120));

    let addr = |n: usize| {
        [
            k.client.address(),
            k.a.address(),
            k.p.address(),
            k.b.address(),
        ][n]
    };

    // Honest traffic is never rejected (only stale/duplicate ignores).
    let rejects: Vec<_> = w
        .verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Reject(_)))
        .collect();
    assert!(rejects.is_empty(), "{rejects:?}");

    // Selections: A (cheapest) for epoch 1, P for epoch 2 after A's loss, B for epoch 3.
    let selected: Vec<(u64, Address)> = w
        .notices
        .iter()
        .filter_map(|(_, _, n)| match n {
            Notice::ProviderSelected {
                epoch, provider, ..
            } => Some((*epoch, *provider)),
            _ => None,
        })
        .collect();
    assert_eq!(selected, vec![(1, addr(A)), (2, addr(P)), (3, addr(B))]);

    // Assignments on chain, each new epoch resuming at the last accepted checkpoint.
    let assignments: Vec<(u64, Address, u64, Hash)> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } => Some((*epoch, *provider, *start_step, *start_checkpoint)),
            _ => None,
        })
        .collect();
    let a150 = ckpt(tag(A), 150);
    let base = spec().spec_hash();
    assert_eq!(
        assignments,
        vec![
            (1, addr(A), 0, base),
            (2, addr(P), 150, a150),
            (3, addr(B), 150, a150)
        ]
    );
    // The providers started their trainers exactly there.
    let starts: Vec<_> = w
        .starts
        .iter()
        .map(|(_, n, e, s, h)| (*n, *e, *s, *h))
        .collect();
    assert_eq!(
        starts,
        vec![(A, 1, 0, base), (P, 2, 150, a150), (B, 3, 150, a150)]
    );

    // Accepted checkpoints: A's 50..150, B's 200..400; P's 200 rejected.
    let accepted: Vec<(u64, u64, Address)> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                provider,
                ..
            } => Some((*epoch, *step, *provider)),
            _ => None,
        })
        .collect();
    let mut expected: Vec<_> = [50, 100, 150].iter().map(|s| (1, *s, addr(A))).collect();
    expected.extend([200, 250, 300, 350, 400].iter().map(|s| (3, *s, addr(B))));
    assert_eq!(accepted, expected);
    let rejected: Vec<_> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::CheckpointRejected {
                epoch,
                step,
                provider,
                ..
            } => Some((*epoch, *step, *provider)),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, vec![(2, 200, addr(P))]);

    // Both verifiers voted on every checkpoint: accept for A's and B's, reject for P's.
    for v in [V1, V2] {
        let votes: Vec<(u64, u64, bool)> = w
            .notices
            .iter()
            .filter(|(_, n, _)| *n == v)
            .filter_map(|(_, _, n)| match n {
                Notice::Voted {
                    epoch,
                    step,
                    accept,
                    ..
                } => Some((*epoch, *step, *accept)),
                _ => None,
            })
            .collect();
        let mut want: Vec<_> = [50, 100, 150].iter().map(|s| (1, *s, true)).collect();
        want.push((2, 200, false));
        want.extend([200, 250, 300, 350, 400].iter().map(|s| (3, *s, true)));
        assert_eq!(votes, want, "verifier {v}");
    }

    // A died at step 158 and was noticed within 0.3 s of virtual time, not earlier.
    let killed = w.killed_at.expect("A was killed");
    assert_eq!(w.killed_step, 158);
    let lost: Vec<_> = w
        .notices
        .iter()
        .filter_map(|(t, _, n)| match n {
            Notice::ProviderLost {
                provider, epoch, ..
            } => Some((*t, *provider, *epoch)),
            _ => None,
        })
        .collect();
    assert_eq!(lost.len(), 1, "exactly one loss: {lost:?}");
    let (noticed, who, epoch) = lost[0];
    assert_eq!((who, epoch), (addr(A), 1));
    assert!(noticed > killed);
    assert!(
        noticed.since(killed) <= Duration::from_millis(300),
        "noticed after {:?}",
        noticed.since(killed)
    );
    // Training again (P's StartTraining) well inside the 5 s target, the assignment included.
    let p_start = w
        .starts
        .iter()
        .find(|s| s.1 == P)
        .map(|s| s.0)
        .expect("P started");
    assert!(
        p_start.since(killed) <= Duration::from_secs(1),
        "training again after {:?}",
        p_start.since(killed)
    );

    eprintln!(
        "A killed at {killed:?}; noticed after {:?}; P training again after {:?}; done at {:?}",
        noticed.since(killed),
        p_start.since(killed),
        w.now
    );

    // P was fenced by the rejection and stopped.
    assert!(w.notices.iter().any(|(_, n, x)| *n == P
        && *x
            == Notice::Fenced {
                job_id: job(),
                epoch: 2
            }));

    // Every transaction the machines sent passed the contract's checks.
    assert!(w.tx_failures.is_empty(), "{:?}", w.tx_failures);

    // The committee the escrow drew: the two pooled verifiers, the client not on it.
    let drawn = w.events(|e| match e {
        ChainEvent::CommitteeDrawn { committee, .. } => Some(committee.clone()),
        _ => None,
    });
    assert_eq!(drawn.len(), 1);
    let mut seated = drawn[0].clone();
    seated.sort();
    let mut pooled = vec![k.v1.address(), k.v2.address()];
    pooled.sort();
    assert_eq!(seated, pooled);

    // Payouts: A 150 steps × 1000, B 250 steps × 3000, P nothing; each verifier the fee of
    // the 8 accepts and the reject it signed (the budget had slack for the reject's fees);
    // the rest refunded once the client's `settle` lands; P's stake slashed (both members
    // rejected) and burned, so the client gains nothing by it.
    let e = &w.escrow;
    assert_eq!(e.job(job()).map(|j| j.status), Some(Status::Completed));
    let paid_a = e.withdrawable(addr(A), TOKEN);
    let paid_b = e.withdrawable(addr(B), TOKEN);
    assert_eq!(paid_a, U256::from(150_000));
    assert_eq!(paid_b, U256::from(750_000));
    assert_eq!(e.withdrawable(addr(P), TOKEN), U256::ZERO);
    assert_eq!(e.stake_of(addr(P)).bonded, U256::ZERO);
    assert_eq!(e.stake_of(addr(B)).bonded, U256::from(MIN_STAKE));
    assert_eq!(e.burned(), U256::from(MIN_STAKE));
    let fee_each = U256::from(9 * VERIFIER_FEE);
    let fees: Vec<U256> = [V1, V2]
        .iter()
        .map(|v| e.withdrawable(w.addresses[*v], TOKEN))
        .collect();
    assert_eq!(fees, vec![fee_each, fee_each]);
    let credited: Vec<(Address, U256)> = w
        .escrow_log
        .iter()
        .filter_map(|ev| match ev {
            EscrowEvent::FeesCredited {
                verifier, amount, ..
            } => Some((*verifier, *amount)),
            _ => None,
        })
        .collect();
    assert_eq!(
        credited,
        drawn[0].iter().map(|v| (*v, fee_each)).collect::<Vec<_>>(),
        "credited by the settle, in committee order"
    );
    let refund = w.events(|e| match e {
        ChainEvent::JobCompleted { refund, .. } => Some(*refund),
        _ => None,
    });
    let refund = refund[0];
    assert_eq!(
        refund,
        U256::from(BUDGET - 150_000 - 750_000 - 18 * VERIFIER_FEE)
    );
    // The client's refund: credited by its settle, or already withdrawn.
    let client_total = e.withdrawable(addr(CLIENT), TOKEN) + e.balance_of(TOKEN, addr(CLIENT));
    assert_eq!(client_total, U256::from(5_000_000u64 - BUDGET) + refund);
    // The budget identity, from the chain's own books: paid + fees + refunded == budget.
    let fees_total = fees[0] + fees[1];
    assert_eq!(paid_a + paid_b + fees_total + refund, U256::from(BUDGET));
    assert_eq!(
        e.balance_of(TOKEN, domain().escrow),
        e.owed_recomputed(TOKEN)
    );
    assert!(
        w.notices
            .iter()
            .any(|(_, n, x)| *n == CLIENT && *x == Notice::JobFinished { job_id: job() })
    );
    // The chain record of the run, as the node's `provider status` would show it.
    let record = ChainRecord::from_history(w.chain_log.iter().map(|(_, e)| e));
    let a = record.provider(&addr(A));
    assert_eq!(
        (a.epochs_assigned, a.checkpoints_accepted, a.epochs_lost),
        (1, 3, 1)
    );
    assert_eq!(a.paid, paid_a);
    let p = record.provider(&addr(P));
    assert_eq!((p.epochs_rejected, p.epochs_slashed), (1, 1));
    assert!(p.score() < a.score());
    let b = record.provider(&addr(B));
    assert_eq!(
        (b.checkpoints_accepted, b.epochs_completed, b.late_accepts),
        (5, 1, 0)
    );
    for v in [V1, V2] {
        let r = record.verifier(&w.addresses[v]);
        assert_eq!((r.seats, r.with_outcome, r.without_outcome), (1, 9, 0));
        assert_eq!(r.fees, fee_each);
    }
    let usdc = |x: U256| x.to::<u64>() as f64 / 1e6;
    eprintln!(
        "budget {:.3} USDC: A {:.3}, B {:.3}, P 0 (slashed {:.3}, burned); verifier fees {:.3} + {:.3}; refunded {:.3}",
        usdc(U256::from(BUDGET)),
        usdc(paid_a),
        usdc(paid_b),
        usdc(U256::from(MIN_STAKE)),
        usdc(fees[0]),
        usdc(fees[1]),
        usdc(refund)
    );
}
