//! Scenario files (`testnet/scenarios/*.toml`): which nodes run with which roles, the job,
//! and faults fired at a training step or a time (kill -9, restart, SIGSTOP/SIGCONT, a
//! verifier taken offline; cheats are a provider's `fault`). `gpuchain testnet run FILE`
//! plays one and prints who was paid what; the run record lands in the run folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::demo::usdc;
use crate::record::{HARNESS, HarnessEvent, RECORD_FILE, RecordLine, Recorded, write_record};
use crate::{ChainOpts, JobSubmission, Testnet, U256, USDC, poll_until};
use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub job: JobSection,
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSection>,
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSection>,
    /// Give up (and fail) when the job is not over by then.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_timeout() -> u64 {
    1800
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    /// The client node that submits it.
    pub client: String,
    /// Job file (see `gpuchain job submit --spec`), relative to the scenario file.
    pub file: PathBuf,
    pub budget: String,
    pub max_price: String,
    /// Verifier node names.
    pub verifiers: Vec<String>,
    pub quorum: u8,
    #[serde(default = "default_deadline")]
    pub deadline_secs: u64,
    #[serde(default = "default_grace")]
    pub grace_secs: u64,
}

fn default_deadline() -> u64 {
    3600
}
fn default_grace() -> u64 {
    600
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    pub name: String,
    pub role: String,
    /// Provider: price per step in tokens (e.g. "0.002").
    pub price: Option<String>,
    /// Provider: cheat kind (junk, stale, nan, wrong-order); verifier: reject-all (votes
    /// reject on everything).
    pub fault: Option<String>,
    /// Provider: tokens staked before the job (default 100).
    #[serde(default = "default_stake")]
    pub stake: u64,
}

fn default_stake() -> u64 {
    100
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// kill -9.
    Kill,
    /// Start a killed or stopped node again with the same data dir.
    Restart,
    /// SIGSTOP: frozen, connections open, silent.
    Pause,
    /// SIGCONT.
    Resume,
    /// SIGTERM: a clean shutdown (a verifier going offline).
    Stop,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// Fire once the client has seen a heartbeat at this step or later.
    pub at_step: Option<u64>,
    /// Fire this many seconds after the job was submitted.
    pub at_secs: Option<f64>,
    pub action: Action,
    pub node: String,
}

const ROLES: [&str; 3] = ["client", "provider", "verifier"];
const CHEATS: [&str; 4] = ["junk", "stale", "nan", "wrong-order"];
/// A verifier's cheats (`gpuchain node --fault`).
const VERIFIER_CHEATS: [&str; 1] = ["reject-all"];

impl Scenario {
    /// Reads and checks a scenario; every error names the file and the field.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the scenario file {}", path.display()))?;
        let s: Scenario = toml::from_str(&text).map_err(|e| {
            anyhow!(
                "scenario {} is not valid: {}",
                path.display(),
                e.to_string().trim_end()
            )
        })?;
        s.check()
            .map_err(|e| anyhow!("scenario {}: {e}", path.display()))?;
        Ok(s)
    }

    fn check(&self) -> Result<()> {
        let mut names = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            ensure!(
                names.insert(n.name.as_str()),
                "node[{i}].name: {:?} is used twice",
                n.name
            );
            ensure!(
                ROLES.contains(&n.role.as_str()),
                "node[{i}].role: {:?} is not one of {ROLES:?}",
                n.role
            );
            if n.role != "provider" {
                ensure!(n.price.is_none(), "node[{i}]: price is for providers only");
            }
            if let Some(f) = &n.fault {
                let cheats: &[&str] = match n.role.as_str() {
                    "provider" => &CHEATS,
                    "verifier" => &VERIFIER_CHEATS,
                    _ => &[],
                };
                ensure!(
                    cheats.contains(&f.as_str()),
                    "node[{i}].fault: {f:?} is not one of a {}'s {cheats:?}",
                    n.role
                );
            }
        }
        let role_of = |name: &str| {
            self.nodes
                .iter()
                .find(|n| n.name == name)
                .map(|n| n.role.as_str())
        };
        ensure!(
            role_of(&self.job.client) == Some("client"),
            "job.client: {:?} is not a node with role client",
            self.job.client
        );
        for (i, v) in self.job.verifiers.iter().enumerate() {
            ensure!(
                role_of(v) == Some("verifier"),
                "job.verifiers[{i}]: {v:?} is not a node with role verifier"
            );
        }
        ensure!(
            self.job.quorum >= 1 && usize::from(self.job.quorum) <= self.job.verifiers.len(),
            "job.quorum: {} must be between 1 and the number of verifiers ({})",
            self.job.quorum,
            self.job.verifiers.len()
        );
        for (i, f) in self.faults.iter().enumerate() {
            ensure!(
                role_of(&f.node).is_some(),
                "fault[{i}].node: no node named {:?}",
                f.node
            );
            match (f.at_step, f.at_secs) {
                (Some(_), None) => {}
                (None, Some(t)) if t.is_finite() && t >= 0.0 => {}
                (None, Some(_)) => bail!("fault[{i}].at_secs must be a non-negative number"),
                _ => bail!("fault[{i}]: give exactly one of at_step and at_secs"),
            }
        }
        Ok(())
    }
}

/// What a scenario run ended with.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub name: String,
    pub run_dir: PathBuf,
    pub job_id: String,
    /// Completed, or Expired.
    pub outcome: String,
    pub epochs: u64,
    pub last_accepted_step: u64,
    /// The faults as they fired, as they are in the run record.
    pub faults_fired: Vec<RecordLine>,
    /// Withdrawable per node, in USDC, read from the chain.
    pub withdrawable: Vec<(String, String)>,
    pub stakes: Vec<(String, String)>,
    /// Stake the escrow burned by slashes, in USDC.
    pub burned: String,
    pub wall_secs: u64,
}

impl ScenarioReport {
    pub fn text(&self) -> String {
        let mut out = format!(
            "scenario {}: job {} {} after {} epoch(s), last accepted step {}\n",
            self.name, self.job_id, self.outcome, self.epochs, self.last_accepted_step
        );
        for f in &self.faults_fired {
            if let Some(HarnessEvent::ScenarioFault {
                action,
                target_node,
                at_step,
                at_secs,
            }) = f.harness_event()
            {
                out.push_str(&format!(
                    "  fault  {action:?} {target_node} at step {at_step} ({at_secs:.1} s)\n"
                ));
            }
        }
        for (n, w) in &self.withdrawable {
            out.push_str(&format!("  {n:<12} withdrawable {w} USDC\n"));
        }
        out.push_str(&format!("  {:<12} {} USDC\n", "burned", self.burned));
        for (n, s) in &self.stakes {
            out.push_str(&format!("  {n:<12} stake        {s} USDC\n"));
        }
        out.push_str(&format!(
            "  wall time {} s; record {}\n",
            self.wall_secs,
            self.run_dir.join(RECORD_FILE).display()
        ));
        out
    }
}

/// Plays `path` in `run_dir` with `binary`; every process is stopped before it returns.
pub async fn run(path: &Path, run_dir: &Path, binary: &Path) -> Result<ScenarioReport> {
    let scenario = Scenario::load(path)?;
    let job_file = path
        .parent()
        .unwrap_or(Path::new("."))
        .join(&scenario.job.file);
    ensure!(
        job_file.is_file(),
        "scenario {}: job.file {} does not exist",
        path.display(),
        job_file.display()
    );
    std::fs::create_dir_all(run_dir)?;
    let mut net = Testnet::with_new_chain(run_dir, binary, ChainOpts::default()).await?;
    let mut fired = Vec::new();
    let result = play(&mut net, &scenario, &job_file, run_dir, &mut fired).await;
    if let Err(e) = write_record(&net, run_dir, &fired) {
        eprintln!("[scenario] could not write the run record: {e:#}");
    }
    net.stop_all().await;
    result
}

async fn play(
    net: &mut Testnet,
    s: &Scenario,
    job_file: &Path,
    run_dir: &Path,
    fired: &mut Vec<RecordLine>,
) -> Result<ScenarioReport> {
    let started = Instant::now();
    // The client first: everyone else bootstraps from the first node.
    let mut order: Vec<&NodeSection> = s.nodes.iter().filter(|n| n.role == "client").collect();
    order.extend(s.nodes.iter().filter(|n| n.role != "client"));
    for n in order {
        let mut spec = net.role_spec(&n.name, &n.role)?;
        if let Some(p) = &n.price {
            spec = spec.arg("--price-per-step").arg(p.clone());
        }
        if let Some(f) = &n.fault {
            spec = spec.arg("--fault").arg(f.clone());
        }
        net.spawn(spec).await?;
        if n.role == "provider" {
            net.stake(&n.name, U256::from(n.stake * USDC)).await?;
        }
    }
    let client = net.node(&s.job.client)?;
    let others = s.nodes.len() as u64 - 1;
    poll_until("the mesh", Duration::from_secs(30), async || {
        Ok(client.connected_peers().await? >= others)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let job_id = net
        .submit_job(
            &s.job.client,
            &JobSubmission {
                file: job_file.to_path_buf(),
                budget: s.job.budget.clone(),
                max_price: s.job.max_price.clone(),
                verifiers: s.job.verifiers.clone(),
                quorum: s.job.quorum,
                deadline_secs: s.job.deadline_secs,
                grace_secs: s.job.grace_secs,
            },
        )
        .await?;
    eprintln!("[scenario] {}: job {job_id} submitted", s.name);
    let submitted = Instant::now();
    let job_path = format!("/v1/jobs/{job_id}");
    let chain = net.chain()?.deployer().clone();
    let mut pending: Vec<&FaultSection> = s.faults.iter().collect();
    let deadline = submitted + Duration::from_secs(s.timeout_secs);
    let (outcome, view) = loop {
        let v = chain.job(job_id).await?;
        match v.status {
            // Completed once the client's settle has credited what the job did not spend.
            3 if v.remaining.is_zero() => break ("completed", v),
            4 => break ("expired", v),
            _ => {}
        }
        ensure!(
            Instant::now() < deadline,
            "the job did not finish within {} s",
            s.timeout_secs
        );
        let step = match net.node(&s.job.client)?.get(&job_path).await {
            Ok(view) => view["last_reported_step"].as_u64().unwrap_or(0),
            Err(_) => 0,
        };
        let elapsed = submitted.elapsed().as_secs_f64();
        let mut i = 0;
        while i < pending.len() {
            let f = pending[i];
            let due =
                f.at_step.is_some_and(|a| step >= a) || f.at_secs.is_some_and(|a| elapsed >= a);
            if !due {
                i += 1;
                continue;
            }
            pending.remove(i);
            match f.action {
                Action::Kill => {
                    net.kill9(&f.node)?;
                }
                Action::Restart => {
                    net.restart(&f.node).await?;
                }
                Action::Pause => net.pause(&f.node)?,
                Action::Resume => net.resume(&f.node)?,
                Action::Stop => {
                    net.stop(&f.node).await?;
                }
            }
            let ev = RecordLine {
                node: HARNESS.into(),
                timestamp_us: crate::events::unix_micros(std::time::SystemTime::now())?,
                event: Recorded::Harness(HarnessEvent::ScenarioFault {
                    action: f.action,
                    target_node: f.node.clone(),
                    at_step: step,
                    at_secs: elapsed,
                }),
            };
            eprintln!(
                "[scenario] {:?} {} at step {step} ({elapsed:.1} s)",
                f.action, f.node
            );
            fired.push(ev);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let c = net.chain()?;
    let mut withdrawable = Vec::new();
    let mut stakes = Vec::new();
    for n in &s.nodes {
        let a = net.node(&n.name)?.eth_address();
        withdrawable.push((n.name.clone(), usdc(c.withdrawable(a).await?)));
        if n.role == "provider" {
            stakes.push((
                n.name.clone(),
                usdc(U256::from(c.stake_of(a).await?.bonded)),
            ));
        }
    }
    Ok(ScenarioReport {
        name: s.name.clone(),
        run_dir: run_dir.to_path_buf(),
        job_id: job_id.to_string(),
        outcome: outcome.to_string(),
        epochs: view.epoch,
        last_accepted_step: view.lastAcceptedStep,
        faults_fired: fired.clone(),
        withdrawable,
        stakes,
        burned: usdc(c.deployer().burned().await?),
        wall_secs: started.elapsed().as_secs(),
    })
}
