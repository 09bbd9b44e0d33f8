//! The product page's 4 Nov run on a local network: fashion-cnn, 400 steps, a 5 USDC budget,
//! two independent verifiers; provider A is killed with kill -9 mid-interval, provider P
//! returns junk and is refused, provider B finishes. Every figure printed is measured: times
//! from the nodes' event logs, balances from the chain. The whole run is kept as a record
//! (JSON lines, every node's events in time order) in the run folder.
//!
//! `--job text` tells the same story on a bert-lora job (Debian fortunes by category, LoRA on a
//! tiny random encoder), at the same steps and prices; `--job minilm` on the real MiniLM
//! weights, at 80 steps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

use crate::events::{NodeEvent, after};
use crate::record::{RECORD_FILE, write_record};
use crate::{ChainOpts, JobSubmission, Testnet, U256, USDC, event_is, poll_until};

pub const TOTAL_STEPS: u64 = 400;
pub const INTERVAL: u64 = 50;
/// The product page kills A at step 158.
pub const KILL_AT_STEP: u64 = 158;
pub const BUDGET: u64 = 5 * USDC;
pub const STAKE: u64 = 100 * USDC;
/// What each verifier signing a decision earns.
pub const VERIFIER_FEE: u64 = 1_000;
/// Per-step prices: A cheapest, then P, then B (so P is tried before B).
pub const PRICE_A: u64 = 1_000;
pub const PRICE_P: u64 = 2_000;
pub const PRICE_B: u64 = 3_000;
const JOB_TIMEOUT: Duration = Duration::from_secs(1800);

/// A job the demo can replay the story on: its job file and the numbers the story needs.
#[derive(Debug, Clone, Copy)]
pub struct DemoJob {
    /// What `--job` names.
    pub name: &'static str,
    pub file: &'static str,
    pub total_steps: u64,
    pub interval: u64,
    /// A is killed at the first step it reports from here on, once the checkpoint before it
    /// is accepted and while the next is still some steps away (a later interval when the
    /// verifiers lag behind A).
    pub kill_at_step: u64,
    /// Held-out examples the quality test scores.
    pub eval_examples: u64,
}

/// The product page's job.
pub const FASHION: DemoJob = DemoJob {
    name: "fashion",
    file: r#"# The 4 Nov demo job (gpuchain testnet demo).
model = "fashion-cnn"
total_steps = 400
checkpoint_interval = 50
eval_examples = 2000
"#,
    total_steps: TOTAL_STEPS,
    interval: INTERVAL,
    kill_at_step: KILL_AT_STEP,
    eval_examples: 2000,
};

/// The story on the text job: LoRA on a tiny random encoder, so it runs in minutes on CPU.
/// A checkpoint every 100 steps of 64 examples: checking one (the quality test and two spot
/// checks, each replaying up to a third of the interval) takes its verifiers about half the
/// time A takes to train the next, which leaves the kill room mid-interval. At 50 steps of 16
/// the two took about as long, and the kill point raced the next checkpoint.
pub const TEXT: DemoJob = DemoJob {
    name: "text",
    file: r#"# The 4 Nov story on a text job (gpuchain testnet demo --job text): Debian fortunes
# classified by category (computers, politics, science, work), LoRA on a tiny random encoder.
model = "bert-lora"
total_steps = 400
checkpoint_interval = 100
effective_batch = 64
eval_examples = 296

[hyper]
learning_rate = 1e-2

[text]
base = "tiny"
rank = 4
alpha = 8.0
max_len = 32

[text.tiny]
layers = 1
hidden = 64
heads = 2
intermediate = 128

[quality]
min_accuracy = 0.2
after_step = 100
max_accuracy_drop = 0.1
"#,
    total_steps: TOTAL_STEPS,
    interval: 100,
    kill_at_step: KILL_AT_STEP,
    eval_examples: 296,
};

/// The story at the product's own size: the real all-MiniLM-L6-v2 weights (`scripts/setup`
/// installs them) with LoRA, learning the fortunes' categories. 80 steps, so it finishes in
/// minutes on 2 CPU cores; a checkpoint every 20, since verifying one (the quality test over
/// the held-out set and a replayed step) takes about as long as 10 steps.
pub const MINILM: DemoJob = DemoJob {
    name: "minilm",
    file: r#"# The 4 Nov story at MiniLM size (gpuchain testnet demo --job minilm): Debian fortunes
# classified by category (computers, politics, science, work), LoRA on all-MiniLM-L6-v2.
model = "bert-lora"
total_steps = 80
checkpoint_interval = 20
effective_batch = 16
eval_examples = 296

[hyper]
learning_rate = 2e-3

[text]
base = "all-MiniLM-L6-v2"
rank = 8
alpha = 16.0
targets = ["query", "value"]
max_len = 32

[quality]
min_accuracy = 0.3
after_step = 40
max_accuracy_drop = 0.1
"#,
    total_steps: 80,
    interval: 20,
    kill_at_step: 30,
    eval_examples: 296,
};

/// The jobs `--job` accepts.
pub const JOBS: [DemoJob; 3] = [FASHION, TEXT, MINILM];

impl DemoJob {
    pub fn named(name: &str) -> Result<DemoJob> {
        JOBS.iter()
            .find(|j| j.name == name)
            .copied()
            .ok_or_else(|| {
                let names: Vec<&str> = JOBS.iter().map(|j| j.name).collect();
                anyhow::anyhow!("no demo job named {name:?}: pick one of {names:?}")
            })
    }
}

/// What the demo measured; `gpuchain testnet demo --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    pub run_dir: PathBuf,
    /// The demo job's name (`fashion`, `text`).
    pub job: String,
    pub total_steps: u64,
    pub job_id: String,
    pub killed_at_step: u64,
    pub last_accepted_before_kill: u64,
    pub steps_lost: u64,
    pub detect_ms: u64,
    /// kill -9 → the next provider (P) finished its first step.
    pub training_again_ms: u64,
    /// kill -9 → an honest provider (B) finished its first step, P's junk refused on the way.
    pub honest_training_again_ms: u64,
    /// Of that: from P's junk announce to the escrow's rejection (fetch, quality test,
    /// spot check, votes, the reject transaction).
    pub verifying_junk_ms: u64,
    pub junk_accuracy: Option<f64>,
    pub previous_accuracy: Option<f64>,
    pub final_accuracy: Option<f64>,
    pub eval_examples: u64,
    pub paid_a: String,
    pub paid_p: String,
    pub paid_b: String,
    /// Verifier fees, in total and per verifier (by node name), for the decisions each signed.
    pub fees: String,
    pub fees_each: Vec<(String, String)>,
    /// Decisions the escrow took (accepts and rejects).
    pub decisions: u64,
    pub refunded: String,
    pub slashed_p: String,
    pub budget: String,
    /// paid + fees + refunded == budget, from the job's escrow events, and every account was
    /// credited exactly that.
    pub conserved: bool,
    pub wall_secs: u64,
}

/// Base units → USDC with at least two decimals (`0.15`, `4.10`, `100.00`).
pub fn usdc(v: U256) -> String {
    let s = format!("{v:0>7}");
    let (int, frac) = s.split_at(s.len() - 6);
    let mut frac = frac.trim_end_matches('0').to_string();
    while frac.len() < 2 {
        frac.push('0');
    }
    format!("{int}.{frac}")
}

fn ms_between(a: SystemTime, b: SystemTime) -> u64 {
    b.duration_since(a).unwrap_or_default().as_millis() as u64
}

/// How far A's true step may be past the one the client last reported, and the kill's own
/// latency: a heartbeat period, a poll, the API and chain reads, with room to spare.
const KILL_LATENCY: Duration = Duration::from_millis(300);

/// A's pace, from the steps the client saw it report: sets how far from the next checkpoint a
/// kill must be planned so that it lands before A announces that checkpoint.
#[derive(Default)]
struct Pace {
    first: Option<(Instant, u64)>,
    steps_per_sec: f64,
}

impl Pace {
    fn observe(&mut self, now: Instant, reported: u64) {
        match self.first {
            None if reported > 0 => self.first = Some((now, reported)),
            Some((t0, s0)) if now.duration_since(t0) >= Duration::from_millis(500) => {
                let secs = now.duration_since(t0).as_secs_f64();
                self.steps_per_sec = reported.saturating_sub(s0) as f64 / secs;
            }
            _ => {}
        }
    }

    /// Steps A may cover in [`KILL_LATENCY`]; at least 2, and no kill before a pace is known
    /// (the margin is then unbounded).
    fn margin(&self) -> u64 {
        if self.steps_per_sec == 0.0 {
            return u64::MAX / 4;
        }
        ((self.steps_per_sec * KILL_LATENCY.as_secs_f64()).ceil() as u64).max(2)
    }
}

/// Where A may be killed, in steps.
#[derive(Clone, Copy)]
struct KillWindow {
    kill_at: u64,
    accepted_before: u64,
    interval: u64,
    margin: u64,
    total_steps: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillPoint {
    Kill,
    Waiting,
    /// The job moved on from A before the kill.
    LeftA,
    /// Past the kill point with the checkpoint before accepted, but too near the next one: the
    /// verifiers accepted late, and the kill waits for a later interval.
    TooNear,
    /// A is too near the job's end for a kill that leaves work to fail over.
    NoneLeft,
}

/// The checkpoint after the last accepted one.
fn next_checkpoint(accepted: u64, interval: u64) -> u64 {
    (accepted / interval + 1) * interval
}

/// Whether A, reporting `reported` with `accepted` accepted in `epoch`, is at a kill point:
/// past `kill_at`, every checkpoint it reached accepted, and at least `margin` steps short of
/// the next one (else `TooNear`).
fn kill_point(w: KillWindow, epoch: u64, reported: u64, accepted: u64) -> KillPoint {
    if epoch > 1 {
        return KillPoint::LeftA;
    }
    if reported.saturating_add(w.margin.min(w.interval)) >= w.total_steps {
        return KillPoint::NoneLeft;
    }
    if reported < w.kill_at || accepted < w.accepted_before || reported <= accepted {
        KillPoint::Waiting
    } else if reported.saturating_add(w.margin) < next_checkpoint(accepted, w.interval) {
        KillPoint::Kill
    } else {
        KillPoint::TooNear
    }
}

fn progress(msg: &str) {
    eprintln!("[demo] {msg}");
}

/// Runs the demo in `run_dir` with the given `gpuchain` binary.
/// The product page's run, on its fashion-cnn job.
pub async fn run(run_dir: &Path, binary: &Path) -> Result<DemoReport> {
    run_job(run_dir, binary, &FASHION).await
}

/// The story on `job`.
pub async fn run_job(run_dir: &Path, binary: &Path, job: &DemoJob) -> Result<DemoReport> {
    let started = Instant::now();
    std::fs::create_dir_all(run_dir)
        .with_context(|| format!("cannot create the run folder {}", run_dir.display()))?;
    progress("starting anvil and deploying JobEscrow + test USDC");
    let mut net = Testnet::with_new_chain(run_dir, binary, ChainOpts::default()).await?;
    let dashboard = net.serve_dashboard("the 4 Nov run").await?;
    progress(&format!(
        "dashboard (open it in a browser): {}",
        dashboard.url()
    ));
    let result = drive(&mut net, run_dir, started, job).await;
    if let Err(e) = write_record(&net, run_dir, &[]) {
        progress(&format!("could not write the run record: {e:#}"));
    }
    net.stop_all().await;
    drop(dashboard);
    progress(&format!(
        "replay it: gpuchain dashboard --replay {}",
        run_dir.display()
    ));
    result
}

async fn drive(
    net: &mut Testnet,
    run_dir: &Path,
    started: Instant,
    job: &DemoJob,
) -> Result<DemoReport> {
    let (total_steps, interval, kill_at) = (job.total_steps, job.interval, job.kill_at_step);
    progress("starting the client, two verifiers and providers A, P (junk) and B");
    for (name, role) in [
        ("client", "client"),
        ("verifier-1", "verifier"),
        ("verifier-2", "verifier"),
    ] {
        let spec = net.role_spec(name, role)?;
        if role == "verifier" {
            net.spawn_verifier(spec).await?;
        } else {
            net.spawn(spec).await?;
        }
    }
    for (name, price, fault) in [
        ("A", PRICE_A, None),
        ("P", PRICE_P, Some("junk")),
        ("B", PRICE_B, None),
    ] {
        let mut spec = net
            .role_spec(name, "provider")?
            .arg("--price-per-step")
            .arg(format!("0.{price:06}"));
        if let Some(f) = fault {
            spec = spec.arg("--fault").arg(f);
        }
        net.spawn(spec).await?;
        net.stake(name, U256::from(STAKE)).await?;
    }
    net.wait_mesh("client").await?;

    let job_file = run_dir.join("job.toml");
    std::fs::write(&job_file, job.file)?;
    progress(&format!(
        "submitting the {} job: {total_steps} steps, checkpoint every {interval}, budget 5 USDC, a committee of 2 drawn by the escrow, quorum 2",
        job.name
    ));
    let job_num = net
        .submit_job(
            "client",
            &JobSubmission {
                file: job_file,
                budget: usdc(U256::from(BUDGET)),
                max_price: usdc(U256::from(PRICE_B)),
                committee: 2,
                quorum: 2,
                verifier_fee: usdc(U256::from(VERIFIER_FEE)),
                deadline_secs: 3600,
                grace_secs: 600,
            },
        )
        .await?;
    let submitted = Instant::now();
    let client = net.node("client")?;
    let job_path = format!("/v1/jobs/{job_num}");

    // Kill A mid-interval once it has trained past `kill_at` (158 on the product page) and
    // the checkpoint before it is accepted. Verifiers slower than A (a host running all six
    // nodes on two cores, a spot check replaying a segment) may accept that checkpoint only
    // after A has reached the next one: then the kill waits for a later interval, so the story
    // is the same one a few checkpoints on, rather than a kill racing an unvoted checkpoint.
    let chain = net.chain()?.deployer().clone();
    let mut last_print = Instant::now();
    let mut killed: Option<(SystemTime, u64, u64)> = None;
    let accepted_before = kill_at / interval * interval;
    let mut outcome = KillPoint::Waiting;
    let mut pace = Pace::default();
    let mut told_late: Option<u64> = None;
    poll_until("A to reach the kill point", JOB_TIMEOUT, async || {
        let view = client.get(&job_path).await?;
        let reported = view["last_reported_step"].as_u64().unwrap_or(0);
        let accepted = view["last_accepted"].as_u64().unwrap_or(0);
        pace.observe(Instant::now(), reported);
        if last_print.elapsed() > Duration::from_secs(5) {
            last_print = Instant::now();
            progress(&format!(
                "A training: step {reported}/{total_steps}, {accepted} accepted"
            ));
        }
        // The job left A, or A is too close to its end for a kill: failures to report, not a
        // "not yet" to poll on until the timeout (an error here would be polled again).
        let v = chain.job(job_num).await?;
        let margin = pace.margin();
        outcome = kill_point(
            KillWindow {
                kill_at,
                accepted_before,
                interval,
                margin,
                total_steps,
            },
            v.epoch,
            reported,
            accepted,
        );
        match outcome {
            KillPoint::Waiting => return Ok(false),
            KillPoint::TooNear => {
                if told_late != Some(accepted) {
                    told_late = Some(accepted);
                    progress(&format!(
                        "step {accepted} accepted only as A reached step {reported}, too near \
                         the next checkpoint: the kill waits for a later interval"
                    ));
                }
                return Ok(false);
            }
            KillPoint::Kill | KillPoint::LeftA | KillPoint::NoneLeft => {}
        }
        killed = Some((SystemTime::now(), reported, accepted));
        Ok(true)
    })
    .await?;
    let (_, reported, accepted) = killed.context("kill point")?;
    match outcome {
        KillPoint::Kill | KillPoint::Waiting | KillPoint::TooNear => {}
        KillPoint::LeftA => {
            let epoch = chain.job(job_num).await?.epoch;
            bail!(
                "the job left A before the kill point (epoch {epoch} at step {reported}); the \
                 client's log says why (provider_lost: a host too loaded to keep A's heartbeats \
                 on time?)"
            )
        }
        KillPoint::NoneLeft => bail!(
            "A neared the end of the job (step {reported}) with only step {accepted} accepted: \
             the verifiers never accepted a checkpoint while A was still mid-way to the next, \
             so there was no point to kill it at. They took longer to check each checkpoint \
             than A took to train the next; the verifiers' logs (quality_test, spot_check) say \
             how long"
        ),
    }
    let kill_time = net.kill9("A")?;
    if let Some(board) = net.board() {
        board.harness_at(
            crate::record::HarnessEvent::ScenarioFault {
                action: crate::scenario::Action::Kill,
                target_node: "A".into(),
                at_step: reported,
                at_secs: submitted.elapsed().as_secs_f64(),
            },
            kill_time,
        );
    }
    progress(&format!(
        "kill -9 of provider A at step {reported} ({accepted} accepted)"
    ));

    let mut last_print = Instant::now();
    poll_until("the job to complete", JOB_TIMEOUT, async || {
        let v = chain.job(job_num).await?;
        if v.status == 4 {
            bail!("the job expired");
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            last_print = Instant::now();
            let view = client.get(&job_path).await.unwrap_or(Value::Null);
            progress(&format!(
                "epoch {}: step {}/{total_steps}, {} accepted",
                v.epoch, view["last_reported_step"], v.lastAcceptedStep
            ));
        }
        Ok(v.status == 3 && v.settled)
    })
    .await?;
    progress("job complete; reading the figures from the logs and the chain");

    let wait = Duration::from_secs(10);
    // The record is read from the logs: let the client's follower log the final block first,
    // and the client's settle credit what the job did not spend.
    net.wait_event("client", event_is!(ChainSettled), wait)
        .await?;
    let lost = net
        .wait_event("client", after(kill_time, event_is!(ProviderLost)), wait)
        .await?;
    let p_first = net
        .wait_event("P", after(kill_time, event_is!(FirstStep)), wait)
        .await?;
    let b_first = net
        .wait_event("B", after(kill_time, event_is!(FirstStep)), wait)
        .await?;
    let (junk_announced, junk_hash) = net
        .wait_for(
            "P",
            |e| match &e.event {
                NodeEvent::CheckpointAnnounced { checkpoint, .. } => {
                    Some((e.at, checkpoint.clone()))
                }
                _ => None,
            },
            wait,
        )
        .await?;
    let rejected = net
        .wait_event("client", event_is!(ChainRejected), wait)
        .await?;
    let (junk_accuracy, previous_accuracy) = net
        .wait_for(
            "verifier-1",
            |e| match &e.event {
                NodeEvent::QualityTest {
                    checkpoint,
                    accuracy,
                    previous_accuracy,
                    ..
                } if *checkpoint == junk_hash => Some((*accuracy, *previous_accuracy)),
                _ => None,
            },
            wait,
        )
        .await?;
    let final_accuracy = net
        .wait_for(
            "verifier-1",
            |e| match &e.event {
                NodeEvent::QualityTest {
                    step,
                    pass: true,
                    accuracy,
                    ..
                } if *step == total_steps => Some(*accuracy),
                _ => None,
            },
            wait,
        )
        .await?;

    let c = net.chain()?;
    let addr = |n: &str| net.node(n).map(crate::NodeProc::eth_address);
    // The job's own figures, summed from its escrow events (the same summary `gpuchain job
    // status` prints); the balances the escrow credited must agree with them.
    let money = c.deployer().job_money(job_num, c.deploy_block()).await?;
    let paid_a = money.paid_to(addr("A")?);
    let paid_p = money.paid_to(addr("P")?);
    let paid_b = money.paid_to(addr("B")?);
    let slashed = money.slashed.get(&addr("P")?).copied().unwrap_or_default();
    let refunded = money.refunded;
    let fees = money.fees_total();
    let budget = U256::from(BUDGET);
    let client_credit = c.withdrawable(addr("client")?).await?;
    let mut fees_each = Vec::new();
    // Settle credited each verifier exactly the fees its decisions earned.
    let mut fees_credited = true;
    for v in ["verifier-1", "verifier-2"] {
        let earned = money.fees_to(addr(v)?);
        fees_credited &= c.withdrawable(addr(v)?).await? == earned;
        fees_each.push((v.to_string(), usdc(earned)));
    }
    // P's slash is burned: the client is credited its refund and nothing more.
    let credited = c.withdrawable(addr("A")?).await? == paid_a
        && c.withdrawable(addr("P")?).await? == paid_p
        && c.withdrawable(addr("B")?).await? == paid_b
        && client_credit == refunded
        && fees_credited
        && c.deployer().burned().await? == slashed;
    let conserved = money.deposit == budget
        && money.conserved()
        && paid_a + paid_p + paid_b + fees + refunded == budget
        && credited;
    let decisions = money.decisions;

    Ok(DemoReport {
        run_dir: run_dir.to_path_buf(),
        job: job.name.into(),
        total_steps,
        job_id: job_num.to_string(),
        killed_at_step: reported,
        last_accepted_before_kill: accepted,
        steps_lost: reported.saturating_sub(accepted),
        detect_ms: ms_between(kill_time, lost.at),
        training_again_ms: ms_between(kill_time, p_first.at),
        honest_training_again_ms: ms_between(kill_time, b_first.at),
        verifying_junk_ms: ms_between(junk_announced, rejected.at),
        junk_accuracy: Some(junk_accuracy),
        previous_accuracy,
        final_accuracy: Some(final_accuracy),
        eval_examples: job.eval_examples,
        paid_a: usdc(paid_a),
        paid_p: usdc(paid_p),
        paid_b: usdc(paid_b),
        fees: usdc(fees),
        fees_each,
        decisions,
        refunded: usdc(refunded),
        slashed_p: usdc(slashed),
        budget: usdc(budget),
        conserved,
        wall_secs: started.elapsed().as_secs(),
    })
}

impl DemoReport {
    /// The table the demo prints.
    pub fn table(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("n/a".into(), |a| format!("{:.1} %", a * 100.0));
        let rows = [
            (
                "time to notice provider A stopped",
                format!("{} ms", self.detect_ms),
            ),
            (
                "time until training again elsewhere (P)",
                format!("{} ms", self.training_again_ms),
            ),
            (
                "  … on an honest provider (B), after P's junk",
                format!(
                    "{} ms, of which verifying and refusing the junk {} ms",
                    self.honest_training_again_ms, self.verifying_junk_ms
                ),
            ),
            (
                "steps lost",
                format!(
                    "{} of {} (A killed at step {}, {} accepted)",
                    self.steps_lost,
                    self.total_steps,
                    self.killed_at_step,
                    self.last_accepted_before_kill
                ),
            ),
            (
                "junk checkpoint accuracy",
                format!(
                    "{} (previous accepted: {}) → refused by both verifiers",
                    pct(self.junk_accuracy),
                    pct(self.previous_accuracy)
                ),
            ),
            (
                "final accuracy",
                format!(
                    "{} on {} test examples",
                    pct(self.final_accuracy),
                    self.eval_examples
                ),
            ),
            ("paid to A", format!("{} USDC", self.paid_a)),
            (
                "paid to P (junk)",
                format!(
                    "{} USDC, stake slashed {} USDC (burned)",
                    self.paid_p, self.slashed_p
                ),
            ),
            ("paid to B", format!("{} USDC", self.paid_b)),
            (
                "verifier fees",
                format!(
                    "{} USDC for {} decisions ({})",
                    self.fees,
                    self.decisions,
                    self.fees_each
                        .iter()
                        .map(|(v, f)| format!("{v} {f}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            (
                "refunded to the client",
                format!("{} USDC of {} USDC", self.refunded, self.budget),
            ),
        ];
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let on = match self.job.as_str() {
            "fashion" => String::new(),
            other => format!(" on the {other} job"),
        };
        let mut out = format!(
            "gpuchain demo: the 4 Nov run{on}, measured (balances read from the chain)\n\n"
        );
        for (k, v) in rows {
            out.push_str(&format!("  {k:<width$}  {v}\n"));
        }
        out.push_str(&format!(
            "\n  paid + fees + refunded == budget: {}   wall time {} s   run record: {}\n",
            if self.conserved { "yes" } else { "NO" },
            self.wall_secs,
            self.run_dir.join(RECORD_FILE).display()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdc_keeps_cents_and_every_significant_digit() {
        assert_eq!(usdc(U256::from(150_000u64)), "0.15");
        assert_eq!(usdc(U256::from(4_100_000u64)), "4.10");
        assert_eq!(usdc(U256::from(100_000_000u64)), "100.00");
        assert_eq!(usdc(U256::from(2_500u64)), "0.0025");
        assert_eq!(usdc(U256::ZERO), "0.00");
    }

    const PAGE: KillWindow = KillWindow {
        kill_at: 158,
        accepted_before: 150,
        interval: 50,
        margin: 10,
        total_steps: 400,
    };

    #[test]
    fn a_is_killed_mid_interval_once_the_checkpoint_before_is_accepted() {
        assert_eq!(kill_point(PAGE, 1, 158, 150), KillPoint::Kill);
        assert_eq!(kill_point(PAGE, 1, 170, 150), KillPoint::Kill);
        // Not yet past the kill point, or 150 not yet accepted.
        assert_eq!(kill_point(PAGE, 1, 157, 150), KillPoint::Waiting);
        assert_eq!(kill_point(PAGE, 1, 170, 100), KillPoint::Waiting);
        // Too close to checkpoint 200: A may have announced it by the time it dies.
        assert_eq!(kill_point(PAGE, 1, 190, 150), KillPoint::TooNear);
    }

    #[test]
    fn the_margin_covers_what_a_trains_while_the_kill_is_on_its_way() {
        let t0 = Instant::now();
        let mut pace = Pace::default();
        // No pace yet: every step is too near the next checkpoint for a kill.
        assert_eq!(
            kill_point(
                KillWindow {
                    margin: pace.margin(),
                    ..PAGE
                },
                1,
                170,
                150
            ),
            KillPoint::TooNear
        );
        pace.observe(t0, 10);
        pace.observe(t0 + Duration::from_millis(200), 14);
        assert!(
            pace.margin() > PAGE.interval,
            "a pace over 0.2 s is no pace yet"
        );
        // 40 steps a second: 12 steps in 300 ms.
        pace.observe(t0 + Duration::from_secs(2), 90);
        assert_eq!(pace.margin(), 12);
        // 2 steps a second: the floor of 2.
        let mut slow = Pace::default();
        slow.observe(t0, 1);
        slow.observe(t0 + Duration::from_secs(5), 11);
        assert_eq!(slow.margin(), 2);
    }

    #[test]
    fn verifiers_behind_a_move_the_kill_to_a_later_interval() {
        // 150 accepted only as A passed 200: wait for 200's acceptance, kill before 240.
        assert_eq!(kill_point(PAGE, 1, 205, 150), KillPoint::TooNear);
        assert_eq!(kill_point(PAGE, 1, 212, 200), KillPoint::Kill);
        assert_eq!(kill_point(PAGE, 1, 245, 200), KillPoint::TooNear);
        // No unaccepted work lost at an exact checkpoint, and no kill this near the end.
        assert_eq!(kill_point(PAGE, 1, 200, 200), KillPoint::Waiting);
        assert_eq!(kill_point(PAGE, 1, 390, 350), KillPoint::NoneLeft);
        assert_eq!(kill_point(PAGE, 2, 170, 150), KillPoint::LeftA);
    }
}
