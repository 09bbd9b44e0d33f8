//! An in-memory model of `JobEscrow.sol`: the same checks in the same order, the same error
//! names, the same events, the same integer arithmetic (amounts are u128 like the contract's
//! packed fields). Accounts are simulator node ids; signatures are modelled as the fields they
//! sign plus the signer, so a bid or vote over different fields "recovers" to a wrong signer
//! exactly where ecrecover would. Every call is logged ([`CallRecord`]) so a run can be
//! replayed against the real contract (the differential test).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A simulator account: a node index, or the escrow contract itself.
pub type Account = u32;
/// The escrow contract's own token account.
pub const ESCROW: Account = u32::MAX;
/// Content address as the sim names it: the low 64 bits of the `bytes32`.
pub type Hash = u64;
pub type Amount = u128;
pub type JobId = u64;
pub type Epoch = u64;
pub type Step = u64;

/// The contract refuses more verifiers than this (quorum checks are quadratic).
pub const MAX_VERIFIERS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    Open,
    Assigned,
    Completed,
    Expired,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    Replaced,
    Released,
    Rejected,
    Completed,
    Expired,
}

/// The contract's custom errors, by name (payloads kept where a test asserts on them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum EscrowError {
    #[error("ZeroAmount")]
    ZeroAmount,
    #[error("InvalidSteps")]
    InvalidSteps,
    #[error("InvalidVerifiers")]
    InvalidVerifiers,
    #[error("InvalidQuorum")]
    InvalidQuorum,
    #[error("DeadlinePassed")]
    DeadlinePassed,
    #[error("BudgetTooSmall")]
    BudgetTooSmall,
    #[error("UnknownJob({0})")]
    UnknownJob(JobId),
    #[error("NotClient")]
    NotClient,
    #[error("WrongStatus({0:?})")]
    WrongStatus(Status),
    #[error("WrongEpoch({given}, {current})")]
    WrongEpoch { given: Epoch, current: Epoch },
    #[error("BidExpired")]
    BidExpired,
    #[error("PriceTooHigh")]
    PriceTooHigh,
    #[error("InsufficientStake")]
    InsufficientStake,
    #[error("WrongSigner")]
    WrongSigner,
    #[error("NotVerifier({0})")]
    NotVerifier(Account),
    #[error("DuplicateSigner({0})")]
    DuplicateSigner(Account),
    #[error("TooManySignatures")]
    TooManySignatures,
    #[error("QuorumNotReached")]
    QuorumNotReached,
    #[error("StepNotIncreasing")]
    StepNotIncreasing,
    #[error("StepOffInterval")]
    StepOffInterval,
    #[error("TooLate")]
    TooLate,
    #[error("TooEarly")]
    TooEarly,
    #[error("UnbondPending")]
    UnbondPending,
    #[error("NotUnbonding")]
    NotUnbonding,
    #[error("LiveEpochs")]
    LiveEpochs,
    #[error("NothingToWithdraw")]
    NothingToWithdraw,
    /// ERC-20 `transferFrom` short of balance (the token reverts, so the call does).
    #[error("InsufficientBalance")]
    InsufficientBalance,
}

/// A provider's signed bid, as the fields the EIP-712 digest covers plus who signed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BidSig {
    pub signer: Account,
    pub job_id: JobId,
    pub epoch: Epoch,
    pub provider: Account,
    pub price_per_step: Amount,
    pub expiry: u64,
}

/// A verifier's signed vote, as the fields the EIP-712 digest covers plus who signed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoteSig {
    pub signer: Account,
    pub job_id: JobId,
    pub epoch: Epoch,
    pub step: Step,
    pub checkpoint_hash: Hash,
    pub accept: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    CreateJob {
        budget: Amount,
        max_price_per_step: Amount,
        total_steps: Step,
        checkpoint_interval: Step,
        spec_hash: Hash,
        verifiers: Vec<Account>,
        quorum: u8,
        deadline: u64,
        grace: u64,
    },
    Register {
        amount: Amount,
    },
    Assign {
        job_id: JobId,
        provider: Account,
        price_per_step: Amount,
        bid_expiry: u64,
        bid: BidSig,
    },
    ReleaseProvider {
        job_id: JobId,
    },
    AcceptCheckpoint {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: Vec<VoteSig>,
    },
    RejectCheckpoint {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: Vec<VoteSig>,
    },
    Expire {
        job_id: JobId,
    },
    RequestUnbond,
    WithdrawStake,
    Withdraw,
}

impl Call {
    pub fn name(&self) -> &'static str {
        match self {
            Call::CreateJob { .. } => "createJob",
            Call::Register { .. } => "register",
            Call::Assign { .. } => "assign",
            Call::ReleaseProvider { .. } => "releaseProvider",
            Call::AcceptCheckpoint { .. } => "acceptCheckpoint",
            Call::RejectCheckpoint { .. } => "rejectCheckpoint",
            Call::Expire { .. } => "expire",
            Call::RequestUnbond => "requestUnbond",
            Call::WithdrawStake => "withdrawStake",
            Call::Withdraw => "withdraw",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    JobCreated {
        job_id: JobId,
        client: Account,
        budget: Amount,
    },
    ProviderAssigned {
        job_id: JobId,
        epoch: Epoch,
        provider: Account,
        price_per_step: Amount,
        start_step: Step,
        start_checkpoint: Hash,
    },
    EpochEnded {
        job_id: JobId,
        epoch: Epoch,
        reason: EndReason,
    },
    CheckpointAccepted {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Account,
        amount: Amount,
    },
    CheckpointRejected {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Account,
        slashed: Amount,
    },
    JobCompleted {
        job_id: JobId,
        refund: Amount,
    },
    JobExpired {
        job_id: JobId,
        refund: Amount,
    },
    Staked {
        provider: Account,
        amount: Amount,
        total: Amount,
    },
    UnbondRequested {
        provider: Account,
        amount: Amount,
        available_at: u64,
    },
    StakeWithdrawn {
        provider: Account,
        amount: Amount,
    },
    Withdrawn {
        account: Account,
        amount: Amount,
    },
}

/// One call as executed: who, when (block timestamp), what, and how it ended. The trace the
/// differential test replays against the Solidity contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    pub timestamp: u64,
    pub caller: Account,
    pub call: Call,
    pub result: Result<(), EscrowError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub client: Account,
    pub epoch: Epoch,
    pub status: Status,
    pub quorum: u8,
    pub provider: Account,
    pub last_accepted_step: Step,
    pub total_steps: Step,
    pub price_per_step: Amount,
    pub remaining: Amount,
    pub max_price_per_step: Amount,
    pub deposit: Amount,
    pub checkpoint_interval: Step,
    pub deadline: u64,
    pub grace: u64,
    pub last_checkpoint_hash: Hash,
    pub spec_hash: Hash,
    pub verifiers: Vec<Account>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stake {
    pub amount: Amount,
    pub unbond_at: u64,
    pub live_epochs: u32,
}

/// Deliberate bugs, so the tests can show each checker firing on a broken escrow. Never set
/// by configs or presets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// acceptCheckpoint skips the epoch check (pays fenced epochs).
    pub skip_epoch_check: bool,
    /// completion credits the client's refund twice.
    pub refund_twice: bool,
    /// expire always reverts as too early: jobs can never be exited.
    pub never_expire: bool,
    /// acceptCheckpoint credits the provider without debiting the budget.
    pub free_money: bool,
}

/// The token ledger (one ERC-20: the job token is the stake token, as with test USDC).
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    balances: BTreeMap<Account, Amount>,
    supply: Amount,
}

impl Ledger {
    pub fn mint(&mut self, to: Account, amount: Amount) {
        *self.balances.entry(to).or_default() += amount;
        self.supply += amount;
    }

    pub fn balance(&self, who: Account) -> Amount {
        self.balances.get(&who).copied().unwrap_or(0)
    }

    pub fn supply(&self) -> Amount {
        self.supply
    }

    pub fn sum_of_balances(&self) -> Amount {
        self.balances.values().sum()
    }

    fn transfer(&mut self, from: Account, to: Account, amount: Amount) -> Result<(), EscrowError> {
        let have = self.balance(from);
        if have < amount {
            return Err(EscrowError::InsufficientBalance);
        }
        self.balances.insert(from, have - amount);
        *self.balances.entry(to).or_default() += amount;
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct Escrow {
    pub min_stake: Amount,
    pub unbond_delay: u64,
    pub bugs: Bugs,
    pub ledger: Ledger,
    jobs: Vec<Job>,
    stakes: BTreeMap<Account, Stake>,
    withdrawable: BTreeMap<Account, Amount>,
    /// Running total of what the contract owes (budgets left, credits, stakes), kept by each
    /// call; the conservation checker compares it with the token balance after every event.
    liabilities: Amount,
    log: Vec<CallRecord>,
    keep_log: bool,
}

impl Escrow {
    pub fn new(min_stake: Amount, unbond_delay: u64, keep_log: bool) -> Self {
        Escrow {
            min_stake,
            unbond_delay,
            bugs: Bugs::default(),
            ledger: Ledger::default(),
            jobs: Vec::new(),
            stakes: BTreeMap::new(),
            withdrawable: BTreeMap::new(),
            liabilities: 0,
            log: Vec::new(),
            keep_log,
        }
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        usize::try_from(id)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| self.jobs.get(i))
    }

    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    pub fn job_count(&self) -> u64 {
        self.jobs.len() as u64
    }

    pub fn stake_of(&self, who: Account) -> Stake {
        self.stakes.get(&who).copied().unwrap_or_default()
    }

    pub fn withdrawable(&self, who: Account) -> Amount {
        self.withdrawable.get(&who).copied().unwrap_or(0)
    }

    pub fn liabilities(&self) -> Amount {
        self.liabilities
    }

    /// What the contract owes, recomputed from scratch (the slow, independent check).
    pub fn liabilities_recomputed(&self) -> Amount {
        let live: Amount = self
            .jobs
            .iter()
            .filter(|j| matches!(j.status, Status::Open | Status::Assigned))
            .map(|j| j.remaining)
            .sum();
        live + self.withdrawable.values().sum::<Amount>()
            + self.stakes.values().map(|s| s.amount).sum::<Amount>()
    }

    pub fn log(&self) -> &[CallRecord] {
        &self.log
    }

    /// Executes `call` from `caller` in a block at `timestamp`; on error nothing changed.
    pub fn execute(
        &mut self,
        caller: Account,
        timestamp: u64,
        call: Call,
    ) -> Result<Vec<Event>, EscrowError> {
        let mut events = Vec::new();
        // All-or-nothing like a reverting transaction: every check and the one fallible
        // transfer come before any write.
        let result = self.dispatch(caller, timestamp, &call, &mut events);
        if self.keep_log {
            self.log.push(CallRecord {
                timestamp,
                caller,
                call,
                result: result.clone(),
            });
        }
        result.map(|()| events)
    }

    fn dispatch(
        &mut self,
        caller: Account,
        now: u64,
        call: &Call,
        ev: &mut Vec<Event>,
    ) -> Result<(), EscrowError> {
        match call {
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
                if *budget == 0 || *max_price_per_step == 0 {
                    return Err(EscrowError::ZeroAmount);
                }
                if *total_steps == 0
                    || *checkpoint_interval == 0
                    || checkpoint_interval > total_steps
                {
                    return Err(EscrowError::InvalidSteps);
                }
                if verifiers.is_empty() || verifiers.len() > MAX_VERIFIERS {
                    return Err(EscrowError::InvalidVerifiers);
                }
                if *quorum == 0 || usize::from(*quorum) > verifiers.len() {
                    return Err(EscrowError::InvalidQuorum);
                }
                if *deadline <= now {
                    return Err(EscrowError::DeadlinePassed);
                }
                if *budget < max_price_per_step.saturating_mul(Amount::from(*total_steps)) {
                    return Err(EscrowError::BudgetTooSmall);
                }
                for (i, v) in verifiers.iter().enumerate() {
                    if *v == ESCROW || verifiers[..i].contains(v) {
                        return Err(EscrowError::InvalidVerifiers);
                    }
                }
                if self.ledger.balance(caller) < *budget {
                    return Err(EscrowError::InsufficientBalance);
                }
                self.ledger.transfer(caller, ESCROW, *budget)?;
                self.liabilities += budget;
                let job_id = self.jobs.len() as u64 + 1;
                self.jobs.push(Job {
                    client: caller,
                    epoch: 0,
                    status: Status::Open,
                    quorum: *quorum,
                    provider: ESCROW,
                    last_accepted_step: 0,
                    total_steps: *total_steps,
                    price_per_step: 0,
                    remaining: *budget,
                    max_price_per_step: *max_price_per_step,
                    deposit: *budget,
                    checkpoint_interval: *checkpoint_interval,
                    deadline: *deadline,
                    grace: *grace,
                    last_checkpoint_hash: *spec_hash,
                    spec_hash: *spec_hash,
                    verifiers: verifiers.clone(),
                });
                ev.push(Event::JobCreated {
                    job_id,
                    client: caller,
                    budget: *budget,
                });
                Ok(())
            }
            Call::Register { amount } => {
                if *amount == 0 {
                    return Err(EscrowError::ZeroAmount);
                }
                let st = self.stake_of(caller);
                if st.unbond_at != 0 {
                    return Err(EscrowError::UnbondPending);
                }
                self.ledger.transfer(caller, ESCROW, *amount)?;
                let total = st.amount + amount;
                self.stakes.insert(
                    caller,
                    Stake {
                        amount: total,
                        ..st
                    },
                );
                self.liabilities += amount;
                ev.push(Event::Staked {
                    provider: caller,
                    amount: *amount,
                    total,
                });
                Ok(())
            }
            Call::Assign {
                job_id,
                provider,
                price_per_step,
                bid_expiry,
                bid,
            } => {
                let min_stake = self.min_stake;
                let st = self.stake_of(*provider);
                let job = self.existing(*job_id)?;
                if caller != job.client {
                    return Err(EscrowError::NotClient);
                }
                let status = job.status;
                if status != Status::Open && status != Status::Assigned {
                    return Err(EscrowError::WrongStatus(status));
                }
                if now >= job.deadline {
                    return Err(EscrowError::DeadlinePassed);
                }
                if now > *bid_expiry {
                    return Err(EscrowError::BidExpired);
                }
                if *price_per_step > job.max_price_per_step {
                    return Err(EscrowError::PriceTooHigh);
                }
                if *price_per_step == 0 {
                    return Err(EscrowError::ZeroAmount);
                }
                if st.unbond_at != 0 {
                    return Err(EscrowError::UnbondPending);
                }
                if st.amount < min_stake {
                    return Err(EscrowError::InsufficientStake);
                }
                let new_epoch = job.epoch + 1;
                let signed = BidSig {
                    signer: bid.signer,
                    job_id: *job_id,
                    epoch: new_epoch,
                    provider: *provider,
                    price_per_step: *price_per_step,
                    expiry: *bid_expiry,
                };
                // A signature over other fields recovers to some other address.
                if *bid != signed || bid.signer != *provider {
                    return Err(EscrowError::WrongSigner);
                }
                if status == Status::Assigned {
                    self.end_epoch(*job_id, EndReason::Replaced, ev);
                }
                let job = self.job_mut(*job_id);
                job.epoch = new_epoch;
                job.provider = *provider;
                job.price_per_step = *price_per_step;
                job.status = Status::Assigned;
                let (start_step, start_checkpoint) =
                    (job.last_accepted_step, job.last_checkpoint_hash);
                self.stakes.entry(*provider).or_default().live_epochs += 1;
                ev.push(Event::ProviderAssigned {
                    job_id: *job_id,
                    epoch: new_epoch,
                    provider: *provider,
                    price_per_step: *price_per_step,
                    start_step,
                    start_checkpoint,
                });
                Ok(())
            }
            Call::ReleaseProvider { job_id } => {
                let job = self.existing(*job_id)?;
                if caller != job.client {
                    return Err(EscrowError::NotClient);
                }
                if job.status != Status::Assigned {
                    return Err(EscrowError::WrongStatus(job.status));
                }
                self.end_epoch(*job_id, EndReason::Released, ev);
                self.job_mut(*job_id).status = Status::Open;
                Ok(())
            }
            Call::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            } => {
                let last =
                    self.check_decision(*job_id, *epoch, *step, *checkpoint_hash, true, sigs, now)?;
                let free_money = self.bugs.free_money;
                let job = self.job_mut(*job_id);
                let provider = job.provider;
                let amount = Amount::from(step - last) * job.price_per_step;
                let remaining = if free_money {
                    job.remaining
                } else {
                    job.remaining - amount
                };
                job.last_accepted_step = *step;
                job.last_checkpoint_hash = *checkpoint_hash;
                let completes = *step == job.total_steps;
                let client = job.client;
                if completes {
                    job.remaining = 0;
                    job.status = Status::Completed;
                } else {
                    job.remaining = remaining;
                }
                *self.withdrawable.entry(provider).or_default() += amount;
                if free_money {
                    self.liabilities += amount;
                }
                ev.push(Event::CheckpointAccepted {
                    job_id: *job_id,
                    epoch: *epoch,
                    step: *step,
                    checkpoint_hash: *checkpoint_hash,
                    provider,
                    amount,
                });
                if completes {
                    if let Some(st) = self.stakes.get_mut(&provider) {
                        st.live_epochs -= 1;
                    }
                    let credited = if self.bugs.refund_twice {
                        2 * remaining
                    } else {
                        remaining
                    };
                    *self.withdrawable.entry(client).or_default() += credited;
                    ev.push(Event::EpochEnded {
                        job_id: *job_id,
                        epoch: *epoch,
                        reason: EndReason::Completed,
                    });
                    ev.push(Event::JobCompleted {
                        job_id: *job_id,
                        refund: remaining,
                    });
                }
                Ok(())
            }
            Call::RejectCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            } => {
                self.check_decision(*job_id, *epoch, *step, *checkpoint_hash, false, sigs, now)?;
                let min_stake = self.min_stake;
                let job = self.job_mut(*job_id);
                let (provider, client) = (job.provider, job.client);
                let st = self.stakes.entry(provider).or_default();
                let slashed = st.amount.min(min_stake);
                st.amount -= slashed;
                *self.withdrawable.entry(client).or_default() += slashed;
                ev.push(Event::CheckpointRejected {
                    job_id: *job_id,
                    epoch: *epoch,
                    step: *step,
                    checkpoint_hash: *checkpoint_hash,
                    provider,
                    slashed,
                });
                self.end_epoch(*job_id, EndReason::Rejected, ev);
                self.job_mut(*job_id).status = Status::Open;
                Ok(())
            }
            Call::Expire { job_id } => {
                let job = self.existing(*job_id)?;
                let status = job.status;
                if status != Status::Open && status != Status::Assigned {
                    return Err(EscrowError::WrongStatus(status));
                }
                if now < job.deadline.saturating_add(job.grace) || self.bugs.never_expire {
                    return Err(EscrowError::TooEarly);
                }
                if status == Status::Assigned {
                    self.end_epoch(*job_id, EndReason::Expired, ev);
                }
                let job = self.job_mut(*job_id);
                let refund = job.remaining;
                let client = job.client;
                job.remaining = 0;
                job.status = Status::Expired;
                *self.withdrawable.entry(client).or_default() += refund;
                ev.push(Event::JobExpired {
                    job_id: *job_id,
                    refund,
                });
                Ok(())
            }
            Call::RequestUnbond => {
                let st = self.stake_of(caller);
                if st.amount == 0 {
                    return Err(EscrowError::ZeroAmount);
                }
                if st.unbond_at != 0 {
                    return Err(EscrowError::UnbondPending);
                }
                if st.live_epochs != 0 {
                    return Err(EscrowError::LiveEpochs);
                }
                let available_at = now + self.unbond_delay;
                self.stakes.insert(
                    caller,
                    Stake {
                        unbond_at: available_at,
                        ..st
                    },
                );
                ev.push(Event::UnbondRequested {
                    provider: caller,
                    amount: st.amount,
                    available_at,
                });
                Ok(())
            }
            Call::WithdrawStake => {
                let st = self.stake_of(caller);
                if st.unbond_at == 0 {
                    return Err(EscrowError::NotUnbonding);
                }
                if now < st.unbond_at {
                    return Err(EscrowError::TooEarly);
                }
                // The transfer first: a revert must leave nothing changed.
                self.ledger.transfer(ESCROW, caller, st.amount)?;
                self.stakes.insert(
                    caller,
                    Stake {
                        amount: 0,
                        unbond_at: 0,
                        ..st
                    },
                );
                self.liabilities = self.liabilities.saturating_sub(st.amount);
                ev.push(Event::StakeWithdrawn {
                    provider: caller,
                    amount: st.amount,
                });
                Ok(())
            }
            Call::Withdraw => {
                let amount = self.withdrawable(caller);
                if amount == 0 {
                    return Err(EscrowError::NothingToWithdraw);
                }
                self.ledger.transfer(ESCROW, caller, amount)?;
                self.withdrawable.insert(caller, 0);
                self.liabilities = self.liabilities.saturating_sub(amount);
                ev.push(Event::Withdrawn {
                    account: caller,
                    amount,
                });
                Ok(())
            }
        }
    }

    fn existing(&self, id: JobId) -> Result<&Job, EscrowError> {
        self.job(id).ok_or(EscrowError::UnknownJob(id))
    }

    /// Only after `existing` succeeded for the same id.
    fn job_mut(&mut self, id: JobId) -> &mut Job {
        let i = usize::try_from(id).unwrap_or(usize::MAX).saturating_sub(1);
        &mut self.jobs[i]
    }

    #[allow(clippy::too_many_arguments)]
    fn check_decision(
        &self,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        hash: Hash,
        accept: bool,
        sigs: &[VoteSig],
        now: u64,
    ) -> Result<Step, EscrowError> {
        let job = self.existing(job_id)?;
        if job.status != Status::Assigned {
            return Err(EscrowError::WrongStatus(job.status));
        }
        if epoch != job.epoch && !self.bugs.skip_epoch_check {
            return Err(EscrowError::WrongEpoch {
                given: epoch,
                current: job.epoch,
            });
        }
        if now > job.deadline.saturating_add(job.grace) {
            return Err(EscrowError::TooLate);
        }
        let last = job.last_accepted_step;
        if step <= last {
            return Err(EscrowError::StepNotIncreasing);
        }
        if step > job.total_steps
            || (step != job.total_steps && !step.is_multiple_of(job.checkpoint_interval))
        {
            return Err(EscrowError::StepOffInterval);
        }
        if sigs.len() > MAX_VERIFIERS {
            return Err(EscrowError::TooManySignatures);
        }
        if sigs.len() < usize::from(job.quorum) {
            return Err(EscrowError::QuorumNotReached);
        }
        for (i, s) in sigs.iter().enumerate() {
            let fields_match = s.job_id == job_id
                && s.epoch == epoch
                && s.step == step
                && s.checkpoint_hash == hash
                && s.accept == accept;
            // A vote over other fields recovers to an unlisted address.
            if !fields_match || !job.verifiers.contains(&s.signer) {
                return Err(EscrowError::NotVerifier(s.signer));
            }
            if sigs[..i].iter().any(|p| p.signer == s.signer) {
                return Err(EscrowError::DuplicateSigner(s.signer));
            }
        }
        Ok(last)
    }

    fn end_epoch(&mut self, job_id: JobId, reason: EndReason, ev: &mut Vec<Event>) {
        let job = self.job_mut(job_id);
        let (provider, epoch) = (job.provider, job.epoch);
        if let Some(st) = self.stakes.get_mut(&provider) {
            st.live_epochs = st.live_epochs.saturating_sub(1);
        }
        ev.push(Event::EpochEnded {
            job_id,
            epoch,
            reason,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: Account = 1;
    const PROV: Account = 2;
    const V1: Account = 3;
    const V2: Account = 4;

    fn setup() -> (Escrow, JobId) {
        let mut e = Escrow::new(100, 10, true);
        e.ledger.mint(CLIENT, 10_000);
        e.ledger.mint(PROV, 1_000);
        e.execute(PROV, 1, Call::Register { amount: 100 })
            .expect("register");
        e.execute(
            CLIENT,
            1,
            Call::CreateJob {
                budget: 1_000,
                max_price_per_step: 10,
                total_steps: 100,
                checkpoint_interval: 25,
                spec_hash: 77,
                verifiers: vec![V1, V2],
                quorum: 2,
                deadline: 1_000,
                grace: 100,
            },
        )
        .expect("create");
        (e, 1)
    }

    fn bid(job_id: JobId, epoch: Epoch, price: Amount) -> Call {
        Call::Assign {
            job_id,
            provider: PROV,
            price_per_step: price,
            bid_expiry: 500,
            bid: BidSig {
                signer: PROV,
                job_id,
                epoch,
                provider: PROV,
                price_per_step: price,
                expiry: 500,
            },
        }
    }

    fn votes(job_id: JobId, epoch: Epoch, step: Step, h: Hash, accept: bool) -> Vec<VoteSig> {
        [V1, V2]
            .iter()
            .map(|&signer| VoteSig {
                signer,
                job_id,
                epoch,
                step,
                checkpoint_hash: h,
                accept,
            })
            .collect()
    }

    #[test]
    fn pays_per_accepted_step_and_refunds_rest() {
        let (mut e, j) = setup();
        e.execute(CLIENT, 2, bid(j, 1, 4)).expect("assign");
        e.execute(
            PROV,
            3,
            Call::AcceptCheckpoint {
                job_id: j,
                epoch: 1,
                step: 25,
                checkpoint_hash: 5,
                sigs: votes(j, 1, 25, 5, true),
            },
        )
        .expect("accept");
        assert_eq!(e.withdrawable(PROV), 100);
        let ev = e
            .execute(
                PROV,
                4,
                Call::AcceptCheckpoint {
                    job_id: j,
                    epoch: 1,
                    step: 100,
                    checkpoint_hash: 6,
                    sigs: votes(j, 1, 100, 6, true),
                },
            )
            .expect("final");
        assert!(ev.contains(&Event::JobCompleted {
            job_id: j,
            refund: 600
        }));
        assert_eq!(e.withdrawable(PROV), 400);
        assert_eq!(e.withdrawable(CLIENT), 600);
        assert_eq!(e.liabilities(), e.liabilities_recomputed());
        assert_eq!(e.ledger.balance(ESCROW), e.liabilities());
    }

    #[test]
    fn fencing_slashing_and_expiry_follow_the_contract() {
        let (mut e, j) = setup();
        e.execute(CLIENT, 2, bid(j, 1, 4)).expect("assign");
        // A bid signed for epoch 1 cannot be replayed into epoch 2.
        assert_eq!(
            e.execute(CLIENT, 2, bid(j, 1, 4)),
            Err(EscrowError::WrongSigner)
        );
        e.execute(CLIENT, 2, bid(j, 2, 4)).expect("reassign");
        let old = Call::AcceptCheckpoint {
            job_id: j,
            epoch: 1,
            step: 25,
            checkpoint_hash: 5,
            sigs: votes(j, 1, 25, 5, true),
        };
        assert_eq!(
            e.execute(PROV, 3, old),
            Err(EscrowError::WrongEpoch {
                given: 1,
                current: 2
            })
        );
        let off = Call::AcceptCheckpoint {
            job_id: j,
            epoch: 2,
            step: 30,
            checkpoint_hash: 5,
            sigs: votes(j, 2, 30, 5, true),
        };
        assert_eq!(e.execute(PROV, 3, off), Err(EscrowError::StepOffInterval));
        let short = Call::AcceptCheckpoint {
            job_id: j,
            epoch: 2,
            step: 25,
            checkpoint_hash: 5,
            sigs: votes(j, 2, 25, 5, true)[..1].to_vec(),
        };
        assert_eq!(
            e.execute(PROV, 3, short),
            Err(EscrowError::QuorumNotReached)
        );
        e.execute(
            V1,
            3,
            Call::RejectCheckpoint {
                job_id: j,
                epoch: 2,
                step: 25,
                checkpoint_hash: 5,
                sigs: votes(j, 2, 25, 5, false),
            },
        )
        .expect("reject");
        assert_eq!(e.stake_of(PROV).amount, 0);
        assert_eq!(e.withdrawable(CLIENT), 100);
        assert_eq!(
            e.execute(CLIENT, 2, bid(j, 3, 4)),
            Err(EscrowError::InsufficientStake)
        );
        assert_eq!(
            e.execute(CLIENT, 1099, Call::Expire { job_id: j }),
            Err(EscrowError::TooEarly)
        );
        let ev = e
            .execute(CLIENT, 1100, Call::Expire { job_id: j })
            .expect("expire");
        assert!(ev.contains(&Event::JobExpired {
            job_id: j,
            refund: 1_000
        }));
        assert_eq!(
            e.execute(CLIENT, 1101, Call::Expire { job_id: j }),
            Err(EscrowError::WrongStatus(Status::Expired))
        );
        e.execute(CLIENT, 1101, Call::Withdraw).expect("withdraw");
        assert_eq!(e.ledger.balance(CLIENT), 10_000 + 100);
        assert_eq!(e.ledger.balance(ESCROW), e.liabilities_recomputed());
        assert_eq!(e.log().len(), 14);
    }
}
