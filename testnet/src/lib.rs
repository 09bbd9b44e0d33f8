//! A local gpuchain network for end-to-end tests and `gpuchain testnet`: anvil with the real
//! contracts ([`Chain`]) and real `gpuchain node` processes on loopback ([`Testnet`]), with
//! readiness waits, fault injection (kill -9, SIGTERM, SIGSTOP/SIGCONT, restart), node logs
//! read back as typed events ([`Logged`], matched on [`NodeEvent`]), and teardown that leaves
//! no process behind. See README.md.
//!
//! ```rust,ignore
//! let dir = tempfile::tempdir()?;
//! let mut net = Testnet::with_new_chain(dir.path(), binary()?, ChainOpts::default()).await?;
//! net.spawn(NodeSpec::new("a")).await?;
//! net.spawn(NodeSpec::new("b")).await?; // bootstraps from "a"
//! let killed_at = net.kill9("b")?;
//! let seen = net.wait_event("a", event_is!(ProviderLost), Duration::from_secs(10)).await?;
//! let latency = seen.at.duration_since(killed_at)?;
//! ```

pub mod browser;
mod chain;
pub mod chaos;
pub mod checks;
pub mod dashboard;
pub mod demo;
pub mod events;
mod launch;
mod node;
mod process;
pub mod proxy;
pub mod record;
pub mod scenario;
mod testnet;
mod wait;

pub use chain::{Chain, ChainOpts, ETH, USDC, VERIFIER_STAKE};
pub use events::{LogTail, Logged, NodeEvent, after, line_time, node_event, read_events, read_log};
pub use node::{API_TIMEOUT, Bootstrap, NodeProc, NodeSpec};
pub use process::{Signal, pid_alive, signal};
pub use testnet::{JobSubmission, PASSWORD, STOP_GRACE, Testnet, binary};
pub use wait::poll_until;

#[doc(no_inline)]
pub use alloy::primitives::{Address, U256};
#[doc(no_inline)]
pub use alloy::signers::local::PrivateKeySigner;
#[doc(no_inline)]
pub use gpuchain_contracts::chain::ChainClient;
