//! The README's demo (the product page's 4 Nov run) runs here end to end, and its printed
//! figures are checked against the run record and the chain, not just its exit status.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use gpuchain_testnet::demo::{self, BUDGET, INTERVAL, PRICE_A, PRICE_B, TOTAL_STEPS, usdc};
use gpuchain_testnet::record::{RECORD_FILE, read_record};
use gpuchain_testnet::{NodeEvent, U256, binary};

/// One demo at a time: each times its failover, and two would share the CPU.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn demo_prints_figures_that_match_the_record_and_the_chain() -> Result<()> {
    let _serial = SERIAL.lock().await;
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
    ensure!(report.conserved, "paid + fees + refunded != budget");

    // What the table says is what the record and the chain say.
    let record = read_record(&dir.join(RECORD_FILE))?;
    // Every event the named node logged, in time order.
    let of = |node: &str| -> Vec<&NodeEvent> {
        record
            .iter()
            .filter(|l| l.node == node)
            .filter_map(|l| l.node_event())
            .collect()
    };
    // Payouts: the client saw every acceptance on chain; sum them per provider, and the fees
    // of every decision (accepts and the reject).
    let mut paid: BTreeMap<String, u64> = BTreeMap::new();
    let mut fees = 0u64;
    for e in of("client") {
        match e {
            NodeEvent::ChainAccepted {
                provider,
                amount,
                fees: f,
                ..
            } => {
                let amount: u64 = amount.parse().context("amount")?;
                *paid.entry(provider.clone()).or_default() += amount;
                fees += f.parse::<u64>().context("fees")?;
            }
            NodeEvent::ChainRejected { fees: f, .. } => fees += f.parse::<u64>().context("fees")?,
            _ => {}
        }
    }
    let addr = |n: &str| -> Result<String> {
        of(n)
            .into_iter()
            .find_map(|e| match e {
                NodeEvent::Started { eth_address, .. } => Some(eth_address.clone()),
                _ => None,
            })
            .with_context(|| format!("{n} has no started event"))
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
    let refund: u64 = of("client")
        .into_iter()
        .find_map(|e| match e {
            NodeEvent::ChainSettled { refund, .. } => Some(refund),
            _ => None,
        })
        .context("chain_settled")?
        .parse()
        .context("refund")?;
    assert_eq!(usdc(U256::from(refund)), report.refunded);
    assert_eq!(usdc(U256::from(fees)), report.fees);
    // 3 accepts by A, P's reject, 5 accepts by B: both verifiers signed each.
    assert_eq!(report.decisions, 9, "{table}");
    assert_eq!(fees, report.decisions * 2 * demo::VERIFIER_FEE);
    assert_eq!(a + b + fees + refund, BUDGET);
    // P's checkpoint was rejected on chain, after both verifiers voted against it.
    let p_addr = addr("P")?;
    ensure!(
        of("client")
            .iter()
            .any(|e| matches!(e, NodeEvent::ChainRejected { provider, .. } if *provider == p_addr)),
        "no rejection of P on chain"
    );
    for v in ["verifier-1", "verifier-2"] {
        ensure!(
            of(v)
                .iter()
                .any(|e| matches!(e, NodeEvent::VotePublished { accept: false, .. })),
            "{v} did not vote against the junk"
        );
    }
    // The detection figure is the client's own provider_lost event.
    let lost = of("client")
        .iter()
        .filter(|e| matches!(e, NodeEvent::ProviderLost { .. }))
        .count();
    ensure!(lost == 1, "expected one loss, saw {lost}");
    // The printed table carries the measured values.
    for needle in [
        format!("{} ms", report.detect_ms),
        format!("{} of {TOTAL_STEPS}", report.steps_lost),
        format!("{} USDC", report.paid_a),
        format!("{} USDC", report.paid_b),
        format!("{} USDC of", report.refunded),
        format!("{} USDC for {} decisions", report.fees, report.decisions),
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

/// `gpuchain testnet demo --job text`: the same story on the bert-lora job (tiny encoder)
/// completes; the junk is refused and unpaid, A and B are paid exactly their accepted steps
/// and the budget is accounted for to the unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_story_runs_on_the_text_job() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-text");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let job = demo::DemoJob::named("text")?;
    let report = demo::run_job(&dir, &binary()?, &job).await?;
    let table = report.table();
    println!("{table}");
    ensure!(table.contains("on the text job"), "{table}");
    ensure!(
        report.steps_lost <= job.interval,
        "lost {}",
        report.steps_lost
    );
    ensure!(report.paid_p == "0.00", "junk was paid {}", report.paid_p);
    let a = report.last_accepted_before_kill;
    ensure!(
        report.paid_a == usdc(U256::from(a * PRICE_A))
            && report.paid_b == usdc(U256::from((job.total_steps - a) * PRICE_B)),
        "A {} for {a} steps, B {}",
        report.paid_a,
        report.paid_b
    );
    ensure!(report.conserved, "paid + fees + refunded != budget");
    ensure!(report.eval_examples == 296, "{}", report.eval_examples);
    Ok(())
}
