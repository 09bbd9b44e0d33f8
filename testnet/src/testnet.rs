//! The network: an optional [`Chain`] plus named node processes under one run dir, and what
//! is done to them (funding, staking, job submission, signals, restarts). Starting a node
//! process is in `launch.rs`, waiting on a node's events in `wait.rs`.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime};

use alloy::primitives::U256;
use anyhow::{Context, Result, anyhow, bail};

use crate::chain::Chain;
use crate::node::{NodeProc, NodeSpec};
use crate::process::Signal;

/// The keystore password every testnet node gets (through a file, as a real node would).
pub const PASSWORD: &str = "gpuchain-testnet";
/// How long hellos take to go round once a mesh is connected.
pub(crate) const HELLO_SETTLE: Duration = Duration::from_secs(2);
/// How long `stop` waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// What `gpuchain job submit` is given; amounts in tokens (e.g. "0.002"). The escrow draws
/// the committee from the verifiers staked in its pool.
#[derive(Debug, Clone)]
pub struct JobSubmission {
    pub file: PathBuf,
    pub budget: String,
    pub max_price: String,
    pub committee: u8,
    pub quorum: u8,
    pub verifier_fee: String,
    pub deadline_secs: u64,
    pub grace_secs: u64,
}

/// The `gpuchain` binary to run: `$GPUCHAIN_BIN`, else a `gpuchain` next to the running
/// executable or in its parent directory (where cargo puts it relative to test binaries in
/// `target/<profile>/deps/`).
pub fn binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("GPUCHAIN_BIN") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        bail!(
            "GPUCHAIN_BIN={} is not a file: point it at a built gpuchain binary",
            path.display()
        );
    }
    let exe = std::env::current_exe().context("cannot tell where the running executable is")?;
    let mut tried = Vec::new();
    for dir in exe.parent().into_iter().flat_map(|d| [Some(d), d.parent()]) {
        let Some(dir) = dir else { continue };
        let candidate = dir.join("gpuchain");
        if candidate.is_file() {
            return Ok(candidate);
        }
        tried.push(candidate.display().to_string());
    }
    bail!(
        "the gpuchain binary is not built (looked for {}): run `cargo build -p gpuchain` with the same target dir and profile, or set GPUCHAIN_BIN",
        tried.join(" and ")
    )
}

/// anvil (optional) and named node processes. Dropping it SIGKILLs and reaps every node,
/// then anvil, also when a test panics.
#[derive(Debug)]
pub struct Testnet {
    run_dir: PathBuf,
    binary: PathBuf,
    nodes: Vec<NodeProc>,
    /// The dashboard's view of the nodes, once one is served.
    board: Option<crate::dashboard::Board>,
    // Declared after `nodes` only for readability: Drop kills the nodes explicitly first, so
    // nodes never see their chain vanish while they still run.
    chain: Option<Chain>,
}

impl Testnet {
    /// A testnet without a chain, running `binary`, with its files under `run_dir`.
    pub fn new(run_dir: impl Into<PathBuf>, binary: impl Into<PathBuf>) -> Result<Self> {
        let run_dir = run_dir.into();
        std::fs::create_dir_all(&run_dir)
            .with_context(|| format!("cannot create the run dir {}", run_dir.display()))?;
        Ok(Self {
            run_dir,
            binary: binary.into(),
            nodes: Vec::new(),
            board: None,
            chain: None,
        })
    }

    /// Starts a chain in `run_dir` (see [`Chain::start`]) and a testnet around it.
    pub async fn with_new_chain(
        run_dir: impl Into<PathBuf>,
        binary: impl Into<PathBuf>,
        opts: crate::ChainOpts,
    ) -> Result<Self> {
        let net = Self::new(run_dir, binary)?;
        let chain = Chain::start(&net.run_dir, opts).await?;
        Ok(net.with_chain(chain))
    }

    /// Uses `chain` for funding and for nodes with [`NodeSpec::chain`].
    pub fn with_chain(mut self, chain: Chain) -> Self {
        self.chain = Some(chain);
        self
    }

    /// Waits until node `name` is connected to every other running node, then for the hellos
    /// (address ↔ peer, blob endpoints), which go out shortly after peers subscribe.
    pub async fn wait_mesh(&self, name: &str) -> Result<()> {
        let node = self.node(name)?;
        let others = self
            .nodes
            .iter()
            .filter(|n| n.name() != name && n.is_running())
            .count() as u64;
        crate::poll_until("the mesh to connect", Duration::from_secs(30), async || {
            Ok(node.connected_peers().await? >= others)
        })
        .await?;
        tokio::time::sleep(HELLO_SETTLE).await;
        Ok(())
    }

    /// Serves the network's dashboard (every node's events, the chain, the break-it
    /// controls) on loopback until the returned server is dropped; nodes started later are
    /// watched too.
    pub async fn serve_dashboard(
        &mut self,
        title: &str,
    ) -> Result<crate::dashboard::DashboardServer> {
        let chain = self.chain.as_ref().map(|c| c.deployer().clone());
        let board = crate::dashboard::Board::new(chain);
        for n in &self.nodes {
            board.watch(n);
        }
        self.board = Some(board.clone());
        crate::dashboard::serve(board, &self.run_dir, title).await
    }

    /// The dashboard's board, once one is served.
    pub fn board(&self) -> Option<&crate::dashboard::Board> {
        self.board.as_ref()
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    pub fn binary(&self) -> &Path {
        &self.binary
    }

    pub fn chain(&self) -> Result<&Chain> {
        self.chain
            .as_ref()
            .ok_or_else(|| anyhow!("this testnet has no chain"))
    }

    pub fn nodes(&self) -> &[NodeProc] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Result<&NodeProc> {
        self.nodes
            .iter()
            .find(|n| n.name() == name)
            .ok_or_else(|| anyhow!("no node named {name:?} in this testnet"))
    }

    fn index(&self, name: &str) -> Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.name() == name)
            .ok_or_else(|| anyhow!("no node named {name:?} in this testnet"))
    }

    /// Process ids of every running node, then anvil's.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .nodes
            .iter()
            .filter_map(|n| n.is_running().then_some(n.pid()))
            .collect();
        if let Some(chain) = &self.chain
            && chain.is_running()
        {
            pids.push(chain.pid());
        }
        pids
    }

    /// A node with `role` wired to this testnet's chain, paid in its test USDC.
    pub fn role_spec(&self, name: &str, role: &str) -> Result<NodeSpec> {
        Ok(NodeSpec::new(name)
            .role(role)
            .on_chain()
            .arg("--token")
            .arg(self.chain()?.usdc().to_string()))
    }

    /// Stakes `amount` (base units) for node `name` with its own key.
    pub async fn stake(&self, name: &str, amount: U256) -> Result<()> {
        let signer = self.node(name)?.signer().clone();
        self.chain()?
            .client(signer)
            .await?
            .register(amount)
            .await
            .with_context(|| format!("staking for {name}"))?;
        Ok(())
    }

    /// Stakes `amount` (base units) into the escrow's verifier pool for node `name` with its
    /// own key.
    pub async fn stake_verifier(&self, name: &str, amount: U256) -> Result<()> {
        let signer = self.node(name)?.signer().clone();
        self.chain()?
            .client(signer)
            .await?
            .register_verifier(amount)
            .await
            .with_context(|| format!("staking {name} as a verifier"))?;
        Ok(())
    }

    /// Spawns a verifier node from `spec` and stakes [`crate::VERIFIER_STAKE`] for it, so
    /// the escrow can draw it onto committees.
    pub async fn spawn_verifier(&mut self, spec: NodeSpec) -> Result<&NodeProc> {
        let name = spec.name.clone();
        self.spawn(spec).await?;
        self.stake_verifier(&name, U256::from(crate::VERIFIER_STAKE))
            .await?;
        self.node(&name)
    }

    /// `gpuchain job submit` through node `client`, as a user would; returns the job id.
    pub async fn submit_job(&self, client: &str, job: &JobSubmission) -> Result<U256> {
        let out = tokio::process::Command::new(self.binary())
            .arg("job")
            .arg("submit")
            .arg("--data-dir")
            .arg(self.node(client)?.data_dir())
            .arg("--spec")
            .arg(&job.file)
            .args(["--budget", &job.budget, "--max-price", &job.max_price])
            .arg("--committee")
            .arg(job.committee.to_string())
            .arg("--quorum")
            .arg(job.quorum.to_string())
            .arg("--verifier-fee")
            .arg(&job.verifier_fee)
            .arg("--deadline")
            .arg(job.deadline_secs.to_string())
            .arg("--grace")
            .arg(job.grace_secs.to_string())
            .env_remove("GPUCHAIN_DATA_DIR")
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "job submit failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        text.parse()
            .map_err(|e| anyhow!("job submit printed {text:?}, not a job id: {e}"))
    }

    /// Prepares the node's data dir, keys and funds, starts it, and waits until its API
    /// answers and it listens on loopback tcp.
    pub async fn spawn(&mut self, spec: NodeSpec) -> Result<&NodeProc> {
        spec.check_name()?;
        if self.nodes.iter().any(|n| n.name() == spec.name) {
            bail!(
                "a node named {:?} already exists in this testnet (use restart)",
                spec.name
            );
        }
        let node = self.launch(spec, None).await?;
        if let Some(b) = &self.board {
            b.watch(&node);
        }
        self.nodes.push(node);
        self.nodes
            .last()
            .ok_or_else(|| anyhow!("node list empty right after a push"))
    }

    /// Starts the node again on the same data dir (same keys, same peer id) with the same
    /// spec; a running node is stopped first (SIGTERM). The bootstrap address is worked out
    /// again, since the peers' ephemeral ports may have changed since the first start.
    pub async fn restart(&mut self, name: &str) -> Result<&NodeProc> {
        let i = self.index(name)?;
        if self.nodes[i].is_running() {
            self.stop(name).await?;
        }
        let spec = self.nodes[i].spec.clone();
        let node = self.launch(spec, Some(i)).await?;
        if let Some(b) = &self.board {
            b.watch(&node);
        }
        self.nodes[i] = node;
        Ok(&self.nodes[i])
    }

    /// SIGKILL (to the node's process group), then waits for it. Returns the moment just
    /// before the signal, for measuring how long others take to notice.
    pub fn kill9(&self, name: &str) -> Result<SystemTime> {
        let node = self.node(name)?;
        let proc = node.proc.as_ref().filter(|p| p.is_running());
        let Some(proc) = proc else {
            bail!("node {name} is not running");
        };
        let at = SystemTime::now();
        proc.kill();
        Ok(at)
    }

    /// SIGTERM, then SIGKILL if the node has not exited within [`STOP_GRACE`]. Returns its
    /// exit status (a signal status when it had to be killed).
    pub async fn stop(&self, name: &str) -> Result<ExitStatus> {
        let node = self.node(name)?;
        let Some(proc) = &node.proc else {
            bail!("node {name} is not running");
        };
        proc.terminate(STOP_GRACE)
            .await
            .ok_or_else(|| anyhow!("node {name} is not running"))
    }

    /// Cuts node `name` off from the nodes `from` (`blocked`), both ways, or heals the cut:
    /// every node involved must run with `--test-partition-control`. Links among the others
    /// stay, so gossip may still go round through them.
    pub async fn partition(&self, name: &str, from: &[String], blocked: bool) -> Result<()> {
        let node = self.node(name)?;
        let mut peers = Vec::new();
        for other in from {
            let o = self.node(other)?;
            o.post(
                "/v1/test/partition",
                &serde_json::json!({ "peers": [node.peer_id()], "blocked": blocked }),
            )
            .await
            .with_context(|| format!("partitioning {other} from {name}"))?;
            peers.push(o.peer_id().to_string());
        }
        node.post(
            "/v1/test/partition",
            &serde_json::json!({ "peers": peers, "blocked": blocked }),
        )
        .await
        .with_context(|| format!("partitioning {name} from {from:?}"))?;
        Ok(())
    }

    /// SIGSTOP: the node freezes without closing a socket, like a hung machine.
    pub fn pause(&self, name: &str) -> Result<()> {
        self.node(name)?.signal(Signal::Stop)
    }

    /// SIGCONT after [`Testnet::pause`].
    pub fn resume(&self, name: &str) -> Result<()> {
        self.node(name)?.signal(Signal::Cont)
    }

    /// SIGTERM to every running node, each given [`STOP_GRACE`]; for an orderly end of a
    /// long-running testnet. Dropping the testnet instead kills them outright.
    pub async fn stop_all(&self) {
        // Signal everyone first so that the nodes shut down side by side, not one by one.
        for node in &self.nodes {
            if node.is_running() {
                let _ = node.signal(Signal::Term);
                let _ = node.signal(Signal::Cont);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        for node in &self.nodes {
            if let Some(p) = &node.proc {
                p.terminate(deadline.saturating_duration_since(Instant::now()))
                    .await;
            }
        }
    }
}

impl Drop for Testnet {
    fn drop(&mut self) {
        for node in &self.nodes {
            if let Some(p) = &node.proc {
                p.kill();
            }
        }
        // anvil goes when `chain` drops, after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_safe_file_names() {
        assert!(NodeSpec::new("node-1_a").check_name().is_ok());
        for bad in ["", "../x", "a b", "a/b"] {
            assert!(NodeSpec::new(bad).check_name().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn on_chain_funds_by_default() {
        let spec = NodeSpec::new("c").on_chain();
        assert!(spec.chain);
        assert_eq!(spec.usdc, U256::from(1_000 * crate::chain::USDC));
    }
}
