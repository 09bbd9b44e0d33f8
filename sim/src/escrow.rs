//! The chain the simulator runs: the protocol crate's model of `JobEscrow`
//! (`gpuchain_protocol::escrow`, the one the protocol tests run and the differential test in
//! `contracts/bindings/tests/escrow_model.rs` holds to the contract on anvil), deployed for a
//! run, and the log of every call it executed (`--calls`).

use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::signing::Scheme;
use gpuchain_protocol::{Address, U256};
use serde::Serialize;

pub use gpuchain_protocol::escrow::{
    Bugs, Call, Escrow, EscrowError, Event, Job, MAX_VERIFIERS, Params, Stake, Status,
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

/// A fresh escrow: `funded` accounts hold their tokens and have approved the escrow for all
/// of them (the node's chain client approves once), bids and votes are recovered under
/// `scheme` (the machines' own).
pub fn deploy(
    scheme: Scheme,
    min_stake: Amount,
    unbond_delay: u64,
    funded: impl IntoIterator<Item = (Address, Amount)>,
) -> Result<Escrow, EscrowError> {
    let params = Params {
        min_stake: U256::from(min_stake),
        unbond_delay,
        max_duration: MAX_DURATION,
        max_grace: MAX_GRACE,
    };
    let mut e = Escrow::new(domain(), scheme, TOKEN, params)?;
    let escrow = e.address();
    for (who, amount) in funded {
        e.mint(TOKEN, who, U256::from(amount));
        e.approve(TOKEN, who, escrow, U256::MAX);
    }
    Ok(e)
}

/// The sim's number for an on-chain job id (ids past `u64` name no job the sim made).
pub fn job_no(id: U256) -> JobId {
    id.saturating_to()
}

/// One call as executed: who, when (block timestamp), what, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
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
            Call::WithdrawStake => json!({}),
            Call::Tx(ChainTx::CreateJob {
                token,
                budget,
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                spec_hash,
                verifiers,
                quorum,
                deadline,
                grace,
            }) => json!({
                "token": token, "budget": budget, "maxPricePerStep": max_price_per_step,
                "totalSteps": total_steps, "checkpointInterval": checkpoint_interval,
                "specHash": spec_hash, "verifiers": verifiers, "quorum": quorum,
                "deadline": deadline, "grace": grace,
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
                | ChainTx::Settle { job_id },
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
        let mut e = deploy(Scheme::Simulated, 100, 10, [(client, 1_000)]).expect("deploys");
        let create = ChainTx::CreateJob {
            token: TOKEN,
            budget: U256::from(1_000),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 10,
            spec_hash: Default::default(),
            verifiers: vec![Address::repeat_byte(2), Address::repeat_byte(3)],
            quorum: 2,
            deadline: 50,
            grace: 0,
        };
        let result = e.apply(&create.clone().into(), client, 1).map(|_| ());
        assert_eq!(result, Ok(()));
        assert_eq!(e.balance_of(TOKEN, domain().escrow), U256::from(1_000));
        // The next one is more than the client has left.
        let again = e.apply(&create.clone().into(), client, 2).map(|_| ());
        assert!(
            matches!(again, Err(EscrowError::Erc20InsufficientBalance { .. })),
            "{again:?}"
        );
        let record = CallRecord {
            timestamp: 2,
            caller: client,
            call: create.into(),
            result: again,
        };
        let json = record.to_json();
        assert_eq!(json["function"], "createJob");
        assert_eq!(json["result"]["revert"], "ERC20InsufficientBalance");
        assert_eq!(json["args"]["totalSteps"], 100);
        assert_eq!(job_no(U256::MAX), u64::MAX);
        assert!(deploy(Scheme::Simulated, 0, 10, []).is_err(), "minStake 0");
    }
}
