//! [`ChainClient`]: the escrow's calls and views for one signer, its nonce sequence, and the
//! checks before a transaction is sent (see the module docs of `chain` for why it is shaped so).
//! One file over our usual size on purpose: every call goes through the same nonce lock,
//! estimate, send and receipt path, and the escrow's calls are listed once, beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::consensus::TxEnvelope;
use alloy::eips::BlockId;
use alloy::eips::BlockNumberOrTag;
use alloy::eips::eip2718::Encodable2718;
use alloy::network::{Ethereum, EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::Provider;
use alloy::rpc::types::simulate::{SimBlock, SimulatePayload};
use alloy::rpc::types::{BlockOverrides, Filter, TransactionReceipt, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};
use alloy::transports::RpcError;
use alloy::transports::TransportError;
use gpuchain_protocol::chain::ChainEvent;
use gpuchain_protocol::chain::ChainTx;
use gpuchain_protocol::chain_record::ChainRecord;
use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::types::JobId;
use tokio::sync::{Mutex, OnceCell};

use super::create_job::{
    CreateJobTerms, EscrowLimits, TEST_USDC_DECIMALS, check_create_job, decode_revert_in_tokens,
};
use super::error::ChainError;
use super::revert::{RevertReason, decode_revert};
use super::rpc::{RetryPolicy, Rpc};
use super::summary::{JobMoney, summarize};
use crate::{JobEscrow, TestUSDC};

/// Where and how to talk to the chain.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    /// HTTP JSON-RPC endpoint, e.g. `http://127.0.0.1:8545`.
    pub rpc_url: String,
    /// The deployed `JobEscrow`.
    pub escrow: Address,
    /// The ERC-20 the node pays and stakes in (test USDC on testnets).
    pub token: Address,
    /// Longest wait for a receipt before [`ChainError::ReceiptTimeout`].
    pub receipt_timeout: Duration,
    /// How often to ask for a receipt (anvil mines at once: 50 ms is plenty).
    pub receipt_poll: Duration,
    pub retry: RetryPolicy,
}

impl ChainConfig {
    /// Defaults that suit anvil and a public testnet alike.
    pub fn new(rpc_url: impl Into<String>, escrow: Address, token: Address) -> Self {
        Self {
            rpc_url: rpc_url.into(),
            escrow,
            token,
            receipt_timeout: Duration::from_secs(60),
            receipt_poll: Duration::from_millis(50),
            retry: RetryPolicy::default(),
        }
    }
}

/// A provider's stake as the escrow records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StakeInfo {
    /// Backs live epochs (the escrow's minimum stake each); the rest may unbond.
    pub bonded: U256,
    /// Requested out: no longer slashable, withdrawable from `unbond_at` on.
    pub unbonding: U256,
    /// 0 when nothing is unbonding; otherwise when `unbonding` can be withdrawn.
    pub unbond_at: u64,
    /// Epochs the provider holds right now, across jobs.
    pub live_epochs: u32,
}

/// A verifier's stake as `verifierStakeOf` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifierStakeInfo {
    /// Never slashed nor reserved: it buys the seat in the pool committees are drawn from.
    pub bonded: U256,
    /// Requested out, withdrawable from `unbond_at` on.
    pub unbonding: U256,
    /// 0 when nothing is unbonding.
    pub unbond_at: u64,
    /// In the pool (`bonded ≥ minVerifierStake`): committees may be drawn from it.
    pub pooled: bool,
}

/// A transaction handed to the RPC, not yet known to be mined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingTx {
    pub call: &'static str,
    pub hash: B256,
    pub nonce: u64,
}

/// A mined, successful transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    pub call: &'static str,
    pub hash: B256,
    pub block_number: u64,
    pub gas_used: u64,
    /// What the sender paid for gas, in wei (`gas_used × effective_gas_price`), including
    /// the `approve` that `createJob` and `register` send first when they need one.
    pub fee: U256,
    /// For `createJob`: the new job's id, from its `JobCreated` log.
    pub job_id: Option<JobId>,
}

/// Signs and sends the escrow's transactions from one key, and reads its views. Cheap to
/// clone; clones share the nonce sequence (see the module docs).
#[derive(Debug, Clone)]
pub struct ChainClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    rpc: Rpc,
    wallet: EthereumWallet,
    address: Address,
    chain_id: u64,
    escrow: Address,
    token: Address,
    receipt_timeout: Duration,
    receipt_poll: Duration,
    /// The next nonce to use; `None` = read it from the chain before the next send.
    nonce: Mutex<Option<u64>>,
    /// Held across approve + pull (createJob, register) so that two of them from this key
    /// cannot spend each other's allowance.
    allowance: Mutex<()>,
    /// The escrow's immutables, read once: they cannot change after deployment.
    limits: OnceCell<EscrowLimits>,
    min_stake: OnceCell<U256>,
}

/// Gas estimates are exact for the state they ran against; the margin covers a state that
/// moved a little (another checkpoint accepted first, a warm slot gone cold).
fn with_margin(gas: u64) -> u64 {
    gas.saturating_add(gas / 5).saturating_add(10_000)
}

fn message_has(err: &TransportError, needles: &[&str]) -> bool {
    match err {
        RpcError::ErrorResp(p) => {
            let m = p.message.to_ascii_lowercase();
            needles.iter().any(|n| m.contains(n))
        }
        _ => false,
    }
}

fn sigs(sigs: &[gpuchain_protocol::Sig65]) -> Vec<Bytes> {
    sigs.iter().map(|s| Bytes::copy_from_slice(&s.0)).collect()
}

/// The escrow function a [`ChainTx`] calls, and its calldata.
fn encode(tx: &ChainTx) -> (&'static str, Vec<u8>) {
    match tx {
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
        } => (
            "createJob",
            JobEscrow::createJobCall {
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
        ),
        ChainTx::DrawCommittee { job_id } => (
            "drawCommittee",
            JobEscrow::drawCommitteeCall { jobId: *job_id }.abi_encode(),
        ),
        ChainTx::Assign {
            job_id,
            provider,
            price_per_step,
            bid_expiry,
            bid_signature,
        } => (
            "assign",
            JobEscrow::assignCall {
                jobId: *job_id,
                provider: *provider,
                pricePerStep: *price_per_step,
                bidExpiry: *bid_expiry,
                bidSig: Bytes::copy_from_slice(&bid_signature.0),
            }
            .abi_encode(),
        ),
        ChainTx::ReleaseProvider { job_id } => (
            "releaseProvider",
            JobEscrow::releaseProviderCall { jobId: *job_id }.abi_encode(),
        ),
        ChainTx::AcceptCheckpoint {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            sigs: s,
        } => (
            "acceptCheckpoint",
            JobEscrow::acceptCheckpointCall {
                jobId: *job_id,
                epoch: *epoch,
                step: *step,
                checkpointHash: *checkpoint_hash,
                sigs: sigs(s),
            }
            .abi_encode(),
        ),
        ChainTx::RejectCheckpoint {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            sigs: s,
        } => (
            "rejectCheckpoint",
            JobEscrow::rejectCheckpointCall {
                jobId: *job_id,
                epoch: *epoch,
                step: *step,
                checkpointHash: *checkpoint_hash,
                sigs: sigs(s),
            }
            .abi_encode(),
        ),
        ChainTx::Expire { job_id } => (
            "expire",
            JobEscrow::expireCall { jobId: *job_id }.abi_encode(),
        ),
        ChainTx::Resign { job_id } => (
            "resign",
            JobEscrow::resignCall { jobId: *job_id }.abi_encode(),
        ),
        ChainTx::Settle { job_id } => (
            "settle",
            JobEscrow::settleCall { jobId: *job_id }.abi_encode(),
        ),
        ChainTx::Withdraw { token } => (
            "withdraw",
            JobEscrow::withdrawCall { token: *token }.abi_encode(),
        ),
    }
}

impl ChainClient {
    /// Connects, checks that the RPC answers and that the escrow and token exist on its chain.
    pub async fn connect(
        config: ChainConfig,
        signer: PrivateKeySigner,
    ) -> Result<Self, ChainError> {
        let rpc = Rpc::new(&config.rpc_url, config.retry)?;
        let chain_id = rpc
            .call("eth_chainId", || async {
                rpc.provider.get_chain_id().await
            })
            .await?;
        for (what, address) in [("escrow", config.escrow), ("token", config.token)] {
            let code = rpc
                .call("eth_getCode", || async {
                    rpc.provider.get_code_at(address).latest().await
                })
                .await?;
            if code.is_empty() {
                return Err(ChainError::NoContract {
                    what,
                    address,
                    chain_id,
                    url: rpc.url.clone(),
                });
            }
        }
        let address = signer.address();
        Ok(Self {
            inner: Arc::new(Inner {
                rpc,
                wallet: EthereumWallet::from(signer),
                address,
                chain_id,
                escrow: config.escrow,
                token: config.token,
                receipt_timeout: config.receipt_timeout,
                receipt_poll: config.receipt_poll,
                nonce: Mutex::new(None),
                allowance: Mutex::new(()),
                limits: OnceCell::new(),
                min_stake: OnceCell::new(),
            }),
        })
    }

    /// [`connect`](Self::connect) paying in `token`, or in the escrow's stake token when none
    /// is given (read from the escrow first).
    pub async fn connect_paying_in(
        rpc_url: &str,
        escrow: Address,
        token: Option<Address>,
        signer: PrivateKeySigner,
    ) -> Result<Self, ChainError> {
        let token = match token {
            Some(t) => t,
            None => {
                // Any deployed contract passes the code check until the token is known: the
                // escrow itself.
                let probe =
                    Self::connect(ChainConfig::new(rpc_url, escrow, escrow), signer.clone())
                        .await?;
                probe.stake_token().await?
            }
        };
        Self::connect(ChainConfig::new(rpc_url, escrow, token), signer).await
    }

    /// The signer's address.
    pub fn address(&self) -> Address {
        self.inner.address
    }

    pub fn chain_id(&self) -> u64 {
        self.inner.chain_id
    }

    pub fn escrow(&self) -> Address {
        self.inner.escrow
    }

    pub fn token(&self) -> Address {
        self.inner.token
    }

    pub fn rpc_url(&self) -> &str {
        &self.inner.rpc.url
    }

    /// The EIP-712 domain the protocol machines sign `Bid`s and `Vote`s in.
    pub fn domain(&self) -> EscrowDomain {
        EscrowDomain {
            chain_id: self.inner.chain_id,
            escrow: self.inner.escrow,
        }
    }

    pub(crate) fn rpc(&self) -> &Rpc {
        &self.inner.rpc
    }

    // ------------------------------------------------------------------ transactions

    /// Executes one of the protocol's transactions and waits for it to be mined.
    /// `CreateJob` first approves the budget when the allowance falls short.
    ///
    /// Nothing is sent for a `CreateJob` the escrow would refuse: every precondition is
    /// checked first ([`Self::preflight_create_job`]: the Rust mirror of the contract's
    /// checks, then a simulation of approve + createJob), and the approval is for exactly
    /// the budget.
    pub async fn submit(&self, tx: &ChainTx) -> Result<TxOutcome, ChainError> {
        if let ChainTx::CreateJob { token, budget, .. } = tx {
            let _guard = self.inner.allowance.lock().await;
            self.preflight_create_job(tx).await?;
            let approve_fee = self.ensure_allowance(*token, *budget).await?;
            let (call, data) = encode(tx);
            let mut outcome = self.transact(call, self.inner.escrow, data).await?;
            outcome.fee += approve_fee;
            outcome.job_id = self.created_job_id(outcome.hash).await?;
            return Ok(outcome);
        }
        let pending = self.send_escrow_tx(tx).await?;
        self.wait(pending).await
    }

    /// [`Self::submit`] for a transaction the machines send on their own, riding out an RPC
    /// outage of up to what `patience` allows: a send that could not reach the RPC is made
    /// again once it answers, and a transaction already handed over is waited for, never
    /// sent a second time. Only what the escrow refuses, or an outage that outlasts
    /// `patience`, comes back as an error.
    ///
    /// `CreateJob` is not retried: the user who asked for it hears of the outage and decides
    /// (a second `createJob` would escrow a second budget).
    ///
    /// Before this, a failure to reach the RPC went straight back to the machines, which
    /// take a failed transaction for a refusal: a client whose `assign` met an outage
    /// dropped every bid it had, and its providers bid once per epoch, so it re-offered the
    /// job forever.
    pub async fn submit_through_outage(
        &self,
        tx: &ChainTx,
        patience: &RetryPolicy,
    ) -> Result<TxOutcome, ChainError> {
        if let ChainTx::CreateJob { .. } = tx {
            return self.submit(tx).await;
        }
        let call = encode(tx).0;
        let pending = through_outage(patience, call, || self.send_escrow_tx(tx)).await?;
        through_outage(patience, pending.call, || self.wait(pending)).await
    }

    /// Sends one of the protocol's escrow calls other than `CreateJob`.
    ///
    /// `DrawCommittee` is estimated against the pending block: the draw is refused
    /// (`SeedNotMined`) in the job's creation block, and an estimate against the latest
    /// block runs with that block's number, so right after the creation it would refuse a
    /// draw that succeeds in the block the transaction is mined in.
    async fn send_escrow_tx(&self, tx: &ChainTx) -> Result<PendingTx, ChainError> {
        let (call, data) = encode(tx);
        let estimate_at = match tx {
            ChainTx::DrawCommittee { .. } => BlockId::pending(),
            _ => BlockId::latest(),
        };
        self.send_estimated_at(call, self.inner.escrow, data, estimate_at)
            .await
    }

    /// Stakes `amount` of the escrow's stake token (approving it first when needed).
    pub async fn register(&self, amount: U256) -> Result<TxOutcome, ChainError> {
        let _guard = self.inner.allowance.lock().await;
        let stake_token = self
            .inner
            .rpc
            .view(
                "stakeToken",
                self.inner.escrow,
                JobEscrow::stakeTokenCall {},
            )
            .await?;
        let approve_fee = self.ensure_allowance(stake_token, amount).await?;
        let data = JobEscrow::registerCall { amount }.abi_encode();
        let mut outcome = self.transact("register", self.inner.escrow, data).await?;
        outcome.fee += approve_fee;
        Ok(outcome)
    }

    /// Starts the unbonding delay for `amount` of the caller's free stake (what no live epoch
    /// reserves); it is withdrawable with [`ChainClient::withdraw_stake`] after the delay.
    pub async fn request_unbond(&self, amount: U256) -> Result<TxOutcome, ChainError> {
        let data = JobEscrow::requestUnbondCall { amount }.abi_encode();
        self.transact("requestUnbond", self.inner.escrow, data)
            .await
    }

    /// Pays out the caller's unbonding stake once its delay has passed.
    pub async fn withdraw_stake(&self) -> Result<TxOutcome, ChainError> {
        let data = JobEscrow::withdrawStakeCall {}.abi_encode();
        self.transact("withdrawStake", self.inner.escrow, data)
            .await
    }

    /// Stakes `amount` of the escrow's stake token as a verifier (approving it first when
    /// needed); once its bonded stake reaches `minVerifierStake` the account is in the pool
    /// that committees are drawn from.
    pub async fn register_verifier(&self, amount: U256) -> Result<TxOutcome, ChainError> {
        let _guard = self.inner.allowance.lock().await;
        let stake_token = self.stake_token().await?;
        let approve_fee = self.ensure_allowance(stake_token, amount).await?;
        let data = JobEscrow::registerVerifierCall { amount }.abi_encode();
        let mut outcome = self
            .transact("registerVerifier", self.inner.escrow, data)
            .await?;
        outcome.fee += approve_fee;
        Ok(outcome)
    }

    /// Starts the unbonding delay for `amount` of the caller's verifier stake; below the
    /// minimum it leaves the pool (committees it already sits on keep it).
    pub async fn request_verifier_unbond(&self, amount: U256) -> Result<TxOutcome, ChainError> {
        let data = JobEscrow::requestVerifierUnbondCall { amount }.abi_encode();
        self.transact("requestVerifierUnbond", self.inner.escrow, data)
            .await
    }

    /// Pays out the caller's unbonding verifier stake once its delay has passed.
    pub async fn withdraw_verifier_stake(&self) -> Result<TxOutcome, ChainError> {
        let data = JobEscrow::withdrawVerifierStakeCall {}.abi_encode();
        self.transact("withdrawVerifierStake", self.inner.escrow, data)
            .await
    }

    /// Mints `amount` of the configured token to `to`: only test USDC allows this.
    pub async fn mint(&self, to: Address, amount: U256) -> Result<TxOutcome, ChainError> {
        let data = TestUSDC::mintCall { to, amount }.abi_encode();
        self.transact("mint", self.inner.token, data).await
    }

    /// Sends a call and waits for its receipt.
    pub async fn transact(
        &self,
        call: &'static str,
        to: Address,
        data: Vec<u8>,
    ) -> Result<TxOutcome, ChainError> {
        let pending = self.send(call, to, data).await?;
        self.wait(pending).await
    }

    /// Estimates, signs and hands a call to the RPC under the next nonce, without waiting
    /// for it to be mined (several can be in flight; see the module docs).
    pub async fn send(
        &self,
        call: &'static str,
        to: Address,
        data: Vec<u8>,
    ) -> Result<PendingTx, ChainError> {
        self.send_estimated_at(call, to, data, BlockId::latest())
            .await
    }

    /// [`Self::send`], with the gas estimated against `estimate_at`.
    async fn send_estimated_at(
        &self,
        call: &'static str,
        to: Address,
        data: Vec<u8>,
        estimate_at: BlockId,
    ) -> Result<PendingTx, ChainError> {
        let rpc = &self.inner.rpc;
        let from = self.inner.address;
        let base = TransactionRequest::default()
            .from(from)
            .to(to)
            .input(Bytes::from(data).into());

        // Without fee fields the estimate does not check the balance, so a revert is
        // reported as a revert even from an empty account.
        let gas = match rpc
            .raw(|| rpc.provider.estimate_gas(base.clone()).block(estimate_at))
            .await
        {
            Ok(gas) => with_margin(gas),
            Err(e) if message_has(&e, &["insufficient funds"]) => {
                // No estimate to go by: a plain transfer's gas is the least it can cost.
                let least = match rpc.raw(|| rpc.provider.estimate_eip1559_fees()).await {
                    Ok(fees) => U256::from(21_000u64) * U256::from(fees.max_fee_per_gas),
                    Err(_) => U256::ZERO,
                };
                return Err(self.unfunded(call, least).await);
            }
            Err(e) => return Err(rpc.error(call, e)),
        };
        let fees = rpc
            .call("eth_feeHistory", || rpc.provider.estimate_eip1559_fees())
            .await?;
        let needed = U256::from(gas) * U256::from(fees.max_fee_per_gas);
        let balance = self.eth_balance(from).await?;
        if balance < needed {
            return Err(ChainError::Unfunded {
                address: from,
                call,
                balance,
                needed,
            });
        }
        let request = base
            .with_chain_id(self.inner.chain_id)
            .with_gas_limit(gas)
            .with_max_fee_per_gas(fees.max_fee_per_gas)
            .with_max_priority_fee_per_gas(fees.max_priority_fee_per_gas);

        let mut nonce_slot = self.inner.nonce.lock().await;
        // One resync is allowed per send: after it, a second nonce complaint is a real error.
        let mut resynced = false;
        loop {
            let nonce = match *nonce_slot {
                Some(n) => n,
                None => {
                    resynced = true;
                    rpc.call("eth_getTransactionCount", || {
                        rpc.provider.get_transaction_count(from).pending()
                    })
                    .await?
                }
            };
            let envelope: TxEnvelope = NetworkTransactionBuilder::<Ethereum>::build(
                request.clone().with_nonce(nonce),
                &self.inner.wallet,
            )
            .await
            .map_err(|e| ChainError::Signing {
                call,
                detail: e.to_string(),
            })?;
            let hash = *envelope.tx_hash();
            let raw = envelope.encoded_2718();
            match rpc
                .raw(|| async { rpc.provider.send_raw_transaction(&raw).await.map(|_| ()) })
                .await
            {
                Ok(()) => {
                    *nonce_slot = Some(nonce + 1);
                    tracing::debug!(call, %hash, nonce, "transaction sent");
                    return Ok(PendingTx { call, hash, nonce });
                }
                // A retried send whose first attempt did reach the node.
                Err(e)
                    if message_has(&e, &["already known", "known transaction"])
                        || (message_has(&e, &["nonce too low"]) && self.is_known(hash).await) =>
                {
                    *nonce_slot = Some(nonce + 1);
                    return Ok(PendingTx { call, hash, nonce });
                }
                Err(e)
                    if !resynced
                        && message_has(&e, &["nonce too low", "nonce too high", "underpriced"]) =>
                {
                    tracing::info!(call, nonce, error = %e, "nonce out of step, re-reading it");
                    *nonce_slot = None;
                }
                Err(e) => {
                    *nonce_slot = None;
                    if message_has(&e, &["insufficient funds"]) {
                        drop(nonce_slot);
                        return Err(self.unfunded(call, needed).await);
                    }
                    return Err(rpc.error(call, e));
                }
            }
        }
    }

    /// Waits for a sent transaction's receipt; a reverted one is replayed to name the reason.
    pub async fn wait(&self, pending: PendingTx) -> Result<TxOutcome, ChainError> {
        let start = Instant::now();
        let receipt = loop {
            let got = self
                .inner
                .rpc
                .call("eth_getTransactionReceipt", || {
                    self.inner
                        .rpc
                        .provider
                        .get_transaction_receipt(pending.hash)
                })
                .await?;
            if let Some(r) = got {
                break r;
            }
            let waited = start.elapsed();
            if waited >= self.inner.receipt_timeout {
                // The transaction may be gone, leaving a hole in the nonce sequence.
                *self.inner.nonce.lock().await = None;
                return Err(ChainError::ReceiptTimeout {
                    call: pending.call,
                    hash: pending.hash,
                    waited,
                });
            }
            tokio::time::sleep(self.inner.receipt_poll).await;
        };
        let block_number = receipt.block_number.unwrap_or_default();
        if !receipt.status() {
            return Err(ChainError::Reverted {
                call: pending.call,
                reason: self.replay_revert(&pending, &receipt).await,
                tx: Some(pending.hash),
            });
        }
        Ok(TxOutcome {
            call: pending.call,
            hash: pending.hash,
            block_number,
            gas_used: receipt.gas_used,
            fee: U256::from(receipt.gas_used) * U256::from(receipt.effective_gas_price),
            job_id: None,
        })
    }

    // ------------------------------------------------------------------------ views

    /// The job as `getJob` returns it (`UnknownJob` reverts are reported as such).
    pub async fn job(&self, job_id: JobId) -> Result<JobEscrow::JobView, ChainError> {
        self.inner
            .rpc
            .view(
                "getJob",
                self.inner.escrow,
                JobEscrow::getJobCall { jobId: job_id },
            )
            .await
    }

    /// The token providers stake in (test USDC on testnets): the default payment token.
    pub async fn stake_token(&self) -> Result<Address, ChainError> {
        self.inner
            .rpc
            .view(
                "stakeToken",
                self.inner.escrow,
                JobEscrow::stakeTokenCall {},
            )
            .await
    }

    /// How far ahead a job's deadline and how long its grace may be (`maxDuration`,
    /// `maxGrace`).
    pub async fn escrow_limits(&self) -> Result<EscrowLimits, ChainError> {
        let rpc = &self.inner.rpc;
        let escrow = self.inner.escrow;
        self.inner
            .limits
            .get_or_try_init(|| async {
                Ok(EscrowLimits {
                    max_duration: rpc
                        .view("maxDuration", escrow, JobEscrow::maxDurationCall {})
                        .await?,
                    max_grace: rpc
                        .view("maxGrace", escrow, JobEscrow::maxGraceCall {})
                        .await?,
                })
            })
            .await
            .copied()
    }

    /// The stake each live epoch reserves (`minStake`), also what one reject slashes.
    pub async fn min_stake(&self) -> Result<U256, ChainError> {
        let rpc = &self.inner.rpc;
        self.inner
            .min_stake
            .get_or_try_init(|| rpc.view("minStake", self.inner.escrow, JobEscrow::minStakeCall {}))
            .await
            .copied()
    }

    /// What `account` can `withdraw` in `token`.
    pub async fn withdrawable(&self, account: Address, token: Address) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .view(
                "withdrawable",
                self.inner.escrow,
                JobEscrow::withdrawableCall { account, token },
            )
            .await
    }

    pub async fn stake_of(&self, provider: Address) -> Result<StakeInfo, ChainError> {
        let r = self
            .inner
            .rpc
            .view(
                "stakeOf",
                self.inner.escrow,
                JobEscrow::stakeOfCall { provider },
            )
            .await?;
        Ok(StakeInfo {
            bonded: r.bonded,
            unbonding: r.unbonding,
            unbond_at: r.unbondAt,
            live_epochs: r.liveEpochs,
        })
    }

    pub async fn verifier_stake_of(
        &self,
        verifier: Address,
    ) -> Result<VerifierStakeInfo, ChainError> {
        let r = self
            .inner
            .rpc
            .view(
                "verifierStakeOf",
                self.inner.escrow,
                JobEscrow::verifierStakeOfCall { verifier },
            )
            .await?;
        Ok(VerifierStakeInfo {
            bonded: r.bonded,
            unbonding: r.unbonding,
            unbond_at: r.unbondAt,
            pooled: r.pooled,
        })
    }

    /// How many verifiers a committee for `client`'s job can be drawn from: the pool, less
    /// the client itself when it is pooled (the escrow never draws a job's client).
    pub async fn available_verifiers(&self, client: Address) -> Result<u64, ChainError> {
        let size: U256 = self
            .inner
            .rpc
            .view("poolSize", self.inner.escrow, JobEscrow::poolSizeCall {})
            .await?;
        let pooled = self.verifier_stake_of(client).await?.pooled;
        let size = u64::try_from(size).unwrap_or(u64::MAX);
        Ok(size.saturating_sub(u64::from(pooled)))
    }

    /// The escrow's pool, in its order (what committees are drawn from).
    pub async fn verifier_pool(&self) -> Result<Vec<Address>, ChainError> {
        let rpc = &self.inner.rpc;
        let size: U256 = rpc
            .view("poolSize", self.inner.escrow, JobEscrow::poolSizeCall {})
            .await?;
        let mut pool = Vec::new();
        for index in 0..u64::try_from(size).unwrap_or(0) {
            pool.push(
                rpc.view(
                    "poolAt",
                    self.inner.escrow,
                    JobEscrow::poolAtCall {
                        index: U256::from(index),
                    },
                )
                .await?,
            );
        }
        Ok(pool)
    }

    /// The minimum verifier stake that puts an account in the pool.
    pub async fn min_verifier_stake(&self) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .view(
                "minVerifierStake",
                self.inner.escrow,
                JobEscrow::minVerifierStakeCall {},
            )
            .await
    }

    /// Slashed stake the escrow has burned so far (`burned`): held by it, owed to nobody.
    pub async fn burned(&self) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .view("burned", self.inner.escrow, JobEscrow::burnedCall {})
            .await
    }

    /// `account`'s balance of the configured token.
    pub async fn token_balance(&self, account: Address) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .view(
                "balanceOf",
                self.inner.token,
                TestUSDC::balanceOfCall { account },
            )
            .await
    }

    /// What `owner` has allowed the escrow to take of the configured token.
    pub async fn allowance(&self, owner: Address) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .view(
                "allowance",
                self.inner.token,
                TestUSDC::allowanceCall {
                    owner,
                    spender: self.inner.escrow,
                },
            )
            .await
    }

    /// `account`'s ETH balance in wei.
    pub async fn eth_balance(&self, account: Address) -> Result<U256, ChainError> {
        self.inner
            .rpc
            .call("eth_getBalance", || {
                self.inner.rpc.provider.get_balance(account).latest()
            })
            .await
    }

    pub async fn block_number(&self) -> Result<u64, ChainError> {
        self.inner
            .rpc
            .call("eth_blockNumber", || {
                self.inner.rpc.provider.get_block_number()
            })
            .await
    }

    /// The latest block's timestamp: bid expiries and deadlines are in block time.
    pub async fn block_time(&self) -> Result<u64, ChainError> {
        let number = self.block_number().await?;
        match self.inner.rpc.header(number).await? {
            Some((_, _, time)) => Ok(time),
            None => Err(ChainError::Unexpected {
                url: self.inner.rpc.url.clone(),
                detail: format!("latest block {number} not found"),
            }),
        }
    }

    /// The decimals of `token` (its ERC-20 `decimals()`), for messages; test USDC's 6 when
    /// the token does not say.
    pub async fn token_decimals(&self, token: Address) -> u8 {
        self.inner
            .rpc
            .view("decimals", token, TestUSDC::decimalsCall {})
            .await
            .unwrap_or(TEST_USDC_DECIMALS)
    }

    /// Checks a `CreateJob` without sending anything: first every precondition of the
    /// contract ([`check_create_job`], against the chain's block time), then the calls
    /// themselves, simulated on the latest state from this client's address. When the
    /// allowance does not cover the budget yet, `eth_simulateV1` runs `approve(budget)` and
    /// `createJob` in sequence in one simulated block, so the pull of the budget, the token
    /// balance and every contract check are exercised with the approval in effect, and
    /// nothing is signed. With the allowance already in place a plain `eth_call` of
    /// `createJob` does the same. A revert comes back as [`ChainError::Reverted`] with
    /// `tx: None` and its amounts in tokens.
    ///
    /// An RPC without `eth_simulateV1` (it is recent; anvil has it since 1.x) falls back to
    /// the Rust checks alone, with a warning: `eth_call` with a state override of the
    /// allowance slot would need the token's storage layout, which a generic ERC-20 does
    /// not promise.
    pub async fn preflight_create_job(&self, tx: &ChainTx) -> Result<(), ChainError> {
        let ChainTx::CreateJob {
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
        } = tx
        else {
            return Ok(());
        };
        let decimals = self.token_decimals(*token).await;
        let now = self.block_time().await?;
        let limits = self.escrow_limits().await?;
        let available = self.available_verifiers(self.inner.address).await?;
        check_create_job(&CreateJobTerms {
            token: Some(*token),
            budget: *budget,
            max_price_per_step: *max_price_per_step,
            total_steps: *total_steps,
            checkpoint_interval: *checkpoint_interval,
            committee_size: *committee_size,
            quorum: *quorum,
            verifier_fee: *verifier_fee,
            deadline: *deadline,
            now,
            grace: *grace,
            available_verifiers: Some(available),
            limits: Some(limits),
            decimals,
        })?;

        let rpc = &self.inner.rpc;
        let from = self.inner.address;
        let escrow = self.inner.escrow;
        let (_, data) = encode(tx);
        let create = TransactionRequest::default()
            .from(from)
            .to(escrow)
            .input(Bytes::from(data).into());
        let allowance = rpc
            .view(
                "allowance",
                *token,
                TestUSDC::allowanceCall {
                    owner: from,
                    spender: escrow,
                },
            )
            .await?;
        if allowance >= *budget {
            return match rpc
                .raw(|| rpc.provider.call(create.clone()).block(BlockId::latest()))
                .await
            {
                Ok(_) => Ok(()),
                Err(RpcError::ErrorResp(p)) if p.as_revert_data().is_some() => {
                    Err(ChainError::Reverted {
                        call: "createJob",
                        reason: decode_revert_in_tokens(
                            &p.as_revert_data().unwrap_or_default(),
                            decimals,
                        ),
                        tx: None,
                    })
                }
                Err(e) => Err(rpc.error("createJob", e)),
            };
        }
        let approve = TransactionRequest::default().from(from).to(*token).input(
            Bytes::from(
                TestUSDC::approveCall {
                    spender: escrow,
                    value: *budget,
                }
                .abi_encode(),
            )
            .into(),
        );
        // anvil simulates on the latest block's own timestamp; the real block comes later,
        // so simulate at least one second on (the deadline check is `deadline > now`).
        let overrides = BlockOverrides {
            time: Some(now.saturating_add(1)),
            ..Default::default()
        };
        let payload = SimulatePayload::default().extend(
            SimBlock::default()
                .with_block_overrides(overrides)
                .call(approve)
                .call(create),
        );
        let blocks = match rpc.raw(|| rpc.provider.simulate(&payload).latest()).await {
            Ok(blocks) => blocks,
            Err(RpcError::ErrorResp(p)) if p.code == -32601 || p.code == -32602 => {
                tracing::warn!(url = %rpc.url, error = %p.message, "the RPC cannot simulate (eth_simulateV1); createJob was checked by the escrow's rules only");
                return Ok(());
            }
            Err(e) => return Err(rpc.error("eth_simulateV1", e)),
        };
        let calls = blocks
            .first()
            .map(|b| b.calls.as_slice())
            .unwrap_or_default();
        if calls.len() != 2 {
            return Err(ChainError::Unexpected {
                url: rpc.url.clone(),
                detail: format!(
                    "eth_simulateV1 returned {} call results for approve + createJob",
                    calls.len()
                ),
            });
        }
        for (call, result) in ["approve", "createJob"].into_iter().zip(calls) {
            if !result.status {
                // Geth puts the revert data in `error.data`; anvil leaves that empty and
                // returns it as the call's `returnData`.
                let data = result
                    .error
                    .as_ref()
                    .and_then(|e| e.data.clone())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| result.return_data.clone());
                let reason = match (&result.error, data.is_empty()) {
                    (_, false) => decode_revert_in_tokens(&data, decimals),
                    (Some(e), true) => RevertReason::Message(e.message.clone()),
                    (None, true) => RevertReason::Message("reverted without data".into()),
                };
                return Err(ChainError::Reverted {
                    call,
                    reason,
                    tx: None,
                });
            }
        }
        Ok(())
    }

    /// Where job `job_id`'s money went, summed from the escrow's events for it from
    /// `from_block` on (the job's creation block or earlier; 0 reads the whole chain).
    pub async fn job_money(&self, job_id: JobId, from_block: u64) -> Result<JobMoney, ChainError> {
        // Every job event of the escrow has the job id as its first indexed argument.
        let events = self
            .escrow_events(Some(B256::from(job_id)), from_block)
            .await?;
        summarize(job_id, events.iter().map(|(b, e)| (*b, e))).ok_or_else(|| {
            ChainError::Unexpected {
                url: self.inner.rpc.url.clone(),
                detail: format!(
                    "no JobCreated event for job {job_id} from block {from_block} on; is the \
                     job id right, and was it created after that block?"
                ),
            }
        })
    }

    /// Job `job_id`'s escrow events from `from_block` on, with their blocks, in chain order:
    /// what an auditor replays to check each payment against the rules.
    pub async fn job_events(
        &self,
        job_id: JobId,
        from_block: u64,
    ) -> Result<Vec<(u64, ChainEvent)>, ChainError> {
        self.escrow_events(Some(B256::from(job_id)), from_block)
            .await
    }

    /// The escrow's record of every provider and verifier (epochs accepted, rejected, lost,
    /// resigned; decisions signed with the outcome or not), folded from all its job events
    /// from `from_block` on: what `provider status`, `verifier status` and `job status`
    /// show, and what clients rank bids by.
    pub async fn chain_record(&self, from_block: u64) -> Result<ChainRecord, ChainError> {
        let events = self.escrow_events(None, from_block).await?;
        Ok(ChainRecord::from_history(events.iter().map(|(_, e)| e)))
    }

    /// The escrow's job events (those the machines take), with their blocks, in chain order;
    /// only job `topic1`'s when given.
    async fn escrow_events(
        &self,
        topic1: Option<B256>,
        from_block: u64,
    ) -> Result<Vec<(u64, ChainEvent)>, ChainError> {
        let rpc = &self.inner.rpc;
        let mut filter = Filter::new()
            .address(self.inner.escrow)
            .from_block(from_block)
            .to_block(BlockNumberOrTag::Latest);
        if let Some(t) = topic1 {
            filter = filter.topic1(t);
        }
        let logs = rpc
            .call("eth_getLogs", || rpc.provider.get_logs(&filter))
            .await?;
        let mut events: Vec<(u64, u64, ChainEvent)> = logs
            .iter()
            .filter(|l| !l.removed && l.address() == self.inner.escrow)
            .filter_map(|l| {
                Some((
                    l.block_number?,
                    l.log_index?,
                    super::follower::decode_event(&l.inner)?,
                ))
            })
            .collect();
        events.sort_by_key(|(b, i, _)| (*b, *i));
        Ok(events.into_iter().map(|(b, _, e)| (b, e)).collect())
    }

    // ---------------------------------------------------------------------- helpers

    /// Approves the escrow for `amount` when the allowance is short; returns the fee paid.
    async fn ensure_allowance(&self, token: Address, amount: U256) -> Result<U256, ChainError> {
        let owner = self.inner.address;
        let spender = self.inner.escrow;
        let current = self
            .inner
            .rpc
            .view(
                "allowance",
                token,
                TestUSDC::allowanceCall { owner, spender },
            )
            .await?;
        if current < amount {
            let data = TestUSDC::approveCall {
                spender,
                value: amount,
            }
            .abi_encode();
            return Ok(self.transact("approve", token, data).await?.fee);
        }
        Ok(U256::ZERO)
    }

    async fn created_job_id(&self, hash: B256) -> Result<Option<JobId>, ChainError> {
        let receipt: Option<TransactionReceipt> = self
            .inner
            .rpc
            .call("eth_getTransactionReceipt", || {
                self.inner.rpc.provider.get_transaction_receipt(hash)
            })
            .await?;
        Ok(receipt.and_then(|r| {
            r.logs()
                .iter()
                .filter(|l| l.address() == self.inner.escrow)
                .find_map(|l| JobEscrow::JobCreated::decode_log(&l.inner).ok())
                .map(|l| l.data.jobId)
        }))
    }

    async fn is_known(&self, hash: B256) -> bool {
        let rpc = &self.inner.rpc;
        matches!(
            rpc.raw(|| rpc.provider.get_transaction_by_hash(hash)).await,
            Ok(Some(_))
        )
    }

    async fn unfunded(&self, call: &'static str, needed: U256) -> ChainError {
        let address = self.inner.address;
        match self.eth_balance(address).await {
            Ok(balance) => ChainError::Unfunded {
                address,
                call,
                balance,
                needed,
            },
            Err(e) => e,
        }
    }

    /// Re-runs a reverted transaction as `eth_call` on the state after its block, which
    /// holds whatever change made it fail (an exact pre-state replay needs a tracing node).
    async fn replay_revert(
        &self,
        pending: &PendingTx,
        receipt: &TransactionReceipt,
    ) -> super::RevertReason {
        let rpc = &self.inner.rpc;
        let tx = match rpc
            .raw(|| rpc.provider.get_transaction_by_hash(pending.hash))
            .await
        {
            Ok(Some(tx)) => tx,
            _ => {
                return super::RevertReason::Message(
                    "reverted (transaction not found to replay)".into(),
                );
            }
        };
        let req = TransactionRequest::default()
            .from(self.inner.address)
            .to(alloy::consensus::Transaction::to(&tx).unwrap_or_default())
            .input(alloy::consensus::Transaction::input(&tx).clone().into());
        let block = receipt
            .block_number
            .map_or_else(BlockId::latest, BlockId::number);
        match rpc
            .raw(|| rpc.provider.call(req.clone()).block(block))
            .await
        {
            Err(RpcError::ErrorResp(p)) => match p.as_revert_data() {
                Some(data) => decode_revert(&data),
                None => super::RevertReason::Message(p.message.to_string()),
            },
            Err(e) => super::RevertReason::Message(format!("reverted (replay failed: {e})")),
            Ok(_) => super::RevertReason::Message(
                "reverted on chain, but succeeds when replayed on its block's state".into(),
            ),
        }
    }
}

/// Runs `op` again while it fails only because the RPC cannot be reached, waiting as
/// `patience` says between tries; any other outcome is returned as it is.
async fn through_outage<T, F, Fut>(
    patience: &RetryPolicy,
    call: &str,
    mut op: F,
) -> Result<T, ChainError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChainError>>,
{
    let mut failed = 0;
    loop {
        match op().await {
            Err(e @ ChainError::Unreachable { .. }) => {
                failed += 1;
                let Some(wait) = patience.wait_after(failed) else {
                    return Err(e);
                };
                tracing::warn!(call, tries = failed, ?wait, error = %e, "the chain RPC is away; trying again");
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}
