//! The README's demo (the product page's 4 Nov run) runs here end to end, and its printed
//! figures are checked against the run record and the chain, not just its exit status.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use gpuchain_testnet::demo::{self, BUDGET, INTERVAL, PRICE_A, PRICE_B, TOTAL_STEPS, usdc};
use gpuchain_testnet::{U256, binary, field};
use serde_json::Value;

fn record(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("bad record line {l}")))
        .collect()
}

fn num(e: &Value, key: &str) -> Option<u64> {
    field(e, key).and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
}

fn text<'a>(e: &'a Value, key: &str) -> Option<&'a str> {
    field(e, key).and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demo_prints_figures_that_match_the_record_and_the_chain() -> Result<()> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let report = demo::run(&dir, &binary()?).await?;
    let table = report.table();
    println!("{table}");

    // The bars.
    ensure!(
        report.detect_ms < 1_000,
        "detection took {} ms",
        report.detect_ms
    );
    ensure!(
        report.steps_lost <= INTERVAL,
        "lost {} steps",
        report.steps_lost
    );
    ensure!(report.paid_p == "0.00", "junk was paid {}", report.paid_p);
    ensure!(report.conserved, "paid + refunded != budget");

    // What the table says is what the record and the chain say.
    let events = record(&dir.join("record.jsonl"))?;
    let of = |node: &str, name: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| text(e, "node") == Some(node) && text(e, "event") == Some(name))
            .collect()
    };
    // Payouts: the client saw every acceptance on chain; sum them per provider.
    let mut paid: BTreeMap<String, u64> = BTreeMap::new();
    for e in of("client", "chain_accepted") {
        let who = text(e, "provider").context("provider")?.to_string();
        *paid.entry(who).or_default() += num(e, "amount").context("amount")?;
    }
    let addr = |n: &str| -> Result<String> {
        let started = events
            .iter()
            .find(|e| text(e, "node") == Some(n) && text(e, "event") == Some("started"))
            .context("started event")?;
        Ok(text(started, "eth_address")
            .context("eth_address")?
            .to_string())
    };
    let a = paid.get(&addr("A")?).copied().unwrap_or(0);
    let b = paid.get(&addr("B")?).copied().unwrap_or(0);
    let p = paid.get(&addr("P")?).copied().unwrap_or(0);
    assert_eq!(usdc(U256::from(a)), report.paid_a);
    assert_eq!(usdc(U256::from(b)), report.paid_b);
    assert_eq!(p, 0, "P was paid in the record");
    // Per step: A for what was accepted before the kill, B for the rest, at their prices.
    assert_eq!(a, report.last_accepted_before_kill * PRICE_A);
    assert_eq!(
        b,
        (TOTAL_STEPS - report.last_accepted_before_kill) * PRICE_B
    );
    let completed = of("client", "chain_completed");
    let refund = completed
        .first()
        .and_then(|e| num(e, "refund"))
        .context("chain_completed with a refund")?;
    assert_eq!(usdc(U256::from(refund)), report.refunded);
    assert_eq!(a + b + refund, BUDGET);
    // P's checkpoint was rejected on chain, after both verifiers voted against it.
    let rejected = of("client", "chain_rejected");
    let p_addr = addr("P")?;
    ensure!(
        rejected
            .iter()
            .any(|e| text(e, "provider") == Some(p_addr.as_str())),
        "no rejection of P on chain"
    );
    for v in ["verifier-1", "verifier-2"] {
        ensure!(
            of(v, "vote_published")
                .iter()
                .any(|e| field(e, "accept").and_then(Value::as_bool) == Some(false)),
            "{v} did not vote against the junk"
        );
    }
    // The detection figure is the client's own provider_lost event.
    let lost = of("client", "provider_lost");
    ensure!(lost.len() == 1, "expected one loss, saw {}", lost.len());
    // The printed table carries the measured values.
    for needle in [
        format!("{} ms", report.detect_ms),
        format!("{} of {TOTAL_STEPS}", report.steps_lost),
        format!("{} USDC", report.paid_a),
        format!("{} USDC", report.paid_b),
        format!("{} USDC of", report.refunded),
    ] {
        ensure!(table.contains(&needle), "table lacks {needle:?}:\n{table}");
    }
    let final_acc = report.final_accuracy.context("final accuracy")?;
    ensure!(final_acc > 0.8, "final accuracy {final_acc}");
    let junk = report.junk_accuracy.context("junk accuracy")?;
    let prev = report.previous_accuracy.context("previous accuracy")?;
    ensure!(junk < prev, "junk {junk} not worse than previous {prev}");
    Ok(())
}
