//! Differential test of the escrow model (`gpuchain_protocol::escrow`, what the simulator and
//! the protocol tests run) against `JobEscrow` on anvil (the npm-installed binary).
//!
//! A seeded generator makes random call sequences and each call goes to the model and, as a
//! real transaction, to the contract, in a block of the same number and timestamp (the model
//! is told every block's hash, so its committee draws read the chain's seeds). Per call the
//! two must agree on success or revert, on the revert's custom error and arguments, and on
//! the events emitted, in order; after each sequence on every token balance and supply,
//! credit, provider and verifier stake, the verifier pool (in order) and `poolChangedAt`,
//! every job as `getJob` returns it (committee and terms included), each member's
//! `memberOf` (position and paid decisions), every epoch's `closedEpoch` record and the
//! burned stake, and the escrow's balance must be what it accounts for, both as the model
//! recomputes it and as summed from the chain's own views.
//!
//! What the generator draws, besides valid flows pushed forward on purpose (stake, create,
//! draw, assign, decide, settle): verifiers registering, topping up, unbonding (staying in
//! the pool, leaving it from the middle or the end, which swap-removes) and withdrawing;
//! committee sizes and quorums at and past their bounds (2 and 32, the pool's size and one
//! more, half the committee, all of it); `NotEnoughVerifiers` at creation and at the draw;
//! draws in the seed block (`SeedNotMined`, the two calls in one block), more than 256 blocks
//! later (`CommitteeSeedMoved`; anvil mines the blocks, rarely, since it is slow), exactly
//! 256 later, and after the pool changed; assignments before the draw, of committee members,
//! of providers holding other epochs, with bids over other terms or badly signed; accepts and
//! rejects signed by a quorum, more, or the whole committee (fees per signer; slashes only
//! when unanimous), with short, duplicated, outside, corrupted and oversized vote sets;
//! rejects with and without slack in the budget for their fees; late accepts of epochs the
//! client ended, within and after the decision window, after the head moved, beyond the next
//! checkpoint, superseding a live epoch or completing the job; settle twice; expire from
//! `Drawing`; amounts at and past 2^96 − 1; calls from the wrong sender, time jumps.
//!
//! Sequences start from the same chain state (an anvil snapshot), so each replays alone from
//! its seed:
//!
//!     GPUCHAIN_DIFF_SEED=<seed> cargo test -p gpuchain-contracts --test escrow_model
//!
//! The `--ignored` variant runs many more (`GPUCHAIN_DIFF_SEQUENCES`, default 5,000), and
//! another test plants each of the model's [`Bugs`] in turn and requires the comparison to
//! catch it.
//!
//! Long because it holds the call generator, the replay against anvil and the comparison
//! together: a failing seed is read in one file.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use alloy::consensus::{SignableTransaction, TxEnvelope, TxLegacy};
use alloy::eips::BlockNumberOrTag;
use alloy::eips::eip2718::Encodable2718;
use alloy::network::{EthereumWallet, TxSignerSync};
use alloy::node_bindings::AnvilInstance;
use alloy::primitives::{Address, B256, Bytes, TxKind, U256};
use alloy::providers::{Provider, ProviderBuilder, RootProvider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEventInterface, SolInterface};
use anyhow::{Context, Result, bail, ensure};
use gpuchain_contracts::{
    EscrowParams, JobEscrow, TestUSDC, Toolchain, deploy_job_escrow, deploy_test_usdc,
};
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::eip712::{BidFields, EscrowDomain, JobTerms, VoteFields};
use gpuchain_protocol::escrow::{
    BLOCKHASH_WINDOW, Block, Bugs, Call, ClosedEpoch, Escrow, EscrowError, Event, Job,
    MAX_JOB_AMOUNT, MAX_VERIFIERS, Params, Status, VerifierStake, cost_bound,
};
use gpuchain_protocol::signing::{Scheme, Sig65, SigningKey};

/// Sequences in the normal test, and calls (blocks) in each.
const SEQUENCES: u64 = 200;
const CALLS: usize = 48;
const MIN_STAKE: u64 = 100;
const MIN_VERIFIER_STAKE: u64 = 50;
const UNBOND_DELAY: u64 = 300;
/// The furthest ahead a deadline may be, and the longest grace (the generator draws both
/// sometimes just past these).
const MAX_DURATION: u64 = 1_500;
const MAX_GRACE: u64 = 300;
const DECISION_WINDOW: u64 = 30;
/// The genesis block's timestamp.
const GENESIS_TIME: u64 = 1_800_000_000;

/// Actors: anvil keys 1..=ACTORS (key 0 deploys). 0–1 clients (1 pooled as a verifier from
/// the start), 2–4 providers (4 pooled too, so the draw can seat it), 5–10 verifiers that
/// come and go (5–7 pooled from the start, 8 a unit short of the minimum, 9–10 nothing),
/// 11 an outsider with little money and a finite allowance, and from 12 on verifiers that
/// only sit in the pool and sign: with them the pool starts at 32 members, so committees
/// reach the 32 bound, and a pooled client's job does not.
const CLIENTS: [usize; 2] = [0, 1];
const PROVIDERS: [usize; 3] = [2, 3, 4];
const CHURN: [usize; 6] = [5, 6, 7, 8, 9, 10];
const OUTSIDER: usize = 11;
const BULK_FROM: usize = 12;
const BULK: usize = 27;
const ACTORS: usize = BULK_FROM + BULK;
/// Who is pooled from the start, in pool order, and who is staked just short of it.
const POOLED_AT_GENESIS: [usize; 5] = [1, 4, 5, 6, 7];
const SHORT_AT_GENESIS: usize = 8;
/// The stake token: everyone but the outsider holds far more than a job's 2^96 − 1 bound.
/// The other token: less than that bound, so a budget within it can exceed a balance.
fn rich() -> U256 {
    U256::from(1) << 100
}
fn rich_other() -> U256 {
    U256::from(1) << 90
}
const OUTSIDER_FUNDS: u64 = 1_000;
const OUTSIDER_ALLOWANCE: u64 = 500;

/// Every revert the generator must reach in the normal run. Missing: `DepositMismatch` (needs a
/// fee-on-transfer token) and a wrong-length signature (`ChainTx` carries 65-byte ones only).
const EXPECTED_ERRORS: &[&str] = &[
    "ZeroAddress",
    "ZeroAmount",
    "AmountTooLarge",
    "InvalidSteps",
    "InvalidVerifiers",
    "InvalidQuorum",
    "DeadlinePassed",
    "DeadlineTooFar",
    "GraceTooLong",
    "BudgetTooSmall",
    "NotEnoughVerifiers",
    "SeedNotMined",
    "UnknownJob",
    "NotClient",
    "NotProvider",
    "WrongStatus",
    "WrongEpoch",
    "BidExpired",
    "PriceTooHigh",
    "ProviderIsVerifier",
    "InsufficientStake",
    "BadSignature",
    "WrongSigner",
    "NotVerifier",
    "DuplicateSigner",
    "TooManySignatures",
    "QuorumNotReached",
    "StepNotIncreasing",
    "StepOffInterval",
    "TooLate",
    "TooEarly",
    "StakeLocked",
    "NotUnbonding",
    "NothingToSettle",
    "NothingToWithdraw",
    "WindowClosed",
    "MovedOn",
    "BeyondNextCheckpoint",
    "Panic",
    "ERC20InsufficientBalance",
    "ERC20InsufficientAllowance",
    "(no data)",
];

/// Every event (and every reason an epoch ends) the normal run must see emitted.
const EXPECTED_EVENTS: &[&str] = &[
    "JobCreated",
    "CommitteeSeedMoved",
    "CommitteeDrawn",
    "ProviderAssigned",
    "EpochEnded(Replaced)",
    "EpochEnded(Released)",
    "EpochEnded(Rejected)",
    "EpochEnded(Completed)",
    "EpochEnded(Expired)",
    "EpochEnded(Resigned)",
    "EpochEnded(Superseded)",
    "CheckpointAccepted",
    "CheckpointRejected",
    "JobCompleted",
    "JobSettled",
    "JobExpired",
    "FeesCredited",
    "Staked",
    "UnbondRequested",
    "StakeWithdrawn",
    "Slashed",
    "VerifierStaked",
    "VerifierUnbondRequested",
    "VerifierStakeWithdrawn",
    "Withdrawn",
];

// ------------------------------------------------------------------ rng

/// SplitMix64: small, seedable, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn hash(&mut self) -> B256 {
        let mut b = [0u8; 32];
        for c in b.chunks_exact_mut(8) {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        B256::from(b)
    }

    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            xs.swap(i, j);
        }
    }
}

// ------------------------------------------------------------ the world

/// One block's worth of calls as the chain answered them.
struct Mined {
    number: u64,
    hash: B256,
    /// Per call: the escrow's decoded events, or the decoded revert.
    results: Vec<std::result::Result<Vec<Event>, EscrowError>>,
}

struct World {
    // Held so anvil lives as long as the test.
    _anvil: AnvilInstance,
    rpc: RootProvider,
    chain_id: u64,
    escrow: Address,
    stake_token: Address,
    other_token: Address,
    /// Actor keys, as the chain signs transactions and as the protocol signs bids and votes.
    signers: Vec<PrivateKeySigner>,
    keys: Vec<SigningKey>,
    nonces: Vec<u64>,
    genesis_nonces: Vec<u64>,
    /// The latest block's number and timestamp.
    head: u64,
    now: u64,
    /// The model in the state the snapshot holds.
    genesis: Escrow,
    snapshot: U256,
    snapshot_head: u64,
    snapshot_time: u64,
}

impl World {
    fn address(&self, actor: usize) -> Address {
        self.keys[actor].address()
    }

    /// Every actor and the escrow: the accounts whose books are compared.
    fn accounts(&self) -> Vec<Address> {
        let mut a: Vec<Address> = (0..ACTORS).map(|i| self.address(i)).collect();
        a.push(self.escrow);
        a
    }
}

async fn start() -> Result<World> {
    let anvil = Toolchain::from_build_checkout()
        .anvil_builder()?
        .arg("--accounts")
        .arg((ACTORS + 1).to_string())
        // Every block's timestamp is fixed (the genesis here, one second apart after it, or
        // set by the sequence), so every block hash, and with them every committee drawn,
        // is the same in every run: a seed replays exactly.
        .arg("--timestamp")
        .arg(GENESIS_TIME.to_string())
        .try_spawn()
        .context("starting anvil")?;
    let signers: Vec<PrivateKeySigner> = anvil.keys().iter().cloned().map(Into::into).collect();
    ensure!(signers.len() > ACTORS, "anvil gave {} keys", signers.len());
    let url = anvil.endpoint_url();
    let _: serde_json::Value = RootProvider::<alloy::network::Ethereum>::new_http(url.clone())
        .raw_request("anvil_setBlockTimestampInterval".into(), (1,))
        .await?;
    let deployer = ProviderBuilder::new()
        .wallet(EthereumWallet::from(signers[0].clone()))
        .connect_http(url.clone());
    let stake = deploy_test_usdc(&deployer).await?;
    let other = deploy_test_usdc(&deployer).await?;
    let escrow = deploy_job_escrow(
        &deployer,
        *stake.address(),
        EscrowParams {
            min_stake: U256::from(MIN_STAKE),
            unbond_delay: UNBOND_DELAY,
            max_duration: MAX_DURATION,
            max_grace: MAX_GRACE,
            decision_window: DECISION_WINDOW,
            min_verifier_stake: U256::from(MIN_VERIFIER_STAKE),
        },
    )
    .await?;
    let rpc = RootProvider::new_http(url);
    // From here on every block's time is set explicitly (empty blocks keep the last one's).
    let _: bool = rpc
        .raw_request("anvil_removeBlockTimestampInterval".into(), ())
        .await?;
    let chain_id = anvil.chain_id();
    let actors: Vec<PrivateKeySigner> = signers[1..=ACTORS].to_vec();
    let keys: Vec<SigningKey> = actors
        .iter()
        .map(|s| SigningKey::from_bytes(&s.to_bytes().0))
        .collect::<Result<_, _>>()?;
    let domain = EscrowDomain {
        chain_id,
        escrow: *escrow.address(),
    };
    let (stake_token, other_token) = (*stake.address(), *other.address());
    let mut genesis = Escrow::new(
        domain,
        Scheme::Secp256k1,
        stake_token,
        Params {
            min_stake: U256::from(MIN_STAKE),
            unbond_delay: UNBOND_DELAY,
            max_duration: MAX_DURATION,
            max_grace: MAX_GRACE,
            decision_window: DECISION_WINDOW,
            min_verifier_stake: U256::from(MIN_VERIFIER_STAKE),
        },
    )?;
    genesis.add_token(other_token);
    let mut nonces = Vec::new();
    for s in &actors {
        nonces.push(rpc.get_transaction_count(s.address()).await?);
    }
    let latest = rpc
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await?
        .context("no latest block")?;
    let mut w = World {
        _anvil: anvil,
        rpc,
        chain_id,
        escrow: *escrow.address(),
        stake_token,
        other_token,
        signers: actors,
        keys,
        genesis_nonces: nonces.clone(),
        nonces,
        head: latest.header.number,
        now: latest.header.timestamp,
        genesis,
        snapshot: U256::ZERO,
        snapshot_head: 0,
        snapshot_time: 0,
    };
    // Funding, done the same way on both sides: the outsider has a little of the stake token
    // and a finite allowance, nothing of the other; the pool's sitters what they stake;
    // everyone else plenty and unlimited.
    for actor in 0..ACTORS {
        let who = w.address(actor);
        let grants: Vec<(Address, U256, U256)> = if actor == OUTSIDER {
            vec![(
                stake_token,
                U256::from(OUTSIDER_FUNDS),
                U256::from(OUTSIDER_ALLOWANCE),
            )]
        } else if actor >= BULK_FROM {
            vec![(stake_token, U256::from(2 * MIN_VERIFIER_STAKE), U256::MAX)]
        } else {
            vec![
                (stake_token, rich(), U256::MAX),
                (other_token, rich_other(), U256::MAX),
            ]
        };
        for (token, funds, allowance) in grants {
            let mint = TestUSDC::mintCall {
                to: who,
                amount: funds,
            };
            w.setup_call(actor, token, mint.abi_encode()).await?;
            let approve = TestUSDC::approveCall {
                spender: w.escrow,
                value: allowance,
            };
            w.setup_call(actor, token, approve.abi_encode()).await?;
            w.genesis.mint(token, who, funds);
            w.genesis.approve(token, who, w.escrow, allowance);
        }
    }
    // The starting pool, through the same comparison as every sequence's calls.
    let mut model = w.genesis.clone();
    let stakes = POOLED_AT_GENESIS
        .iter()
        .chain(&[SHORT_AT_GENESIS])
        .copied()
        .chain(BULK_FROM..ACTORS)
        .map(|a| {
            let amount = if a == SHORT_AT_GENESIS {
                MIN_VERIFIER_STAKE - 1
            } else {
                MIN_VERIFIER_STAKE
            };
            (
                a,
                Call::RegisterVerifier {
                    amount: U256::from(amount),
                },
            )
        })
        .collect::<Vec<_>>();
    for (actor, call) in stakes {
        let time = w.now + 1;
        let calls = [(actor, call)];
        let block = Block {
            number: w.head + 1,
            time,
        };
        let expected = model.apply(&calls[0].1, w.address(actor), block);
        let mined = w.execute(&calls, time).await?;
        model.record_block_hash(mined.number, mined.hash);
        ensure!(
            mined.number == block.number && mined.results == vec![expected.clone()],
            "genesis registerVerifier of actor {actor}: chain {:?}, model {expected:?}",
            mined.results
        );
    }
    ensure!(model.pool().len() == 32, "the pool starts at 32");
    w.genesis = model;
    w.genesis_nonces = w.nonces.clone();
    let genesis = w.genesis.clone();
    if let Some(diff) = w.compare_books(&genesis).await? {
        bail!("books differ at genesis:\n{diff}");
    }
    w.take_snapshot().await?;
    Ok(w)
}

/// Solidity's `Panic(uint256)` selector.
const PANIC: [u8; 4] = [0x4e, 0x48, 0x7b, 0x71];

impl World {
    async fn take_snapshot(&mut self) -> Result<()> {
        self.snapshot = self.rpc.raw_request("evm_snapshot".into(), ()).await?;
        self.snapshot_head = self.head;
        self.snapshot_time = self.now;
        Ok(())
    }

    async fn restore(&mut self) -> Result<()> {
        let ok: bool = self
            .rpc
            .raw_request("evm_revert".into(), (self.snapshot,))
            .await?;
        ensure!(ok, "evm_revert refused snapshot {}", self.snapshot);
        self.nonces = self.genesis_nonces.clone();
        self.head = self.snapshot_head;
        self.now = self.snapshot_time;
        // anvil drops a snapshot once reverted to.
        self.take_snapshot().await
    }

    /// A signed legacy transaction from `actor`, under its next nonce.
    fn sign(
        &mut self,
        actor: usize,
        to: Address,
        input: Vec<u8>,
        gas_price: u128,
    ) -> Result<Vec<u8>> {
        let mut tx = TxLegacy {
            chain_id: Some(self.chain_id),
            nonce: self.nonces[actor],
            gas_price,
            gas_limit: 8_000_000,
            to: TxKind::Call(to),
            value: U256::ZERO,
            input: Bytes::from(input),
        };
        let sig = self.signers[actor].sign_transaction_sync(&mut tx)?;
        self.nonces[actor] += 1;
        Ok(TxEnvelope::from(tx.into_signed(sig)).encoded_2718())
    }

    async fn set_next_time(&self, time: u64) -> Result<()> {
        let _: serde_json::Value = self
            .rpc
            .raw_request("evm_setNextBlockTimestamp".into(), (time,))
            .await?;
        Ok(())
    }

    /// The escrow's logs of a successful transaction, or its revert data as the transaction
    /// itself returned it (from the node's call trace: exact even where the block's later
    /// transactions changed what a replay would read).
    async fn outcome(
        &self,
        receipt: &TransactionReceipt,
    ) -> Result<std::result::Result<Vec<alloy::primitives::Log>, Vec<u8>>> {
        if receipt.status() {
            return Ok(Ok(receipt
                .inner
                .logs()
                .iter()
                .filter(|l| l.address() == self.escrow)
                .map(|l| l.inner.clone())
                .collect()));
        }
        let trace: serde_json::Value = self
            .rpc
            .raw_request(
                "debug_traceTransaction".into(),
                (
                    receipt.transaction_hash,
                    serde_json::json!({ "tracer": "callTracer" }),
                ),
            )
            .await?;
        ensure!(
            trace.get("error").is_some(),
            "reverted transaction {} traced without an error: {trace}",
            receipt.transaction_hash
        );
        let output = trace.get("output").and_then(|o| o.as_str()).unwrap_or("0x");
        Ok(Err(alloy::hex::decode(output)?))
    }

    /// A setup transaction (mint, approve) in a block of its own: it must succeed.
    async fn setup_call(&mut self, actor: usize, to: Address, input: Vec<u8>) -> Result<()> {
        let time = self.now + 1;
        self.set_next_time(time).await?;
        let raw = self.sign(actor, to, input, 10_000_000_000)?;
        let receipt = self.rpc.send_raw_transaction_sync(&raw).await?;
        ensure!(receipt.status(), "setup call reverted");
        self.head = receipt.block_number.context("mined")?;
        self.now = time;
        let hash = receipt.block_hash.context("mined")?;
        self.genesis.record_block_hash(self.head, hash);
        Ok(())
    }

    /// Executes `calls` on the contract, in this order, in one new block at `time`.
    async fn execute(&mut self, calls: &[(usize, Call)], time: u64) -> Result<Mined> {
        let mut receipts = Vec::new();
        if let [(actor, call)] = calls {
            self.set_next_time(time).await?;
            let raw = self.sign(*actor, self.escrow, calldata(call), 10_000_000_000)?;
            receipts.push(self.rpc.send_raw_transaction_sync(&raw).await?);
        } else {
            // Several transactions in one block: the earlier one pays more, which is the
            // order anvil mines them in.
            let _: serde_json::Value = self
                .rpc
                .raw_request("evm_setAutomine".into(), (false,))
                .await?;
            let mut hashes = Vec::new();
            let n = calls.len() as u128;
            for (i, (actor, call)) in calls.iter().enumerate() {
                let raw = self.sign(
                    *actor,
                    self.escrow,
                    calldata(call),
                    10_000_000_000 + n - i as u128,
                )?;
                hashes.push(*self.rpc.send_raw_transaction(&raw).await?.tx_hash());
            }
            self.set_next_time(time).await?;
            let _: serde_json::Value = self.rpc.raw_request("evm_mine".into(), ()).await?;
            let _: serde_json::Value = self
                .rpc
                .raw_request("evm_setAutomine".into(), (true,))
                .await?;
            for (i, h) in hashes.into_iter().enumerate() {
                let r = self
                    .rpc
                    .get_transaction_receipt(h)
                    .await?
                    .context("a bundled transaction was not mined")?;
                ensure!(
                    r.transaction_index == Some(i as u64),
                    "bundled transaction {i} mined at index {:?}",
                    r.transaction_index
                );
                receipts.push(r);
            }
        }
        let number = receipts[0].block_number.context("mined")?;
        let hash = receipts[0].block_hash.context("mined")?;
        ensure!(
            receipts.iter().all(|r| r.block_number == Some(number)),
            "the calls of one block were mined in several"
        );
        ensure!(
            number == self.head + 1,
            "mined in block {number}, expected {}",
            self.head + 1
        );
        self.head = number;
        self.now = time;
        let mut results = Vec::new();
        for r in &receipts {
            results.push(match self.outcome(r).await? {
                Ok(logs) => Ok(logs.iter().map(event_of).collect::<Result<_>>()?),
                Err(data) => Err(error_of(&data)?),
            });
        }
        Ok(Mined {
            number,
            hash,
            results,
        })
    }

    /// Mines `blocks` empty blocks at the latest timestamp: the latest block's number and hash.
    async fn mine_empty(&mut self, blocks: u64) -> Result<(u64, B256)> {
        let _: serde_json::Value = self
            .rpc
            .raw_request(
                "anvil_mine".into(),
                (format!("{blocks:#x}"), "0x0".to_string()),
            )
            .await?;
        let latest = self
            .rpc
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await?
            .context("no latest block")?;
        ensure!(
            latest.header.number == self.head + blocks,
            "mined to {}, expected {}",
            latest.header.number,
            self.head + blocks
        );
        self.head = latest.header.number;
        Ok((self.head, latest.header.hash))
    }
}

// ------------------------------------------------------------- the views

/// Views read in one JSON-RPC batch (hundreds per comparison: one round trip).
#[derive(Default)]
struct Views {
    calls: Vec<(Address, Vec<u8>)>,
    results: Vec<Bytes>,
}

/// Where a view's answer will be, and its type.
struct At<C>(usize, std::marker::PhantomData<C>);

impl Views {
    fn add<C: SolCall>(&mut self, to: Address, call: C) -> At<C> {
        self.calls.push((to, call.abi_encode()));
        At(self.calls.len() - 1, std::marker::PhantomData)
    }

    async fn run(&mut self, rpc: &RootProvider) -> Result<()> {
        let mut batch = alloy::rpc::client::BatchRequest::new(rpc.client());
        let mut waiters = Vec::new();
        for (to, data) in &self.calls {
            let req = TransactionRequest::default()
                .to(*to)
                .input(Bytes::from(data.clone()).into());
            waiters.push(batch.add_call::<_, Bytes>("eth_call", &(req, BlockNumberOrTag::Latest))?);
        }
        batch.send().await?;
        for w in waiters {
            self.results.push(w.await?);
        }
        Ok(())
    }

    fn get<C: SolCall>(&self, at: &At<C>) -> Result<C::Return> {
        let data = self.results.get(at.0).context("a view not run")?;
        Ok(C::abi_decode_returns(data)?)
    }
}

/// What `compare_books` reads for one job.
struct JobViews {
    job: At<JobEscrow::getJobCall>,
    terms: At<JobEscrow::termsOfCall>,
    /// Each committee member's `memberOf`, in the model's committee order.
    members: Vec<At<JobEscrow::memberOfCall>>,
    /// `memberOf` of accounts the model says are no members: the client, the provider.
    strangers: Vec<(Address, At<JobEscrow::memberOfCall>)>,
    /// `closedEpoch` of epochs 1..=epoch + 1.
    closed: Vec<At<JobEscrow::closedEpochCall>>,
}

impl World {
    /// Every balance, credit, stake, pool entry, job, member and closed epoch: the chain's
    /// views against the model's. `Some(differences)` when they differ.
    async fn compare_books(&self, m: &Escrow) -> Result<Option<String>> {
        let e = self.escrow;
        let accounts = self.accounts();
        let tokens = [self.stake_token, self.other_token];
        let mut v = Views::default();
        let balances: Vec<Vec<_>> = tokens
            .iter()
            .map(|t| {
                accounts
                    .iter()
                    .map(|a| v.add(*t, TestUSDC::balanceOfCall { account: *a }))
                    .collect()
            })
            .collect();
        let credits: Vec<Vec<_>> = tokens
            .iter()
            .map(|t| {
                accounts
                    .iter()
                    .map(|a| {
                        v.add(
                            e,
                            JobEscrow::withdrawableCall {
                                account: *a,
                                token: *t,
                            },
                        )
                    })
                    .collect()
            })
            .collect();
        let supplies: Vec<_> = tokens
            .iter()
            .map(|t| v.add(*t, TestUSDC::totalSupplyCall {}))
            .collect();
        let stakes: Vec<_> = accounts
            .iter()
            .map(|a| v.add(e, JobEscrow::stakeOfCall { provider: *a }))
            .collect();
        let verifier_stakes: Vec<_> = accounts
            .iter()
            .map(|a| v.add(e, JobEscrow::verifierStakeOfCall { verifier: *a }))
            .collect();
        let burned = v.add(e, JobEscrow::burnedCall {});
        let count = v.add(e, JobEscrow::jobCountCall {});
        let pool_size = v.add(e, JobEscrow::poolSizeCall {});
        let pool_changed = v.add(e, JobEscrow::poolChangedAtCall {});
        let pool: Vec<_> = (0..m.pool().len())
            .map(|i| {
                v.add(
                    e,
                    JobEscrow::poolAtCall {
                        index: U256::from(i),
                    },
                )
            })
            .collect();
        let jobs: Vec<JobViews> = m
            .jobs()
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let id = U256::from(i as u64 + 1);
                let member = |v: &mut Views, a: Address| {
                    v.add(
                        e,
                        JobEscrow::memberOfCall {
                            jobId: id,
                            account: a,
                        },
                    )
                };
                JobViews {
                    job: v.add(e, JobEscrow::getJobCall { jobId: id }),
                    terms: v.add(e, JobEscrow::termsOfCall { jobId: id }),
                    members: j.committee.iter().map(|a| member(&mut v, *a)).collect(),
                    strangers: [j.client, j.provider]
                        .into_iter()
                        .filter(|a| !j.committee.contains(a))
                        .map(|a| (a, member(&mut v, a)))
                        .collect(),
                    closed: (1..=j.epoch + 1)
                        .map(|epoch| v.add(e, JobEscrow::closedEpochCall { jobId: id, epoch }))
                        .collect(),
                }
            })
            .collect();
        let escrow_held: Vec<_> = tokens
            .iter()
            .map(|t| v.add(*t, TestUSDC::balanceOfCall { account: e }))
            .collect();
        v.run(&self.rpc).await?;

        let mut diffs = Vec::new();
        // What the chain's own views say the escrow accounts for, per token: credits, stakes,
        // burned stake, budgets and fees not yet credited.
        let mut accounted: BTreeMap<Address, U256> = BTreeMap::new();
        for (t, token) in tokens.iter().enumerate() {
            for (a, who) in accounts.iter().enumerate() {
                let chain = v.get(&balances[t][a])?;
                if chain != m.balance_of(*token, *who) {
                    diffs.push(format!(
                        "balance of {who} in {token}: chain {chain}, model {}",
                        m.balance_of(*token, *who)
                    ));
                }
                let chain = v.get(&credits[t][a])?;
                *accounted.entry(*token).or_default() += chain;
                if chain != m.withdrawable(*who, *token) {
                    diffs.push(format!(
                        "withdrawable of {who} in {token}: chain {chain}, model {}",
                        m.withdrawable(*who, *token)
                    ));
                }
            }
            let supply = v.get(&supplies[t])?;
            let model_supply = m
                .token(*token)
                .map(|t| t.total_supply())
                .unwrap_or_default();
            if supply != model_supply {
                diffs.push(format!(
                    "supply of {token}: chain {supply}, model {model_supply}"
                ));
            }
        }
        for (a, who) in accounts.iter().enumerate() {
            let s = v.get(&stakes[a])?;
            *accounted.entry(self.stake_token).or_default() += s.bonded + s.unbonding;
            let ms = m.stake_of(*who);
            if (s.bonded, s.unbonding, s.unbondAt, s.liveEpochs)
                != (ms.bonded, ms.unbonding, ms.unbond_at, ms.live_epochs)
            {
                diffs.push(format!(
                    "stake of {who}: chain (bonded {}, unbonding {}, at {}, live {}), model {ms:?}",
                    s.bonded, s.unbonding, s.unbondAt, s.liveEpochs
                ));
            }
            // The contract's invariant: every live epoch's reservation is bonded.
            if s.bonded < U256::from(MIN_STAKE) * U256::from(s.liveEpochs) {
                diffs.push(format!(
                    "stake of {who}: {} bonded backs fewer than its {} live epochs",
                    s.bonded, s.liveEpochs
                ));
            }
            let s = v.get(&verifier_stakes[a])?;
            *accounted.entry(self.stake_token).or_default() += s.bonded + s.unbonding;
            let chain = VerifierStake {
                bonded: s.bonded,
                unbonding: s.unbonding,
                unbond_at: s.unbondAt,
                pooled: s.pooled,
            };
            if chain != m.verifier_stake_of(*who) {
                diffs.push(format!(
                    "verifier stake of {who}: chain {chain:?}, model {:?}",
                    m.verifier_stake_of(*who)
                ));
            }
            if chain.pooled != (chain.bonded >= U256::from(MIN_VERIFIER_STAKE)) {
                diffs.push(format!(
                    "verifier {who}: pooled is not bonded ≥ minimum: {chain:?}"
                ));
            }
        }
        let burned = v.get(&burned)?;
        *accounted.entry(self.stake_token).or_default() += burned;
        if burned != m.burned() {
            diffs.push(format!("burned: chain {burned}, model {}", m.burned()));
        }
        let count = v.get(&count)?;
        if count != U256::from(m.job_count()) {
            diffs.push(format!("job count: chain {count}, model {}", m.job_count()));
        }
        let size = v.get(&pool_size)?;
        let chain_pool = pool
            .iter()
            .map(|at| v.get(at))
            .collect::<Result<Vec<_>>>()?;
        if size != U256::from(m.pool().len()) || chain_pool != m.pool() {
            diffs.push(format!(
                "pool: chain {size} {chain_pool:?}, model {:?}",
                m.pool()
            ));
        }
        let changed = v.get(&pool_changed)?;
        if changed != m.pool_changed_at() {
            diffs.push(format!(
                "poolChangedAt: chain {changed}, model {}",
                m.pool_changed_at()
            ));
        }
        let mut assigned = 0u64;
        for (i, (job, views)) in m.jobs().iter().zip(&jobs).enumerate() {
            let id = U256::from(i as u64 + 1);
            let view = v.get(&views.job)?;
            let paid = views
                .members
                .iter()
                .map(|at| v.get(at).map(|r| r.paid))
                .collect::<Result<Vec<_>>>()?;
            let chain = Job {
                client: view.client,
                epoch: view.epoch,
                status: Status::from_code(view.status).context("status code")?,
                quorum: view.quorum,
                provider: view.provider,
                last_accepted_step: view.lastAcceptedStep,
                token: view.token,
                total_steps: view.totalSteps,
                price_per_step: view.pricePerStep,
                remaining: view.remaining,
                max_price_per_step: view.maxPricePerStep,
                deposit: view.deposit,
                checkpoint_interval: view.checkpointInterval,
                deadline: view.deadline,
                grace: view.grace,
                last_checkpoint_hash: view.lastCheckpointHash,
                spec_hash: view.specHash,
                committee: view.committee,
                committee_size: view.committeeSize,
                verifier_fee: view.verifierFee,
                seed_block: view.seedBlock,
                settled: view.settled,
                terms: view.terms,
                paid,
            };
            if chain.status.holds_budget() {
                *accounted.entry(chain.token).or_default() += chain.remaining;
            }
            *accounted.entry(chain.token).or_default() += chain.fees_pending();
            assigned += u64::from(chain.status == Status::Assigned);
            if &chain != job {
                diffs.push(format!("job {id}: chain {chain:?}\n  model {job:?}"));
            }
            for (k, at) in views.members.iter().enumerate() {
                let r = v.get(at)?;
                if usize::from(r.index) != k + 1 {
                    diffs.push(format!(
                        "job {id}: member {k} has index {} on chain",
                        r.index
                    ));
                }
            }
            for (who, at) in &views.strangers {
                let r = v.get(at)?;
                if (r.index, r.paid) != (0, 0) || m.member_of(id, *who) != (0, 0) {
                    diffs.push(format!(
                        "job {id}: {who} is no member, but memberOf is ({}, {}) on chain, {:?} in the model",
                        r.index,
                        r.paid,
                        m.member_of(id, *who)
                    ));
                }
            }
            for (k, at) in views.closed.iter().enumerate() {
                let epoch = k as u64 + 1;
                let r = v.get(at)?;
                let chain = ClosedEpoch {
                    provider: r.provider,
                    price_per_step: r.pricePerStep,
                    step_at_end: r.stepAtEnd,
                    window_end: r.windowEnd,
                };
                if chain != m.closed_epoch(id, epoch) {
                    diffs.push(format!(
                        "closedEpoch({id}, {epoch}): chain {chain:?}, model {:?}",
                        m.closed_epoch(id, epoch)
                    ));
                }
            }
            let terms = v.get(&views.terms)?;
            // What a node that read the `JobCreated` log and the `CommitteeDrawn` committee
            // would sign a bid over; zero before the draw.
            let from_event = if job.committee.is_empty() {
                Some(B256::ZERO)
            } else {
                m.created_event(id)
                    .and_then(|e| e.terms_with(&job.committee))
            };
            if terms != job.terms || from_event != Some(job.terms) {
                diffs.push(format!(
                    "terms of job {id}: termsOf {terms}, model {}, from the events {from_event:?}",
                    job.terms
                ));
            }
        }
        let live: u64 = m.stakes().map(|(_, s)| u64::from(s.live_epochs)).sum();
        if live != assigned {
            diffs.push(format!(
                "{live} live epochs across providers, {assigned} assigned jobs"
            ));
        }
        // Conservation to the unit, from the chain's views alone: the escrow holds exactly
        // what it accounts for.
        for (t, token) in tokens.iter().enumerate() {
            let held = v.get(&escrow_held[t])?;
            let owed = accounted.get(token).copied().unwrap_or_default();
            if held != owed || held != m.owed_recomputed(*token) {
                diffs.push(format!(
                    "escrow holds {held} of {token}: the chain's views account for {owed}, the model {}",
                    m.owed_recomputed(*token)
                ));
            }
        }
        Ok((!diffs.is_empty()).then(|| diffs.join("\n  ")))
    }
}

fn replay_hint(seed: u64) -> String {
    format!(
        "replay with: GPUCHAIN_DIFF_SEED={seed} cargo test -p gpuchain-contracts --test escrow_model"
    )
}

// ----------------------------------------------------- ABI translation

fn calldata(call: &Call) -> Vec<u8> {
    let sigs = |s: &[Sig65]| {
        s.iter()
            .map(|s| Bytes::from(s.0.to_vec()))
            .collect::<Vec<_>>()
    };
    match call {
        Call::Register { amount } => JobEscrow::registerCall { amount: *amount }.abi_encode(),
        Call::RequestUnbond { amount } => {
            JobEscrow::requestUnbondCall { amount: *amount }.abi_encode()
        }
        Call::WithdrawStake => JobEscrow::withdrawStakeCall {}.abi_encode(),
        Call::RegisterVerifier { amount } => {
            JobEscrow::registerVerifierCall { amount: *amount }.abi_encode()
        }
        Call::RequestVerifierUnbond { amount } => {
            JobEscrow::requestVerifierUnbondCall { amount: *amount }.abi_encode()
        }
        Call::WithdrawVerifierStake => JobEscrow::withdrawVerifierStakeCall {}.abi_encode(),
        Call::Tx(tx) => match tx {
            ChainTx::CreateJob {
                token,
                budget,
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                spec_hash,
                committee_size,
                quorum,
                verifier_fee,
                deadline,
                grace,
            } => JobEscrow::createJobCall {
                token: *token,
                budget: *budget,
                maxPricePerStep: *max_price_per_step,
                totalSteps: *total_steps,
                checkpointInterval: *checkpoint_interval,
                specHash: *spec_hash,
                committeeSize: *committee_size,
                quorum: *quorum,
                verifierFee: *verifier_fee,
                deadline: *deadline,
                grace: *grace,
            }
            .abi_encode(),
            ChainTx::DrawCommittee { job_id } => {
                JobEscrow::drawCommitteeCall { jobId: *job_id }.abi_encode()
            }
            ChainTx::Assign {
                job_id,
                provider,
                price_per_step,
                bid_expiry,
                bid_signature,
            } => JobEscrow::assignCall {
                jobId: *job_id,
                provider: *provider,
                pricePerStep: *price_per_step,
                bidExpiry: *bid_expiry,
                bidSig: Bytes::from(bid_signature.0.to_vec()),
            }
            .abi_encode(),
            ChainTx::ReleaseProvider { job_id } => {
                JobEscrow::releaseProviderCall { jobId: *job_id }.abi_encode()
            }
            ChainTx::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs: s,
            } => JobEscrow::acceptCheckpointCall {
                jobId: *job_id,
                epoch: *epoch,
                step: *step,
                checkpointHash: *checkpoint_hash,
                sigs: sigs(s),
            }
            .abi_encode(),
            ChainTx::RejectCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs: s,
            } => JobEscrow::rejectCheckpointCall {
                jobId: *job_id,
                epoch: *epoch,
                step: *step,
                checkpointHash: *checkpoint_hash,
                sigs: sigs(s),
            }
            .abi_encode(),
            ChainTx::Expire { job_id } => JobEscrow::expireCall { jobId: *job_id }.abi_encode(),
            ChainTx::Resign { job_id } => JobEscrow::resignCall { jobId: *job_id }.abi_encode(),
            ChainTx::Settle { job_id } => JobEscrow::settleCall { jobId: *job_id }.abi_encode(),
            ChainTx::Withdraw { token } => JobEscrow::withdrawCall { token: *token }.abi_encode(),
        },
    }
}

fn event_of(log: &alloy::primitives::Log) -> Result<Event> {
    use JobEscrow::JobEscrowEvents as E;
    let decoded = E::decode_log(log).context("decoding an escrow log")?.data;
    Ok(match decoded {
        E::JobCreated(e) => Event::Job(ChainEvent::JobCreated {
            job_id: e.jobId,
            client: e.client,
            token: e.token,
            budget: e.budget,
            max_price_per_step: e.maxPricePerStep,
            total_steps: e.totalSteps,
            checkpoint_interval: e.checkpointInterval,
            spec_hash: e.specHash,
            committee_size: e.committeeSize,
            quorum: e.quorum,
            verifier_fee: e.verifierFee,
            deadline: e.deadline,
            grace: e.grace,
            seed_block: e.seedBlock,
        }),
        E::CommitteeSeedMoved(e) => Event::Job(ChainEvent::CommitteeSeedMoved {
            job_id: e.jobId,
            seed_block: e.seedBlock,
        }),
        E::CommitteeDrawn(e) => Event::Job(ChainEvent::CommitteeDrawn {
            job_id: e.jobId,
            committee: e.committee,
            terms: e.terms,
        }),
        E::ProviderAssigned(e) => Event::Job(ChainEvent::ProviderAssigned {
            job_id: e.jobId,
            epoch: e.epoch,
            provider: e.provider,
            price_per_step: e.pricePerStep,
            start_step: e.startStep,
            start_checkpoint: e.startCheckpoint,
        }),
        E::EpochEnded(e) => Event::Job(ChainEvent::EpochEnded {
            job_id: e.jobId,
            epoch: e.epoch,
            reason: EpochEndReason::from_code(e.reason),
        }),
        E::CheckpointAccepted(e) => Event::Job(ChainEvent::CheckpointAccepted {
            job_id: e.jobId,
            epoch: e.epoch,
            step: e.step,
            checkpoint_hash: e.checkpointHash,
            provider: e.provider,
            amount: e.amount,
            voters: e.voters,
            fees: e.fees,
        }),
        E::CheckpointRejected(e) => Event::Job(ChainEvent::CheckpointRejected {
            job_id: e.jobId,
            epoch: e.epoch,
            step: e.step,
            checkpoint_hash: e.checkpointHash,
            provider: e.provider,
            slashed: e.slashed,
            voters: e.voters,
            fees: e.fees,
        }),
        E::JobCompleted(e) => Event::Job(ChainEvent::JobCompleted {
            job_id: e.jobId,
            refund: e.refund,
        }),
        E::JobExpired(e) => Event::Job(ChainEvent::JobExpired {
            job_id: e.jobId,
            refund: e.refund,
        }),
        E::JobSettled(e) => Event::Job(ChainEvent::JobSettled {
            job_id: e.jobId,
            client: e.client,
            refund: e.refund,
        }),
        E::FeesCredited(e) => Event::FeesCredited {
            job_id: e.jobId,
            verifier: e.verifier,
            amount: e.amount,
        },
        E::Staked(e) => Event::Staked {
            provider: e.provider,
            amount: e.amount,
            total: e.totalBonded,
        },
        E::UnbondRequested(e) => Event::UnbondRequested {
            provider: e.provider,
            amount: e.amount,
            available_at: e.availableAt,
        },
        E::StakeWithdrawn(e) => Event::StakeWithdrawn {
            provider: e.provider,
            amount: e.amount,
        },
        E::Slashed(e) => Event::Slashed {
            provider: e.provider,
            job_id: e.jobId,
            amount: e.amount,
        },
        E::VerifierStaked(e) => Event::VerifierStaked {
            verifier: e.verifier,
            amount: e.amount,
            total: e.totalBonded,
        },
        E::VerifierUnbondRequested(e) => Event::VerifierUnbondRequested {
            verifier: e.verifier,
            amount: e.amount,
            available_at: e.availableAt,
        },
        E::VerifierStakeWithdrawn(e) => Event::VerifierStakeWithdrawn {
            verifier: e.verifier,
            amount: e.amount,
        },
        E::Withdrawn(e) => Event::Withdrawn {
            account: e.account,
            token: e.token,
            amount: e.amount,
        },
        other => bail!("an event the model does not know: {other:?}"),
    })
}

/// An event's name for the coverage count; `EpochEnded` with its reason.
fn event_name(e: &Event) -> String {
    match e {
        Event::Job(j) => match j {
            ChainEvent::JobCreated { .. } => "JobCreated".into(),
            ChainEvent::CommitteeSeedMoved { .. } => "CommitteeSeedMoved".into(),
            ChainEvent::CommitteeDrawn { .. } => "CommitteeDrawn".into(),
            ChainEvent::ProviderAssigned { .. } => "ProviderAssigned".into(),
            ChainEvent::EpochEnded { reason, .. } => format!("EpochEnded({reason:?})"),
            ChainEvent::CheckpointAccepted { .. } => "CheckpointAccepted".into(),
            ChainEvent::CheckpointRejected { .. } => "CheckpointRejected".into(),
            ChainEvent::JobCompleted { .. } => "JobCompleted".into(),
            ChainEvent::JobExpired { .. } => "JobExpired".into(),
            ChainEvent::JobSettled { .. } => "JobSettled".into(),
        },
        Event::Staked { .. } => "Staked".into(),
        Event::UnbondRequested { .. } => "UnbondRequested".into(),
        Event::StakeWithdrawn { .. } => "StakeWithdrawn".into(),
        Event::Slashed { .. } => "Slashed".into(),
        Event::FeesCredited { .. } => "FeesCredited".into(),
        Event::VerifierStaked { .. } => "VerifierStaked".into(),
        Event::VerifierUnbondRequested { .. } => "VerifierUnbondRequested".into(),
        Event::VerifierStakeWithdrawn { .. } => "VerifierStakeWithdrawn".into(),
        Event::Withdrawn { .. } => "Withdrawn".into(),
    }
}

fn error_of(data: &[u8]) -> Result<EscrowError> {
    use EscrowError as M;
    use JobEscrow::JobEscrowErrors as E;
    if data.is_empty() {
        return Ok(M::NotAToken);
    }
    if data.len() == 36 && data[..4] == PANIC {
        return Ok(M::Panic(data[35]));
    }
    if let Ok(e) = TestUSDC::TestUSDCErrors::abi_decode(data) {
        return Ok(match e {
            TestUSDC::TestUSDCErrors::ERC20InsufficientBalance(e) => M::Erc20InsufficientBalance {
                sender: e.sender,
                balance: e.balance,
                needed: e.needed,
            },
            TestUSDC::TestUSDCErrors::ERC20InsufficientAllowance(e) => {
                M::Erc20InsufficientAllowance {
                    spender: e.spender,
                    allowance: e.allowance,
                    needed: e.needed,
                }
            }
            other => bail!("a token error the model does not know: {other:?}"),
        });
    }
    let e = E::abi_decode(data)
        .with_context(|| format!("undecodable revert 0x{}", alloy::hex::encode(data)))?;
    Ok(match e {
        E::ZeroAddress(_) => M::ZeroAddress,
        E::ZeroAmount(_) => M::ZeroAmount,
        E::AmountTooLarge(_) => M::AmountTooLarge,
        E::InvalidSteps(_) => M::InvalidSteps,
        E::InvalidVerifiers(_) => M::InvalidVerifiers,
        E::InvalidQuorum(_) => M::InvalidQuorum,
        E::DeadlinePassed(_) => M::DeadlinePassed,
        E::DeadlineTooFar(e) => M::DeadlineTooFar {
            deadline: e.deadline,
            latest: e.latest,
        },
        E::GraceTooLong(e) => M::GraceTooLong {
            grace: e.grace,
            max_grace: e.maxGrace,
        },
        E::BudgetTooSmall(e) => M::BudgetTooSmall {
            budget: e.budget,
            needed: e.needed,
        },
        E::NotEnoughVerifiers(e) => M::NotEnoughVerifiers {
            available: e.available,
            needed: e.needed,
        },
        E::SeedNotMined(e) => M::SeedNotMined(e.seedBlock),
        E::DepositMismatch(e) => M::DepositMismatch {
            received: e.received,
            expected: e.expected,
        },
        E::UnknownJob(e) => M::UnknownJob(e.jobId),
        E::NotClient(_) => M::NotClient,
        E::NotProvider(_) => M::NotProvider,
        E::WrongStatus(e) => M::WrongStatus(Status::from_code(e.status).context("status")?),
        E::WrongEpoch(e) => M::WrongEpoch {
            given: e.given,
            current: e.current,
        },
        E::BidExpired(e) => M::BidExpired { expiry: e.expiry },
        E::PriceTooHigh(e) => M::PriceTooHigh {
            price: e.price,
            max_price: e.maxPrice,
        },
        E::ProviderIsVerifier(e) => M::ProviderIsVerifier(e.provider),
        E::InsufficientStake(e) => M::InsufficientStake {
            bonded: e.bonded,
            needed: e.needed,
        },
        E::BadSignature(e) => M::BadSignature { index: e.index },
        E::WrongSigner(e) => M::WrongSigner {
            recovered: e.recovered,
            expected: e.expected,
        },
        E::NotVerifier(e) => M::NotVerifier(e.signer),
        E::DuplicateSigner(e) => M::DuplicateSigner(e.signer),
        E::TooManySignatures(_) => M::TooManySignatures,
        E::QuorumNotReached(e) => M::QuorumNotReached {
            have: e.have,
            need: e.need,
        },
        E::StepNotIncreasing(e) => M::StepNotIncreasing {
            step: e.step,
            last_accepted: e.lastAccepted,
        },
        E::StepOffInterval(e) => M::StepOffInterval(e.step),
        E::TooLate(_) => M::TooLate,
        E::TooEarly(e) => M::TooEarly {
            allowed_at: e.allowedAt,
        },
        E::StakeLocked(e) => M::StakeLocked {
            free: e.free,
            requested: e.requested,
        },
        E::NotUnbonding(_) => M::NotUnbonding,
        E::NothingToSettle(_) => M::NothingToSettle,
        E::NothingToWithdraw(_) => M::NothingToWithdraw,
        E::WindowClosed(e) => M::WindowClosed {
            window_end: e.windowEnd,
        },
        E::MovedOn(e) => M::MovedOn {
            last_accepted: e.lastAccepted,
            step_at_end: e.stepAtEnd,
        },
        E::BeyondNextCheckpoint(e) => M::BeyondNextCheckpoint(e.step),
        other => bail!("an escrow error the model does not know: {other:?}"),
    })
}

// ------------------------------------------------------------ generator

// Situations a call is built to set up (or, for some, that its outcome shows), counted with
// its outcome like a call name is, so the run can require each to have been reached
// ([`EXPECTED_SITUATIONS`]).
const WRONG_TERMS: &str = "bid over other terms";
const MEMBER_AS_PROVIDER: &str = "a committee member as provider";
const HOLDS_ANOTHER: &str = "provider holding another epoch";
const SAME_PROVIDER_AGAIN: &str = "its provider re-assigned";
const ASSIGN_BEFORE_DRAW: &str = "assign before the draw";
const PARTIAL_UNBOND: &str = "partial unbond";
const UNBOND_ABOVE_FREE: &str = "unbond above free";
const REGISTER_UNBONDING: &str = "register while unbonding";
const RESIGN_BY_PROVIDER: &str = "resign by its provider";
const RESIGN_BY_OTHER: &str = "resign by another";
const SETTLE_COMPLETED: &str = "settle completed";
const SETTLE_EARLY: &str = "settle before completion";
const SETTLE_AGAIN: &str = "settle a settled job";
const EXPIRE_DRAWING: &str = "expire while drawing";
const POOLED_CLIENT: &str = "a pooled client's job";
const COMMITTEE_AT_MIN: &str = "committee of 2";
const COMMITTEE_AT_MAX: &str = "committee of 32";
const COMMITTEE_BELOW_MIN: &str = "committee below 2";
const COMMITTEE_ABOVE_MAX: &str = "committee above 32";
const COMMITTEE_IS_POOL: &str = "committee as large as the pool";
const COMMITTEE_ABOVE_POOL: &str = "committee one above the pool";
const QUORUM_HALF: &str = "quorum of half the committee";
const QUORUM_ABOVE: &str = "quorum above the committee";
const QUORUM_ALL: &str = "quorum of the whole committee";
const AMOUNT_AT_LIMIT: &str = "amount 2^96 - 1";
const AMOUNT_PAST_LIMIT: &str = "amount 2^96";
const DRAW_IN_SEED_BLOCK: &str = "draw in the seed block";
const DRAW_AT_256: &str = "draw 256 blocks after the seed";
const DRAW_SEED_GONE: &str = "draw over 256 blocks after the seed";
const DRAW_AFTER_POOL_CHANGE: &str = "draw after the pool changed";
const DRAW_POOL_SHRANK: &str = "draw from a pool that shrank in the seed block";
const DRAW_DRAWN: &str = "draw a job not drawing";
const VERIFIER_JOINS: &str = "verifier joins the pool";
const VERIFIER_STAYS_OUT: &str = "verifier stakes below the minimum";
const VERIFIER_TOPS_UP: &str = "pooled verifier tops up";
const VERIFIER_REGISTERS_UNBONDING: &str = "verifier registers while unbonding";
const VERIFIER_STAYS: &str = "verifier unbonds and stays pooled";
const VERIFIER_LEAVES_MIDDLE: &str = "verifier leaves from inside the pool";
const VERIFIER_LEAVES_LAST: &str = "verifier leaves from the end of the pool";
const VERIFIER_UNBOND_ABOVE_BONDED: &str = "verifier unbonds above bonded";
const ACCEPT_BY_QUORUM: &str = "accept signed by the quorum";
const ACCEPT_BY_MORE: &str = "accept signed by more than the quorum";
const ACCEPT_BY_ALL: &str = "accept signed by the whole committee";
const REJECT_UNANIMOUS: &str = "reject by the whole committee";
const REJECT_BY_MAJORITY: &str = "reject by less than the whole committee";
const REJECT_FEES_FROM_SLACK: &str = "reject fees from the slack";
const REJECT_NO_SLACK: &str = "reject without slack for fees";
/// A zero fee still counts the signers' decisions in `memberOf().paid` when there is slack.
const REJECT_ZERO_FEE: &str = "reject with a zero fee";
const LATE_IN_WINDOW: &str = "late accept within the window";
const LATE_AFTER_WINDOW: &str = "late accept after the window";
const LATE_MOVED_ON: &str = "late accept after the head moved";
const LATE_BEYOND: &str = "late accept beyond the next checkpoint";
const LATE_SUPERSEDES: &str = "late accept superseding a live epoch";
const LATE_COMPLETES: &str = "late accept completing the job";
const LATE_REJECT: &str = "reject of an epoch the client ended";

/// Each (situation, outcome) the normal run must reach at least once.
const EXPECTED_SITUATIONS: &[(&str, &str)] = &[
    (WRONG_TERMS, "WrongSigner"),
    (MEMBER_AS_PROVIDER, "ProviderIsVerifier"),
    (HOLDS_ANOTHER, "ok"),
    (HOLDS_ANOTHER, "InsufficientStake"),
    (SAME_PROVIDER_AGAIN, "ok"),
    (ASSIGN_BEFORE_DRAW, "WrongStatus"),
    (PARTIAL_UNBOND, "ok"),
    (UNBOND_ABOVE_FREE, "StakeLocked"),
    (REGISTER_UNBONDING, "ok"),
    (RESIGN_BY_PROVIDER, "ok"),
    (RESIGN_BY_OTHER, "NotProvider"),
    (SETTLE_COMPLETED, "ok"),
    (SETTLE_EARLY, "WrongStatus"),
    (SETTLE_AGAIN, "NothingToSettle"),
    (EXPIRE_DRAWING, "ok"),
    (POOLED_CLIENT, "ok"),
    (POOLED_CLIENT, "NotEnoughVerifiers"),
    (COMMITTEE_AT_MIN, "ok"),
    (COMMITTEE_AT_MAX, "ok"),
    (COMMITTEE_BELOW_MIN, "InvalidVerifiers"),
    (COMMITTEE_ABOVE_MAX, "InvalidVerifiers"),
    (COMMITTEE_IS_POOL, "ok"),
    (COMMITTEE_ABOVE_POOL, "NotEnoughVerifiers"),
    (QUORUM_HALF, "InvalidQuorum"),
    (QUORUM_ABOVE, "InvalidQuorum"),
    (QUORUM_ALL, "ok"),
    (AMOUNT_AT_LIMIT, "ok"),
    (AMOUNT_PAST_LIMIT, "AmountTooLarge"),
    (DRAW_IN_SEED_BLOCK, "SeedNotMined"),
    (DRAW_AT_256, "ok"),
    (DRAW_SEED_GONE, "ok"),
    (DRAW_AFTER_POOL_CHANGE, "ok"),
    (DRAW_POOL_SHRANK, "NotEnoughVerifiers"),
    (DRAW_DRAWN, "WrongStatus"),
    (VERIFIER_JOINS, "ok"),
    (VERIFIER_STAYS_OUT, "ok"),
    (VERIFIER_TOPS_UP, "ok"),
    (VERIFIER_REGISTERS_UNBONDING, "ok"),
    (VERIFIER_STAYS, "ok"),
    (VERIFIER_LEAVES_MIDDLE, "ok"),
    (VERIFIER_LEAVES_LAST, "ok"),
    (VERIFIER_UNBOND_ABOVE_BONDED, "StakeLocked"),
    (ACCEPT_BY_QUORUM, "ok"),
    (ACCEPT_BY_MORE, "ok"),
    (ACCEPT_BY_ALL, "ok"),
    (REJECT_UNANIMOUS, "ok"),
    (REJECT_BY_MAJORITY, "ok"),
    (REJECT_FEES_FROM_SLACK, "ok"),
    (REJECT_NO_SLACK, "ok"),
    (REJECT_ZERO_FEE, "ok"),
    (LATE_IN_WINDOW, "ok"),
    (LATE_AFTER_WINDOW, "WindowClosed"),
    (LATE_MOVED_ON, "MovedOn"),
    (LATE_BEYOND, "BeyondNextCheckpoint"),
    (LATE_SUPERSEDES, "ok"),
    (LATE_COMPLETES, "ok"),
    (LATE_REJECT, "WrongEpoch"),
];

/// One call of a block: who sends it, what, and the situations it sets up.
struct Step {
    actor: usize,
    call: Call,
    labels: Vec<&'static str>,
}

/// One block: seconds after the last one, empty blocks mined before it, and its calls (more
/// than one only where the block matters: a draw in its job's creation block, a verifier
/// leaving the pool in it).
struct Planned {
    advance: u64,
    mine: u64,
    steps: Vec<Step>,
}

/// Makes calls two ways, mixed: "directed" ones push the sequence forward (stake the
/// providers, open jobs, draw their committees, assign them, decide their checkpoints, settle
/// them, mostly validly), so the deep branches are reached at all; random ones pick any call,
/// any sender, any job, with broken arguments often. Every call, directed or not, may be
/// broken: [`Generator::bad`].
struct Generator<'a> {
    rng: Rng,
    keys: &'a [SigningKey],
    addrs: Vec<Address>,
    stake_token: Address,
    other_token: Address,
    directed: bool,
    /// The situations the call being built sets up.
    labels: Vec<&'static str>,
}

type JobIdx = U256;

impl Generator<'_> {
    fn addr(&self, actor: usize) -> Address {
        self.addrs[actor]
    }

    fn actor_of(&self, a: Address) -> Option<usize> {
        self.addrs.iter().position(|x| *x == a)
    }

    /// Any actor that sends transactions of its own (not one of the pool's sitters).
    fn actor(&mut self) -> usize {
        self.rng.below(BULK_FROM as u64) as usize
    }

    /// Whether to break this part of the call: with `percent` chance in a random call, a
    /// quarter of that in a directed one.
    fn bad(&mut self, percent: u64) -> bool {
        let p = if self.directed { percent / 4 } else { percent };
        self.rng.chance(p)
    }

    fn step(&mut self, actor: usize, call: Call) -> Step {
        Step {
            actor,
            call,
            labels: std::mem::take(&mut self.labels),
        }
    }

    fn one(&mut self, advance: u64, actor: usize, call: Call) -> Planned {
        let step = self.step(actor, call);
        Planned {
            advance,
            mine: 0,
            steps: vec![step],
        }
    }

    fn job_at(m: &Escrow, i: u64) -> (JobIdx, Option<Job>) {
        (U256::from(i), Some(m.jobs()[(i - 1) as usize].clone()))
    }

    fn jobs(m: &Escrow, f: impl Fn(&Job) -> bool) -> Vec<u64> {
        (1..=m.job_count())
            .filter(|i| f(&m.jobs()[(*i - 1) as usize]))
            .collect()
    }

    /// A job id: mostly an existing job (ones in `want` preferred), sometimes one that is not.
    fn job(&mut self, m: &Escrow, want: Option<Status>) -> (JobIdx, Option<Job>) {
        let n = m.job_count();
        if n == 0 || self.rng.chance(6) {
            let id = match self.rng.below(3) {
                0 => U256::ZERO,
                1 => U256::from(n + 1),
                _ => U256::MAX,
            };
            return (id, None);
        }
        let matching = Self::jobs(m, |j| want.map_or(j.status.is_live(), |w| j.status == w));
        let i = if !matching.is_empty() && self.rng.chance(85) {
            self.rng.pick(&matching)
        } else {
            self.rng.range(1, n)
        };
        Self::job_at(m, i)
    }

    /// Records of epochs the client ended, on jobs still open or assigned: (job, epoch).
    fn late_records(m: &Escrow) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (i, j) in m.jobs().iter().enumerate() {
            let id = i as u64 + 1;
            if !j.status.is_live() {
                continue;
            }
            for e in 1..=j.epoch {
                if m.closed_epoch(U256::from(id), e).provider != Address::ZERO {
                    out.push((id, e));
                }
            }
        }
        out
    }

    /// Seconds to advance to land just before or exactly at `t` (at least one).
    fn towards(&mut self, now: u64, t: u64) -> u64 {
        let target = if self.rng.chance(50) {
            t.saturating_sub(1)
        } else {
            t
        };
        target.saturating_sub(now).max(1)
    }

    fn client_or_other(&mut self, job: &Option<Job>) -> usize {
        let client = job.as_ref().and_then(|j| self.actor_of(j.client));
        match client {
            Some(c) if !self.bad(15) => c,
            _ => self.actor(),
        }
    }

    fn provider_mostly(&mut self) -> usize {
        if self.rng.chance(80) {
            self.rng.pick(&PROVIDERS)
        } else {
            self.actor()
        }
    }

    fn verifier_mostly(&mut self) -> usize {
        if self.rng.chance(80) {
            self.rng.pick(&CHURN)
        } else {
            self.actor()
        }
    }

    fn next(&mut self, m: &Escrow, now: u64, head: u64) -> Planned {
        self.labels.clear();
        self.directed = self.rng.chance(55);
        if self.directed
            && let Some(p) = self.directed_call(m, now, head)
        {
            return p;
        }
        self.directed = false;
        self.labels.clear();
        self.random_call(m, now, head)
    }

    fn directed_call(&mut self, m: &Escrow, now: u64, head: u64) -> Option<Planned> {
        let at = now + 1;
        let drawing = Self::jobs(m, |j| j.status == Status::Drawing && j.seed_block <= head);
        let open = Self::jobs(m, |j| j.status == Status::Open && j.deadline > at);
        let assigned = Self::jobs(m, |j| {
            j.status == Status::Assigned && at <= j.deadline + j.grace
        });
        let reassignable = Self::jobs(m, |j| j.status == Status::Assigned && j.deadline > at);
        let settleable = Self::jobs(m, |j| j.status == Status::Completed && !j.settled);
        let live = Self::jobs(m, |j| j.status.can_expire() && j.deadline > at);
        let late = Self::late_records(m);
        // Providers that could not back one more epoch.
        let unstaked: Vec<usize> = PROVIDERS
            .iter()
            .copied()
            .filter(|p| {
                m.stake_of(self.addr(*p)).free(U256::from(MIN_STAKE)) < U256::from(MIN_STAKE)
            })
            .collect();
        let r = self.rng.below(100);
        if !drawing.is_empty() && r < 35 {
            let i = self.rng.pick(&drawing);
            return Some(self.draw(m, head, U256::from(i)));
        }
        // A record still within its window: its late accept is worth trying before the
        // job's head moves on.
        let fresh: Vec<(u64, u64)> = late
            .iter()
            .copied()
            .filter(|(i, e)| now < m.closed_epoch(U256::from(*i), *e).window_end)
            .collect();
        // Records whose job moved on since (a live epoch's accept, another record's late
        // accept): their late accept is refused.
        let moved: Vec<(u64, u64)> = fresh
            .iter()
            .copied()
            .filter(|(i, e)| {
                m.jobs()[(*i - 1) as usize].last_accepted_step
                    != m.closed_epoch(U256::from(*i), *e).step_at_end
            })
            .collect();
        if !moved.is_empty() && self.rng.chance(30) {
            return Some(self.late_accept(m, now, &moved));
        }
        // Or the live epoch that replaced a fresh record decides first (the record is then
        // refused as moved on).
        let replacing: Vec<u64> = fresh
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| assigned.contains(i))
            .collect();
        if !replacing.is_empty() && self.rng.chance(30) {
            let i = self.rng.pick(&replacing);
            let (id, job) = Self::job_at(m, i);
            let (actor, call) = self.decide(m, id, job, true);
            return Some(self.one(1, actor, call));
        }
        if !fresh.is_empty() && self.rng.chance(40) {
            return Some(self.late_accept(m, now, &fresh));
        }
        let (actor, call) = if !unstaked.is_empty() && r < 42 {
            let actor = self.rng.pick(&unstaked);
            self.register(m, actor)
        } else if !assigned.is_empty() && r < 64 {
            let i = self.rng.pick(&assigned);
            let (id, job) = Self::job_at(m, i);
            let accept = self.rng.chance(80);
            self.decide(m, id, job, accept)
        } else if !late.is_empty() && r < 74 {
            return Some(self.late_accept(m, now, &late));
        } else if !settleable.is_empty() && r < 79 {
            let i = self.rng.pick(&settleable);
            let (id, job) = Self::job_at(m, i);
            self.settle_job(id, job)
        } else if !assigned.is_empty() && r < 80 {
            let i = self.rng.pick(&assigned);
            let (id, job) = Self::job_at(m, i);
            self.resign_job(id, job)
        } else if !assigned.is_empty() && r < 86 {
            // The client ends the epoch: its next checkpoint may still land late.
            let i = self.rng.pick(&assigned);
            let (id, job) = Self::job_at(m, i);
            let actor = self.client_or_other(&job);
            (actor, ChainTx::ReleaseProvider { job_id: id }.into())
        } else if !reassignable.is_empty() && r < 90 {
            let i = self.rng.pick(&reassignable);
            let (id, job) = Self::job_at(m, i);
            self.assign(m, at, id, job)
        } else if !open.is_empty() && r < 95 {
            let i = self.rng.pick(&open);
            let (id, job) = Self::job_at(m, i);
            self.assign(m, at, id, job)
        } else if r < 97 {
            let actor = self.rng.pick(&CHURN);
            return Some(self.verifier_call(m, now, actor));
        } else if live.len() < 3 {
            return Some(self.create_planned(m, at));
        } else {
            return None;
        };
        Some(self.one(1, actor, call))
    }

    fn random_call(&mut self, m: &Escrow, now: u64, head: u64) -> Planned {
        let mut advance = if self.rng.chance(5) {
            self.rng.range(20, 600)
        } else {
            1
        };
        let kind = self.rng.below(100);
        let (actor, call) = match kind {
            0..=8 => return self.create_planned(m, now + advance),
            9..=12 => {
                let (id, _) = self.job(m, Some(Status::Drawing));
                return self.draw(m, head, id);
            }
            13..=18 => {
                let actor = self.provider_mostly();
                self.register(m, actor)
            }
            19..=30 => {
                let want = if self.rng.chance(15) {
                    Status::Drawing
                } else {
                    Status::Open
                };
                let (id, job) = self.job(m, Some(want));
                if let Some(j) = &job
                    && self.rng.chance(10)
                {
                    advance = self.towards(now, j.deadline);
                }
                self.assign(m, now + advance, id, job)
            }
            31..=46 => {
                let (id, job) = self.job(m, Some(Status::Assigned));
                if let Some(j) = &job
                    && self.rng.chance(8)
                {
                    advance = self.towards(now, j.deadline + j.grace + 1);
                }
                let accept = kind < 41;
                self.decide(m, id, job, accept)
            }
            47..=49 => {
                let late = Self::late_records(m);
                if !late.is_empty() {
                    return self.late_accept(m, now, &late);
                }
                let (id, job) = self.job(m, None);
                self.decide(m, id, job, true)
            }
            50..=54 => {
                let (id, job) = self.job(m, Some(Status::Assigned));
                let actor = self.client_or_other(&job);
                (actor, ChainTx::ReleaseProvider { job_id: id }.into())
            }
            55..=56 => {
                let (id, job) = self.job(m, Some(Status::Assigned));
                self.resign_job(id, job)
            }
            57..=61 => {
                // Mostly completed jobs, settled or not; sometimes live ones.
                let (id, job) = if self.rng.chance(70) {
                    self.job(m, Some(Status::Completed))
                } else {
                    self.job(m, None)
                };
                self.settle_job(id, job)
            }
            62..=68 => {
                let want = if self.rng.chance(25) {
                    Some(Status::Drawing)
                } else {
                    None
                };
                let (id, job) = self.job(m, want);
                if let Some(j) = &job {
                    if self.rng.chance(60) {
                        advance = self.towards(now, j.deadline + j.grace);
                    }
                    if j.status == Status::Drawing {
                        self.labels.push(EXPIRE_DRAWING);
                    }
                }
                (self.actor(), ChainTx::Expire { job_id: id }.into())
            }
            69..=76 => {
                let token = match self.rng.below(20) {
                    0..=15 => self.stake_token,
                    16..=18 => self.other_token,
                    _ => Address::repeat_byte(0x99),
                };
                let actor = if self.rng.chance(15) {
                    self.rng.range(BULK_FROM as u64, ACTORS as u64 - 1) as usize
                } else {
                    self.actor()
                };
                (actor, ChainTx::Withdraw { token }.into())
            }
            77..=82 => {
                let actor = self.provider_mostly();
                self.request_unbond(m, actor)
            }
            83..=86 => {
                let actor = self.provider_mostly();
                let st = m.stake_of(self.addr(actor));
                if !st.unbonding.is_zero() && self.rng.chance(60) {
                    advance = self.towards(now, st.unbond_at);
                }
                (actor, Call::WithdrawStake)
            }
            _ => {
                let actor = self.verifier_mostly();
                return self.verifier_call(m, now, actor);
            }
        };
        self.one(advance, actor, call)
    }

    fn register(&mut self, m: &Escrow, actor: usize) -> (usize, Call) {
        let st = m.stake_of(self.addr(actor));
        let amount = self.stake_amount(st.bonded, U256::from(MIN_STAKE));
        if !st.unbonding.is_zero() {
            self.labels.push(REGISTER_UNBONDING);
        }
        (actor, Call::Register { amount })
    }

    /// A registration's amount: around `min`, or broken (zero, overflowing the sum once
    /// something is bonded, above the 128-bit bound, more than anyone holds).
    fn stake_amount(&mut self, bonded: U256, min: U256) -> U256 {
        let min_u = u64::try_from(min).unwrap_or(1);
        let mut amount = U256::from(self.rng.range(min_u, 3 * min_u));
        if self.bad(30) {
            amount = match self.rng.below(6) {
                0 => U256::ZERO,
                1 if !bonded.is_zero() => U256::MAX,
                2 => U256::from(u128::MAX),
                3 => rich() * U256::from(10),
                _ => U256::from(self.rng.range(1, min_u.saturating_sub(1).max(1))),
            };
        }
        amount
    }

    /// All of the free stake, part of it, more than it, or nothing.
    fn request_unbond(&mut self, m: &Escrow, actor: usize) -> (usize, Call) {
        let st = m.stake_of(self.addr(actor));
        let free = st.free(U256::from(MIN_STAKE));
        // Stakes are sums of a few registrations: far below u64::MAX.
        let free_u = u64::try_from(free).unwrap_or(u64::MAX / 2);
        let amount = match self.rng.below(10) {
            0..=3 if free_u > 1 => U256::from(self.rng.range(1, free_u - 1)),
            4 | 5 if free_u > 0 => free,
            6 | 7 => free + U256::from(self.rng.range(1, MIN_STAKE)),
            8 if self.bad(50) => U256::ZERO,
            _ => U256::from(self.rng.range(1, 2 * MIN_STAKE)),
        };
        if amount > free {
            self.labels.push(UNBOND_ABOVE_FREE);
        } else if !amount.is_zero() && amount < free {
            self.labels.push(PARTIAL_UNBOND);
        }
        (actor, Call::RequestUnbond { amount })
    }

    /// A verifier's registration (joining the pool, staying below the minimum, topping up),
    /// unbonding (staying, leaving, more than bonded) or withdrawal.
    fn verifier_call(&mut self, m: &Escrow, now: u64, actor: usize) -> Planned {
        let vs = m.verifier_stake_of(self.addr(actor));
        let min = U256::from(MIN_VERIFIER_STAKE);
        let mut advance = 1;
        let call = match self.rng.below(10) {
            0..=3 => {
                let amount = if !vs.pooled && vs.bonded < min && !self.bad(30) {
                    let short = min - vs.bonded;
                    match self.rng.below(5) {
                        0 | 1 => short,
                        2 if short > U256::from(1) => short - U256::from(1),
                        _ => short + U256::from(self.rng.range(1, MIN_VERIFIER_STAKE)),
                    }
                } else {
                    self.stake_amount(vs.bonded, min)
                };
                Call::RegisterVerifier { amount }
            }
            4..=7 => {
                let bonded = u64::try_from(vs.bonded).unwrap_or(u64::MAX / 2);
                let amount = match self.rng.below(10) {
                    // below the minimum: leaves the pool
                    0..=3 if bonded > 0 => U256::from(
                        self.rng
                            .range(bonded.saturating_sub(MIN_VERIFIER_STAKE) + 1, bonded),
                    ),
                    // what is above the minimum: stays
                    4..=5 if bonded > MIN_VERIFIER_STAKE => {
                        U256::from(self.rng.range(1, bonded - MIN_VERIFIER_STAKE))
                    }
                    6 if bonded > 0 => vs.bonded,
                    7 => {
                        self.labels.push(VERIFIER_UNBOND_ABOVE_BONDED);
                        vs.bonded + U256::from(self.rng.range(1, 10))
                    }
                    8 if self.bad(50) => U256::ZERO,
                    _ => U256::from(self.rng.range(1, MIN_VERIFIER_STAKE)),
                };
                if amount > vs.bonded && !self.labels.contains(&VERIFIER_UNBOND_ABOVE_BONDED) {
                    self.labels.push(VERIFIER_UNBOND_ABOVE_BONDED);
                }
                Call::RequestVerifierUnbond { amount }
            }
            _ => {
                if !vs.unbonding.is_zero() && self.rng.chance(60) {
                    advance = self.towards(now, vs.unbond_at);
                }
                Call::WithdrawVerifierStake
            }
        };
        self.one(advance, actor, call)
    }

    /// `resign`, mostly by the job's provider, sometimes by anyone else.
    fn resign_job(&mut self, job_id: JobIdx, job: Option<Job>) -> (usize, Call) {
        let provider = job.as_ref().and_then(|j| self.actor_of(j.provider));
        let actor = match provider {
            Some(p) if p < BULK_FROM && !self.bad(30) => p,
            _ => self.actor(),
        };
        if let Some(j) = &job
            && j.status == Status::Assigned
        {
            self.labels.push(if Some(actor) == provider {
                RESIGN_BY_PROVIDER
            } else {
                RESIGN_BY_OTHER
            });
        }
        (actor, ChainTx::Resign { job_id }.into())
    }

    /// `settle`, by anyone.
    fn settle_job(&mut self, job_id: JobIdx, job: Option<Job>) -> (usize, Call) {
        if let Some(j) = &job {
            match j.status {
                Status::Completed if j.settled => self.labels.push(SETTLE_AGAIN),
                Status::Completed => self.labels.push(SETTLE_COMPLETED),
                s if s.is_live() || s == Status::Drawing => self.labels.push(SETTLE_EARLY),
                _ => {}
            }
        }
        let actor = match job.as_ref().and_then(|j| self.actor_of(j.client)) {
            Some(c) if self.rng.chance(50) => c,
            _ => self.actor(),
        };
        (actor, ChainTx::Settle { job_id }.into())
    }

    /// `drawCommittee` of `job_id` by anyone; for a drawing job, now and then after mining
    /// blocks up to exactly 256 after its seed, or past it.
    fn draw(&mut self, m: &Escrow, head: u64, job_id: JobIdx) -> Planned {
        let job = m.job(job_id).cloned();
        let mut mine = 0;
        if let Some(j) = &job
            && j.status == Status::Drawing
            && self.rng.chance(if self.directed { 3 } else { 5 })
        {
            let k = match self.rng.below(3) {
                0 => 0,
                1 => 1,
                _ => self.rng.range(2, 40),
            };
            mine = (j.seed_block + BLOCKHASH_WINDOW + k).saturating_sub(head + 1);
        }
        if let Some(j) = &job {
            let current = head + mine + 1;
            let available = m.pool().len() - usize::from(m.verifier_stake_of(j.client).pooled);
            if j.status != Status::Drawing {
                self.labels.push(DRAW_DRAWN);
            } else if current - j.seed_block > BLOCKHASH_WINDOW {
                self.labels.push(DRAW_SEED_GONE);
            } else if m.pool_changed_at() > j.seed_block {
                self.labels.push(DRAW_AFTER_POOL_CHANGE);
            } else {
                if current - j.seed_block == BLOCKHASH_WINDOW {
                    self.labels.push(DRAW_AT_256);
                }
                if available < usize::from(j.committee_size) {
                    self.labels.push(DRAW_POOL_SHRANK);
                }
            }
        }
        let actor = self.actor();
        let mut p = self.one(1, actor, ChainTx::DrawCommittee { job_id }.into());
        p.mine = mine;
        p
    }

    /// `createJob`, now and then in one block with its own draw (refused: the seed is not
    /// mined), or, for a committee as large as the pool, with a verifier leaving the pool
    /// after it (so the draw finds the pool too small).
    fn create_planned(&mut self, m: &Escrow, at: u64) -> Planned {
        let (actor, call) = self.create_job(m, at);
        let size_is_pool = self.labels.contains(&COMMITTEE_IS_POOL);
        let create = self.step(actor, call);
        let mut steps = vec![create];
        if self.rng.chance(if self.directed { 5 } else { 12 }) {
            self.labels.push(DRAW_IN_SEED_BLOCK);
            let draw = ChainTx::DrawCommittee {
                job_id: U256::from(m.job_count() + 1),
            };
            steps.push(self.step(actor, draw.into()));
        } else if size_is_pool && self.rng.chance(50) {
            let leavers: Vec<usize> = CHURN
                .iter()
                .copied()
                .filter(|a| *a != actor && m.verifier_stake_of(self.addr(*a)).pooled)
                .collect();
            if !leavers.is_empty() {
                let leaver = self.rng.pick(&leavers);
                let amount = m.verifier_stake_of(self.addr(leaver)).bonded;
                steps.push(self.step(leaver, Call::RequestVerifierUnbond { amount }));
            }
        }
        Planned {
            advance: 1,
            mine: 0,
            steps,
        }
    }

    fn create_job(&mut self, m: &Escrow, at: u64) -> (usize, Call) {
        let broken = if self.bad(40) {
            Some(self.rng.below(20))
        } else {
            None
        };
        let mut sender = if self.rng.chance(85) {
            self.rng.pick(&CLIENTS)
        } else {
            self.actor()
        };
        if broken == Some(15) {
            sender = OUTSIDER;
        }
        let client = self.addr(sender);
        let pooled = m.verifier_stake_of(client).pooled;
        let available = (m.pool().len() - usize::from(pooled)) as u64;
        let mut size: u64 = match self.rng.below(100) {
            0..=59 => self.rng.range(2, 4),
            60..=74 => self.rng.range(5, 9),
            75..=79 => 2,
            80..=84 => MAX_VERIFIERS as u64,
            85..=89 => available,
            90..=93 => available + 1,
            _ => self.rng.range(2, 5),
        };
        match broken {
            Some(7) => size = self.rng.below(2),
            Some(8) => size = self.rng.pick(&[33, 34, 255]),
            _ => {}
        }
        let size = u8::try_from(size).unwrap_or(u8::MAX);
        let smallest = size / 2 + 1;
        let mut quorum = match self.rng.below(100) {
            0..=69 => smallest,
            70..=84 => self.rng.range(u64::from(smallest), u64::from(size)) as u8,
            _ => size,
        };
        match broken {
            Some(9) => quorum = 0,
            Some(10) => quorum = size.saturating_add(1),
            Some(11) => quorum = size / 2,
            _ => {}
        }
        let interval = self.rng.pick(&[1u64, 2, 5, 10]);
        let mut total_steps = interval * self.rng.range(1, 3);
        if self.rng.chance(30) {
            total_steps += self.rng.range(1, interval);
        }
        let mut interval = interval.min(total_steps);
        let mut max_price = U256::from(self.rng.range(1, 50));
        let mut fee = U256::from(match self.rng.below(100) {
            0..=19 => 0,
            20..=84 => self.rng.range(1, 10),
            _ => self.rng.range(11, 300),
        });
        let mut token = if self.rng.chance(85) {
            self.stake_token
        } else {
            self.other_token
        };
        let needed =
            |p: U256, f: U256, steps: u64, every: u64| cost_bound(p, steps, every.max(1), f, size);
        let size_u = U256::from(size);
        let slack = match self.rng.below(10) {
            0..=2 => U256::ZERO,
            3..=6 => fee * size_u * U256::from(self.rng.below(3)) + U256::from(self.rng.below(3)),
            _ => U256::from(self.rng.below(500)),
        };
        let mut budget = needed(max_price, fee, total_steps, interval) + slack;
        // Amounts at the 96-bit bound: the budget, or a price that spends it all.
        if self.rng.chance(4) {
            self.labels.push(AMOUNT_AT_LIMIT);
            token = self.stake_token;
            match self.rng.below(3) {
                0 => budget = MAX_JOB_AMOUNT,
                1 => {
                    let fees = needed(U256::ZERO, fee, total_steps, interval);
                    max_price = (MAX_JOB_AMOUNT - fees) / U256::from(total_steps);
                    budget = MAX_JOB_AMOUNT;
                }
                _ => {
                    fee = MAX_JOB_AMOUNT;
                    budget = MAX_JOB_AMOUNT;
                }
            }
        }
        let mut deadline = if self.rng.chance(5) {
            at + MAX_DURATION
        } else {
            at + self.rng.range(200, MAX_DURATION)
        };
        let mut grace = if self.rng.chance(5) {
            MAX_GRACE
        } else {
            self.rng.range(0, MAX_GRACE)
        };
        let past = MAX_JOB_AMOUNT + U256::from(1);
        match broken {
            Some(0) => budget = U256::ZERO,
            Some(1) => max_price = U256::ZERO,
            Some(2) => budget = past,
            Some(3) => max_price = past,
            Some(19) => fee = past,
            Some(4) => total_steps = 0,
            Some(5) => interval = 0,
            Some(6) => interval = total_steps + 1,
            Some(12) => deadline = at.saturating_sub(self.rng.below(2)),
            Some(13) => budget = needed(max_price, fee, total_steps, interval) - U256::from(1),
            Some(14) => {
                // More than the sender has of the other token, but within every bound.
                token = self.other_token;
                budget = rich_other() * U256::from(2);
                max_price = U256::from(1);
            }
            Some(15) => {
                budget = U256::from(self.rng.range(OUTSIDER_ALLOWANCE + 1, 2 * OUTSIDER_FUNDS));
                max_price = U256::from(1);
                fee = U256::ZERO;
                token = self.stake_token;
            }
            Some(16) => deadline = at + MAX_DURATION + self.rng.range(1, 100),
            Some(17) => grace = MAX_GRACE + self.rng.range(1, 100),
            Some(18) => {
                token = match self.rng.below(3) {
                    0 => Address::ZERO,
                    1 => Address::repeat_byte(0x99),
                    _ => self.addr(OUTSIDER),
                }
            }
            _ => {}
        }
        if [budget, max_price, fee].iter().any(|a| *a > MAX_JOB_AMOUNT) {
            self.labels.push(AMOUNT_PAST_LIMIT);
        }
        let s = u64::from(size);
        if s < 2 {
            self.labels.push(COMMITTEE_BELOW_MIN);
        }
        if s > MAX_VERIFIERS as u64 {
            self.labels.push(COMMITTEE_ABOVE_MAX);
        }
        if s == 2 {
            self.labels.push(COMMITTEE_AT_MIN);
        }
        if s == MAX_VERIFIERS as u64 {
            self.labels.push(COMMITTEE_AT_MAX);
        }
        if s == available {
            self.labels.push(COMMITTEE_IS_POOL);
        }
        if s == available + 1 {
            self.labels.push(COMMITTEE_ABOVE_POOL);
        }
        if pooled {
            self.labels.push(POOLED_CLIENT);
        }
        if quorum > size {
            self.labels.push(QUORUM_ABOVE);
        } else if u64::from(quorum) * 2 <= s {
            self.labels.push(QUORUM_HALF);
        } else if quorum == size {
            self.labels.push(QUORUM_ALL);
        }
        let tx = ChainTx::CreateJob {
            token,
            budget,
            max_price_per_step: max_price,
            total_steps,
            checkpoint_interval: interval,
            spec_hash: self.rng.hash(),
            committee_size: size,
            quorum,
            verifier_fee: fee,
            deadline,
            grace,
        };
        (sender, tx.into())
    }

    fn assign(&mut self, m: &Escrow, at: u64, job_id: JobIdx, job: Option<Job>) -> (usize, Call) {
        let sender = self.client_or_other(&job);
        let min = U256::from(MIN_STAKE);
        if job.as_ref().is_some_and(|j| j.status == Status::Drawing) {
            self.labels.push(ASSIGN_BEFORE_DRAW);
        }
        // The epoch the assignment would end, if its provider is the one asked for again.
        let current = job
            .as_ref()
            .filter(|j| j.status == Status::Assigned)
            .map(|j| j.provider);
        let committee: Vec<Address> = job.as_ref().map_or(Vec::new(), |j| j.committee.clone());
        // Epochs `p` would hold elsewhere once this job's is ended.
        let elsewhere = |p: Address| {
            let live = m.stake_of(p).live_epochs;
            live - u32::from(current == Some(p) && live > 0)
        };
        // Bonded providers that can take the job, unless this call is to be broken.
        let ready: Vec<usize> = PROVIDERS
            .iter()
            .copied()
            .filter(|p| {
                let a = self.addr(*p);
                !committee.contains(&a)
                    && m.stake_of(a).bonded >= min * U256::from(elsewhere(a) + 1)
            })
            .collect();
        let members: Vec<usize> = committee.iter().filter_map(|a| self.actor_of(*a)).collect();
        let again = current.and_then(|p| self.actor_of(p));
        // Providers holding an epoch elsewhere: with stake enough for one more, or not.
        let busy: Vec<usize> = PROVIDERS
            .iter()
            .copied()
            .filter(|p| elsewhere(self.addr(*p)) > 0)
            .collect();
        let provider_actor = if !members.is_empty() && self.bad(8) {
            self.rng.pick(&members)
        } else if !busy.is_empty() && self.rng.chance(20) {
            self.rng.pick(&busy)
        } else if let Some(p) = again
            && self.rng.chance(40)
        {
            p
        } else if !ready.is_empty() && !self.bad(30) {
            self.rng.pick(&ready)
        } else if self.rng.chance(50) {
            self.rng.pick(&PROVIDERS)
        } else {
            self.actor()
        };
        let provider = self.addr(provider_actor);
        if committee.contains(&provider) {
            self.labels.push(MEMBER_AS_PROVIDER);
        } else if elsewhere(provider) > 0 {
            self.labels.push(HOLDS_ANOTHER);
        } else if current == Some(provider) {
            self.labels.push(SAME_PROVIDER_AGAIN);
        }
        let max = job
            .as_ref()
            .map_or(U256::from(50), |j| j.max_price_per_step);
        let mut price = match u64::try_from(max) {
            Ok(max_u) => U256::from(self.rng.range(1, max_u.max(1))),
            // A price at the 96-bit bound: the maximum, or a little under it.
            Err(_) => max - U256::from(self.rng.below(3)),
        };
        if self.bad(12) {
            price = if self.rng.chance(50) {
                max + U256::from(1)
            } else {
                U256::ZERO
            };
        }
        let expiry = if self.bad(8) {
            at.saturating_sub(1)
        } else {
            at + self.rng.range(0, 600)
        };
        let mut fields = BidFields {
            job_id,
            // What the provider read of the job; nothing for a job that does not exist.
            terms: m.terms_of(job_id).unwrap_or_default(),
            epoch: job.as_ref().map_or(1, |j| j.epoch + 1),
            provider,
            price_per_step: price,
            expiry,
        };
        let mut signer = provider_actor;
        if self.bad(10) {
            match self.rng.below(3) {
                0 => fields.epoch = fields.epoch.saturating_sub(1),
                1 => fields.price_per_step += U256::from(1),
                _ => signer = self.actor(),
            }
        } else if self.bad(6) {
            fields.terms = self.other_terms(m, job_id, job.as_ref());
            if self.labels.is_empty() {
                self.labels.push(WRONG_TERMS);
            }
        }
        let mut sig = fields.sign(&m.domain, &self.keys[signer]);
        if self.bad(8) {
            self.corrupt(&mut sig);
        }
        let tx = ChainTx::Assign {
            job_id,
            provider,
            price_per_step: price,
            bid_expiry: expiry,
            bid_signature: sig,
        };
        (sender, tx.into())
    }

    /// Terms a provider might have been shown instead of this job's: another job's, this
    /// job's with its committee reordered or one field changed, or nothing like them.
    fn other_terms(&mut self, m: &Escrow, job_id: JobIdx, job: Option<&Job>) -> B256 {
        let others: Vec<B256> = m
            .jobs()
            .iter()
            .enumerate()
            .filter(|(i, _)| U256::from(*i as u64 + 1) != job_id)
            .map(|(_, j)| j.terms)
            .collect();
        match (self.rng.below(3), job) {
            (0, _) if !others.is_empty() => self.rng.pick(&others),
            (1, Some(j)) => {
                let mut committee = j.committee.clone();
                let (grace, fee) = match self.rng.below(3) {
                    0 => {
                        committee.reverse();
                        (j.grace, j.verifier_fee)
                    }
                    1 => (j.grace + 1, j.verifier_fee),
                    _ => (j.grace, j.verifier_fee + U256::from(1)),
                };
                JobTerms {
                    client: j.client,
                    token: j.token,
                    budget: j.deposit,
                    max_price_per_step: j.max_price_per_step,
                    total_steps: j.total_steps,
                    checkpoint_interval: j.checkpoint_interval,
                    spec_hash: j.spec_hash,
                    committee: &committee,
                    quorum: j.quorum,
                    verifier_fee: fee,
                    deadline: j.deadline,
                    grace,
                }
                .hash()
            }
            _ => self.rng.hash(),
        }
    }

    /// Breaks a signature the way ecrecover refuses: a bad v, the high-s twin, or garbage.
    fn corrupt(&mut self, sig: &mut Sig65) {
        match self.rng.below(3) {
            0 => sig.0[64] = 29,
            1 => {
                let n = U256::from_be_slice(&alloy::hex!(
                    "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
                ));
                let s = U256::from_be_slice(&sig.0[32..64]);
                sig.0[32..64].copy_from_slice(&(n - s).to_be_bytes::<32>());
                sig.0[64] = if sig.0[64] == 27 { 28 } else { 27 };
            }
            _ => {
                let h = self.rng.hash();
                sig.0[..32].copy_from_slice(h.as_slice());
                sig.0[32..64].copy_from_slice(self.rng.hash().as_slice());
            }
        }
    }

    /// Signers for a decision of a committee: its members in random order, as many as the
    /// quorum mostly, sometimes all of them or a number in between.
    fn signers(&mut self, committee: &[Address], quorum: usize) -> Vec<usize> {
        let mut members: Vec<usize> = committee.iter().filter_map(|a| self.actor_of(*a)).collect();
        self.rng.shuffle(&mut members);
        let n = match self.rng.below(10) {
            0..=4 => quorum,
            5..=6 => members.len(),
            _ => self.rng.range(quorum as u64, members.len() as u64) as usize,
        };
        members.truncate(n);
        members
    }

    /// Votes over `fields` by `chosen`, broken now and then: one short, one signer twice, a
    /// signer from outside the committee, a corrupted signature, more than 32.
    fn votes(
        &mut self,
        m: &Escrow,
        fields: &VoteFields,
        mut chosen: Vec<usize>,
        committee: &[Address],
        outsiders: &[Address],
    ) -> Vec<Sig65> {
        let variant = if self.bad(40) { self.rng.below(5) } else { 5 };
        match variant {
            0 => {
                chosen.pop();
            }
            1 => {
                if let Some(first) = chosen.first().copied() {
                    chosen.push(first);
                }
            }
            2 => {
                // A signer who is not a member: a party to the job, or anyone.
                let stranger = outsiders
                    .iter()
                    .filter(|a| !committee.contains(a))
                    .find_map(|a| self.actor_of(*a))
                    .or_else(|| (0..ACTORS).find(|a| !committee.contains(&self.addr(*a))));
                if let Some(s) = stranger {
                    let at = self.rng.below(chosen.len() as u64 + 1) as usize;
                    chosen.insert(at, s);
                }
            }
            _ => {}
        }
        let mut sigs: Vec<Sig65> = chosen
            .iter()
            .map(|a| fields.sign(&m.domain, &self.keys[*a]))
            .collect();
        match variant {
            3 if !sigs.is_empty() => {
                let i = self.rng.below(sigs.len() as u64) as usize;
                self.corrupt(&mut sigs[i]);
            }
            4 => {
                let filler = sigs.first().copied().unwrap_or(Sig65([1; 65]));
                sigs.resize(MAX_VERIFIERS + 1, filler);
            }
            _ => {}
        }
        sigs
    }

    fn decide(
        &mut self,
        m: &Escrow,
        job_id: JobIdx,
        job: Option<Job>,
        accept: bool,
    ) -> (usize, Call) {
        let actor = self.actor();
        let pool_head: Vec<Address> = m.pool().iter().take(3).copied().collect();
        let (mut epoch, last, total, interval, committee, quorum, parties) = match &job {
            Some(j) if !j.committee.is_empty() => (
                j.epoch,
                j.last_accepted_step,
                j.total_steps,
                j.checkpoint_interval.max(1),
                j.committee.clone(),
                usize::from(j.quorum),
                vec![j.client, j.provider],
            ),
            Some(j) => (
                j.epoch,
                j.last_accepted_step,
                j.total_steps,
                j.checkpoint_interval.max(1),
                pool_head,
                usize::from(j.quorum),
                vec![j.client],
            ),
            None => (1, 0, 10, 5, pool_head, 2, Vec::new()),
        };
        if self.bad(10) {
            epoch = if self.rng.chance(60) {
                epoch.saturating_sub(1)
            } else {
                epoch + 1
            };
        }
        let next = (((last / interval) + 1) * interval).min(total);
        let mut step = if self.rng.chance(20) { total } else { next };
        if self.bad(30) {
            step = match self.rng.below(3) {
                0 => last,
                1 if last + 1 < total && interval > 1 => last + 1,
                _ => total + interval,
            };
        }
        let checkpoint_hash = self.rng.hash();
        let vote_accept = if self.bad(5) { !accept } else { accept };
        let fields = VoteFields {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            accept: vote_accept,
        };
        let chosen = self.signers(&committee, quorum);
        let sigs = self.votes(m, &fields, chosen, &committee, &parties);
        let tx = ChainTx::decision(accept, job_id, epoch, step, checkpoint_hash, sigs);
        (actor, tx.into())
    }

    /// A decision on an epoch the client ended: its next checkpoint within the decision
    /// window mostly, after it sometimes, beyond the next checkpoint now and then; after the
    /// head moved when it has; now and then a reject (which never takes this path).
    fn late_accept(&mut self, m: &Escrow, now: u64, late: &[(u64, u64)]) -> Planned {
        let accept = !self.rng.chance(10);
        // A reject of a record on a job with a live epoch meets the epoch check.
        let on_assigned: Vec<(u64, u64)> = late
            .iter()
            .copied()
            .filter(|(i, _)| m.jobs()[(*i - 1) as usize].status == Status::Assigned)
            .collect();
        let (i, epoch) = if !accept && !on_assigned.is_empty() {
            self.rng.pick(&on_assigned)
        } else {
            self.rng.pick(late)
        };
        let job_id = U256::from(i);
        let j = m.jobs()[(i - 1) as usize].clone();
        let c = m.closed_epoch(job_id, epoch);
        let left = c.window_end.saturating_sub(now);
        let advance = match self.rng.below(10) {
            0..=6 if left >= 1 => self.rng.range(1, left),
            7 | 8 => left + self.rng.range(1, 20),
            _ => 1,
        };
        let at = now + advance;
        let interval = j.checkpoint_interval.max(1);
        let next = (((c.step_at_end / interval) + 1) * interval).min(j.total_steps);
        let mut step = next;
        let beyond = next + interval;
        if next < j.total_steps && beyond <= j.total_steps && self.rng.chance(30) {
            step = beyond;
        }
        if !accept {
            self.labels.push(LATE_REJECT);
        } else if at > c.window_end {
            self.labels.push(LATE_AFTER_WINDOW);
        } else if j.last_accepted_step != c.step_at_end {
            self.labels.push(LATE_MOVED_ON);
        } else if step == beyond {
            self.labels.push(LATE_BEYOND);
        } else {
            self.labels.push(LATE_IN_WINDOW);
        }
        let checkpoint_hash = self.rng.hash();
        let fields = VoteFields {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            accept,
        };
        let chosen = self.signers(&j.committee, usize::from(j.quorum));
        let sigs = self.votes(m, &fields, chosen, &j.committee, &[j.client, c.provider]);
        let tx = ChainTx::decision(accept, job_id, epoch, step, checkpoint_hash, sigs);
        let actor = self.actor();
        self.one(advance, actor, tx.into())
    }
}

/// Situations only the outcome shows: who signed a decision that landed, whether a reject
/// slashed or paid fees, whether a late accept superseded an epoch or finished the job,
/// how a verifier's stake moved it in or out of the pool. `before` is the model before the
/// call.
fn outcome_labels(
    before: &Escrow,
    sender: Address,
    call: &Call,
    events: &[Event],
) -> Vec<&'static str> {
    let mut labels = Vec::new();
    let has = |f: &dyn Fn(&Event) -> bool| events.iter().any(f);
    match call {
        Call::Tx(ChainTx::AcceptCheckpoint {
            job_id,
            epoch,
            sigs,
            ..
        }) => {
            let Some(j) = before.job(*job_id) else {
                return labels;
            };
            let n = sigs.len();
            labels.push(if n == j.committee.len() {
                ACCEPT_BY_ALL
            } else if n == usize::from(j.quorum) {
                ACCEPT_BY_QUORUM
            } else {
                ACCEPT_BY_MORE
            });
            let live = j.status == Status::Assigned && *epoch == j.epoch;
            if !live {
                if has(&|e| {
                    matches!(
                        e,
                        Event::Job(ChainEvent::EpochEnded {
                            reason: EpochEndReason::Superseded,
                            ..
                        })
                    )
                }) {
                    labels.push(LATE_SUPERSEDES);
                }
                if has(&|e| matches!(e, Event::Job(ChainEvent::JobCompleted { .. }))) {
                    labels.push(LATE_COMPLETES);
                }
            }
        }
        Call::Tx(ChainTx::RejectCheckpoint { job_id, .. }) => {
            let Some(j) = before.job(*job_id) else {
                return labels;
            };
            labels.push(if has(&|e| matches!(e, Event::Slashed { .. })) {
                REJECT_UNANIMOUS
            } else {
                REJECT_BY_MAJORITY
            });
            let fees = events.iter().find_map(|e| match e {
                Event::Job(ChainEvent::CheckpointRejected { fees, .. }) => Some(*fees),
                _ => None,
            });
            match fees {
                Some(f) if !f.is_zero() => labels.push(REJECT_FEES_FROM_SLACK),
                Some(_) if !j.verifier_fee.is_zero() => labels.push(REJECT_NO_SLACK),
                Some(_) => labels.push(REJECT_ZERO_FEE),
                None => {}
            }
        }
        Call::RegisterVerifier { amount } => {
            let vs = before.verifier_stake_of(sender);
            labels.push(if vs.pooled {
                VERIFIER_TOPS_UP
            } else if vs.bonded + *amount >= before.min_verifier_stake {
                VERIFIER_JOINS
            } else {
                VERIFIER_STAYS_OUT
            });
            if !vs.unbonding.is_zero() {
                labels.push(VERIFIER_REGISTERS_UNBONDING);
            }
        }
        Call::RequestVerifierUnbond { amount } => {
            let vs = before.verifier_stake_of(sender);
            if vs.pooled {
                if vs.bonded - *amount >= before.min_verifier_stake {
                    labels.push(VERIFIER_STAYS);
                } else if before.pool().last() == Some(&sender) {
                    labels.push(VERIFIER_LEAVES_LAST);
                } else {
                    labels.push(VERIFIER_LEAVES_MIDDLE);
                }
            }
        }
        _ => {}
    }
    labels
}

// ---------------------------------------------------------------- runner

/// Outcomes per call kind, per situation set up and per event emitted: "ok" or the revert's
/// error name; "emitted" for events.
type Coverage = BTreeMap<(String, String), u64>;

/// A call in a failure report: its name and what identifies it, without the signatures.
fn describe(actor: usize, call: &Call) -> String {
    let what = match call {
        Call::Tx(ChainTx::CreateJob {
            token,
            budget,
            max_price_per_step,
            total_steps,
            checkpoint_interval,
            committee_size,
            quorum,
            verifier_fee,
            deadline,
            grace,
            ..
        }) => format!(
            "token {token}, budget {budget}, max price {max_price_per_step}, steps \
             {total_steps}/{checkpoint_interval}, committee {committee_size}, quorum {quorum}, \
             fee {verifier_fee}, deadline {deadline}, grace {grace}"
        ),
        Call::Tx(ChainTx::Assign {
            job_id,
            provider,
            price_per_step,
            bid_expiry,
            ..
        }) => format!(
            "job {job_id}, provider {provider}, price {price_per_step}, expiry {bid_expiry}"
        ),
        Call::Tx(
            ChainTx::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                sigs,
                ..
            }
            | ChainTx::RejectCheckpoint {
                job_id,
                epoch,
                step,
                sigs,
                ..
            },
        ) => format!(
            "job {job_id}, epoch {epoch}, step {step}, {} sigs",
            sigs.len()
        ),
        Call::Tx(
            ChainTx::DrawCommittee { job_id }
            | ChainTx::ReleaseProvider { job_id }
            | ChainTx::Expire { job_id }
            | ChainTx::Resign { job_id }
            | ChainTx::Settle { job_id },
        ) => format!("job {job_id}"),
        Call::Tx(ChainTx::Withdraw { token }) => format!("token {token}"),
        Call::Register { amount }
        | Call::RequestUnbond { amount }
        | Call::RegisterVerifier { amount }
        | Call::RequestVerifierUnbond { amount } => format!("amount {amount}"),
        Call::WithdrawStake | Call::WithdrawVerifierStake => String::new(),
    };
    format!("actor {actor}: {}({what})", call.name())
}

/// How a sequence ended.
enum Verdict {
    Agree,
    /// The model and the contract differ (or the model broke its own books): what, where,
    /// and the calls that led there.
    Disagree(String),
}

async fn run_sequence(w: &mut World, seed: u64, cov: &mut Coverage, bugs: Bugs) -> Result<Verdict> {
    let mut model = w.genesis.clone();
    model.bugs = bugs;
    let keys = w.keys.clone();
    let mut generator = Generator {
        rng: Rng(seed),
        keys: &keys,
        addrs: keys.iter().map(SigningKey::address).collect(),
        stake_token: w.stake_token,
        other_token: w.other_token,
        directed: false,
        labels: Vec::new(),
    };
    let mut now = w.now;
    let mut log: Vec<String> = Vec::new();
    let report = |log: &[String], what: String| {
        Verdict::Disagree(format!(
            "seed {seed}: {what}\ncalls so far (block: actor: call):\n  {}\n{}",
            log.join("\n  "),
            replay_hint(seed)
        ))
    };
    for index in 0..CALLS {
        // A panic in the generator is a failure of this seed too.
        let head = w.head;
        let p =
            catch_unwind(AssertUnwindSafe(|| generator.next(&model, now, head))).map_err(|_| {
                anyhow::anyhow!(
                    "seed {seed}, call {index}: the generator panicked\n{}",
                    replay_hint(seed)
                )
            })?;
        now += p.advance;
        if p.mine > 0 {
            let (number, hash) = w.mine_empty(p.mine).await?;
            model.record_block_hash(number, hash);
            log.push(format!("(mined {} empty blocks to {number})", p.mine));
        }
        let block = Block {
            number: w.head + 1,
            time: now,
        };
        let mut expected = Vec::new();
        let mut labels = Vec::new();
        for step in &p.steps {
            let sender = w.address(step.actor);
            log.push(format!(
                "block {} t={}: {}",
                block.number,
                block.time,
                describe(step.actor, &step.call)
            ));
            let before = model.clone();
            let Ok(result) =
                catch_unwind(AssertUnwindSafe(|| model.apply(&step.call, sender, block)))
            else {
                return Ok(report(
                    &log,
                    format!("the model panicked on {:?}", step.call),
                ));
            };
            let mut l = step.labels.clone();
            if let Ok(events) = &result {
                l.extend(outcome_labels(&before, sender, &step.call, events));
            }
            labels.push(l);
            expected.push(result);
        }
        let calls: Vec<(usize, Call)> = p.steps.iter().map(|s| (s.actor, s.call.clone())).collect();
        let mined = w.execute(&calls, now).await.with_context(|| {
            format!(
                "seed {seed}, call {index}: {:?}\n{}",
                log.last(),
                replay_hint(seed)
            )
        })?;
        model.record_block_hash(mined.number, mined.hash);
        for (k, step) in p.steps.iter().enumerate() {
            let got = &mined.results[k];
            let want = &expected[k];
            if got != want {
                return Ok(report(
                    &log,
                    format!(
                        "call {index} (block {}, tx {k}) from actor {} ({}): {:?}\n  contract: {got:?}\n  model:    {want:?}",
                        block.number,
                        step.actor,
                        w.address(step.actor),
                        step.call
                    ),
                ));
            }
            let outcome = match want {
                Ok(_) => "ok",
                Err(e) => e.name(),
            };
            *cov.entry((step.call.name().into(), outcome.into()))
                .or_default() += 1;
            for l in &labels[k] {
                *cov.entry(((*l).into(), outcome.into())).or_default() += 1;
            }
            if let Ok(events) = want {
                for e in events {
                    *cov.entry((event_name(e), "emitted".into())).or_default() += 1;
                }
            }
        }
        // The model conserves funds after every call (the chain is checked per sequence).
        // A planted bug may break them on purpose: then only the comparison counts.
        if bugs == Bugs::default() {
            for token in [w.stake_token, w.other_token] {
                let held = model.balance_of(token, w.escrow);
                if held != model.owed_recomputed(token) || held != model.owed(token) {
                    return Ok(report(
                        &log,
                        format!(
                            "call {index}: the model holds {held} of {token} but accounts for {} (running {})",
                            model.owed_recomputed(token),
                            model.owed(token)
                        ),
                    ));
                }
            }
        }
    }
    if let Some(diff) = w.compare_books(&model).await? {
        return Ok(report(
            &log,
            format!("books differ after {CALLS} blocks:\n  {diff}"),
        ));
    }
    Ok(Verdict::Agree)
}

async fn run_many(seeds: impl Iterator<Item = u64>) -> Result<Coverage> {
    let started = Instant::now();
    let mut w = start().await?;
    let setup = started.elapsed();
    let mut cov = Coverage::new();
    let mut n = 0;
    for seed in seeds {
        if let Verdict::Disagree(why) =
            run_sequence(&mut w, seed, &mut cov, Bugs::default()).await?
        {
            bail!("the model and the contract disagree\n{why}");
        }
        w.restore().await?;
        n += 1;
    }
    eprintln!(
        "{n} sequences, {} blocks, model and contract agree ({:.1} s, {:.1} s of it setting up)",
        n * CALLS,
        started.elapsed().as_secs_f64(),
        setup.as_secs_f64()
    );
    let mut by_call: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((call, outcome), count) in &cov {
        by_call
            .entry(call)
            .or_default()
            .push(format!("{outcome} {count}"));
    }
    for (call, outcomes) in by_call {
        eprintln!("  {call:<48} {}", outcomes.join(", "));
    }
    Ok(cov)
}

fn env_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v.parse().with_context(|| format!("{name}={v}"))?)),
        Err(_) => Ok(None),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_call_sequences_agree_with_the_contract() -> Result<()> {
    if let Some(seed) = env_u64("GPUCHAIN_DIFF_SEED")? {
        run_many(std::iter::once(seed)).await?;
        return Ok(());
    }
    let cov = run_many(1..=SEQUENCES).await?;
    // The generator reaches every branch it is meant to: a weight change that stops it
    // exercising one (or a model change that makes one unreachable) fails here.
    let seen: Vec<&str> = cov.keys().map(|(_, o)| o.as_str()).collect();
    let missing: Vec<&&str> = EXPECTED_ERRORS
        .iter()
        .filter(|e| !seen.contains(*e))
        .collect();
    ensure!(missing.is_empty(), "reverts never reached: {missing:?}");
    let missing: Vec<_> = EXPECTED_SITUATIONS
        .iter()
        .filter(|(s, o)| !cov.contains_key(&((*s).to_string(), (*o).to_string())))
        .collect();
    ensure!(missing.is_empty(), "situations never reached: {missing:?}");
    let missing: Vec<_> = EXPECTED_EVENTS
        .iter()
        .filter(|e| !cov.contains_key(&((**e).to_string(), "emitted".to_string())))
        .collect();
    ensure!(missing.is_empty(), "events never emitted: {missing:?}");
    for call in [
        "createJob",
        "drawCommittee",
        "register",
        "assign",
        "releaseProvider",
        "acceptCheckpoint",
        "rejectCheckpoint",
        "expire",
        "resign",
        "settle",
        "withdraw",
        "requestUnbond",
        "withdrawStake",
        "registerVerifier",
        "requestVerifierUnbond",
        "withdrawVerifierStake",
    ] {
        ensure!(
            cov.get(&(call.to_string(), "ok".to_string()))
                .copied()
                .unwrap_or(0)
                > 0,
            "{call} never succeeded"
        );
    }
    let accepted = cov
        .get(&("acceptCheckpoint".to_string(), "ok".to_string()))
        .copied()
        .unwrap_or(0);
    ensure!(accepted >= 50, "only {accepted} accepted checkpoints");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: thousands of sequences (GPUCHAIN_DIFF_SEQUENCES, default 5,000)"]
async fn many_random_call_sequences_agree_with_the_contract() -> Result<()> {
    let n = env_u64("GPUCHAIN_DIFF_SEQUENCES")?.unwrap_or(5_000);
    // Seeds past the normal test's, so the two never repeat each other.
    run_many(1_000_001..=1_000_000 + n).await?;
    Ok(())
}

/// The comparison is only worth what it catches: each of the model's planted bugs must make
/// some sequence disagree with the contract, within a few seeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_model_bugs_are_caught() -> Result<()> {
    let planted: [(&str, Bugs); 7] = [
        (
            "skip_epoch_check",
            Bugs {
                skip_epoch_check: true,
                ..Bugs::default()
            },
        ),
        (
            "refund_twice",
            Bugs {
                refund_twice: true,
                ..Bugs::default()
            },
        ),
        (
            "never_expire",
            Bugs {
                never_expire: true,
                ..Bugs::default()
            },
        ),
        (
            "free_money",
            Bugs {
                free_money: true,
                ..Bugs::default()
            },
        ),
        (
            "slash_without_unanimity",
            Bugs {
                slash_without_unanimity: true,
                ..Bugs::default()
            },
        ),
        (
            "reject_fees_without_slack",
            Bugs {
                reject_fees_without_slack: true,
                ..Bugs::default()
            },
        ),
        (
            "late_accept_after_window",
            Bugs {
                late_accept_after_window: true,
                ..Bugs::default()
            },
        ),
    ];
    let mut w = start().await?;
    let mut cov = Coverage::new();
    for (name, bugs) in planted {
        let mut caught = None;
        for seed in 1..=60 {
            let verdict = run_sequence(&mut w, seed, &mut cov, bugs).await?;
            w.restore().await?;
            if let Verdict::Disagree(why) = verdict {
                caught = Some((seed, why));
                break;
            }
        }
        let (seed, why) =
            caught.with_context(|| format!("the planted bug {name} went unnoticed"))?;
        let first: String = why
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(160)
            .collect();
        eprintln!("planted {name}: caught by seed {seed}: {first}");
    }
    Ok(())
}
