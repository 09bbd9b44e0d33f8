//! The node's interfaces as both sides see them. The control API: where a running node
//! leaves its address and its access token, the rules a request must pass (token, `Host`,
//! `Origin`), the request bodies, and the one HTTP client every caller uses (the CLI, the
//! testnet harness, the tests). The event log: the typed events the node writes and its
//! readers parse. The server and the writer live in the node crate; keeping the contract here
//! lets callers talk to a node without linking it.

pub mod auth;
pub mod client;
pub mod events;
pub mod types;

pub use auth::{ADDR_FILE, TOKEN_FILE};
pub use client::{ApiClient, ApiError};
pub use events::NodeEvent;
