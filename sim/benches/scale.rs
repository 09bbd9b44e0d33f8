//! The scale benchmark: the churn-10k preset (10,000 nodes, 24 simulated hours), timed.
//! `cargo bench -p gpuchain-sim --profile dev` (the profile tests and the binary use).
//! Prints wall time, events and events/s; the target is ≤ 60 s wall on 2 cores.

use std::time::Instant;

fn main() {
    // `cargo bench` passes `--bench`; an optional number overrides the simulated hours.
    let hours: Option<f64> = std::env::args().skip(1).find_map(|a| a.parse().ok());
    let mut cfg = gpuchain_sim::presets::churn_10k();
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
                "churn-10k: {nodes} nodes, {:.1} simulated hours, seed 1: wall {wall:.1} s, {} events, {:.2} M events/s, {:.0}× real time",
                cfg.duration_s / 3_600.0,
                r.events,
                r.events as f64 / wall / 1e6,
                cfg.duration_s / wall
            );
            println!(
                "  jobs {} created / {} completed; {} provider failures noticed (p99 {} ms); {} cheats caught, {} missed",
                r.jobs_created,
                r.jobs_completed,
                r.detection.count,
                r.detection.p99_ms,
                r.cheats.values().map(|c| c.caught).sum::<u64>(),
                r.cheats.values().map(|c| c.missed).sum::<u64>()
            );
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
