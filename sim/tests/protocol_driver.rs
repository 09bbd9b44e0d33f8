//! What the protocol driver adds around the machines, checked: the signature schemes, the
//! offer fan-out, replays, and the 10,000-node preset. (The presets' stories are
//! `tests/presets.rs`; every run is on the protocol crate's machines.)

use gpuchain_protocol::signing::Scheme;
use gpuchain_sim::{presets, run};

/// The simulated signature scheme (what large runs use) changes what a run costs, not what
/// happens in it: the same seed gives the same report as with secp256k1, signature counts
/// included, under faults (loss, partitions, churn, every cheat).
#[test]
fn simulated_signatures_change_nothing_but_the_cost() {
    for seed in [1, 2, 3] {
        let real = presets::faults_protocol();
        assert_eq!(real.protocol.signatures, Scheme::Secp256k1);
        let mut simulated = real.clone();
        simulated.protocol.signatures = Scheme::Simulated;
        let a = run(real, seed).unwrap_or_else(|e| panic!("{e}"));
        let mut b = run(simulated, seed).unwrap_or_else(|e| panic!("{e}"));
        let counts = b
            .report
            .signatures
            .as_mut()
            .expect("protocol driver counts signatures");
        assert_eq!(counts.scheme, Scheme::Simulated);
        assert!(
            counts.signatures() > 100,
            "seed {seed}: {}",
            b.report.to_text()
        );
        counts.scheme = Scheme::Secp256k1;
        assert_eq!(a.report.to_json(), b.report.to_json(), "seed {seed}");
    }
}

#[test]
fn break_it_with_the_protocol_machines_replays_byte_for_byte() {
    let cfg = presets::break_it();
    let a = run(cfg.clone(), 3).unwrap_or_else(|e| panic!("{e}"));
    let b = run(cfg, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.report.to_json(), b.report.to_json());
    assert_eq!(
        a.report.paid_by_provider.get("A"),
        Some(&100_000),
        "{}",
        a.report.to_text()
    );
    assert_eq!(
        a.report.paid_by_provider.get("B"),
        Some(&450_000),
        "{}",
        a.report.to_text()
    );
    assert_eq!(a.report.refunded, 450_000 - a.report.fees);
}

#[test]
fn protocol_machines_under_faults_keep_every_invariant() {
    let mut cfg = presets::faults();
    // The preset signs with the simulated scheme; here every message carries a real
    // signature, so a short run keeps the test quick.
    cfg.protocol.signatures = Scheme::Secp256k1;
    cfg.duration_s = 600.0;
    cfg.faults_stop_s = Some(200.0);
    cfg.job.last_start_s = 400.0;
    let out = run(cfg, 1).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.report.jobs_completed > 0, "{}", out.report.to_text());
    assert!(
        out.report.steps_trained >= out.report.steps_accepted,
        "{}",
        out.report.to_text()
    );
}

#[test]
fn offers_reach_the_fanout_and_replay_identically() {
    let mut cfg = presets::faults_protocol();
    cfg.providers = 40;
    cfg.protocol.offer_fanout = 5;
    cfg.duration_s = 120.0;
    cfg.faults_stop_s = Some(0.0);
    cfg.job.last_start_s = 60.0;
    let out = run(cfg.clone(), 2).unwrap_or_else(|e| panic!("{e}"));
    let r = &out.report;
    let sig = r
        .signatures
        .as_ref()
        .expect("protocol driver counts signatures");
    let offers = sig.signed.get("offer").copied().unwrap_or(0);
    let delivered = sig.delivered.get("offer").copied().unwrap_or(0);
    assert!(offers > 0, "{}", r.to_text());
    // Each offer reaches at most the fanout, not the 40 providers on the jobs topic.
    assert!(delivered <= offers * 5, "{}", r.to_text());
    assert!(r.jobs_completed > 0, "{}", r.to_text());
    // Same seed, same report, with the random fanout.
    let again = run(cfg, 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.report.to_json(), r.to_json());
}

/// The 10,000-node preset runs on the protocol machines (simulated signatures): a few
/// simulated minutes here, where every client has offered a job and most are training; the
/// whole day is the scale bench.
#[test]
fn churn_10k_runs_on_the_protocol_machines() {
    let mut cfg = presets::churn_10k();
    cfg.duration_s = 180.0;
    let out = run(cfg.clone(), 5).unwrap_or_else(|e| panic!("{e}"));
    let r = &out.report;
    let counts = r
        .signatures
        .as_ref()
        .expect("protocol driver counts signatures");
    assert_eq!(counts.scheme, Scheme::Simulated);
    assert_eq!(r.jobs_created, u64::from(cfg.clients), "{}", r.to_text());
    // Training under way: most jobs heartbeat once a second for most of the run.
    let heartbeats = counts.signed.get("heartbeat").copied().unwrap_or(0);
    assert!(
        heartbeats > u64::from(cfg.clients) * 60,
        "{heartbeats} heartbeats\n{}",
        r.to_text()
    );
}

/// A job's heartbeats go on its own heartbeat topic (`gpuchain/1/job/<id>/heartbeats`),
/// which only the job's client subscribes to: each heartbeat reaches that client and no one
/// else (at most one delivery per heartbeat, fewer when lost or partitioned away), while the
/// job's verifiers, on the job's topic, still get every announcement. The jobs get done.
#[test]
fn heartbeats_reach_the_jobs_client_alone() {
    let mut cfg = presets::faults_protocol();
    cfg.protocol.signatures = Scheme::Simulated;
    let out = run(cfg, 1).unwrap_or_else(|e| panic!("{e}"));
    let r = &out.report;
    assert!(r.jobs_completed > 0, "{}", r.to_text());
    let sig = r.signatures.as_ref().expect("signatures counted");
    let count = |m: &std::collections::BTreeMap<&str, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let (sent, delivered) = (
        count(&sig.signed, "heartbeat"),
        count(&sig.delivered, "heartbeat"),
    );
    assert!(
        sent > 100 && delivered > sent / 2 && delivered <= sent,
        "{sent} sent, {delivered} delivered"
    );
    assert_eq!(sig.heartbeats_off_client, 0, "{}", r.to_text());
    // The job's topic still carries announcements to every listed verifier.
    let (announced, heard) = (
        count(&sig.signed, "announce"),
        count(&sig.delivered, "announce"),
    );
    assert!(
        heard > 2 * announced,
        "{announced} announced, {heard} delivered"
    );
}
