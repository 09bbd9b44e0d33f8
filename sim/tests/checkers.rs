//! Each checker fires on a deliberately broken escrow or run, and the failure names its seed.

use gpuchain_sim::checker::{
    ENDS_BY_DEADLINE, FUNDS_CONSERVED, LIVENESS, NO_DOUBLE_PAY, NO_JUNK_PAID,
};
use gpuchain_sim::config::USDC;
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

/// `nov4` with every provider at the maximum price and a budget of exactly what the job can
/// cost: the budget has no slack, so a reject pays no fees.
fn nov4_without_slack() -> SimConfig {
    let mut cfg = presets::nov4();
    cfg.job.max_price_per_step = 3_000;
    for p in &mut cfg.named_providers {
        p.price_per_step = 3_000;
    }
    // 400 steps at 0.003 and 2 seats × 8 checkpoints × 0.001.
    cfg.job.budget = 1_200_000 + 16 * cfg.job.verifier_fee;
    cfg
}

#[test]
fn reject_fees_taken_from_a_budget_without_slack_are_caught() {
    let cfg = nov4_without_slack();
    let out = gpuchain_sim::run(cfg.clone(), 1).unwrap_or_else(|e| panic!("{e}"));
    let r = &out.report;
    assert_eq!(
        r.cheats.get("junk").map(|c| c.caught),
        Some(1),
        "{}",
        r.to_text()
    );
    // The accepts' fees only: the reject found no slack and took none.
    assert_eq!(r.fees, 16 * cfg.job.verifier_fee, "{}", r.to_text());
    assert_eq!(r.paid + r.fees + r.refunded, cfg.job.budget);
    let bugs = Bugs {
        reject_fees_without_slack: true,
        ..Bugs::default()
    };
    let (_, checker, text) = first_failure(&cfg, bugs, 1..2).expect("fires");
    assert_eq!(checker, FUNDS_CONSERVED, "{text}");
    assert!(text.contains("the rest of the job can cost"), "{text}");
}

/// The one client withholds pay: every accept it owes becomes a release, and only the
/// provider's late claim inside the decision window gets the interval paid.
fn nov4_withholding() -> SimConfig {
    let mut cfg = presets::nov4();
    cfg.hostile.withhold_pay_clients = 1.0;
    cfg
}

#[test]
fn withheld_pay_is_claimed_inside_the_window_and_a_late_claim_after_it_is_caught() {
    // The window (120 s) holds: every accept is a late claim, and every accepted step is
    // paid at its provider's price. Each interval costs a release and a reassignment, so A
    // reaches only step 100 before its kill at 20 s; B trains the other 300.
    let r = gpuchain_sim::run(nov4_withholding(), 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .report;
    assert_eq!(r.jobs_completed, 1, "{}", r.to_text());
    assert_eq!(r.steps_accepted, 400);
    assert_eq!(
        r.paid_by_provider.get("A"),
        Some(&(100 * 1_000)),
        "{}",
        r.to_text()
    );
    assert_eq!(r.paid_by_provider.get("B"), Some(&(300 * 3_000)));
    assert_eq!(r.paid + r.fees + r.refunded, 5 * USDC);
    assert_eq!(r.observed.late_accepts, 8, "{}", r.to_text());
    assert_eq!(r.observed.honest_stake_lost, 0);
    // No window: the claims revert (`WindowClosed`) and nothing is paid ...
    let mut shut = nov4_withholding();
    shut.chain.decision_window_s = 0;
    let r = gpuchain_sim::run(shut.clone(), 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .report;
    assert_eq!(r.paid, 0, "{}", r.to_text());
    assert!(
        r.tx_failed.keys().any(|k| k.contains("WindowClosed")),
        "{}",
        r.to_text()
    );
    // ... and an escrow that lands them anyway is caught paying a closed epoch.
    let bugs = Bugs {
        late_accept_after_window: true,
        ..Bugs::default()
    };
    let (_, checker, text) = first_failure(&shut, bugs, 1..2).expect("fires");
    assert_eq!(checker, NO_JUNK_PAID, "{text}");
    assert!(text.contains("decision window closed"), "{text}");
}

/// The draw and fee checkers have no deliberate escrow bug to fire on (the escrow model
/// draws and credits by the rules), so they are shown on forged events: a job created and
/// drawn for real, then a committee the rules did not draw and a fee to a non-member.
#[test]
fn a_forged_committee_and_a_fee_to_a_non_member_are_caught() {
    use gpuchain_protocol::chain::{ChainEvent, ChainTx};
    use gpuchain_protocol::{B256, U256};
    use gpuchain_sim::checker::{COMMITTEE_DRAWN, FEES_TO_SIGNERS};
    use gpuchain_sim::escrow::{self, Block, Call, Event};
    use gpuchain_sim::world::World;

    let seed = 3;
    let cfg = presets::nov4();
    let mut w = World::new(cfg.clone(), seed);
    let mut checker = std::mem::take(&mut w.checker);
    let client = w.address_of(0);
    let mut events = Vec::new();
    for number in [1u64, 2] {
        w.escrow
            .record_block_hash(number, escrow::block_hash(seed, number));
        let call = if number == 1 {
            Call::Tx(ChainTx::CreateJob {
                token: escrow::TOKEN,
                budget: U256::from(cfg.job.budget),
                max_price_per_step: U256::from(cfg.job.max_price_per_step),
                total_steps: cfg.job.total_steps,
                checkpoint_interval: cfg.job.checkpoint_interval,
                spec_hash: B256::repeat_byte(9),
                committee_size: 2,
                quorum: 2,
                verifier_fee: U256::from(cfg.job.verifier_fee),
                deadline: 3_600,
                grace: 60,
            })
        } else {
            Call::Tx(ChainTx::DrawCommittee {
                job_id: U256::from(1),
            })
        };
        let block = Block {
            number,
            time: number,
        };
        events.extend(w.escrow.apply(&call, client, block).expect("lands"));
    }
    for e in &events {
        checker
            .on_escrow_event(&w, e)
            .expect("the real draw passes");
    }
    let Some(ChainEvent::CommitteeDrawn {
        committee, terms, ..
    }) = events.last().and_then(|e| e.job().cloned())
    else {
        panic!("{events:?}")
    };
    // The members in another order: not what the seed block's hash draws. Checked by a
    // checker that has seen everything but the real draw.
    let mut swapped = committee.clone();
    swapped.reverse();
    let mut forged = checker_copy(&w, &events[..events.len() - 1]);
    let f = forged
        .on_escrow_event(
            &w,
            &Event::Job(ChainEvent::CommitteeDrawn {
                job_id: U256::from(1),
                committee: swapped,
                terms,
            }),
        )
        .expect_err("a committee the rules did not draw");
    assert_eq!(f.checker, COMMITTEE_DRAWN, "{f}");
    // Fees credited to the client, who sits on no committee and signed nothing.
    let f = checker
        .on_escrow_event(
            &w,
            &Event::FeesCredited {
                job_id: U256::from(1),
                verifier: client,
                amount: U256::from(cfg.job.verifier_fee),
            },
        )
        .expect_err("fees to a non-member");
    assert_eq!(f.checker, FEES_TO_SIGNERS, "{f}");
}

/// A checker that has seen the genesis block and `events`.
fn checker_copy(
    w: &gpuchain_sim::world::World,
    events: &[gpuchain_sim::escrow::Event],
) -> gpuchain_sim::checker::Checker {
    let mut fresh = gpuchain_sim::world::World::new(w.cfg.clone(), w.seed);
    let mut c = std::mem::take(&mut fresh.checker);
    for e in events {
        c.on_escrow_event(w, e).expect("replays");
    }
    c
}
