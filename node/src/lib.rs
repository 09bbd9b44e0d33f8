//! gpuchain node: the drivers around the protocol state machines. See README.md.

pub mod api;
pub mod api_client;
pub mod behaviour;
pub mod blobs;
pub mod cli;
pub mod commands;
pub mod config;
pub mod event_loop;
pub mod handle;
pub mod identity;
pub mod keys;
pub mod logging;
pub mod node;
pub mod roles;
pub mod scoring;
pub mod state;
pub mod testnet_cmd;
pub mod topics;
pub mod validation;
pub mod wire;
