//! The bindings against a real anvil (the npm-installed one): deploy, stake a verifier pool,
//! create a job, see its committee draw refused in the seed block and made in a later one
//! (the committee the Rust draw computes from the chain's block hash and pool), register and
//! assign a provider with a Bid signed here over the job's terms, accept checkpoints with
//! Votes of 2 of the 3 members signed here (gas from the real receipts), settle the refund
//! and the fees, withdraw, and check every balance to the unit. Also checks the Rust-side
//! EIP-712 digests and signatures against the shared vector, which the forge suite checks on
//! the Solidity side, and the Rust terms hash against `termsOf`.

use alloy::eips::BlockId;
use alloy::network::{Ethereum, EthereumWallet};
use alloy::primitives::{Address, B256, Bytes, U256, address};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, SolEvent, SolStruct, eip712_domain};
use anyhow::{Context, Result, bail, ensure};
use gpuchain_contracts::{
    EIP712_NAME, EIP712_VERSION, EscrowParams, JobEscrow, TestUSDC, Toolchain, deploy_job_escrow,
    deploy_test_usdc,
};
use gpuchain_protocol::eip712::JobTerms;
use gpuchain_protocol::escrow::{draw as draw_committee, draw_seed};
use serde_json::Value;

alloy::sol! {
    #[derive(Debug)]
    struct Bid {
        uint256 jobId;
        bytes32 terms;
        uint64 epoch;
        address provider;
        uint256 pricePerStep;
        uint64 expiry;
    }

    #[derive(Debug)]
    struct Vote {
        uint256 jobId;
        uint64 epoch;
        uint64 step;
        bytes32 checkpointHash;
        bool accept;
    }
}

/// The first contract anvil's first account deploys (nonce 0): the vector's verifyingContract.
const FIRST_DEPLOYMENT: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const ANVIL_CHAIN_ID: u64 = 31337;

fn domain(chain_id: u64, escrow: Address) -> Eip712Domain {
    eip712_domain! {
        name: EIP712_NAME,
        version: EIP712_VERSION,
        chain_id: chain_id,
        verifying_contract: escrow,
    }
}

fn vector() -> Result<Value> {
    let path = Toolchain::from_build_checkout()
        .contracts_dir()
        .join("test/vectors/eip712.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value> {
    v.get(key).with_context(|| format!("vector has no {key}"))
}

fn str_of<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    field(v, key)?
        .as_str()
        .with_context(|| format!("{key} is not a string"))
}

fn u64_of(v: &Value, key: &str) -> Result<u64> {
    field(v, key)?
        .as_u64()
        .with_context(|| format!("{key} is not a u64"))
}

fn signer(v: &Value) -> Result<PrivateKeySigner> {
    Ok(str_of(v, "signerKey")?.parse()?)
}

fn vector_bid(v: &Value) -> Result<Bid> {
    let m = field(field(v, "bid")?, "message")?;
    Ok(Bid {
        jobId: U256::from(u64_of(m, "jobId")?),
        terms: str_of(m, "terms")?.parse()?,
        epoch: u64_of(m, "epoch")?,
        provider: str_of(m, "provider")?.parse()?,
        pricePerStep: U256::from(u64_of(m, "pricePerStep")?),
        expiry: u64_of(m, "expiry")?,
    })
}

fn vector_votes(v: &Value) -> Result<Vec<(Vote, &Value)>> {
    let votes = field(v, "votes")?
        .as_array()
        .context("votes is not a list")?;
    votes
        .iter()
        .map(|entry| {
            let m = field(entry, "message")?;
            let vote = Vote {
                jobId: U256::from(u64_of(m, "jobId")?),
                epoch: u64_of(m, "epoch")?,
                step: u64_of(m, "step")?,
                checkpointHash: str_of(m, "checkpointHash")?.parse()?,
                accept: field(m, "accept")?.as_bool().context("accept")?,
            };
            Ok((vote, entry))
        })
        .collect()
}

#[test]
fn rust_eip712_matches_shared_vector() -> Result<()> {
    let v = vector()?;
    let d = field(&v, "domain")?;
    ensure!(str_of(d, "name")? == EIP712_NAME);
    ensure!(str_of(d, "version")? == EIP712_VERSION);
    let dom = domain(
        u64_of(d, "chainId")?,
        str_of(d, "verifyingContract")?.parse()?,
    );
    assert_eq!(
        dom.separator(),
        str_of(&v, "domainSeparator")?.parse::<B256>()?
    );

    let bid = vector_bid(&v)?;
    let b = field(&v, "bid")?;
    assert_eq!(
        bid.eip712_type_hash(),
        str_of(&v, "bidTypehash")?.parse::<B256>()?
    );
    assert_eq!(
        bid.eip712_signing_hash(&dom),
        str_of(b, "digest")?.parse::<B256>()?
    );
    let sig = signer(b)?.sign_typed_data_sync(&bid, &dom)?;
    assert_eq!(
        Bytes::copy_from_slice(&sig.as_bytes()),
        str_of(b, "signature")?.parse::<Bytes>()?
    );

    let votes = vector_votes(&v)?;
    ensure!(votes.len() == 3, "the vector has three votes");
    for (vote, entry) in votes {
        assert_eq!(
            vote.eip712_type_hash(),
            str_of(&v, "voteTypehash")?.parse::<B256>()?
        );
        assert_eq!(
            vote.eip712_signing_hash(&dom),
            str_of(entry, "digest")?.parse::<B256>()?
        );
        let key = signer(entry)?;
        assert_eq!(key.address(), str_of(entry, "signer")?.parse::<Address>()?);
        let sig = key.sign_typed_data_sync(&vote, &dom)?;
        assert_eq!(
            Bytes::copy_from_slice(&sig.as_bytes()),
            str_of(entry, "signature")?.parse::<Bytes>()?
        );
    }
    Ok(())
}

const MIN_STAKE: u64 = 100_000_000;
const MIN_VERIFIER_STAKE: u64 = 50_000_000;
const BUDGET: u64 = 5_000_000;
const PRICE: u64 = 1_000;
const MAX_PRICE: u64 = 10 * PRICE;
const TOTAL_STEPS: u64 = 400;
const INTERVAL: u64 = 50;
/// What each signer of a decision earns.
const FEE: u64 = 2_000;
const COMMITTEE: u8 = 3;
const QUORUM: u8 = 2;
const DEADLINE_IN: u64 = 86_400;
const GRACE: u64 = 3_600;

type Receipt = alloy::rpc::types::TransactionReceipt;

/// Waits for the transaction and fails on a revert.
async fn mined(pending: alloy::providers::PendingTransactionBuilder<Ethereum>) -> Result<Receipt> {
    let receipt = pending.get_receipt().await?;
    if !receipt.status() {
        bail!("transaction {} reverted", receipt.transaction_hash);
    }
    Ok(receipt)
}

/// The escrow's logs of `E` in a receipt.
fn logs_of<E: SolEvent>(receipt: &Receipt) -> Vec<E> {
    receipt
        .inner
        .logs()
        .iter()
        .filter_map(|l| E::decode_log(&l.inner).ok().map(|l| l.data))
        .collect()
}

async fn set_automine(rpc: &impl Provider, on: bool) -> Result<()> {
    let _: serde_json::Value = rpc.raw_request("evm_setAutomine".into(), (on,)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_lifecycle_on_real_anvil() -> Result<()> {
    let anvil = Toolchain::from_build_checkout()
        .anvil_builder()?
        .try_spawn()
        .context("starting anvil")?;
    ensure!(anvil.chain_id() == ANVIL_CHAIN_ID);
    let keys: Vec<PrivateKeySigner> = anvil.keys().iter().cloned().map(Into::into).collect();
    ensure!(keys.len() >= 9, "anvil gave {} keys", keys.len());
    let [deployer, client, provider] = [&keys[0], &keys[1], &keys[2]];
    let url = anvil.endpoint_url();
    let connect = |key: &PrivateKeySigner| {
        ProviderBuilder::new()
            .wallet(EthereumWallet::from(key.clone()))
            .connect_http(url.clone())
    };
    let as_deployer = connect(deployer);
    let as_client = connect(client);
    let as_provider = connect(provider);

    // The escrow goes first, at nonce 0, so it lands at the vector's address; the stake
    // token's address (nonce 1) is known before it exists.
    let usdc_address = deployer.address().create(1);
    let params = EscrowParams {
        min_stake: U256::from(MIN_STAKE),
        unbond_delay: 3_600,
        max_duration: 30 * 86_400,
        max_grace: 86_400,
        decision_window: 120,
        min_verifier_stake: U256::from(MIN_VERIFIER_STAKE),
    };
    let escrow = deploy_job_escrow(&as_deployer, usdc_address, params).await?;
    let usdc = deploy_test_usdc(&as_deployer).await?;
    assert_eq!(*escrow.address(), FIRST_DEPLOYMENT);
    assert_eq!(*usdc.address(), usdc_address);
    assert_eq!(usdc.decimals().call().await?, 6);
    assert_eq!(escrow.decisionWindow().call().await?, 120);
    assert_eq!(
        escrow.minVerifierStake().call().await?,
        U256::from(MIN_VERIFIER_STAKE)
    );

    // The deployed contract's hashing agrees with the shared vector and with Rust.
    let v = vector()?;
    let dom = domain(ANVIL_CHAIN_ID, *escrow.address());
    assert_eq!(
        escrow.domainSeparator().call().await?,
        str_of(&v, "domainSeparator")?.parse::<B256>()?
    );
    let vbid = vector_bid(&v)?;
    let onchain = escrow
        .hashBid(
            vbid.jobId,
            vbid.terms,
            vbid.epoch,
            vbid.provider,
            vbid.pricePerStep,
            vbid.expiry,
        )
        .call()
        .await?;
    assert_eq!(
        onchain,
        str_of(field(&v, "bid")?, "digest")?.parse::<B256>()?
    );
    assert_eq!(onchain, vbid.eip712_signing_hash(&dom));
    for (vote, entry) in vector_votes(&v)? {
        let onchain = escrow
            .hashVote(
                vote.jobId,
                vote.epoch,
                vote.step,
                vote.checkpointHash,
                vote.accept,
            )
            .call()
            .await?;
        assert_eq!(onchain, str_of(entry, "digest")?.parse::<B256>()?);
    }

    let client_escrow = JobEscrow::new(*escrow.address(), &as_client);
    let provider_escrow = JobEscrow::new(*escrow.address(), &as_provider);
    let provider_usdc = TestUSDC::new(usdc_address, &as_provider);

    // The verifier pool: keys 3..=7 stake the minimum, in that order; key 8 stakes less and
    // stays out; the client stakes too, and is never drawn for its own job.
    let verifier_funds = U256::from(2 * MIN_VERIFIER_STAKE);
    let mut pool_keys: Vec<&PrivateKeySigner> = keys[3..=7].iter().collect();
    pool_keys.push(client);
    let stakers: Vec<(&PrivateKeySigner, u64)> = keys[3..=7]
        .iter()
        .map(|k| (k, MIN_VERIFIER_STAKE))
        .chain([
            (&keys[8], MIN_VERIFIER_STAKE - 1),
            (client, MIN_VERIFIER_STAKE),
        ])
        .collect();
    for (key, stake) in stakers {
        let as_verifier = connect(key);
        mined(usdc.mint(key.address(), verifier_funds).send().await?).await?;
        mined(
            TestUSDC::new(usdc_address, &as_verifier)
                .approve(*escrow.address(), U256::from(stake))
                .send()
                .await?,
        )
        .await?;
        let receipt = mined(
            JobEscrow::new(*escrow.address(), &as_verifier)
                .registerVerifier(U256::from(stake))
                .send()
                .await?,
        )
        .await?;
        let staked = logs_of::<JobEscrow::VerifierStaked>(&receipt);
        ensure!(staked.len() == 1 && staked[0].totalBonded == U256::from(stake));
    }
    let pool_size = escrow.poolSize().call().await?;
    assert_eq!(pool_size, U256::from(pool_keys.len()));
    let mut pool = Vec::new();
    for i in 0..pool_keys.len() {
        pool.push(escrow.poolAt(U256::from(i)).call().await?);
    }
    assert_eq!(
        pool,
        pool_keys.iter().map(|k| k.address()).collect::<Vec<_>>(),
        "the pool is in registration order"
    );
    let short = escrow.verifierStakeOf(keys[8].address()).call().await?;
    assert!(!short.pooled && short.bonded == U256::from(MIN_VERIFIER_STAKE - 1));
    assert!(
        escrow
            .verifierStakeOf(client.address())
            .call()
            .await?
            .pooled
    );

    let client_funds = U256::from(10_000_000u64);
    let provider_funds = U256::from(200_000_000u64);
    mined(usdc.mint(client.address(), client_funds).send().await?).await?;
    mined(usdc.mint(provider.address(), provider_funds).send().await?).await?;
    let now = as_client
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await?
        .context("no latest block")?
        .header
        .timestamp;
    // createJob and drawCommittee in one block: the seed (this block's hash) is not mined
    // yet, so the draw reverts and the job stays Drawing. Sent with nonces set here, from a
    // provider of their own (alloy's caches the next nonce per provider).
    let as_client_once = connect(client);
    mined(
        TestUSDC::new(usdc_address, &as_client_once)
            .approve(*escrow.address(), U256::from(BUDGET))
            .send()
            .await?,
    )
    .await?;
    let client_once = JobEscrow::new(*escrow.address(), &as_client_once);
    let spec_hash = B256::repeat_byte(0x5e);
    let create = client_once.createJob(
        usdc_address,
        U256::from(BUDGET),
        U256::from(MAX_PRICE),
        TOTAL_STEPS,
        INTERVAL,
        spec_hash,
        COMMITTEE,
        QUORUM,
        U256::from(FEE),
        now + DEADLINE_IN,
        GRACE,
    );
    let job_id = U256::from(1);
    let draw = client_once.drawCommittee(job_id);
    let nonce = as_client.get_transaction_count(client.address()).await?;
    let fees = as_client.estimate_eip1559_fees().await?;
    set_automine(&as_client, false).await?;
    let pending_create = create
        .nonce(nonce)
        .gas(1_000_000)
        .max_fee_per_gas(fees.max_fee_per_gas)
        .max_priority_fee_per_gas(fees.max_priority_fee_per_gas)
        .send()
        .await?;
    let pending_draw = draw
        .clone()
        .nonce(nonce + 1)
        .gas(1_000_000)
        .max_fee_per_gas(fees.max_fee_per_gas)
        .max_priority_fee_per_gas(fees.max_priority_fee_per_gas)
        .send()
        .await?;
    let _: serde_json::Value = as_client.raw_request("evm_mine".into(), ()).await?;
    set_automine(&as_client, true).await?;
    let created = mined(pending_create).await?;
    let too_early = pending_draw.get_receipt().await?;
    let seed_block = created.block_number.context("mined")?;
    assert!(!too_early.status(), "the draw in the seed block reverts");
    assert_eq!(too_early.block_number, Some(seed_block));
    let Err(err) = draw.call().block(BlockId::number(seed_block)).await else {
        bail!("the draw replayed in the seed block succeeds");
    };
    match err.as_decoded_interface_error::<JobEscrow::JobEscrowErrors>() {
        Some(JobEscrow::JobEscrowErrors::SeedNotMined(e)) => assert_eq!(e.seedBlock, seed_block),
        other => bail!("expected SeedNotMined, got {other:?} ({err})"),
    }
    let job = escrow.getJob(job_id).call().await?;
    assert_eq!(job.status, 5, "Drawing");
    assert_eq!(job.seedBlock, seed_block);
    assert!(job.committee.is_empty());
    assert_eq!(escrow.termsOf(job_id).call().await?, B256::ZERO);
    let created_log = logs_of::<JobEscrow::JobCreated>(&created);
    ensure!(created_log.len() == 1 && created_log[0].seedBlock == seed_block);

    // In a later block anyone can draw: here a verifier outside the pool does.
    let outsider = JobEscrow::new(*escrow.address(), connect(&keys[8]));
    let drawn = mined(outsider.drawCommittee(job_id).send().await?).await?;
    assert!(drawn.block_number.context("mined")? > seed_block);
    let seed_hash = as_client
        .get_block_by_number(seed_block.into())
        .await?
        .context("the seed block")?
        .header
        .hash;
    let client_address = client.address();
    let expected = draw_committee(
        draw_seed(seed_hash, job_id),
        &pool,
        client_address,
        usize::from(COMMITTEE),
    )
    .context("the pool is large enough")?;
    let job = escrow.getJob(job_id).call().await?;
    assert_eq!(job.status, 1, "Open");
    assert_eq!(job.committee, expected, "the chain's draw is the Rust draw");
    assert!(!job.committee.contains(&client_address));
    let event = logs_of::<JobEscrow::CommitteeDrawn>(&drawn);
    ensure!(event.len() == 1, "one CommitteeDrawn");
    assert_eq!(event[0].committee, expected);
    // The terms the contract stored are the Rust hash of what the client asked for and the
    // committee drawn.
    let terms = escrow.termsOf(job_id).call().await?;
    assert_eq!(event[0].terms, terms);
    assert_eq!(job.terms, terms);
    let rust_terms = JobTerms {
        client: client_address,
        token: usdc_address,
        budget: U256::from(BUDGET),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: TOTAL_STEPS,
        checkpoint_interval: INTERVAL,
        spec_hash,
        committee: &expected,
        quorum: QUORUM,
        verifier_fee: U256::from(FEE),
        deadline: now + DEADLINE_IN,
        grace: GRACE,
    };
    assert_eq!(rust_terms.hash(), terms);
    for (i, member) in expected.iter().enumerate() {
        let m = escrow.memberOf(job_id, *member).call().await?;
        assert_eq!((usize::from(m.index), m.paid), (i + 1, 0));
    }
    let member_keys: Vec<PrivateKeySigner> = expected
        .iter()
        .map(|a| {
            keys.iter()
                .find(|k| k.address() == *a)
                .cloned()
                .context("a committee member's key")
        })
        .collect::<Result<_>>()?;

    mined(
        provider_usdc
            .approve(*escrow.address(), U256::from(MIN_STAKE))
            .send()
            .await?,
    )
    .await?;
    mined(
        provider_escrow
            .register(U256::from(MIN_STAKE))
            .send()
            .await?,
    )
    .await?;

    // Bid signed in Rust for epoch 1 over the job's terms; the contract recovers the
    // provider from it.
    let bid = Bid {
        jobId: job_id,
        terms,
        epoch: 1,
        provider: provider.address(),
        pricePerStep: U256::from(PRICE),
        expiry: now + 600,
    };
    let bid_sig = provider.sign_typed_data_sync(&bid, &dom)?;
    mined(
        client_escrow
            .assign(
                job_id,
                provider.address(),
                bid.pricePerStep,
                bid.expiry,
                Bytes::copy_from_slice(&bid_sig.as_bytes()),
            )
            .send()
            .await?,
    )
    .await?;
    let job = escrow.getJob(job_id).call().await?;
    assert_eq!(job.epoch, 1);
    assert_eq!(job.provider, provider.address());
    assert_eq!(job.lastCheckpointHash, spec_hash);

    // Two checkpoints, each with Votes of 2 of the 3 members signed in Rust, submitted by
    // a third party: members 0 and 1 accept the first, members 2 and 1 the final one.
    let relayer = JobEscrow::new(*escrow.address(), connect(&keys[8]));
    let mut accept_gas = Vec::new();
    for (step, signers, voters) in [(150, [0, 1], 0b011u8), (TOTAL_STEPS, [2, 1], 0b110u8)] {
        let hash = B256::from(U256::from(step).to_be_bytes::<32>());
        let vote = Vote {
            jobId: job_id,
            epoch: 1,
            step,
            checkpointHash: hash,
            accept: true,
        };
        let sigs = signers
            .iter()
            .map(|i| {
                Ok(Bytes::copy_from_slice(
                    &member_keys[*i]
                        .sign_typed_data_sync(&vote, &dom)?
                        .as_bytes(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let receipt = mined(
            relayer
                .acceptCheckpoint(job_id, 1, step, hash, sigs)
                .send()
                .await?,
        )
        .await?;
        let accepted = logs_of::<JobEscrow::CheckpointAccepted>(&receipt);
        ensure!(accepted.len() == 1, "one CheckpointAccepted");
        assert_eq!(accepted[0].voters, U256::from(voters));
        assert_eq!(accepted[0].fees, U256::from(2 * FEE));
        accept_gas.push(receipt.gas_used);
    }
    let [first_accept_gas, final_accept_gas] = accept_gas[..] else {
        bail!("two accepts, {} receipts", accept_gas.len());
    };
    println!(
        "acceptCheckpoint with 2 of 3 votes and fees: {first_accept_gas} gas the first of the \
         job, {final_accept_gas} the final one (transaction gas, intrinsic included)"
    );
    assert!(first_accept_gas <= 100_000, "{first_accept_gas} gas");
    // The escrow's budget for the call that completes a job (its GasTest asserts the same).
    assert!(final_accept_gas <= 100_000, "{final_accept_gas} gas");
    let paid_decisions = [1u64, 2, 1];
    for (i, member) in expected.iter().enumerate() {
        let m = escrow.memberOf(job_id, *member).call().await?;
        assert_eq!(m.paid, paid_decisions[i], "member {i}");
        // Fees are counted, not yet credited.
        assert_eq!(
            escrow.withdrawable(*member, usdc_address).call().await?,
            U256::ZERO
        );
    }

    // Completed: what is left waits in the job until someone settles it for the client.
    let paid = U256::from(TOTAL_STEPS * PRICE);
    let fees_total = U256::from(4 * FEE);
    let refund = U256::from(BUDGET) - paid - fees_total;
    let job = escrow.getJob(job_id).call().await?;
    assert_eq!(job.status, 3, "Completed");
    assert_eq!(job.remaining, refund);
    assert!(!job.settled);
    assert_eq!(
        escrow
            .withdrawable(client_address, usdc_address)
            .call()
            .await?,
        U256::ZERO
    );
    let settled = mined(relayer.settle(job_id).send().await?).await?;
    let credited: Vec<(Address, U256)> = logs_of::<JobEscrow::FeesCredited>(&settled)
        .into_iter()
        .map(|e| (e.verifier, e.amount))
        .collect();
    assert_eq!(
        credited,
        expected
            .iter()
            .zip(paid_decisions)
            .map(|(a, n)| (*a, U256::from(n * FEE)))
            .collect::<Vec<_>>(),
        "fees credited in committee order"
    );
    let settled_log = logs_of::<JobEscrow::JobSettled>(&settled);
    ensure!(settled_log.len() == 1 && settled_log[0].refund == refund);
    let job = escrow.getJob(job_id).call().await?;
    assert!(job.settled);
    assert_eq!(job.remaining, U256::ZERO);
    assert_eq!(
        escrow
            .withdrawable(client_address, usdc_address)
            .call()
            .await?,
        refund
    );
    assert_eq!(
        escrow
            .withdrawable(provider.address(), usdc_address)
            .call()
            .await?,
        paid
    );
    mined(provider_escrow.withdraw(usdc_address).send().await?).await?;
    mined(client_escrow.withdraw(usdc_address).send().await?).await?;
    for (key, n) in member_keys.iter().zip(paid_decisions) {
        let before = usdc.balanceOf(key.address()).call().await?;
        mined(
            JobEscrow::new(*escrow.address(), connect(key))
                .withdraw(usdc_address)
                .send()
                .await?,
        )
        .await?;
        assert_eq!(
            usdc.balanceOf(key.address()).call().await?,
            before + U256::from(n * FEE)
        );
    }

    let stake = U256::from(MIN_STAKE);
    assert_eq!(
        usdc.balanceOf(provider.address()).call().await?,
        provider_funds - stake + paid
    );
    assert_eq!(
        usdc.balanceOf(client_address).call().await?,
        client_funds + verifier_funds - U256::from(MIN_VERIFIER_STAKE) - paid - fees_total
    );
    // Only stakes stay in escrow: the provider's, and the verifiers' (6 of the minimum, one
    // a unit short of it).
    let verifier_stakes = U256::from(7 * MIN_VERIFIER_STAKE - 1);
    assert_eq!(
        usdc.balanceOf(*escrow.address()).call().await?,
        stake + verifier_stakes,
        "the budget {BUDGET} left in full"
    );
    Ok(())
}
