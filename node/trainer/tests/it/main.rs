//! The trainer's integration tests, in one binary so candle links once.

// clippy.toml allows unwrap in #[test] functions; the shared helpers here are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anchors;
mod bert;
mod bundle;
mod common;
mod data;
mod hostile;
mod resume;
mod state_blobs;
mod stock_bert;
mod threads;
mod training;
mod verification;
