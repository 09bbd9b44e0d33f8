//! Many seeds of the fault mix on the protocol crate's machines, zero checker failures:
//! `many_seeds` (`faults`: simulated signatures, 22 nodes for an hour, with lost gossip and
//! partitions) and `many_seeds_protocol` (`faults-protocol`: secp256k1, 12 nodes); the soak
//! tests (`cargo test -p gpuchain-sim --test seeds -- --ignored soak`) run far more.
//!
//! `faults` judges its jobs for liveness after faults stop. A lost announcement or vote used
//! to stall a job there until it expired (about a third of the seeds): the machines published
//! each once. Now a provider publishes again every announcement the escrow has not decided
//! after `REGOSSIP_AFTER`, and a verifier every vote it has not acted on, so the full mix
//! passes.
//! A failing seed is shrunk to a smaller failing config, printed as TOML with the seed.

use gpuchain_sim::config::SimConfig;
use gpuchain_sim::escrow::Bugs;
use gpuchain_sim::{presets, run, shrink};

fn sweep(cfg: fn() -> SimConfig, seeds: std::ops::Range<u64>) {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4) as u64;
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = seeds.clone();
                s.spawn(move || {
                    seeds
                        .filter(|seed| seed % threads == t)
                        .filter_map(|seed| match run(cfg(), seed) {
                            Err(e) => Some(match shrink(&cfg(), seed, Bugs::default(), 30) {
                                Some(s) => format!("{e}\n\n{s}"),
                                None => e.to_string(),
                            }),
                            // Accounting sanity: nothing is accepted that was not trained.
                            Ok(o) if o.report.steps_accepted > o.report.steps_trained => {
                                Some(format!("seed {seed}: more steps accepted than trained"))
                            }
                            // No verifier here is byzantine: a served honest checkpoint is
                            // never slashed, and nothing the checks always refuse is paid.
                            Ok(o)
                                if o.report.observed.honest_stake_lost > 0
                                    || o.report.observed.junk_paid > 0 =>
                            {
                                Some(format!(
                                    "seed {seed}: {:?}\n{}",
                                    o.report.observed,
                                    o.report.to_text()
                                ))
                            }
                            Ok(_) => None,
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a worker panicked".into()])
            })
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} failing seeds; first:\n{}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn many_seeds() {
    sweep(presets::faults, 1..301);
}

/// The protocol crate's machines under the fault mix, every message signed and recovered for
/// real (secp256k1): a smaller swarm than `faults`, about a third of a second a seed on one core.
#[test]
fn many_seeds_protocol() {
    sweep(presets::faults_protocol, 1..301);
}

#[test]
#[ignore = "soak: ten thousand seeds of the protocol machines, about half an hour on 2 cores"]
fn soak() {
    sweep(presets::faults, 1_000..11_000);
}

#[test]
#[ignore = "soak: the protocol machines over a thousand seeds, about 3 minutes on 2 cores"]
fn soak_protocol() {
    sweep(presets::faults_protocol, 1_000..2_000);
}
