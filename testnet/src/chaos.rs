//! `gpuchain testnet chaos --seed S --minutes M`: one live testnet (a client, three verifiers,
//! four providers on anvil) runs 40-step jobs back to back while a seeded schedule of the
//! fault matrix's faults hits it: kill and restart, freeze and thaw, a partition from the
//! client, the chain RPC going away, a verifier stopped and started again. After every job
//! and at the end, the checks every scenario ends with run over every job so far.
//!
//! The schedule is a pure function of the seed and the duration ([`schedule`]): a failing
//! seed prints itself and its schedule, and the same seed plays the same schedule again. One
//! fault at a time, each undone before the next, so a quorum of 2 of 3 always exists.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::checks::{self, Checks};
use crate::node::NodeSpec;
use crate::{ChainOpts, JobSubmission, Testnet, U256, USDC};

/// The job every chaos run plays, over and over.
const JOB_FILE: &str = include_str!("../scenarios/jobs/fashion-cnn-40.toml");
pub const PROVIDERS: [&str; 4] = ["p1", "p2", "p3", "p4"];
pub const VERIFIERS: [&str; 3] = ["v1", "v2", "v3"];
pub const CLIENT: &str = "client";
/// A 40-step job takes well under a minute; one that is not over after this is stuck.
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// One fault of the schedule: `fault` starts `at_secs` after the run started and is undone
/// `hold_secs` later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChaosEvent {
    pub at_secs: u64,
    pub hold_secs: u64,
    pub fault: ChaosFault,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ChaosFault {
    /// kill -9, then a restart on the same data dir.
    KillRestart { node: String },
    /// SIGSTOP, then SIGCONT.
    FreezeThaw { node: String },
    /// Cut off from the client (not from the others), then healed.
    Partition { node: String },
    /// The chain RPC taken from every node, then given back.
    RpcOutage,
    /// SIGTERM, then a start on the same data dir.
    StopStart { node: String },
}

/// Uniform in `lo..=hi`.
fn range(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    rng.random_range(lo..=hi)
}

fn pick<'a>(rng: &mut ChaCha8Rng, of: &[&'a str]) -> &'a str {
    of[rng.random_range(0..of.len())]
}

/// The faults a chaos run of `minutes` with `seed` fires: the first 20 s in (the first job is
/// under way by then), each held 3 to 20 s, 10 to 40 s apart, none starting in the last
/// minute. A pure function of its arguments: ChaCha8 is specified, so its stream for a seed
/// does not change between versions of the crate.
pub fn schedule(seed: u64, minutes: u64) -> Vec<ChaosEvent> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let end = minutes.saturating_mul(60).saturating_sub(60);
    let mut at = 20;
    let mut out = Vec::new();
    while at < end {
        let hold = range(&mut rng, 3, 20);
        let fault = match range(&mut rng, 0, 5) {
            0 => ChaosFault::KillRestart {
                node: pick(&mut rng, &PROVIDERS).into(),
            },
            1 => ChaosFault::FreezeThaw {
                node: pick(&mut rng, &PROVIDERS).into(),
            },
            2 => ChaosFault::Partition {
                node: pick(&mut rng, &PROVIDERS).into(),
            },
            3 => ChaosFault::RpcOutage,
            4 => ChaosFault::StopStart {
                node: pick(&mut rng, &VERIFIERS).into(),
            },
            _ => ChaosFault::KillRestart {
                node: CLIENT.into(),
            },
        };
        out.push(ChaosEvent {
            at_secs: at,
            hold_secs: hold,
            fault,
        });
        at += hold + range(&mut rng, 10, 40);
    }
    out
}

/// What a chaos run did and found.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub minutes: u64,
    pub schedule: Vec<ChaosEvent>,
    /// Faults that started (the schedule up to where the run got).
    pub fired: usize,
    pub jobs: Vec<String>,
    pub checks: Checks,
    pub wall_secs: u64,
}

impl ChaosReport {
    pub fn text(&self) -> String {
        let mut out = format!(
            "chaos seed {} ({} min): {} job(s), {} of {} faults fired\n",
            self.seed,
            self.minutes,
            self.jobs.len(),
            self.fired,
            self.schedule.len()
        );
        out.push_str(&schedule_text(&self.schedule));
        out.push_str(&self.checks.text());
        out.push_str(&format!("  wall time {} s\n", self.wall_secs));
        out
    }
}

pub fn schedule_text(schedule: &[ChaosEvent]) -> String {
    schedule
        .iter()
        .map(|e| {
            format!(
                "  at {:>4} s for {:>2} s  {:?}\n",
                e.at_secs, e.hold_secs, e.fault
            )
        })
        .collect()
}

/// Plays `minutes` of chaos with `seed` in `run_dir`; fails, naming the seed, on the first
/// check that fails or job that does not end.
pub async fn run(run_dir: &Path, binary: &Path, seed: u64, minutes: u64) -> Result<ChaosReport> {
    let plan = schedule(seed, minutes);
    eprintln!(
        "[chaos] seed {seed}, {minutes} min, {} faults:\n{}",
        plan.len(),
        schedule_text(&plan)
    );
    std::fs::create_dir_all(run_dir)?;
    let opts = ChainOpts {
        rpc_proxy: true,
        ..ChainOpts::default()
    };
    let mut net = Testnet::with_new_chain(run_dir, binary, opts).await?;
    let result = play(&mut net, run_dir, seed, minutes, &plan).await;
    net.stop_all().await;
    result.with_context(|| format!("chaos seed {seed} failed: rerun it with --seed {seed}"))
}

async fn play(
    net: &mut Testnet,
    run_dir: &Path,
    seed: u64,
    minutes: u64,
    plan: &[ChaosEvent],
) -> Result<ChaosReport> {
    let started = Instant::now();
    let job_file = run_dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    let roles = std::iter::once((CLIENT, "client"))
        .chain(VERIFIERS.iter().map(|v| (*v, "verifier")))
        .chain(PROVIDERS.iter().map(|p| (*p, "provider")));
    let mut price = 0;
    for (name, role) in roles {
        let mut spec: NodeSpec = net.role_spec(name, role)?.arg("--test-partition-control");
        if role == "provider" {
            // 0.001, 0.002, …: every provider under the job's maximum of 0.005.
            price += 1;
            spec = spec.arg("--price-per-step").arg(format!("0.00{price}"));
        }
        net.spawn(spec).await?;
        match role {
            "provider" => net.stake(name, U256::from(100 * USDC)).await?,
            "verifier" => net.stake_verifier(name, U256::from(50 * USDC)).await?,
            _ => {}
        }
    }
    net.wait_mesh(CLIENT).await?;

    let deadline = started + Duration::from_secs(minutes * 60);
    let chain = net.chain()?.deployer().clone();
    let mut jobs: Vec<U256> = Vec::new();
    let mut live: Option<(U256, Instant)> = None;
    let mut next = 0; // the next fault of the plan to start
    let mut active: Option<(usize, Instant)> = None; // a started fault and when to undo it
    let mut checks = Checks::default();
    loop {
        let now = started.elapsed().as_secs();
        if let Some((i, undo_at)) = active
            && Instant::now() >= undo_at
        {
            undo(net, &plan[i].fault).await?;
            active = None;
        }
        if active.is_none()
            && next < plan.len()
            && now >= plan[next].at_secs
            && Instant::now() < deadline
        {
            eprintln!("[chaos] {:>4} s: {:?}", now, plan[next].fault);
            start(net, &plan[next].fault).await?;
            active = Some((
                next,
                Instant::now() + Duration::from_secs(plan[next].hold_secs),
            ));
            next += 1;
        }
        if let Some((job, since)) = live {
            // A read of anvil that fails for a moment (a loaded machine) is asked again next
            // round; a job that never ends still fails the run by its timeout.
            let over = match chain.job(job).await {
                Ok(v) => (v.status == 3 && v.settled) || v.status == 4,
                Err(e) => {
                    eprintln!("[chaos] the chain did not answer ({e:#}); asking again");
                    false
                }
            };
            if over {
                live = None;
                checks = checks::run(net, &jobs).await?;
                eprintln!("[chaos] job {job} over; checks:\n{}", checks.text());
                if !checks.passed() {
                    bail!("a check failed after job {job}:\n{}", checks.text());
                }
            } else if since.elapsed() > JOB_TIMEOUT {
                bail!("job {job} was not over after {JOB_TIMEOUT:?}");
            }
        }
        let client_down = matches!(active, Some((i, _)) if plan[i].fault == ChaosFault::KillRestart { node: CLIENT.into() });
        if live.is_none() {
            if Instant::now() >= deadline && active.is_none() {
                break;
            }
            if Instant::now() < deadline && !client_down {
                let job = net.submit_job(CLIENT, &submission(&job_file)).await?;
                eprintln!(
                    "[chaos] {:>4} s: job {job} submitted",
                    started.elapsed().as_secs()
                );
                jobs.push(job);
                live = Some((job, Instant::now()));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let checks = if jobs.is_empty() {
        checks
    } else {
        checks::run(net, &jobs).await?
    };
    let report = ChaosReport {
        seed,
        minutes,
        schedule: plan.to_vec(),
        fired: next,
        jobs: jobs.iter().map(|j| j.to_string()).collect(),
        checks,
        wall_secs: started.elapsed().as_secs(),
    };
    if !report.checks.passed() {
        bail!("a check failed at the end:\n{}", report.text());
    }
    Ok(report)
}

fn submission(file: &Path) -> JobSubmission {
    JobSubmission {
        file: file.to_path_buf(),
        budget: "1".into(),
        max_price: "0.005".into(),
        committee: 3,
        quorum: 2,
        verifier_fee: "0.001".into(),
        deadline_secs: 3600,
        grace_secs: 600,
    }
}

async fn start(net: &Testnet, fault: &ChaosFault) -> Result<()> {
    match fault {
        ChaosFault::KillRestart { node } => net.kill9(node).map(|_| ()),
        ChaosFault::FreezeThaw { node } => net.pause(node),
        ChaosFault::Partition { node } => net.partition(node, &[CLIENT.into()], true).await,
        ChaosFault::RpcOutage => net.chain()?.cut_rpc(),
        ChaosFault::StopStart { node } => net.stop(node).await.map(|_| ()),
    }
}

async fn undo(net: &mut Testnet, fault: &ChaosFault) -> Result<()> {
    match fault {
        ChaosFault::KillRestart { node } | ChaosFault::StopStart { node } => {
            net.restart(node).await.map(|_| ())
        }
        ChaosFault::FreezeThaw { node } => net.resume(node),
        ChaosFault::Partition { node } => net.partition(node, &[CLIENT.into()], false).await,
        ChaosFault::RpcOutage => net.chain()?.restore_rpc(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        assert_eq!(schedule(7, 10), schedule(7, 10));
        assert_ne!(schedule(7, 10), schedule(8, 10));
        // A longer run plays the shorter one's schedule first.
        let short = schedule(7, 5);
        assert_eq!(schedule(7, 10)[..short.len()], short[..]);
    }

    #[test]
    fn faults_never_overlap_and_stop_a_minute_before_the_end() {
        for seed in 0..50 {
            let s = schedule(seed, 10);
            assert!(!s.is_empty(), "seed {seed}");
            for w in s.windows(2) {
                assert!(
                    w[0].at_secs + w[0].hold_secs < w[1].at_secs,
                    "seed {seed}: {w:?}"
                );
            }
            assert!(s.iter().all(|e| e.at_secs >= 20 && e.at_secs < 540));
            assert!(s.iter().all(|e| (3..=20).contains(&e.hold_secs)));
        }
        assert!(schedule(1, 1).is_empty());
    }

    #[test]
    fn every_kind_of_fault_comes_up() {
        let all: Vec<ChaosEvent> = (0..20).flat_map(|s| schedule(s, 10)).collect();
        for kind in [
            "kill-restart",
            "freeze-thaw",
            "partition",
            "rpc-outage",
            "stop-start",
        ] {
            assert!(
                all.iter()
                    .any(|e| serde_json::to_value(&e.fault).is_ok_and(|v| v["kind"] == kind)),
                "{kind}"
            );
        }
        assert!(all.iter().any(|e| e.fault
            == ChaosFault::KillRestart {
                node: CLIENT.into()
            }));
    }
}
