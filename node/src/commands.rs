//! The one-shot subcommands: `job submit|status`, `provider register|status|…`,
//! `verifier register|status|…`, `withdraw`.
//! `job submit` goes through a running client node (it must stay up to run the job); the
//! others talk to the chain directly with the node's key.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use gpuchain_contracts::chain::{
    ChainClient, CreateJobTerms, check_create_job, format_tokens, status_name,
};
use gpuchain_protocol::{Address, U256};
use serde_json::{Value, json};

use crate::cli::{
    ChainArgs, JobCommand, KeyArgs, NodeRef, ProviderCommand, StatusArgs, SubmitArgs,
    VerifierCommand, WithdrawArgs,
};
use crate::config::{TOKEN_DECIMALS, parse_amount, read_keystore_password};

/// How long `job submit` waits for the node to pack the data and the chain to take the job.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(300);

impl NodeRef {
    /// A client for the named node, or `None` when no node was named.
    pub fn client(&self) -> Result<Option<gpuchain_api::ApiClient>> {
        use gpuchain_api::{ApiClient, auth};
        let token_from = |path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map(|t| t.trim().to_string())
                .with_context(|| {
                    format!(
                        "cannot read the API token file {}: check the path and that you run as the node's user",
                        path.display()
                    )
                })
        };
        let addr = match (&self.api, &self.data_dir) {
            (Some(a), _) => *a,
            (None, Some(d)) => gpuchain_api::client::addr_of(d)?,
            (None, None) => return Ok(None),
        };
        let token = match (&self.api_token_file, &self.data_dir) {
            (Some(f), _) => Some(token_from(f)?),
            (None, Some(d)) => Some(token_from(&auth::token_path(d))?),
            (None, None) => None,
        };
        if token.is_none() {
            bail!(
                "--api {addr} needs the node's API token: pass --api-token-file FILE or the node's --data-dir"
            );
        }
        Ok(Some(ApiClient::new(addr, token)))
    }
}

fn parse_address(s: &str, flag: &str) -> Result<Address> {
    s.parse().map_err(|e| {
        anyhow!("{flag} {s:?} is not an Ethereum address ({e}); give 0x followed by 40 hex digits")
    })
}

fn signer(key: &KeyArgs) -> Result<alloy_signer_local::PrivateKeySigner> {
    let store = crate::datadir::keystore_dir(&key.data_dir);
    if !store.join(crate::datadir::KEYSTORE_FILE).is_file() {
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
    Ok(ChainClient::connect_paying_in(&chain.rpc_url, escrow, token, key).await?)
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
    let api = a.node.client()?.ok_or_else(|| {
        anyhow!("which node submits the job? pass --data-dir DIR of a running client node, or --api ADDR")
    })?;
    let budget = parse_amount(&a.budget, TOKEN_DECIMALS, "--budget")?;
    let max_price = parse_amount(&a.max_price, TOKEN_DECIMALS, "--max-price")?;
    let verifier_fee = parse_amount(&a.verifier_fee, TOKEN_DECIMALS, "--verifier-fee")?;
    // the smallest strict majority unless told otherwise
    let quorum = a.quorum.unwrap_or(a.committee / 2 + 1);
    let spec_path = std::path::absolute(&a.spec)
        .with_context(|| format!("bad --spec path {}", a.spec.display()))?;
    if !spec_path.is_file() {
        bail!("--spec {}: no such file", a.spec.display());
    }
    // Everything the escrow would refuse is refused here, before the node packs anything
    // or sends a transaction (the node checks again with the chain's time and token).
    let file = crate::roles::jobs::JobFile::load(&spec_path)?;
    check_create_job(&CreateJobTerms {
        token: None,
        budget,
        max_price_per_step: max_price,
        total_steps: file.total_steps,
        checkpoint_interval: file.checkpoint_interval,
        committee_size: a.committee,
        quorum,
        verifier_fee,
        deadline: a.deadline,
        now: 0,
        grace: a.grace,
        // the node checks these against the chain's own figures
        available_verifiers: None,
        limits: None,
        decimals: TOKEN_DECIMALS,
    })
    .map_err(|e| anyhow!("job not submitted: {e}"))?;
    let body = json!({
        "spec_path": spec_path,
        "budget": budget,
        "max_price_per_step": max_price,
        "committee_size": a.committee,
        "quorum": quorum,
        "verifier_fee": verifier_fee,
        "deadline_secs": a.deadline,
        "grace_secs": a.grace,
    });
    eprintln!(
        "submitting {} (packing data, approving, createJob)…",
        a.spec.display()
    );
    let reply: Value = api
        .with_timeout(SUBMIT_TIMEOUT)
        .post("/v1/jobs", &body)
        .await?;
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

fn parse_job_id(s: &str) -> Result<U256> {
    s.parse()
        .map_err(|e| anyhow!("{s:?} is not a job id ({e}); give the number `job submit` printed"))
}

async fn status(a: StatusArgs) -> Result<()> {
    let job_id = parse_job_id(&a.job_id)?;
    let chain = connect(&a.chain, None).await?;
    let v = chain.job(job_id).await?;
    // The figures come from the escrow's events for this job, not from deposit − remaining
    // (which counts a refund as paid).
    let money = chain.job_money(job_id, a.from_block).await?;
    let record = chain.chain_record(a.from_block).await?;
    let tokens = |raw: U256| format_tokens(raw, TOKEN_DECIMALS);
    let per_account = |m: &std::collections::BTreeMap<Address, U256>| -> Value {
        m.iter()
            .map(|(a, v)| (a.to_string(), Value::String(tokens(*v))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    if money.remaining != v.remaining {
        eprintln!(
            "warning: the events read from block {} account for {} still held, the escrow says {}; \
             give --from-block at or before the job's creation",
            a.from_block,
            tokens(money.remaining),
            tokens(v.remaining)
        );
    }
    let mut out = json!({
        "job_id": job_id.to_string(),
        "status": status_name(v.status),
        "client": v.client.to_string(),
        "created_block": money.created_block,
        "epoch": v.epoch,
        "provider": v.provider.to_string(),
        "price_per_step": tokens(v.pricePerStep),
        "last_accepted_step": v.lastAcceptedStep,
        "total_steps": v.totalSteps,
        "checkpoint_interval": v.checkpointInterval,
        "last_checkpoint": v.lastCheckpointHash.to_string(),
        "deadline": v.deadline,
        "grace": v.grace,
        "committee": v.committee.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "quorum": v.quorum,
        "verifier_fee": tokens(v.verifierFee),
        // what the chain says of the people this job depends on
        "provider_record": serde_json::to_value(record.provider(&v.provider))?,
        "committee_record": v
            .committee
            .iter()
            .map(|m| Ok((m.to_string(), serde_json::to_value(record.verifier(m))?)))
            .collect::<Result<serde_json::Map<_, _>>>()?,
        "budget": tokens(v.deposit),
        "paid": per_account(&money.paid),
        "paid_total": tokens(money.paid_total()),
        "verifier_fees": per_account(&money.fees),
        "fees_total": tokens(money.fees_total()),
        "slashed_stake": per_account(&money.slashed),
        "refunded": tokens(money.refunded),
        "remaining": tokens(v.remaining),
    });
    if let Some(api) = a.node.client()? {
        let view = api
            .with_timeout(Duration::from_secs(5))
            .get::<Value>(&format!("/v1/jobs/{job_id}"))
            .await
            .unwrap_or_else(|e| json!({ "error": e.to_string() }));
        out["client_view"] = view;
    }
    if a.json {
        println!("{out:#}");
    } else {
        // the money last, in the order it flows
        let mut text = out.clone();
        let mut tail = serde_json::Map::new();
        if let Some(map) = text.as_object_mut() {
            for k in [
                "budget",
                "paid",
                "paid_total",
                "verifier_fees",
                "fees_total",
                "slashed_stake",
                "refunded",
                "remaining",
            ] {
                if let Some(v) = map.remove(k) {
                    tail.insert(k.to_string(), v);
                }
            }
        }
        print_fields(&text);
        print_fields(&Value::Object(tail));
    }
    Ok(())
}

fn print_fields(v: &Value) {
    if let Some(map) = v.as_object() {
        for (k, v) in map {
            match v {
                Value::String(s) => println!("{k:>20}  {s}"),
                // per-account figures: one line each
                Value::Object(m) if m.values().all(Value::is_string) => {
                    if m.is_empty() {
                        println!("{k:>20}  none");
                    }
                    for (account, amount) in m {
                        println!(
                            "{k:>20}  {account}  {}",
                            amount.as_str().unwrap_or_default()
                        );
                    }
                }
                _ => println!("{k:>20}  {v}"),
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
                    format_tokens(amount, TOKEN_DECIMALS),
                    format_tokens(stake.bonded, TOKEN_DECIMALS),
                    out.hash
                );
                Ok(())
            }
            ProviderCommand::Status(a) => {
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let me = chain.address();
                let stake = chain.stake_of(me).await?;
                let w = chain.withdrawable(me, chain.token()).await?;
                let record = chain.chain_record(a.from_block).await?.provider(&me);
                let mut out = json!({
                    "address": me.to_string(),
                    "bonded": format_tokens(stake.bonded, TOKEN_DECIMALS),
                    "live_epochs": stake.live_epochs,
                    "unbonding": format_tokens(stake.unbonding, TOKEN_DECIMALS),
                    "unbond_at": stake.unbond_at,
                    "withdrawable": format_tokens(w, TOKEN_DECIMALS),
                    // what clients rank this key's bids by
                    "record": serde_json::to_value(record)?,
                    "reputation_score": record.score(),
                    "excluded_by_clients": record.is_excluded(),
                });
                // The node of that data dir, if it is running, says which bids it refused.
                let running = NodeRef {
                    data_dir: Some(a.key.data_dir.clone()),
                    api: None,
                    api_token_file: None,
                };
                if let Ok(Some(api)) = running.client() {
                    let view = api
                        .with_timeout(Duration::from_secs(5))
                        .get::<Value>("/v1/provider/refusals")
                        .await
                        .unwrap_or_else(|e| json!({ "error": e.to_string() }));
                    out["refused_bids"] = view.get("refused_bids").cloned().unwrap_or(view);
                }
                if a.json {
                    println!("{out:#}");
                } else {
                    print_fields(&out);
                }
                Ok(())
            }
            ProviderCommand::Resign(a) => {
                let job_id = parse_job_id(&a.job_id)?;
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let out = chain
                    .submit(&gpuchain_protocol::ChainTx::Resign { job_id })
                    .await?;
                println!(
                    "{} resigned from job {job_id} in tx {}",
                    chain.address(),
                    out.hash
                );
                Ok(())
            }
            ProviderCommand::Unbond(a) => {
                let amount = parse_amount(&a.amount, TOKEN_DECIMALS, "--amount")?;
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let out = chain.request_unbond(amount).await?;
                let stake = chain.stake_of(chain.address()).await?;
                println!(
                    "{} unbonding {} (withdrawable from block time {}) in tx {}",
                    chain.address(),
                    format_tokens(stake.unbonding, TOKEN_DECIMALS),
                    stake.unbond_at,
                    out.hash
                );
                Ok(())
            }
            ProviderCommand::WithdrawStake(a) => {
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let before = chain.stake_of(chain.address()).await?;
                let out = chain.withdraw_stake().await?;
                println!(
                    "{} withdrew {} of stake in tx {}",
                    chain.address(),
                    format_tokens(before.unbonding, TOKEN_DECIMALS),
                    out.hash
                );
                Ok(())
            }
        }
    })
}

pub fn run_verifier(cmd: VerifierCommand) -> Result<()> {
    runtime()?.block_on(async {
        match cmd {
            VerifierCommand::Register(a) => {
                let amount = parse_amount(&a.stake, TOKEN_DECIMALS, "--stake")?;
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let out = chain.register_verifier(amount).await?;
                let stake = chain.verifier_stake_of(chain.address()).await?;
                let min = chain.min_verifier_stake().await?;
                println!(
                    "{} staked {} as a verifier (total {}, {}) in tx {}",
                    chain.address(),
                    format_tokens(amount, TOKEN_DECIMALS),
                    format_tokens(stake.bonded, TOKEN_DECIMALS),
                    if stake.pooled {
                        "in the pool committees are drawn from".to_string()
                    } else {
                        format!(
                            "not in the pool yet: it needs {}",
                            format_tokens(min, TOKEN_DECIMALS)
                        )
                    },
                    out.hash
                );
                Ok(())
            }
            VerifierCommand::Status(a) => {
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let me = chain.address();
                let stake = chain.verifier_stake_of(me).await?;
                let w = chain.withdrawable(me, chain.token()).await?;
                let record = chain.chain_record(a.from_block).await?.verifier(&me);
                let out = json!({
                    "address": me.to_string(),
                    "bonded": format_tokens(stake.bonded, TOKEN_DECIMALS),
                    "pooled": stake.pooled,
                    "unbonding": format_tokens(stake.unbonding, TOKEN_DECIMALS),
                    "unbond_at": stake.unbond_at,
                    "withdrawable": format_tokens(w, TOKEN_DECIMALS),
                    "committee_seats": record.seats,
                    "decisions_with_outcome": record.with_outcome,
                    // against the outcome or silent: no fee either way
                    "decisions_without": record.without_outcome,
                    "fees_earned": format_tokens(record.fees, TOKEN_DECIMALS),
                });
                if a.json {
                    println!("{out:#}");
                } else {
                    print_fields(&out);
                }
                Ok(())
            }
            VerifierCommand::Unbond(a) => {
                let amount = parse_amount(&a.amount, TOKEN_DECIMALS, "--amount")?;
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let out = chain.request_verifier_unbond(amount).await?;
                let stake = chain.verifier_stake_of(chain.address()).await?;
                println!(
                    "{} unbonding {} of verifier stake (withdrawable from block time {}; {}) in tx {}",
                    chain.address(),
                    format_tokens(stake.unbonding, TOKEN_DECIMALS),
                    stake.unbond_at,
                    if stake.pooled {
                        "still in the pool"
                    } else {
                        "out of the pool"
                    },
                    out.hash
                );
                Ok(())
            }
            VerifierCommand::WithdrawStake(a) => {
                let chain = connect(&a.chain, Some(signer(&a.key)?)).await?;
                let before = chain.verifier_stake_of(chain.address()).await?;
                let out = chain.withdraw_verifier_stake().await?;
                println!(
                    "{} withdrew {} of verifier stake in tx {}",
                    chain.address(),
                    format_tokens(before.unbonding, TOKEN_DECIMALS),
                    out.hash
                );
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
            format_tokens(amount, TOKEN_DECIMALS),
            out.hash
        );
        Ok(())
    })
}
