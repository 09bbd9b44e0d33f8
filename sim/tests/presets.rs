//! The presets tell the stories they promise, deterministically.

use gpuchain_sim::config::USDC;
use gpuchain_sim::escrow::{self, Status, TOKEN};
use gpuchain_sim::{SimError, presets, run};

#[test]
fn nov4_story_pays_a_and_b_and_refunds_the_rest() {
    let out = run(presets::nov4(), 1).expect("nov4 runs clean");
    let r = &out.report;
    assert_eq!(r.jobs_completed, 1);
    assert_eq!(
        r.paid_by_provider.get("A"),
        Some(&(15 * USDC / 100)),
        "{}",
        r.to_text()
    );
    assert_eq!(r.paid_by_provider.get("B"), Some(&(75 * USDC / 100)));
    assert_eq!(
        r.paid_by_provider.get("P"),
        None,
        "the junk provider is never paid"
    );
    // Each of the two verifiers signed the 8 accepts and the reject (the budget had slack
    // for the reject's fees): 9 fees of 0.001 each, credited when the client settled.
    let fee = presets::nov4().job.verifier_fee;
    assert_eq!(r.fees, 18 * fee);
    assert_eq!(r.fees_credited, r.fees);
    assert_eq!(
        r.fees_by_verifier.values().copied().collect::<Vec<_>>(),
        vec![9 * fee; 2]
    );
    // The refund is what is left: paid + fees + refunded == budget.
    assert_eq!(r.paid + r.fees + r.refunded, 5 * USDC);
    assert_eq!(r.refunded, 410 * USDC / 100 - 18 * fee);
    // P's junk was refused by the whole committee: its stake burned, no honest stake lost.
    assert_eq!(r.slashed, presets::nov4().protocol.stake);
    assert_eq!(r.observed.honest_stake_lost, 0);
    assert_eq!(r.observed.junk_paid, 0);
    assert_eq!(
        r.cheats.get("junk").map(|c| (c.caught, c.missed)),
        Some((1, 0))
    );
    // The brief's target: notice within 0.3 s, training again within 5 s.
    assert_eq!(r.detection.count, 1);
    assert!(
        r.detection.max_ms <= 300,
        "noticed after {} ms",
        r.detection.max_ms
    );
    assert!(r.training_again_after_failure.max_ms <= 5_000);
}

#[test]
fn break_it_game_matches_the_product_page_prices() {
    let out = run(presets::break_it(), 1).expect("break-it runs clean");
    let r = &out.report;
    // A: 50 steps at 0.002; C refused; B: 150 steps at 0.003; the rest of 1.00 back.
    assert_eq!(
        r.paid_by_provider.get("A"),
        Some(&100_000),
        "{}",
        r.to_text()
    );
    assert_eq!(r.paid_by_provider.get("C"), None);
    assert_eq!(r.paid_by_provider.get("B"), Some(&450_000));
    // The page's 0.45 back, less the verifiers' fees: 8 accepts and the reject, two signers.
    assert_eq!(r.fees, 18 * presets::break_it().job.verifier_fee);
    assert_eq!(r.refunded, 450_000 - r.fees);
    assert_eq!(r.paid + r.fees + r.refunded, USDC);
    assert_eq!(r.steps_accepted, 200);
}

#[test]
fn same_seed_gives_byte_identical_reports_and_another_seed_differs() {
    // Seeds whose run passes every checker (not all of `faults` do yet: tests/seeds.rs).
    let a = run(presets::faults(), 3).expect("clean");
    let b = run(presets::faults(), 3).expect("clean");
    let c = run(presets::faults(), 4).expect("clean");
    assert_eq!(a.report.to_text(), b.report.to_text());
    assert_eq!(a.report.to_json(), b.report.to_json());
    assert_ne!(a.report.to_json(), c.report.to_json());
}

#[test]
fn call_log_replays_to_the_same_books() {
    // The log is every call the run's chain executed: replayed on a fresh escrow it must
    // give the same result for every call and balanced books.
    let cfg = presets::nov4();
    let out = run(cfg.clone(), 7).expect("clean");
    assert!(!out.calls.is_empty());
    let mut accounts: Vec<_> = out.calls.iter().map(|c| c.caller).collect();
    accounts.sort_unstable();
    accounts.dedup();
    let mut e = escrow::deploy(
        cfg.protocol.signatures,
        escrow::params(&cfg),
        accounts.iter().map(|a| (*a, 1_000 * USDC)),
    )
    .expect("deploys");
    // The verifiers' stakes in block 0, the draw, every decision: each call in its block,
    // the block hashes as the run's chain recorded them (the draw reads them).
    assert!(
        out.calls
            .iter()
            .any(|c| c.call.name() == "registerVerifier")
    );
    assert!(out.calls.iter().any(|c| c.call.name() == "drawCommittee"));
    for c in &out.calls {
        assert_eq!(c.block_hash, escrow::block_hash(7, c.block));
        e.record_block_hash(c.block, c.block_hash);
        let block = escrow::Block {
            number: c.block,
            time: c.timestamp,
        };
        let got = e.apply(&c.call, c.caller, block).map(|_| ());
        assert_eq!(got, c.result, "{c:?}");
    }
    let held = e.balance_of(TOKEN, e.address());
    assert_eq!(held, e.owed_recomputed(TOKEN));
    assert_eq!(e.jobs()[0].status, Status::Completed);
}

#[test]
fn a_bad_config_is_an_error_naming_the_field_not_a_panic() {
    let mut cfg = presets::nov4();
    cfg.job.quorum = 3;
    cfg.job.committee_size = 2;
    match run(cfg, 1) {
        Err(SimError::Config(e)) => assert_eq!(e.field, "job.quorum"),
        other => panic!(
            "expected a config error, got {:?}",
            other.map(|o| o.report.name)
        ),
    }
    let dir = tempdir();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[network]\nlatency_median_ms = -3.0\n").expect("write");
    let err = gpuchain_sim::cli::load(path.to_str().expect("utf-8")).expect_err("negative latency");
    assert!(
        format!("{err:#}").contains("network.latency_median_ms"),
        "{err:#}"
    );
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gpuchain-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn cli_run_writes_json_plots_and_the_call_log() {
    use gpuchain_sim::cli::{RunArgs, SimAction, SimCommand, run_cli};
    let dir = tempdir().join("cli");
    let (json, plots, calls) = (
        dir.join("report.json"),
        dir.join("plots"),
        dir.join("calls.json"),
    );
    std::fs::create_dir_all(&dir).expect("dir");
    let cmd = SimCommand {
        action: SimAction::Run(RunArgs {
            target: "break-it".into(),
            seed: 5,
            seeds: 1,
            json: Some(json.clone()),
            plots: Some(plots.clone()),
            calls: Some(calls.clone()),
        }),
    };
    run_cli(cmd).expect("runs");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parses");
    assert_eq!(report["seed"], 5);
    assert_eq!(report["steps_accepted"], 200);
    for f in [
        "detection.svg",
        "training-again.svg",
        "accepted-steps.svg",
        "cheats.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(f)).expect("plot written");
        assert!(svg.contains("<svg"), "{f}");
    }
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&calls).expect("calls")).expect("parses");
    assert!(log.as_array().is_some_and(|a| a.len() > 5));
    let bad = SimCommand {
        action: SimAction::Run(RunArgs {
            target: "no-such-preset".into(),
            seed: 1,
            seeds: 1,
            json: None,
            plots: None,
            calls: None,
        }),
    };
    assert!(
        run_cli(bad)
            .expect_err("unknown preset")
            .to_string()
            .contains("unknown preset")
    );
}
