//! The one-shot subcommands: `job submit|status`, `provider register|status`, `withdraw`.
//! `job submit` goes through a running client node (it must stay up to run the job); the
//! others talk to the chain directly with the node's key.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use gpuchain_contracts::chain::{ChainClient, ChainConfig};
use gpuchain_protocol::{Address, U256};
use serde_json::{Value, json};

use crate::config::{TOKEN_DECIMALS, format_amount, parse_amount, read_keystore_password};

/// How long `job submit` waits for the node to pack the data and the chain to take the job.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Args, Clone)]
pub struct ChainArgs {
    /// JSON-RPC URL of the chain holding the escrow.
    #[arg(long, env = "GPUCHAIN_RPC_URL", value_name = "URL")]
    pub rpc_url: String,
    /// JobEscrow contract address.
    #[arg(long, env = "GPUCHAIN_ESCROW", value_name = "ADDRESS")]
    pub escrow: String,
    /// Payment token. Default: the escrow's stake token.
    #[arg(long, env = "GPUCHAIN_TOKEN", value_name = "ADDRESS")]
    pub token: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct KeyArgs {
    /// The node's data dir (its keystore signs).
    #[arg(long, env = "GPUCHAIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// File with the keystore password (or set GPUCHAIN_KEYSTORE_PASSWORD).
    #[arg(long, env = "GPUCHAIN_KEYSTORE_PASSWORD_FILE", value_name = "FILE")]
    pub keystore_password_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a job through a running client node: approve, createJob, publish the job's
    /// data as blobs, gossip the offer. Prints the job id.
    Submit(Box<SubmitArgs>),
    /// A job as the escrow records it (and as the client node sees it, when given one).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file (TOML): model, steps, checkpoint interval, data, thresholds.
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
    /// Most the job may spend, in tokens (e.g. `5` USDC); the rest is refunded.
    #[arg(long, value_name = "AMOUNT")]
    pub budget: String,
    /// Highest price per step accepted from a provider, in tokens (e.g. `0.003`).
    #[arg(long, value_name = "AMOUNT")]
    pub max_price: String,
    /// Verifier addresses, comma-separated.
    #[arg(long, value_delimiter = ',', required = true, value_name = "ADDRESS")]
    pub verifiers: Vec<String>,
    /// Votes needed to accept or reject a checkpoint.
    #[arg(long)]
    pub quorum: u8,
    /// Seconds from now until the job's deadline.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub deadline: u64,
    /// Seconds after the deadline before anyone may expire the job and refund it.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub grace: u64,
    #[command(flatten)]
    pub node: NodeRef,
}

/// Which running node to ask: its data dir (the API address is read from it) or the address.
#[derive(Debug, Args, Clone)]
pub struct NodeRef {
    /// Data dir of the running node.
    #[arg(long, env = "GPUCHAIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Control API address of the running node (overrides --data-dir).
    #[arg(long, value_name = "ADDR")]
    pub api: Option<std::net::SocketAddr>,
}

impl NodeRef {
    fn addr(&self) -> Result<Option<std::net::SocketAddr>> {
        match (&self.api, &self.data_dir) {
            (Some(a), _) => Ok(Some(*a)),
            (None, Some(d)) => crate::api_client::api_addr_of(d).map(Some),
            (None, None) => Ok(None),
        }
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job id `job submit` printed.
    pub job_id: String,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Optionally, the client node, for its view (phase, last heartbeat step).
    #[arg(long, value_name = "ADDR")]
    pub api: Option<std::net::SocketAddr>,
}

#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Stake tokens so the escrow will assign jobs to this node's key.
    Register(RegisterArgs),
    /// This key's stake and withdrawable balance.
    Status(ProviderStatusArgs),
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// Tokens to stake (e.g. `100`); at least the escrow's minimum stake in total.
    #[arg(long, value_name = "AMOUNT")]
    pub stake: String,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}

#[derive(Debug, Args)]
pub struct ProviderStatusArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WithdrawArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}

fn parse_address(s: &str, flag: &str) -> Result<Address> {
    s.parse().map_err(|e| {
        anyhow!("{flag} {s:?} is not an Ethereum address ({e}); give 0x followed by 40 hex digits")
    })
}

fn signer(key: &KeyArgs) -> Result<alloy_signer_local::PrivateKeySigner> {
    let store = key.data_dir.join(crate::keys::KEYSTORE_DIR);
    if !store.join(crate::keys::KEYSTORE_FILE).is_file() {
        bail!(
            "no node key in {}: run `gpuchain node --data-dir {}` once to create it",
            key.data_dir.display(),
            key.data_dir.display()
        );
    }
    let pw = read_keystore_password(key.keystore_password_file.as_deref())?;
    Ok(crate::keys::load_or_create(&key.data_dir, &pw)?.eth)
}

/// A chain client for `key` (or a read-only one with a throwaway key), from the flags.
pub async fn connect(
    chain: &ChainArgs,
    key: Option<alloy_signer_local::PrivateKeySigner>,
) -> Result<ChainClient> {
    let escrow = parse_address(&chain.escrow, "--escrow")?;
    let token = match &chain.token {
        Some(t) => Some(parse_address(t, "--token")?),
        None => None,
    };
    let key = key.unwrap_or_else(alloy_signer_local::PrivateKeySigner::random);
    connect_to(&chain.rpc_url, escrow, token, key).await
}

/// A chain client paying in `token`, or in the escrow's stake token when none is given.
pub async fn connect_to(
    rpc_url: &str,
    escrow: Address,
    token: Option<Address>,
    key: alloy_signer_local::PrivateKeySigner,
) -> Result<ChainClient> {
    let token = match token {
        Some(t) => t,
        None => {
            let probe = ChainClient::connect(
                // Any deployed contract will do until we know the token: the escrow itself.
                ChainConfig::new(rpc_url, escrow, escrow),
                key.clone(),
            )
            .await?;
            probe.stake_token().await?
        }
    };
    Ok(ChainClient::connect(ChainConfig::new(rpc_url, escrow, token), key).await?)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().map_err(|e| anyhow!("cannot start the async runtime: {e}"))
}

pub fn run_job(cmd: JobCommand) -> Result<()> {
    runtime()?.block_on(async {
        match cmd {
            JobCommand::Submit(a) => submit(*a).await,
            JobCommand::Status(a) => status(a).await,
        }
    })
}

async fn submit(a: SubmitArgs) -> Result<()> {
    let addr = a.node.addr()?.ok_or_else(|| {
        anyhow!("which node submits the job? pass --data-dir DIR of a running client node, or --api ADDR")
    })?;
    let budget = parse_amount(&a.budget, TOKEN_DECIMALS, "--budget")?;
    let max_price = parse_amount(&a.max_price, TOKEN_DECIMALS, "--max-price")?;
    let verifiers = a
        .verifiers
        .iter()
        .map(|v| parse_address(v, "--verifiers"))
        .collect::<Result<Vec<_>>>()?;
    let spec_path = std::path::absolute(&a.spec)
        .with_context(|| format!("bad --spec path {}", a.spec.display()))?;
    if !spec_path.is_file() {
        bail!("--spec {}: no such file", a.spec.display());
    }
    let body = json!({
        "spec_path": spec_path,
        "budget": budget,
        "max_price_per_step": max_price,
        "verifiers": verifiers,
        "quorum": a.quorum,
        "deadline_secs": a.deadline,
        "grace_secs": a.grace,
    });
    eprintln!(
        "submitting {} (packing data, approving, createJob)…",
        a.spec.display()
    );
    let reply = crate::api_client::post(addr, "/v1/jobs", &body, SUBMIT_TIMEOUT).await?;
    let job_id = reply
        .get("job_id")
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .ok_or_else(|| anyhow!("the node answered without a job id: {reply}"))?;
    let id = U256::from_str_radix(job_id.trim_start_matches("0x"), 16)
        .map(|v| v.to_string())
        .unwrap_or(job_id);
    println!("{id}");
    Ok(())
}

async fn status(a: StatusArgs) -> Result<()> {
    let job_id: U256 = a.job_id.parse().map_err(|e| {
        anyhow!(
            "{:?} is not a job id ({e}); give the number `job submit` printed",
            a.job_id
        )
    })?;
    let chain = connect(&a.chain, None).await?;
    let v = chain.job(job_id).await?;
    let paid = v.deposit.saturating_sub(v.remaining);
    let status = format!("{:?}", v.status);
    let mut out = json!({
        "job_id": job_id.to_string(),
        "status": status,
        "epoch": v.epoch,
        "provider": v.provider.to_string(),
        "price_per_step": format_amount(v.pricePerStep, TOKEN_DECIMALS),
        "last_accepted_step": v.lastAcceptedStep,
        "total_steps": v.totalSteps,
        "checkpoint_interval": v.checkpointInterval,
        "last_checkpoint": v.lastCheckpointHash.to_string(),
        "budget": format_amount(v.deposit, TOKEN_DECIMALS),
        "paid": format_amount(paid, TOKEN_DECIMALS),
        "refundable": format_amount(v.remaining, TOKEN_DECIMALS),
        "deadline": v.deadline,
    });
    if let Some(api) = a.api {
        let view =
            crate::api_client::get(api, &format!("/v1/jobs/{job_id}"), Duration::from_secs(5))
                .await
                .unwrap_or_else(|e| json!({ "error": e.to_string() }));
        out["client_view"] = view;
    }
    if a.json {
        println!("{out:#}");
    } else {
        print_fields(&out);
    }
    Ok(())
}

fn print_fields(v: &Value) {
    if let Some(map) = v.as_object() {
        for (k, v) in map {
            match v.as_str() {
                Some(s) => println!("{k:>20}  {s}"),
                None => println!("{k:>20}  {v}"),
            }
        }
    }
}

pub fn run_provider(cmd: ProviderCommand) -> Result<()> {
    runtime()?.block_on(async {
        match cmd {
            ProviderCommand::Register(a) => {
                let amount = parse_amount(&a.stake, TOKEN_DECIMALS, "--stake")?;
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let out = chain.register(amount).await?;
                let stake = chain.stake_of(chain.address()).await?;
                println!(
                    "{} staked {} (total {}) in tx {}",
                    chain.address(),
                    format_amount(amount, TOKEN_DECIMALS),
                    format_amount(stake.amount, TOKEN_DECIMALS),
                    out.hash
                );
                Ok(())
            }
            ProviderCommand::Status(a) => {
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let me = chain.address();
                let stake = chain.stake_of(me).await?;
                let w = chain.withdrawable(me, chain.token()).await?;
                let out = json!({
                    "address": me.to_string(),
                    "stake": format_amount(stake.amount, TOKEN_DECIMALS),
                    "live_epochs": stake.live_epochs,
                    "unbond_at": stake.unbond_at,
                    "withdrawable": format_amount(w, TOKEN_DECIMALS),
                });
                if a.json {
                    println!("{out:#}");
                } else {
                    print_fields(&out);
                }
                Ok(())
            }
        }
    })
}

pub fn run_withdraw(a: WithdrawArgs) -> Result<()> {
    runtime()?.block_on(async {
        let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
        let me = chain.address();
        let token = chain.token();
        let amount = chain.withdrawable(me, token).await?;
        if amount.is_zero() {
            println!("{me}: nothing to withdraw");
            return Ok(());
        }
        let out = chain
            .submit(&gpuchain_protocol::ChainTx::Withdraw { token })
            .await?;
        println!(
            "{me}: withdrew {} in tx {}",
            format_amount(amount, TOKEN_DECIMALS),
            out.hash
        );
        Ok(())
    })
}
