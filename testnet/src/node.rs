//! One `gpuchain node` process of a testnet: how it is described ([`NodeSpec`]) and what the
//! harness knows about it once it runs ([`NodeProc`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, SystemTime};

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::chain::{ETH, USDC, tail_bytes};
use crate::events::Logged;
use crate::process::{Proc, Signal};

/// Where a node finds the swarm.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Bootstrap {
    /// Through the first node of the testnet that is running (none for the first node).
    #[default]
    First,
    /// Through the named node of the testnet.
    Node(String),
    /// Through these multiaddrs.
    Addrs(Vec<String>),
    /// Start a swarm of its own.
    Off,
}

/// What to start: one node's name, roles, chain wiring and funding.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Names the data dir (`<run dir>/<name>/`) and the log (`<run dir>/<name>.log`):
    /// ASCII letters, digits, `-` and `_`.
    pub name: String,
    /// `client`, `provider`, `verifier`: one `--role` each.
    pub roles: Vec<String>,
    /// Passed after the harness's own arguments.
    pub extra_args: Vec<String>,
    /// Set for the node process (after the harness's own `RUST_LOG`, so they override it).
    pub env: Vec<(String, String)>,
    /// Pass `--rpc-url`, `--escrow` and `--chain-id` of the testnet's chain.
    pub chain: bool,
    /// ETH (wei) the node's address gets before it starts (its balance is set to this).
    pub eth: U256,
    /// Test USDC (base units) minted to the node's address before it starts.
    pub usdc: U256,
    /// The node's Ethereum key; default: a new random one. Only used when the data dir has
    /// no keystore yet.
    pub eth_key: Option<PrivateKeySigner>,
    pub bootstrap: Bootstrap,
    /// How long the node may take to answer `/v1/status`.
    pub ready_timeout: Duration,
}

impl NodeSpec {
    /// A plain node: no roles, no chain, no funding, bootstrapping from the first node.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            roles: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
            chain: false,
            eth: U256::ZERO,
            usdc: U256::ZERO,
            eth_key: None,
            bootstrap: Bootstrap::First,
            ready_timeout: Duration::from_secs(60),
        }
    }

    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.roles.push(role.into());
        self
    }

    /// Wires the node to the chain and funds it with 10 ETH and 1,000 test USDC (change
    /// with [`NodeSpec::funded`]).
    pub fn on_chain(mut self) -> Self {
        self.chain = true;
        self.eth = U256::from(10 * ETH);
        self.usdc = U256::from(1_000 * USDC);
        self
    }

    pub fn funded(mut self, eth_wei: U256, usdc: U256) -> Self {
        self.eth = eth_wei;
        self.usdc = usdc;
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn eth_key(mut self, key: PrivateKeySigner) -> Self {
        self.eth_key = Some(key);
        self
    }

    pub fn bootstrap(mut self, bootstrap: Bootstrap) -> Self {
        self.bootstrap = bootstrap;
        self
    }

    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    pub(crate) fn check_name(&self) -> Result<()> {
        let ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            bail!(
                "node name {:?}: use ASCII letters, digits, '-' and '_' (it names a directory and a log file)",
                self.name
            );
        }
        Ok(())
    }
}

/// A node of the testnet: its files, its identity and (while it runs) its process.
#[derive(Debug)]
pub struct NodeProc {
    pub(crate) spec: NodeSpec,
    pub(crate) data_dir: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) password_file: PathBuf,
    pub(crate) signer: PrivateKeySigner,
    pub(crate) proc: Option<Proc>,
    pub(crate) pid: u32,
    pub(crate) api: SocketAddr,
    pub(crate) client: gpuchain_api::ApiClient,
    pub(crate) peer_id: String,
    pub(crate) listen: String,
    pub(crate) started_at: SystemTime,
    pub(crate) args: Vec<String>,
}

/// How long one API request may take before it counts as unanswered.
pub const API_TIMEOUT: Duration = Duration::from_secs(30);

impl NodeProc {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// stdout and stderr of every run of this node, appended across restarts.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    /// The control API's address (of the latest run).
    pub fn api_addr(&self) -> SocketAddr {
        self.api
    }

    /// The libp2p peer id; stays the same across restarts (it lives in the data dir).
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    /// A loopback tcp multiaddr ending in `/p2p/<peer id>`: what others bootstrap from.
    pub fn listen_addr(&self) -> &str {
        &self.listen
    }

    pub fn eth_address(&self) -> Address {
        self.signer.address()
    }

    /// The node's Ethereum key, for signing on its behalf (e.g. staking from a test).
    pub fn signer(&self) -> &PrivateKeySigner {
        &self.signer
    }

    /// The process id of the latest run (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// When the latest run was spawned.
    pub fn started_at(&self) -> SystemTime {
        self.started_at
    }

    /// The command-line arguments of the latest run, after the binary.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// True while the process runs (a paused one counts as running).
    pub fn is_running(&self) -> bool {
        self.proc.as_ref().is_some_and(Proc::is_running)
    }

    /// The exit status, reaping the process, once it has exited.
    pub fn try_exit(&self) -> Option<ExitStatus> {
        self.proc.as_ref().and_then(Proc::try_exit)
    }

    /// The last `max` bytes of the node's log.
    pub fn log_tail(&self, max: usize) -> String {
        tail_bytes(&self.log, max)
    }

    /// Every event in the node's log (all runs), in order.
    pub fn events(&self) -> Result<Vec<Logged>> {
        crate::events::read_events(&self.log)
    }

    /// A client of the node's control API (address and token of the latest run).
    pub fn api(&self) -> &gpuchain_api::ApiClient {
        &self.client
    }

    /// A request to the control API; any status code is returned.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value)> {
        self.request_with(method, path, body, &[]).await
    }

    /// A request with extra headers (a foreign `Origin`, a wrong token, …); any status
    /// code is returned.
    pub async fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Value)> {
        let r = self
            .client
            .send(method, path, body, headers)
            .await
            .with_context(|| format!("node {}", self.name()))?;
        Ok((r.status, r.body))
    }

    /// GET, expecting 200.
    pub async fn get(&self, path: &str) -> Result<Value> {
        self.expect_ok("GET", path, None).await
    }

    /// POST a JSON body, expecting 200.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.expect_ok("POST", path, Some(body)).await
    }

    async fn expect_ok(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let (code, v) = self.request(method, path, body).await?;
        if code != 200 {
            bail!("node {}: {method} {path} answered {code}: {v}", self.name());
        }
        Ok(v)
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<Value> {
        self.get("/v1/status").await
    }

    /// `GET /v1/peers`.
    pub async fn peers(&self) -> Result<Vec<Value>> {
        match self.get("/v1/peers").await? {
            Value::Array(peers) => Ok(peers),
            other => Err(anyhow!(
                "node {}: /v1/peers is not a list: {other}",
                self.name()
            )),
        }
    }

    /// The status's `connected_peers`.
    pub async fn connected_peers(&self) -> Result<u64> {
        let st = self.status().await?;
        st.get("connected_peers")
            .and_then(Value::as_u64)
            .ok_or_else(|| anyhow!("node {}: status has no connected_peers: {st}", self.name()))
    }

    pub(crate) fn signal(&self, sig: Signal) -> Result<()> {
        match &self.proc {
            Some(p) => p
                .signal(sig)
                .with_context(|| format!("node {}", self.name())),
            None => bail!("node {} is not running", self.name()),
        }
    }
}
