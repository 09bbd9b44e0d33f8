//! Invariant checkers, run after every event and at the end. They keep their own books from
//! the escrow's events (never trusting the escrow's internal totals) and compare them with the
//! token ledger and the simulator's ground truth about each checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gpuchain_protocol::chain::ChainEvent;
use gpuchain_protocol::{Address, U256};

use crate::escrow::{self, Epoch, JobId, Status, Step, TOKEN, job_no};
use crate::queue::Millis;
use crate::world::World;

/// A checker that fired: which, when, and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub checker: &'static str,
    pub at: Millis,
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "checker `{}` failed at t={:.3}s: {}",
            self.checker,
            self.at as f64 / 1000.0,
            self.detail
        )
    }
}

pub const FUNDS_CONSERVED: &str = "funds-conserved";
pub const NO_JUNK_PAID: &str = "no-junk-or-fenced-checkpoint-paid";
pub const NO_DOUBLE_PAY: &str = "no-double-pay-or-refund";
pub const ENDS_BY_DEADLINE: &str = "every-job-ends-by-deadline-plus-grace";
pub const LIVENESS: &str = "liveness-after-faults-stop";

#[derive(Clone, Debug, Default)]
struct Book {
    client: Address,
    deposit: U256,
    total_steps: Step,
    epoch: Epoch,
    live: bool,
    price: U256,
    last_step: Step,
    paid: U256,
    ended: bool,
    /// What a completed job left for `settle` to credit (zero once settled).
    unsettled: U256,
}

#[derive(Default)]
pub struct Checker {
    full: bool,
    /// Seconds after deadline + grace by which a job must have ended (an expire transaction
    /// needs a block or two to land).
    slack_s: u64,
    pending: Option<Failure>,
    jobs: Vec<Book>,
    credits: BTreeMap<Address, U256>,
    /// Bonded stake per provider, from stakes in, unbond requests and slashes out.
    stakes: BTreeMap<Address, U256>,
    /// Stake requested out and not yet withdrawn, per provider.
    unbonding: BTreeMap<Address, U256>,
    /// What the escrow should hold, from deposits in and withdrawals out.
    holdings: U256,
    watch: BTreeSet<(u64, JobId)>,
}

impl Checker {
    pub fn new(full: bool, slack_s: u64) -> Self {
        Checker {
            full,
            slack_s,
            pending: None,
            jobs: Vec::new(),
            credits: BTreeMap::new(),
            stakes: BTreeMap::new(),
            unbonding: BTreeMap::new(),
            holdings: U256::ZERO,
            watch: BTreeSet::new(),
        }
    }

    pub fn fail_later(&mut self, f: Failure) {
        if self.pending.is_none() {
            self.pending = Some(f);
        }
    }

    fn book(&mut self, job: JobId) -> Option<&mut Book> {
        usize::try_from(job)
            .ok()
            .and_then(|j| j.checked_sub(1))
            .and_then(|j| self.jobs.get_mut(j))
    }

    /// Called for each event the escrow emits, as it is emitted.
    pub fn on_escrow_event(&mut self, w: &World, e: &escrow::Event) -> Result<(), Failure> {
        let at = w.now;
        let fail = |checker: &'static str, detail: String| {
            Err(Failure {
                checker,
                at,
                detail,
            })
        };
        let job = match e {
            escrow::Event::Job(job) => job,
            escrow::Event::Staked {
                provider, amount, ..
            } => {
                self.holdings += amount;
                *self.stakes.entry(*provider).or_default() += amount;
                return Ok(());
            }
            escrow::Event::Withdrawn {
                account, amount, ..
            } => {
                let owed = self
                    .credits
                    .insert(*account, U256::ZERO)
                    .unwrap_or_default();
                if owed != *amount {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("account {account} withdrew {amount}, was owed {owed}"),
                    );
                }
                self.holdings = self.holdings.saturating_sub(*amount);
                return Ok(());
            }
            escrow::Event::StakeWithdrawn { provider, amount } => {
                let st = self
                    .unbonding
                    .insert(*provider, U256::ZERO)
                    .unwrap_or_default();
                if st != *amount {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("provider {provider} withdrew stake {amount}, had {st}"),
                    );
                }
                self.holdings = self.holdings.saturating_sub(*amount);
                return Ok(());
            }
            escrow::Event::UnbondRequested {
                provider, amount, ..
            } => {
                let st = self.stakes.entry(*provider).or_default();
                if *st < *amount {
                    return fail(
                        FUNDS_CONSERVED,
                        format!("provider {provider} unbonds {amount} of a bonded {st}"),
                    );
                }
                *st -= amount;
                *self.unbonding.entry(*provider).or_default() += amount;
                return Ok(());
            }
            // The slash's books are kept from `CheckpointRejected`, which carries it too.
            escrow::Event::Slashed { .. } => return Ok(()),
        };
        let job_id = job_no(job.job_id());
        match job {
            ChainEvent::JobCreated {
                client,
                budget,
                total_steps,
                deadline,
                grace,
                ..
            } => {
                if w.escrow.job(job.job_id()).is_none() {
                    return fail(
                        FUNDS_CONSERVED,
                        format!("job {job_id} created but not stored"),
                    );
                }
                self.jobs.push(Book {
                    client: *client,
                    deposit: *budget,
                    total_steps: *total_steps,
                    ..Book::default()
                });
                self.holdings += budget;
                self.watch.insert((
                    deadline.saturating_add(*grace).saturating_add(self.slack_s),
                    job_id,
                ));
            }
            ChainEvent::ProviderAssigned {
                epoch,
                price_per_step,
                start_step,
                ..
            } => {
                let Some(b) = self.book(job_id) else {
                    return fail(NO_DOUBLE_PAY, format!("assign on unknown job {job_id}"));
                };
                if *epoch != b.epoch + 1 || *start_step != b.last_step || b.ended {
                    return fail(
                        NO_JUNK_PAID,
                        format!(
                            "job {job_id}: epoch {epoch} from step {start_step} after epoch {} at step {}",
                            b.epoch, b.last_step
                        ),
                    );
                }
                b.epoch = *epoch;
                b.live = true;
                b.price = *price_per_step;
            }
            ChainEvent::EpochEnded { epoch, .. } => {
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if !b.live || b.epoch != *epoch {
                    return fail(
                        NO_JUNK_PAID,
                        format!("job {job_id}: ended epoch {epoch} that was not live"),
                    );
                }
                b.live = false;
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                checkpoint_hash,
                provider,
                amount,
                ..
            } => {
                let truth = w
                    .driver
                    .as_ref()
                    .and_then(|d| d.known_id(checkpoint_hash))
                    .and_then(|h| w.truths.get(&h))
                    .cloned();
                let Some(b) = self.book(job_id) else {
                    return fail(NO_DOUBLE_PAY, format!("pay on unknown job {job_id}"));
                };
                if !b.live || b.epoch != *epoch {
                    return fail(
                        NO_JUNK_PAID,
                        format!(
                            "job {job_id}: paid fenced epoch {epoch} (live epoch {})",
                            b.epoch
                        ),
                    );
                }
                if *step <= b.last_step {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!(
                            "job {job_id}: step {step} paid again (last {})",
                            b.last_step
                        ),
                    );
                }
                let due = U256::from(step - b.last_step) * b.price;
                if *amount != due {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("job {job_id}: paid {amount} for steps worth {due}"),
                    );
                }
                match truth {
                    None => {
                        return fail(
                            NO_JUNK_PAID,
                            format!("job {job_id}: paid for unknown checkpoint {checkpoint_hash}"),
                        );
                    }
                    Some(t) if t.job != job_id || t.step != *step || t.epoch != *epoch => {
                        return fail(
                            NO_JUNK_PAID,
                            format!(
                                "job {job_id} epoch {epoch} step {step}: paid for a checkpoint made for job {} epoch {} step {}",
                                t.job, t.epoch, t.step
                            ),
                        );
                    }
                    Some(t) if t.cheat.is_some_and(|k| k.is_junk()) => {
                        return fail(
                            NO_JUNK_PAID,
                            format!(
                                "job {job_id}: paid for a {:?} checkpoint at step {step}",
                                t.cheat
                            ),
                        );
                    }
                    Some(_) => {}
                }
                b.last_step = *step;
                b.paid += amount;
                if b.paid > b.deposit {
                    return fail(
                        FUNDS_CONSERVED,
                        format!(
                            "job {job_id}: paid {} out of a deposit of {}",
                            b.paid, b.deposit
                        ),
                    );
                }
                *self.credits.entry(*provider).or_default() += amount;
            }
            ChainEvent::CheckpointRejected {
                epoch,
                provider,
                slashed,
                ..
            } => {
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if !b.live || b.epoch != *epoch {
                    return fail(
                        NO_JUNK_PAID,
                        format!("job {job_id}: rejected in fenced epoch {epoch}"),
                    );
                }
                let st = self.stakes.entry(*provider).or_default();
                if *st < *slashed {
                    return fail(
                        FUNDS_CONSERVED,
                        format!("slashed {slashed} from a stake of {st}"),
                    );
                }
                // Burned: it stays in the escrow's holdings, credited to nobody.
                *st -= slashed;
            }
            ChainEvent::JobSettled { refund, .. } => {
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if b.unsettled != *refund || refund.is_zero() {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!(
                            "job {job_id}: settled {refund}, {} was left to settle",
                            b.unsettled
                        ),
                    );
                }
                b.unsettled = U256::ZERO;
                let client = b.client;
                *self.credits.entry(client).or_default() += refund;
            }
            ChainEvent::JobCompleted { refund, .. } | ChainEvent::JobExpired { refund, .. } => {
                let completed = matches!(job, ChainEvent::JobCompleted { .. });
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if b.ended {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("job {job_id}: refunded {refund} after it had already ended"),
                    );
                }
                if completed && b.last_step != b.total_steps {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("job {job_id}: completed at step {}", b.last_step),
                    );
                }
                if b.paid + refund != b.deposit {
                    return fail(
                        FUNDS_CONSERVED,
                        format!(
                            "job {job_id}: paid {} + refund {refund} ≠ deposit {}",
                            b.paid, b.deposit
                        ),
                    );
                }
                b.ended = true;
                b.live = false;
                // Completion leaves the refund for `settle`; expiry credits it at once.
                if completed {
                    b.unsettled = *refund;
                } else {
                    let client = b.client;
                    *self.credits.entry(client).or_default() += refund;
                }
            }
        }
        Ok(())
    }

    /// After every event: the books balance and no job outlived its deadline + grace.
    /// Whether [`Checker::after_event`] has anything to look at: a failure noted, a block
    /// executed, or a deadline come due. Most events are none of these.
    pub fn due(&self, now_s: u64, chain_changed: bool) -> bool {
        self.pending.is_some()
            || chain_changed
            || self.watch.first().is_some_and(|(due, _)| *due <= now_s)
    }

    pub fn after_event(&mut self, w: &World, chain_changed: bool) -> Result<(), Failure> {
        if let Some(f) = self.pending.take() {
            return Err(f);
        }
        if chain_changed {
            self.books_checks(w)?;
        }
        self.deadlines(w)
    }

    /// Balances only move when a block executes, so these run after blocks only.
    fn books_checks(&mut self, w: &World) -> Result<(), Failure> {
        let held = w.escrow.balance_of(TOKEN, w.escrow.address());
        if held != self.holdings || held != w.escrow.owed(TOKEN) {
            return Err(Failure {
                checker: FUNDS_CONSERVED,
                at: w.now,
                detail: format!(
                    "escrow holds {held}, deposits less withdrawals say {}, its books say it owes {}",
                    self.holdings,
                    w.escrow.owed(TOKEN)
                ),
            });
        }
        if self.full {
            self.books_balance(w)?;
        }
        Ok(())
    }

    fn deadlines(&mut self, w: &World) -> Result<(), Failure> {
        let now_s = w.chain_time_s();
        while let Some(&(due, job)) = self.watch.first() {
            if due > now_s {
                break;
            }
            self.watch.pop_first();
            let status = w.escrow.job(U256::from(job)).map(|j| j.status);
            if !matches!(status, Some(Status::Completed | Status::Expired)) {
                return Err(Failure {
                    checker: ENDS_BY_DEADLINE,
                    at: w.now,
                    detail: format!(
                        "job {job} is {status:?} {}s after its deadline + grace",
                        self.slack_s
                    ),
                });
            }
        }
        Ok(())
    }

    fn books_balance(&self, w: &World) -> Result<(), Failure> {
        let held = w.escrow.balance_of(TOKEN, w.escrow.address());
        let owed = w.escrow.owed_recomputed(TOKEN);
        let token = w.escrow.token(TOKEN);
        let supply = token.map(|t| t.total_supply()).unwrap_or_default();
        let total = token.map_or(U256::ZERO, |t| {
            t.balances().fold(U256::ZERO, |a, (_, b)| a + b)
        });
        if held != owed || supply != total {
            return Err(Failure {
                checker: FUNDS_CONSERVED,
                at: w.now,
                detail: format!(
                    "escrow holds {held} and owes {owed}; supply {supply}, balances sum to {total}"
                ),
            });
        }
        Ok(())
    }

    /// At the end: the full books, and liveness where faults stopped.
    pub fn at_end(&mut self, w: &World) -> Result<(), Failure> {
        if let Some(f) = self.pending.take() {
            return Err(f);
        }
        self.books_balance(w)?;
        let Some(stop_s) = w.cfg.faults_stop_s else {
            return Ok(());
        };
        let end_s = w.end / 1000;
        // Enough time after faults stop for the slowest provider to train the whole job twice.
        let slowest = w
            .providers
            .iter()
            .filter_map(|p| p.rate)
            .fold(f64::INFINITY, f64::min);
        let margin = if slowest.is_finite() {
            2.0 * w.cfg.job.total_steps as f64 / slowest + 300.0
        } else {
            0.0
        };
        for (i, j) in w.escrow.jobs().iter().enumerate() {
            let judged =
                j.deadline as f64 >= stop_s + margin && j.deadline.saturating_add(j.grace) <= end_s;
            if judged && j.status != Status::Completed {
                return Err(Failure {
                    checker: LIVENESS,
                    at: w.now,
                    detail: format!(
                        "job {} ended {:?} at step {} though faults stopped at {stop_s}s, {:.0}s before its deadline",
                        i + 1,
                        j.status,
                        j.last_accepted_step,
                        j.deadline as f64 - stop_s
                    ),
                });
            }
        }
        Ok(())
    }
}
