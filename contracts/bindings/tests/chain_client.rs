//! The chain client and event follower against a real anvil (the npm-installed one) and the
//! real contracts: a job end to end through `ChainTx` (bids signed over the job's terms, the
//! refund settled), balances to the unit and gas to the wei, the exact event sequence, a
//! reject's slash burned, a provider resigning, a follower restarted from its cursor, the
//! named errors (unreachable RPC, unfunded account, custom reverts), and nonce recovery.
//! Long because the tests share one anvil fixture and its helpers, kept beside them.

use std::time::Duration;

use alloy::network::EthereumWallet;
use alloy::node_bindings::AnvilInstance;
use alloy::primitives::{Address, B256, U256};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, bail, ensure};
use gpuchain_contracts::chain::{
    ChainClient, ChainConfig, ChainError, EventFollower, FollowedEvent, FollowerConfig, RetryPolicy,
};
use gpuchain_contracts::{EscrowParams, Toolchain, deploy_job_escrow, deploy_test_usdc};
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::eip712::{BidFields, VoteFields};
use gpuchain_protocol::{Sig65, SigningKey};

const MIN_STAKE: u64 = 100_000_000;
/// The deployment's limits: a week to the deadline, a day of grace.
const MAX_DURATION: u64 = 7 * 86_400;
const MAX_GRACE: u64 = 86_400;
const BUDGET: u64 = 5_000_000;
const PRICE: u64 = 1_000;
const MAX_PRICE: u64 = 10 * PRICE;
const TOTAL_STEPS: u64 = 400;
const INTERVAL: u64 = 50;
const QUORUM: u8 = 2;
const GRACE: u64 = 3_600;
const CLIENT_FUNDS: u64 = 10_000_000;
const PROVIDER_FUNDS: u64 = 200_000_000;

/// A fresh anvil with the escrow and test USDC deployed; anvil is killed on drop.
struct Chain {
    anvil: AnvilInstance,
    escrow: Address,
    usdc: Address,
    keys: Vec<PrivateKeySigner>,
}

impl Chain {
    async fn start() -> Result<Self> {
        let anvil = Toolchain::from_build_checkout()
            .anvil_builder()?
            .try_spawn()
            .context("starting anvil")?;
        let keys: Vec<PrivateKeySigner> = anvil.keys().iter().cloned().map(Into::into).collect();
        let deployer = ProviderBuilder::new()
            .wallet(EthereumWallet::from(keys[0].clone()))
            .connect_http(anvil.endpoint_url());
        let usdc = *deploy_test_usdc(&deployer).await?.address();
        let params = EscrowParams {
            min_stake: U256::from(MIN_STAKE),
            unbond_delay: 3_600,
            max_duration: MAX_DURATION,
            max_grace: MAX_GRACE,
        };
        let escrow = *deploy_job_escrow(&deployer, usdc, params).await?.address();
        Ok(Self {
            anvil,
            escrow,
            usdc,
            keys,
        })
    }

    fn config(&self) -> ChainConfig {
        ChainConfig::new(self.anvil.endpoint(), self.escrow, self.usdc)
    }

    async fn client(&self, key: usize) -> Result<ChainClient> {
        Ok(ChainClient::connect(self.config(), self.keys[key].clone()).await?)
    }

    /// The same key as the protocol crate's signer.
    fn protocol_key(&self, key: usize) -> Result<SigningKey> {
        Ok(SigningKey::from_bytes(&self.keys[key].to_bytes().0)?)
    }

    fn raw(&self) -> impl Provider + use<> {
        ProviderBuilder::new().connect_http(self.anvil.endpoint_url())
    }

    async fn set_automine(&self, on: bool) -> Result<()> {
        let _: serde_json::Value = self
            .raw()
            .raw_request("evm_setAutomine".into(), (on,))
            .await?;
        Ok(())
    }

    async fn mine(&self) -> Result<()> {
        let _: serde_json::Value = self.raw().raw_request("evm_mine".into(), ()).await?;
        Ok(())
    }
}

/// Verifiers sign with keys of their own; they never send a transaction.
fn verifier_keys() -> Vec<SigningKey> {
    vec![SigningKey::from_seed(101), SigningKey::from_seed(102)]
}

fn verifiers() -> Vec<Address> {
    let mut v: Vec<Address> = verifier_keys().iter().map(SigningKey::address).collect();
    // a third listed verifier that never votes: the quorum is 2 of 3
    v.push(SigningKey::from_seed(103).address());
    v
}

fn spec_hash() -> B256 {
    B256::repeat_byte(0x5e)
}

fn checkpoint(step: u64) -> B256 {
    B256::from(U256::from(step).to_be_bytes::<32>())
}

fn create_job(chain: &Chain, now: u64) -> ChainTx {
    ChainTx::CreateJob {
        token: chain.usdc,
        budget: U256::from(BUDGET),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: TOTAL_STEPS,
        checkpoint_interval: INTERVAL,
        spec_hash: spec_hash(),
        verifiers: verifiers(),
        quorum: QUORUM,
        deadline: now + 86_400,
        grace: GRACE,
    }
}

/// `acceptCheckpoint` for `step` of epoch 1.
fn accept(client: &ChainClient, job_id: U256, step: u64) -> ChainTx {
    let vote = VoteFields {
        job_id,
        epoch: 1,
        step,
        checkpoint_hash: checkpoint(step),
        accept: true,
    };
    let mut keys = verifier_keys();
    keys.sort_by_key(SigningKey::address);
    let sigs: Vec<Sig65> = keys
        .iter()
        .map(|k| vote.sign(&client.domain(), k))
        .collect();
    ChainTx::AcceptCheckpoint {
        job_id,
        epoch: 1,
        step,
        checkpoint_hash: checkpoint(step),
        sigs,
    }
}

/// A job opened by [`open_job`], with the gas each side paid on the way.
struct Job {
    id: U256,
    deadline: u64,
    client_fees: U256,
    provider_fees: U256,
}

/// Funds both parties, creates the job, stakes the provider and assigns it epoch 1 with a
/// Bid signed by the protocol crate.
async fn open_job(
    chain: &Chain,
    client: &ChainClient,
    provider: &ChainClient,
    provider_key: usize,
) -> Result<Job> {
    let m1 = client
        .mint(client.address(), U256::from(CLIENT_FUNDS))
        .await?;
    let m2 = client
        .mint(provider.address(), U256::from(PROVIDER_FUNDS))
        .await?;
    let now = client.block_time().await?;
    let created = client.submit(&create_job(chain, now)).await?;
    let id = created.job_id.context("createJob reports the job id")?;
    let registered = provider.register(U256::from(MIN_STAKE)).await?;

    // The provider signs over the terms it read from the chain.
    let bid = BidFields {
        job_id: id,
        terms: client.job(id).await?.terms,
        epoch: 1,
        provider: provider.address(),
        price_per_step: U256::from(PRICE),
        expiry: now + 600,
    };
    let bid_signature = bid.sign(&client.domain(), &chain.protocol_key(provider_key)?);
    let assigned = client
        .submit(&ChainTx::Assign {
            job_id: id,
            provider: provider.address(),
            price_per_step: bid.price_per_step,
            bid_expiry: bid.expiry,
            bid_signature,
        })
        .await?;
    Ok(Job {
        id,
        deadline: now + 86_400,
        client_fees: m1.fee + m2.fee + created.fee + assigned.fee,
        provider_fees: registered.fee,
    })
}

/// Reads batches (committing each) until `until` is seen or `timeout` passes.
async fn follow_until(
    follower: &mut EventFollower,
    timeout: Duration,
    until: impl Fn(&ChainEvent) -> bool,
) -> Result<Vec<FollowedEvent>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while !seen.iter().any(|e: &FollowedEvent| until(&e.event)) {
        let batch = tokio::time::timeout_at(deadline, follower.next_batch())
            .await
            .context("follower saw no more events in time")??;
        follower.commit(&batch)?;
        seen.extend(batch.events);
    }
    Ok(seen)
}

fn expected_events(
    chain: &Chain,
    client: Address,
    provider: Address,
    job: &Job,
) -> Vec<ChainEvent> {
    let id = job.id;
    vec![
        ChainEvent::JobCreated {
            job_id: id,
            client,
            token: chain.usdc,
            budget: U256::from(BUDGET),
            max_price_per_step: U256::from(MAX_PRICE),
            total_steps: TOTAL_STEPS,
            checkpoint_interval: INTERVAL,
            spec_hash: spec_hash(),
            verifiers: verifiers(),
            quorum: QUORUM,
            deadline: job.deadline,
            grace: GRACE,
        },
        ChainEvent::ProviderAssigned {
            job_id: id,
            epoch: 1,
            provider,
            price_per_step: U256::from(PRICE),
            start_step: 0,
            start_checkpoint: spec_hash(),
        },
        ChainEvent::CheckpointAccepted {
            job_id: id,
            epoch: 1,
            step: 150,
            checkpoint_hash: checkpoint(150),
            provider,
            amount: U256::from(150 * PRICE),
        },
        ChainEvent::CheckpointAccepted {
            job_id: id,
            epoch: 1,
            step: TOTAL_STEPS,
            checkpoint_hash: checkpoint(TOTAL_STEPS),
            provider,
            amount: U256::from(250 * PRICE),
        },
        ChainEvent::EpochEnded {
            job_id: id,
            epoch: 1,
            reason: EpochEndReason::Completed,
        },
        ChainEvent::JobCompleted {
            job_id: id,
            refund: U256::from(BUDGET - TOTAL_STEPS * PRICE),
        },
    ]
}

fn is_completed(e: &ChainEvent) -> bool {
    matches!(e, ChainEvent::JobCompleted { .. })
}

fn fast(dir: &std::path::Path) -> FollowerConfig {
    FollowerConfig::new(0, dir).poll_interval(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_end_to_end_through_chain_tx() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let relayer = chain.client(3).await?;
    let cursor_dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(cursor_dir.path())).await?;

    let client_eth = client.eth_balance(client.address()).await?;
    let provider_eth = provider.eth_balance(provider.address()).await?;

    let job = open_job(&chain, &client, &provider, 2).await?;
    assert_eq!(job.id, U256::from(1));
    let stake = provider.stake_of(provider.address()).await?;
    assert_eq!(
        (
            stake.bonded,
            stake.unbonding,
            stake.unbond_at,
            stake.live_epochs
        ),
        (U256::from(MIN_STAKE), U256::ZERO, 0, 1)
    );
    let view = client.job(job.id).await?;
    assert_eq!((view.epoch, view.provider), (1, provider.address()));
    let terms = view.terms;

    // Anyone may submit a quorum: here a third account does.
    let first = relayer.submit(&accept(&relayer, job.id, 150)).await?;
    let last = relayer
        .submit(&accept(&relayer, job.id, TOTAL_STEPS))
        .await?;
    assert!(last.block_number > first.block_number);
    let view = client.job(job.id).await?;
    assert_eq!(view.status, 3, "Completed");
    assert_eq!(view.lastAcceptedStep, TOTAL_STEPS);

    let paid = U256::from(TOTAL_STEPS * PRICE);
    let refund = U256::from(BUDGET) - paid;
    assert_eq!(
        client.withdrawable(provider.address(), chain.usdc).await?,
        paid
    );
    // Completion leaves the rest in the job: the client's refund waits for `settle`.
    assert_eq!(view.remaining, refund);
    assert_eq!(
        client.withdrawable(client.address(), chain.usdc).await?,
        U256::ZERO
    );
    assert_eq!(provider.stake_of(provider.address()).await?.live_epochs, 0);
    // Anyone may settle, once: here the relayer does.
    let settled = relayer.submit(&ChainTx::Settle { job_id: job.id }).await?;
    let err = relayer
        .submit(&ChainTx::Settle { job_id: job.id })
        .await
        .expect_err("settled already");
    assert_eq!(err.revert_name(), Some("NothingToSettle"), "{err}");
    assert_eq!(client.job(job.id).await?.remaining, U256::ZERO);
    assert_eq!(
        client.withdrawable(client.address(), chain.usdc).await?,
        refund
    );
    let w1 = provider
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;
    let w2 = client
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;

    let stake = U256::from(MIN_STAKE);
    assert_eq!(
        client.token_balance(provider.address()).await?,
        U256::from(PROVIDER_FUNDS) - stake + paid
    );
    assert_eq!(
        client.token_balance(client.address()).await?,
        U256::from(CLIENT_FUNDS) - paid
    );
    assert_eq!(client.token_balance(chain.escrow).await?, stake);
    assert_eq!(
        client.withdrawable(provider.address(), chain.usdc).await?,
        U256::ZERO
    );
    assert_eq!(
        client.withdrawable(client.address(), chain.usdc).await?,
        U256::ZERO
    );
    // Gas to the wei: every fee the client reported, approvals included, and nothing else.
    assert_eq!(
        client.eth_balance(client.address()).await?,
        client_eth - job.client_fees - w2.fee
    );
    assert_eq!(
        provider.eth_balance(provider.address()).await?,
        provider_eth - job.provider_fees - w1.fee
    );

    let seen = follow_until(&mut follower, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::JobSettled { .. })
    })
    .await?;
    let events: Vec<ChainEvent> = seen.iter().map(|e| e.event.clone()).collect();
    let mut expected = expected_events(&chain, client.address(), provider.address(), &job);
    expected.push(ChainEvent::JobSettled {
        job_id: job.id,
        client: client.address(),
        refund,
    });
    assert_eq!(events, expected);
    // A node that only read the log signs bids over the same terms as the chain keeps.
    assert_eq!(events[0].terms_hash(), Some(terms));
    assert_eq!(seen[6].block_number, settled.block_number);
    assert_eq!(seen[2].block_number, first.block_number);
    assert_eq!(seen[2].tx_hash, Some(first.hash));
    assert_eq!(seen[3].block_number, last.block_number);
    // Completion is three logs of one transaction, in log order.
    assert_eq!(seen[4].block_number, last.block_number);
    assert!(seen[3].log_index < seen[4].log_index && seen[4].log_index < seen[5].log_index);
    let raw = chain.raw();
    for e in &seen {
        let block = raw
            .get_block_by_number(e.block_number.into())
            .await?
            .context("block of an event")?;
        assert_eq!(e.block_timestamp, block.header.timestamp);
        assert!(matches!(
            e.to_input(),
            gpuchain_protocol::Input::Chain { block_time, .. } if block_time == e.block_timestamp
        ));
    }
    // Withdrawals are no protocol input, nor a failed settle: nothing more arrives.
    let batch = follower.poll().await?;
    assert!(batch.events.is_empty(), "{:?}", batch.events);

    // The job's money, summed from its events, matches the balances above.
    let money = client.job_money(job.id, 0).await?;
    assert_eq!(money.status_name(), "Completed");
    assert_eq!(money.deposit, U256::from(BUDGET));
    assert_eq!(money.paid.len(), 1);
    assert_eq!(money.paid_to(provider.address()), paid);
    assert_eq!(money.refunded, refund);
    assert_eq!(money.remaining, U256::ZERO);
    assert!(money.slashed.is_empty());
    assert!(money.conserved());
    assert_eq!(money.created_block, seen[0].block_number);
    // from the creation block on reads the same; after it the job is not found
    assert_eq!(client.job_money(job.id, money.created_block).await?, money);
    let err = client
        .job_money(job.id, money.created_block + 1)
        .await
        .expect_err("JobCreated is before that block");
    assert!(err.to_string().contains("no JobCreated event"), "{err}");
    Ok(())
}

/// A quorum of votes on `step` of `epoch`, signed by the protocol crate, sorted by signer.
fn quorum(client: &ChainClient, job_id: U256, epoch: u64, step: u64, accept: bool) -> Vec<Sig65> {
    let vote = VoteFields {
        job_id,
        epoch,
        step,
        checkpoint_hash: checkpoint(step),
        accept,
    };
    let mut keys = verifier_keys();
    keys.sort_by_key(SigningKey::address);
    keys.iter()
        .map(|k| vote.sign(&client.domain(), k))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_reject_and_expire_reach_the_follower() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let cursor_dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    let job = open_job(&chain, &client, &provider, 2).await?;
    let id = job.id;

    client
        .submit(&ChainTx::ReleaseProvider { job_id: id })
        .await?;
    assert_eq!(provider.stake_of(provider.address()).await?.live_epochs, 0);

    // Epoch 2: the provider's bid names the epoch the assignment opens, over the terms of
    // the job as its `JobCreated` log announced them.
    let now = client.block_time().await?;
    let created = expected_events(&chain, client.address(), provider.address(), &job)[0].clone();
    let terms = created.terms_hash().context("a JobCreated has terms")?;
    assert_eq!(terms, client.job(id).await?.terms);
    let bid = BidFields {
        job_id: id,
        terms,
        epoch: 2,
        provider: provider.address(),
        price_per_step: U256::from(2 * PRICE),
        expiry: now + 600,
    };
    client
        .submit(&ChainTx::Assign {
            job_id: id,
            provider: provider.address(),
            price_per_step: bid.price_per_step,
            bid_expiry: bid.expiry,
            bid_signature: bid.sign(&client.domain(), &chain.protocol_key(2)?),
        })
        .await?;
    assert_eq!(client.burned().await?, U256::ZERO);
    client
        .submit(&ChainTx::RejectCheckpoint {
            job_id: id,
            epoch: 2,
            step: INTERVAL,
            checkpoint_hash: checkpoint(INTERVAL),
            sigs: quorum(&client, id, 2, INTERVAL, false),
        })
        .await?;
    let stake = provider.stake_of(provider.address()).await?;
    assert_eq!(
        (stake.bonded, stake.unbonding, stake.live_epochs),
        (U256::ZERO, U256::ZERO, 0)
    );
    // The slash is burned: the escrow keeps it and credits it to no one.
    assert_eq!(client.burned().await?, U256::from(MIN_STAKE));
    for who in [client.address(), provider.address()] {
        assert_eq!(client.withdrawable(who, chain.usdc).await?, U256::ZERO);
    }

    // Too early to expire: the contract says until when.
    let err = client
        .submit(&ChainTx::Expire { job_id: id })
        .await
        .expect_err("deadline + grace not reached");
    assert_eq!(err.revert_name(), Some("TooEarly"), "{err}");
    let _: serde_json::Value = chain
        .raw()
        .raw_request("evm_increaseTime".into(), (86_400 + GRACE + 10,))
        .await?;
    chain.mine().await?;
    client.submit(&ChainTx::Expire { job_id: id }).await?;

    // The whole budget comes back and nothing more: the client gets nothing from the reject,
    // and the burned stake is all the escrow still holds.
    let before = client.token_balance(client.address()).await?;
    client
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;
    assert_eq!(
        client.token_balance(client.address()).await?,
        before + U256::from(BUDGET)
    );
    assert_eq!(
        client.token_balance(chain.escrow).await?,
        U256::from(MIN_STAKE)
    );
    assert_eq!(client.burned().await?, U256::from(MIN_STAKE));
    let err = provider
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await
        .expect_err("the provider is owed nothing");
    assert_eq!(err.revert_name(), Some("NothingToWithdraw"), "{err}");

    let seen = follow_until(&mut follower, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::JobExpired { .. })
    })
    .await?;
    let all = expected_events(&chain, client.address(), provider.address(), &job);
    let provider_address = provider.address();
    assert_eq!(
        seen.into_iter().map(|e| e.event).collect::<Vec<_>>(),
        vec![
            all[0].clone(),
            all[1].clone(),
            ChainEvent::EpochEnded {
                job_id: id,
                epoch: 1,
                reason: EpochEndReason::Released,
            },
            ChainEvent::ProviderAssigned {
                job_id: id,
                epoch: 2,
                provider: provider_address,
                price_per_step: U256::from(2 * PRICE),
                start_step: 0,
                start_checkpoint: spec_hash(),
            },
            ChainEvent::CheckpointRejected {
                job_id: id,
                epoch: 2,
                step: INTERVAL,
                checkpoint_hash: checkpoint(INTERVAL),
                provider: provider_address,
                slashed: U256::from(MIN_STAKE),
            },
            ChainEvent::EpochEnded {
                job_id: id,
                epoch: 2,
                reason: EpochEndReason::Rejected,
            },
            ChainEvent::JobExpired {
                job_id: id,
                refund: U256::from(BUDGET),
            },
        ]
    );
    let money = client.job_money(id, 0).await?;
    assert_eq!(money.status_name(), "Expired");
    assert_eq!(money.paid_total(), U256::ZERO);
    assert_eq!(money.refunded, U256::from(BUDGET));
    assert_eq!(money.slashed_total(), U256::from(MIN_STAKE));
    assert_eq!(
        money.slashed.get(&provider_address),
        Some(&U256::from(MIN_STAKE))
    );
    assert!(money.conserved());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_resigns_its_epoch_and_the_follower_sees_why() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let cursor_dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    let job = open_job(&chain, &client, &provider, 2).await?;
    let id = job.id;
    let unbond = |amount: u64| {
        alloy::sol_types::SolCall::abi_encode(&gpuchain_contracts::JobEscrow::requestUnbondCall {
            amount: U256::from(amount),
        })
    };

    // The live epoch reserves the whole stake: none of it can unbond.
    let err = provider
        .transact("requestUnbond", chain.escrow, unbond(1))
        .await
        .expect_err("the stake is reserved");
    assert_eq!(err.revert_name(), Some("StakeLocked"), "{err}");
    // Only the epoch's provider may resign it.
    let err = client
        .submit(&ChainTx::Resign { job_id: id })
        .await
        .expect_err("the client is not the provider");
    assert_eq!(err.revert_name(), Some("NotProvider"), "{err}");

    let resigned = provider.submit(&ChainTx::Resign { job_id: id }).await?;
    let view = client.job(id).await?;
    assert_eq!((view.status, view.epoch), (1, 1), "Open, epoch 1 over");
    assert_eq!(view.remaining, U256::from(BUDGET));
    // No slash: the stake is all there, and free again.
    let stake = provider.stake_of(provider.address()).await?;
    assert_eq!(
        (stake.bonded, stake.live_epochs),
        (U256::from(MIN_STAKE), 0)
    );
    assert_eq!(client.burned().await?, U256::ZERO);
    let err = provider
        .submit(&ChainTx::Resign { job_id: id })
        .await
        .expect_err("nothing left to resign");
    assert_eq!(err.revert_name(), Some("WrongStatus"), "{err}");
    provider
        .transact("requestUnbond", chain.escrow, unbond(MIN_STAKE))
        .await?;
    let stake = provider.stake_of(provider.address()).await?;
    assert_eq!(
        (stake.bonded, stake.unbonding),
        (U256::ZERO, U256::from(MIN_STAKE))
    );
    assert!(stake.unbond_at > 0);

    let seen = follow_until(&mut follower, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::EpochEnded { .. })
    })
    .await?;
    let all = expected_events(&chain, client.address(), provider.address(), &job);
    assert_eq!(
        seen.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        vec![
            all[0].clone(),
            all[1].clone(),
            ChainEvent::EpochEnded {
                job_id: id,
                epoch: 1,
                reason: EpochEndReason::Resigned,
            },
        ]
    );
    let ended = seen.last().context("the epoch's end")?;
    assert_eq!(ended.block_number, resigned.block_number);
    assert_eq!(ended.tx_hash, Some(resigned.hash));
    // Unbonding is no protocol input: nothing more arrives.
    assert!(follower.poll().await?.events.is_empty());
    let money = client.job_money(id, 0).await?;
    assert_eq!(money.status_name(), "Open");
    assert_eq!(money.paid_total(), U256::ZERO);
    assert!(money.slashed.is_empty());
    assert_eq!(money.remaining, U256::from(BUDGET));
    assert!(money.conserved());
    Ok(())
}

/// What the client can observe of "nothing was sent": its nonce and its allowance.
async fn untouched(chain: &Chain, client: &ChainClient, nonce: u64) -> Result<()> {
    let now = chain.raw().get_transaction_count(client.address()).await?;
    ensure!(now == nonce, "nonce moved from {nonce} to {now}");
    let allowance = gpuchain_contracts::TestUSDC::new(chain.usdc, chain.raw())
        .allowance(client.address(), chain.escrow)
        .call()
        .await?;
    ensure!(allowance.is_zero(), "an approval of {allowance} was sent");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_create_job_sends_nothing_and_a_good_one_approves_exactly_the_budget() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    client
        .mint(client.address(), U256::from(CLIENT_FUNDS))
        .await?;
    let nonce = chain.raw().get_transaction_count(client.address()).await?;
    let now = client.block_time().await?;
    let good = create_job(&chain, now);
    let with = |f: &dyn Fn(&mut ChainTx)| {
        let mut tx = good.clone();
        f(&mut tx);
        tx
    };
    fn terms(tx: &mut ChainTx) -> (&mut U256, &mut U256, &mut Vec<Address>, &mut u8, &mut u64) {
        match tx {
            ChainTx::CreateJob {
                budget,
                max_price_per_step,
                verifiers,
                quorum,
                deadline,
                ..
            } => (budget, max_price_per_step, verifiers, quorum, deadline),
            _ => unreachable!("a CreateJob"),
        }
    }
    let v = verifiers();
    let cases: Vec<(ChainTx, &str)> = vec![
        (
            with(&|t| *terms(t).0 = U256::from(MAX_PRICE * TOTAL_STEPS - 1)),
            "budget 3.999999 is less than the maximum price 0.01 × 400 steps = 4",
        ),
        (
            with(&|t| *terms(t).4 = now),
            "is not after the chain's time",
        ),
        (
            with(&|t| *terms(t).0 = U256::from(u128::MAX) + U256::from(1u8)),
            "above the escrow's limit",
        ),
        (
            with(&|t| *terms(t).2 = vec![v[0], v[1], v[0]]),
            "listed twice (#1 and #3)",
        ),
        (
            with(&|t| terms(t).2[1] = Address::ZERO),
            "verifier #2 is the zero address",
        ),
        (with(&|t| *terms(t).3 = 0), "quorum 0 must be"),
        (with(&|t| *terms(t).3 = 4), "quorum 4 must be"),
        // One of three is no strict majority, nor two of four.
        (
            with(&|t| *terms(t).3 = 1),
            "quorum 1 must be a strict majority",
        ),
        (
            with(&|t| {
                terms(t).2.push(Address::repeat_byte(0x44));
                *terms(t).3 = 2;
            }),
            "quorum 2 must be a strict majority of the 4",
        ),
        (
            with(&|t| terms(t).2.truncate(1)),
            "at least two verifiers, 1 given",
        ),
    ];
    for (tx, says) in cases {
        let err = client.submit(&tx).await.expect_err(says);
        assert!(matches!(err, ChainError::CreateJobRefused(_)), "{err:?}");
        assert!(err.to_string().contains(says), "{err} / {says}");
        untouched(&chain, &client, nonce).await?;
    }
    if let Some(v) = v.first() {
        assert!(
            err_names(&client, &with(&|t| terms(t).2.push(*v)))
                .await?
                .contains("twice")
        );
    }

    // Refused by the escrow's newer rules: a deadline past `maxDuration`, a grace past
    // `maxGrace`, the client among its own verifiers. Whether the Rust checks or the
    // simulation catch them, nothing is sent.
    let me = client.address();
    let chain_only: Vec<(ChainTx, &str)> = vec![
        (
            with(&|t| *terms(t).4 = now + MAX_DURATION + 3_600),
            "DeadlineTooFar",
        ),
        (
            with(&|t| {
                if let ChainTx::CreateJob { grace, .. } = t {
                    *grace = MAX_GRACE + 1;
                }
            }),
            "GraceTooLong",
        ),
        (with(&|t| terms(t).2[2] = me), "ClientIsVerifier"),
    ];
    for (tx, name) in chain_only {
        let err = client.submit(&tx).await.expect_err(name);
        let refused_here = matches!(err, ChainError::CreateJobRefused(_));
        let refused_there =
            matches!(err, ChainError::Reverted { tx: None, .. }) && err.revert_name() == Some(name);
        assert!(refused_here || refused_there, "{name}: {err:?}");
        untouched(&chain, &client, nonce).await?;
    }

    // Passes the Rust checks but not the chain: a budget above the client's balance. The
    // simulation runs the approval first, so the token's balance check is what fails (not
    // its allowance check), and the amounts are in tokens.
    let rich = with(&|t| *terms(t).0 = U256::from(CLIENT_FUNDS + 1));
    let err = client
        .submit(&rich)
        .await
        .expect_err("more than the client has");
    assert_eq!(err.revert_name(), Some("ERC20InsufficientBalance"), "{err}");
    assert!(matches!(err, ChainError::Reverted { tx: None, .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("holds 10 ") && msg.contains("10.000001 needed"),
        "{msg}"
    );
    untouched(&chain, &client, nonce).await?;
    client.preflight_create_job(&good).await?;

    // A good one: approve (exactly the budget, all of it pulled) and createJob.
    client.submit(&good).await?;
    untouched(&chain, &client, nonce + 2).await?;
    Ok(())
}

async fn err_names(client: &ChainClient, tx: &ChainTx) -> Result<String> {
    match client.preflight_create_job(tx).await {
        Ok(()) => bail!("accepted"),
        Err(e) => Ok(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_resumes_from_its_cursor() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let cursor_dir = tempfile::tempdir()?;

    let job = open_job(&chain, &client, &provider, 2).await?;
    let expected = expected_events(&chain, client.address(), provider.address(), &job);

    // First run: handles creation and assignment and commits them.
    let mut first = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    let seen = follow_until(&mut first, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::ProviderAssigned { .. })
    })
    .await?;
    let committed = first.committed_block().context("a commit happened")?;
    client.submit(&accept(&client, job.id, 150)).await?;
    // It reads the acceptance but "crashes" before committing it.
    let uncommitted = tokio::time::timeout(Duration::from_secs(10), first.next_batch()).await??;
    assert_eq!(
        uncommitted
            .events
            .iter()
            .map(|e| &e.event)
            .collect::<Vec<_>>(),
        vec![&expected[2]]
    );
    // Within one process nothing is delivered twice.
    assert!(first.poll().await?.events.is_empty());
    assert_eq!(first.committed_block(), Some(committed));
    drop(first);

    client.submit(&accept(&client, job.id, TOTAL_STEPS)).await?;

    // Second run: resumes after the cursor; the uncommitted acceptance comes again, the
    // committed events do not, and nothing is missed.
    let mut second = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    assert!(!second.restarted_from_scratch());
    assert_eq!(second.next_block(), committed + 1);
    // What the first run handled, for rebuilding the machines before going live.
    let handled = second.history().await?;
    assert_eq!(handled, seen);
    let rest = follow_until(&mut second, Duration::from_secs(10), is_completed).await?;
    let mut all: Vec<ChainEvent> = seen.iter().map(|e| e.event.clone()).collect();
    all.extend(rest.iter().map(|e| e.event.clone()));
    assert_eq!(all, expected);
    let head = client.block_number().await?;
    assert_eq!(second.committed_block(), Some(head));
    // After the commit, history covers everything, including what this run delivered.
    let history: Vec<ChainEvent> = second
        .history()
        .await?
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(history, expected);
    drop(second);

    // Third run: everything is committed, so it has nothing to say.
    let mut third = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    assert_eq!(third.next_block(), head + 1);
    assert!(third.poll().await?.events.is_empty());
    let path = third.cursor_path().to_path_buf();
    drop(third);

    // A cursor naming a block this chain does not have (anvil was restarted): replay all.
    let text = std::fs::read_to_string(&path)?;
    let real_hash = format!("{}", client_block_hash(&chain, head).await?);
    ensure!(
        text.contains(&real_hash),
        "cursor holds the block hash: {text}"
    );
    std::fs::write(
        &path,
        text.replace(&real_hash, &format!("{}", B256::repeat_byte(7))),
    )?;
    let mut fresh = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    assert!(fresh.restarted_from_scratch());
    let replayed = follow_until(&mut fresh, Duration::from_secs(10), is_completed).await?;
    assert_eq!(
        replayed.into_iter().map(|e| e.event).collect::<Vec<_>>(),
        expected
    );
    drop(fresh);

    // A damaged cursor is a named error, not a panic and not a silent replay.
    std::fs::write(&path, b"{ not json")?;
    let err = EventFollower::open(&client, fast(cursor_dir.path()))
        .await
        .expect_err("a damaged cursor is refused");
    assert!(matches!(err, ChainError::Cursor { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("delete"),
        "{msg}"
    );
    Ok(())
}

async fn client_block_hash(chain: &Chain, number: u64) -> Result<B256> {
    Ok(chain
        .raw()
        .get_block_by_number(number.into())
        .await?
        .context("block")?
        .header
        .hash)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_rpc_names_the_url() -> Result<()> {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut config = ChainConfig::new(
        url.clone(),
        Address::repeat_byte(1),
        Address::repeat_byte(2),
    );
    config.retry = RetryPolicy {
        attempts: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(50),
    };
    let started = std::time::Instant::now();
    let err = ChainClient::connect(config.clone(), PrivateKeySigner::random())
        .await
        .expect_err("nothing listens there");
    assert!(matches!(err, ChainError::Unreachable { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&url) && msg.contains("running"), "{msg}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "retries are bounded"
    );

    let dir = tempfile::tempdir()?;
    let err = EventFollower::connect(
        &url,
        config.escrow,
        config.retry,
        FollowerConfig::new(0, dir.path()),
    )
    .await
    .expect_err("nothing listens there");
    assert!(err.to_string().contains(&url), "{err}");

    // Reachable, but a wrong escrow address is named too.
    let chain = Chain::start().await?;
    let mut wrong = chain.config();
    wrong.escrow = Address::repeat_byte(0xee);
    let err = ChainClient::connect(wrong, chain.keys[1].clone())
        .await
        .expect_err("no contract there");
    assert!(
        matches!(err, ChainError::NoContract { what: "escrow", .. }),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors_are_retried_until_the_rpc_is_up() -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    // anvil comes up only after the first tries have failed
    let late = tokio::task::spawn_blocking(move || -> Result<AnvilInstance> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(Toolchain::from_build_checkout()
            .anvil_builder()?
            .port(port)
            .try_spawn()?)
    });
    let retry = RetryPolicy {
        attempts: 12,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(500),
    };
    let dir = tempfile::tempdir()?;
    let connected = EventFollower::connect(
        &url,
        Address::repeat_byte(1),
        retry,
        FollowerConfig::new(0, dir.path()),
    )
    .await;
    let anvil = late.await??;
    let mut follower = connected?;
    assert!(follower.poll().await?.events.is_empty());
    drop(anvil);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfunded_account_names_address_and_balance() -> Result<()> {
    let chain = Chain::start().await?;
    let broke = PrivateKeySigner::random();
    let client = ChainClient::connect(chain.config(), broke.clone()).await?;
    let err = client
        .mint(broke.address(), U256::from(1))
        .await
        .expect_err("no ETH for gas");
    match &err {
        ChainError::Unfunded {
            address,
            balance,
            needed,
            call,
        } => {
            assert_eq!(*address, broke.address());
            assert_eq!(*balance, U256::ZERO);
            assert!(*needed > U256::ZERO);
            assert_eq!(*call, "mint");
        }
        other => bail!("expected Unfunded, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&broke.address().to_string()) && msg.contains("balance is 0 wei"),
        "{msg}"
    );
    // Nothing was sent: the account's nonce is untouched.
    let nonce = chain.raw().get_transaction_count(broke.address()).await?;
    assert_eq!(nonce, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverts_carry_the_contract_error_name() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;

    // Caught by the estimate: nothing is sent.
    let err = client
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await
        .expect_err("nothing to withdraw");
    assert_eq!(err.revert_name(), Some("NothingToWithdraw"), "{err}");
    assert!(matches!(err, ChainError::Reverted { tx: None, .. }));
    assert!(
        err.to_string()
            .starts_with("withdraw reverted: NothingToWithdraw"),
        "{err}"
    );

    let job = open_job(&chain, &client, &provider, 2).await?;
    let ChainTx::AcceptCheckpoint {
        job_id,
        step,
        checkpoint_hash,
        sigs,
        ..
    } = accept(&client, job.id, 150)
    else {
        bail!("accept builds an AcceptCheckpoint");
    };
    let err = client
        .submit(&ChainTx::AcceptCheckpoint {
            job_id,
            epoch: 2,
            step,
            checkpoint_hash,
            sigs,
        })
        .await
        .expect_err("epoch 2 is not live");
    assert_eq!(err.revert_name(), Some("WrongEpoch"), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("given: 2") && msg.contains("current: 1"),
        "{msg}"
    );
    let err = client.job(U256::from(99)).await.expect_err("no job 99");
    assert_eq!(err.revert_name(), Some("UnknownJob"), "{err}");

    // Reverted on chain: two withdrawals in flight at once (pipelined nonces) both pass the
    // estimate, but only the first finds anything to withdraw.
    client.submit(&accept(&client, job.id, 150)).await?;
    chain.set_automine(false).await?;
    let call = gpuchain_contracts::JobEscrow::withdrawCall { token: chain.usdc };
    let data = alloy::sol_types::SolCall::abi_encode(&call);
    let a = provider
        .send("withdraw", chain.escrow, data.clone())
        .await?;
    let b = provider.send("withdraw", chain.escrow, data).await?;
    assert_eq!(b.nonce, a.nonce + 1);
    chain.mine().await?;
    chain.set_automine(true).await?;
    provider.wait(a).await?;
    let err = provider
        .wait(b)
        .await
        .expect_err("second withdrawal finds nothing");
    assert_eq!(err.revert_name(), Some("NothingToWithdraw"), "{err}");
    assert!(matches!(err, ChainError::Reverted { tx: Some(h), .. } if h == b.hash));
    assert_eq!(
        client.token_balance(provider.address()).await?,
        U256::from(PROVIDER_FUNDS - MIN_STAKE + 150 * PRICE)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonces_pipeline_and_recover() -> Result<()> {
    let chain = Chain::start().await?;
    let mut config = chain.config();
    config.receipt_timeout = Duration::from_millis(500);
    let client = ChainClient::connect(config, chain.keys[4].clone()).await?;
    let me = client.address();

    // Concurrent sends from clones share one nonce sequence.
    let (twin, triplet) = (client.clone(), client.clone());
    let (a, b, c, d) = tokio::join!(
        client.mint(me, U256::from(1)),
        twin.mint(me, U256::from(2)),
        client.mint(me, U256::from(3)),
        triplet.mint(me, U256::from(4)),
    );
    for r in [a, b, c, d] {
        r?;
    }
    assert_eq!(client.token_balance(me).await?, U256::from(10));

    // Another process uses the same key: our cached nonce is now too low.
    let other = ProviderBuilder::new()
        .wallet(EthereumWallet::from(chain.keys[4].clone()))
        .connect_http(chain.anvil.endpoint_url());
    let token = gpuchain_contracts::TestUSDC::new(chain.usdc, &other);
    token
        .mint(me, U256::from(100))
        .send()
        .await?
        .get_receipt()
        .await?;
    client.mint(me, U256::from(1_000)).await?;
    assert_eq!(client.token_balance(me).await?, U256::from(1_110));

    // A dropped transaction: its receipt never comes, and the nonce it held is reused.
    chain.set_automine(false).await?;
    let data = alloy::sol_types::SolCall::abi_encode(&gpuchain_contracts::TestUSDC::mintCall {
        to: me,
        amount: U256::from(10_000),
    });
    let dropped = client.send("mint", chain.usdc, data).await?;
    let _: serde_json::Value = chain
        .raw()
        .raw_request("anvil_dropTransaction".into(), (dropped.hash,))
        .await?;
    let err = client.wait(dropped).await.expect_err("dropped");
    assert!(
        matches!(err, ChainError::ReceiptTimeout { hash, .. } if hash == dropped.hash),
        "{err}"
    );
    chain.set_automine(true).await?;
    let after = client.mint(me, U256::from(100_000)).await?;
    let tx = chain
        .raw()
        .get_transaction_by_hash(after.hash)
        .await?
        .context("mined")?;
    assert_eq!(alloy::consensus::Transaction::nonce(&tx), dropped.nonce);
    assert_eq!(client.token_balance(me).await?, U256::from(101_110));
    Ok(())
}
