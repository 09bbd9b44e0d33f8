//! What verifiers run: the quality test on a held-out set and the re-execution spot check.

pub mod quality;
pub mod spot;
