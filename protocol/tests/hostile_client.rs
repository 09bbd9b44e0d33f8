//! A client that withholds pay (`faults::ClientFault::WithholdPay`): whenever a quorum of the
//! committee accepts a checkpoint, it ends the epoch instead of submitting the accept. The
//! escrow's decision window keeps that accept payable and the provider submits it itself
//! (its claim): every step the verifiers accepted is paid, to the unit, the provider's stake
//! is untouched, and the job still completes. Played on the escrow model in virtual time.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::world::World;
use common::*;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::chain_record::ChainRecord;
use gpuchain_protocol::escrow::Status;
use gpuchain_protocol::faults::{ClientFault, FaultyClient};
use gpuchain_protocol::{
    Address, Client, ClientConfig, Notice, StateMachine, U256, Verifier, VerifierConfig,
};

const CLIENT: usize = 0;
const BUDGET: u64 = 5_000_000;

#[test]
fn a_client_that_withholds_pay_still_pays_every_accepted_step() {
    let k = keys();
    let mut client = Client::new(ClientConfig::new(domain()), k.client.clone());
    client.create_job(spec(), job_params(BUDGET));
    let nodes: Vec<Box<dyn StateMachine>> = vec![
        Box::new(FaultyClient::new(client, ClientFault::WithholdPay)),
        provider_machine(&k.a, 1000),
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
    let addresses: Vec<Address> = [&k.client, &k.a, &k.b, &k.v1, &k.v2]
        .iter()
        .map(|key| key.address())
        .collect();
    let mut w = World::new(
        nodes,
        addresses.clone(),
        vec![0, 0xa, 0xb, 0, 0],
        escrow(&k),
    );
    w.route(CLIENT);
    w.run(Duration::from_secs(120));

    // The client never accepted anything: it released instead, once per quorum.
    let by_client: Vec<&ChainTx> = w
        .landed
        .iter()
        .filter(|(from, _)| *from == CLIENT)
        .map(|(_, tx)| tx)
        .collect();
    assert!(
        !by_client
            .iter()
            .any(|tx| matches!(tx, ChainTx::AcceptCheckpoint { .. }))
    );
    let releases = by_client
        .iter()
        .filter(|tx| matches!(tx, ChainTx::ReleaseProvider { .. }))
        .count();
    assert!(releases >= 1, "the attack was tried");

    // Every accept landed late, by the provider whose epoch the client had ended.
    let accepts = w.events(|e| match e {
        ChainEvent::CheckpointAccepted {
            epoch,
            step,
            provider,
            amount,
            ..
        } => Some((*epoch, *step, *provider, *amount)),
        _ => None,
    });
    let released: Vec<u64> = w.events(|e| match e {
        ChainEvent::EpochEnded {
            epoch,
            reason: EpochEndReason::Released,
            ..
        } => Some(*epoch),
        _ => None,
    });
    for (epoch, step, provider, _) in &accepts {
        assert!(released.contains(epoch), "epoch {epoch} step {step}");
        let claimed = w.landed.iter().any(|(from, tx)| {
            w.addresses[*from] == *provider
                && matches!(tx, ChainTx::AcceptCheckpoint { epoch: e, step: s, .. } if e == epoch && s == step)
        });
        assert!(claimed, "step {step} was claimed by its own provider");
    }
    let late_claims = w
        .notices
        .iter()
        .filter(|(_, _, n)| matches!(n, Notice::ClaimSubmitted { late: true, .. }))
        .count();
    assert!(late_claims >= accepts.len());

    // The job completed: every interval paid, each provider exactly its steps × its price.
    let e = &w.escrow;
    assert_eq!(e.job(job()).map(|j| j.status), Some(Status::Completed));
    let steps: Vec<u64> = accepts.iter().map(|a| a.1).collect();
    assert_eq!(steps, (1..=8).map(|i| i * 50).collect::<Vec<_>>());
    let price: BTreeMap<Address, u64> = [(k.a.address(), 1000), (k.b.address(), 3000)].into();
    let mut owed: BTreeMap<Address, U256> = BTreeMap::new();
    let mut head = 0;
    for (_, step, provider, amount) in &accepts {
        let due = U256::from((step - head) * price[provider]);
        assert_eq!(*amount, due);
        *owed.entry(*provider).or_default() += due;
        head = *step;
    }
    let mut paid = U256::ZERO;
    for p in [k.a.address(), k.b.address()] {
        let got = e.withdrawable(p, TOKEN);
        assert_eq!(got, owed.get(&p).copied().unwrap_or_default(), "{p}");
        paid += got;
    }
    assert_eq!(paid, U256::from(400_000), "A, the cheapest, did all of it");
    // The chain record says what happened: A's work was all paid late, nothing rejected.
    let record = ChainRecord::from_history(w.chain_log.iter().map(|(_, e)| e));
    let a = record.provider(&k.a.address());
    assert_eq!((a.checkpoints_accepted, a.late_accepts), (8, 8));
    assert_eq!(a.epochs_lost, releases as u64);
    assert_eq!(a.epochs_rejected, 0);
    assert!(!a.is_excluded());
    // Nobody's stake was touched.
    for p in [k.a.address(), k.b.address()] {
        let st = e.stake_of(p);
        assert_eq!((st.bonded, st.live_epochs), (U256::from(MIN_STAKE), 0));
    }
    assert_eq!(e.burned(), U256::ZERO);
    // Paid + fees + refunded == budget, and the escrow holds exactly what it owes.
    let fees = [k.v1.address(), k.v2.address()]
        .iter()
        .fold(U256::ZERO, |a, v| a + e.withdrawable(*v, TOKEN));
    assert_eq!(fees, U256::from(16 * VERIFIER_FEE));
    let refund = e.withdrawable(k.client.address(), TOKEN);
    assert_eq!(paid + fees + refund, U256::from(BUDGET));
    assert_eq!(
        e.balance_of(TOKEN, domain().escrow),
        e.owed_recomputed(TOKEN)
    );
}
