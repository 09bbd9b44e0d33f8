//! gpuchain's protocol: wire messages, signatures and the three role state machines.
//!
//! Everything here is sans-IO: the node and the simulator feed inputs (chain events, gossip
//! messages, trainer/blob results) together with `now`, and execute the outputs. Nothing in
//! this crate reads a clock, a socket, a file or an RNG, so the simulator's virtual time and
//! the binary's wall-clock time drive the exact same code.

pub mod anchors;
pub mod chain;
pub mod chain_record;
pub mod client;
pub mod detector;
pub mod eip712;
pub mod escrow;
pub mod faults;
pub mod io;
pub mod messages;
pub mod provider;
pub mod reputation;
pub mod retry;
pub mod roles;
pub mod signing;
pub mod spec;
pub mod time;
pub mod topics;
pub mod types;
pub mod validation;
pub mod verifier;
pub mod wire;

pub use chain::{ChainEvent, ChainTx, EpochEndReason, TxId};
pub use client::{Client, ClientConfig};
pub use eip712::EscrowDomain;
pub use io::{Input, Notice, Output, StateMachine};
pub use provider::{Provider, ProviderConfig};
pub use signing::{Scheme, Sig65, SigningKey};
pub use spec::JobSpec;
pub use time::Time;
pub use types::{Address, B256, Epoch, Hash, JobId, Step, U256};
pub use validation::{
    Checked, IgnoreReason, RejectReason, Verdict, check_message, decode_validated, validate_message,
};
pub use verifier::{Verifier, VerifierConfig};
pub use wire::{MAX_MESSAGE_SIZE, Message, WireError};
