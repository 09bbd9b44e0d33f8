//! Differential test: the escrow calls the simulator made in a run, replayed one by one against
//! the real JobEscrow on anvil (the npm-installed binary), succeed and revert exactly where the
//! in-memory model's did, and leave the same token balances, credits, stakes and job states.
//! Times are shifted onto anvil's clock (its genesis is wall-clock time): every block timestamp,
//! deadline and bid expiry moves by the same offset, so every time comparison is unchanged.

use alloy::network::EthereumWallet;
use alloy::primitives::{B256, Bytes, U256};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, eip712_domain};
use anyhow::{Context, Result, ensure};
use gpuchain_contracts::{
    EIP712_NAME, EIP712_VERSION, JobEscrow, TestUSDC, Toolchain, deploy_job_escrow,
    deploy_test_usdc,
};
use gpuchain_sim::config::SimConfig;
use gpuchain_sim::escrow::{Account, Call, ESCROW, Status};
use gpuchain_sim::world::genesis;
use gpuchain_sim::{presets, run};

alloy::sol! {
    struct Bid { uint256 jobId; uint64 epoch; address provider; uint256 pricePerStep; uint64 expiry; }
    struct Vote { uint256 jobId; uint64 epoch; uint64 step; bytes32 checkpointHash; bool accept; }
}

fn hash32(h: u64) -> B256 {
    B256::left_padding_from(&h.to_be_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nov4_calls_replay_on_anvil_to_the_same_books() -> Result<()> {
    let calls = replay(presets::nov4(), 1).await?;
    ensure!(calls > 10, "{calls} calls");
    Ok(())
}

/// A short run of the fault mix whose log has reverts (a vote for a fenced epoch, a decision
/// on a step already paid): the contract must revert those too, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_calls_with_reverts_replay_on_anvil() -> Result<()> {
    let mut cfg = presets::faults();
    cfg.duration_s = 400.0;
    cfg.faults_stop_s = Some(300.0);
    cfg.keep_call_log = true;
    let reverts = run(cfg.clone(), 4)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .calls
        .iter()
        .filter(|c| c.result.is_err())
        .count();
    ensure!(
        reverts >= 2,
        "seed 4 should exercise reverts, has {reverts}"
    );
    replay(cfg, 4).await?;
    Ok(())
}

/// Runs `cfg` with `seed`, replays its escrow calls on anvil, compares; returns how many calls.
async fn replay(cfg: SimConfig, seed: u64) -> Result<usize> {
    let out = run(cfg.clone(), seed).map_err(|e| anyhow::anyhow!("{e}"))?;
    let model = out.escrow.context("the config keeps the call log")?;
    let accounts = (cfg.clients + cfg.providers + cfg.verifiers) as usize;

    let anvil = Toolchain::from_build_checkout()
        .anvil_builder()?
        .arg("--accounts")
        .arg((accounts + 1).to_string())
        .try_spawn()
        .context("starting anvil")?;
    let keys: Vec<PrivateKeySigner> = anvil.keys().iter().cloned().map(Into::into).collect();
    ensure!(keys.len() > accounts, "anvil gave {} keys", keys.len());
    let url = anvil.endpoint_url();
    let connect = |key: &PrivateKeySigner| {
        ProviderBuilder::new()
            .wallet(EthereumWallet::from(key.clone()))
            .connect_http(url.clone())
    };
    let deployer = connect(&keys[0]);
    // Sim account i is anvil key i + 1; key 0 deploys.
    let key_of = |a: Account| &keys[a as usize + 1];
    let addr_of = |a: Account| keys[a as usize + 1].address();

    let usdc_address = keys[0].address().create(1);
    let escrow = deploy_job_escrow(
        &deployer,
        usdc_address,
        U256::from(cfg.protocol.stake),
        cfg.chain.unbond_delay_s,
    )
    .await?;
    let usdc = deploy_test_usdc(&deployer).await?;
    let domain: Eip712Domain = eip712_domain! {
        name: EIP712_NAME,
        version: EIP712_VERSION,
        chain_id: anvil.chain_id(),
        verifying_contract: *escrow.address(),
    };

    // The sim's genesis: the same mints, and every account approves the escrow.
    let minted: std::collections::BTreeMap<Account, u128> = genesis(&cfg).into_iter().collect();
    for a in 0..accounts as Account {
        let p = connect(key_of(a));
        let token = TestUSDC::new(usdc_address, &p);
        if let Some(amount) = minted.get(&a) {
            usdc.mint(addr_of(a), U256::from(*amount))
                .send()
                .await?
                .get_receipt()
                .await?;
        }
        token
            .approve(*escrow.address(), U256::MAX)
            .send()
            .await?
            .get_receipt()
            .await?;
    }

    let latest = deployer
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await?
        .context("latest block")?;
    let base = latest.header.timestamp + 100;
    let mut last_ts = 0u64;
    for (i, rec) in out.calls.iter().enumerate() {
        let ts = (base + rec.timestamp).max(last_ts + 1);
        last_ts = ts;
        deployer
            .raw_request::<_, serde_json::Value>("evm_setNextBlockTimestamp".into(), (ts,))
            .await?;
        let p = connect(key_of(rec.caller));
        let e = JobEscrow::new(*escrow.address(), &p);
        let sent = match &rec.call {
            Call::CreateJob {
                budget,
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                spec_hash,
                verifiers,
                quorum,
                deadline,
                grace,
            } => {
                e.createJob(
                    usdc_address,
                    U256::from(*budget),
                    U256::from(*max_price_per_step),
                    *total_steps,
                    *checkpoint_interval,
                    hash32(*spec_hash),
                    verifiers.iter().map(|v| addr_of(*v)).collect(),
                    *quorum,
                    deadline + base,
                    *grace,
                )
                .send()
                .await
            }
            Call::Register { amount } => e.register(U256::from(*amount)).send().await,
            Call::Assign {
                job_id,
                provider,
                price_per_step,
                bid_expiry,
                bid,
            } => {
                let signed = Bid {
                    jobId: U256::from(bid.job_id),
                    epoch: bid.epoch,
                    provider: addr_of(bid.provider),
                    pricePerStep: U256::from(bid.price_per_step),
                    expiry: bid.expiry + base,
                };
                let sig = key_of(bid.signer).sign_typed_data_sync(&signed, &domain)?;
                e.assign(
                    U256::from(*job_id),
                    addr_of(*provider),
                    U256::from(*price_per_step),
                    bid_expiry + base,
                    Bytes::copy_from_slice(&sig.as_bytes()),
                )
                .send()
                .await
            }
            Call::ReleaseProvider { job_id } => e.releaseProvider(U256::from(*job_id)).send().await,
            Call::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            }
            | Call::RejectCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            } => {
                let accept = matches!(rec.call, Call::AcceptCheckpoint { .. });
                let mut signed = Vec::new();
                for s in sigs {
                    let vote = Vote {
                        jobId: U256::from(s.job_id),
                        epoch: s.epoch,
                        step: s.step,
                        checkpointHash: hash32(s.checkpoint_hash),
                        accept: s.accept,
                    };
                    let sig = key_of(s.signer).sign_typed_data_sync(&vote, &domain)?;
                    signed.push(Bytes::copy_from_slice(&sig.as_bytes()));
                }
                let (j, h) = (U256::from(*job_id), hash32(*checkpoint_hash));
                if accept {
                    e.acceptCheckpoint(j, *epoch, *step, h, signed).send().await
                } else {
                    e.rejectCheckpoint(j, *epoch, *step, h, signed).send().await
                }
            }
            Call::Expire { job_id } => e.expire(U256::from(*job_id)).send().await,
            Call::RequestUnbond => e.requestUnbond().send().await,
            Call::WithdrawStake => e.withdrawStake().send().await,
            Call::Withdraw => e.withdraw(usdc_address).send().await,
        };
        // A reverting call fails at gas estimation; one that is sent must also succeed.
        let ok = match sent {
            Ok(pending) => pending.get_receipt().await?.status(),
            Err(_) => false,
        };
        ensure!(
            ok == rec.result.is_ok(),
            "call {i} ({}) by {}: model {:?}, contract {}",
            rec.call.name(),
            rec.caller,
            rec.result,
            if ok { "succeeded" } else { "reverted" }
        );
    }

    // The same books: tokens, credits, stakes, and every job's state.
    let view = JobEscrow::new(*escrow.address(), &deployer);
    for a in 0..accounts as Account {
        let addr = addr_of(a);
        assert_eq!(
            usdc.balanceOf(addr).call().await?,
            U256::from(model.ledger.balance(a)),
            "tokens of {a}"
        );
        assert_eq!(
            view.withdrawable(addr, usdc_address).call().await?,
            U256::from(model.withdrawable(a)),
            "credit of {a}"
        );
        let st = view.stakeOf(addr).call().await?;
        assert_eq!(
            st.amount,
            U256::from(model.stake_of(a).amount),
            "stake of {a}"
        );
        assert_eq!(
            st.liveEpochs,
            model.stake_of(a).live_epochs,
            "live epochs of {a}"
        );
    }
    assert_eq!(
        usdc.balanceOf(*escrow.address()).call().await?,
        U256::from(model.ledger.balance(ESCROW))
    );
    for (i, j) in model.jobs().iter().enumerate() {
        let v = view.getJob(U256::from(i + 1)).call().await?;
        let status = match j.status {
            Status::Open => 1u8,
            Status::Assigned => 2,
            Status::Completed => 3,
            Status::Expired => 4,
        };
        assert_eq!(v.status, status, "job {}", i + 1);
        assert_eq!(v.epoch, j.epoch);
        assert_eq!(v.lastAcceptedStep, j.last_accepted_step);
        assert_eq!(v.remaining, U256::from(j.remaining));
        assert_eq!(v.lastCheckpointHash, hash32(j.last_checkpoint_hash));
    }
    Ok(out.calls.len())
}
