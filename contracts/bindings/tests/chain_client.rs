//! The chain client and event follower against a real anvil (the npm-installed one) and the
//! real contracts: a verifier pool staked, unbonded and withdrawn through the client, a job
//! end to end through `ChainTx` (its committee drawn in a later block, bids signed over the
//! job's terms, accepts signed by subsets of the committee, fees charged per signer and
//! credited by the settle), balances to the unit and gas to the wei, the exact event
//! sequence (voters, fees, `CommitteeDrawn`, `CommitteeSeedMoved`, a late accept that
//! supersedes a live epoch), rejects with and without the whole committee (only the
//! unanimous one slashes, and the slash is burned), a provider resigning, a follower
//! restarted from its cursor, the createJob preflight's refusals (committee size, quorum,
//! the chain's pool, the budget with fees), the named errors (unreachable RPC, unfunded
//! account, custom reverts), and nonce recovery.
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
use gpuchain_protocol::escrow::{draw, draw_seed};
use gpuchain_protocol::{Sig65, SigningKey};

const MIN_STAKE: u64 = 100_000_000;
const MIN_VERIFIER_STAKE: u64 = 50_000_000;
const UNBOND_DELAY: u64 = 3_600;
const DECISION_WINDOW: u64 = 120;
/// The deployment's limits: a week to the deadline, a day of grace.
const MAX_DURATION: u64 = 7 * 86_400;
const MAX_GRACE: u64 = 86_400;
const BUDGET: u64 = 5_000_000;
const PRICE: u64 = 1_000;
const MAX_PRICE: u64 = 10 * PRICE;
const TOTAL_STEPS: u64 = 400;
const INTERVAL: u64 = 50;
const COMMITTEE: u8 = 3;
const QUORUM: u8 = 2;
/// What each signer of a decision earns: 0.002 USDC.
const FEE: u64 = 2_000;
const GRACE: u64 = 3_600;
const DEADLINE_IN: u64 = 86_400;
const CLIENT_FUNDS: u64 = 10_000_000;
const PROVIDER_FUNDS: u64 = 200_000_000;
/// The anvil keys of the verifier pool, in registration order: with a client outside the
/// pool, every committee of three is this pool in the order the draw picks.
const POOL: [usize; 3] = [5, 6, 7];
/// Who signs the two accepts of [`open_job`]'s job, by committee position.
const FIRST_SIGNERS: [usize; 2] = [0, 2];
const FINAL_SIGNERS: [usize; 3] = [0, 1, 2];

/// A fresh anvil with the escrow and test USDC deployed; anvil is killed on drop.
struct Chain {
    anvil: AnvilInstance,
    escrow: Address,
    usdc: Address,
    keys: Vec<PrivateKeySigner>,
}

impl Chain {
    /// The contracts, and the verifier pool ([`POOL`]) staked at the minimum.
    async fn start() -> Result<Self> {
        let chain = Self::bare().await?;
        for key in POOL {
            let verifier = chain.client(key).await?;
            verifier
                .mint(verifier.address(), U256::from(MIN_VERIFIER_STAKE))
                .await?;
            verifier
                .register_verifier(U256::from(MIN_VERIFIER_STAKE))
                .await?;
        }
        Ok(chain)
    }

    /// The contracts only: nobody staked.
    async fn bare() -> Result<Self> {
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
            unbond_delay: UNBOND_DELAY,
            max_duration: MAX_DURATION,
            max_grace: MAX_GRACE,
            decision_window: DECISION_WINDOW,
            min_verifier_stake: U256::from(MIN_VERIFIER_STAKE),
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

    /// The protocol key of the anvil account at `address`.
    fn key_of(&self, address: Address) -> Result<SigningKey> {
        let index = self
            .keys
            .iter()
            .position(|k| k.address() == address)
            .with_context(|| format!("{address} is no anvil account"))?;
        self.protocol_key(index)
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

    /// Mines `blocks` empty blocks at once, without moving the clock.
    async fn mine_blocks(&self, blocks: u64) -> Result<()> {
        let _: serde_json::Value = self
            .raw()
            .raw_request(
                "anvil_mine".into(),
                (format!("{blocks:#x}"), "0x0".to_string()),
            )
            .await?;
        Ok(())
    }

    async fn advance(&self, seconds: u64) -> Result<()> {
        let _: serde_json::Value = self
            .raw()
            .raw_request("evm_increaseTime".into(), (seconds,))
            .await?;
        self.mine().await
    }

    async fn block_hash(&self, number: u64) -> Result<B256> {
        Ok(self
            .raw()
            .get_block_by_number(number.into())
            .await?
            .context("block")?
            .header
            .hash)
    }

    fn pool(&self) -> Vec<Address> {
        POOL.iter().map(|k| self.keys[*k].address()).collect()
    }
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
        committee_size: COMMITTEE,
        quorum: QUORUM,
        verifier_fee: U256::from(FEE),
        deadline: now + DEADLINE_IN,
        grace: GRACE,
    }
}

/// A job opened by [`open_job`], with its committee and the gas each side paid on the way.
struct Job {
    id: U256,
    deadline: u64,
    seed_block: u64,
    /// In draw order, and each member's key at the same position.
    committee: Vec<Address>,
    member_keys: Vec<SigningKey>,
    client_fees: U256,
    provider_fees: U256,
}

impl Job {
    /// The committee's votes on `step` of `epoch`, signed by the members at `members`
    /// (committee positions), in that order.
    fn votes(
        &self,
        client: &ChainClient,
        epoch: u64,
        step: u64,
        accept: bool,
        members: &[usize],
    ) -> Vec<Sig65> {
        let vote = VoteFields {
            job_id: self.id,
            epoch,
            step,
            checkpoint_hash: checkpoint(step),
            accept,
        };
        members
            .iter()
            .map(|i| vote.sign(&client.domain(), &self.member_keys[*i]))
            .collect()
    }

    fn accept(&self, client: &ChainClient, epoch: u64, step: u64, members: &[usize]) -> ChainTx {
        ChainTx::AcceptCheckpoint {
            job_id: self.id,
            epoch,
            step,
            checkpoint_hash: checkpoint(step),
            sigs: self.votes(client, epoch, step, true, members),
        }
    }

    fn reject(&self, client: &ChainClient, epoch: u64, step: u64, members: &[usize]) -> ChainTx {
        ChainTx::RejectCheckpoint {
            job_id: self.id,
            epoch,
            step,
            checkpoint_hash: checkpoint(step),
            sigs: self.votes(client, epoch, step, false, members),
        }
    }
}

/// The `voters` bit set of the members at `members`.
fn voters(members: &[usize]) -> U256 {
    members
        .iter()
        .fold(U256::ZERO, |v, i| v | (U256::from(1) << *i))
}

/// Funds both parties, creates the job, has a third account draw its committee in a later
/// block, stakes the provider and assigns it epoch 1 with a Bid signed by the protocol crate.
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
    let view = client.job(id).await?;
    assert_eq!(view.status, 5, "Drawing");
    assert_eq!(view.seedBlock, created.block_number);
    // Anyone may draw, in a later block: a third account does.
    let drawer = chain.client(3).await?;
    let drawn = drawer
        .submit(&ChainTx::DrawCommittee { job_id: id })
        .await?;
    assert!(drawn.block_number > created.block_number);
    let view = client.job(id).await?;
    assert_eq!(view.status, 1, "Open");
    let seed = draw_seed(chain.block_hash(created.block_number).await?, id);
    let expected = draw(
        seed,
        &chain.pool(),
        client.address(),
        usize::from(COMMITTEE),
    )
    .context("the pool holds a committee")?;
    assert_eq!(view.committee, expected, "the chain's draw is the Rust one");
    let member_keys = view
        .committee
        .iter()
        .map(|a| chain.key_of(*a))
        .collect::<Result<Vec<_>>>()?;
    let registered = provider.register(U256::from(MIN_STAKE)).await?;

    // The provider signs over the terms it read from the chain.
    let bid = BidFields {
        job_id: id,
        terms: view.terms,
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
        deadline: now + DEADLINE_IN,
        seed_block: created.block_number,
        committee: view.committee,
        member_keys,
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
        follower.commit(&batch).await?;
        seen.extend(batch.events);
    }
    Ok(seen)
}

fn created_event(chain: &Chain, client: Address, job: &Job) -> ChainEvent {
    ChainEvent::JobCreated {
        job_id: job.id,
        client,
        token: chain.usdc,
        budget: U256::from(BUDGET),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: TOTAL_STEPS,
        checkpoint_interval: INTERVAL,
        spec_hash: spec_hash(),
        committee_size: COMMITTEE,
        quorum: QUORUM,
        verifier_fee: U256::from(FEE),
        deadline: job.deadline,
        grace: GRACE,
        seed_block: job.seed_block,
    }
}

/// The events of [`open_job`]'s job accepted at 150 by [`FIRST_SIGNERS`] and at the final
/// step by [`FINAL_SIGNERS`].
fn expected_events(
    chain: &Chain,
    client: Address,
    provider: Address,
    job: &Job,
) -> Vec<ChainEvent> {
    let id = job.id;
    let created = created_event(chain, client, job);
    let terms = created.terms_with(&job.committee).unwrap_or(B256::ZERO);
    let fees = U256::from((FIRST_SIGNERS.len() + FINAL_SIGNERS.len()) as u64 * FEE);
    vec![
        created,
        ChainEvent::CommitteeDrawn {
            job_id: id,
            committee: job.committee.clone(),
            terms,
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
            voters: voters(&FIRST_SIGNERS),
            fees: U256::from(FIRST_SIGNERS.len() as u64 * FEE),
        },
        ChainEvent::CheckpointAccepted {
            job_id: id,
            epoch: 1,
            step: TOTAL_STEPS,
            checkpoint_hash: checkpoint(TOTAL_STEPS),
            provider,
            amount: U256::from(250 * PRICE),
            voters: voters(&FINAL_SIGNERS),
            fees: U256::from(FINAL_SIGNERS.len() as u64 * FEE),
        },
        ChainEvent::EpochEnded {
            job_id: id,
            epoch: 1,
            reason: EpochEndReason::Completed,
        },
        ChainEvent::JobCompleted {
            job_id: id,
            refund: U256::from(BUDGET - TOTAL_STEPS * PRICE) - fees,
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

    // Anyone may submit a quorum: here a third account does. Two of the three sign the
    // first accept, all three the final one; each signer earns the fee.
    let first = relayer
        .submit(&job.accept(&relayer, 1, 150, &FIRST_SIGNERS))
        .await?;
    let last = relayer
        .submit(&job.accept(&relayer, 1, TOTAL_STEPS, &FINAL_SIGNERS))
        .await?;
    assert!(last.block_number > first.block_number);
    let view = client.job(job.id).await?;
    assert_eq!(view.status, 3, "Completed");
    assert_eq!(view.lastAcceptedStep, TOTAL_STEPS);

    let paid = U256::from(TOTAL_STEPS * PRICE);
    // Decisions each member earned a fee for, by committee position: 2, 1, 2.
    let decisions = [2u64, 1, 2];
    let fees = U256::from(decisions.iter().sum::<u64>() * FEE);
    let refund = U256::from(BUDGET) - paid - fees;
    assert_eq!(
        client.withdrawable(provider.address(), chain.usdc).await?,
        paid
    );
    // Completion leaves the rest in the job: the client's refund and the fees wait for
    // `settle`.
    assert_eq!(view.remaining, refund);
    assert!(!view.settled);
    for who in job.committee.iter().chain([&client.address()]) {
        assert_eq!(client.withdrawable(*who, chain.usdc).await?, U256::ZERO);
    }
    assert_eq!(provider.stake_of(provider.address()).await?.live_epochs, 0);
    // Anyone may settle, once: here the relayer does.
    let settled = relayer.submit(&ChainTx::Settle { job_id: job.id }).await?;
    let err = relayer
        .submit(&ChainTx::Settle { job_id: job.id })
        .await
        .expect_err("settled already");
    assert_eq!(err.revert_name(), Some("NothingToSettle"), "{err}");
    let view = client.job(job.id).await?;
    assert_eq!(view.remaining, U256::ZERO);
    assert!(view.settled);
    assert_eq!(
        client.withdrawable(client.address(), chain.usdc).await?,
        refund
    );
    for (member, n) in job.committee.iter().zip(decisions) {
        assert_eq!(
            client.withdrawable(*member, chain.usdc).await?,
            U256::from(n * FEE)
        );
    }
    let w1 = provider
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;
    let w2 = client
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;
    for (member, n) in job.committee.iter().zip(decisions) {
        let index = chain
            .keys
            .iter()
            .position(|k| k.address() == *member)
            .context("a member's key")?;
        let verifier = chain.client(index).await?;
        verifier
            .submit(&ChainTx::Withdraw { token: chain.usdc })
            .await?;
        assert_eq!(
            client.token_balance(*member).await?,
            U256::from(n * FEE),
            "its stake is in the escrow, its fees in its wallet"
        );
    }

    let stake = U256::from(MIN_STAKE);
    assert_eq!(
        client.token_balance(provider.address()).await?,
        U256::from(PROVIDER_FUNDS) - stake + paid
    );
    assert_eq!(
        client.token_balance(client.address()).await?,
        U256::from(CLIENT_FUNDS) - paid - fees
    );
    assert_eq!(
        client.token_balance(chain.escrow).await?,
        stake + U256::from(3 * MIN_VERIFIER_STAKE),
        "only the stakes stay in escrow"
    );
    for who in [provider.address(), client.address()] {
        assert_eq!(client.withdrawable(who, chain.usdc).await?, U256::ZERO);
    }
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
    assert_eq!(events[0].terms_with(&job.committee), Some(terms));
    assert_eq!(seen[7].block_number, settled.block_number);
    assert_eq!(seen[3].block_number, first.block_number);
    assert_eq!(seen[3].tx_hash, Some(first.hash));
    assert_eq!(seen[4].block_number, last.block_number);
    // Completion is three logs of one transaction, in log order.
    assert_eq!(seen[5].block_number, last.block_number);
    assert!(seen[4].log_index < seen[5].log_index && seen[5].log_index < seen[6].log_index);
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
    // Withdrawals and fee credits are no protocol input, nor a failed settle: nothing more
    // arrives.
    let batch = follower.poll().await?;
    assert!(batch.events.is_empty(), "{:?}", batch.events);

    // The job's money, summed from its events, matches the balances above.
    let money = client.job_money(job.id, 0).await?;
    assert_eq!(money.status_name(), "Completed");
    assert_eq!(money.deposit, U256::from(BUDGET));
    assert_eq!(money.committee, job.committee);
    assert_eq!(money.paid.len(), 1);
    assert_eq!(money.paid_to(provider.address()), paid);
    for (member, n) in job.committee.iter().zip(decisions) {
        assert_eq!(money.fees_to(*member), U256::from(n * FEE));
    }
    assert_eq!(money.fees_total(), fees);
    assert_eq!(money.refunded, refund);
    assert_eq!(money.remaining, U256::ZERO);
    assert!(money.slashed.is_empty());
    assert!(money.conserved());
    assert_eq!(
        money.paid_total() + money.fees_total() + money.refunded + money.remaining,
        money.deposit
    );
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

/// A bid of `provider` for `epoch` of the job, at `price`.
async fn assign_tx(
    chain: &Chain,
    client: &ChainClient,
    job: &Job,
    provider_key: usize,
    epoch: u64,
    price: u64,
) -> Result<ChainTx> {
    let now = client.block_time().await?;
    let provider = chain.keys[provider_key].address();
    let bid = BidFields {
        job_id: job.id,
        terms: client.job(job.id).await?.terms,
        epoch,
        provider,
        price_per_step: U256::from(price),
        expiry: now + 600,
    };
    Ok(ChainTx::Assign {
        job_id: job.id,
        provider,
        price_per_step: bid.price_per_step,
        bid_expiry: bid.expiry,
        bid_signature: bid.sign(&client.domain(), &chain.protocol_key(provider_key)?),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_accept_rejects_and_expire_reach_the_follower() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let cursor_dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    let job = open_job(&chain, &client, &provider, 2).await?;
    let id = job.id;
    let p = provider.address();

    // The client ends epoch 1 and assigns epoch 2; epoch 1's next checkpoint, accepted by a
    // quorum within the decision window, is still paid to its provider and supersedes
    // epoch 2 (which started from the old head).
    client
        .submit(&ChainTx::ReleaseProvider { job_id: id })
        .await?;
    assert_eq!(provider.stake_of(p).await?.live_epochs, 0);
    let record = gpuchain_contracts::JobEscrow::new(chain.escrow, chain.raw())
        .closedEpoch(id, 1)
        .call()
        .await?;
    assert_eq!((record.provider, record.stepAtEnd), (p, 0));
    client
        .submit(&assign_tx(&chain, &client, &job, 2, 2, 2 * PRICE).await?)
        .await?;
    let late = job.accept(&client, 1, INTERVAL, &[1, 2]);
    client.submit(&late).await?;
    let view = client.job(id).await?;
    assert_eq!((view.status, view.lastAcceptedStep), (1, INTERVAL), "Open");
    assert_eq!(provider.stake_of(p).await?.live_epochs, 0);
    // Once: the record is used up.
    let err = client.submit(&late).await.expect_err("used up");
    assert_eq!(err.revert_name(), Some("WrongStatus"), "{err}");

    // Epoch 3: a quorum that is not the whole committee rejects: the epoch ends, nothing
    // is slashed, and the two signers earn their fees (the budget has slack for them).
    client
        .submit(&assign_tx(&chain, &client, &job, 2, 3, 2 * PRICE).await?)
        .await?;
    client
        .submit(&job.reject(&client, 3, 2 * INTERVAL, &[0, 2]))
        .await?;
    assert_eq!(provider.stake_of(p).await?.bonded, U256::from(MIN_STAKE));
    assert_eq!(client.burned().await?, U256::ZERO);

    // Epoch 4: the whole committee rejects: minStake is slashed and burned.
    client
        .submit(&assign_tx(&chain, &client, &job, 2, 4, 2 * PRICE).await?)
        .await?;
    client
        .submit(&job.reject(&client, 4, 2 * INTERVAL, &[2, 1, 0]))
        .await?;
    let stake = provider.stake_of(p).await?;
    assert_eq!(
        (stake.bonded, stake.unbonding, stake.live_epochs),
        (U256::ZERO, U256::ZERO, 0)
    );
    // The slash is burned: the escrow keeps it and credits it to no one.
    assert_eq!(client.burned().await?, U256::from(MIN_STAKE));
    assert_eq!(
        client.withdrawable(client.address(), chain.usdc).await?,
        U256::ZERO
    );

    // Too early to expire: the contract says until when.
    let err = client
        .submit(&ChainTx::Expire { job_id: id })
        .await
        .expect_err("deadline + grace not reached");
    assert_eq!(err.revert_name(), Some("TooEarly"), "{err}");
    chain.advance(DEADLINE_IN + GRACE + 10).await?;
    client.submit(&ChainTx::Expire { job_id: id }).await?;

    // Fees by committee position: the late accept (1, 2), the first reject (0, 2), the
    // unanimous one (all).
    let decisions = [2u64, 2, 3];
    let fees = U256::from(7 * FEE);
    let paid = U256::from(INTERVAL * PRICE);
    let refund = U256::from(BUDGET) - paid - fees;
    for (member, n) in job.committee.iter().zip(decisions) {
        assert_eq!(
            client.withdrawable(*member, chain.usdc).await?,
            U256::from(n * FEE)
        );
    }
    assert_eq!(client.withdrawable(p, chain.usdc).await?, paid);
    // The rest of the budget comes back and nothing more: the client gets nothing from the
    // rejects.
    let before = client.token_balance(client.address()).await?;
    client
        .submit(&ChainTx::Withdraw { token: chain.usdc })
        .await?;
    assert_eq!(
        client.token_balance(client.address()).await?,
        before + refund
    );
    assert_eq!(client.burned().await?, U256::from(MIN_STAKE));

    let seen = follow_until(&mut follower, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::JobExpired { .. })
    })
    .await?;
    let all = expected_events(&chain, client.address(), p, &job);
    let assigned =
        |epoch: u64, start_step: u64, start_checkpoint: B256| ChainEvent::ProviderAssigned {
            job_id: id,
            epoch,
            provider: p,
            price_per_step: U256::from(2 * PRICE),
            start_step,
            start_checkpoint,
        };
    let ended = |epoch: u64, reason: EpochEndReason| ChainEvent::EpochEnded {
        job_id: id,
        epoch,
        reason,
    };
    let rejected = |epoch: u64, members: &[usize], slashed: u64| ChainEvent::CheckpointRejected {
        job_id: id,
        epoch,
        step: 2 * INTERVAL,
        checkpoint_hash: checkpoint(2 * INTERVAL),
        provider: p,
        slashed: U256::from(slashed),
        voters: voters(members),
        fees: U256::from(members.len() as u64 * FEE),
    };
    assert_eq!(
        seen.into_iter().map(|e| e.event).collect::<Vec<_>>(),
        vec![
            all[0].clone(),
            all[1].clone(),
            all[2].clone(),
            ended(1, EpochEndReason::Released),
            assigned(2, 0, spec_hash()),
            ChainEvent::CheckpointAccepted {
                job_id: id,
                epoch: 1,
                step: INTERVAL,
                checkpoint_hash: checkpoint(INTERVAL),
                provider: p,
                // at epoch 1's price, not epoch 2's
                amount: paid,
                voters: voters(&[1, 2]),
                fees: U256::from(2 * FEE),
            },
            ended(2, EpochEndReason::Superseded),
            assigned(3, INTERVAL, checkpoint(INTERVAL)),
            rejected(3, &[0, 2], 0),
            ended(3, EpochEndReason::Rejected),
            assigned(4, INTERVAL, checkpoint(INTERVAL)),
            rejected(4, &[2, 1, 0], MIN_STAKE),
            ended(4, EpochEndReason::Rejected),
            ChainEvent::JobExpired { job_id: id, refund },
        ]
    );
    let money = client.job_money(id, 0).await?;
    assert_eq!(money.status_name(), "Expired");
    assert_eq!(money.paid_to(p), paid);
    assert_eq!(money.refunded, refund);
    assert_eq!(money.fees_total(), fees);
    for (member, n) in job.committee.iter().zip(decisions) {
        assert_eq!(money.fees_to(*member), U256::from(n * FEE));
    }
    assert_eq!(money.slashed_total(), U256::from(MIN_STAKE));
    assert_eq!(money.slashed.get(&p), Some(&U256::from(MIN_STAKE)));
    assert_eq!(money.remaining, U256::ZERO);
    assert!(money.conserved());

    // The chain's record of the provider and of each member, folded from the same events.
    let record = client.chain_record(0).await?;
    let r = record.provider(&p);
    assert_eq!(
        (
            r.epochs_assigned,
            r.checkpoints_accepted,
            r.late_accepts,
            r.paid
        ),
        (4, 1, 1, paid)
    );
    assert_eq!(
        (
            r.epochs_rejected,
            r.epochs_slashed,
            r.epochs_lost,
            r.epochs_superseded,
            r.epochs_expired,
            r.epochs_completed
        ),
        (2, 1, 1, 1, 0, 0)
    );
    for (member, n) in job.committee.iter().zip(decisions) {
        let v = record.verifier(member);
        assert_eq!(
            (v.seats, v.with_outcome, v.without_outcome, v.fees),
            (1, n, 3 - n, U256::from(n * FEE))
        );
    }
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

    // The live epoch reserves the whole stake: none of it can unbond.
    let err = provider
        .request_unbond(U256::from(1))
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
    provider.request_unbond(U256::from(MIN_STAKE)).await?;
    let stake = provider.stake_of(provider.address()).await?;
    assert_eq!(
        (stake.bonded, stake.unbonding),
        (U256::ZERO, U256::from(MIN_STAKE))
    );
    assert!(stake.unbond_at > 0);
    let err = provider
        .withdraw_stake()
        .await
        .expect_err("the delay has not passed");
    assert_eq!(err.revert_name(), Some("TooEarly"), "{err}");
    chain.advance(UNBOND_DELAY).await?;
    let before = client.token_balance(provider.address()).await?;
    provider.withdraw_stake().await?;
    assert_eq!(
        client.token_balance(provider.address()).await?,
        before + U256::from(MIN_STAKE)
    );

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
            all[2].clone(),
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
    assert_eq!(money.fees_total(), U256::ZERO);
    assert!(money.slashed.is_empty());
    assert_eq!(money.remaining, U256::from(BUDGET));
    assert!(money.conserved());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifier_stake_joins_and_leaves_the_pool() -> Result<()> {
    let chain = Chain::bare().await?;
    let min = U256::from(MIN_VERIFIER_STAKE);
    let verifiers: Vec<ChainClient> = {
        let mut v = Vec::new();
        for key in 4..=7 {
            v.push(chain.client(key).await?);
        }
        v
    };
    let client = chain.client(1).await?;
    // The escrow's immutables, as deployed.
    assert_eq!(client.min_verifier_stake().await?, min);
    assert_eq!(client.min_stake().await?, U256::from(MIN_STAKE));
    let limits = client.escrow_limits().await?;
    assert_eq!(
        (limits.max_duration, limits.max_grace),
        (MAX_DURATION, MAX_GRACE)
    );
    assert_eq!(client.stake_token().await?, chain.usdc);
    assert_eq!(client.token_decimals(chain.usdc).await, 6);
    // Without a token named, a client pays in the stake token.
    let paying = ChainClient::connect_paying_in(
        chain.anvil.endpoint().as_str(),
        chain.escrow,
        None,
        chain.keys[1].clone(),
    )
    .await?;
    assert_eq!(paying.token(), chain.usdc);
    assert!(client.verifier_pool().await?.is_empty());
    assert_eq!(client.available_verifiers(client.address()).await?, 0);
    for v in &verifiers {
        v.mint(v.address(), U256::from(4 * MIN_VERIFIER_STAKE))
            .await?;
    }

    // Below the minimum: staked, not pooled; the top-up that crosses it joins the pool.
    let a = &verifiers[0];
    a.register_verifier(min - U256::from(1)).await?;
    let s = a.verifier_stake_of(a.address()).await?;
    assert_eq!((s.bonded, s.pooled), (min - U256::from(1), false));
    assert!(client.verifier_pool().await?.is_empty());
    a.register_verifier(U256::from(1)).await?;
    assert!(a.verifier_stake_of(a.address()).await?.pooled);
    // Each registration approved exactly what it pulled.
    assert_eq!(a.allowance(a.address()).await?, U256::ZERO);
    for v in &verifiers[1..] {
        v.register_verifier(min).await?;
    }
    let order: Vec<Address> = verifiers.iter().map(ChainClient::address).collect();
    assert_eq!(client.verifier_pool().await?, order, "registration order");
    assert_eq!(client.available_verifiers(client.address()).await?, 4);
    // A pooled account is never drawn for its own jobs.
    assert_eq!(a.available_verifiers(a.address()).await?, 3);
    let changed = gpuchain_contracts::JobEscrow::new(chain.escrow, chain.raw())
        .poolChangedAt()
        .call()
        .await?;
    assert_eq!(changed, client.block_number().await?);

    // Stake above the minimum can unbond and stay pooled; more than is bonded cannot.
    let b = &verifiers[1];
    b.register_verifier(min).await?;
    b.request_verifier_unbond(min).await?;
    let s = b.verifier_stake_of(b.address()).await?;
    assert_eq!((s.bonded, s.unbonding, s.pooled), (min, min, true));
    assert!(s.unbond_at > 0);
    let err = b
        .request_verifier_unbond(min + U256::from(1))
        .await
        .expect_err("more than is bonded");
    assert_eq!(err.revert_name(), Some("StakeLocked"), "{err}");
    // Falling below the minimum leaves the pool: the last entry takes the leaver's place.
    b.request_verifier_unbond(U256::from(1)).await?;
    assert!(!b.verifier_stake_of(b.address()).await?.pooled);
    assert_eq!(
        client.verifier_pool().await?,
        vec![order[0], order[3], order[2]]
    );
    assert_eq!(client.available_verifiers(client.address()).await?, 3);

    // Withdrawn after the delay (restarted by the last request), all of it at once.
    let err = b
        .withdraw_verifier_stake()
        .await
        .expect_err("the delay has not passed");
    assert_eq!(err.revert_name(), Some("TooEarly"), "{err}");
    let err = verifiers[2]
        .withdraw_verifier_stake()
        .await
        .expect_err("nothing unbonding");
    assert_eq!(err.revert_name(), Some("NotUnbonding"), "{err}");
    chain.advance(UNBOND_DELAY).await?;
    let before = client.token_balance(b.address()).await?;
    b.withdraw_verifier_stake().await?;
    assert_eq!(
        client.token_balance(b.address()).await?,
        before + min + U256::from(1)
    );
    let s = b.verifier_stake_of(b.address()).await?;
    assert_eq!(
        (s.bonded, s.unbonding, s.unbond_at, s.pooled),
        (min - U256::from(1), U256::ZERO, 0, false)
    );
    // The escrow holds what stays bonded, to the unit.
    assert_eq!(
        client.token_balance(chain.escrow).await?,
        min * U256::from(4) - U256::from(1)
    );
    // Verifier stakes are no protocol input: a follower sees nothing of them.
    let dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(dir.path())).await?;
    assert!(follower.poll().await?.events.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committee_seed_moves_when_it_is_out_of_reach_or_the_pool_changed() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let anyone = chain.client(3).await?;
    let cursor_dir = tempfile::tempdir()?;
    let mut follower = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    client
        .mint(client.address(), U256::from(CLIENT_FUNDS))
        .await?;
    let now = client.block_time().await?;
    let created = client.submit(&create_job(&chain, now)).await?;
    let id = created.job_id.context("a job id")?;
    let draw_tx = ChainTx::DrawCommittee { job_id: id };

    // Nobody may assign before the draw.
    let provider = chain.client(2).await?;
    let job = Job {
        id,
        deadline: now + DEADLINE_IN,
        seed_block: created.block_number,
        committee: Vec::new(),
        member_keys: Vec::new(),
        client_fees: U256::ZERO,
        provider_fees: U256::ZERO,
    };
    let err = client
        .submit(&assign_tx(&chain, &client, &job, 2, 1, PRICE).await?)
        .await
        .expect_err("still drawing");
    assert_eq!(err.revert_name(), Some("WrongStatus"), "{err}");
    drop(provider);

    // Over 256 blocks later the seed block's hash is gone: the draw moves the seed instead.
    chain.mine_blocks(300).await?;
    let moved = anyone.submit(&draw_tx).await?;
    let view = client.job(id).await?;
    assert_eq!((view.status, view.seedBlock), (5, moved.block_number));
    // A verifier joins the pool after the new seed block: the next draw moves it again.
    let joiner = chain.client(8).await?;
    joiner
        .mint(joiner.address(), U256::from(MIN_VERIFIER_STAKE))
        .await?;
    joiner
        .register_verifier(U256::from(MIN_VERIFIER_STAKE))
        .await?;
    let moved_again = anyone.submit(&draw_tx).await?;
    assert_eq!(client.job(id).await?.seedBlock, moved_again.block_number);
    // Now the pool is as it was at the seed block: the draw happens, from that block's hash.
    let drawn = anyone.submit(&draw_tx).await?;
    let view = client.job(id).await?;
    assert_eq!(view.status, 1, "Open");
    let mut pool = chain.pool();
    pool.push(joiner.address());
    assert_eq!(client.verifier_pool().await?, pool);
    let seed = draw_seed(chain.block_hash(moved_again.block_number).await?, id);
    let expected =
        draw(seed, &pool, client.address(), usize::from(COMMITTEE)).context("a committee")?;
    assert_eq!(view.committee, expected);
    let err = anyone.submit(&draw_tx).await.expect_err("drawn already");
    assert_eq!(err.revert_name(), Some("WrongStatus"), "{err}");

    let seen = follow_until(&mut follower, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::CommitteeDrawn { .. })
    })
    .await?;
    let created_event = ChainEvent::JobCreated {
        job_id: id,
        client: client.address(),
        token: chain.usdc,
        budget: U256::from(BUDGET),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: TOTAL_STEPS,
        checkpoint_interval: INTERVAL,
        spec_hash: spec_hash(),
        committee_size: COMMITTEE,
        quorum: QUORUM,
        verifier_fee: U256::from(FEE),
        deadline: now + DEADLINE_IN,
        grace: GRACE,
        seed_block: created.block_number,
    };
    let terms = created_event
        .terms_with(&expected)
        .context("terms of a JobCreated")?;
    assert_eq!(terms, view.terms);
    assert_eq!(
        seen.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        vec![
            created_event,
            ChainEvent::CommitteeSeedMoved {
                job_id: id,
                seed_block: moved.block_number,
            },
            ChainEvent::CommitteeSeedMoved {
                job_id: id,
                seed_block: moved_again.block_number,
            },
            ChainEvent::CommitteeDrawn {
                job_id: id,
                committee: expected,
                terms,
            },
        ]
    );
    assert_eq!(seen[3].tx_hash, Some(drawn.hash));
    let money = client.job_money(id, 0).await?;
    assert_eq!(money.status_name(), "Open");
    assert_eq!(money.committee, view.committee);
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

/// The fields of a `CreateJob` the cases below change.
struct Terms<'a> {
    budget: &'a mut U256,
    max_price: &'a mut U256,
    committee_size: &'a mut u8,
    quorum: &'a mut u8,
    verifier_fee: &'a mut U256,
    deadline: &'a mut u64,
    grace: &'a mut u64,
}

fn terms(tx: &mut ChainTx) -> Option<Terms<'_>> {
    match tx {
        ChainTx::CreateJob {
            budget,
            max_price_per_step,
            committee_size,
            quorum,
            verifier_fee,
            deadline,
            grace,
            ..
        } => Some(Terms {
            budget,
            max_price: max_price_per_step,
            committee_size,
            quorum,
            verifier_fee,
            deadline,
            grace,
        }),
        _ => None,
    }
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
    let with = |f: &dyn Fn(Terms<'_>)| -> Result<ChainTx> {
        let mut tx = good.clone();
        f(terms(&mut tx).context("a CreateJob")?);
        Ok(tx)
    };
    let cases: Vec<(ChainTx, &str)> = vec![
        (
            // enough for every step at the maximum price, not for the fees
            with(&|t| *t.budget = U256::from(MAX_PRICE * TOTAL_STEPS))?,
            "budget 4 is less than the 4.048 the job can cost: every step at the maximum \
             price 0.01 plus the verifier fee 0.002 × 3 members × 8 checkpoints",
        ),
        (
            with(&|t| *t.verifier_fee = U256::from(100_000u64))?,
            "less than the 6.4 the job can cost",
        ),
        (
            with(&|t| *t.deadline = now)?,
            "is not after the chain's time",
        ),
        (
            with(&|t| *t.budget = U256::from(u128::MAX))?,
            "above the escrow's limit",
        ),
        (
            with(&|t| *t.verifier_fee = U256::from(1u128 << 96))?,
            "verifier fee",
        ),
        (
            with(&|t| *t.max_price = U256::ZERO)?,
            "maximum price per step must be positive",
        ),
        (
            with(&|t| {
                *t.committee_size = 1;
                *t.quorum = 1;
            })?,
            "a committee of 1 verifiers is outside the escrow's 2..=32",
        ),
        (
            with(&|t| {
                *t.committee_size = 33;
                *t.quorum = 17;
            })?,
            "a committee of 33 verifiers is outside",
        ),
        (with(&|t| *t.quorum = 0)?, "quorum 0 must be"),
        (with(&|t| *t.quorum = 4)?, "quorum 4 must be"),
        // One of three is no strict majority, nor two of four.
        (
            with(&|t| *t.quorum = 1)?,
            "quorum 1 must be a strict majority of the committee of 3",
        ),
        (
            with(&|t| {
                *t.committee_size = 4;
                *t.quorum = 2;
            })?,
            "quorum 2 must be a strict majority of the committee of 4",
        ),
        // Valid terms, but the chain's pool holds 3 verifiers.
        (
            with(&|t| {
                *t.committee_size = 4;
                *t.quorum = 3;
                *t.budget = U256::from(BUDGET);
            })?,
            "the escrow's verifier pool has 3 verifiers this client could be given, fewer \
             than the committee of 4",
        ),
    ];
    for (tx, says) in cases {
        let err = client.submit(&tx).await.expect_err(says);
        assert!(matches!(err, ChainError::CreateJobRefused(_)), "{err:?}");
        assert!(err.to_string().contains(says), "{err} / {says}");
        untouched(&chain, &client, nonce).await?;
        // The preflight alone says the same.
        let err = client.preflight_create_job(&tx).await.expect_err(says);
        assert!(err.to_string().contains(says), "{err} / {says}");
    }

    // Refused by the escrow's bounds on deadline and grace: whether the Rust checks or the
    // simulation catch them, nothing is sent.
    let chain_only: Vec<(ChainTx, &str)> = vec![
        (
            with(&|t| *t.deadline = now + MAX_DURATION + 3_600)?,
            "DeadlineTooFar",
        ),
        (with(&|t| *t.grace = MAX_GRACE + 1)?, "GraceTooLong"),
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
    let rich = with(&|t| *t.budget = U256::from(CLIENT_FUNDS + 1))?;
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

    // A budget of exactly what the job can cost, fees included, passes.
    let exact = with(&|t| {
        *t.budget = U256::from(MAX_PRICE * TOTAL_STEPS + FEE * 3 * 8);
    })?;
    client.preflight_create_job(&exact).await?;

    // A good one: approve (exactly the budget, all of it pulled) and createJob.
    client.submit(&good).await?;
    untouched(&chain, &client, nonce + 2).await?;

    // A client in the pool is never drawn for its own job: with it pooled, the pool of
    // four holds only three others, enough for three and not for four.
    let pooled = chain.client(4).await?;
    pooled
        .mint(
            pooled.address(),
            U256::from(CLIENT_FUNDS + MIN_VERIFIER_STAKE),
        )
        .await?;
    pooled
        .register_verifier(U256::from(MIN_VERIFIER_STAKE))
        .await?;
    assert_eq!(pooled.available_verifiers(pooled.address()).await?, 3);
    assert_eq!(client.available_verifiers(client.address()).await?, 4);
    let four = with(&|t| {
        *t.committee_size = 4;
        *t.quorum = 3;
    })?;
    client.preflight_create_job(&four).await?;
    let err = pooled
        .submit(&four)
        .await
        .expect_err("three others in the pool");
    assert!(
        err.to_string()
            .contains("pool has 3 verifiers this client could be given"),
        "{err}"
    );
    pooled.submit(&good).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_follower_resumes_from_its_cursor() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let provider = chain.client(2).await?;
    let cursor_dir = tempfile::tempdir()?;

    let job = open_job(&chain, &client, &provider, 2).await?;
    let expected = expected_events(&chain, client.address(), provider.address(), &job);

    // First run: handles creation, draw and assignment and commits them.
    let mut first = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    let seen = follow_until(&mut first, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::ProviderAssigned { .. })
    })
    .await?;
    let committed = first.committed_block().context("a commit happened")?;
    client
        .submit(&job.accept(&client, 1, 150, &FIRST_SIGNERS))
        .await?;
    // It reads the acceptance but "crashes" before committing it.
    let uncommitted = tokio::time::timeout(Duration::from_secs(10), first.next_batch()).await??;
    assert_eq!(
        uncommitted
            .events
            .iter()
            .map(|e| &e.event)
            .collect::<Vec<_>>(),
        vec![&expected[3]]
    );
    // Within one process nothing is delivered twice.
    assert!(first.poll().await?.events.is_empty());
    assert_eq!(first.committed_block(), Some(committed));
    first.flush().await?;
    drop(first);

    client
        .submit(&job.accept(&client, 1, TOTAL_STEPS, &FINAL_SIGNERS))
        .await?;

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
    second.flush().await?;
    drop(second);

    // Third run: everything is committed, so it has nothing to say.
    let mut third = EventFollower::open(&client, fast(cursor_dir.path())).await?;
    assert_eq!(third.next_block(), head + 1);
    assert!(third.poll().await?.events.is_empty());
    let path = third.cursor_path().to_path_buf();
    drop(third);

    // A cursor naming a block this chain does not have (anvil was restarted): replay all.
    let text = std::fs::read_to_string(&path)?;
    let real_hash = format!("{}", chain.block_hash(head).await?);
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
    fresh.flush().await?;
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
    // Epoch 2 is not live and was never ended by the client: no late accept either.
    let err = client
        .submit(&job.accept(&client, 2, 150, &FIRST_SIGNERS))
        .await
        .expect_err("epoch 2 is not live");
    assert_eq!(err.revert_name(), Some("WrongEpoch"), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("given: 2") && msg.contains("current: 1"),
        "{msg}"
    );
    // One vote is no quorum of two; a signer outside the committee is named.
    let err = client
        .submit(&job.accept(&client, 1, 150, &[1]))
        .await
        .expect_err("one vote");
    assert_eq!(err.revert_name(), Some("QuorumNotReached"), "{err}");
    let mut outsider = job.accept(&client, 1, 150, &FIRST_SIGNERS);
    if let ChainTx::AcceptCheckpoint { sigs, .. } = &mut outsider {
        let vote = VoteFields {
            job_id: job.id,
            epoch: 1,
            step: 150,
            checkpoint_hash: checkpoint(150),
            accept: true,
        };
        sigs[1] = vote.sign(&client.domain(), &chain.protocol_key(8)?);
    }
    let err = client
        .submit(&outsider)
        .await
        .expect_err("key 8 is not on the committee");
    assert_eq!(err.revert_name(), Some("NotVerifier"), "{err}");
    let err = client.job(U256::from(99)).await.expect_err("no job 99");
    assert_eq!(err.revert_name(), Some("UnknownJob"), "{err}");
    // A committee member cannot be the job's provider.
    let member = chain
        .keys
        .iter()
        .position(|k| k.address() == job.committee[0])
        .context("a member's key")?;
    let err = client
        .submit(&assign_tx(&chain, &client, &job, member, 2, PRICE).await?)
        .await
        .expect_err("a member as provider");
    assert_eq!(err.revert_name(), Some("ProviderIsVerifier"), "{err}");

    // Reverted on chain: two withdrawals in flight at once (pipelined nonces) both pass the
    // estimate, but only the first finds anything to withdraw.
    client
        .submit(&job.accept(&client, 1, 150, &FIRST_SIGNERS))
        .await?;
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

/// Reads (committing what it reads) until nothing new comes for 300 ms.
async fn drain(follower: &mut EventFollower) -> Result<()> {
    while let Ok(batch) =
        tokio::time::timeout(Duration::from_millis(300), follower.next_batch()).await
    {
        follower.commit(&batch?).await?;
    }
    Ok(())
}

/// Each cursor write is an fsync, so blocks without escrow events move the cursor at most
/// every `empty_commit_every`; the next block with events is committed as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_stretches_move_the_cursor_at_most_every_interval() -> Result<()> {
    let chain = Chain::start().await?;
    let client = chain.client(1).await?;
    let (slow_dir, eager_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut slow = EventFollower::open(
        &client,
        fast(slow_dir.path()).empty_commit_every(Duration::from_secs(3600)),
    )
    .await?;
    let mut eager = EventFollower::open(
        &client,
        fast(eager_dir.path()).empty_commit_every(Duration::ZERO),
    )
    .await?;
    drain(&mut slow).await?;
    drain(&mut eager).await?;
    let first = slow
        .committed_block()
        .context("the first stretch is committed")?;
    assert_eq!(eager.committed_block(), Some(first));

    chain.mine_blocks(5).await?;
    let head = client.block_number().await?;
    assert_eq!(head, first + 5);
    drain(&mut slow).await?;
    drain(&mut eager).await?;
    assert_eq!(slow.committed_block(), Some(first), "inside the interval");
    assert_eq!(eager.committed_block(), Some(head));
    // Reopened, the slow one reads the uncommitted empty blocks again, and nothing else.
    slow.flush().await?;
    drop(slow);
    let reopened = EventFollower::open(
        &client,
        fast(slow_dir.path()).empty_commit_every(Duration::from_secs(3600)),
    )
    .await?;
    assert_eq!(reopened.next_block(), first + 1);

    // Events are committed whatever the interval.
    let mut slow = reopened;
    let job = open_job(&chain, &client, &chain.client(2).await?, 2).await?;
    let seen = follow_until(&mut slow, Duration::from_secs(10), |e| {
        matches!(e, ChainEvent::ProviderAssigned { .. })
    })
    .await?;
    assert!(seen.iter().any(|e| matches!(&e.event,
        ChainEvent::ProviderAssigned { job_id, .. } if *job_id == job.id)));
    let last = seen.last().context("events")?.block_number;
    assert!(slow.committed_block() >= Some(last));
    Ok(())
}
