//! One job end to end across separate `gpuchain` processes on a real anvil with the real
//! contracts: a client, two verifiers and providers as their own processes, a small
//! fashion-cnn job trained for real. Balances are read from the chain and asserted to the
//! unit. The scenarios run one at a time (they share the CPU, and timing is part of what
//! they observe).
//! Long because the four scenarios share one harness of chain reads and waits, kept here.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gpuchain_protocol::chain::ChainTx;
use gpuchain_protocol::eip712::VoteFields;
use gpuchain_protocol::messages::{CheckpointAnnounce, state_root};
use gpuchain_protocol::topics::job_topic;
use gpuchain_protocol::{Hash, Message, Sig65, SigningKey};
use gpuchain_testnet::{
    Address, ChainClient, ChainOpts, JobSubmission, Logged, NodeEvent, Testnet, U256, USDC, after,
    binary, event_is, poll_until,
};
use prometheus_parse::{LineInfo, Scrape, Value as MetricValue};
use serde_json::{Value, json};
use tokio::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::const_new(());

const STEPS: u64 = 40;
const INTERVAL: u64 = 10;
const BUDGET: u64 = USDC; // 1 USDC
const STAKE: u64 = 100 * USDC;
/// Each committee member's fee per decision it signs (0.001 USDC).
const VERIFIER_FEE: u64 = 1_000;
/// Fees of `decisions` decisions, both members of the committee of 2 signing each.
const fn fees(decisions: u64) -> U256 {
    U256::from_limbs([decisions * 2 * VERIFIER_FEE, 0, 0, 0])
}
const JOB_TIMEOUT: Duration = Duration::from_secs(420);

const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 40
checkpoint_interval = 10
eval_examples = 500

[quality]
min_accuracy = 0.2
after_step = 30
max_accuracy_drop = 0.1
"#;

struct Provider {
    name: &'static str,
    price: u64,
    fault: Option<&'static str>,
    /// More flags for its node.
    args: &'static [&'static str],
}

const fn p(name: &'static str, price: u64, fault: Option<&'static str>) -> Provider {
    Provider {
        name,
        price,
        fault,
        args: &[],
    }
}

struct Setup {
    net: Testnet,
    job_file: PathBuf,
}

fn run_dir(tag: &str) -> Result<PathBuf> {
    gpuchain_e2e::run_dir(env!("CARGO_TARGET_TMPDIR"), tag)
}

async fn setup(tag: &str, providers: &[Provider]) -> Result<Setup> {
    let dir = run_dir(tag)?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for name in ["v1", "v2"] {
        let spec = net.role_spec(name, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    for pr in providers {
        let mut spec = net
            .role_spec(pr.name, "provider")?
            .arg("--price-per-step")
            .arg(amount(pr.price));
        if let Some(f) = pr.fault {
            spec = spec.arg("--fault").arg(f);
        }
        for a in pr.args {
            spec = spec.arg(*a);
        }
        net.spawn(spec).await?;
        net.stake(pr.name, U256::from(STAKE)).await?;
    }
    net.wait_mesh("client").await?;
    let job_file = dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    Ok(Setup { net, job_file })
}

fn amount(base_units: u64) -> String {
    format!("{}.{:06}", base_units / USDC, base_units % USDC)
}

/// `gpuchain job submit` through the client node, as a user would; returns the job id.
async fn submit(s: &Setup, max_price: u64) -> Result<U256> {
    s.net
        .submit_job(
            "client",
            &JobSubmission {
                file: s.job_file.clone(),
                budget: amount(BUDGET),
                max_price: amount(max_price),
                committee: 2,
                quorum: 2,
                verifier_fee: amount(VERIFIER_FEE),
                deadline_secs: 3600,
                grace_secs: 600,
            },
        )
        .await
}

async fn job(chain: &ChainClient, id: U256) -> Result<gpuchain_contracts::JobEscrow::JobView> {
    Ok(chain.job(id).await?)
}

async fn wait_completed(s: &Setup, id: U256) -> Result<()> {
    let chain = s.net.chain()?.deployer().clone();
    // Completed, and settled by the client node: its unspent budget credited back.
    poll_until("the job to complete and settle", JOB_TIMEOUT, async || {
        let v = job(&chain, id).await?;
        ensure!(v.status != 4, "the job expired");
        Ok(v.status == 3 && v.settled)
    })
    .await
    .with_context(|| logs_tail(s))
}

fn logs_tail(s: &Setup) -> String {
    s.net
        .nodes()
        .iter()
        .map(|n| format!("--- {}\n{}", n.name(), n.log_tail(15)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The (epoch, step, accept) of every vote the verifier published.
fn votes(s: &Setup, verifier: &str) -> Result<Vec<(u64, u64, bool)>> {
    Ok(s.net
        .node(verifier)?
        .events()?
        .into_iter()
        .filter_map(|e| match e.event {
            NodeEvent::VotePublished {
                epoch,
                step,
                accept,
                ..
            } => Some((epoch, step, accept)),
            _ => None,
        })
        .collect())
}

/// The (start step, provider) of the node's `chain_assigned` for epoch 2.
fn epoch_2_assigned(e: &Logged) -> Option<(u64, String)> {
    match &e.event {
        NodeEvent::ChainAssigned {
            epoch: 2,
            start_step,
            provider,
            ..
        } => Some((*start_step, provider.clone())),
        _ => None,
    }
}

/// Every token the escrow holds is accounted for: provider and verifier stakes plus what it
/// owes (withdrawable: pay, fees, refunds) plus burned slashes (the jobs are settled, so no
/// budget is left in them).
async fn assert_conserved(s: &Setup, accounts: &[Address], providers: &[&str]) -> Result<()> {
    let chain = s.net.chain()?;
    let mut owed = chain.deployer().burned().await?;
    for a in accounts {
        owed += chain.withdrawable(*a).await?;
    }
    for p in providers {
        let st = chain.stake_of(s.net.node(p)?.eth_address()).await?;
        owed += st.bonded + st.unbonding;
    }
    for v in ["v1", "v2"] {
        let st = chain
            .deployer()
            .verifier_stake_of(s.net.node(v)?.eth_address())
            .await?;
        owed += st.bonded + st.unbonding;
    }
    let held = chain.escrow_usdc_balance().await?;
    ensure!(
        held == owed,
        "escrow holds {held} but owes {owed} (stakes + withdrawable + burned)"
    );
    Ok(())
}

/// Each verifier was credited exactly its fees: one per decision, both signing each.
async fn assert_fees(s: &Setup, decisions: u64) -> Result<()> {
    let chain = s.net.chain()?;
    for v in ["v1", "v2"] {
        let got = chain.withdrawable(addr(s, v)?).await?;
        ensure!(
            got == U256::from(decisions * VERIFIER_FEE),
            "{v} was credited {got}, not the fees of {decisions} decisions"
        );
    }
    Ok(())
}

/// `gpuchain ARGS…` with node `name`'s key, on the testnet's chain, as its operator would run
/// it; its standard output, or an error with its standard error.
async fn as_node(s: &Setup, name: &str, args: &[&str]) -> Result<String> {
    let chain = s.net.chain()?;
    let node = s.net.node(name)?;
    let out = tokio::process::Command::new(s.net.binary())
        .args(args)
        .args(["--rpc-url", chain.rpc_url()])
        .args(["--escrow", &chain.escrow().to_string()])
        .arg("--data-dir")
        .arg(node.data_dir())
        .arg("--keystore-password-file")
        .arg(node.password_file())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "gpuchain {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `gpuchain job status ID` (text, then `--json`), as a user would run it.
async fn job_status(s: &Setup, id: U256) -> Result<(String, Value)> {
    let chain = s.net.chain()?;
    let mut out = Vec::new();
    for json in [false, true] {
        let mut cmd = tokio::process::Command::new(s.net.binary());
        cmd.args([
            "job",
            "status",
            &id.to_string(),
            "--rpc-url",
            chain.rpc_url(),
        ])
        .args(["--escrow", &chain.escrow().to_string()])
        .env_remove("GPUCHAIN_DATA_DIR");
        if json {
            cmd.arg("--json");
        }
        let o = cmd.output().await?;
        ensure!(
            o.status.success(),
            "job status failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out.push(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let v: Value = serde_json::from_str(&out[1])?;
    Ok((out.swap_remove(0), v))
}

/// Base units as `job status` prints them (no trailing zeros).
fn tokens(v: U256) -> String {
    let s = format!("{v:0>7}");
    let (int, frac) = s.split_at(s.len() - 6);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    }
}

fn addr(s: &Setup, name: &str) -> Result<Address> {
    Ok(s.net.node(name)?.eth_address())
}

/// One scrape of a node's `/metrics` (as a local Prometheus would: no token), checked to be
/// Prometheus text line by line.
async fn scrape(s: &Setup, name: &str) -> Result<Scrape> {
    let node = s.net.node(name)?;
    let text = gpuchain_api::ApiClient::new(node.api_addr(), None)
        .metrics()
        .await?;
    ensure!(text.ends_with("# EOF\n"), "{name}: no EOF marker:\n{text}");
    for line in text.lines() {
        let comment = ["# HELP ", "# TYPE ", "# UNIT ", "# EOF"]
            .iter()
            .any(|p| line.starts_with(p));
        ensure!(
            comment || matches!(LineInfo::parse(line), LineInfo::Sample { .. }),
            "{name}: not Prometheus text: {line:?}"
        );
    }
    Ok(Scrape::parse(text.lines().map(|l| Ok(l.to_string())))?)
}

/// The sum of the counter or gauge samples `name` whose labels include `labels`.
fn metric(sc: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    sc.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .filter_map(|x| match x.value {
            MetricValue::Counter(v) | MetricValue::Gauge(v) | MetricValue::Untyped(v) => Some(v),
            _ => None,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn happy_path_pays_every_step_once_and_refunds_the_rest() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let s = setup("happy", &[p("p1", 1_000, None), p("p2", 2_000, None)]).await?;
    let id = submit(&s, 5_000).await?;
    // Mid-run, the metrics of the provider and the client already show the job moving.
    let mut mid = None;
    poll_until(
        "p1 to train and the client to hear it",
        JOB_TIMEOUT,
        async || {
            let (p1, client) = (scrape(&s, "p1").await?, scrape(&s, "client").await?);
            let moving = metric(&p1, "gpuchain_steps_total", &[]) > 0.0
                && metric(&client, "gpuchain_heartbeats_heard_total", &[]) > 0.0;
            mid = Some((p1, client));
            Ok(moving)
        },
    )
    .await
    .with_context(|| logs_tail(&s))?;
    let (p1_mid, client_mid) = mid.context("scraped")?;
    wait_completed(&s, id).await?;
    let (p1_end, client_end) = (scrape(&s, "p1").await?, scrape(&s, "client").await?);
    assert_metrics_moved(&s, [&p1_mid, &client_mid], [&p1_end, &client_end]).await?;

    let chain = s.net.chain()?;
    let v = job(chain.deployer(), id).await?;
    ensure!(
        v.lastAcceptedStep == STEPS && v.remaining.is_zero(),
        "job left {v:?}"
    );
    // The cheapest bid won and trained every step.
    let p1 = addr(&s, "p1")?;
    let earned = U256::from(STEPS * 1_000);
    assert_eq!(chain.withdrawable(p1).await?, earned);
    assert_eq!(chain.withdrawable(addr(&s, "p2")?).await?, U256::ZERO);
    // Four checkpoints, four decisions, each signed by both members.
    assert_eq!(
        chain.withdrawable(addr(&s, "client")?).await?,
        U256::from(BUDGET) - earned - fees(4)
    );
    assert_fees(&s, 4).await?;
    // Both verifiers accepted every checkpoint.
    for v in ["v1", "v2"] {
        let mut steps: Vec<u64> = votes(&s, v)?
            .into_iter()
            .filter_map(|(_, step, accept)| accept.then_some(step))
            .collect();
        steps.sort_unstable();
        steps.dedup();
        assert_eq!(steps, vec![10, 20, 30, 40], "{v} accepted");
    }
    let accounts: Vec<Address> = ["client", "p1", "p2", "v1", "v2"]
        .iter()
        .map(|n| addr(&s, n))
        .collect::<Result<_>>()?;
    assert_conserved(&s, &accounts, &["p1", "p2"]).await?;

    // `gpuchain job status` shows the chain's figures: p1's pay, the refund, the status.
    let (text, st) = job_status(&s, id).await?;
    println!("{text}");
    assert_eq!(st["status"], "Completed", "{st}");
    assert_eq!(st["budget"], "1", "{st}");
    assert_eq!(
        st["paid"],
        json!({ p1.to_string(): tokens(earned) }),
        "{st}"
    );
    assert_eq!(st["paid_total"], "0.04", "{st}");
    assert_eq!(st["fees_total"], "0.008", "{st}");
    assert_eq!(
        st["verifier_fees"],
        json!({ addr(&s, "v1")?.to_string(): "0.004", addr(&s, "v2")?.to_string(): "0.004" }),
        "{st}"
    );
    let refund = chain.withdrawable(addr(&s, "client")?).await?;
    assert_eq!(st["refunded"], tokens(refund), "{st}");
    assert_eq!(st["refunded"], "0.952", "{st}");
    assert_eq!(st["remaining"], "0", "{st}");
    assert_eq!(st["slashed_stake"], json!({}), "{st}");
    // The committee is the pool's two verifiers, and the chain's record of p1 is clean.
    let mut committee: Vec<String> = serde_json::from_value(st["committee"].clone())?;
    committee.sort();
    let mut want = vec![addr(&s, "v1")?.to_string(), addr(&s, "v2")?.to_string()];
    want.sort();
    assert_eq!(committee, want, "{st}");
    assert_eq!(st["provider_record"]["checkpoints_accepted"], 4, "{st}");
    assert_eq!(st["provider_record"]["epochs_rejected"], 0, "{st}");
    for line in [
        "status  Completed".to_string(),
        format!("paid  {p1}  0.04"),
        "refunded  0.952".to_string(),
    ] {
        ensure!(text.contains(&line), "{line:?} not in\n{text}");
    }

    // `gpuchain withdraw` pays out exactly what the escrow credited.
    let before = chain.usdc_balance(p1).await?;
    as_node(&s, "p1", &["withdraw"]).await?;
    assert_eq!(chain.usdc_balance(p1).await? - before, earned);
    assert_eq!(chain.withdrawable(p1).await?, U256::ZERO);
    Ok(())
}

/// The counters of p1 and the client moved as the job ran (`mid` during it, `end` after),
/// and the verifiers' vote counters say what their logs say.
async fn assert_metrics_moved(s: &Setup, mid: [&Scrape; 2], end: [&Scrape; 2]) -> Result<()> {
    let [p1_mid, client_mid] = mid;
    let [p1, client] = end;
    let steps = |sc| metric(sc, "gpuchain_steps_total", &[]);
    ensure!(
        steps(p1) >= STEPS as f64 && steps(p1) > steps(p1_mid),
        "p1 steps: {} mid-run, {} at the end",
        steps(p1_mid),
        steps(p1)
    );
    let heard = |sc| metric(sc, "gpuchain_heartbeats_heard_total", &[]);
    ensure!(
        heard(client) > heard(client_mid),
        "client heartbeats heard: {} mid-run, {} at the end",
        heard(client_mid),
        heard(client)
    );
    let sent = metric(p1, "gpuchain_heartbeats_sent_total", &[]);
    ensure!(
        sent >= heard(client),
        "p1 sent {sent} heartbeats, the client heard {}",
        heard(client)
    );
    let mined = |sc| metric(sc, "gpuchain_transactions_total", &[("outcome", "mined")]);
    ensure!(
        mined(client) > mined(client_mid),
        "client txs mined: {}",
        mined(client)
    );
    for (name, sc) in [("p1", p1), ("client", client)] {
        let accepted = metric(
            sc,
            "gpuchain_gossip_messages_total",
            &[("verdict", "accept")],
        );
        ensure!(accepted > 0.0, "{name}: no gossip accepted");
        let peers = metric(sc, "gpuchain_peers", &[]);
        ensure!(peers > 0.0, "{name}: {peers} peers");
    }
    // The verifiers fetched p1's checkpoints from it.
    let served = metric(p1, "gpuchain_blob_bytes_total", &[("direction", "out")]);
    ensure!(served > 0.0, "p1 served no blob bytes");
    // Metrics and events come from one writer: the counts agree exactly.
    for v in ["v1", "v2"] {
        let sc = scrape(s, v).await?;
        let logged = votes(s, v)?;
        for (label, accept) in [("accept", true), ("reject", false)] {
            let n = logged.iter().filter(|(_, _, a)| *a == accept).count() as f64;
            let counted = metric(&sc, "gpuchain_votes_total", &[("vote", label)]);
            ensure!(
                counted == n,
                "{v}: {counted} {label} votes counted, {n} logged"
            );
        }
        let received = metric(&sc, "gpuchain_blob_bytes_total", &[("direction", "in")]);
        ensure!(received > 0.0, "{v} fetched no blob bytes");
    }
    Ok(())
}

/// Client's view of the job through its control API.
async fn client_view(s: &Setup, id: U256) -> Result<Value> {
    s.net.node("client")?.get(&format!("/v1/jobs/{id}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_provider_is_replaced_and_resumed_from_the_last_accepted_checkpoint() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let s = setup(
        "failover",
        &[
            p("p1", 1_000, None),
            p("p2", 2_000, None),
            p("p3", 3_000, None),
        ],
    )
    .await?;
    let id = submit(&s, 5_000).await?;
    let chain = s.net.chain()?.deployer().clone();
    // Mid-interval after the first acceptance: steps 11..19 are unaccepted work.
    poll_until(
        "p1 past step 12 after an acceptance",
        JOB_TIMEOUT,
        async || {
            let v = job(&chain, id).await?;
            let view = client_view(&s, id).await?;
            let reported = view["last_reported_step"].as_u64().unwrap_or(0);
            // Any mid-interval moment will do (the poll may miss a given interval on a slow
            // machine); what was lost is read back from the chain below.
            Ok(v.lastAcceptedStep >= 10
                && reported < STEPS - INTERVAL / 2
                && (2..=8).contains(&(reported % INTERVAL)))
        },
    )
    .await
    .with_context(|| logs_tail(&s))?;
    let killed_at = s.net.kill9("p1")?;
    // p2 bid on the job from the start, and so prepared its data then: the failover does
    // not wait for it.
    let spec_hash = job(&chain, id).await?.specHash.to_string();
    let ahead = s
        .net
        .wait_event(
            "p2",
            move |e: &Logged| {
                matches!(&e.event, NodeEvent::JobPrepared { spec_hash: h, .. } if *h == spec_hash)
            },
            Duration::from_secs(1),
        )
        .await
        .context("p2 prepared the job's data when it bid")?;
    ensure!(
        ahead.at < killed_at,
        "prepared only after the kill: {ahead:?}"
    );
    // Prepared means in memory: nothing stays unpacked on its disk, however many jobs a
    // provider bids on.
    let jobs_dir = s.net.node("p2")?.data_dir().join("jobs");
    let left: Vec<_> = std::fs::read_dir(&jobs_dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    ensure!(left.is_empty(), "p2 kept unpacked job data: {left:?}");

    let lost = s
        .net
        .wait_event(
            "client",
            after(killed_at, event_is!(ProviderLost)),
            Duration::from_secs(30),
        )
        .await?;
    let first_step = s
        .net
        .wait_event(
            "p2",
            after(killed_at, event_is!(FirstStep)),
            Duration::from_secs(120),
        )
        .await
        .with_context(|| logs_tail(&s))?;
    let since = |e: &Logged| e.at.duration_since(killed_at).unwrap_or_default();
    let detect = since(&lost);
    let again = since(&first_step);
    println!(
        "failover: noticed {} ms after kill -9, training again {} ms after it",
        detect.as_millis(),
        again.as_millis()
    );
    ensure!(detect < Duration::from_secs(5), "detection took {detect:?}");

    wait_completed(&s, id).await?;
    let c = s.net.chain()?;
    // Epoch 2 went to the next-cheapest provider, from the last accepted checkpoint (10),
    // which p2 could only fetch from the client or a verifier: p1 was dead.
    let (start, provider) = s
        .net
        .wait_for("client", epoch_2_assigned, Duration::from_secs(1))
        .await?;
    ensure!(start >= 10 && start % INTERVAL == 0, "resumed from {start}");
    ensure!(
        provider.parse::<Address>().ok() == Some(addr(&s, "p2")?),
        "epoch 2 went to {provider}"
    );
    let p1_paid = U256::from(start * 1_000);
    let p2_paid = U256::from((STEPS - start) * 2_000);
    assert_eq!(c.withdrawable(addr(&s, "p1")?).await?, p1_paid);
    assert_eq!(c.withdrawable(addr(&s, "p2")?).await?, p2_paid);
    assert_eq!(
        c.withdrawable(addr(&s, "client")?).await?,
        U256::from(BUDGET) - p1_paid - p2_paid - fees(4)
    );
    assert_fees(&s, 4).await?;
    let accounts: Vec<Address> = ["client", "p2", "p3", "v1", "v2"]
        .iter()
        .map(|n| addr(&s, n))
        .chain(std::iter::once(addr(&s, "p1")))
        .collect::<Result<_>>()?;
    assert_conserved(&s, &accounts, &["p1", "p2", "p3"]).await?;
    Ok(())
}

/// A hung GPU: the provider's process keeps heartbeating but its training stops after step 15
/// (`--fault hang`). The client notices it as stalled (not lost), from the provider's own
/// step rate, and fails the job over to the next provider, which completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hung_provider_is_noticed_as_stalled_and_replaced() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let s = setup(
        "hang",
        &[p("p1", 1_000, Some("hang")), p("p2", 2_000, None)],
    )
    .await?;
    let id = submit(&s, 5_000).await?;
    let hung = s
        .net
        .wait_event(
            "p1",
            event_is!(FaultEnabled { fault } if fault.contains("training stops")),
            JOB_TIMEOUT,
        )
        .await
        .with_context(|| logs_tail(&s))?;
    let stalled = s
        .net
        .wait_event(
            "client",
            event_is!(ProviderLost { reason, .. } if reason == "stalled"),
            Duration::from_secs(60),
        )
        .await
        .with_context(|| logs_tail(&s))?;
    let NodeEvent::ProviderLost {
        epoch,
        provider,
        silent_for_ms,
        ..
    } = &stalled.event
    else {
        bail!("not a provider_lost: {stalled:?}");
    };
    let detect = stalled.at.duration_since(hung.at).unwrap_or_default();
    println!(
        "hang: noticed as stalled {} ms after training hung ({silent_for_ms} ms after the \
         last step advance the client saw)",
        detect.as_millis()
    );
    ensure!(*epoch == 1, "epoch {epoch}");
    ensure!(
        provider.parse::<Address>().ok() == Some(addr(&s, "p1")?),
        "stalled: {provider}"
    );
    ensure!(
        detect < Duration::from_secs(10),
        "detection took {detect:?}"
    );

    wait_completed(&s, id).await?;
    let (start, provider) = s
        .net
        .wait_for("client", epoch_2_assigned, Duration::from_secs(1))
        .await?;
    ensure!(start % INTERVAL == 0 && start <= 10, "resumed from {start}");
    ensure!(
        provider.parse::<Address>().ok() == Some(addr(&s, "p2")?),
        "epoch 2 went to {provider}"
    );
    // A heartbeating provider is never called lost: the only detection is the stall.
    let detections: Vec<String> = s
        .net
        .node("client")?
        .events()?
        .into_iter()
        .filter_map(|e| match e.event {
            NodeEvent::ProviderLost { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    ensure!(detections == ["stalled"], "detections: {detections:?}");
    // The client's status says who was given up on, and why.
    let view = client_view(&s, id).await?;
    let d = &view["detections"];
    ensure!(
        d.as_array().map(Vec::len) == Some(1)
            && d[0]["reason"] == "stalled"
            && d[0]["epoch"] == 1
            && d[0]["provider"] == addr(&s, "p1")?.to_string(),
        "{view}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn junk_is_refused_by_both_verifiers_slashed_unpaid_and_replaced() -> Result<()> {
    let _serial = SERIAL.lock().await;
    // The cheapest provider would be chosen first, but it takes no grace longer than a
    // second: it must refuse the job (rule "grace") and never bid.
    let picky = Provider {
        args: &["--max-grace-secs", "1"],
        ..p("picky", 500, None)
    };
    let s = setup(
        "junk",
        &[p("p1", 1_000, Some("junk")), p("p2", 2_000, None), picky],
    )
    .await?;
    let id = submit(&s, 5_000).await?;
    wait_completed(&s, id).await?;
    let c = s.net.chain()?;
    for v in ["v1", "v2"] {
        ensure!(
            votes(&s, v)?
                .iter()
                .any(|&(epoch, _, accept)| epoch == 1 && !accept),
            "{v} did not vote against the junk checkpoint"
        );
    }
    let picky = s.net.node("picky")?.events()?;
    ensure!(
        picky
            .iter()
            .any(|e| matches!(&e.event, NodeEvent::BidRefused { rule, .. } if rule == "grace")),
        "the picky provider did not refuse the job's grace"
    );
    ensure!(
        !picky
            .iter()
            .any(|e| matches!(e.event, NodeEvent::BidPublished { .. })),
        "the picky provider bid anyway"
    );
    // `gpuchain provider status` asks the running node which bids it refused, and why.
    let out = as_node(&s, "picky", &["provider", "status", "--json"]).await?;
    let status: Value = serde_json::from_str(&out)?;
    assert_eq!(status["refused_bids"], json!({ "grace": 1 }), "{status}");
    assert_eq!(status["bonded"], tokens(U256::from(STAKE)), "{status}");
    let p1 = addr(&s, "p1")?;
    assert_eq!(c.withdrawable(p1).await?, U256::ZERO, "junk was paid");
    // The escrow slashes the stake the epoch reserved and burns it: the client gets nothing.
    let slashed = U256::from(STAKE);
    assert_eq!(c.stake_of(p1).await?.bonded, U256::ZERO);
    assert_eq!(c.deployer().burned().await?, slashed);
    let p2_paid = U256::from(STEPS * 2_000);
    assert_eq!(c.withdrawable(addr(&s, "p2")?).await?, p2_paid);
    // The reject (from the budget's slack) and four accepts: five decisions.
    assert_eq!(
        c.withdrawable(addr(&s, "client")?).await?,
        U256::from(BUDGET) - p2_paid - fees(5)
    );
    assert_fees(&s, 5).await?;
    // The status separates pay, slashed stake and refund.
    let (text, st) = job_status(&s, id).await?;
    println!("{text}");
    assert_eq!(st["status"], "Completed", "{st}");
    let p2 = addr(&s, "p2")?;
    assert_eq!(
        st["paid"],
        json!({ p2.to_string(): tokens(p2_paid) }),
        "{st}"
    );
    assert_eq!(
        st["slashed_stake"],
        json!({ p1.to_string(): tokens(slashed) }),
        "{st}"
    );
    assert_eq!(
        st["refunded"],
        tokens(U256::from(BUDGET) - p2_paid - fees(5)),
        "{st}"
    );
    // The chain's record: p1 rejected and slashed once, so clients rank it last.
    assert_eq!(st["provider_record"]["checkpoints_accepted"], 4, "{st}");
    let out = as_node(&s, "p1", &["provider", "status", "--json"]).await?;
    let p1_status: Value = serde_json::from_str(&out)?;
    assert_eq!(p1_status["record"]["epochs_rejected"], 1, "{p1_status}");
    assert_eq!(p1_status["record"]["epochs_slashed"], 1, "{p1_status}");
    ensure!(
        p1_status["reputation_score"].as_i64() < Some(0),
        "{p1_status}"
    );
    let accounts: Vec<Address> = ["client", "p1", "p2", "picky", "v1", "v2"]
        .iter()
        .map(|n| addr(&s, n))
        .collect::<Result<_>>()?;
    assert_conserved(&s, &accounts, &["p1", "p2", "picky"]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkpoint_of_a_fenced_epoch_gets_no_votes_and_cannot_be_accepted() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let s = setup("fenced", &[p("p1", 1_000, None), p("p2", 2_000, None)]).await?;
    let id = submit(&s, 5_000).await?;
    let chain = s.net.chain()?.deployer().clone();
    poll_until("p1 past its first acceptance", JOB_TIMEOUT, async || {
        let v = job(&chain, id).await?;
        Ok(v.lastAcceptedStep >= 10 && v.lastAcceptedStep < STEPS)
    })
    .await
    .with_context(|| logs_tail(&s))?;
    // Frozen, p1 stops heartbeating without closing its connections: the client fences it.
    s.net.pause("p1")?;
    poll_until("epoch 2", Duration::from_secs(60), async || {
        Ok(job(&chain, id).await?.epoch >= 2)
    })
    .await
    .with_context(|| logs_tail(&s))?;
    let resumed_at = SystemTime::now();
    s.net.resume("p1")?;
    s.net
        .wait_event(
            "p1",
            after(resumed_at, event_is!(Fenced)),
            Duration::from_secs(30),
        )
        .await
        .with_context(|| logs_tail(&s))?;

    // The verifiers learn of the fence from the chain like everyone else; an announce that
    // beats that news to a verifier is a race the escrow settles (tested below), not a fence.
    for v in ["v1", "v2"] {
        s.net
            .wait_for(v, epoch_2_assigned, Duration::from_secs(10))
            .await?;
    }
    // p1 announces a checkpoint for its fenced epoch anyway (signed with its real key).
    let (parent, _) = s
        .net
        .wait_for("client", epoch_2_assigned, Duration::from_secs(5))
        .await?;
    let step = parent + INTERVAL;
    let key = SigningKey::from_bytes(&s.net.node("p1")?.signer().to_bytes().0)?;
    let hashes: Vec<Hash> = (parent..=step)
        .map(|i| Hash::from(*blake3::hash(&i.to_le_bytes()).as_bytes()))
        .collect();
    let checkpoint_hash = Hash::from(*blake3::hash(b"fenced epoch checkpoint").as_bytes());
    let ann = CheckpointAnnounce {
        job_id: id,
        epoch: 1,
        provider: key.address(),
        parent_step: parent,
        step,
        checkpoint_hash,
        state_root: state_root(&hashes),
        state_hashes: hashes.into(),
        anchor_steps: gpuchain_protocol::anchors::anchor_steps(parent, step),
        signature: Sig65::ZERO,
    }
    .sign(&key);
    let sent_at = SystemTime::now();
    s.net
        .node("p1")?
        .post(
            "/v1/publish",
            &json!({
                "topic": job_topic(id),
                "data_hex": hex_encode(&Message::CheckpointAnnounce(ann).encode()),
            }),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hash_text = checkpoint_hash.to_string();
    for v in ["v1", "v2"] {
        let touched = s
            .net
            .node(v)?
            .events()?
            .into_iter()
            .filter(|e| e.at >= sent_at)
            .any(|e| match &e.event {
                NodeEvent::CheckpointAnnounced { checkpoint, .. }
                | NodeEvent::VotePublished { checkpoint, .. }
                | NodeEvent::QualityTest { checkpoint, .. }
                | NodeEvent::TrainingStarted {
                    from_checkpoint: checkpoint,
                    ..
                }
                | NodeEvent::BlobFetched {
                    hash: checkpoint, ..
                }
                | NodeEvent::BlobFetchFailed {
                    hash: checkpoint, ..
                } => *checkpoint == hash_text,
                _ => false,
            });
        ensure!(!touched, "{v} acted on a fenced epoch's checkpoint");
    }

    // Even with both verifiers' valid signatures, the escrow refuses a fenced epoch's
    // checkpoint once the job has moved on from the head it was fenced at (the decision
    // window pays an ended epoch's next checkpoint only while that head is still the job's).
    poll_until("epoch 2's first acceptance", JOB_TIMEOUT, async || {
        Ok(job(&chain, id).await?.lastAcceptedStep > parent)
    })
    .await
    .with_context(|| logs_tail(&s))?;
    let c = s.net.chain()?;
    let domain = c.deployer().domain();
    let mut sigs: Vec<(Address, Sig65)> = Vec::new();
    for v in ["v1", "v2"] {
        let k = SigningKey::from_bytes(&s.net.node(v)?.signer().to_bytes().0)?;
        let fields = VoteFields {
            job_id: id,
            epoch: 1,
            step,
            checkpoint_hash,
            accept: true,
        };
        sigs.push((k.address(), fields.sign(&domain, &k)));
    }
    sigs.sort_by_key(|(a, _)| *a);
    let client = c.client(s.net.node("client")?.signer().clone()).await?;
    let r = client
        .submit(&ChainTx::AcceptCheckpoint {
            job_id: id,
            epoch: 1,
            step,
            checkpoint_hash,
            sigs: sigs.into_iter().map(|(_, s)| s).collect(),
        })
        .await;
    match r {
        Ok(_) => bail!("the escrow accepted a checkpoint of a fenced epoch"),
        Err(e) => ensure!(
            e.revert_name() == Some("MovedOn"),
            "not the refusal of a fenced epoch whose head moved: {e}"
        ),
    }

    wait_completed(&s, id).await?;
    let v = job(&chain, id).await?;
    ensure!(
        v.lastCheckpointHash != checkpoint_hash,
        "fenced checkpoint on chain"
    );
    let p1_paid = c.withdrawable(addr(&s, "p1")?).await?;
    ensure!(
        p1_paid == U256::from(parent * 1_000),
        "p1 paid {p1_paid} for {parent} accepted steps"
    );
    Ok(())
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
