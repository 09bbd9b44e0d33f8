//! Scenario files: every shipped one is valid, a broken one is refused with the field named,
//! and one is played end to end (a verifier going offline mid-job).

use std::path::{Path, PathBuf};

use anyhow::{Result, ensure};
use gpuchain_e2e::{play_scenario, scenarios_dir, value_of as of};
use gpuchain_testnet::record::{HARNESS, HarnessEvent, RECORD_FILE, RecordLine, read_record};
use gpuchain_testnet::scenario::{Action, Scenario, ScenarioReport};

#[test]
fn shipped_scenarios_are_valid() -> Result<()> {
    let mut n = 0;
    for entry in std::fs::read_dir(scenarios_dir())? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let s = Scenario::load(&path)?;
            ensure!(
                path.parent().is_some_and(|d| d.join(&s.job.file).is_file()),
                "{}: job file missing",
                path.display()
            );
            n += 1;
        }
    }
    ensure!(n >= 4, "only {n} scenarios");
    Ok(())
}

#[test]
fn broken_scenarios_name_the_field() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("gpuchain-bad-scenarios-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let base = std::fs::read_to_string(scenarios_dir().join("verifier-offline.toml"))?;
    let cases = [
        (
            base.replace("node = \"v3\"", "node = \"v9\""),
            "fault[0].node",
        ),
        (base.replace("quorum = 2", "quorum = 4"), "job.quorum"),
        (
            base.replace("role = \"provider\"", "role = \"miner\""),
            "role",
        ),
        (
            base.replace("action = \"stop\"", "action = \"explode\""),
            "explode",
        ),
        (
            base.replace("at_step = 15", "at_step = 15\nat_secs = 3"),
            "fault[0]",
        ),
        (
            base.replace("price = \"0.001\"", "price = \"0.001\"\nfault = \"lies\""),
            "fault",
        ),
        (format!("{base}\ncolour = \"red\"\n"), "colour"),
        // The chain's actions take no node, the nodes' actions need one.
        (
            base.replace("action = \"stop\"", "action = \"rpc-down\""),
            "fault[0].node",
        ),
        (base.replace("node = \"v3\"\n", ""), "fault[0].node"),
        // An announce trigger on a verifier must say whose announces it waits for.
        (
            base.replace("at_step = 15", "at_announce = 10"),
            "fault[0].watch",
        ),
        (
            base.replace("node = \"v3\"", "node = \"v3\"\nwatch = \"p1\""),
            "fault[0].watch",
        ),
        (
            base.replace("at_step = 15", "at_announce = 10\nwatch = \"v1\""),
            "fault[0].watch",
        ),
        // A partition names whom it cuts off; nothing else does.
        (
            base.replace("action = \"stop\"", "action = \"partition\""),
            "fault[0].from",
        ),
        (
            base.replace("node = \"v3\"", "node = \"v3\"\nfrom = [\"v1\"]"),
            "fault[0].from",
        ),
        (
            base.replace(
                "action = \"stop\"",
                "action = \"partition\"\nfrom = [\"v3\"]",
            ),
            "fault[0].from",
        ),
        (
            base.replace("at_step = 15", "at_exit = false"),
            "fault[0].at_exit",
        ),
        (
            base.replace("at_step = 15", "at_step = 15\nat_exit = true"),
            "fault[0]",
        ),
        // Memory is a provider's, and at least 1 MiB.
        (
            base.replace("role = \"client\"", "role = \"client\"\nmemory_mb = 4"),
            "memory_mb is for providers only",
        ),
        (
            base.replace("price = \"0.001\"", "price = \"0.001\"\nmemory_mb = 0"),
            "memory_mb: must be at least 1",
        ),
        // `after` names an earlier fault.
        (
            base.replace("at_step = 15", "at_secs = 3\nafter = 0"),
            "fault[0].after",
        ),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text)?;
        let err = Scenario::load(&path).expect_err("broken scenario accepted");
        let msg = format!("{err:#}");
        ensure!(
            msg.contains(field),
            "case {i}: {msg:?} does not name {field}"
        );
        ensure!(
            msg.contains(&path.display().to_string()),
            "case {i}: no file name in {msg}"
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Plays the shipped scenario `name` in a fresh run folder; its report and that folder.
async fn play(name: &str) -> Result<(ScenarioReport, PathBuf)> {
    play_scenario(env!("CARGO_TARGET_TMPDIR"), "scenario", name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verifier_going_offline_does_not_stop_a_quorum_of_two() -> Result<()> {
    let (report, dir) = play("verifier-offline").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(report.last_accepted_step == 40);
    ensure!(report.faults_fired.len() == 1, "{:?}", report.faults_fired);
    let paid = report
        .withdrawable
        .iter()
        .find(|(n, _)| n == "p1")
        .map(|(_, w)| w.as_str());
    ensure!(paid == Some("0.04"), "p1 earned {paid:?}");
    // The fault is in the record as the harness's event, the one the report names.
    let record = read_record(&dir.join(RECORD_FILE))?;
    let faults: Vec<&RecordLine> = record
        .iter()
        .filter(|l| l.harness_event().is_some())
        .collect();
    ensure!(
        faults.len() == 1
            && faults[0].node == HARNESS
            && faults[0].timestamp_us == report.faults_fired[0].timestamp_us
            && matches!(
                faults[0].harness_event(),
                Some(HarnessEvent::ScenarioFault { action: Action::Stop, target_node, at_step, .. })
                    if target_node == "v3" && *at_step >= 15
            ),
        "the record's faults: {faults:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_byzantine_verifier_is_outvoted_and_nothing_is_slashed() -> Result<()> {
    let (report, dir) = play("byzantine-verifier").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(
        report.last_accepted_step == 40 && report.epochs == 1,
        "{}",
        report.text()
    );
    // Every step paid at p1's price, its stake whole, nothing burned.
    ensure!(
        of(&report.withdrawable, "p1").as_deref() == Some("0.04"),
        "{}",
        report.text()
    );
    ensure!(
        of(&report.stakes, "p1").as_deref() == Some("100.00"),
        "{}",
        report.text()
    );
    ensure!(report.burned == "0.00", "{}", report.text());
    // The two that voted with the outcome earned a fee for each of the 4 decisions; the
    // byzantine one earned nothing, and the budget is accounted for to the unit.
    for (v, fee) in [("v1", "0.004"), ("v2", "0.004"), ("v3", "0.00")] {
        ensure!(
            of(&report.fees, v).as_deref() == Some(fee),
            "{v}: {}",
            report.text()
        );
    }
    ensure!(report.conserved, "{}", report.text());
    // The byzantine verifier did vote against the honest work.
    let record = read_record(&dir.join(RECORD_FILE))?;
    ensure!(
        record.iter().any(|l| l.node == "v3"
            && matches!(
                l.node_event(),
                Some(gpuchain_testnet::NodeEvent::VotePublished { accept: false, .. })
            )),
        "v3 never voted reject"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_client_can_neither_slash_nor_withhold_pay() -> Result<()> {
    let (report, dir) = play("hostile-client").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(report.last_accepted_step == 40, "{}", report.text());
    // Every one of the 40 steps paid at p1's price, exactly once; its stake whole.
    ensure!(
        of(&report.paid, "p1").as_deref() == Some("0.04")
            && of(&report.withdrawable, "p1").as_deref() == Some("0.04"),
        "{}",
        report.text()
    );
    ensure!(
        of(&report.stakes, "p1").as_deref() == Some("100.00"),
        "{}",
        report.text()
    );
    ensure!(report.burned == "0.00", "{}", report.text());
    ensure!(report.conserved, "{}", report.text());
    // The sybil, if drawn, earned nothing: it never signed with an outcome.
    ensure!(
        of(&report.fees, "sybil").as_deref() == Some("0.00"),
        "{}",
        report.text()
    );
    // The client did end epochs to dodge the accepts, and p1 landed them itself, late.
    let record = read_record(&dir.join(RECORD_FILE))?;
    let late_claims = record
        .iter()
        .filter(|l| {
            l.node == "p1"
                && matches!(
                    l.node_event(),
                    Some(gpuchain_testnet::NodeEvent::ClaimSubmitted { late: true, .. })
                )
        })
        .count();
    ensure!(
        late_claims >= 1 && report.epochs >= 2,
        "late claims {late_claims}, epochs {}: {}",
        report.epochs,
        report.text()
    );
    Ok(())
}

/// A base-unit amount from a report's USDC figure (`"0.03"` → 30,000).
fn units(usdc: &str) -> Result<u64> {
    let (whole, frac) = usdc.split_once('.').unwrap_or((usdc, ""));
    ensure!(frac.len() <= 6, "{usdc} has more than 6 decimals");
    Ok(whole.parse::<u64>()? * 1_000_000 + format!("{frac:0<6}").parse::<u64>()?)
}

/// The start step of epoch 2, from the client's `chain_assigned` in the run record.
fn epoch_2_start(dir: &Path) -> Result<u64> {
    read_record(&dir.join(RECORD_FILE))?
        .iter()
        .filter(|l| l.node == "client")
        .find_map(|l| match l.node_event() {
            Some(gpuchain_testnet::NodeEvent::ChainAssigned {
                epoch: 2,
                start_step,
                ..
            }) => Some(*start_step),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no epoch 2 in the record"))
}

/// The text job end to end: a bert-lora job (tiny encoder) whose provider is killed
/// mid-interval completes on the replacement, which resumed from the last accepted
/// checkpoint, and every accepted step is paid once, to the unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_text_job_survives_a_killed_provider_and_pays_each_accepted_step_once() -> Result<()> {
    let (report, dir) = play("text-failover").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(report.last_accepted_step == 80, "{}", report.text());
    ensure!(report.faults_fired.len() == 1, "{}", report.text());
    // Killed after step 55 and once step 20 was accepted (verifying a checkpoint takes about
    // as long as training twenty steps, longer on a loaded machine: a spot check replays from
    // the nearest anchor, up to seven steps a sample at this interval): p2 resumed from the
    // last accepted checkpoint, not from scratch.
    let start = epoch_2_start(&dir)?;
    ensure!(
        start % 20 == 0 && (20..=60).contains(&start),
        "epoch 2 started at {start}"
    );
    // p1 is paid for the steps accepted before it died, p2 for the rest: nothing twice.
    for (node, steps, price) in [("p1", start, 1_000), ("p2", 80 - start, 2_000)] {
        let paid = of(&report.paid, node).unwrap_or_else(|| "0".into());
        ensure!(
            units(&paid)? == steps * price
                && of(&report.withdrawable, node).as_deref() == Some(paid.as_str()),
            "{node} paid {paid} for {steps} steps: {}",
            report.text()
        );
    }
    // Dying is not cheating: no stake burned.
    ensure!(report.burned == "0.00", "{}", report.text());
    ensure!(report.conserved, "{}", report.text());
    Ok(())
}

/// Text checkpoints that are not the work are refused: junk (fresh weights) and stale (the
/// interval's start resubmitted), each slashed and unpaid; the honest provider finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn junk_and_stale_text_checkpoints_are_refused_and_slashed() -> Result<()> {
    let (report, dir) = play("text-cheats").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(report.last_accepted_step == 80, "{}", report.text());
    ensure!(report.epochs >= 3, "{}", report.text());
    for cheat in ["p1", "p2"] {
        let paid = of(&report.paid, cheat).unwrap_or_else(|| "0".into());
        ensure!(units(&paid)? == 0, "{cheat} was paid: {}", report.text());
    }
    ensure!(
        units(&of(&report.paid, "p3").unwrap_or_default())? == 80 * 3_000,
        "{}",
        report.text()
    );
    // Each cheat's whole bonded stake (100) was reserved for its epoch and burned.
    ensure!(report.burned == "200.00", "{}", report.text());
    for cheat in ["p1", "p2"] {
        ensure!(
            of(&report.stakes, cheat).as_deref() == Some("0.00"),
            "{cheat}: {}",
            report.text()
        );
    }
    ensure!(report.conserved, "{}", report.text());
    // Each verifier voted against epochs 1 (junk) and 2 (stale).
    let record = read_record(&dir.join(RECORD_FILE))?;
    for v in ["v1", "v2"] {
        for epoch in [1, 2] {
            ensure!(
                record.iter().any(|l| l.node == v
                    && matches!(
                        l.node_event(),
                        Some(gpuchain_testnet::NodeEvent::VotePublished { accept: false, epoch: e, .. })
                            if *e == epoch
                    )),
                "{v} never voted against epoch {epoch}"
            );
        }
    }
    Ok(())
}

/// Providers of different sizes: `a` (16 MiB) trains the batch of 32 at once and is killed;
/// `b`, with a quarter of the memory, resumes a's accepted checkpoint with 4 micro-batches
/// of 8, and both verifiers accept its checkpoints after replaying its steps with the
/// micro-batch they record (exact replays: a different split would not match). The job
/// completes and every step is paid once, at the price of whoever trained it. `tiny`, the
/// cheapest, offers too little memory for one example beside the model and never bids.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_smaller_replacement_trains_with_its_own_plan_and_is_paid_exactly() -> Result<()> {
    use gpuchain_testnet::NodeEvent;
    let (report, dir) = play("heterogeneous").await?;
    ensure!(report.outcome == "completed", "{}", report.text());
    ensure!(report.last_accepted_step == 40, "{}", report.text());
    ensure!(report.faults_fired.len() == 1, "{}", report.text());
    let record = read_record(&dir.join(RECORD_FILE))?;
    let events = |node: &'static str| {
        record
            .iter()
            .filter(move |l| l.node == node)
            .filter_map(|l| l.node_event())
    };
    // (epoch, micro-batch, accumulation) of each epoch a provider trained.
    let plans = |node| -> Vec<(u64, u64, u64)> {
        events(node)
            .filter_map(|e| match e {
                NodeEvent::TrainingPlan {
                    epoch,
                    effective_batch: 32,
                    micro_batch,
                    accumulation,
                    ..
                } => Some((*epoch, *micro_batch, *accumulation)),
                _ => None,
            })
            .collect()
    };
    let (a, b) = (plans("a"), plans("b"));
    println!("plans (epoch, micro-batch, accumulation): a {a:?}, b {b:?}");
    ensure!(a == [(1, 32, 1)], "a's plans: {a:?}");
    ensure!(
        !b.is_empty() && b.iter().all(|(_, m, acc)| (*m, *acc) == (8, 4)),
        "b's plans: {b:?}"
    );
    // Every checkpoint b announced was spot-checked and accepted by both verifiers.
    let b_epochs: Vec<u64> = b.iter().map(|p| p.0).collect();
    let b_steps: Vec<u64> = events("b")
        .filter_map(|e| match e {
            NodeEvent::CheckpointAnnounced { epoch, step, .. } if b_epochs.contains(epoch) => {
                Some(*step)
            }
            _ => None,
        })
        .collect();
    ensure!(b_steps.contains(&40), "b announced {b_steps:?}");
    for v in ["v1", "v2"] {
        for s in &b_steps {
            ensure!(
                events(v).any(
                    |e| matches!(e, NodeEvent::SpotCheck { step, pass: true, .. } if step == s)
                ),
                "{v} has no passing spot check of b's step {s}"
            );
            ensure!(
                events(v).any(
                    |e| matches!(e, NodeEvent::VotePublished { step, epoch, accept: true, .. }
                    if step == s && b_epochs.contains(epoch))
                ),
                "{v} did not accept b's checkpoint at step {s}"
            );
        }
        ensure!(
            !events(v).any(|e| matches!(e, NodeEvent::VotePublished { accept: false, .. })),
            "{v} voted against honest work"
        );
    }
    // Each of the 40 steps paid once: a's at 0.001, b's at 0.002, to the unit.
    let paid = |n| units(&of(&report.paid, n).unwrap_or_else(|| "0".into()));
    let (a_steps, b_steps_paid) = (paid("a")? / 1_000, paid("b")? / 2_000);
    ensure!(
        paid("a")? % 1_000 == 0
            && paid("b")? % 2_000 == 0
            && a_steps % 10 == 0
            && a_steps >= 10
            && b_steps_paid >= 10
            && a_steps + b_steps_paid == 40,
        "a paid for {a_steps} steps, b for {b_steps_paid}: {}",
        report.text()
    );
    for n in ["a", "b"] {
        ensure!(
            of(&report.withdrawable, n) == of(&report.paid, n),
            "{n}: {}",
            report.text()
        );
    }
    ensure!(
        report.burned == "0.00" && report.conserved,
        "{}",
        report.text()
    );
    // tiny never bid, and said why, with the figures.
    ensure!(
        !events("tiny").any(|e| matches!(e, NodeEvent::BidPublished { .. })),
        "tiny bid"
    );
    ensure!(
        events("tiny").any(|e| matches!(e, NodeEvent::BidRefused { rule, detail, .. }
            if rule == "memory" && detail.contains("1.00 MiB cannot train"))),
        "tiny did not say why it does not bid"
    );
    ensure!(paid("tiny")? == 0, "{}", report.text());
    Ok(())
}
