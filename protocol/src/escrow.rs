//! `JobEscrow.sol` in memory: one model of the contract, on this crate's own types, for the
//! simulator and the protocol tests. Pure like the rest of the crate: the block timestamp
//! and the sender are arguments.
//!
//! What "the same" means here, checked call by call against the contract on anvil by the
//! fuzzed differential test (`contracts/bindings/tests/escrow_model.rs`):
//! - the checks run in the contract's order and fail with its custom errors, arguments
//!   included ([`EscrowError`]); a failed call changes nothing, like a reverted transaction;
//! - a successful call emits the contract's events in the contract's order ([`Event`]);
//! - the arithmetic is the contract's (amounts are `U256` values bounded by the contract's
//!   `uint128` fields), and the ERC-20 tokens it pulls from and pays out of are modelled with
//!   OpenZeppelin's balance and allowance rules and errors, so conservation can be checked to
//!   the unit;
//! - bid and vote signatures are recovered from the EIP-712 digests the contract hashes,
//!   under the [`Scheme`] the signers use: secp256k1 answers exactly as `ECDSA.tryRecover`
//!   does (v, high s, unrecoverable all fail as `BadSignature`). `Scheme::Simulated` is the
//!   simulator's stand-in: a signature names its signer and binds no fields, so a vote over
//!   other fields is not caught there; the machines never submit one, and under secp256k1
//!   (the differential test, and the simulator's default) it is.
//!
//! The contract changes in later issues; this model changes with it, and the differential
//! test is what says the two still agree.
//!
//! One file on purpose, though long: it mirrors `JobEscrow.sol` function by function in the
//! contract's order, so a reviewer can read the two side by side when either changes.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256};

use crate::chain::{ChainEvent, ChainTx, EpochEndReason};
use crate::eip712::{BidFields, EscrowDomain, VoteFields};
use crate::signing::{Scheme, Sig65};
use crate::types::{Epoch, Hash, JobId, Step};

/// The contract refuses more verifiers (and more signatures) than this.
pub const MAX_VERIFIERS: usize = 32;
/// The contract refuses fewer verifiers than this: one key alone would decide.
pub const MIN_VERIFIERS: usize = 2;

/// `createJob`'s quorum rule: a strict majority of the `verifiers`, so an accepting and a
/// rejecting quorum always share a verifier. The provider vets jobs by it, and the node
/// checks a submission by it, before the escrow does.
pub fn is_strict_majority(quorum: u8, verifiers: usize) -> bool {
    let q = usize::from(quorum);
    q * 2 > verifiers && q <= verifiers
}

/// `JobEscrow.Status`; the codes are the Solidity enum's (`None` is 0 and never stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    None,
    Open,
    Assigned,
    Completed,
    Expired,
}

impl Status {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Status> {
        Some(match code {
            0 => Status::None,
            1 => Status::Open,
            2 => Status::Assigned,
            3 => Status::Completed,
            4 => Status::Expired,
            _ => return None,
        })
    }

    /// Open or assigned: the job still holds budget and can be exited.
    pub fn is_live(self) -> bool {
        matches!(self, Status::Open | Status::Assigned)
    }

    /// The job's `remaining` is still the escrow's to pay out: live, or completed and not yet
    /// settled (a settled job's `remaining` is zero).
    pub fn holds_budget(self) -> bool {
        matches!(self, Status::Open | Status::Assigned | Status::Completed)
    }
}

/// Why a call reverts: the contract's custom errors by name and arguments, the test token's
/// (OpenZeppelin `ERC20`) errors where the escrow's token transfer fails, and an empty revert
/// where the escrow calls an address that is no token.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum EscrowError {
    #[error("ZeroAddress")]
    ZeroAddress,
    #[error("ZeroAmount")]
    ZeroAmount,
    #[error("AmountTooLarge")]
    AmountTooLarge,
    #[error("InvalidSteps")]
    InvalidSteps,
    #[error("InvalidVerifiers")]
    InvalidVerifiers,
    #[error("InvalidQuorum")]
    InvalidQuorum,
    #[error("DeadlinePassed")]
    DeadlinePassed,
    #[error("DeadlineTooFar({deadline}, {latest})")]
    DeadlineTooFar { deadline: u64, latest: U256 },
    #[error("GraceTooLong({grace}, {max_grace})")]
    GraceTooLong { grace: u64, max_grace: u64 },
    #[error("ClientIsVerifier")]
    ClientIsVerifier,
    #[error("BudgetTooSmall({budget}, {needed})")]
    BudgetTooSmall { budget: U256, needed: U256 },
    #[error("DepositMismatch({received}, {expected})")]
    DepositMismatch { received: U256, expected: U256 },
    #[error("UnknownJob({0})")]
    UnknownJob(JobId),
    #[error("NotClient")]
    NotClient,
    #[error("NotProvider")]
    NotProvider,
    #[error("WrongStatus({0:?})")]
    WrongStatus(Status),
    #[error("WrongEpoch({given}, {current})")]
    WrongEpoch { given: Epoch, current: Epoch },
    #[error("BidExpired({expiry})")]
    BidExpired { expiry: u64 },
    #[error("PriceTooHigh({price}, {max_price})")]
    PriceTooHigh { price: U256, max_price: U256 },
    #[error("ProviderIsVerifier({0})")]
    ProviderIsVerifier(Address),
    #[error("InsufficientStake({bonded}, {needed})")]
    InsufficientStake { bonded: U256, needed: U256 },
    #[error("BadSignature({index})")]
    BadSignature { index: U256 },
    #[error("WrongSigner({recovered}, {expected})")]
    WrongSigner {
        recovered: Address,
        expected: Address,
    },
    #[error("NotVerifier({0})")]
    NotVerifier(Address),
    #[error("DuplicateSigner({0})")]
    DuplicateSigner(Address),
    #[error("TooManySignatures")]
    TooManySignatures,
    #[error("QuorumNotReached({have}, {need})")]
    QuorumNotReached { have: U256, need: U256 },
    #[error("StepNotIncreasing({step}, {last_accepted})")]
    StepNotIncreasing { step: Step, last_accepted: Step },
    #[error("StepOffInterval({0})")]
    StepOffInterval(Step),
    #[error("TooLate")]
    TooLate,
    #[error("TooEarly({allowed_at})")]
    TooEarly { allowed_at: U256 },
    #[error("StakeLocked({free}, {requested})")]
    StakeLocked { free: U256, requested: U256 },
    #[error("NotUnbonding")]
    NotUnbonding,
    #[error("NothingToSettle")]
    NothingToSettle,
    #[error("NothingToWithdraw")]
    NothingToWithdraw,
    /// Solidity's checked arithmetic failed (`Panic(uint256)`, 0x11 for overflow).
    #[error("Panic({0:#x})")]
    Panic(u8),
    #[error("ERC20InsufficientBalance({sender}, {balance}, {needed})")]
    Erc20InsufficientBalance {
        sender: Address,
        balance: U256,
        needed: U256,
    },
    #[error("ERC20InsufficientAllowance({spender}, {allowance}, {needed})")]
    Erc20InsufficientAllowance {
        spender: Address,
        allowance: U256,
        needed: U256,
    },
    /// The escrow called an address without token code: the call reverts with no data.
    #[error("revert without data (not a token)")]
    NotAToken,
}

impl EscrowError {
    /// The error's name as Solidity declares it.
    pub fn name(&self) -> &'static str {
        match self {
            EscrowError::ZeroAddress => "ZeroAddress",
            EscrowError::ZeroAmount => "ZeroAmount",
            EscrowError::AmountTooLarge => "AmountTooLarge",
            EscrowError::InvalidSteps => "InvalidSteps",
            EscrowError::InvalidVerifiers => "InvalidVerifiers",
            EscrowError::InvalidQuorum => "InvalidQuorum",
            EscrowError::DeadlinePassed => "DeadlinePassed",
            EscrowError::DeadlineTooFar { .. } => "DeadlineTooFar",
            EscrowError::GraceTooLong { .. } => "GraceTooLong",
            EscrowError::ClientIsVerifier => "ClientIsVerifier",
            EscrowError::BudgetTooSmall { .. } => "BudgetTooSmall",
            EscrowError::DepositMismatch { .. } => "DepositMismatch",
            EscrowError::UnknownJob(_) => "UnknownJob",
            EscrowError::NotClient => "NotClient",
            EscrowError::NotProvider => "NotProvider",
            EscrowError::WrongStatus(_) => "WrongStatus",
            EscrowError::WrongEpoch { .. } => "WrongEpoch",
            EscrowError::BidExpired { .. } => "BidExpired",
            EscrowError::PriceTooHigh { .. } => "PriceTooHigh",
            EscrowError::ProviderIsVerifier(_) => "ProviderIsVerifier",
            EscrowError::InsufficientStake { .. } => "InsufficientStake",
            EscrowError::BadSignature { .. } => "BadSignature",
            EscrowError::WrongSigner { .. } => "WrongSigner",
            EscrowError::NotVerifier(_) => "NotVerifier",
            EscrowError::DuplicateSigner(_) => "DuplicateSigner",
            EscrowError::TooManySignatures => "TooManySignatures",
            EscrowError::QuorumNotReached { .. } => "QuorumNotReached",
            EscrowError::StepNotIncreasing { .. } => "StepNotIncreasing",
            EscrowError::StepOffInterval(_) => "StepOffInterval",
            EscrowError::TooLate => "TooLate",
            EscrowError::TooEarly { .. } => "TooEarly",
            EscrowError::StakeLocked { .. } => "StakeLocked",
            EscrowError::NotUnbonding => "NotUnbonding",
            EscrowError::NothingToSettle => "NothingToSettle",
            EscrowError::NothingToWithdraw => "NothingToWithdraw",
            EscrowError::Panic(_) => "Panic",
            EscrowError::Erc20InsufficientBalance { .. } => "ERC20InsufficientBalance",
            EscrowError::Erc20InsufficientAllowance { .. } => "ERC20InsufficientAllowance",
            EscrowError::NotAToken => "(no data)",
        }
    }
}

/// A call to the escrow: the transactions the role machines submit ([`ChainTx`]) and the
/// provider-stake calls the node's chain client makes around them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Tx(ChainTx),
    Register { amount: U256 },
    RequestUnbond { amount: U256 },
    WithdrawStake,
}

impl From<ChainTx> for Call {
    fn from(tx: ChainTx) -> Call {
        Call::Tx(tx)
    }
}

impl Call {
    /// The Solidity function's name.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Tx(tx) => match tx {
                ChainTx::CreateJob { .. } => "createJob",
                ChainTx::Assign { .. } => "assign",
                ChainTx::ReleaseProvider { .. } => "releaseProvider",
                ChainTx::AcceptCheckpoint { .. } => "acceptCheckpoint",
                ChainTx::RejectCheckpoint { .. } => "rejectCheckpoint",
                ChainTx::Expire { .. } => "expire",
                ChainTx::Resign { .. } => "resign",
                ChainTx::Settle { .. } => "settle",
                ChainTx::Withdraw { .. } => "withdraw",
            },
            Call::Register { .. } => "register",
            Call::RequestUnbond { .. } => "requestUnbond",
            Call::WithdrawStake => "withdrawStake",
        }
    }
}

/// An event the escrow emits: the job events the machines consume ([`ChainEvent`]) and the
/// stake and payout events only books and tests read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Job(ChainEvent),
    Staked {
        provider: Address,
        amount: U256,
        total: U256,
    },
    UnbondRequested {
        provider: Address,
        amount: U256,
        available_at: u64,
    },
    StakeWithdrawn {
        provider: Address,
        amount: U256,
    },
    /// `amount` of `provider`'s stake was burned: it stays in the escrow, owed to nobody.
    Slashed {
        provider: Address,
        job_id: JobId,
        amount: U256,
    },
    Withdrawn {
        account: Address,
        token: Address,
        amount: U256,
    },
}

impl Event {
    pub fn job(&self) -> Option<&ChainEvent> {
        match self {
            Event::Job(e) => Some(e),
            _ => None,
        }
    }
}

/// A job as the contract stores it (`getJob` returns these fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub client: Address,
    pub epoch: Epoch,
    pub status: Status,
    pub quorum: u8,
    /// The live epoch's provider; the last one's after the epoch ended (as on chain).
    pub provider: Address,
    pub last_accepted_step: Step,
    pub token: Address,
    pub total_steps: Step,
    pub price_per_step: U256,
    pub remaining: U256,
    pub max_price_per_step: U256,
    pub deposit: U256,
    pub checkpoint_interval: Step,
    pub deadline: u64,
    pub grace: u64,
    pub last_checkpoint_hash: Hash,
    pub spec_hash: Hash,
    pub verifiers: Vec<Address>,
    /// [`crate::eip712::JobTerms::hash`] of the job as created: what bids are signed over.
    pub terms: Hash,
}

/// A provider's stake, as `stakeOf` returns it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stake {
    /// Backs live epochs (`min_stake` each) and can be slashed; the rest is free to unbond.
    pub bonded: U256,
    /// Requested out, no longer slashable, paid by `withdrawStake` from `unbond_at` on.
    pub unbonding: U256,
    /// When `unbonding` can be withdrawn (0 when nothing is unbonding).
    pub unbond_at: u64,
    /// Epochs this provider holds, across jobs.
    pub live_epochs: u32,
}

impl Stake {
    /// What live epochs reserve: `min_stake` each.
    pub fn reserved(&self, min_stake: U256) -> U256 {
        min_stake * U256::from(self.live_epochs)
    }

    /// Bonded stake no live epoch reserves: what `requestUnbond` may take, and what backs
    /// one more epoch once it reaches `min_stake`.
    pub fn free(&self, min_stake: U256) -> U256 {
        self.bonded.saturating_sub(self.reserved(min_stake))
    }
}

/// Deliberate deviations from the contract, so the simulator's tests can show each of its
/// checkers firing on a broken escrow. All off by default; nothing but those tests sets them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// Decisions skip the epoch check (fenced epochs get paid).
    pub skip_epoch_check: bool,
    /// Settling credits the client's refund twice.
    pub refund_twice: bool,
    /// `expire` always reverts as too early: jobs can never be exited.
    pub never_expire: bool,
    /// An accepted checkpoint credits the provider without debiting the budget.
    pub free_money: bool,
}

/// An ERC-20 with OpenZeppelin's rules: an allowance of `U256::MAX` is never spent.
#[derive(Clone, Debug, Default)]
pub struct Token {
    balances: BTreeMap<Address, U256>,
    allowances: BTreeMap<(Address, Address), U256>,
    supply: U256,
}

impl Token {
    pub fn balance_of(&self, who: Address) -> U256 {
        self.balances.get(&who).copied().unwrap_or_default()
    }

    pub fn allowance(&self, owner: Address, spender: Address) -> U256 {
        self.allowances
            .get(&(owner, spender))
            .copied()
            .unwrap_or_default()
    }

    pub fn total_supply(&self) -> U256 {
        self.supply
    }

    /// Every balance, for a sum against the supply or a comparison with the chain.
    pub fn balances(&self) -> impl Iterator<Item = (Address, U256)> + '_ {
        self.balances.iter().map(|(a, b)| (*a, *b))
    }

    fn check_transfer(&self, from: Address, amount: U256) -> Result<(), EscrowError> {
        let balance = self.balance_of(from);
        if balance < amount {
            return Err(EscrowError::Erc20InsufficientBalance {
                sender: from,
                balance,
                needed: amount,
            });
        }
        Ok(())
    }

    /// `transferFrom(from, to, amount)` by `spender`: the allowance first, then the balance.
    fn check_transfer_from(
        &self,
        spender: Address,
        from: Address,
        amount: U256,
    ) -> Result<(), EscrowError> {
        let allowance = self.allowance(from, spender);
        if allowance < amount {
            return Err(EscrowError::Erc20InsufficientAllowance {
                spender,
                allowance,
                needed: amount,
            });
        }
        self.check_transfer(from, amount)
    }

    /// Only after the matching check passed.
    fn move_checked(&mut self, spender: Option<Address>, from: Address, to: Address, amount: U256) {
        if let Some(spender) = spender {
            let allowance = self.allowance(from, spender);
            if allowance != U256::MAX {
                self.allowances.insert((from, spender), allowance - amount);
            }
        }
        let have = self.balance_of(from);
        self.balances.insert(from, have - amount);
        *self.balances.entry(to).or_default() += amount;
    }
}

/// The constructor's numbers after the stake token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub min_stake: U256,
    pub unbond_delay: u64,
    pub max_duration: u64,
    pub max_grace: u64,
}

/// The escrow contract at one address, and the ERC-20 tokens it deals in.
#[derive(Clone, Debug)]
pub struct Escrow {
    /// Chain id and the escrow's own address: what bid and vote digests bind, and the account
    /// that holds the escrowed tokens.
    pub domain: EscrowDomain,
    /// How bid and vote signatures are recovered (see the module docs).
    pub scheme: Scheme,
    pub stake_token: Address,
    pub min_stake: U256,
    pub unbond_delay: u64,
    /// The latest deadline `createJob` accepts is its block time plus this.
    pub max_duration: u64,
    /// The longest grace `createJob` accepts.
    pub max_grace: u64,
    pub bugs: Bugs,
    /// Slashed stake: held by the escrow, owed to nobody.
    burned: U256,
    tokens: BTreeMap<Address, Token>,
    jobs: Vec<Job>,
    stakes: BTreeMap<Address, Stake>,
    withdrawable: BTreeMap<(Address, Address), U256>,
    /// What the escrow accounts for per token (budgets left, credits, stakes and burned
    /// stake), kept by each call: a running total to compare with its balance cheaply;
    /// [`Escrow::owed_recomputed`] is the slow, independent one.
    owed: BTreeMap<Address, U256>,
}

impl Escrow {
    /// A freshly deployed escrow. The stake token exists (with no balances); like the
    /// contract's constructor, a zero token, a zero minimum stake or a zero maximum duration
    /// is refused.
    pub fn new(
        domain: EscrowDomain,
        scheme: Scheme,
        stake_token: Address,
        params: Params,
    ) -> Result<Escrow, EscrowError> {
        let Params {
            min_stake,
            unbond_delay,
            max_duration,
            max_grace,
        } = params;
        if stake_token == Address::ZERO {
            return Err(EscrowError::ZeroAddress);
        }
        if min_stake.is_zero() || max_duration == 0 {
            return Err(EscrowError::ZeroAmount);
        }
        let mut tokens = BTreeMap::new();
        tokens.insert(stake_token, Token::default());
        Ok(Escrow {
            domain,
            scheme,
            stake_token,
            min_stake,
            unbond_delay,
            max_duration,
            max_grace,
            bugs: Bugs::default(),
            burned: U256::ZERO,
            tokens,
            jobs: Vec::new(),
            stakes: BTreeMap::new(),
            withdrawable: BTreeMap::new(),
            owed: BTreeMap::new(),
        })
    }

    /// The escrow's own account.
    pub fn address(&self) -> Address {
        self.domain.escrow
    }

    // ------------------------------------------------------------ tokens

    /// Deploys another token at `token` (nothing happens if there is one).
    pub fn add_token(&mut self, token: Address) {
        self.tokens.entry(token).or_default();
    }

    pub fn token(&self, token: Address) -> Option<&Token> {
        self.tokens.get(&token)
    }

    /// `TestUSDC.mint`: anyone may mint (deploys the token on first use).
    pub fn mint(&mut self, token: Address, to: Address, amount: U256) {
        let t = self.tokens.entry(token).or_default();
        *t.balances.entry(to).or_default() += amount;
        t.supply += amount;
    }

    /// `approve(spender, amount)` by `owner` on `token` (deploys the token on first use).
    pub fn approve(&mut self, token: Address, owner: Address, spender: Address, amount: U256) {
        self.tokens
            .entry(token)
            .or_default()
            .allowances
            .insert((owner, spender), amount);
    }

    pub fn balance_of(&self, token: Address, who: Address) -> U256 {
        self.tokens
            .get(&token)
            .map_or(U256::ZERO, |t| t.balance_of(who))
    }

    // ------------------------------------------------------------- views

    pub fn job_count(&self) -> u64 {
        self.jobs.len() as u64
    }

    /// `getJob`, or `None` where the contract reverts with `UnknownJob`.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        let i = u64::try_from(id).ok()?.checked_sub(1)?;
        self.jobs.get(usize::try_from(i).ok()?)
    }

    /// Every job, job `i + 1` at index `i`.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// Slashed stake so far (`burned`).
    pub fn burned(&self) -> U256 {
        self.burned
    }

    /// `termsOf`.
    pub fn terms_of(&self, id: JobId) -> Option<Hash> {
        self.job(id).map(|j| j.terms)
    }

    pub fn stake_of(&self, provider: Address) -> Stake {
        self.stakes.get(&provider).copied().unwrap_or_default()
    }

    /// Every provider that ever staked, with its stake.
    pub fn stakes(&self) -> impl Iterator<Item = (Address, Stake)> + '_ {
        self.stakes.iter().map(|(a, s)| (*a, *s))
    }

    pub fn withdrawable(&self, account: Address, token: Address) -> U256 {
        self.withdrawable
            .get(&(account, token))
            .copied()
            .unwrap_or_default()
    }

    /// Every (account, token) ever credited, with what is withdrawable now.
    pub fn credits(&self) -> impl Iterator<Item = ((Address, Address), U256)> + '_ {
        self.withdrawable.iter().map(|(k, v)| (*k, *v))
    }

    /// The job's `JobCreated` event as a chain client rebuilds it from `getJob` (a node
    /// that learns of a job late reads it, not the log).
    pub fn created_event(&self, id: JobId) -> Option<ChainEvent> {
        let j = self.job(id)?;
        Some(ChainEvent::JobCreated {
            job_id: id,
            client: j.client,
            token: j.token,
            budget: j.deposit,
            max_price_per_step: j.max_price_per_step,
            total_steps: j.total_steps,
            checkpoint_interval: j.checkpoint_interval,
            spec_hash: j.spec_hash,
            verifiers: j.verifiers.clone(),
            quorum: j.quorum,
            deadline: j.deadline,
            grace: j.grace,
        })
    }

    pub fn is_verifier(&self, id: JobId, account: Address) -> bool {
        self.job(id).is_some_and(|j| j.verifiers.contains(&account))
    }

    /// What the escrow owes in `token` by its running books.
    pub fn owed(&self, token: Address) -> U256 {
        self.owed.get(&token).copied().unwrap_or_default()
    }

    /// What the escrow accounts for in `token`, recomputed from scratch: budgets not yet
    /// paid out, credits and (in the stake token) stakes bonded, unbonding and burned. Equals
    /// its balance when the books conserve funds.
    pub fn owed_recomputed(&self, token: Address) -> U256 {
        let budgets = self
            .jobs
            .iter()
            .filter(|j| j.token == token && j.status.holds_budget())
            .fold(U256::ZERO, |a, j| a + j.remaining);
        let credits = self
            .withdrawable
            .iter()
            .filter(|((_, t), _)| *t == token)
            .fold(U256::ZERO, |a, (_, v)| a + v);
        let stakes = if token == self.stake_token {
            self.stakes
                .values()
                .fold(self.burned, |a, s| a + s.bonded + s.unbonding)
        } else {
            U256::ZERO
        };
        budgets + credits + stakes
    }

    // ------------------------------------------------------------- calls

    /// Executes `call` from `sender` in a block at `block_time` (seconds). On error nothing
    /// changed, as with a reverted transaction.
    pub fn apply(
        &mut self,
        call: &Call,
        sender: Address,
        block_time: u64,
    ) -> Result<Vec<Event>, EscrowError> {
        let mut ev = Vec::new();
        match call {
            Call::Tx(tx) => self.apply_tx(tx, sender, block_time, &mut ev)?,
            Call::Register { amount } => self.register(sender, *amount, &mut ev)?,
            Call::RequestUnbond { amount } => {
                self.request_unbond(sender, *amount, block_time, &mut ev)?
            }
            Call::WithdrawStake => self.withdraw_stake(sender, block_time, &mut ev)?,
        }
        Ok(ev)
    }

    fn apply_tx(
        &mut self,
        tx: &ChainTx,
        sender: Address,
        now: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        match tx {
            ChainTx::CreateJob {
                token,
                budget,
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                spec_hash,
                verifiers,
                quorum,
                deadline,
                grace,
            } => self.create_job(
                sender,
                now,
                NewJob {
                    token: *token,
                    budget: *budget,
                    max_price_per_step: *max_price_per_step,
                    total_steps: *total_steps,
                    checkpoint_interval: *checkpoint_interval,
                    spec_hash: *spec_hash,
                    verifiers,
                    quorum: *quorum,
                    deadline: *deadline,
                    grace: *grace,
                },
                ev,
            ),
            ChainTx::Assign {
                job_id,
                provider,
                price_per_step,
                bid_expiry,
                bid_signature,
            } => self.assign(
                sender,
                now,
                *job_id,
                *provider,
                *price_per_step,
                *bid_expiry,
                bid_signature,
                ev,
            ),
            ChainTx::ReleaseProvider { job_id } => {
                let i = self.existing(*job_id)?;
                let job = &self.jobs[i];
                if sender != job.client {
                    return Err(EscrowError::NotClient);
                }
                if job.status != Status::Assigned {
                    return Err(EscrowError::WrongStatus(job.status));
                }
                self.end_epoch(i, EpochEndReason::Released, ev);
                self.jobs[i].status = Status::Open;
                Ok(())
            }
            ChainTx::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            } => self.accept(*job_id, now, *epoch, *step, *checkpoint_hash, sigs, ev),
            ChainTx::RejectCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            } => self.reject(*job_id, now, *epoch, *step, *checkpoint_hash, sigs, ev),
            ChainTx::Expire { job_id } => {
                let i = self.existing(*job_id)?;
                let job = &self.jobs[i];
                let status = job.status;
                if !status.is_live() {
                    return Err(EscrowError::WrongStatus(status));
                }
                let allowed_at = U256::from(job.deadline) + U256::from(job.grace);
                if U256::from(now) < allowed_at || self.bugs.never_expire {
                    return Err(EscrowError::TooEarly { allowed_at });
                }
                if status == Status::Assigned {
                    self.end_epoch(i, EpochEndReason::Expired, ev);
                }
                let job = &mut self.jobs[i];
                let refund = std::mem::take(&mut job.remaining);
                job.status = Status::Expired;
                let (client, token) = (job.client, job.token);
                self.credit(client, token, refund);
                ev.push(Event::Job(ChainEvent::JobExpired {
                    job_id: *job_id,
                    refund,
                }));
                Ok(())
            }
            ChainTx::Resign { job_id } => {
                let i = self.existing(*job_id)?;
                let job = &self.jobs[i];
                if job.status != Status::Assigned {
                    return Err(EscrowError::WrongStatus(job.status));
                }
                if sender != job.provider {
                    return Err(EscrowError::NotProvider);
                }
                self.end_epoch(i, EpochEndReason::Resigned, ev);
                self.jobs[i].status = Status::Open;
                Ok(())
            }
            ChainTx::Settle { job_id } => {
                let i = self.existing(*job_id)?;
                let job = &mut self.jobs[i];
                if job.status != Status::Completed {
                    return Err(EscrowError::WrongStatus(job.status));
                }
                if job.remaining.is_zero() {
                    return Err(EscrowError::NothingToSettle);
                }
                let refund = std::mem::take(&mut job.remaining);
                let (client, token) = (job.client, job.token);
                let credited = if self.bugs.refund_twice {
                    refund * U256::from(2)
                } else {
                    refund
                };
                self.credit(client, token, credited);
                ev.push(Event::Job(ChainEvent::JobSettled {
                    job_id: *job_id,
                    client,
                    refund,
                }));
                Ok(())
            }
            ChainTx::Withdraw { token } => {
                let amount = self.withdrawable(sender, *token);
                if amount.is_zero() {
                    return Err(EscrowError::NothingToWithdraw);
                }
                // Credits only ever exist in tokens the escrow pulled, which it holds.
                let escrow = self.address();
                let t = self.tokens.get_mut(token).ok_or(EscrowError::NotAToken)?;
                t.check_transfer(escrow, amount)?;
                t.move_checked(None, escrow, sender, amount);
                self.withdrawable.insert((sender, *token), U256::ZERO);
                self.owe(*token, |o| o.saturating_sub(amount));
                ev.push(Event::Withdrawn {
                    account: sender,
                    token: *token,
                    amount,
                });
                Ok(())
            }
        }
    }

    fn create_job(
        &mut self,
        sender: Address,
        now: u64,
        j: NewJob<'_>,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let u128_max = U256::from(u128::MAX);
        if j.token == Address::ZERO {
            return Err(EscrowError::ZeroAddress);
        }
        if j.budget.is_zero() || j.max_price_per_step.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        if j.budget > u128_max || j.max_price_per_step > u128_max {
            return Err(EscrowError::AmountTooLarge);
        }
        if j.total_steps == 0 || j.checkpoint_interval == 0 || j.checkpoint_interval > j.total_steps
        {
            return Err(EscrowError::InvalidSteps);
        }
        let n = j.verifiers.len();
        if !(MIN_VERIFIERS..=MAX_VERIFIERS).contains(&n) {
            return Err(EscrowError::InvalidVerifiers);
        }
        if !is_strict_majority(j.quorum, n) {
            return Err(EscrowError::InvalidQuorum);
        }
        if j.deadline <= now {
            return Err(EscrowError::DeadlinePassed);
        }
        let latest = U256::from(now) + U256::from(self.max_duration);
        if U256::from(j.deadline) > latest {
            return Err(EscrowError::DeadlineTooFar {
                deadline: j.deadline,
                latest,
            });
        }
        if j.grace > self.max_grace {
            return Err(EscrowError::GraceTooLong {
                grace: j.grace,
                max_grace: self.max_grace,
            });
        }
        // uint128 × uint64 cannot overflow uint256, as the contract notes.
        let needed = j.max_price_per_step * U256::from(j.total_steps);
        if j.budget < needed {
            return Err(EscrowError::BudgetTooSmall {
                budget: j.budget,
                needed,
            });
        }
        for (i, v) in j.verifiers.iter().enumerate() {
            if *v == Address::ZERO || j.verifiers[..i].contains(v) {
                return Err(EscrowError::InvalidVerifiers);
            }
            if *v == sender {
                return Err(EscrowError::ClientIsVerifier);
            }
        }
        // `_pullExact`: the token's `balanceOf` and `transferFrom`, reverting the whole call.
        let escrow = self.address();
        let t = self
            .tokens
            .get_mut(&j.token)
            .ok_or(EscrowError::NotAToken)?;
        t.check_transfer_from(escrow, sender, j.budget)?;
        t.move_checked(Some(escrow), sender, escrow, j.budget);
        self.owe(j.token, |o| o + j.budget);
        let job_id = U256::from(self.jobs.len() as u64 + 1);
        let created = ChainEvent::JobCreated {
            job_id,
            client: sender,
            token: j.token,
            budget: j.budget,
            max_price_per_step: j.max_price_per_step,
            total_steps: j.total_steps,
            checkpoint_interval: j.checkpoint_interval,
            spec_hash: j.spec_hash,
            verifiers: j.verifiers.to_vec(),
            quorum: j.quorum,
            deadline: j.deadline,
            grace: j.grace,
        };
        // What `termsOf` stores: the hash of the creation's own arguments.
        let terms = created.terms_hash().unwrap_or_default();
        self.jobs.push(Job {
            client: sender,
            epoch: 0,
            status: Status::Open,
            quorum: j.quorum,
            provider: Address::ZERO,
            last_accepted_step: 0,
            token: j.token,
            total_steps: j.total_steps,
            price_per_step: U256::ZERO,
            remaining: j.budget,
            max_price_per_step: j.max_price_per_step,
            deposit: j.budget,
            checkpoint_interval: j.checkpoint_interval,
            deadline: j.deadline,
            grace: j.grace,
            last_checkpoint_hash: j.spec_hash,
            spec_hash: j.spec_hash,
            verifiers: j.verifiers.to_vec(),
            terms,
        });
        ev.push(Event::Job(created));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn assign(
        &mut self,
        sender: Address,
        now: u64,
        job_id: JobId,
        provider: Address,
        price_per_step: U256,
        bid_expiry: u64,
        bid_signature: &Sig65,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let i = self.existing(job_id)?;
        let job = &self.jobs[i];
        if sender != job.client {
            return Err(EscrowError::NotClient);
        }
        let status = job.status;
        if !status.is_live() {
            return Err(EscrowError::WrongStatus(status));
        }
        if now >= job.deadline {
            return Err(EscrowError::DeadlinePassed);
        }
        if now > bid_expiry {
            return Err(EscrowError::BidExpired { expiry: bid_expiry });
        }
        if price_per_step > job.max_price_per_step {
            return Err(EscrowError::PriceTooHigh {
                price: price_per_step,
                max_price: job.max_price_per_step,
            });
        }
        if price_per_step.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        if job.verifiers.contains(&provider) {
            return Err(EscrowError::ProviderIsVerifier(provider));
        }
        let new_epoch = job.epoch + 1;
        let terms = job.terms;
        // The contract ends the live epoch before the stake check, so a provider re-assigned
        // to its own job needs no second reservation (a later revert undoes the end).
        let st = self.stake_of(provider);
        let releases = u64::from(status == Status::Assigned && job.provider == provider);
        let live_after_end = u64::from(st.live_epochs) - releases;
        let needed = self.min_stake * U256::from(live_after_end + 1);
        if st.bonded < needed {
            return Err(EscrowError::InsufficientStake {
                bonded: st.bonded,
                needed,
            });
        }
        let fields = BidFields {
            job_id,
            terms,
            epoch: new_epoch,
            provider,
            price_per_step,
            expiry: bid_expiry,
        };
        let recovered = fields
            .recover(&self.domain, self.scheme, bid_signature)
            .map_err(|_| EscrowError::BadSignature { index: U256::ZERO })?;
        if recovered != provider {
            return Err(EscrowError::WrongSigner {
                recovered,
                expected: provider,
            });
        }
        if status == Status::Assigned {
            self.end_epoch(i, EpochEndReason::Replaced, ev);
        }
        let job = &mut self.jobs[i];
        job.epoch = new_epoch;
        job.provider = provider;
        job.price_per_step = price_per_step;
        job.status = Status::Assigned;
        let (start_step, start_checkpoint) = (job.last_accepted_step, job.last_checkpoint_hash);
        self.stakes.entry(provider).or_default().live_epochs += 1;
        ev.push(Event::Job(ChainEvent::ProviderAssigned {
            job_id,
            epoch: new_epoch,
            provider,
            price_per_step,
            start_step,
            start_checkpoint,
        }));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        job_id: JobId,
        now: u64,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: &[Sig65],
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let i = self.existing(job_id)?;
        let last = self.check_decision(i, job_id, now, epoch, step, checkpoint_hash, true, sigs)?;
        let free_money = self.bugs.free_money;
        let job = &mut self.jobs[i];
        let (provider, token) = (job.provider, job.token);
        // price ≤ maxPrice and budget ≥ maxPrice × totalSteps: `remaining` always covers it.
        let amount = U256::from(step - last) * job.price_per_step;
        let remaining = if free_money {
            job.remaining
        } else {
            job.remaining - amount
        };
        job.last_accepted_step = step;
        job.last_checkpoint_hash = checkpoint_hash;
        let completes = step == job.total_steps;
        // What is left stays in `remaining` until `settle` credits it to the client: the
        // final accept does not touch the client's balance slot, which keeps it under 100k gas.
        job.remaining = remaining;
        if completes {
            job.status = Status::Completed;
        }
        self.credit(provider, token, amount);
        if free_money {
            self.owe(token, |o| o + amount);
        }
        ev.push(Event::Job(ChainEvent::CheckpointAccepted {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            provider,
            amount,
        }));
        if completes {
            let st = self.stakes.entry(provider).or_default();
            st.live_epochs = st.live_epochs.saturating_sub(1);
            ev.push(Event::Job(ChainEvent::EpochEnded {
                job_id,
                epoch,
                reason: EpochEndReason::Completed,
            }));
            ev.push(Event::Job(ChainEvent::JobCompleted {
                job_id,
                refund: remaining,
            }));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn reject(
        &mut self,
        job_id: JobId,
        now: u64,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: &[Sig65],
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let i = self.existing(job_id)?;
        self.check_decision(i, job_id, now, epoch, step, checkpoint_hash, false, sigs)?;
        let provider = self.jobs[i].provider;
        let st = self.stakes.entry(provider).or_default();
        // Every live epoch reserves `min_stake`, so this is `min_stake` unless the books broke.
        let slashed = st.bonded.min(self.min_stake);
        st.bonded -= slashed;
        // Burned, not paid to anyone: whoever could cause a reject (the client, its
        // verifiers) must not profit from one.
        self.burned += slashed;
        ev.push(Event::Job(ChainEvent::CheckpointRejected {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            provider,
            slashed,
        }));
        ev.push(Event::Slashed {
            provider,
            job_id,
            amount: slashed,
        });
        self.end_epoch(i, EpochEndReason::Rejected, ev);
        self.jobs[i].status = Status::Open;
        Ok(())
    }

    fn register(
        &mut self,
        sender: Address,
        amount: U256,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        if amount.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        let st = self.stake_of(sender);
        // `bonded + amount` is a checked uint256 addition before the uint128 bound.
        let total = st
            .bonded
            .checked_add(amount)
            .ok_or(EscrowError::Panic(0x11))?;
        if total > U256::from(u128::MAX) {
            return Err(EscrowError::AmountTooLarge);
        }
        let escrow = self.address();
        let token = self.stake_token;
        let t = self.tokens.entry(token).or_default();
        t.check_transfer_from(escrow, sender, amount)?;
        t.move_checked(Some(escrow), sender, escrow, amount);
        self.owe(token, |o| o + amount);
        self.stakes.insert(
            sender,
            Stake {
                bonded: total,
                ..st
            },
        );
        ev.push(Event::Staked {
            provider: sender,
            amount,
            total,
        });
        Ok(())
    }

    fn request_unbond(
        &mut self,
        sender: Address,
        amount: U256,
        now: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        if amount.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        let st = self.stake_of(sender);
        let free = st.free(self.min_stake);
        if amount > free {
            return Err(EscrowError::StakeLocked {
                free,
                requested: amount,
            });
        }
        let available_at = now
            .checked_add(self.unbond_delay)
            .ok_or(EscrowError::Panic(0x11))?;
        self.stakes.insert(
            sender,
            Stake {
                bonded: st.bonded - amount,
                unbonding: st.unbonding + amount,
                unbond_at: available_at,
                ..st
            },
        );
        ev.push(Event::UnbondRequested {
            provider: sender,
            amount,
            available_at,
        });
        Ok(())
    }

    fn withdraw_stake(
        &mut self,
        sender: Address,
        now: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let st = self.stake_of(sender);
        if st.unbonding.is_zero() {
            return Err(EscrowError::NotUnbonding);
        }
        if now < st.unbond_at {
            return Err(EscrowError::TooEarly {
                allowed_at: U256::from(st.unbond_at),
            });
        }
        let amount = st.unbonding;
        let escrow = self.address();
        let token = self.stake_token;
        let t = self.tokens.entry(token).or_default();
        t.check_transfer(escrow, amount)?;
        t.move_checked(None, escrow, sender, amount);
        self.owe(token, |o| o.saturating_sub(amount));
        self.stakes.insert(
            sender,
            Stake {
                unbonding: U256::ZERO,
                unbond_at: 0,
                ..st
            },
        );
        ev.push(Event::StakeWithdrawn {
            provider: sender,
            amount,
        });
        Ok(())
    }

    // ---------------------------------------------------------- internal

    /// `_existing`: the job's index.
    fn existing(&self, id: JobId) -> Result<usize, EscrowError> {
        u64::try_from(id)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|i| *i < self.jobs.len())
            .ok_or(EscrowError::UnknownJob(id))
    }

    /// `_checkDecision` and `_checkQuorum`; the last accepted step.
    #[allow(clippy::too_many_arguments)]
    fn check_decision(
        &self,
        i: usize,
        job_id: JobId,
        now: u64,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        accept: bool,
        sigs: &[Sig65],
    ) -> Result<Step, EscrowError> {
        let job = &self.jobs[i];
        if job.status != Status::Assigned {
            return Err(EscrowError::WrongStatus(job.status));
        }
        if epoch != job.epoch && !self.bugs.skip_epoch_check {
            return Err(EscrowError::WrongEpoch {
                given: epoch,
                current: job.epoch,
            });
        }
        if u128::from(now) > u128::from(job.deadline) + u128::from(job.grace) {
            return Err(EscrowError::TooLate);
        }
        let last = job.last_accepted_step;
        if step <= last {
            return Err(EscrowError::StepNotIncreasing {
                step,
                last_accepted: last,
            });
        }
        let total = job.total_steps;
        if step > total || (step != total && !step.is_multiple_of(job.checkpoint_interval)) {
            return Err(EscrowError::StepOffInterval(step));
        }
        let n = sigs.len();
        if n > MAX_VERIFIERS {
            return Err(EscrowError::TooManySignatures);
        }
        if n < usize::from(job.quorum) {
            return Err(EscrowError::QuorumNotReached {
                have: U256::from(n),
                need: U256::from(job.quorum),
            });
        }
        let fields = VoteFields {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            accept,
        };
        // One digest for every signature, computed only if the scheme needs it.
        let mut digest = None;
        let mut seen: Vec<Address> = Vec::with_capacity(n);
        for (index, sig) in sigs.iter().enumerate() {
            let signer = self
                .scheme
                .recover(
                    || *digest.get_or_insert_with(|| fields.digest(&self.domain)),
                    sig,
                )
                .map_err(|_| EscrowError::BadSignature {
                    index: U256::from(index),
                })?;
            if !job.verifiers.contains(&signer) {
                return Err(EscrowError::NotVerifier(signer));
            }
            if seen.contains(&signer) {
                return Err(EscrowError::DuplicateSigner(signer));
            }
            seen.push(signer);
        }
        Ok(last)
    }

    /// `_endEpoch`.
    fn end_epoch(&mut self, i: usize, reason: EpochEndReason, ev: &mut Vec<Event>) {
        let job = &self.jobs[i];
        let (provider, epoch) = (job.provider, job.epoch);
        // Never below zero: every live epoch was counted at its `assign`.
        let st = self.stakes.entry(provider).or_default();
        st.live_epochs = st.live_epochs.saturating_sub(1);
        ev.push(Event::Job(ChainEvent::EpochEnded {
            job_id: U256::from(i as u64 + 1),
            epoch,
            reason,
        }));
    }

    fn credit(&mut self, account: Address, token: Address, amount: U256) {
        *self.withdrawable.entry((account, token)).or_default() += amount;
    }

    fn owe(&mut self, token: Address, f: impl FnOnce(U256) -> U256) {
        let o = self.owed.entry(token).or_default();
        *o = f(*o);
    }
}

/// `createJob`'s arguments, borrowed from the transaction.
struct NewJob<'a> {
    token: Address,
    budget: U256,
    max_price_per_step: U256,
    total_steps: Step,
    checkpoint_interval: Step,
    spec_hash: Hash,
    verifiers: &'a [Address],
    quorum: u8,
    deadline: u64,
    grace: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::SigningKey;

    struct Fixture {
        e: Escrow,
        client: SigningKey,
        prov: SigningKey,
        v1: SigningKey,
        v2: SigningKey,
        token: Address,
    }

    const PARAMS: Params = Params {
        min_stake: U256::from_limbs([100, 0, 0, 0]),
        unbond_delay: 10,
        max_duration: 2_000,
        max_grace: 200,
    };

    fn setup() -> (Fixture, JobId) {
        let token = Address::repeat_byte(0xAA);
        let domain = EscrowDomain {
            chain_id: 31337,
            escrow: Address::repeat_byte(0xEE),
        };
        let e = Escrow::new(domain, Scheme::Secp256k1, token, PARAMS).unwrap();
        let mut f = Fixture {
            e,
            client: SigningKey::from_seed(1),
            prov: SigningKey::from_seed(2),
            v1: SigningKey::from_seed(3),
            v2: SigningKey::from_seed(4),
            token,
        };
        let escrow = f.e.address();
        for (who, amount) in [(f.client.address(), 10_000u64), (f.prov.address(), 1_000)] {
            f.e.mint(token, who, U256::from(amount));
            f.e.approve(token, who, escrow, U256::MAX);
        }
        f.e.apply(
            &Call::Register {
                amount: U256::from(100),
            },
            f.prov.address(),
            1,
        )
        .unwrap();
        let create = ChainTx::CreateJob {
            token,
            budget: U256::from(1_000),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 25,
            spec_hash: Hash::repeat_byte(77),
            verifiers: vec![f.v1.address(), f.v2.address()],
            quorum: 2,
            deadline: 1_000,
            grace: 100,
        };
        let created = f.e.apply(&create.into(), f.client.address(), 1).unwrap();
        // A late reader rebuilds exactly the event the creation emitted.
        assert_eq!(
            created.first().and_then(Event::job),
            f.e.created_event(U256::from(1)).as_ref()
        );
        (f, U256::from(1))
    }

    impl Fixture {
        fn assign(
            &mut self,
            job_id: JobId,
            epoch: Epoch,
            now: u64,
        ) -> Result<Vec<Event>, EscrowError> {
            let price = U256::from(4);
            let fields = BidFields {
                job_id,
                terms: self.e.terms_of(job_id).unwrap_or_default(),
                epoch,
                provider: self.prov.address(),
                price_per_step: price,
                expiry: 500,
            };
            let tx = ChainTx::Assign {
                job_id,
                provider: self.prov.address(),
                price_per_step: price,
                bid_expiry: 500,
                bid_signature: fields.sign(&self.e.domain, &self.prov),
            };
            self.e.apply(&tx.into(), self.client.address(), now)
        }

        fn votes(
            &self,
            job_id: JobId,
            epoch: Epoch,
            step: Step,
            h: Hash,
            accept: bool,
        ) -> Vec<Sig65> {
            let fields = VoteFields {
                job_id,
                epoch,
                step,
                checkpoint_hash: h,
                accept,
            };
            [&self.v1, &self.v2]
                .iter()
                .map(|k| fields.sign(&self.e.domain, k))
                .collect()
        }

        fn decide(
            &mut self,
            accept: bool,
            epoch: Epoch,
            step: Step,
            sigs: Vec<Sig65>,
            now: u64,
        ) -> Result<Vec<Event>, EscrowError> {
            let (job_id, checkpoint_hash) = (U256::from(1), Hash::repeat_byte(5));
            let tx = if accept {
                ChainTx::AcceptCheckpoint {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    sigs,
                }
            } else {
                ChainTx::RejectCheckpoint {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    sigs,
                }
            };
            self.e.apply(&tx.into(), self.v1.address(), now)
        }

        fn books_balance(&self) {
            let held = self.e.balance_of(self.token, self.e.address());
            assert_eq!(held, self.e.owed(self.token));
            assert_eq!(held, self.e.owed_recomputed(self.token));
        }
    }

    #[test]
    fn pays_per_accepted_step_and_refunds_the_rest() {
        let (mut f, j) = setup();
        f.assign(j, 1, 2).unwrap();
        let h = Hash::repeat_byte(5);
        f.decide(true, 1, 25, f.votes(j, 1, 25, h, true), 3)
            .unwrap();
        assert_eq!(f.e.withdrawable(f.prov.address(), f.token), U256::from(100));
        let ev = f
            .decide(true, 1, 100, f.votes(j, 1, 100, h, true), 4)
            .unwrap();
        assert_eq!(
            ev.last(),
            Some(&Event::Job(ChainEvent::JobCompleted {
                job_id: j,
                refund: U256::from(600)
            }))
        );
        assert_eq!(f.e.withdrawable(f.prov.address(), f.token), U256::from(400));
        // Completion credits nothing to the client: `settle` does, once, for anyone.
        assert_eq!(f.e.withdrawable(f.client.address(), f.token), U256::ZERO);
        assert_eq!(f.e.stake_of(f.prov.address()).live_epochs, 0);
        f.books_balance();
        let settle: Call = ChainTx::Settle { job_id: j }.into();
        let stranger = Address::repeat_byte(0x99);
        assert_eq!(
            f.e.apply(&settle, stranger, 5).unwrap(),
            vec![Event::Job(ChainEvent::JobSettled {
                job_id: j,
                client: f.client.address(),
                refund: U256::from(600)
            })]
        );
        assert_eq!(
            f.e.withdrawable(f.client.address(), f.token),
            U256::from(600)
        );
        assert_eq!(
            f.e.apply(&settle, stranger, 6),
            Err(EscrowError::NothingToSettle)
        );
        f.books_balance();
    }

    #[test]
    fn fencing_signatures_slashing_and_expiry_follow_the_contract() {
        let (mut f, j) = setup();
        let h = Hash::repeat_byte(5);
        f.assign(j, 1, 2).unwrap();
        // A bid signed for epoch 1 recovers to a stranger in epoch 2.
        let replay = f.assign(j, 1, 2);
        assert!(
            matches!(replay, Err(EscrowError::WrongSigner { expected, .. }) if expected == f.prov.address()),
            "{replay:?}"
        );
        f.assign(j, 2, 2).unwrap();
        assert_eq!(
            f.decide(true, 1, 25, f.votes(j, 1, 25, h, true), 3),
            Err(EscrowError::WrongEpoch {
                given: 1,
                current: 2
            })
        );
        assert_eq!(
            f.decide(true, 2, 30, f.votes(j, 2, 30, h, true), 3),
            Err(EscrowError::StepOffInterval(30))
        );
        assert_eq!(
            f.decide(true, 2, 25, f.votes(j, 2, 25, h, true)[..1].to_vec(), 3),
            Err(EscrowError::QuorumNotReached {
                have: U256::from(1),
                need: U256::from(2)
            })
        );
        let twice = vec![f.votes(j, 2, 25, h, true)[0]; 2];
        assert_eq!(
            f.decide(true, 2, 25, twice, 3),
            Err(EscrowError::DuplicateSigner(f.v1.address()))
        );
        let mut bad = f.votes(j, 2, 25, h, true);
        bad[1].0[64] = 29;
        assert_eq!(
            f.decide(true, 2, 25, bad, 3),
            Err(EscrowError::BadSignature {
                index: U256::from(1)
            })
        );
        // Accept votes do not count for a reject: they recover to strangers.
        let wrong_kind = f.decide(false, 2, 25, f.votes(j, 2, 25, h, true), 3);
        assert!(
            matches!(wrong_kind, Err(EscrowError::NotVerifier(_))),
            "{wrong_kind:?}"
        );
        let ev = f
            .decide(false, 2, 25, f.votes(j, 2, 25, h, false), 3)
            .unwrap();
        assert!(ev.contains(&Event::Slashed {
            provider: f.prov.address(),
            job_id: j,
            amount: U256::from(100),
        }));
        // Burned: the client that could cause the reject gets nothing from it.
        assert_eq!(f.e.stake_of(f.prov.address()).bonded, U256::ZERO);
        assert_eq!(f.e.burned(), U256::from(100));
        assert_eq!(f.e.withdrawable(f.client.address(), f.token), U256::ZERO);
        assert_eq!(
            f.assign(j, 3, 2),
            Err(EscrowError::InsufficientStake {
                bonded: U256::ZERO,
                needed: U256::from(100)
            })
        );
        let expire: Call = ChainTx::Expire { job_id: j }.into();
        assert_eq!(
            f.e.apply(&expire, f.client.address(), 1099),
            Err(EscrowError::TooEarly {
                allowed_at: U256::from(1100)
            })
        );
        let ev = f.e.apply(&expire, f.client.address(), 1100).unwrap();
        assert_eq!(
            ev,
            vec![Event::Job(ChainEvent::JobExpired {
                job_id: j,
                refund: U256::from(1_000)
            })]
        );
        assert_eq!(
            f.e.apply(&expire, f.client.address(), 1101),
            Err(EscrowError::WrongStatus(Status::Expired))
        );
        let withdraw: Call = ChainTx::Withdraw { token: f.token }.into();
        f.e.apply(&withdraw, f.client.address(), 1101).unwrap();
        assert_eq!(
            f.e.balance_of(f.token, f.client.address()),
            U256::from(10_000)
        );
        assert_eq!(
            f.e.apply(&withdraw, f.client.address(), 1101),
            Err(EscrowError::NothingToWithdraw)
        );
        f.books_balance();
    }

    #[test]
    fn a_failed_pull_reverts_the_whole_call() {
        let (mut f, _) = setup();
        let poor = SigningKey::from_seed(9).address();
        let create = |token| ChainTx::CreateJob {
            token,
            budget: U256::from(1_000),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 25,
            spec_hash: Hash::ZERO,
            verifiers: vec![f.v1.address(), f.v2.address()],
            quorum: 2,
            deadline: 1_000,
            grace: 0,
        };
        let no_allowance = f.e.apply(&create(f.token).into(), poor, 1);
        assert_eq!(
            no_allowance,
            Err(EscrowError::Erc20InsufficientAllowance {
                spender: f.e.address(),
                allowance: U256::ZERO,
                needed: U256::from(1_000)
            })
        );
        f.e.approve(f.token, poor, f.e.address(), U256::from(5_000));
        assert_eq!(
            f.e.apply(&create(f.token).into(), poor, 1),
            Err(EscrowError::Erc20InsufficientBalance {
                sender: poor,
                balance: U256::ZERO,
                needed: U256::from(1_000)
            })
        );
        assert_eq!(
            f.e.apply(
                &create(Address::repeat_byte(0x77)).into(),
                f.client.address(),
                1
            ),
            Err(EscrowError::NotAToken)
        );
        assert_eq!(f.e.job_count(), 1);
        // A finite allowance is spent; an unlimited one is not.
        f.e.mint(f.token, poor, U256::from(1_000));
        f.e.apply(&create(f.token).into(), poor, 1).unwrap();
        assert_eq!(
            f.e.token(f.token).unwrap().allowance(poor, f.e.address()),
            U256::from(4_000)
        );
        assert_eq!(
            f.e.token(f.token)
                .unwrap()
                .allowance(f.client.address(), f.e.address()),
            U256::MAX
        );
        f.books_balance();
    }

    #[test]
    fn simulated_signatures_name_their_signer() {
        let (mut f, j) = setup();
        f.e.scheme = Scheme::Simulated;
        let sim = SigningKey::simulated(2);
        let fields = BidFields {
            job_id: j,
            terms: f.e.terms_of(j).unwrap(),
            epoch: 1,
            provider: sim.address(),
            price_per_step: U256::from(4),
            expiry: 500,
        };
        let tx = ChainTx::Assign {
            job_id: j,
            provider: sim.address(),
            price_per_step: U256::from(4),
            bid_expiry: 500,
            bid_signature: fields.sign(&f.e.domain, &sim),
        };
        f.e.apply(&tx.into(), f.client.address(), 2).unwrap();
        // A secp256k1 signature is refused by the simulated scheme, as its machines refuse it.
        let real = f.votes(j, 1, 25, Hash::ZERO, true);
        assert_eq!(
            f.decide(true, 1, 25, real, 3),
            Err(EscrowError::BadSignature { index: U256::ZERO })
        );
    }

    #[test]
    fn stake_is_reserved_per_epoch_and_a_provider_can_resign() {
        let (mut f, j) = setup();
        // A second job: the provider's one minimum stake cannot back two epochs.
        let token = f.token;
        let create = |verifiers: Vec<Address>, quorum: u8, deadline: u64, grace: u64| {
            Call::from(ChainTx::CreateJob {
                token,
                budget: U256::from(1_000),
                max_price_per_step: U256::from(10),
                total_steps: 100,
                checkpoint_interval: 25,
                spec_hash: Hash::repeat_byte(78),
                verifiers,
                quorum,
                deadline,
                grace,
            })
        };
        let pair = vec![f.v1.address(), f.v2.address()];
        let c = f.client.address();
        assert_eq!(
            f.e.apply(&create(pair.clone(), 2, 2_002, 0), c, 1),
            Err(EscrowError::DeadlineTooFar {
                deadline: 2_002,
                latest: U256::from(2_001)
            })
        );
        assert_eq!(
            f.e.apply(&create(pair.clone(), 2, 900, 201), c, 1),
            Err(EscrowError::GraceTooLong {
                grace: 201,
                max_grace: 200
            })
        );
        assert_eq!(
            f.e.apply(&create(vec![f.v1.address()], 1, 900, 0), c, 1),
            Err(EscrowError::InvalidVerifiers)
        );
        let three = vec![f.v1.address(), f.v2.address(), Address::repeat_byte(3)];
        assert_eq!(
            f.e.apply(&create(three.clone(), 1, 900, 0), c, 1),
            Err(EscrowError::InvalidQuorum)
        );
        assert_eq!(
            f.e.apply(&create(vec![f.v1.address(), c], 2, 900, 0), c, 1),
            Err(EscrowError::ClientIsVerifier)
        );
        let with_provider = vec![f.v1.address(), f.prov.address(), f.v2.address()];
        f.e.apply(&create(with_provider, 2, 900, 0), c, 1).unwrap();
        assert_eq!(
            f.assign(U256::from(2), 1, 2),
            Err(EscrowError::ProviderIsVerifier(f.prov.address()))
        );
        f.e.apply(&create(pair, 2, 900, 0), c, 1).unwrap();
        let k = U256::from(3);
        f.assign(j, 1, 2).unwrap();
        assert_eq!(
            f.assign(k, 1, 2),
            Err(EscrowError::InsufficientStake {
                bonded: U256::from(100),
                needed: U256::from(200)
            })
        );
        // Re-assigning the same provider to its own job releases the old reservation first.
        f.assign(j, 2, 2).unwrap();
        let p = f.prov.address();
        // Only the unreserved part can unbond while an epoch is live.
        f.e.apply(
            &Call::Register {
                amount: U256::from(50),
            },
            p,
            2,
        )
        .unwrap();
        assert_eq!(
            f.e.apply(
                &Call::RequestUnbond {
                    amount: U256::from(51)
                },
                p,
                2
            ),
            Err(EscrowError::StakeLocked {
                free: U256::from(50),
                requested: U256::from(51)
            })
        );
        f.e.apply(
            &Call::RequestUnbond {
                amount: U256::from(50),
            },
            p,
            2,
        )
        .unwrap();
        // Resigning ends the epoch without a slash and frees the rest.
        let resign: Call = ChainTx::Resign { job_id: j }.into();
        assert_eq!(f.e.apply(&resign, c, 3), Err(EscrowError::NotProvider));
        assert_eq!(
            f.e.apply(&resign, p, 3).unwrap(),
            vec![Event::Job(ChainEvent::EpochEnded {
                job_id: j,
                epoch: 2,
                reason: EpochEndReason::Resigned
            })]
        );
        assert_eq!(
            f.e.apply(&resign, p, 3),
            Err(EscrowError::WrongStatus(Status::Open))
        );
        let st = f.e.stake_of(p);
        assert_eq!(
            (st.bonded, st.unbonding, st.live_epochs),
            (U256::from(100), U256::from(50), 0)
        );
        f.e.apply(
            &Call::RequestUnbond {
                amount: U256::from(100),
            },
            p,
            4,
        )
        .unwrap();
        assert_eq!(
            f.e.apply(&Call::WithdrawStake, p, 13),
            Err(EscrowError::TooEarly {
                allowed_at: U256::from(14)
            })
        );
        f.e.apply(&Call::WithdrawStake, p, 14).unwrap();
        assert_eq!(f.e.balance_of(f.token, p), U256::from(1_000));
        assert_eq!(f.e.burned(), U256::ZERO);
        f.books_balance();
    }
}
