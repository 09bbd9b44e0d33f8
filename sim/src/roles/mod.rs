//! Stand-in role behaviours (client, provider, verifier), written against the simulator's own
//! message and timer types.
//!
//! STAND-IN: the protocol crate's own machines are driven by `drive` (config `driver =
//! "protocol"`); these behaviours follow the same lifecycle (BRIEF.md, "Job lifecycle")
//! without signatures or wire encoding, so that runs of thousands of nodes and hundreds of
//! seeds stay fast. Where they and the machines differ, the machines are right. Each handler
//! takes the current virtual time and one input and emits sends, transactions and timers
//! through `World`.

pub mod client;
pub mod provider;
pub mod verifier;
