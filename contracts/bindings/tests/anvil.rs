//! The bindings against a real anvil (the npm-installed one): deploy, create a job, register
//! and assign a provider with a Bid signed here over the job's terms, accept checkpoints with
//! Votes signed here, settle the refund, withdraw, and check every balance to the unit. Also
//! checks the Rust-side EIP-712 digests and signatures against the shared vector, which the
//! forge suite checks on the Solidity side, and the Rust terms hash against `termsOf`.

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, B256, Bytes, U256, address};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, SolStruct, eip712_domain};
use anyhow::{Context, Result, bail, ensure};
use gpuchain_contracts::{
    EIP712_NAME, EIP712_VERSION, EscrowParams, JobEscrow, TestUSDC, Toolchain, deploy_job_escrow,
    deploy_test_usdc,
};
use gpuchain_protocol::eip712::JobTerms;
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
const BUDGET: u64 = 5_000_000;
const PRICE: u64 = 1_000;
const TOTAL_STEPS: u64 = 400;
const INTERVAL: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_lifecycle_on_real_anvil() -> Result<()> {
    let anvil = Toolchain::from_build_checkout()
        .anvil_builder()?
        .try_spawn()
        .context("starting anvil")?;
    ensure!(anvil.chain_id() == ANVIL_CHAIN_ID);
    let keys: Vec<PrivateKeySigner> = anvil.keys().iter().cloned().map(Into::into).collect();
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
    };
    let escrow = deploy_job_escrow(&as_deployer, usdc_address, params).await?;
    let usdc = deploy_test_usdc(&as_deployer).await?;
    assert_eq!(*escrow.address(), FIRST_DEPLOYMENT);
    assert_eq!(*usdc.address(), usdc_address);
    assert_eq!(usdc.decimals().call().await?, 6);

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

    // The vector's two vote keys are this job's quorum; a third verifier never signs.
    let verifier_keys: Vec<PrivateKeySigner> = field(&v, "votes")?
        .as_array()
        .context("votes")?
        .iter()
        .take(2)
        .map(signer)
        .collect::<Result<_>>()?;
    let verifiers = vec![
        verifier_keys[0].address(),
        verifier_keys[1].address(),
        keys[3].address(),
    ];

    let client_escrow = JobEscrow::new(*escrow.address(), &as_client);
    let provider_escrow = JobEscrow::new(*escrow.address(), &as_provider);
    let client_usdc = TestUSDC::new(usdc_address, &as_client);
    let provider_usdc = TestUSDC::new(usdc_address, &as_provider);

    let client_funds = U256::from(10_000_000u64);
    let provider_funds = U256::from(200_000_000u64);
    confirm(usdc.mint(client.address(), client_funds).send().await?).await?;
    confirm(usdc.mint(provider.address(), provider_funds).send().await?).await?;

    let now = as_client
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await?
        .context("no latest block")?
        .header
        .timestamp;
    confirm(
        client_usdc
            .approve(*escrow.address(), U256::from(BUDGET))
            .send()
            .await?,
    )
    .await?;
    let spec_hash = B256::repeat_byte(0x5e);
    confirm(
        client_escrow
            .createJob(
                usdc_address,
                U256::from(BUDGET),
                U256::from(10 * PRICE),
                TOTAL_STEPS,
                INTERVAL,
                spec_hash,
                verifiers.clone(),
                2,
                now + 86_400,
                3_600,
            )
            .send()
            .await?,
    )
    .await?;
    let job_id = escrow.jobCount().call().await?;
    assert_eq!(job_id, U256::from(1));
    // The terms the contract stored are the Rust hash of what the client asked for.
    let terms = escrow.termsOf(job_id).call().await?;
    assert_eq!(escrow.getJob(job_id).call().await?.terms, terms);
    let rust_terms = JobTerms {
        client: client.address(),
        token: usdc_address,
        budget: U256::from(BUDGET),
        max_price_per_step: U256::from(10 * PRICE),
        total_steps: TOTAL_STEPS,
        checkpoint_interval: INTERVAL,
        spec_hash,
        verifiers: &verifiers,
        quorum: 2,
        deadline: now + 86_400,
        grace: 3_600,
    };
    assert_eq!(rust_terms.hash(), terms);

    confirm(
        provider_usdc
            .approve(*escrow.address(), U256::from(MIN_STAKE))
            .send()
            .await?,
    )
    .await?;
    confirm(
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
    confirm(
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

    // Two checkpoints, each with two Votes signed in Rust (2 of 3), submitted by a third party.
    let mut accept_gas = Vec::new();
    for step in [150, TOTAL_STEPS] {
        let hash = B256::from(U256::from(step).to_be_bytes::<32>());
        let vote = Vote {
            jobId: job_id,
            epoch: 1,
            step,
            checkpointHash: hash,
            accept: true,
        };
        let sigs = verifier_keys
            .iter()
            .map(|k| {
                Ok(Bytes::copy_from_slice(
                    &k.sign_typed_data_sync(&vote, &dom)?.as_bytes(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let receipt = confirm(
            escrow
                .acceptCheckpoint(job_id, 1, step, hash, sigs)
                .send()
                .await?,
        )
        .await?;
        accept_gas.push(receipt);
    }
    let [first_accept_gas, final_accept_gas] = accept_gas[..] else {
        bail!("two accepts, {} receipts", accept_gas.len());
    };
    println!(
        "acceptCheckpoint with 2 votes: {first_accept_gas} gas the first of the job, \
         {final_accept_gas} the final one (transaction gas, intrinsic included)"
    );
    assert!(first_accept_gas <= 100_000, "{first_accept_gas} gas");
    // The escrow's budget for the call that completes a job (its GasTest asserts the same).
    assert!(final_accept_gas <= 100_000, "{final_accept_gas} gas");

    // Completed: what is left waits in the job until someone settles it for the client.
    let paid = U256::from(TOTAL_STEPS * PRICE);
    let refund = U256::from(BUDGET) - paid;
    let job = escrow.getJob(job_id).call().await?;
    assert_eq!(job.status, 3, "Completed");
    assert_eq!(job.remaining, refund);
    assert_eq!(
        escrow
            .withdrawable(client.address(), usdc_address)
            .call()
            .await?,
        U256::ZERO
    );
    confirm(escrow.settle(job_id).send().await?).await?;
    assert_eq!(escrow.getJob(job_id).call().await?.remaining, U256::ZERO);
    assert_eq!(
        escrow
            .withdrawable(client.address(), usdc_address)
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
    confirm(provider_escrow.withdraw(usdc_address).send().await?).await?;
    confirm(client_escrow.withdraw(usdc_address).send().await?).await?;

    let stake = U256::from(MIN_STAKE);
    let budget = U256::from(BUDGET);
    assert_eq!(
        usdc.balanceOf(provider.address()).call().await?,
        provider_funds - stake + paid
    );
    assert_eq!(
        usdc.balanceOf(client.address()).call().await?,
        client_funds - paid
    );
    assert_eq!(
        usdc.balanceOf(*escrow.address()).call().await?,
        stake,
        "only the stake stays in escrow; the budget is {budget}"
    );
    Ok(())
}

/// Waits for the transaction, fails on a revert, and returns the gas it used.
async fn confirm<N: alloy::network::Network>(
    pending: alloy::providers::PendingTransactionBuilder<N>,
) -> Result<u64> {
    use alloy::network::ReceiptResponse;
    let receipt = pending.get_receipt().await?;
    if !receipt.status() {
        bail!("transaction {} reverted", receipt.transaction_hash());
    }
    Ok(receipt.gas_used())
}
