//! The chain the simulator runs: the protocol crate's model of `JobEscrow`
//! (`gpuchain_protocol::escrow`, the one the protocol tests run and the differential test in
//! `contracts/bindings/tests/escrow_model.rs` holds to the contract on anvil), deployed for a
//! run, and the log of every call it executed (`--calls`).

use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::signing::Scheme;
use gpuchain_protocol::{Address, B256, U256};
use serde::Serialize;

pub use gpuchain_protocol::escrow::{
    Block, Bugs, Call, Escrow, EscrowError, Event, Job, MAX_VERIFIERS, Params, Stake, Status,
    cost_bound, draw, draw_seed,
};

/// The simulator's own names: jobs by their number on chain, checkpoints by the id the
/// training model mints for each (see `drive`), token amounts as the config states them.
pub type Hash = u64;
pub type JobId = u64;
pub type Epoch = u64;
pub type Step = u64;
pub type Amount = u128;

/// The one ERC-20 of a run: every job's token and the stake token, as with test USDC.
pub const TOKEN: Address = Address::repeat_byte(0xAA);

/// The escrow-wide bounds the simulator deploys with: a simulated job lives hours, not
/// weeks, and these are the testnet's defaults.
pub const MAX_DURATION: u64 = 30 * 24 * 3600;
pub const MAX_GRACE: u64 = 24 * 3600;

/// Where the simulated escrow lives: what every bid and vote is signed for.
pub fn domain() -> EscrowDomain {
    EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xEE),
    }
}

/// The constructor's numbers a run's config asks for (`protocol.stake` is `minStake`).
pub fn params(cfg: &crate::config::SimConfig) -> Params {
    Params {
        min_stake: U256::from(cfg.protocol.stake),
        unbond_delay: cfg.chain.unbond_delay_s,
        max_duration: MAX_DURATION,
        max_grace: MAX_GRACE,
        decision_window: cfg.chain.decision_window_s,
        min_verifier_stake: U256::from(cfg.chain.min_verifier_stake),
    }
}

/// A fresh escrow: `funded` accounts hold their tokens and have approved the escrow for all
/// of them (the node's chain client approves once), bids and votes are recovered under
/// `scheme` (the machines' own).
pub fn deploy(
    scheme: Scheme,
    params: Params,
    funded: impl IntoIterator<Item = (Address, Amount)>,
) -> Result<Escrow, EscrowError> {
    let mut e = Escrow::new(domain(), scheme, TOKEN, params)?;
    let escrow = e.address();
    for (who, amount) in funded {
        e.mint(TOKEN, who, U256::from(amount));
        e.approve(TOKEN, who, escrow, U256::MAX);
    }
    Ok(e)
}

/// The hash of block `number` in the run seeded `seed`: what `blockhash` reads, and so what
/// seeds every committee draw. A function of the two alone (BLAKE3 of a tag, the seed and the
/// number), so a run's draws replay with its seed and no two runs share a chain.
pub fn block_hash(seed: u64, number: u64) -> B256 {
    let mut h = blake3::Hasher::new();
    h.update(b"gpuchain-sim/block\0");
    h.update(&seed.to_le_bytes());
    h.update(&number.to_le_bytes());
    B256::from(*h.finalize().as_bytes())
}

/// The sim's number for an on-chain job id (ids past `u64` name no job the sim made).
pub fn job_no(id: U256) -> JobId {
    id.saturating_to()
}

/// One call as executed: who, when (block number and timestamp, and the hash the chain
/// gave that block), what, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    pub block: u64,
    pub block_hash: B256,
    pub timestamp: u64,
    pub caller: Address,
    pub call: Call,
    pub result: Result<(), EscrowError>,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl CallRecord {
    /// The record as JSON: the function, its ABI arguments by their Solidity names (amounts
    /// and ids as hex quantities, signatures as hex bytes), and the revert if any.
    pub fn to_json(&self) -> serde_json::Value {
        use gpuchain_protocol::chain::ChainTx;
        use serde_json::json;
        let sigs = |s: &[gpuchain_protocol::Sig65]| s.iter().map(|s| hex(&s.0)).collect::<Vec<_>>();
        let args = match &self.call {
            Call::Register { amount } => json!({ "amount": amount }),
            Call::RequestUnbond { amount } => json!({ "amount": amount }),
            Call::RegisterVerifier { amount } | Call::RequestVerifierUnbond { amount } => {
                json!({ "amount": amount })
            }
            Call::WithdrawStake | Call::WithdrawVerifierStake => json!({}),
            Call::Tx(ChainTx::CreateJob {
                token,
                budget,
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                spec_hash,
                committee_size,
                quorum,
                verifier_fee,
                deadline,
                grace,
            }) => json!({
                "token": token, "budget": budget, "maxPricePerStep": max_price_per_step,
                "totalSteps": total_steps, "checkpointInterval": checkpoint_interval,
                "specHash": spec_hash, "committeeSize": committee_size, "quorum": quorum,
                "verifierFee": verifier_fee, "deadline": deadline, "grace": grace,
            }),
            Call::Tx(ChainTx::Assign {
                job_id,
                provider,
                price_per_step,
                bid_expiry,
                bid_signature,
            }) => json!({
                "jobId": job_id, "provider": provider, "pricePerStep": price_per_step,
                "bidExpiry": bid_expiry, "bidSig": hex(&bid_signature.0),
            }),
            Call::Tx(
                ChainTx::ReleaseProvider { job_id }
                | ChainTx::Expire { job_id }
                | ChainTx::Resign { job_id }
                | ChainTx::Settle { job_id }
                | ChainTx::DrawCommittee { job_id },
            ) => json!({ "jobId": job_id }),
            Call::Tx(
                ChainTx::AcceptCheckpoint {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    sigs: s,
                }
                | ChainTx::RejectCheckpoint {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    sigs: s,
                },
            ) => json!({
                "jobId": job_id, "epoch": epoch, "step": step,
                "checkpointHash": checkpoint_hash, "sigs": sigs(s),
            }),
            Call::Tx(ChainTx::Withdraw { token }) => json!({ "token": token }),
        };
        let result = match &self.result {
            Ok(()) => json!("ok"),
            Err(e) => json!({ "revert": e.name(), "error": e.to_string() }),
        };
        json!({
            "block": self.block,
            "blockHash": self.block_hash,
            "timestamp": self.timestamp,
            "caller": self.caller,
            "function": self.call.name(),
            "args": args,
            "result": result,
        })
    }
}

impl Serialize for CallRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuchain_protocol::chain::ChainTx;

    #[test]
    fn a_deployed_escrow_takes_funded_accounts_deposits() {
        let client = Address::repeat_byte(1);
        let verifiers = [Address::repeat_byte(2), Address::repeat_byte(3)];
        let cfg = crate::config::SimConfig::default();
        let stake = cfg.protocol.verifier_stake;
        let funded = verifiers
            .iter()
            .map(|v| (*v, stake))
            .chain([(client, 1_020_000)]);
        let mut e = deploy(Scheme::Simulated, params(&cfg), funded).expect("deploys");
        let at = |number: u64| Block {
            number,
            time: number,
        };
        for v in verifiers {
            let register = Call::RegisterVerifier {
                amount: U256::from(stake),
            };
            assert!(e.apply(&register, v, at(0)).is_ok());
        }
        assert_eq!(e.pool(), &verifiers);
        let create = ChainTx::CreateJob {
            token: TOKEN,
            budget: U256::from(1_020_000),
            max_price_per_step: U256::from(10_000),
            total_steps: 100,
            checkpoint_interval: 10,
            spec_hash: Default::default(),
            committee_size: 2,
            quorum: 2,
            verifier_fee: U256::from(1_000),
            deadline: 50,
            grace: 0,
        };
        let result = e.apply(&create.clone().into(), client, at(1)).map(|_| ());
        assert_eq!(result, Ok(()));
        assert_eq!(
            e.balance_of(TOKEN, domain().escrow),
            U256::from(1_020_000 + 2 * stake)
        );
        // The draw reads the seed block's hash: the run's, recorded as blocks are made.
        e.record_block_hash(1, block_hash(7, 1));
        let draw = Call::Tx(ChainTx::DrawCommittee {
            job_id: U256::from(1),
        });
        let events = e.apply(&draw, client, at(2)).expect("draws");
        assert!(
            events.iter().any(|ev| matches!(
                ev,
                Event::Job(gpuchain_protocol::chain::ChainEvent::CommitteeDrawn { committee, .. })
                    if committee.len() == 2
            )),
            "{events:?}"
        );
        assert_ne!(
            block_hash(7, 1),
            block_hash(8, 1),
            "another seed, another chain"
        );
        assert_ne!(block_hash(7, 1), block_hash(7, 2));
        // The next one is more than the client has left.
        let again = e.apply(&create.clone().into(), client, at(3)).map(|_| ());
        assert!(
            matches!(again, Err(EscrowError::Erc20InsufficientBalance { .. })),
            "{again:?}"
        );
        let record = CallRecord {
            block: 3,
            block_hash: block_hash(7, 3),
            timestamp: 3,
            caller: client,
            call: create.into(),
            result: again,
        };
        let json = record.to_json();
        assert_eq!(json["function"], "createJob");
        assert_eq!(json["result"]["revert"], "ERC20InsufficientBalance");
        assert_eq!(json["args"]["totalSteps"], 100);
        assert_eq!(json["args"]["committeeSize"], 2);
        assert_eq!(json["block"], 3);
        assert_eq!(job_no(U256::MAX), u64::MAX);
        let mut zero = params(&cfg);
        zero.min_stake = U256::ZERO;
        assert!(deploy(Scheme::Simulated, zero, []).is_err(), "minStake 0");
    }
}
