//! Many seeds of the fault mix, zero checker failures. CI runs `many_seeds`; the soak test
//! (`cargo test -p gpuchain-sim --test seeds -- --ignored soak`) runs far more.

use gpuchain_sim::{presets, run};

fn sweep(seeds: std::ops::Range<u64>) {
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
                        .filter_map(|seed| match run(presets::faults(), seed) {
                            Err(e) => Some(e.to_string()),
                            // Accounting sanity: nothing is accepted that was not trained.
                            Ok(o) if o.report.steps_accepted > o.report.steps_trained => {
                                Some(format!("seed {seed}: more steps accepted than trained"))
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
    sweep(1..301);
}

#[test]
#[ignore = "soak: thousands of seeds, minutes"]
fn soak() {
    sweep(1_000..11_000);
}
