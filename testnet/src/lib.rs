//! A local gpuchain network for end-to-end tests and `gpuchain testnet`: anvil with the real
//! contracts ([`Chain`]) and real `gpuchain node` processes on loopback ([`Testnet`]), with
//! readiness waits, fault injection (kill -9, SIGTERM, SIGSTOP/SIGCONT, restart), node logs
//! read back as JSON events, and teardown that leaves no process behind. See README.md.
//!
//! ```rust,ignore
//! let dir = tempfile::tempdir()?;
//! let mut net = Testnet::with_new_chain(dir.path(), binary()?, ChainOpts::default()).await?;
//! net.spawn(NodeSpec::new("a")).await?;
//! net.spawn(NodeSpec::new("b")).await?; // bootstraps from "a"
//! let killed_at = net.kill9("b")?;
//! let seen = net.wait_event("a", is_event("provider_lost"), Duration::from_secs(10)).await?;
//! let latency = event_time(&seen).and_then(|t| t.duration_since(killed_at).ok());
//! ```

mod chain;
pub mod demo;
pub mod events;
mod node;
mod process;
pub mod scenario;
mod testnet;

pub use chain::{Chain, ChainOpts, ETH, USDC};
pub use events::{
    NodeEvent, after, event_micros, event_name, event_time, field, field_str, is_event, node_event,
};
pub use node::{API_TIMEOUT, Bootstrap, NodeProc, NodeSpec};
pub use process::{Signal, pid_alive, signal};
pub use testnet::{JobSubmission, PASSWORD, STOP_GRACE, Testnet, binary, poll_until};

#[doc(no_inline)]
pub use alloy::primitives::{Address, U256};
#[doc(no_inline)]
pub use alloy::signers::local::PrivateKeySigner;
#[doc(no_inline)]
pub use gpuchain_contracts::chain::ChainClient;
