//! The network: an optional [`Chain`] plus named node processes under one run dir.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::chain::Chain;
use crate::node::{API_TIMEOUT, Bootstrap, NodeProc, NodeSpec};
use crate::process::{Proc, Signal};

/// The keystore password every testnet node gets (through a file, as a real node would).
pub const PASSWORD: &str = "gpuchain-testnet";
/// The node's keystore, relative to its data dir (the node's `keys::KEYSTORE_DIR` and
/// `KEYSTORE_FILE`).
const KEYSTORE: (&str, &str) = ("keystore", "node.json");
use gpuchain_api::ADDR_FILE as API_ADDR_FILE;
/// How long a bootstrapping node waits for its bootstrap peer.
const BOOTSTRAP_TIMEOUT_SECS: u64 = 20;
/// How long `stop` waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often log files and the API are polled while waiting.
const POLL: Duration = Duration::from_millis(50);

/// The `gpuchain` binary to run: `$GPUCHAIN_BIN`, else a `gpuchain` next to the running
/// executable or in its parent directory (where cargo puts it relative to test binaries in
/// `target/<profile>/deps/`).
/// What `gpuchain job submit` is given; amounts in tokens (e.g. "0.002"), verifiers by node name.
#[derive(Debug, Clone)]
pub struct JobSubmission {
    pub file: PathBuf,
    pub budget: String,
    pub max_price: String,
    pub verifiers: Vec<String>,
    pub quorum: u8,
    pub deadline_secs: u64,
    pub grace_secs: u64,
}

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

    /// `gpuchain job submit` through node `client`, as a user would; returns the job id.
    pub async fn submit_job(&self, client: &str, job: &JobSubmission) -> Result<U256> {
        let verifiers = job
            .verifiers
            .iter()
            .map(|v| self.node(v).map(|n| n.eth_address().to_string()))
            .collect::<Result<Vec<_>>>()?;
        let out = tokio::process::Command::new(self.binary())
            .arg("job")
            .arg("submit")
            .arg("--data-dir")
            .arg(self.node(client)?.data_dir())
            .arg("--spec")
            .arg(&job.file)
            .args(["--budget", &job.budget, "--max-price", &job.max_price])
            .arg("--verifiers")
            .arg(verifiers.join(","))
            .arg("--quorum")
            .arg(job.quorum.to_string())
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

    /// Polls the node's log until a JSON line matches `pred`; returns that line. Fails after
    /// `timeout`, or at once when the node has exited without logging one, quoting its log.
    pub async fn wait_event(
        &self,
        name: &str,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        let node = self.node(name)?;
        loop {
            let running = node.is_running();
            if let Some(line) = node.find_event(&pred)? {
                return Ok(line);
            }
            if !running {
                bail!(
                    "node {name} is not running and logged no matching event; its log {}:\n{}",
                    node.log_path().display(),
                    node.log_tail(4000)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {name} logged no matching event within {timeout:?}; its log {}:\n{}",
                    node.log_path().display(),
                    node.log_tail(4000)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Builds the node's files and process; `replacing` is the index of the node being
    /// restarted (its log is appended to, and it is no bootstrap candidate for itself).
    async fn launch(&self, spec: NodeSpec, replacing: Option<usize>) -> Result<NodeProc> {
        if !self.binary.is_file() {
            bail!(
                "the gpuchain binary {} does not exist: run `cargo build -p gpuchain` or set GPUCHAIN_BIN",
                self.binary.display()
            );
        }
        let name = spec.name.clone();
        let data_dir = self.run_dir.join(&name);
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("cannot create the data dir {}", data_dir.display()))?;
        let password_file = self.run_dir.join(format!("{name}.password"));
        write_private(&password_file, PASSWORD.as_bytes())?;
        let signer = ensure_keystore(&data_dir, PASSWORD, spec.eth_key.as_ref())?;

        let chain_flags = if spec.chain {
            let chain = self
                .chain()
                .with_context(|| format!("node {name} asks for the chain (NodeSpec::chain)"))?;
            Some((
                chain.rpc_url().to_string(),
                chain.escrow(),
                chain.chain_id(),
            ))
        } else {
            None
        };
        if !spec.eth.is_zero() || !spec.usdc.is_zero() {
            let chain = self
                .chain()
                .with_context(|| format!("node {name} asks for funds"))?;
            chain
                .fund(signer.address(), spec.eth, spec.usdc)
                .await
                .with_context(|| format!("funding node {name}"))?;
        }

        let bootstrap = self.bootstrap_addrs(&spec, replacing)?;
        let args = node_args(
            &spec,
            &data_dir,
            &password_file,
            &bootstrap,
            chain_flags.as_ref().map(|(u, e, c)| (u.as_str(), *e, *c)),
        );

        let log = self.run_dir.join(format!("{name}.log"));
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .truncate(false)
            .open(&log)
            .with_context(|| format!("cannot open the log {}", log.display()))?;
        if replacing.is_none() {
            out.set_len(0)
                .with_context(|| format!("cannot truncate {}", log.display()))?;
        }
        let err = out.try_clone()?;
        // A stale address from an earlier run would be read before the node removes it.
        let api_file = data_dir.join(API_ADDR_FILE);
        match std::fs::remove_file(&api_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove {}", api_file.display()));
            }
        }

        let mut cmd = Command::new(&self.binary);
        cmd.args(&args).stdin(Stdio::null()).stdout(out).stderr(err);
        // Settings from the caller's environment would silently change every node.
        for (key, _) in std::env::vars_os() {
            if is_node_setting(&key) {
                cmd.env_remove(&key);
            }
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let started_at = SystemTime::now();
        let proc = Proc::spawn(&mut cmd)
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        let pid = proc.pid();
        let ready = wait_ready(&proc, &name, &data_dir, &log, spec.ready_timeout).await?;
        if let Some(reported) = ready.eth_address
            && reported != signer.address()
        {
            bail!(
                "node {name} reports Ethereum address {reported}, but its keystore holds {}: the harness and the node disagree on the keystore location",
                signer.address()
            );
        }
        Ok(NodeProc {
            spec,
            data_dir,
            log,
            password_file,
            signer,
            proc: Some(proc),
            pid,
            api: ready.client.addr(),
            client: ready.client.with_timeout(API_TIMEOUT),
            peer_id: ready.peer_id,
            listen: ready.listen,
            started_at,
            args,
        })
    }

    fn bootstrap_addrs(&self, spec: &NodeSpec, replacing: Option<usize>) -> Result<Vec<String>> {
        let running = |i: usize, n: &NodeProc| {
            Some(i) != replacing && n.is_running() && n.name() != spec.name
        };
        Ok(match &spec.bootstrap {
            Bootstrap::Off => Vec::new(),
            Bootstrap::Addrs(addrs) => addrs.clone(),
            Bootstrap::First => self
                .nodes
                .iter()
                .enumerate()
                .find(|(i, n)| running(*i, n))
                .map(|(_, n)| vec![n.listen_addr().to_string()])
                .unwrap_or_default(),
            Bootstrap::Node(other) => {
                let (i, n) = self
                    .nodes
                    .iter()
                    .enumerate()
                    .find(|(_, n)| n.name() == other)
                    .ok_or_else(|| {
                        anyhow!(
                            "node {}: bootstrap node {other:?} does not exist",
                            spec.name
                        )
                    })?;
                if !running(i, n) {
                    bail!(
                        "node {}: bootstrap node {other:?} is not running",
                        spec.name
                    );
                }
                vec![n.listen_addr().to_string()]
            }
        })
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

/// Variables the node reads (flags' env twins, the password, the log filter).
fn is_node_setting(key: &OsString) -> bool {
    key.to_str()
        .is_some_and(|k| k.starts_with("GPUCHAIN_") || k == "RUST_LOG")
}

/// The node's command line after the binary.
fn node_args(
    spec: &NodeSpec,
    data_dir: &Path,
    password_file: &Path,
    bootstrap: &[String],
    chain: Option<(&str, Address, u64)>,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--log-format".into(),
        "json".into(),
        "node".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--api".into(),
        "127.0.0.1:0".into(),
        "--listen".into(),
        "/ip4/127.0.0.1/tcp/0".into(),
        "--blob-bind".into(),
        "127.0.0.1:0".into(),
        "--keystore-password-file".into(),
        password_file.display().to_string(),
    ];
    for role in &spec.roles {
        args.extend(["--role".into(), role.clone()]);
    }
    for addr in bootstrap {
        args.extend(["--bootstrap".into(), addr.clone()]);
    }
    if !bootstrap.is_empty() {
        args.extend([
            "--bootstrap-timeout-secs".into(),
            BOOTSTRAP_TIMEOUT_SECS.to_string(),
        ]);
    }
    if let Some((rpc_url, escrow, chain_id)) = chain {
        args.extend([
            "--rpc-url".into(),
            rpc_url.to_string(),
            "--escrow".into(),
            escrow.to_string(),
            "--chain-id".into(),
            chain_id.to_string(),
        ]);
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// Opens the node's keystore, or writes one (with `key`, or a new random key) where the
/// node looks for it, so that the harness knows the node's address and key before it runs.
///
/// This writes the keystore file itself rather than calling the node crate's key code:
/// the node binary will depend on this crate for `gpuchain testnet`, and a dependency back
/// would be a cycle. The startup check against `/v1/status` catches any drift.
fn ensure_keystore(
    data_dir: &Path,
    password: &str,
    key: Option<&PrivateKeySigner>,
) -> Result<PrivateKeySigner> {
    let dir = data_dir.join(KEYSTORE.0);
    let path = dir.join(KEYSTORE.1);
    if path.exists() {
        return PrivateKeySigner::decrypt_keystore(&path, password)
            .map_err(|e| anyhow!("cannot open the keystore {}: {e}", path.display()));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let key = key.cloned().unwrap_or_else(PrivateKeySigner::random);
    let (signer, _) = PrivateKeySigner::encrypt_keystore(
        &dir,
        &mut rand08::thread_rng(),
        key.to_bytes(),
        password,
        Some(KEYSTORE.1),
    )
    .map_err(|e| anyhow!("cannot write the keystore {}: {e}", path.display()))?;
    restrict(&path)?;
    Ok(signer)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    restrict(path)
}

fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))
}

struct Ready {
    client: gpuchain_api::ApiClient,
    peer_id: String,
    listen: String,
    eth_address: Option<Address>,
}

/// Waits until `api.addr` exists, `/v1/status` answers 200 and the node listens on loopback
/// tcp. Fails early when the process exits.
async fn wait_ready(
    proc: &Proc,
    name: &str,
    data_dir: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<Ready> {
    let deadline = Instant::now() + timeout;
    let api_file = data_dir.join(API_ADDR_FILE);
    let mut last = String::from("no api.addr yet");
    loop {
        if let Some(status) = proc.try_exit() {
            bail!(
                "node {name} exited during startup ({status}); its log {}:\n{}",
                log.display(),
                crate::chain::tail(log)
            );
        }
        // The node writes its token before its address, so both are there once this is.
        if api_file.exists() {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(200), API_TIMEOUT);
            match gpuchain_api::ApiClient::for_data_dir(data_dir) {
                Ok(client) => {
                    let client = client.with_timeout(left);
                    match client.get::<Value>("/v1/status").await {
                        Ok(st) => match ready_from_status(client, &st) {
                            Some(ready) => return Ok(ready),
                            None => last = format!("status has no loopback tcp listener yet: {st}"),
                        },
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "node {name} was not ready within {timeout:?} ({last}); its log {}:\n{}",
                log.display(),
                crate::chain::tail(log)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

fn ready_from_status(client: gpuchain_api::ApiClient, st: &Value) -> Option<Ready> {
    let peer_id = st.get("peer_id")?.as_str()?.to_string();
    let tcp = st
        .get("listen_addrs")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.starts_with("/ip4/127.0.0.1/tcp/"))?;
    let listen = if tcp.contains("/p2p/") {
        tcp.to_string()
    } else {
        format!("{tcp}/p2p/{peer_id}")
    };
    let eth_address = st
        .get("eth_address")
        .and_then(Value::as_str)
        .and_then(|a| a.parse().ok());
    Some(Ready {
        client,
        peer_id,
        listen,
        eth_address,
    })
}

/// Polls `check` until it returns true; fails after `timeout` naming `what` and the last
/// error `check` returned (errors count as "not yet": a node may be busy or restarting).
pub async fn poll_until(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::U256;

    #[test]
    fn args_carry_roles_bootstrap_chain_and_extras_in_order() {
        let spec = NodeSpec::new("p1")
            .role("provider")
            .role("verifier")
            .arg("--heartbeat-period-ms")
            .arg("50");
        let escrow: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            .parse()
            .expect("address");
        let args = node_args(
            &spec,
            Path::new("/run/p1"),
            Path::new("/run/p1.password"),
            &["/ip4/127.0.0.1/tcp/1/p2p/X".to_string()],
            Some(("http://127.0.0.1:9", escrow, 31337)),
        );
        let line = args.join(" ");
        assert!(line.starts_with("--log-format json node --data-dir /run/p1 --api 127.0.0.1:0 --listen /ip4/127.0.0.1/tcp/0 --blob-bind 127.0.0.1:0 --keystore-password-file /run/p1.password"), "{line}");
        assert!(line.contains("--role provider --role verifier --bootstrap /ip4/127.0.0.1/tcp/1/p2p/X --bootstrap-timeout-secs 20"), "{line}");
        assert!(
            line.ends_with(&format!(
                "--rpc-url http://127.0.0.1:9 --escrow {escrow} --chain-id 31337 --heartbeat-period-ms 50"
            )),
            "{line}"
        );

        let plain = node_args(
            &NodeSpec::new("n"),
            Path::new("d"),
            Path::new("p"),
            &[],
            None,
        );
        let line = plain.join(" ");
        assert!(!line.contains("--bootstrap"), "{line}");
        assert!(!line.contains("--rpc-url"), "{line}");
        assert!(!line.contains("--role"), "{line}");
    }

    #[test]
    fn keystore_is_written_once_and_reopened() {
        let dir = tempfile::tempdir().expect("tmp");
        let key = PrivateKeySigner::random();
        let a = ensure_keystore(dir.path(), "pw", Some(&key)).expect("create");
        assert_eq!(a.address(), key.address());
        let b = ensure_keystore(dir.path(), "pw", None).expect("reopen");
        assert_eq!(b.to_bytes(), key.to_bytes());
        let e = ensure_keystore(dir.path(), "wrong", None).expect_err("wrong password");
        assert!(e.to_string().contains("keystore"), "{e}");
    }

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

    #[test]
    fn ready_needs_a_loopback_tcp_listener() {
        let api = gpuchain_api::ApiClient::new("127.0.0.1:1".parse().expect("addr"), None);
        let st = serde_json::json!({
            "peer_id": "12D3KooX",
            "eth_address": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "listen_addrs": ["/ip4/127.0.0.1/udp/5/quic-v1", "/ip4/127.0.0.1/tcp/4001"],
        });
        let r = ready_from_status(api.clone(), &st).expect("ready");
        assert_eq!(r.listen, "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooX");
        assert!(r.eth_address.is_some());
        let st = serde_json::json!({"peer_id": "x", "listen_addrs": []});
        assert!(ready_from_status(api, &st).is_none());
    }
}
