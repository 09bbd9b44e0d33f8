//! A local chain: the npm-installed anvil with `TestUSDC` and `JobEscrow` deployed.
//!
//! anvil is spawned directly rather than through alloy's `Anvil` builder so that its output
//! goes to a log file in the run dir (alloy keeps reading it from a pipe) and so that it sits
//! in its own process group like the nodes. It binds port 0 and the harness reads the port
//! back from its "Listening on" line, which leaves no window for another process to take a
//! port picked in advance.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, U256};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow, bail};
use gpuchain_contracts::chain::{ChainClient, ChainConfig, StakeInfo};
use gpuchain_contracts::{EscrowParams, Toolchain, deploy_job_escrow, deploy_test_usdc};
use serde_json::Value;

use crate::process::Proc;
use crate::proxy::Proxy;

/// One USDC in base units (6 decimals).
pub const USDC: u64 = 1_000_000;
/// The escrow's minimum verifier stake on the testnets this crate deploys, and what each
/// testnet verifier stakes: a seat in the pool committees are drawn from.
pub const VERIFIER_STAKE: u64 = 50 * USDC;
/// One ether in wei.
pub const ETH: u128 = 1_000_000_000_000_000_000;

/// How to start the chain.
#[derive(Debug, Clone)]
pub struct ChainOpts {
    /// The anvil binary; default: the one `scripts/setup` installed in this checkout.
    pub anvil: Option<PathBuf>,
    /// `JobEscrow`'s minimum provider stake, in USDC base units.
    pub min_stake: U256,
    /// `JobEscrow`'s delay between `requestUnbond` and `withdrawStake`, in seconds.
    pub unbond_delay: u64,
    /// `JobEscrow`'s furthest deadline from a job's creation, in seconds.
    pub max_duration: u64,
    /// `JobEscrow`'s longest grace after a deadline, in seconds.
    pub max_grace: u64,
    /// `JobEscrow`'s decision window: how long after a client ends an epoch a quorum's accept
    /// of its next checkpoint still pays, in seconds.
    pub decision_window: u64,
    /// `JobEscrow`'s minimum verifier stake (a seat in the pool committees are drawn from),
    /// in USDC base units.
    pub min_verifier_stake: U256,
    /// Mine a block every this many seconds instead of one per transaction.
    pub block_time_secs: Option<u64>,
    /// Passed to anvil after the harness's own arguments.
    pub extra_args: Vec<String>,
    /// How long anvil may take to listen.
    pub ready_timeout: Duration,
    /// Put a [`Proxy`] between the nodes and anvil, so that a test can take the chain RPC
    /// away from every node and give it back ([`Chain::cut_rpc`]); the harness itself always
    /// talks to anvil directly.
    pub rpc_proxy: bool,
}

impl Default for ChainOpts {
    fn default() -> Self {
        Self {
            anvil: None,
            min_stake: U256::from(100 * USDC),
            unbond_delay: 3600,
            max_duration: 30 * 24 * 3600,
            max_grace: 24 * 3600,
            decision_window: 120,
            min_verifier_stake: U256::from(VERIFIER_STAKE),
            block_time_secs: None,
            extra_args: Vec::new(),
            ready_timeout: Duration::from_secs(30),
            rpc_proxy: false,
        }
    }
}

/// anvil plus the deployed contracts; anvil is killed when this is dropped.
#[derive(Debug)]
pub struct Chain {
    proc: Proc,
    log: PathBuf,
    rpc_url: String,
    chain_id: u64,
    escrow: Address,
    usdc: Address,
    deploy_block: u64,
    dev_keys: Vec<PrivateKeySigner>,
    deployer: ChainClient,
    proxy: Option<Proxy>,
}

impl Chain {
    /// Starts anvil (log: `run_dir/anvil.log`) and deploys `TestUSDC` and `JobEscrow` from
    /// anvil's first dev account.
    pub async fn start(run_dir: &Path, opts: ChainOpts) -> Result<Chain> {
        std::fs::create_dir_all(run_dir)
            .with_context(|| format!("cannot create the run dir {}", run_dir.display()))?;
        let anvil = match &opts.anvil {
            Some(path) => path.clone(),
            None => Toolchain::from_build_checkout().anvil()?,
        };
        let log = run_dir.join("anvil.log");
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&anvil);
        cmd.args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(secs) = opts.block_time_secs {
            cmd.args(["--block-time", &secs.to_string()]);
        }
        cmd.args(&opts.extra_args);
        let proc = Proc::spawn(&mut cmd)
            .with_context(|| format!("cannot start anvil ({})", anvil.display()))?;

        let (addr, dev_keys) = wait_for_anvil(&proc, &log, opts.ready_timeout).await?;
        let rpc_url = format!("http://{addr}");
        let proxy = if opts.rpc_proxy {
            let upstream = addr
                .parse()
                .with_context(|| format!("anvil listens on {addr:?}, not an address"))?;
            Some(Proxy::start(upstream).await?)
        } else {
            None
        };
        let deployer_key = dev_keys
            .first()
            .cloned()
            .ok_or_else(|| anyhow!("anvil printed no dev keys:\n{}", tail(&log)))?;

        let wallet = ProviderBuilder::new()
            .wallet(EthereumWallet::from(deployer_key.clone()))
            .connect_http(rpc_url.parse().context("anvil URL")?);
        let chain_id = wallet
            .get_chain_id()
            .await
            .context("eth_chainId on anvil")?;
        let usdc = *deploy_test_usdc(&wallet).await?.address();
        let params = EscrowParams {
            min_stake: opts.min_stake,
            unbond_delay: opts.unbond_delay,
            max_duration: opts.max_duration,
            max_grace: opts.max_grace,
            decision_window: opts.decision_window,
            min_verifier_stake: opts.min_verifier_stake,
        };
        let escrow = *deploy_job_escrow(&wallet, usdc, params).await?.address();
        let deploy_block = wallet.get_block_number().await.context("eth_blockNumber")?;
        let deployer = ChainClient::connect(ChainConfig::new(&rpc_url, escrow, usdc), deployer_key)
            .await
            .context("connecting the deployer's chain client")?;
        Ok(Chain {
            proc,
            log,
            rpc_url,
            chain_id,
            escrow,
            usdc,
            deploy_block,
            dev_keys,
            deployer,
            proxy,
        })
    }

    pub fn rpc_url(&self) -> &str {
        &self.rpc_url
    }

    /// The RPC URL nodes are given: the proxy's when there is one.
    pub fn node_rpc_url(&self) -> String {
        match &self.proxy {
            Some(p) => format!("http://{}", p.addr()),
            None => self.rpc_url.clone(),
        }
    }

    /// Takes the chain RPC away from every node (see [`ChainOpts::rpc_proxy`]).
    pub fn cut_rpc(&self) -> Result<()> {
        self.rpc_proxy()?.cut();
        Ok(())
    }

    /// Gives the chain RPC back after [`Chain::cut_rpc`].
    pub fn restore_rpc(&self) -> Result<()> {
        self.rpc_proxy()?.restore();
        Ok(())
    }

    fn rpc_proxy(&self) -> Result<&Proxy> {
        self.proxy.as_ref().ok_or_else(|| {
            anyhow!("this chain was started without an RPC proxy (ChainOpts::rpc_proxy)")
        })
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The `JobEscrow` address.
    pub fn escrow(&self) -> Address {
        self.escrow
    }

    /// The `TestUSDC` address (also the escrow's stake token).
    pub fn usdc(&self) -> Address {
        self.usdc
    }

    /// The block holding the last deployment: where an event follower should start.
    pub fn deploy_block(&self) -> u64 {
        self.deploy_block
    }

    /// anvil's pre-funded dev accounts; the first deployed the contracts and mints.
    pub fn dev_keys(&self) -> &[PrivateKeySigner] {
        &self.dev_keys
    }

    /// anvil's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The deployer's chain client (owner of the contracts, minter of test USDC).
    pub fn deployer(&self) -> &ChainClient {
        &self.deployer
    }

    /// What a node given `--rpc-url`, `--escrow` and the token would configure.
    pub fn config(&self) -> ChainConfig {
        ChainConfig::new(&self.rpc_url, self.escrow, self.usdc)
    }

    /// A chain client that signs with `signer` (for acting on a node's behalf, e.g. staking).
    pub async fn client(&self, signer: PrivateKeySigner) -> Result<ChainClient> {
        ChainClient::connect(self.config(), signer)
            .await
            .context("connecting a chain client")
    }

    /// Sets `address`'s ETH balance to `eth_wei` (when non-zero) and mints it `usdc` test
    /// USDC base units (when non-zero).
    pub async fn fund(&self, address: Address, eth_wei: U256, usdc: U256) -> Result<()> {
        if !eth_wei.is_zero() {
            self.rpc("anvil_setBalance", serde_json::json!([address, eth_wei]))
                .await
                .with_context(|| format!("setting the ETH balance of {address}"))?;
        }
        if !usdc.is_zero() {
            self.deployer
                .mint(address, usdc)
                .await
                .with_context(|| format!("minting {usdc} test USDC to {address}"))?;
        }
        Ok(())
    }

    pub async fn eth_balance(&self, address: Address) -> Result<U256> {
        Ok(self.deployer.eth_balance(address).await?)
    }

    pub async fn usdc_balance(&self, address: Address) -> Result<U256> {
        Ok(self.deployer.token_balance(address).await?)
    }

    /// What `address` can withdraw from the escrow, in test USDC.
    pub async fn withdrawable(&self, address: Address) -> Result<U256> {
        Ok(self.deployer.withdrawable(address, self.usdc).await?)
    }

    /// The escrow's own test USDC balance: budgets and stakes it holds.
    pub async fn escrow_usdc_balance(&self) -> Result<U256> {
        self.usdc_balance(self.escrow).await
    }

    pub async fn stake_of(&self, provider: Address) -> Result<StakeInfo> {
        Ok(self.deployer.stake_of(provider).await?)
    }

    /// Any JSON-RPC call, e.g. `evm_increaseTime`, `evm_mine`, `anvil_setAutomine`.
    pub async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        let provider = ProviderBuilder::new().connect_http(self.rpc_url.parse()?);
        provider
            .raw_request::<_, Value>(method.to_string().into(), params)
            .await
            .with_context(|| format!("{method} on {}", self.rpc_url))
    }

    /// True while anvil runs.
    pub fn is_running(&self) -> bool {
        self.proc.is_running()
    }
}

/// Waits for anvil's "Listening on ADDR" line; returns ADDR and the dev keys it printed.
async fn wait_for_anvil(
    proc: &Proc,
    log: &Path,
    timeout: Duration,
) -> Result<(String, Vec<PrivateKeySigner>)> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Listening on "))
        {
            return Ok((addr.trim().to_string(), dev_keys(&text)?));
        }
        if let Some(status) = proc.try_exit() {
            bail!(
                "anvil exited before listening ({status}); its log {}:\n{}",
                log.display(),
                tail(log)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "anvil did not listen within {timeout:?}; its log {}:\n{}",
                log.display(),
                tail(log)
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The "(i) 0x…" lines of anvil's "Private Keys" banner section, in order.
fn dev_keys(banner: &str) -> Result<Vec<PrivateKeySigner>> {
    let Some(start) = banner.find("Private Keys") else {
        return Ok(Vec::new());
    };
    banner[start..]
        .lines()
        .skip(1)
        .map(str::trim)
        .skip_while(|l| !l.starts_with('('))
        .take_while(|l| l.starts_with('('))
        .map(|l| {
            let hex = l.split_whitespace().nth(1).unwrap_or_default();
            hex.parse::<PrivateKeySigner>()
                .map_err(|e| anyhow!("anvil printed an unusable dev key line {l:?}: {e}"))
        })
        .collect()
}

pub(crate) fn tail(path: &Path) -> String {
    tail_bytes(path, 4000)
}

pub(crate) fn tail_bytes(path: &Path, max: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    String::from_utf8_lossy(&text[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dev_keys_from_the_banner() {
        let banner = "Available Accounts\n==================\n\n(0) 0xf39F (10000 ETH)\n\nPrivate Keys\n==================\n\n(0) 0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80\n(1) 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\n\nWallet\n";
        let keys = dev_keys(banner).expect("keys");
        assert_eq!(keys.len(), 2);
        assert_eq!(
            keys[0].address().to_string(),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
    }
}
