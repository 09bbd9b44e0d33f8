//! The node's chain client: it executes the protocol's [`ChainTx`] outputs against a deployed
//! `JobEscrow` and turns the escrow's logs back into [`ChainEvent`] inputs.
//!
//! - [`ChainClient`] signs with a local key and sends raw transactions itself.
//! - [`EventFollower`] polls the escrow's logs into [`FollowedEvent`]s, in chain order, and
//!   keeps a cursor file so a restarted node carries on where it stopped.
//!
//! # Why it is shaped this way
//!
//! **One nonce sequence per signer, held here.** Several roles in one node (client, verifier,
//! anyone submitting a quorum) send from the same key, often at once. Asking the RPC for the
//! nonce on every send races with our own in-flight transactions; alloy's fillers cache it
//! but cannot tell a dropped transaction from a slow one. So the client keeps the next nonce
//! behind a mutex that is held only while a transaction is signed and handed to the RPC
//! (never while waiting for its receipt, so transactions pipeline). Anything that leaves the
//! sequence in doubt (a rejected send, "nonce too low" because another process used the key,
//! a receipt that never came because the transaction was dropped) forgets the cached value,
//! and the next send reads the account's pending count again. That heals gaps instead of
//! leaving every later transaction stuck behind a missing nonce.
//!
//! **Estimate first, then send.** `eth_estimateGas` runs the call against the latest state, so
//! most reverts are caught before any gas is spent, with the contract's custom error decoded
//! into its name and arguments ([`ChainError::Reverted`]). A transaction that passes the
//! estimate and still reverts on chain (someone else changed the state in between) is replayed
//! with `eth_call` on the state after its block, which holds that change, to recover the reason.
//!
//! **Retries only where they are safe.** Transport failures and rate limits are retried with
//! exponential backoff; a signed transaction is re-sent byte for byte, so a retry can never
//! double-spend (the RPC answers "already known" or the nonce is used). Errors that would
//! only repeat (reverts, bad parameters) are returned at once. When retries run out, the error
//! names the RPC URL ([`ChainError::Unreachable`]); an account that cannot pay for gas is
//! named with its balance ([`ChainError::Unfunded`]).
//!
//! **Cursor = last fully processed block, committed by the caller.** The follower hands out
//! a [`Batch`] of whole blocks; the node feeds every event to its role machines and only then
//! calls [`EventFollower::commit`], which writes the cursor atomically (temporary file, fsync,
//! rename). A crash before the commit replays that batch after the restart (at-least-once, and
//! only the uncommitted blocks); after the commit nothing is replayed and, since the next read
//! starts at the block after the cursor, nothing is missed. Within one process events are
//! also de-duplicated by `(block, log index)`, so an RPC that returns overlapping ranges
//! cannot deliver an event twice. The cursor remembers its block's hash: if that block is gone
//! or different when the follower starts (a restarted anvil, a reorg deeper than the cursor),
//! the chain is not the one the cursor was written for, and the follower starts again from the
//! start block instead of silently skipping the new chain's events.
//!
//! # Driving the role machines
//!
//! ```rust,ignore
//! let chain = ChainClient::connect(config, signer).await?;
//! let mut follower = EventFollower::open(&chain, FollowerConfig::new(deploy_block, data_dir)).await?;
//! loop {
//!     tokio::select! {
//!         batch = follower.next_batch() => {
//!             let batch = batch?;               // on Err: log, back off, call again
//!             for ev in &batch.events {
//!                 machine.handle_input(now(), ev.to_input());
//!             }
//!             // ...execute the outputs; Output::SubmitTx { id, tx } spawns
//!             // `chain.submit(&tx)`, and its Err becomes Input::TxFailed { id, reason }
//!             follower.commit(&batch).await?;
//!         }
//!         // gossip, timers, trainer...
//!     }
//! }
//! ```

mod client;
mod create_job;
mod error;
mod follower;
mod revert;
mod rpc;
mod summary;

pub use client::{ChainClient, ChainConfig, PendingTx, StakeInfo, TxOutcome, VerifierStakeInfo};
pub use create_job::{
    AmountError, CreateJobProblem, CreateJobTerms, EscrowLimits, MAX_VERIFIERS, TEST_USDC_DECIMALS,
    Tokens, check_create_job, decode_revert_in_tokens, format_tokens, parse_tokens,
};
pub use error::ChainError;
pub use follower::{Batch, EventFollower, FollowedEvent, FollowerConfig, decode_event};
pub use revert::{RevertReason, decode_revert};
pub use rpc::RetryPolicy;
pub use summary::{JobMoney, STATUS_NAMES, status_name, summarize};

#[doc(no_inline)]
pub use gpuchain_protocol::chain::{ChainEvent, ChainTx};
