//! The checks every scenario (and the chaos run) ends with, read from the chain, and for
//! checkpoints through the real blob path:
//!
//! - **conserved**: each job's budget is accounted for to the unit (`JobMoney::conserved`, the
//!   one money identity, from the escrow's events), and across every account the escrow's
//!   token balance equals what it owes: every node's withdrawable balance, provider and
//!   verifier stakes (bonded and unbonding), burned stake and what live jobs still hold;
//! - **ended**: each job ended paid (completed and settled) or refunded (expired), with
//!   nothing left in it;
//! - **only accepted work paid**: replaying each job's escrow events, every credit pays its
//!   epoch's own provider at its epoch's price for exactly the steps past the head, a fenced
//!   epoch (replaced or released) is paid at most once and only for the checkpoint right after
//!   the head it was fenced at, an epoch that ended otherwise is never paid again, and no
//!   refused checkpoint is ever paid;
//! - **fetchable**: every accepted checkpoint is fetched by a fresh node with an empty store
//!   from whichever peers still hold it (iroh, BLAKE3-verified).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use anyhow::{Context, Result};
use gpuchain_contracts::chain::ChainEvent;
use gpuchain_protocol::chain::EpochEndReason;
use serde::Serialize;
use serde_json::json;

use crate::node::NodeSpec;
use crate::testnet::Testnet;

/// One named check and what it found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    /// What was found: the figures when it passed, every violation when it did not.
    pub detail: String,
}

/// The checks, in the order above.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checks(pub Vec<Check>);

impl Checks {
    pub fn passed(&self) -> bool {
        self.0.iter().all(|c| c.passed)
    }

    pub fn get(&self, name: &str) -> Option<&Check> {
        self.0.iter().find(|c| c.name == name)
    }

    pub fn text(&self) -> String {
        self.0
            .iter()
            .map(|c| {
                format!(
                    "  check {:<22} {} {}\n",
                    c.name,
                    if c.passed { "ok  " } else { "FAIL" },
                    c.detail
                )
            })
            .collect()
    }

    fn push(&mut self, name: &'static str, violations: Vec<String>, ok_detail: String) {
        let passed = violations.is_empty();
        let detail = if passed {
            ok_detail
        } else {
            violations.join("; ")
        };
        self.0.push(Check {
            name,
            passed,
            detail,
        });
    }
}

pub const CONSERVED: &str = "conserved";
pub const ENDED: &str = "ended paid or refunded";
pub const ONLY_ACCEPTED_PAID: &str = "only accepted work paid";
pub const FETCHABLE: &str = "checkpoints fetchable";

/// The name of the node the fetch check starts.
const AUDITOR: &str = "auditor";
/// How long one checkpoint fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs every check on `jobs` (all created on `net`'s chain, all over). The fetch check
/// starts a node named `auditor` (once) in `net`.
pub async fn run(net: &mut Testnet, jobs: &[U256]) -> Result<Checks> {
    let mut checks = Checks::default();
    let c = net.chain()?;
    let client = c.deployer().clone();
    let from = c.deploy_block();

    let mut conserved = Vec::new();
    let mut ended = Vec::new();
    let mut unpaid = Vec::new();
    let mut accepted: Vec<B256> = Vec::new();
    let mut live_remaining = U256::ZERO;
    for &job in jobs {
        let money = client.job_money(job, from).await?;
        if !money.conserved() {
            conserved.push(format!(
                "job {job}: paid {} + fees {} + refunded {} + remaining {} != deposit {}",
                money.paid_total(),
                money.fees_total(),
                money.refunded,
                money.remaining,
                money.deposit
            ));
        }
        let view = client.job(job).await?;
        let done = (view.status == 3 && view.settled) || view.status == 4;
        if !done || !money.remaining.is_zero() {
            ended.push(format!(
                "job {job}: status {} settled {} still holds {}",
                view.status, view.settled, money.remaining
            ));
        }
        live_remaining += money.remaining;
        let events = client.job_events(job, from).await?;
        let audit = audit_payments(events.iter().map(|(_, e)| e));
        unpaid.extend(audit.violations.iter().map(|v| format!("job {job}: {v}")));
        accepted.extend(audit.accepted);
    }

    // Across every account: what the escrow holds is exactly what it owes.
    let mut owed = client.burned().await? + live_remaining;
    let mut accounts: BTreeSet<Address> = net.nodes().iter().map(|n| n.eth_address()).collect();
    accounts.insert(client.address());
    for a in &accounts {
        let s = c.stake_of(*a).await?;
        let v = client.verifier_stake_of(*a).await?;
        owed += c.withdrawable(*a).await? + s.bonded + s.unbonding + v.bonded + v.unbonding;
    }
    let held = c.escrow_usdc_balance().await?;
    if held != owed {
        conserved.push(format!(
            "the escrow holds {held} but owes {owed} to its {} accounts",
            accounts.len()
        ));
    }
    checks.push(
        CONSERVED,
        conserved,
        format!(
            "escrow holds {held} = owed across {} accounts",
            accounts.len()
        ),
    );
    checks.push(ENDED, ended, format!("{} job(s)", jobs.len()));
    checks.push(
        ONLY_ACCEPTED_PAID,
        unpaid,
        format!("{} accepted checkpoint(s) replayed", accepted.len()),
    );
    let missing = fetch_all(net, &accepted).await?;
    checks.push(
        FETCHABLE,
        missing,
        format!("{} fetched by a fresh node", accepted.len()),
    );
    Ok(checks)
}

/// Fetches every hash through a fresh node's blob store; the failures.
async fn fetch_all(net: &mut Testnet, hashes: &[B256]) -> Result<Vec<String>> {
    if hashes.is_empty() {
        return Ok(Vec::new());
    }
    if net.node(AUDITOR).is_err() {
        net.spawn(NodeSpec::new(AUDITOR)).await?;
    }
    if !net.node(AUDITOR)?.is_running() {
        net.restart(AUDITOR).await?;
    }
    // Not `wait_mesh`: a frozen node keeps its process but answers no one. Any peer will
    // do; the fetch asks every peer that said hello.
    let auditor = net.node(AUDITOR)?;
    crate::poll_until(
        "the auditor to join the swarm",
        Duration::from_secs(30),
        async || Ok(auditor.connected_peers().await? > 0),
    )
    .await?;
    tokio::time::sleep(crate::testnet::HELLO_SETTLE).await;
    let mut failures = Vec::new();
    for h in hashes {
        let hex = alloy::hex::encode(h);
        let fetched = tokio::time::timeout(
            FETCH_TIMEOUT,
            auditor.post("/v1/blobs/fetch", &json!({ "hash": hex })),
        )
        .await
        .with_context(|| format!("fetching checkpoint {hex}"));
        match fetched {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => failures.push(format!("checkpoint {hex}: {e:#}")),
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    Ok(failures)
}

/// What replaying one job's escrow events found.
#[derive(Debug, Default)]
pub struct PaymentAudit {
    /// Accepted checkpoints, in chain order.
    pub accepted: Vec<B256>,
    /// Every payment the rules do not allow, in words.
    pub violations: Vec<String>,
}

struct EpochSeen {
    provider: Address,
    price: U256,
    /// Why it ended and the head it ended at.
    ended: Option<(EpochEndReason, u64)>,
    paid_after_end: bool,
}

/// Replays one job's escrow events (in chain order) against the payment rules (see the
/// module's doc): a pure function of the events, so the checker cannot drift from what the
/// chain recorded.
pub fn audit_payments<'a>(events: impl IntoIterator<Item = &'a ChainEvent>) -> PaymentAudit {
    let mut audit = PaymentAudit::default();
    let mut head = 0u64;
    let mut epochs: BTreeMap<u64, EpochSeen> = BTreeMap::new();
    let mut refused: BTreeSet<B256> = BTreeSet::new();
    for ev in events {
        match ev {
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                price_per_step,
                start_step,
                ..
            } => {
                if *start_step != head {
                    audit.violations.push(format!(
                        "epoch {epoch} starts at step {start_step}, not at the head {head}"
                    ));
                }
                epochs.insert(
                    *epoch,
                    EpochSeen {
                        provider: *provider,
                        price: *price_per_step,
                        ended: None,
                        paid_after_end: false,
                    },
                );
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                if let Some(e) = epochs.get_mut(epoch) {
                    e.ended.get_or_insert((*reason, head));
                }
            }
            ChainEvent::CheckpointRejected {
                checkpoint_hash, ..
            } => {
                if audit.accepted.contains(checkpoint_hash) {
                    audit.violations.push(format!(
                        "checkpoint {checkpoint_hash} was accepted and then refused"
                    ));
                }
                refused.insert(*checkpoint_hash);
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                checkpoint_hash,
                provider,
                amount,
                ..
            } => {
                audit.accepted.push(*checkpoint_hash);
                if refused.contains(checkpoint_hash) {
                    audit
                        .violations
                        .push(format!("refused checkpoint {checkpoint_hash} was paid"));
                }
                let Some(e) = epochs.get_mut(epoch) else {
                    audit.violations.push(format!(
                        "step {step} paid for epoch {epoch}, never assigned"
                    ));
                    continue;
                };
                if *provider != e.provider {
                    audit.violations.push(format!(
                        "step {step} of epoch {epoch} paid to {provider}, not its provider {}",
                        e.provider
                    ));
                }
                if *step <= head {
                    audit.violations.push(format!(
                        "step {step} of epoch {epoch} paid again (head was {head})"
                    ));
                } else if *amount != U256::from(step - head) * e.price {
                    audit.violations.push(format!(
                        "step {step} of epoch {epoch} paid {amount}, not {} steps at {}",
                        step - head,
                        e.price
                    ));
                }
                match e.ended {
                    None => {}
                    Some((EpochEndReason::Replaced | EpochEndReason::Released, at))
                        if at == head && !e.paid_after_end =>
                    {
                        e.paid_after_end = true;
                    }
                    Some((reason, at)) => audit.violations.push(format!(
                        "fenced work paid: step {step} of epoch {epoch}, which ended \
                         ({reason:?}) at step {at}, with the head at {head}"
                    )),
                }
                head = head.max(*step);
            }
            _ => {}
        }
    }
    audit
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: u64 = 1;
    fn p(n: u8) -> Address {
        Address::repeat_byte(n)
    }
    fn h(n: u8) -> B256 {
        B256::repeat_byte(n)
    }
    fn assign(epoch: u64, provider: u8, start: u64) -> ChainEvent {
        ChainEvent::ProviderAssigned {
            job_id: U256::from(JOB),
            epoch,
            provider: p(provider),
            price_per_step: U256::from(1000),
            start_step: start,
            start_checkpoint: h(0),
        }
    }
    fn ended(epoch: u64, reason: EpochEndReason) -> ChainEvent {
        ChainEvent::EpochEnded {
            job_id: U256::from(JOB),
            epoch,
            reason,
        }
    }
    fn accept(epoch: u64, step: u64, hash: u8, provider: u8, amount: u64) -> ChainEvent {
        ChainEvent::CheckpointAccepted {
            job_id: U256::from(JOB),
            epoch,
            step,
            checkpoint_hash: h(hash),
            provider: p(provider),
            amount: U256::from(amount),
            voters: U256::from(3),
            fees: U256::ZERO,
        }
    }
    fn reject(epoch: u64, step: u64, hash: u8) -> ChainEvent {
        ChainEvent::CheckpointRejected {
            job_id: U256::from(JOB),
            epoch,
            step,
            checkpoint_hash: h(hash),
            provider: p(1),
            slashed: U256::ZERO,
            voters: U256::from(3),
            fees: U256::ZERO,
        }
    }

    fn violations(events: &[ChainEvent]) -> Vec<String> {
        audit_payments(events).violations
    }

    #[test]
    fn a_failover_with_one_late_accept_is_clean() {
        let events = [
            assign(1, 1, 0),
            accept(1, 10, 1, 1, 10_000),
            ended(1, EpochEndReason::Replaced),
            assign(2, 2, 10),
            // The fenced provider's next checkpoint lands within the window: allowed once.
            accept(1, 20, 2, 1, 10_000),
            ended(2, EpochEndReason::Superseded),
            assign(3, 2, 20),
            accept(3, 30, 3, 2, 10_000),
        ];
        let audit = audit_payments(&events);
        assert!(audit.violations.is_empty(), "{:?}", audit.violations);
        assert_eq!(audit.accepted, vec![h(1), h(2), h(3)]);
    }

    #[test]
    fn fenced_work_paid_twice_or_after_the_head_moved_is_caught() {
        let twice = [
            assign(1, 1, 0),
            ended(1, EpochEndReason::Replaced),
            assign(2, 2, 0),
            accept(1, 10, 1, 1, 10_000),
            accept(1, 20, 2, 1, 10_000),
        ];
        assert!(violations(&twice)[0].contains("fenced work paid"));
        let moved = [
            assign(1, 1, 0),
            ended(1, EpochEndReason::Replaced),
            assign(2, 2, 0),
            accept(2, 10, 1, 2, 10_000),
            accept(1, 20, 2, 1, 10_000),
        ];
        assert!(violations(&moved)[0].contains("fenced work paid"));
        let after_reject = [
            assign(1, 1, 0),
            reject(1, 10, 9),
            ended(1, EpochEndReason::Rejected),
            accept(1, 10, 1, 1, 10_000),
        ];
        assert!(violations(&after_reject)[0].contains("fenced work paid"));
    }

    #[test]
    fn refused_wrongly_paid_or_repaid_work_is_caught() {
        let refused = [
            assign(1, 1, 0),
            reject(1, 10, 9),
            ended(1, EpochEndReason::Rejected),
            assign(2, 2, 0),
            accept(2, 10, 9, 2, 10_000),
        ];
        assert!(violations(&refused)[0].contains("refused"));
        let wrong_payee = [assign(1, 1, 0), accept(1, 10, 1, 2, 10_000)];
        assert!(violations(&wrong_payee)[0].contains("not its provider"));
        let wrong_amount = [assign(1, 1, 0), accept(1, 10, 1, 1, 11_000)];
        assert!(violations(&wrong_amount)[0].contains("paid 11000"));
        let again = [
            assign(1, 1, 0),
            accept(1, 10, 1, 1, 10_000),
            accept(1, 10, 2, 1, 0),
        ];
        assert!(violations(&again)[0].contains("paid again"));
        let unassigned = [accept(4, 10, 1, 1, 10_000)];
        assert!(violations(&unassigned)[0].contains("never assigned"));
        let bad_start = [
            assign(1, 1, 0),
            accept(1, 10, 1, 1, 10_000),
            assign(2, 2, 0),
        ];
        assert!(violations(&bad_start)[0].contains("not at the head"));
    }
}
