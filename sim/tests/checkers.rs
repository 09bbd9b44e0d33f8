//! Each checker fires on a deliberately broken escrow or run, and the failure names its seed.

use gpuchain_sim::checker::{
    ENDS_BY_DEADLINE, FUNDS_CONSERVED, LIVENESS, NO_DOUBLE_PAY, NO_JUNK_PAID,
};
use gpuchain_sim::escrow::Bugs;
use gpuchain_sim::{Sim, SimConfig, SimError, presets};

/// The first seed in `seeds` whose run fails, with the checker's name.
fn first_failure(
    cfg: &SimConfig,
    bugs: Bugs,
    seeds: std::ops::Range<u64>,
) -> Option<(u64, &'static str, String)> {
    for seed in seeds {
        let sim = Sim::new(cfg.clone(), seed)
            .expect("valid config")
            .with_bugs(bugs);
        match sim.run() {
            Ok(_) => {}
            Err(e @ SimError::Checker { .. }) => {
                let text = e.to_string();
                let SimError::Checker { failure, .. } = e else {
                    unreachable!()
                };
                return Some((seed, failure.checker, text));
            }
            Err(e) => panic!("{e}"),
        }
    }
    None
}

#[test]
fn free_money_breaks_conservation() {
    let bugs = Bugs {
        free_money: true,
        ..Bugs::default()
    };
    let (seed, checker, text) = first_failure(&presets::nov4(), bugs, 1..2).expect("fires");
    assert_eq!(checker, FUNDS_CONSERVED);
    assert!(text.contains(&format!("--seed {seed}")), "{text}");
    assert!(text.contains("last events"), "{text}");
}

#[test]
fn paying_a_fenced_epoch_is_caught() {
    let bugs = Bugs {
        skip_epoch_check: true,
        ..Bugs::default()
    };
    let cfg = presets::faults();
    let (_, checker, text) =
        first_failure(&cfg, bugs, 1..40).expect("some seed decides on a fenced epoch");
    assert_eq!(checker, NO_JUNK_PAID, "{text}");
}

#[test]
fn refunding_twice_is_caught() {
    let mut cfg = presets::nov4();
    // Without the full recount the conservation check cannot see the extra credit; the
    // withdrawal that cashes it is what the double-pay checker catches.
    cfg.full_checks = false;
    let bugs = Bugs {
        refund_twice: true,
        ..Bugs::default()
    };
    let (_, checker, text) = first_failure(&cfg, bugs, 1..2).expect("fires");
    assert_eq!(checker, NO_DOUBLE_PAY, "{text}");
    cfg.full_checks = true;
    let (_, checker, _) = first_failure(&cfg, bugs, 1..2).expect("fires");
    assert_eq!(checker, FUNDS_CONSERVED);
}

#[test]
fn a_job_that_cannot_be_exited_is_caught() {
    let mut cfg = presets::nov4();
    // Nobody can train it (too little memory everywhere), so it must expire.
    cfg.job.min_memory_bytes = 1 << 40;
    cfg.job.deadline_s = 60;
    cfg.job.grace_s = 10;
    cfg.duration_s = 200.0;
    cfg.script.clear();
    assert!(
        first_failure(&cfg, Bugs::default(), 1..2).is_none(),
        "a healthy escrow lets it expire"
    );
    let bugs = Bugs {
        never_expire: true,
        ..Bugs::default()
    };
    let (_, checker, text) = first_failure(&cfg, bugs, 1..2).expect("fires");
    assert_eq!(checker, ENDS_BY_DEADLINE, "{text}");
}

#[test]
fn liveness_fires_when_faults_stop_but_nobody_is_left() {
    let mut cfg = presets::faults();
    // Providers fail fast and never come back: after faults stop, no job can complete.
    cfg.churn.mttf_s = 60.0;
    cfg.churn.rejoin_s = 0.0;
    cfg.faults_stop_s = Some(600.0);
    let (_, checker, text) = first_failure(&cfg, Bugs::default(), 1..2).expect("fires");
    assert_eq!(checker, LIVENESS, "{text}");
}

#[test]
fn a_failure_shrinks_to_a_smaller_run_that_still_fails() {
    let bugs = Bugs {
        skip_epoch_check: true,
        ..Bugs::default()
    };
    let cfg = presets::faults();
    let (seed, checker, _) = first_failure(&cfg, bugs, 1..40).expect("fires");
    let s = gpuchain_sim::shrink(&cfg, seed, bugs, 60).expect("the run fails");
    let smaller = s.cfg.clients + s.cfg.providers + s.cfg.verifiers
        < cfg.clients + cfg.providers + cfg.verifiers
        || s.cfg.duration_s < cfg.duration_s;
    assert!(smaller, "{s}");
    let SimError::Checker { failure, .. } = &s.error else {
        panic!("{}", s.error)
    };
    assert_eq!(failure.checker, checker);
    // The shrunk config, replayed from its TOML, fails the same way.
    let back = SimConfig::from_toml(&s.cfg.to_toml()).expect("round trip");
    let again = Sim::new(back, seed).expect("valid").with_bugs(bugs).run();
    assert!(
        matches!(&again, Err(SimError::Checker { failure: f, .. }) if f.checker == checker),
        "{s}"
    );
    assert!(s.to_string().contains(&format!("--seed {seed}")));
}
