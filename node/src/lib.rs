//! gpuchain node: the drivers around the protocol state machines. See README.md.

pub mod api;
pub mod behaviour;
pub mod blobs;
pub mod cli;
pub mod commands;
pub mod compute;
pub mod config;
pub mod datadir;
pub mod event_loop;
pub mod events;
pub mod handle;
pub mod hardware;
pub mod hello;
pub mod identity;
pub mod inbound;
pub mod keys;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod ports;
pub mod roles;
pub mod scoring;
pub mod state;
pub mod topics;
pub mod validation;
pub mod wire;
