//! `JobEscrow.sol` in memory: one model of the contract, on this crate's own types, for the
//! simulator and the protocol tests. Pure like the rest of the crate: the block (number and
//! timestamp), the sender and the block hashes the committee draw reads are arguments.
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
//! - the committee draw is the contract's keccak256 arithmetic (a partial Fisher–Yates
//!   shuffle, [`draw`]) over the same pool order (appended on registration, swap-removed on
//!   unbonding), so it names the same members in the same order; `blockhash` is what the
//!   driver told the model with [`Escrow::record_block_hash`], and zero, as in Solidity, for
//!   a block that is unknown, not yet mined or more than 256 blocks old;
//! - bid and vote signatures are recovered from the EIP-712 digests the contract hashes,
//!   under the [`Scheme`] the signers use: secp256k1 answers exactly as `ECDSA.tryRecover`
//!   does (v, high s, unrecoverable all fail as `BadSignature`). `Scheme::Simulated` is the
//!   simulator's stand-in: a signature names its signer and binds no fields, so a vote over
//!   other fields is not caught there; the machines never submit one, and under secp256k1
//!   (the differential test, and the simulator's default) it is.
//!
//! The rules it holds (docs/interfaces.md, "JobEscrow surface", is the specification):
//! - verifiers stake into a pool; a job's committee is drawn from it by the escrow, never
//!   with the client on it, and no member can be assigned as the job's provider;
//! - each member whose signature is in a decision earns `verifierFee` out of the budget,
//!   credited when the job is settled or expired; a reject pays fees only from the budget's
//!   slack, so the rest of the job at the maximum price stays covered;
//! - a reject slashes (burns) `minStake` only when every member signed it;
//! - an epoch the client ended (replaced or released) can still be paid for its next
//!   checkpoint within `decisionWindow` (a late accept), which then supersedes a live epoch
//!   that started from the old head.
//!
//! The contract changes in later issues; this model changes with it, and the differential
//! test is what says the two still agree.
//!
//! One file on purpose, though long: it mirrors `JobEscrow.sol` function by function in the
//! contract's order, so a reviewer can read the two side by side when either changes.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256, keccak256};

use crate::chain::{ChainEvent, ChainTx, EpochEndReason};
use crate::eip712::{BidFields, EscrowDomain, JobTerms, VoteFields};
use crate::signing::{Scheme, Sig65};
use crate::types::{Epoch, Hash, JobId, Step};

/// The contract refuses larger committees (and more signatures) than this.
pub const MAX_VERIFIERS: usize = 32;
/// The contract refuses smaller committees than this: one key alone would decide.
pub const MIN_VERIFIERS: usize = 2;
/// How far back Solidity's `blockhash` reaches; older blocks hash to zero.
pub const BLOCKHASH_WINDOW: u64 = 256;
/// The largest budget, maximum price or verifier fee `createJob` takes (`AmountTooLarge`
/// above): the contract stores them in 96 bits, which packs an accept's reads into fewer
/// slots. Stakes are bounded by `u128::MAX` instead.
pub const MAX_JOB_AMOUNT: U256 = U256::from_limbs([u64::MAX, u32::MAX as u64, 0, 0]);

/// `createJob`'s quorum rule: a strict majority of the committee, so an accepting and a
/// rejecting quorum always share a member. The provider vets jobs by it, and the node
/// checks a submission by it, before the escrow does.
pub fn is_strict_majority(quorum: u8, committee_size: usize) -> bool {
    let q = usize::from(quorum);
    q * 2 > committee_size && q <= committee_size
}

/// `⌈steps / interval⌉`: the decisions left in `steps` (the final step is a checkpoint even
/// off the interval). Zero for a zero interval, which `createJob` refuses anyway.
pub fn checkpoints_in(steps: Step, interval: Step) -> u64 {
    if interval == 0 {
        return 0;
    }
    steps.div_ceil(interval)
}

/// What `steps` more steps can still cost a job: every step at the maximum price and a fee
/// for every member on every checkpoint. `createJob` wants a budget of at least this for
/// the whole job (`BudgetTooSmall`), and a reject pays fees only from what exceeds it.
pub fn cost_bound(
    max_price_per_step: U256,
    steps: Step,
    interval: Step,
    verifier_fee: U256,
    committee_size: u8,
) -> U256 {
    max_price_per_step * U256::from(steps)
        + verifier_fee * U256::from(committee_size) * U256::from(checkpoints_in(steps, interval))
}

/// `keccak256(abi.encode(blockhash(seedBlock), jobId))`: the seed of a job's draw.
pub fn draw_seed(block_hash: Hash, job_id: JobId) -> Hash {
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(block_hash.as_slice());
    buf[32..].copy_from_slice(&job_id.to_be_bytes::<32>());
    keccak256(buf)
}

/// `drawCommittee`'s draw: a partial Fisher–Yates shuffle of the pool's indices, uniform
/// without replacement. Step i (from 0) swaps position i of the permutation (the identity at
/// first) with position `j = i + keccak256(abi.encode(seed, i)) % (n - i)` and draws the index
/// it brings to position i; a step that draws the client is skipped, and steps go on until
/// `size` seats are filled (at most `size + 1` steps). Seat k is member index k + 1. Every
/// committee of `size` distinct non-client entries is equally likely, neighbours in the pool
/// or not. `None` when the pool holds fewer than `size` accounts besides the client (the
/// contract reverts with `NotEnoughVerifiers` before drawing).
pub fn draw(seed: Hash, pool: &[Address], client: Address, size: usize) -> Option<Vec<Address>> {
    let n = pool.len();
    let available = n - usize::from(pool.contains(&client));
    if available < size || n == 0 {
        return None;
    }
    // Only the positions a swap wrote to; every other position holds its own index.
    let mut moved: BTreeMap<usize, usize> = BTreeMap::new();
    let mut committee: Vec<Address> = Vec::with_capacity(size);
    let mut i = 0usize;
    while committee.len() < size {
        // i < n: at most one step draws the client, and `available ≥ size`.
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(seed.as_slice());
        buf[32..].copy_from_slice(&U256::from(i).to_be_bytes::<32>());
        let word = U256::from_be_bytes(keccak256(buf).0);
        let j = i + usize::try_from(word % U256::from(n - i)).ok()?;
        let at_i = moved.get(&i).copied().unwrap_or(i);
        let at_j = moved.get(&j).copied().unwrap_or(j);
        // Position i now holds `at_j` and is never read again; position j holds `at_i`.
        moved.remove(&i);
        moved.insert(j, at_i);
        i += 1;
        let v = pool[at_j];
        if v != client {
            committee.push(v);
        }
    }
    Some(committee)
}

/// `JobEscrow.Status`; the codes are the Solidity enum's (`None` is 0 and never stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    None,
    Open,
    Assigned,
    Completed,
    Expired,
    /// Created, waiting for `drawCommittee`: no bids can be assigned yet.
    Drawing,
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
            5 => Status::Drawing,
            _ => return None,
        })
    }

    /// Open or assigned: a provider can be assigned and decisions can land.
    pub fn is_live(self) -> bool {
        matches!(self, Status::Open | Status::Assigned)
    }

    /// Drawing, open or assigned: `expire` can exit it.
    pub fn can_expire(self) -> bool {
        matches!(self, Status::Drawing | Status::Open | Status::Assigned)
    }

    /// The job's `remaining` is still the escrow's to pay out: not yet expired (a settled
    /// job's `remaining` is zero).
    pub fn holds_budget(self) -> bool {
        matches!(
            self,
            Status::Drawing | Status::Open | Status::Assigned | Status::Completed
        )
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
    #[error("BudgetTooSmall({budget}, {needed})")]
    BudgetTooSmall { budget: U256, needed: U256 },
    #[error("NotEnoughVerifiers({available}, {needed})")]
    NotEnoughVerifiers { available: U256, needed: U256 },
    #[error("SeedNotMined({0})")]
    SeedNotMined(u64),
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
    #[error("WindowClosed({window_end})")]
    WindowClosed { window_end: u64 },
    #[error("MovedOn({last_accepted}, {step_at_end})")]
    MovedOn {
        last_accepted: Step,
        step_at_end: Step,
    },
    #[error("BeyondNextCheckpoint({0})")]
    BeyondNextCheckpoint(Step),
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
            EscrowError::BudgetTooSmall { .. } => "BudgetTooSmall",
            EscrowError::NotEnoughVerifiers { .. } => "NotEnoughVerifiers",
            EscrowError::SeedNotMined(_) => "SeedNotMined",
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
            EscrowError::WindowClosed { .. } => "WindowClosed",
            EscrowError::MovedOn { .. } => "MovedOn",
            EscrowError::BeyondNextCheckpoint(_) => "BeyondNextCheckpoint",
            EscrowError::Panic(_) => "Panic",
            EscrowError::Erc20InsufficientBalance { .. } => "ERC20InsufficientBalance",
            EscrowError::Erc20InsufficientAllowance { .. } => "ERC20InsufficientAllowance",
            EscrowError::NotAToken => "(no data)",
        }
    }
}

/// A call to the escrow: the transactions the role machines submit ([`ChainTx`]) and the
/// stake calls the node's chain client makes around them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Tx(ChainTx),
    Register { amount: U256 },
    RequestUnbond { amount: U256 },
    WithdrawStake,
    RegisterVerifier { amount: U256 },
    RequestVerifierUnbond { amount: U256 },
    WithdrawVerifierStake,
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
                ChainTx::DrawCommittee { .. } => "drawCommittee",
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
            Call::RegisterVerifier { .. } => "registerVerifier",
            Call::RequestVerifierUnbond { .. } => "requestVerifierUnbond",
            Call::WithdrawVerifierStake => "withdrawVerifierStake",
        }
    }
}

/// The block a call is mined in: `block.number` (the committee draw's seed) and
/// `block.timestamp` (deadlines, windows, unbonding), in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Block {
    pub number: u64,
    pub time: u64,
}

/// An event the escrow emits: the job events the machines consume ([`ChainEvent`]) and the
/// stake, fee and payout events only books and tests read.
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
    /// `settle` or `expire` credited `verifier` its fees for the job (paid decisions × fee).
    FeesCredited {
        job_id: JobId,
        verifier: Address,
        amount: U256,
    },
    VerifierStaked {
        verifier: Address,
        amount: U256,
        total: U256,
    },
    VerifierUnbondRequested {
        verifier: Address,
        amount: U256,
        available_at: u64,
    },
    VerifierStakeWithdrawn {
        verifier: Address,
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
    /// Budget not yet paid out as steps or fees, nor refunded.
    pub remaining: U256,
    pub max_price_per_step: U256,
    pub deposit: U256,
    pub checkpoint_interval: Step,
    pub deadline: u64,
    pub grace: u64,
    pub last_checkpoint_hash: Hash,
    pub spec_hash: Hash,
    /// In draw order; empty until `drawCommittee`.
    pub committee: Vec<Address>,
    pub committee_size: u8,
    pub verifier_fee: U256,
    /// The block whose hash seeds the draw (moved when that hash is gone).
    pub seed_block: u64,
    /// `settle` ran (once per job).
    pub settled: bool,
    /// [`JobTerms::hash`] of the job and its committee: what bids are signed over; zero
    /// until the draw.
    pub terms: Hash,
    /// Decisions each member earned a fee for, by committee position (`memberOf().paid`).
    pub paid: Vec<u64>,
}

impl Job {
    /// The member's position in the committee.
    pub fn member_index(&self, account: Address) -> Option<usize> {
        self.committee.iter().position(|m| *m == account)
    }

    /// Fees taken from the budget and not yet credited to the committee: credited by
    /// `settle` or `expire`, held by the escrow until then.
    pub fn fees_pending(&self) -> U256 {
        if self.settled || self.status == Status::Expired {
            return U256::ZERO;
        }
        let paid: u64 = self.paid.iter().sum();
        self.verifier_fee * U256::from(paid)
    }
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

/// A verifier's stake, as `verifierStakeOf` returns it. Never slashed nor reserved: it makes
/// a pool seat cost capital.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifierStake {
    pub bonded: U256,
    pub unbonding: U256,
    /// When `unbonding` can be withdrawn.
    pub unbond_at: u64,
    /// In the pool committees are drawn from (`bonded ≥ min_verifier_stake`).
    pub pooled: bool,
}

/// The record `closedEpoch` returns: what a late accept of an epoch the client ended pays
/// (zeros when there is none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClosedEpoch {
    pub provider: Address,
    pub price_per_step: U256,
    /// The job's head when the epoch ended: the record pays only the checkpoint after it,
    /// and only while the head is still there.
    pub step_at_end: Step,
    pub window_end: u64,
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
    /// A reject slashes even when not every member signed it (one byzantine majority takes
    /// an honest provider's stake).
    pub slash_without_unanimity: bool,
    /// A reject pays its signers' fees even from a budget without slack (rejects can drain
    /// what later accepts need).
    pub reject_fees_without_slack: bool,
    /// A late accept lands after the decision window closed.
    pub late_accept_after_window: bool,
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
    /// Seconds after the client ends an epoch during which a quorum's accept of that
    /// epoch's next checkpoint still lands (may be 0: only in the block that ended it).
    pub decision_window: u64,
    /// Bonded verifier stake that puts an account in the pool.
    pub min_verifier_stake: U256,
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
    pub decision_window: u64,
    pub min_verifier_stake: U256,
    pub bugs: Bugs,
    /// Slashed stake: held by the escrow, owed to nobody.
    burned: U256,
    tokens: BTreeMap<Address, Token>,
    jobs: Vec<Job>,
    stakes: BTreeMap<Address, Stake>,
    verifier_stakes: BTreeMap<Address, VerifierStake>,
    /// The verifier pool in the contract's order: appended on crossing the minimum,
    /// swap-removed on falling below it. The draw indexes it, so the order is the contract's.
    pool: Vec<Address>,
    /// The block of the pool's last join or leave (`poolChangedAt`): a draw whose seed block
    /// is older moves its seed instead, so nobody who has seen the seed can pick the pool
    /// that gives the committee they want.
    pool_changed_at: u64,
    /// Epochs the client ended, by (job index, epoch), until a late accept uses them.
    closed: BTreeMap<(usize, Epoch), ClosedEpoch>,
    /// The block hashes the driver recorded (the last [`BLOCKHASH_WINDOW`] or so).
    block_hashes: BTreeMap<u64, Hash>,
    withdrawable: BTreeMap<(Address, Address), U256>,
    /// What the escrow accounts for per token (budgets left, fees pending, credits, stakes
    /// and burned stake), kept by each call: a running total to compare with its balance
    /// cheaply; [`Escrow::owed_recomputed`] is the slow, independent one.
    owed: BTreeMap<Address, U256>,
}

impl Escrow {
    /// A freshly deployed escrow. The stake token exists (with no balances); like the
    /// contract's constructor, a zero token, a zero minimum (verifier) stake or a zero
    /// maximum duration is refused.
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
            decision_window,
            min_verifier_stake,
        } = params;
        if stake_token == Address::ZERO {
            return Err(EscrowError::ZeroAddress);
        }
        if min_stake.is_zero() || max_duration == 0 || min_verifier_stake.is_zero() {
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
            decision_window,
            min_verifier_stake,
            bugs: Bugs::default(),
            burned: U256::ZERO,
            tokens,
            jobs: Vec::new(),
            stakes: BTreeMap::new(),
            verifier_stakes: BTreeMap::new(),
            pool: Vec::new(),
            pool_changed_at: 0,
            closed: BTreeMap::new(),
            block_hashes: BTreeMap::new(),
            withdrawable: BTreeMap::new(),
            owed: BTreeMap::new(),
        })
    }

    /// The escrow's own account.
    pub fn address(&self) -> Address {
        self.domain.escrow
    }

    // ------------------------------------------------------------ blocks

    /// Tells the model the hash of block `number` (the chain's, or any the driver makes up):
    /// what `blockhash(number)` returns to a call in a later block, up to 256 blocks later.
    /// Hashes far older than the newest one recorded are forgotten, as they are unreadable.
    pub fn record_block_hash(&mut self, number: u64, hash: Hash) {
        self.block_hashes.insert(number, hash);
        let newest = self
            .block_hashes
            .keys()
            .next_back()
            .copied()
            .unwrap_or(number);
        let oldest_readable = newest.saturating_sub(BLOCKHASH_WINDOW);
        self.block_hashes = self.block_hashes.split_off(&oldest_readable);
    }

    /// Solidity's `blockhash(number)` as a call in block `current` reads it: zero for the
    /// current or a later block, one more than 256 blocks back, or one never recorded.
    pub fn blockhash(&self, number: u64, current: u64) -> Hash {
        if number >= current || current - number > BLOCKHASH_WINDOW {
            return Hash::ZERO;
        }
        self.block_hashes.get(&number).copied().unwrap_or_default()
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

    /// `termsOf` (zero before the draw).
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

    /// `verifierStakeOf`.
    pub fn verifier_stake_of(&self, verifier: Address) -> VerifierStake {
        self.verifier_stakes
            .get(&verifier)
            .copied()
            .unwrap_or_default()
    }

    /// Every account that ever staked as a verifier, with its stake.
    pub fn verifier_stakes(&self) -> impl Iterator<Item = (Address, VerifierStake)> + '_ {
        self.verifier_stakes.iter().map(|(a, s)| (*a, *s))
    }

    /// The verifier pool in the contract's order (`poolAt(0..poolSize())`).
    pub fn pool(&self) -> &[Address] {
        &self.pool
    }

    /// The block of the pool's last join or leave (`poolChangedAt`).
    pub fn pool_changed_at(&self) -> u64 {
        self.pool_changed_at
    }

    /// `memberOf(jobId, account)`: the 1-based committee position and the decisions it
    /// earned a fee for; zeros for a non-member or an unknown job (the view does not revert).
    pub fn member_of(&self, id: JobId, account: Address) -> (u8, u64) {
        let Some(job) = self.job(id) else {
            return (0, 0);
        };
        match job.member_index(account) {
            Some(i) => (
                u8::try_from(i + 1).unwrap_or(u8::MAX),
                job.paid.get(i).copied().unwrap_or(0),
            ),
            None => (0, 0),
        }
    }

    /// `isVerifier`: a member of the job's committee.
    pub fn is_verifier(&self, id: JobId, account: Address) -> bool {
        self.job(id).is_some_and(|j| j.committee.contains(&account))
    }

    /// `closedEpoch`: the record a late accept of `epoch` would use; zeros when there is
    /// none (live, not ended by the client, already used, or an unknown job).
    pub fn closed_epoch(&self, id: JobId, epoch: Epoch) -> ClosedEpoch {
        self.existing(id)
            .ok()
            .and_then(|i| self.closed.get(&(i, epoch)).copied())
            .unwrap_or_default()
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
    /// that learns of a job late reads it, not the log). Its `seed_block` is the current
    /// one, which a `CommitteeSeedMoved` may have moved since the creation.
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
            committee_size: j.committee_size,
            quorum: j.quorum,
            verifier_fee: j.verifier_fee,
            deadline: j.deadline,
            grace: j.grace,
            seed_block: j.seed_block,
        })
    }

    /// The job's `CommitteeDrawn` event rebuilt from `getJob`; `None` before the draw.
    pub fn drawn_event(&self, id: JobId) -> Option<ChainEvent> {
        let j = self.job(id)?;
        if j.committee.is_empty() {
            return None;
        }
        Some(ChainEvent::CommitteeDrawn {
            job_id: id,
            committee: j.committee.clone(),
            terms: j.terms,
        })
    }

    /// What the escrow owes in `token` by its running books.
    pub fn owed(&self, token: Address) -> U256 {
        self.owed.get(&token).copied().unwrap_or_default()
    }

    /// What the escrow accounts for in `token`, recomputed from scratch: budgets not yet
    /// paid out, fees not yet credited, credits and (in the stake token) provider and
    /// verifier stakes bonded or unbonding, and burned stake. Equals its balance when the
    /// books conserve funds.
    pub fn owed_recomputed(&self, token: Address) -> U256 {
        let budgets = self
            .jobs
            .iter()
            .filter(|j| j.token == token)
            .fold(U256::ZERO, |a, j| {
                let left = if j.status.holds_budget() {
                    j.remaining
                } else {
                    U256::ZERO
                };
                a + left + j.fees_pending()
            });
        let credits = self
            .withdrawable
            .iter()
            .filter(|((_, t), _)| *t == token)
            .fold(U256::ZERO, |a, (_, v)| a + v);
        let stakes = if token == self.stake_token {
            let providers = self
                .stakes
                .values()
                .fold(self.burned, |a, s| a + s.bonded + s.unbonding);
            self.verifier_stakes
                .values()
                .fold(providers, |a, s| a + s.bonded + s.unbonding)
        } else {
            U256::ZERO
        };
        budgets + credits + stakes
    }

    // ------------------------------------------------------------- calls

    /// Executes `call` from `sender` in `block`. On error nothing changed, as with a
    /// reverted transaction.
    pub fn apply(
        &mut self,
        call: &Call,
        sender: Address,
        block: Block,
    ) -> Result<Vec<Event>, EscrowError> {
        let mut ev = Vec::new();
        let now = block.time;
        match call {
            Call::Tx(tx) => self.apply_tx(tx, sender, block, &mut ev)?,
            Call::Register { amount } => self.register(sender, *amount, &mut ev)?,
            Call::RequestUnbond { amount } => self.request_unbond(sender, *amount, now, &mut ev)?,
            Call::WithdrawStake => self.withdraw_stake(sender, now, &mut ev)?,
            Call::RegisterVerifier { amount } => {
                self.register_verifier(sender, *amount, block.number, &mut ev)?
            }
            Call::RequestVerifierUnbond { amount } => {
                self.request_verifier_unbond(sender, *amount, block, &mut ev)?
            }
            Call::WithdrawVerifierStake => self.withdraw_verifier_stake(sender, now, &mut ev)?,
        }
        Ok(ev)
    }

    fn apply_tx(
        &mut self,
        tx: &ChainTx,
        sender: Address,
        block: Block,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let now = block.time;
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
            } => self.create_job(
                sender,
                block,
                NewJob {
                    token: *token,
                    budget: *budget,
                    max_price_per_step: *max_price_per_step,
                    total_steps: *total_steps,
                    checkpoint_interval: *checkpoint_interval,
                    spec_hash: *spec_hash,
                    committee_size: *committee_size,
                    quorum: *quorum,
                    verifier_fee: *verifier_fee,
                    deadline: *deadline,
                    grace: *grace,
                },
                ev,
            ),
            ChainTx::DrawCommittee { job_id } => self.draw_committee(*job_id, block, ev),
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
                self.close_epoch(i, now, EpochEndReason::Released, ev)?;
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
                if !status.can_expire() {
                    return Err(EscrowError::WrongStatus(status));
                }
                let allowed_at = U256::from(job.deadline) + U256::from(job.grace);
                if U256::from(now) < allowed_at || self.bugs.never_expire {
                    return Err(EscrowError::TooEarly { allowed_at });
                }
                if status == Status::Assigned {
                    self.end_epoch(i, EpochEndReason::Expired, ev);
                }
                self.credit_fees(i, ev);
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
                if job.settled {
                    return Err(EscrowError::NothingToSettle);
                }
                // The fees first, then the refund, as `expire` does.
                self.credit_fees(i, ev);
                let job = &mut self.jobs[i];
                job.settled = true;
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
        block: Block,
        j: NewJob,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let now = block.time;
        if j.token == Address::ZERO {
            return Err(EscrowError::ZeroAddress);
        }
        if j.budget.is_zero() || j.max_price_per_step.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        if j.budget > MAX_JOB_AMOUNT
            || j.max_price_per_step > MAX_JOB_AMOUNT
            || j.verifier_fee > MAX_JOB_AMOUNT
        {
            return Err(EscrowError::AmountTooLarge);
        }
        if j.total_steps == 0 || j.checkpoint_interval == 0 || j.checkpoint_interval > j.total_steps
        {
            return Err(EscrowError::InvalidSteps);
        }
        let size = usize::from(j.committee_size);
        if !(MIN_VERIFIERS..=MAX_VERIFIERS).contains(&size) {
            return Err(EscrowError::InvalidVerifiers);
        }
        if !is_strict_majority(j.quorum, size) {
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
        // uint96 × uint64 (+ uint96 × uint8 × uint64) cannot overflow uint256.
        let needed = cost_bound(
            j.max_price_per_step,
            j.total_steps,
            j.checkpoint_interval,
            j.verifier_fee,
            j.committee_size,
        );
        if j.budget < needed {
            return Err(EscrowError::BudgetTooSmall {
                budget: j.budget,
                needed,
            });
        }
        let available = self.pool_available(sender);
        if available < size {
            return Err(EscrowError::NotEnoughVerifiers {
                available: U256::from(available),
                needed: U256::from(size),
            });
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
        self.jobs.push(Job {
            client: sender,
            epoch: 0,
            status: Status::Drawing,
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
            committee: Vec::new(),
            committee_size: j.committee_size,
            verifier_fee: j.verifier_fee,
            seed_block: block.number,
            settled: false,
            terms: Hash::ZERO,
            paid: Vec::new(),
        });
        ev.push(Event::Job(ChainEvent::JobCreated {
            job_id,
            client: sender,
            token: j.token,
            budget: j.budget,
            max_price_per_step: j.max_price_per_step,
            total_steps: j.total_steps,
            checkpoint_interval: j.checkpoint_interval,
            spec_hash: j.spec_hash,
            committee_size: j.committee_size,
            quorum: j.quorum,
            verifier_fee: j.verifier_fee,
            deadline: j.deadline,
            grace: j.grace,
            seed_block: block.number,
        }));
        Ok(())
    }

    /// Pooled verifiers other than `client`: who a committee of its job can be drawn from.
    fn pool_available(&self, client: Address) -> usize {
        let client_pooled = self.verifier_stake_of(client).pooled;
        self.pool.len() - usize::from(client_pooled)
    }

    fn draw_committee(
        &mut self,
        job_id: JobId,
        block: Block,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let i = self.existing(job_id)?;
        let job = &self.jobs[i];
        if job.status != Status::Drawing {
            return Err(EscrowError::WrongStatus(job.status));
        }
        let seed_block = job.seed_block;
        if block.number <= seed_block {
            return Err(EscrowError::SeedNotMined(seed_block));
        }
        let hash = self.blockhash(seed_block, block.number);
        if hash == Hash::ZERO || self.pool_changed_at > seed_block {
            // Nobody drew within 256 blocks, or the pool changed after the seed was mined
            // (someone who had seen it could have picked the change that draws the committee
            // they want): a fresh seed, not a revert, so the job still gets a committee.
            self.jobs[i].seed_block = block.number;
            ev.push(Event::Job(ChainEvent::CommitteeSeedMoved {
                job_id,
                seed_block: block.number,
            }));
            return Ok(());
        }
        let (client, size) = (job.client, usize::from(job.committee_size));
        let available = self.pool_available(client);
        let committee = draw(draw_seed(hash, job_id), &self.pool, client, size)
            .filter(|_| available >= size)
            .ok_or(EscrowError::NotEnoughVerifiers {
                available: U256::from(available),
                needed: U256::from(size),
            })?;
        let job = &mut self.jobs[i];
        let terms = JobTerms {
            client: job.client,
            token: job.token,
            budget: job.deposit,
            max_price_per_step: job.max_price_per_step,
            total_steps: job.total_steps,
            checkpoint_interval: job.checkpoint_interval,
            spec_hash: job.spec_hash,
            committee: &committee,
            quorum: job.quorum,
            verifier_fee: job.verifier_fee,
            deadline: job.deadline,
            grace: job.grace,
        }
        .hash();
        job.paid = vec![0; committee.len()];
        job.committee = committee.clone();
        job.terms = terms;
        job.status = Status::Open;
        ev.push(Event::Job(ChainEvent::CommitteeDrawn {
            job_id,
            committee,
            terms,
        }));
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
        if job.committee.contains(&provider) {
            return Err(EscrowError::ProviderIsVerifier(provider));
        }
        let new_epoch = job.epoch + 1;
        let terms = job.terms;
        // The contract closes the live epoch before the stake check, so a provider
        // re-assigned to its own job needs no second reservation (a later revert undoes the
        // close). The model checks first and closes on success: the same outcome.
        let window_end = if status == Status::Assigned {
            Some(self.window_end(now)?)
        } else {
            None
        };
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
        if let Some(window_end) = window_end {
            self.record_closed(i, window_end);
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
        let job = &self.jobs[i];
        let live =
            job.status == Status::Assigned && (epoch == job.epoch || self.bugs.skip_epoch_check);
        if !live {
            return self.accept_late(i, job_id, now, epoch, step, checkpoint_hash, sigs, ev);
        }
        let (last, signers) =
            self.check_decision(i, job_id, now, epoch, step, checkpoint_hash, true, sigs)?;
        let job = &self.jobs[i];
        let (provider, price) = (job.provider, job.price_per_step);
        let completes = self.pay_accept(
            i,
            job_id,
            epoch,
            step,
            checkpoint_hash,
            provider,
            price,
            last,
            &signers,
            ev,
        )?;
        if completes {
            let job = &mut self.jobs[i];
            job.status = Status::Completed;
            let refund = job.remaining;
            let st = self.stakes.entry(provider).or_default();
            st.live_epochs = st.live_epochs.saturating_sub(1);
            ev.push(Event::Job(ChainEvent::EpochEnded {
                job_id,
                epoch,
                reason: EpochEndReason::Completed,
            }));
            ev.push(Event::Job(ChainEvent::JobCompleted { job_id, refund }));
        }
        Ok(())
    }

    /// `_acceptLate`: the accept of a checkpoint of an epoch the client ended. Bounded so
    /// that fencing stays sound: within the window, only the next checkpoint after the head
    /// the epoch ended at, only while that head is still the job's, once.
    #[allow(clippy::too_many_arguments)]
    fn accept_late(
        &mut self,
        i: usize,
        job_id: JobId,
        now: u64,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: &[Sig65],
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let job = &self.jobs[i];
        let status = job.status;
        let Some(c) = self.closed.get(&(i, epoch)).copied() else {
            if status != Status::Assigned {
                return Err(EscrowError::WrongStatus(status));
            }
            return Err(EscrowError::WrongEpoch {
                given: epoch,
                current: job.epoch,
            });
        };
        if !status.is_live() {
            return Err(EscrowError::WrongStatus(status));
        }
        if now > c.window_end && !self.bugs.late_accept_after_window {
            return Err(EscrowError::WindowClosed {
                window_end: c.window_end,
            });
        }
        if u128::from(now) > u128::from(job.deadline) + u128::from(job.grace) {
            return Err(EscrowError::TooLate);
        }
        let last = job.last_accepted_step;
        if last != c.step_at_end {
            return Err(EscrowError::MovedOn {
                last_accepted: last,
                step_at_end: c.step_at_end,
            });
        }
        if step <= last {
            return Err(EscrowError::StepNotIncreasing {
                step,
                last_accepted: last,
            });
        }
        let (total, interval) = (job.total_steps, job.checkpoint_interval);
        if step > total || (step != total && !step.is_multiple_of(interval)) {
            return Err(EscrowError::StepOffInterval(step));
        }
        if step - last > interval {
            return Err(EscrowError::BeyondNextCheckpoint(step));
        }
        let signers = self.check_quorum(i, job_id, epoch, step, checkpoint_hash, true, sigs)?;
        let completes = self.pay_accept(
            i,
            job_id,
            epoch,
            step,
            checkpoint_hash,
            c.provider,
            c.price_per_step,
            last,
            &signers,
            ev,
        )?;
        self.closed.remove(&(i, epoch));
        if status == Status::Assigned {
            // The live epoch started from the old head: the job goes on from the new one.
            self.end_epoch(i, EpochEndReason::Superseded, ev);
            self.jobs[i].status = Status::Open;
        }
        if completes {
            let job = &mut self.jobs[i];
            job.status = Status::Completed;
            let refund = job.remaining;
            ev.push(Event::Job(ChainEvent::JobCompleted { job_id, refund }));
        }
        Ok(())
    }

    /// The payment of an accept, live or late: `(step − last) × price` to `provider` and
    /// the fee to each signer out of the budget, the head moved, `CheckpointAccepted`.
    /// Whether the accept completes the job.
    #[allow(clippy::too_many_arguments)]
    fn pay_accept(
        &mut self,
        i: usize,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        price: U256,
        last: Step,
        signers: &[usize],
        ev: &mut Vec<Event>,
    ) -> Result<bool, EscrowError> {
        let free_money = self.bugs.free_money;
        let job = &self.jobs[i];
        // price ≤ maxPrice, and `remaining` covers the rest of the job at the maximum
        // price with every fee (`cost_bound`): this never underflows.
        let amount = U256::from(step - last) * price;
        let fees = job.verifier_fee * U256::from(signers.len());
        let debit = if free_money { fees } else { amount + fees };
        let remaining = job
            .remaining
            .checked_sub(debit)
            .ok_or(EscrowError::Panic(0x11))?;
        let token = job.token;
        let voters = voters_of(signers);
        let job = &mut self.jobs[i];
        job.remaining = remaining;
        job.last_accepted_step = step;
        job.last_checkpoint_hash = checkpoint_hash;
        for s in signers {
            if let Some(p) = job.paid.get_mut(*s) {
                *p += 1;
            }
        }
        let completes = step == job.total_steps;
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
            voters,
            fees,
        }));
        Ok(completes)
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
        let (last, signers) =
            self.check_decision(i, job_id, now, epoch, step, checkpoint_hash, false, sigs)?;
        let job = &self.jobs[i];
        let provider = job.provider;
        let fees_asked = job.verifier_fee * U256::from(signers.len());
        // Fees come only out of the slack above what the rest of the job can cost, so
        // rejects cannot drain what later accepts need.
        let reserve = cost_bound(
            job.max_price_per_step,
            job.total_steps - last,
            job.checkpoint_interval,
            job.verifier_fee,
            job.committee_size,
        ) + fees_asked;
        // Whether the signers earn their fee: counted in `paid` even when the fee is zero.
        let pay = job.remaining >= reserve || self.bugs.reject_fees_without_slack;
        let fees = if pay { fees_asked } else { U256::ZERO };
        let remaining = job
            .remaining
            .checked_sub(fees)
            .ok_or(EscrowError::Panic(0x11))?;
        // One honest member keeps an honest provider's stake whole: only a unanimous
        // committee slashes.
        let unanimous = signers.len() == job.committee.len() || self.bugs.slash_without_unanimity;
        let voters = voters_of(&signers);
        let job = &mut self.jobs[i];
        job.remaining = remaining;
        if pay {
            for s in &signers {
                if let Some(p) = job.paid.get_mut(*s) {
                    *p += 1;
                }
            }
        }
        let slashed = if unanimous {
            let st = self.stakes.entry(provider).or_default();
            // Every live epoch reserves `min_stake`, so this is `min_stake` unless the books
            // broke.
            let slashed = st.bonded.min(self.min_stake);
            st.bonded -= slashed;
            // Burned, not paid to anyone: whoever could cause a reject must not profit.
            self.burned += slashed;
            slashed
        } else {
            U256::ZERO
        };
        ev.push(Event::Job(ChainEvent::CheckpointRejected {
            job_id,
            epoch,
            step,
            checkpoint_hash,
            provider,
            slashed,
            voters,
            fees,
        }));
        if unanimous {
            ev.push(Event::Slashed {
                provider,
                job_id,
                amount: slashed,
            });
        }
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
        let total = self.pull_stake(sender, st.bonded, amount)?;
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

    /// `bonded + amount` (a checked uint256 addition, then the uint128 bound), and the pull
    /// of `amount` of the stake token: the new bonded total.
    fn pull_stake(
        &mut self,
        sender: Address,
        bonded: U256,
        amount: U256,
    ) -> Result<U256, EscrowError> {
        let total = bonded.checked_add(amount).ok_or(EscrowError::Panic(0x11))?;
        if total > U256::from(u128::MAX) {
            return Err(EscrowError::AmountTooLarge);
        }
        let escrow = self.address();
        let token = self.stake_token;
        let t = self.tokens.entry(token).or_default();
        t.check_transfer_from(escrow, sender, amount)?;
        t.move_checked(Some(escrow), sender, escrow, amount);
        self.owe(token, |o| o + amount);
        Ok(total)
    }

    /// `withdrawStake`'s and `withdrawVerifierStake`'s checks, then the payout of the
    /// stake's `unbonding` part to `to` in the stake token: what was paid.
    fn pay_unbonded(
        &mut self,
        to: Address,
        unbonding: U256,
        unbond_at: u64,
        now: u64,
    ) -> Result<U256, EscrowError> {
        if unbonding.is_zero() {
            return Err(EscrowError::NotUnbonding);
        }
        if now < unbond_at {
            return Err(EscrowError::TooEarly {
                allowed_at: U256::from(unbond_at),
            });
        }
        let escrow = self.address();
        let token = self.stake_token;
        let t = self.tokens.entry(token).or_default();
        t.check_transfer(escrow, unbonding)?;
        t.move_checked(None, escrow, to, unbonding);
        self.owe(token, |o| o.saturating_sub(unbonding));
        Ok(unbonding)
    }

    /// When stake unbonding from `now` on can be withdrawn (both kinds of stake).
    fn unbond_available_at(&self, now: u64) -> Result<u64, EscrowError> {
        now.checked_add(self.unbond_delay)
            .ok_or(EscrowError::Panic(0x11))
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
        let available_at = self.unbond_available_at(now)?;
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
        let amount = self.pay_unbonded(sender, st.unbonding, st.unbond_at, now)?;
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

    fn register_verifier(
        &mut self,
        sender: Address,
        amount: U256,
        block_number: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        if amount.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        let st = self.verifier_stake_of(sender);
        let total = self.pull_stake(sender, st.bonded, amount)?;
        let joins = !st.pooled && total >= self.min_verifier_stake;
        if joins {
            self.pool.push(sender);
            self.pool_changed_at = block_number;
        }
        self.verifier_stakes.insert(
            sender,
            VerifierStake {
                bonded: total,
                pooled: st.pooled || joins,
                ..st
            },
        );
        ev.push(Event::VerifierStaked {
            verifier: sender,
            amount,
            total,
        });
        Ok(())
    }

    fn request_verifier_unbond(
        &mut self,
        sender: Address,
        amount: U256,
        block: Block,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let (now, block_number) = (block.time, block.number);
        if amount.is_zero() {
            return Err(EscrowError::ZeroAmount);
        }
        let st = self.verifier_stake_of(sender);
        if amount > st.bonded {
            return Err(EscrowError::StakeLocked {
                free: st.bonded,
                requested: amount,
            });
        }
        let available_at = self.unbond_available_at(now)?;
        let bonded = st.bonded - amount;
        let leaves = st.pooled && bonded < self.min_verifier_stake;
        if leaves && let Some(at) = self.pool.iter().position(|a| *a == sender) {
            // The contract's swap-remove: the last entry takes the leaver's place, which is
            // what later draws index.
            self.pool.swap_remove(at);
            self.pool_changed_at = block_number;
        }
        self.verifier_stakes.insert(
            sender,
            VerifierStake {
                bonded,
                unbonding: st.unbonding + amount,
                unbond_at: available_at,
                pooled: st.pooled && !leaves,
            },
        );
        ev.push(Event::VerifierUnbondRequested {
            verifier: sender,
            amount,
            available_at,
        });
        Ok(())
    }

    fn withdraw_verifier_stake(
        &mut self,
        sender: Address,
        now: u64,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let st = self.verifier_stake_of(sender);
        let amount = self.pay_unbonded(sender, st.unbonding, st.unbond_at, now)?;
        self.verifier_stakes.insert(
            sender,
            VerifierStake {
                unbonding: U256::ZERO,
                unbond_at: 0,
                ..st
            },
        );
        ev.push(Event::VerifierStakeWithdrawn {
            verifier: sender,
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

    /// `_checkDecision`: the live epoch's checks, then the quorum. The last accepted step
    /// and the signers' committee positions.
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
    ) -> Result<(Step, Vec<usize>), EscrowError> {
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
        let signers = self.check_quorum(i, job_id, epoch, step, checkpoint_hash, accept, sigs)?;
        Ok((last, signers))
    }

    /// `_checkQuorum`: every signature a valid one by a distinct committee member, at
    /// least `quorum` of them, at most [`MAX_VERIFIERS`]. The signers' committee positions.
    #[allow(clippy::too_many_arguments)]
    fn check_quorum(
        &self,
        i: usize,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        accept: bool,
        sigs: &[Sig65],
    ) -> Result<Vec<usize>, EscrowError> {
        let job = &self.jobs[i];
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
        let mut seen: Vec<usize> = Vec::with_capacity(n);
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
            let Some(member) = job.member_index(signer) else {
                return Err(EscrowError::NotVerifier(signer));
            };
            if seen.contains(&member) {
                return Err(EscrowError::DuplicateSigner(signer));
            }
            seen.push(member);
        }
        Ok(seen)
    }

    /// `uint64(block.timestamp) + decisionWindow`, checked as Solidity checks it.
    fn window_end(&self, now: u64) -> Result<u64, EscrowError> {
        now.checked_add(self.decision_window)
            .ok_or(EscrowError::Panic(0x11))
    }

    /// `_closeEpoch`: ends the live epoch on the client's word and keeps what a late accept
    /// of it needs.
    fn close_epoch(
        &mut self,
        i: usize,
        now: u64,
        reason: EpochEndReason,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        let window_end = self.window_end(now)?;
        self.record_closed(i, window_end);
        self.end_epoch(i, reason, ev);
        Ok(())
    }

    fn record_closed(&mut self, i: usize, window_end: u64) {
        let job = &self.jobs[i];
        let record = ClosedEpoch {
            provider: job.provider,
            price_per_step: job.price_per_step,
            step_at_end: job.last_accepted_step,
            window_end,
        };
        self.closed.insert((i, job.epoch), record);
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

    /// `_creditFees`: each member's paid decisions × fee to its balance, in committee order,
    /// members that earned nothing skipped.
    fn credit_fees(&mut self, i: usize, ev: &mut Vec<Event>) {
        let job = &self.jobs[i];
        let (token, fee) = (job.token, job.verifier_fee);
        let job_id = U256::from(i as u64 + 1);
        let earned: Vec<(Address, U256)> = job
            .committee
            .iter()
            .zip(&job.paid)
            .filter(|(_, paid)| **paid > 0)
            .map(|(m, paid)| (*m, fee * U256::from(*paid)))
            .collect();
        for (verifier, amount) in earned {
            self.credit(verifier, token, amount);
            ev.push(Event::FeesCredited {
                job_id,
                verifier,
                amount,
            });
        }
    }

    fn credit(&mut self, account: Address, token: Address, amount: U256) {
        *self.withdrawable.entry((account, token)).or_default() += amount;
    }

    fn owe(&mut self, token: Address, f: impl FnOnce(U256) -> U256) {
        let o = self.owed.entry(token).or_default();
        *o = f(*o);
    }
}

/// The `voters` bit set of a decision: bit i for committee position i.
fn voters_of(signers: &[usize]) -> U256 {
    signers
        .iter()
        .filter(|s| **s < 256)
        .fold(U256::ZERO, |v, s| v | (U256::from(1) << *s))
}

/// `createJob`'s arguments, copied from the transaction.
struct NewJob {
    token: Address,
    budget: U256,
    max_price_per_step: U256,
    total_steps: Step,
    checkpoint_interval: Step,
    spec_hash: Hash,
    committee_size: u8,
    quorum: u8,
    verifier_fee: U256,
    deadline: u64,
    grace: u64,
}
