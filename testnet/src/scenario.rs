//! Scenario files (`testnet/scenarios/*.toml`): which nodes run with which roles, the job,
//! and faults fired at a training step or a time (kill -9, restart, SIGSTOP/SIGCONT, a
//! verifier taken offline; cheats are a node's `fault`: a provider's junk, a verifier's
//! rejects, a client's withheld pay). Verifiers stake into the escrow's pool and the escrow
//! draws the job's committee from it. `gpuchain testnet run FILE` plays one and prints who
//! was paid what; the run record lands in the run folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checks::Checks;
use crate::demo::usdc;
use crate::record::{HARNESS, HarnessEvent, RECORD_FILE, RecordLine, Recorded, write_record};
use crate::{ChainOpts, JobSubmission, NodeEvent, Testnet, U256, USDC};
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
    /// Provider: the memory it offers for training, in MiB (`--memory-mb`). Default: the
    /// machine's.
    pub memory_mb: Option<u64>,
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
    /// Take the chain RPC away from every node (the harness's proxy closes their
    /// connections and refuses new ones); no `node`.
    RpcDown,
    /// Give the chain RPC back; no `node`.
    RpcUp,
    /// Cut `node` off from the nodes in `from`, both ways (libp2p connections refused and
    /// closed, no blobs fetched across); every other link stays.
    Partition,
    /// Undo a `partition` between `node` and the nodes in `from`.
    Heal,
}

impl Action {
    /// Whether it acts on the chain's RPC rather than on a node.
    pub fn on_chain(self) -> bool {
        matches!(self, Action::RpcDown | Action::RpcUp)
    }

    /// Whether it needs the nodes' partition control (and a `from`).
    pub fn partitions(self) -> bool {
        matches!(self, Action::Partition | Action::Heal)
    }
}

/// What a fault acting on the chain names as its target in reports and the record.
pub const CHAIN_TARGET: &str = "chain";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// Fire once the client has seen a heartbeat at this step or later.
    pub at_step: Option<u64>,
    /// Fire this many seconds after the job was submitted, or after fault number `after`
    /// (0-based, an earlier one) fired.
    pub at_secs: Option<f64>,
    /// With `at_secs`: count from when this earlier fault fired.
    pub after: Option<usize>,
    /// Fire as soon as node `watch` has announced a checkpoint at this step or later (to hit
    /// the window between an announce and the decision on it).
    pub at_announce: Option<u64>,
    /// Whose announces `at_announce` waits for. Default: the fault's own node.
    pub watch: Option<String>,
    /// `true`: fire once the fault's node has exited on its own (a crash), e.g. to restart it.
    pub at_exit: Option<bool>,
    /// With any trigger: hold the fault until the escrow has accepted a checkpoint at this
    /// step or later, so "kill mid-interval after an accepted checkpoint" does not depend on
    /// how fast the verifiers check on a loaded machine.
    pub once_accepted: Option<u64>,
    pub action: Action,
    /// The node it acts on; none for the chain's actions.
    pub node: Option<String>,
    /// `partition` and `heal`: the nodes `node` is cut off from (or healed with).
    #[serde(default)]
    pub from: Vec<String>,
}

impl FaultSection {
    /// The node it acts on, or [`CHAIN_TARGET`].
    pub fn target(&self) -> &str {
        self.node.as_deref().unwrap_or(CHAIN_TARGET)
    }

    /// The node whose announces trigger this fault.
    fn watched(&self) -> &str {
        self.watch.as_deref().unwrap_or(self.target())
    }
}

const ROLES: [&str; 3] = ["client", "provider", "verifier"];
const CHEATS: [&str; 6] = [
    "junk",
    "stale",
    "nan",
    "wrong-order",
    "hang",
    "crash-mid-checkpoint",
];
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
        Self::parse(&text).map_err(|e| anyhow!("scenario {}: {e:#}", path.display()))
    }

    /// Reads and checks a scenario's text, as [`Scenario::load`] does a file's.
    pub fn parse(text: &str) -> Result<Self> {
        let s: Scenario =
            toml::from_str(text).map_err(|e| anyhow!("not valid: {}", e.to_string().trim_end()))?;
        s.check()?;
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
                ensure!(
                    n.memory_mb.is_none(),
                    "node[{i}]: memory_mb is for providers only"
                );
            }
            ensure!(
                n.memory_mb != Some(0),
                "node[{i}].memory_mb: must be at least 1 (MiB)"
            );
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
            match (&f.node, f.action.on_chain()) {
                (Some(n), false) => {
                    ensure!(role_of(n).is_some(), "fault[{i}].node: no node named {n:?}")
                }
                (None, false) => bail!("fault[{i}].node: {:?} needs a node", f.action),
                (Some(_), true) => bail!(
                    "fault[{i}].node: {:?} acts on the chain's RPC, not on a node",
                    f.action
                ),
                (None, true) => {}
            }
            match (f.action.partitions(), f.from.is_empty()) {
                (true, true) => bail!("fault[{i}].from: {:?} needs the nodes to cut off", f.action),
                (false, false) => bail!("fault[{i}].from: only for partition and heal"),
                _ => {}
            }
            for n in &f.from {
                ensure!(
                    role_of(n).is_some() && Some(n) != f.node.as_ref(),
                    "fault[{i}].from: {n:?} is not another node of this scenario"
                );
            }
            if let Some(a) = f.after {
                ensure!(
                    a < i && f.at_secs.is_some(),
                    "fault[{i}].after: must name an earlier fault (an index below {i}) and go with at_secs"
                );
            }
            let on_exit = match f.at_exit {
                Some(true) => {
                    ensure!(
                        f.node.is_some(),
                        "fault[{i}].at_exit: needs a node to watch"
                    );
                    Some(())
                }
                Some(false) => bail!("fault[{i}].at_exit: only `true` makes sense; leave it out"),
                None => None,
            };
            match (f.at_step, f.at_secs, f.at_announce, on_exit) {
                (Some(_), None, None, None)
                | (None, None, Some(_), None)
                | (None, None, None, Some(())) => {}
                (None, Some(t), None, None) if t.is_finite() && t >= 0.0 => {}
                (None, Some(_), None, None) => {
                    bail!("fault[{i}].at_secs must be a non-negative number")
                }
                _ => bail!(
                    "fault[{i}]: give exactly one of at_step, at_secs, at_announce and at_exit"
                ),
            }
            if f.at_announce.is_some() && f.watch.is_none() {
                ensure!(
                    f.node.as_deref().and_then(role_of) == Some("provider"),
                    "fault[{i}].watch: at_announce on a node that is not a provider needs watch"
                );
            }
            if let Some(w) = &f.watch {
                ensure!(
                    f.at_announce.is_some(),
                    "fault[{i}].watch: only for an at_announce fault"
                );
                ensure!(
                    role_of(w) == Some("provider"),
                    "fault[{i}].watch: {w:?} is not a node with role provider"
                );
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
    /// The checks every scenario ends with (see `checks.rs`).
    pub checks: Checks,
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
        out.push_str(&self.checks.text());
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
    let opts = ChainOpts {
        rpc_proxy: scenario.faults.iter().any(|f| f.action.on_chain()),
        ..ChainOpts::default()
    };
    let mut net = Testnet::with_new_chain(run_dir, binary, opts).await?;
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
        if let Some(m) = n.memory_mb {
            spec = spec.arg("--memory-mb").arg(m.to_string());
        }
        if let Some(f) = &n.fault {
            spec = spec.arg("--fault").arg(f.clone());
        }
        if s.faults.iter().any(|f| f.action.partitions()) {
            // The swarm's connected/disconnected events (debug) show the cut in the record.
            spec = spec
                .arg("--test-partition-control")
                .env("RUST_LOG", "info,gpuchain::event=debug");
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
    let mut pending: Vec<(usize, &FaultSection)> = s.faults.iter().enumerate().collect();
    // When each fault fired, in seconds since submission (for `after`).
    let mut fired_at: Vec<Option<f64>> = vec![None; s.faults.len()];
    let deadline = submitted + Duration::from_secs(s.timeout_secs);
    // The harness's own reads of anvil may fail for a moment on a loaded machine (a stale
    // pooled connection, anvil busy); only a chain silent for this long fails the run.
    const CHAIN_PATIENCE: Duration = Duration::from_secs(30);
    let mut chain_silent_since: Option<Instant> = None;
    let (outcome, view) = loop {
        let v = match chain.job(job_id).await {
            Ok(v) => {
                chain_silent_since = None;
                v
            }
            Err(e) => {
                let since = *chain_silent_since.get_or_insert_with(Instant::now);
                ensure!(
                    since.elapsed() < CHAIN_PATIENCE,
                    "the chain did not answer the harness for {CHAIN_PATIENCE:?}: {e:#}"
                );
                eprintln!("[scenario] the chain did not answer ({e:#}); asking again");
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
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
            let (index, f) = pending[i];
            let since = match f.after {
                Some(a) => fired_at.get(a).copied().flatten(),
                None => Some(0.0),
            };
            let due = f.at_step.is_some_and(|a| step >= a)
                || f.at_secs
                    .zip(since)
                    .is_some_and(|(a, since)| elapsed >= since + a)
                || match f.at_announce {
                    Some(a) => announced(net, f.watched())?.is_some_and(|s| s >= a),
                    None => false,
                }
                || (f.at_exit == Some(true) && !net.node(f.target())?.is_running());
            let accepted = f.once_accepted.is_none_or(|a| v.lastAcceptedStep >= a);
            if !due || !accepted {
                i += 1;
                continue;
            }
            pending.remove(i);
            fired_at[index] = Some(elapsed);
            // Stamped before the action: what it causes must come after its record line.
            let timestamp_us = crate::events::unix_micros(std::time::SystemTime::now())?;
            let node = f.target();
            match f.action {
                Action::Kill => {
                    net.kill9(node)?;
                }
                Action::Restart => {
                    net.restart(node).await?;
                }
                Action::Pause => net.pause(node)?,
                Action::Resume => net.resume(node)?,
                Action::Stop => {
                    net.stop(node).await?;
                }
                Action::RpcDown => net.chain()?.cut_rpc()?,
                Action::RpcUp => net.chain()?.restore_rpc()?,
                Action::Partition => net.partition(node, &f.from, true).await?,
                Action::Heal => net.partition(node, &f.from, false).await?,
            }
            let ev = RecordLine {
                node: HARNESS.into(),
                timestamp_us,
                event: Recorded::Harness(HarnessEvent::ScenarioFault {
                    action: f.action,
                    target_node: node.to_string(),
                    at_step: step,
                    at_secs: elapsed,
                }),
            };
            eprintln!(
                "[scenario] {:?} {} at step {step} ({elapsed:.1} s)",
                f.action, node
            );
            fired.push(ev);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let checks = crate::checks::run(net, &[job_id]).await?;
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
    // The budget identity and the escrow's books are the checkers'; here, that each node's
    // balance is its share.
    let conserved = credited
        && checks
            .get(crate::checks::CONSERVED)
            .is_some_and(|c| c.passed);
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
        checks,
        wall_secs: started.elapsed().as_secs(),
    })
}

/// The highest step node `name` has announced a checkpoint at (in any epoch), from its log;
/// `None` before its first announce.
fn announced(net: &Testnet, name: &str) -> Result<Option<u64>> {
    Ok(net
        .node(name)?
        .events()?
        .iter()
        .filter_map(|e| match &e.event {
            NodeEvent::CheckpointAnnounced { step, .. } => Some(*step),
            _ => None,
        })
        .max())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A shipped scenario with faults of several kinds: the base the mutations start from.
    const BASE: &str = include_str!("../scenarios/partition.toml");

    fn accepted_keeps_the_rules(s: &Scenario) -> std::result::Result<(), TestCaseError> {
        let names: BTreeSet<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        prop_assert_eq!(names.len(), s.nodes.len());
        prop_assert!(
            s.nodes
                .iter()
                .any(|n| n.name == s.job.client && n.role == "client")
        );
        prop_assert!(
            s.quorum() <= s.committee() && usize::from(s.quorum()) * 2 > usize::from(s.committee())
        );
        Ok(())
    }

    #[test]
    fn the_base_scenario_parses() {
        Scenario::parse(BASE).expect("shipped scenario");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Arbitrary text is refused with an error or read into a scenario that keeps the
        /// rules its checks promise (the fuzz target `scenario_toml` runs the same for long).
        #[test]
        fn any_text_is_refused_or_a_checked_scenario(text in "(\\PC|\n){0,300}") {
            if let Ok(s) = Scenario::parse(&text) {
                accepted_keeps_the_rules(&s)?;
            }
        }

        /// A shipped scenario with lines dropped, duplicated or replaced: refused or checked.
        #[test]
        fn a_damaged_scenario_is_refused_or_checked(
            edits in proptest::collection::vec((any::<usize>(), 0u8..3, "[a-z_]{1,10} = (-?[0-9]{1,4}|\"[a-z0-9]{0,4}\"|true)"), 1..5),
        ) {
            let mut lines: Vec<String> = BASE.lines().map(str::to_string).collect();
            for (at, op, line) in edits {
                let i = at % lines.len().max(1);
                match op {
                    0 if !lines.is_empty() => { lines.remove(i); }
                    1 if !lines.is_empty() => { let l = lines[i].clone(); lines.insert(i, l); }
                    _ => lines.insert(i.min(lines.len()), line),
                }
            }
            if let Ok(s) = Scenario::parse(&lines.join("\n")) {
                accepted_keeps_the_rules(&s)?;
            }
        }
    }
}
