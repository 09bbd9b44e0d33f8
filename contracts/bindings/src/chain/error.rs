use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use alloy::transports::TransportError;

use super::revert::RevertReason;

/// What the chain client and the event follower report. Every message says what to do next
/// where there is something to do.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The RPC did not answer, even after retries.
    #[error(
        "cannot reach the chain RPC at {url} ({source}); check that the chain node is running \
         (for a local testnet: anvil) and that the RPC URL is right"
    )]
    Unreachable {
        url: String,
        #[source]
        source: TransportError,
    },
    /// The RPC answered, but the request failed for a reason retrying will not fix.
    #[error("RPC {what} at {url} failed: {source}")]
    Rpc {
        what: &'static str,
        url: String,
        #[source]
        source: TransportError,
    },
    /// The account cannot pay the gas for `call`. `needed` is the estimate's worst case, or
    /// a plain transfer's cost when the node refused to estimate.
    #[error(
        "account {address} cannot pay for {call}: its balance is {balance} wei and the \
         transaction's gas may cost {needed} wei; send it some ETH (on anvil: \
         anvil_setBalance, or a transfer from a dev account)"
    )]
    Unfunded {
        address: Address,
        call: &'static str,
        balance: U256,
        needed: U256,
    },
    /// The contract refused the call. `tx` is set when it reverted on chain (gas was spent),
    /// unset when the gas estimate already reverted (nothing was sent).
    #[error("{call} reverted: {reason}{}", tx.map(|h| format!(" (transaction {h})")).unwrap_or_default())]
    Reverted {
        call: &'static str,
        reason: RevertReason,
        tx: Option<B256>,
    },
    /// `createJob` was not sent: the escrow would refuse these terms (nothing was sent,
    /// no approval either).
    #[error("createJob not sent: {0}")]
    CreateJobRefused(Box<super::create_job::CreateJobProblem>),
    /// The transaction was sent but no receipt came in time. It may still be mined; the next
    /// transaction re-reads the account's nonce in case it was dropped.
    #[error("{call}: transaction {hash} has no receipt after {waited:?}; it may have been dropped")]
    ReceiptTimeout {
        call: &'static str,
        hash: B256,
        waited: Duration,
    },
    /// Nothing is deployed at the escrow (or token) address on this chain.
    #[error(
        "no contract at {address} on chain {chain_id} ({url}); is the {what} address right and \
         deployed on this chain?"
    )]
    NoContract {
        what: &'static str,
        address: Address,
        chain_id: u64,
        url: String,
    },
    /// The chain's answer does not fit what we asked (a missing block, a malformed value).
    #[error("unexpected answer from the chain RPC at {url}: {detail}")]
    Unexpected { url: String, detail: String },
    /// A transaction could not be built or signed locally.
    #[error("building or signing {call}: {detail}")]
    Signing { call: &'static str, detail: String },
    /// The follower's cursor file cannot be read, parsed or written.
    #[error(
        "event cursor {}: {detail}; delete the file to re-read the escrow's events from the \
         start block",
        path.display()
    )]
    Cursor { path: PathBuf, detail: String },
}

impl From<super::create_job::CreateJobProblem> for ChainError {
    fn from(p: super::create_job::CreateJobProblem) -> Self {
        ChainError::CreateJobRefused(Box::new(p))
    }
}

impl ChainError {
    /// The contract's custom error name when the call reverted with one (e.g. `WrongEpoch`).
    pub fn revert_name(&self) -> Option<&str> {
        match self {
            ChainError::Reverted { reason, .. } => reason.name(),
            _ => None,
        }
    }
}
