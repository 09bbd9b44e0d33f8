//! Scenario files (`testnet/scenarios/*.toml`): which nodes run with which roles, the job,
//! and faults fired at a training step or a time (kill -9, restart, SIGSTOP/SIGCONT, a
//! verifier taken offline; cheats are a node's `fault`: a provider's junk, a verifier's
//! rejects, a client's withheld pay). Verifiers stake into the escrow's pool and the escrow
//! draws the job's committee from it. `gpuchain testnet run FILE` plays one and prints who
//! was paid what; the run record lands in the run folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::demo::usdc;
use crate::record::{HARNESS, HarnessEvent, RECORD_FILE, RecordLine, Recorded, write_record};
use crate::{ChainOpts, JobSubmission, Testnet, U256, USDC};
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
    /// Committee size the escrow draws from the staked verifiers. Default: every verifier
    /// node.
    pub committee: Option<u8>,
    /// Default: the smallest strict majority of the committee.
    pub quorum: Option<u8>,
    /// Tokens each committee member earns per decision it signs.
    #[serde(default = "default_verifier_fee")]
    pub verifier_fee: String,
    #[serde(default = "default_deadline")]
    pub deadline_secs: u64,
    #[serde(default = "default_grace")]
    pub grace_secs: u64,
}

fn default_verifier_fee() -> String {
    "0.001".into()
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
    /// reject on everything); client: withhold-pay (never lands an accept, ends the epoch
    /// instead).
    pub fault: Option<String>,
    /// Tokens staked before the job: a provider's stake (default 100), a verifier's seat in
    /// the escrow's pool (default 50, the minimum).
    pub stake: Option<u64>,
}

impl NodeSection {
    fn stake(&self) -> u64 {
        self.stake
            .unwrap_or(if self.role == "verifier" { 50 } else { 100 })
    }
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
/// A client's cheats.
const CLIENT_CHEATS: [&str; 1] = ["withhold-pay"];

impl Scenario {
    fn verifier_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| n.role == "verifier").count()
    }

    /// The committee the job asks the escrow for.
    pub fn committee(&self) -> u8 {
        self.job
            .committee
            .unwrap_or_else(|| u8::try_from(self.verifier_nodes()).unwrap_or(u8::MAX))
    }

    pub fn quorum(&self) -> u8 {
        self.job.quorum.unwrap_or(self.committee() / 2 + 1)
    }

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
                    "client" => &CLIENT_CHEATS,
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
        let verifiers = self.verifier_nodes();
        let committee = self.committee();
        ensure!(
            committee >= 2 && usize::from(committee) <= verifiers,
            "job.committee: {committee} must be between 2 and the number of verifier nodes ({verifiers})"
        );
        let quorum = self.quorum();
        ensure!(
            usize::from(quorum) * 2 > usize::from(committee) && quorum <= committee,
            "job.quorum: {quorum} must be a strict majority of the committee of {committee}"
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
    /// Providers' bonded stake and verifiers' pool stake, in USDC.
    pub stakes: Vec<(String, String)>,
    /// The verifiers the escrow drew for the job (node names).
    pub committee: Vec<String>,
    /// The job's budget and where it went, from its escrow events, in USDC: paid to
    /// providers (by node), verifier fees (by node), refunded to the client.
    pub budget: String,
    pub paid: Vec<(String, String)>,
    pub fees: Vec<(String, String)>,
    pub refunded: String,
    /// paid + fees + refunded == budget, and every account was credited exactly its share.
    pub conserved: bool,
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
        out.push_str(&format!(
            "  committee    {} (drawn by the escrow)\n",
            self.committee.join(", ")
        ));
        for (n, w) in &self.withdrawable {
            out.push_str(&format!("  {n:<12} withdrawable {w} USDC\n"));
        }
        for (n, p) in &self.paid {
            out.push_str(&format!("  {n:<12} paid         {p} USDC\n"));
        }
        for (n, f) in &self.fees {
            out.push_str(&format!("  {n:<12} fees         {f} USDC\n"));
        }
        out.push_str(&format!(
            "  budget {} USDC; refunded {} USDC; paid + fees + refunded == budget: {}\n",
            self.budget,
            self.refunded,
            if self.conserved { "yes" } else { "NO" }
        ));
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
        match n.role.as_str() {
            "provider" => net.stake(&n.name, U256::from(n.stake() * USDC)).await?,
            "verifier" => {
                net.stake_verifier(&n.name, U256::from(n.stake() * USDC))
                    .await?
            }
            _ => {}
        }
    }
    net.wait_mesh(&s.job.client).await?;

    let job_id = net
        .submit_job(
            &s.job.client,
            &JobSubmission {
                file: job_file.to_path_buf(),
                budget: s.job.budget.clone(),
                max_price: s.job.max_price.clone(),
                committee: s.committee(),
                quorum: s.quorum(),
                verifier_fee: s.job.verifier_fee.clone(),
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
            3 if v.settled => break ("completed", v),
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
    let money = c.deployer().job_money(job_id, c.deploy_block()).await?;
    let mut withdrawable = Vec::new();
    let mut stakes = Vec::new();
    let (mut paid, mut fees) = (Vec::new(), Vec::new());
    let mut credited = true;
    let mut name_of = std::collections::BTreeMap::new();
    for n in &s.nodes {
        let a = net.node(&n.name)?.eth_address();
        name_of.insert(a, n.name.clone());
        let w = c.withdrawable(a).await?;
        withdrawable.push((n.name.clone(), usdc(w)));
        match n.role.as_str() {
            "provider" => {
                stakes.push((n.name.clone(), usdc(c.stake_of(a).await?.bonded)));
                paid.push((n.name.clone(), usdc(money.paid_to(a))));
                credited &= w == money.paid_to(a);
            }
            "verifier" => {
                let vs = c.deployer().verifier_stake_of(a).await?;
                stakes.push((n.name.clone(), usdc(vs.bonded)));
                fees.push((n.name.clone(), usdc(money.fees_to(a))));
                credited &= w == money.fees_to(a);
            }
            _ => credited &= w == money.refunded,
        }
    }
    let committee = money
        .committee
        .iter()
        .map(|a| name_of.get(a).cloned().unwrap_or_else(|| a.to_string()))
        .collect();
    let conserved = money.conserved()
        && money.paid_total() + money.fees_total() + money.refunded == money.deposit
        && credited;
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
        committee,
        budget: usdc(money.deposit),
        paid,
        fees,
        refunded: usdc(money.refunded),
        conserved,
        burned: usdc(c.deployer().burned().await?),
        wall_secs: started.elapsed().as_secs(),
    })
}
