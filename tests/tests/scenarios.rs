//! Scenario files: every shipped one is valid, a broken one is refused with the field named,
//! and one is played end to end (a verifier going offline mid-job).

use std::path::{Path, PathBuf};

use anyhow::{Result, ensure};
use gpuchain_testnet::binary;
use gpuchain_testnet::record::{HARNESS, HarnessEvent, RECORD_FILE, RecordLine, read_record};
use gpuchain_testnet::scenario::{self, Action, Scenario, ScenarioReport};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testnet/scenarios")
}

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

fn of(list: &[(String, String)], name: &str) -> Option<String> {
    list.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// Plays the shipped scenario `name` in a fresh run folder; its report and that folder.
async fn play(name: &str) -> Result<(ScenarioReport, PathBuf)> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("scenario-{name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let report = scenario::run(
        &scenarios_dir().join(format!("{name}.toml")),
        &dir,
        &binary()?,
    )
    .await?;
    println!("{}", report.text());
    Ok((report, dir))
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
