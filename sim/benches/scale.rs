//! The scale benchmark: the churn-10k preset (10,000 nodes, 24 simulated hours), timed.
//! `cargo bench -p gpuchain-sim --profile dev` (the profile tests and the binary use).
//! Prints wall time, events and events/s beside the last measured figure; the target is
//! ≤ 60 s wall on 2 cores.
//!
//! The preset runs the protocol crate's machines with simulated signatures. Arguments (after
//! `--`): a number overrides the simulated hours; `secp256k1` makes the machines sign and
//! check for real. It also prints the signatures made and checked and what they would cost
//! with secp256k1.

use std::time::Instant;

use gpuchain_protocol::B256;
use gpuchain_protocol::signing::{Scheme, SigningKey, recover_signer};

/// The whole day as last measured (sim/README.md, dev profile, seed 1, 2 cores, 7 Dec: 501 s
/// of CPU, 188.3 M events, 0.82 GB resident, in an hour when the machine's pace moved by 1.6
/// times): the figure a run of the whole day is printed beside.
const LAST_MEASURED_DAY_S: f64 = 501.0;
/// The target for the whole day.
const TARGET_DAY_S: f64 = 60.0;

/// Mean wall time of one secp256k1 signature and one recovery, microseconds.
fn ecdsa_costs() -> (f64, f64) {
    let key = SigningKey::from_seed(1);
    let n = 500u64;
    let digests: Vec<B256> = (0..n)
        .map(|i| B256::left_padding_from(&i.to_be_bytes()))
        .collect();
    let t = Instant::now();
    let sigs: Vec<_> = digests.iter().map(|d| key.sign_digest(d)).collect();
    let sign = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    let ok = digests
        .iter()
        .zip(&sigs)
        .filter(|(d, s)| recover_signer(d, s).is_ok_and(|a| a == key.address()))
        .count();
    let recover = t.elapsed().as_secs_f64() / n as f64;
    assert_eq!(ok as u64, n, "every signature recovers its signer");
    (sign * 1e6, recover * 1e6)
}

fn main() {
    // `cargo bench` passes `--bench`; an optional number overrides the simulated hours.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hours: Option<f64> = args.iter().find_map(|a| a.parse().ok());
    let mut cfg = gpuchain_sim::presets::churn_10k();
    if args.iter().any(|a| a == "secp256k1") {
        cfg.protocol.signatures = Scheme::Secp256k1;
    }
    if let Some(h) = hours {
        cfg.duration_s = h * 3_600.0;
        cfg.job.last_start_s = cfg.job.last_start_s.min(cfg.duration_s);
    }
    let nodes = cfg.clients + cfg.providers + cfg.verifiers;
    let started = Instant::now();
    match gpuchain_sim::run(cfg.clone(), 1) {
        Ok(out) => {
            let wall = started.elapsed().as_secs_f64();
            let r = &out.report;
            println!(
                "churn-10k (protocol machines, {} signatures): {nodes} nodes, {:.2} simulated hours, seed 1: wall {wall:.1} s, {} events, {:.3} M events/s, {:.1}× real time",
                match cfg.protocol.signatures {
                    Scheme::Secp256k1 => "secp256k1",
                    Scheme::Simulated => "simulated",
                },
                cfg.duration_s / 3_600.0,
                r.events,
                r.events as f64 / wall / 1e6,
                cfg.duration_s / wall
            );
            if cfg.duration_s >= 86_400.0 {
                println!(
                    "  the whole day: {wall:.0} s now, {LAST_MEASURED_DAY_S:.0} s last measured, target ≤ {TARGET_DAY_S:.0} s ({})",
                    if wall <= TARGET_DAY_S {
                        "met"
                    } else {
                        "not met"
                    }
                );
            }
            println!(
                "  jobs {} created / {} completed; {} provider failures noticed (p99 {} ms); {} cheats caught, {} missed",
                r.jobs_created,
                r.jobs_completed,
                r.detection.count,
                r.detection.p99_ms,
                r.cheats.values().map(|c| c.caught).sum::<u64>(),
                r.cheats.values().map(|c| c.missed).sum::<u64>()
            );
            if let Some(c) = &r.signatures {
                let (sign, recover) = ecdsa_costs();
                let (s, v) = (c.signatures(), c.recoveries());
                let crypto = (s as f64 * sign + v as f64 * recover) / 1e6;
                println!(
                    "  signatures: {s} made, {v} checked (each message once, for all its receivers; bids and votes again on chain); secp256k1 costs {sign:.0} µs to make one and {recover:.0} µs to recover one here, so real signatures would add ≈ {crypto:.0} s ({:.1}× this run's wall time)",
                    crypto / wall
                );
                println!("  made: {:?}\n  delivered: {:?}", c.signed, c.delivered);
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
