//! Invariant checkers, run after every event and at the end. They keep their own books from
//! the escrow's events (never trusting the escrow's internal totals) and compare them with the
//! token ledger and the simulator's ground truth about each checkpoint.
//!
//! Beside the invariants, which stop a run, the same observer counts what the market did to
//! honest parties and what it let cheaters get away with ([`Observed`], in the report):
//! honest stake lost (a slash of a provider whose rejected checkpoint was honest and could
//! be fetched), junk paid (an accept of a checkpoint the checks always refuse), honest work
//! rejected without a slash, and late accepts paid inside the decision window.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gpuchain_protocol::chain::ChainEvent;
use gpuchain_protocol::{Address, U256};

use crate::escrow::{self, Epoch, JobId, Status, Step, TOKEN, job_no};
use crate::queue::Millis;
use crate::world::{Truth, World};

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
pub const COMMITTEE_DRAWN: &str = "committee-drawn-by-the-rules";
pub const FEES_TO_SIGNERS: &str = "fees-only-to-signers";
pub const UNANIMOUS_SLASH: &str = "no-slash-without-unanimity";

#[derive(Clone, Debug, Default)]
struct Book {
    client: Address,
    deposit: U256,
    total_steps: Step,
    interval: Step,
    max_price: U256,
    committee_size: u8,
    quorum: u8,
    fee: U256,
    /// The block whose hash seeds the draw (moved by `CommitteeSeedMoved`).
    seed_block: u64,
    /// In draw order, from `CommitteeDrawn` (empty before).
    committee: Vec<Address>,
    /// Decisions each member signed that took a fee, by committee position.
    signed: Vec<u64>,
    /// Members whose fees were credited.
    credited: BTreeSet<usize>,
    epoch: Epoch,
    live: bool,
    /// The live (or last) epoch's provider and price.
    provider: Address,
    price: U256,
    /// Epochs the client ended (replaced, released), payable late inside the window.
    closed: BTreeMap<Epoch, Closed>,
    /// A late accept just landed: the live epoch may end `Superseded`, once.
    superseding: bool,
    last_step: Step,
    paid: U256,
    /// Fees taken from the budget by decisions.
    fees: U256,
    ended: bool,
    /// What a completed job left for `settle` to credit (zero once settled).
    unsettled: U256,
}

/// What the checker's books keep of an epoch the client ended: what a late accept may pay.
#[derive(Clone, Copy, Debug)]
struct Closed {
    provider: Address,
    price: U256,
    step_at_end: Step,
    window_end: u64,
}

/// What the market did, counted by the checker as an observer (the report's "observed"
/// lines). None of these stop a run; tests assert on them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Observed {
    /// Slashes of a provider whose rejected checkpoint was honest (its ground truth is no
    /// cheat, made for that job, epoch and step) and was served: no fetch of it failed.
    pub honest_stake_lost: u64,
    /// Token units those slashes burned.
    pub honest_stake_lost_units: u128,
    /// Slashes for an honest checkpoint that some fetch of could not get (its provider had
    /// died or was cut off by a partition): every member voted down what it could not check.
    pub honest_unserved_slashed: u64,
    /// Rejects of an honest checkpoint without a slash (a quorum, not the whole committee,
    /// rejected it): the provider's stake is whole, its work since the last accept unpaid.
    pub honest_rejected_unslashed: u64,
    /// Accepts of a checkpoint the checks always refuse (junk, NaN, stale, another job's, or
    /// one whose every step fails a replay while replays are on): never a lazy cheat that
    /// slipped the sampled spot check. The junk checker also stops the run on one.
    pub junk_paid: u64,
    /// Accepts that landed for an epoch the client had ended (the provider's late claim
    /// inside the decision window).
    pub late_accepts: u64,
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
    /// Bonded and unbonding verifier stake, per verifier.
    verifier_stakes: BTreeMap<Address, (U256, U256)>,
    /// The verifier pool in the contract's order (appended when a verifier's bond reaches the
    /// minimum, swap-removed when it falls below), for redrawing each committee.
    pool: Vec<Address>,
    /// What the escrow should hold, from deposits in and withdrawals out.
    holdings: U256,
    /// The same, split by what it is owed for: budgets not yet paid out, fees taken and not
    /// yet credited, credits not yet withdrawn, and stakes (provider and verifier, bonded,
    /// unbonding and burned).
    budgets_left: U256,
    fees_pending: U256,
    credits_total: U256,
    stake_held: U256,
    watch: BTreeSet<(u64, JobId)>,
    pub observed: Observed,
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
            verifier_stakes: BTreeMap::new(),
            pool: Vec::new(),
            holdings: U256::ZERO,
            budgets_left: U256::ZERO,
            fees_pending: U256::ZERO,
            credits_total: U256::ZERO,
            stake_held: U256::ZERO,
            watch: BTreeSet::new(),
            observed: Observed::default(),
        }
    }

    fn credit(&mut self, account: Address, amount: U256) {
        *self.credits.entry(account).or_default() += amount;
        self.credits_total += amount;
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
                self.stake_held += amount;
                *self.stakes.entry(*provider).or_default() += amount;
                return Ok(());
            }
            escrow::Event::VerifierStaked {
                verifier,
                amount,
                total,
            } => {
                self.holdings += amount;
                self.stake_held += amount;
                let st = self.verifier_stakes.entry(*verifier).or_default();
                let before = st.0;
                st.0 += amount;
                if st.0 != *total {
                    return fail(
                        FUNDS_CONSERVED,
                        format!(
                            "verifier {verifier} bonded {}, the escrow says {total}",
                            st.0
                        ),
                    );
                }
                let min = w.escrow.min_verifier_stake;
                if before < min && st.0 >= min && !self.pool.contains(verifier) {
                    self.pool.push(*verifier);
                }
                return Ok(());
            }
            escrow::Event::VerifierUnbondRequested {
                verifier, amount, ..
            } => {
                let st = self.verifier_stakes.entry(*verifier).or_default();
                if st.0 < *amount {
                    return fail(
                        FUNDS_CONSERVED,
                        format!("verifier {verifier} unbonds {amount} of a bonded {}", st.0),
                    );
                }
                st.0 -= amount;
                st.1 += amount;
                if st.0 < w.escrow.min_verifier_stake
                    && let Some(at) = self.pool.iter().position(|a| a == verifier)
                {
                    self.pool.swap_remove(at);
                }
                return Ok(());
            }
            escrow::Event::VerifierStakeWithdrawn { verifier, amount } => {
                let st = self.verifier_stakes.entry(*verifier).or_default();
                if st.1 != *amount {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("verifier {verifier} withdrew stake {amount}, had {}", st.1),
                    );
                }
                st.1 = U256::ZERO;
                self.holdings = self.holdings.saturating_sub(*amount);
                self.stake_held = self.stake_held.saturating_sub(*amount);
                return Ok(());
            }
            escrow::Event::FeesCredited {
                job_id,
                verifier,
                amount,
            } => return self.fees_credited(w, job_no(*job_id), *verifier, *amount),
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
                self.credits_total = self.credits_total.saturating_sub(*amount);
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
                self.stake_held = self.stake_held.saturating_sub(*amount);
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
                max_price_per_step,
                total_steps,
                checkpoint_interval,
                committee_size,
                quorum,
                verifier_fee,
                deadline,
                grace,
                seed_block,
                ..
            } => {
                if w.escrow.job(job.job_id()).is_none() {
                    return fail(
                        FUNDS_CONSERVED,
                        format!("job {job_id} created but not stored"),
                    );
                }
                let needed = escrow::cost_bound(
                    *max_price_per_step,
                    *total_steps,
                    *checkpoint_interval,
                    *verifier_fee,
                    *committee_size,
                );
                if *budget < needed {
                    return fail(
                        FUNDS_CONSERVED,
                        format!(
                            "job {job_id}: a budget of {budget} cannot pay the {needed} the job can cost"
                        ),
                    );
                }
                self.jobs.push(Book {
                    client: *client,
                    deposit: *budget,
                    total_steps: *total_steps,
                    interval: *checkpoint_interval,
                    max_price: *max_price_per_step,
                    committee_size: *committee_size,
                    quorum: *quorum,
                    fee: *verifier_fee,
                    seed_block: *seed_block,
                    ..Book::default()
                });
                self.holdings += budget;
                self.budgets_left += budget;
                self.watch.insert((
                    deadline.saturating_add(*grace).saturating_add(self.slack_s),
                    job_id,
                ));
            }
            ChainEvent::CommitteeSeedMoved { seed_block, .. } => {
                if let Some(b) = self.book(job_id) {
                    b.seed_block = *seed_block;
                }
            }
            ChainEvent::CommitteeDrawn { committee, .. } => {
                return self.committee_drawn(w, job_id, committee);
            }
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                price_per_step,
                start_step,
                ..
            } => {
                let Some(b) = self.book(job_id) else {
                    return fail(NO_DOUBLE_PAY, format!("assign on unknown job {job_id}"));
                };
                b.superseding = false;
                if b.committee.is_empty() || b.committee.contains(provider) {
                    return fail(
                        COMMITTEE_DRAWN,
                        format!(
                            "job {job_id}: provider {provider} assigned with committee {:?}",
                            b.committee
                        ),
                    );
                }
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
                b.provider = *provider;
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                let window = w.escrow.decision_window;
                let now_s = w.chain_time_s();
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if !b.live || b.epoch != *epoch {
                    return fail(
                        NO_JUNK_PAID,
                        format!("job {job_id}: ended epoch {epoch} that was not live"),
                    );
                }
                if *reason == gpuchain_protocol::chain::EpochEndReason::Superseded
                    && !std::mem::take(&mut b.superseding)
                {
                    return fail(
                        NO_JUNK_PAID,
                        format!("job {job_id}: epoch {epoch} superseded with no late accept"),
                    );
                }
                if reason.by_client() {
                    let closed = Closed {
                        provider: b.provider,
                        price: b.price,
                        step_at_end: b.last_step,
                        window_end: now_s.saturating_add(window),
                    };
                    b.closed.insert(*epoch, closed);
                }
                b.live = false;
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                checkpoint_hash,
                provider,
                amount,
                voters,
                fees,
                ..
            } => {
                let truth = truth_of(w, checkpoint_hash);
                let now_s = w.chain_time_s();
                let Some(b) = self.book(job_id) else {
                    return fail(NO_DOUBLE_PAY, format!("pay on unknown job {job_id}"));
                };
                // The live epoch's provider at its price, or, late, the provider of an epoch
                // the client ended, at that epoch's price, inside its window, for the next
                // checkpoint after the head it ended at, once.
                let (payee, price, late) = if b.live && b.epoch == *epoch {
                    (b.provider, b.price, false)
                } else {
                    let Some(c) = b.closed.remove(epoch) else {
                        return fail(
                            NO_JUNK_PAID,
                            format!(
                                "job {job_id}: paid fenced epoch {epoch} (live epoch {})",
                                b.epoch
                            ),
                        );
                    };
                    if now_s > c.window_end {
                        return fail(
                            NO_JUNK_PAID,
                            format!(
                                "job {job_id}: paid epoch {epoch} at {now_s}s, after its decision window closed at {}s",
                                c.window_end
                            ),
                        );
                    }
                    if b.last_step != c.step_at_end || step.saturating_sub(b.last_step) > b.interval
                    {
                        return fail(
                            NO_JUNK_PAID,
                            format!(
                                "job {job_id}: late accept of epoch {epoch} at step {step}, which ended at {} (head {})",
                                c.step_at_end, b.last_step
                            ),
                        );
                    }
                    b.superseding = true;
                    (c.provider, c.price, true)
                };
                if *provider != payee {
                    // A late accept pays the ended epoch's provider; paying another is paying
                    // a fenced epoch's checkpoint to whoever holds the job now.
                    return fail(
                        if late { NO_JUNK_PAID } else { NO_DOUBLE_PAY },
                        format!(
                            "job {job_id}: epoch {epoch} paid {provider}, not its provider {payee} (late: {late})"
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
                let due = U256::from(step - b.last_step) * price;
                if *amount != due {
                    return fail(
                        NO_DOUBLE_PAY,
                        format!("job {job_id}: paid {amount} for steps worth {due}"),
                    );
                }
                let refused = truth.as_ref().is_none_or(|t| {
                    t.job != job_id
                        || t.step != *step
                        || t.epoch != *epoch
                        || t.cheat.is_some_and(|k| k.always_refused(&w.cfg.job))
                });
                if refused {
                    self.observed.junk_paid += 1;
                }
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
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
                    Some(t) if t.cheat.is_some_and(|k| k.always_refused(&w.cfg.job)) => {
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
                if late {
                    self.observed.late_accepts += 1;
                }
                self.budgets_left = self.budgets_left.saturating_sub(*amount);
                self.credit(*provider, *amount);
                return self.decision_fees(w, job_id, *voters, *fees, true);
            }
            ChainEvent::CheckpointRejected {
                epoch,
                step,
                checkpoint_hash,
                provider,
                slashed,
                voters,
                fees,
                ..
            } => {
                let truth = truth_of(w, checkpoint_hash);
                let unserved = w
                    .driver
                    .as_ref()
                    .and_then(|d| d.known_id(checkpoint_hash))
                    .is_some_and(|h| w.unserved.contains(&h));
                let min_stake = w.escrow.min_stake;
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                if !b.live || b.epoch != *epoch {
                    return fail(
                        NO_JUNK_PAID,
                        format!("job {job_id}: rejected in fenced epoch {epoch}"),
                    );
                }
                // The whole committee signed, or nothing is slashed: one honest member keeps
                // an honest provider's stake whole.
                let signers = voters.count_ones();
                let unanimous = signers == b.committee.len();
                if (!unanimous && !slashed.is_zero()) || *slashed > min_stake {
                    return fail(
                        UNANIMOUS_SLASH,
                        format!(
                            "job {job_id}: {signers} of {} members rejected step {step} and {slashed} was slashed",
                            b.committee.len()
                        ),
                    );
                }
                let honest = truth.as_ref().is_some_and(|t| {
                    t.cheat.is_none() && t.job == job_id && t.step == *step && t.epoch == *epoch
                });
                match (honest, slashed.is_zero()) {
                    (true, false) if unserved => self.observed.honest_unserved_slashed += 1,
                    (true, false) => {
                        self.observed.honest_stake_lost += 1;
                        self.observed.honest_stake_lost_units += slashed.saturating_to::<u128>();
                    }
                    (true, true) => self.observed.honest_rejected_unslashed += 1,
                    (false, _) => {}
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
                return self.decision_fees(w, job_id, *voters, *fees, false);
            }
            ChainEvent::JobSettled { refund, .. } => {
                let Some(b) = self.book(job_id) else {
                    return Ok(());
                };
                // Settled once (a second settle reverts), for exactly what completion left.
                if b.unsettled != *refund || !b.ended || b.live {
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
                self.budgets_left = self.budgets_left.saturating_sub(*refund);
                self.credit(client, *refund);
                return self.all_fees_credited(job_id, at);
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
                // The budget identity: every unit of the deposit was paid for steps, taken as
                // a verifier's fee, or is the refund.
                if b.paid + b.fees + refund != b.deposit {
                    return fail(
                        FUNDS_CONSERVED,
                        format!(
                            "job {job_id}: paid {} + fees {} + refund {refund} ≠ deposit {}",
                            b.paid, b.fees, b.deposit
                        ),
                    );
                }
                b.ended = true;
                b.live = false;
                b.closed.clear();
                // Completion leaves the refund for `settle`; expiry credits it at once.
                if completed {
                    b.unsettled = *refund;
                } else {
                    let client = b.client;
                    self.budgets_left = self.budgets_left.saturating_sub(*refund);
                    self.credit(client, *refund);
                    return self.all_fees_credited(job_id, at);
                }
            }
        }
        Ok(())
    }

    /// `CommitteeDrawn`: the committee the escrow drew is the one the rules draw from the
    /// pool (in the checker's own order) with the seed block's hash, which is the run's.
    fn committee_drawn(
        &mut self,
        w: &World,
        job_id: JobId,
        committee: &[Address],
    ) -> Result<(), Failure> {
        let at = w.now;
        let pool = self.pool.clone();
        let Some(b) = self.book(job_id) else {
            return Ok(());
        };
        let seed = escrow::draw_seed(escrow::block_hash(w.seed, b.seed_block), U256::from(job_id));
        let expected = escrow::draw(seed, &pool, b.client, usize::from(b.committee_size));
        if expected.as_deref() != Some(committee) || committee.contains(&b.client) {
            return Err(Failure {
                checker: COMMITTEE_DRAWN,
                at,
                detail: format!(
                    "job {job_id}: drew {committee:?}; block {}'s hash and the pool draw {expected:?}",
                    b.seed_block
                ),
            });
        }
        b.committee = committee.to_vec();
        b.signed = vec![0; committee.len()];
        Ok(())
    }

    /// A decision's fees: one fee per signer (`voters`), all of it for an accept; for a
    /// reject, none when the budget had no slack for them. After it the budget still covers
    /// the rest of the job at the maximum price with every fee, and the escrow's job agrees
    /// with the checker's books.
    fn decision_fees(
        &mut self,
        w: &World,
        job_id: JobId,
        voters: U256,
        fees: U256,
        accept: bool,
    ) -> Result<(), Failure> {
        let at = w.now;
        let fail = |detail: String| {
            Err(Failure {
                checker: FEES_TO_SIGNERS,
                at,
                detail,
            })
        };
        let Some(b) = self.book(job_id) else {
            return Ok(());
        };
        let n = b.committee.len();
        let signers = voters.count_ones();
        if signers < usize::from(b.quorum) || (n < 256 && voters >> n != U256::ZERO) {
            return fail(format!(
                "job {job_id}: decision signed by {voters:#x}, a committee of {n} with quorum {}",
                b.quorum
            ));
        }
        let asked = b.fee * U256::from(signers);
        if fees != asked && (accept || !fees.is_zero()) {
            return fail(format!(
                "job {job_id}: {signers} signers took {fees} in fees (fee {})",
                b.fee
            ));
        }
        if !fees.is_zero() {
            for (i, s) in b.signed.iter_mut().enumerate() {
                if gpuchain_protocol::chain::voted(voters, i) {
                    *s += 1;
                }
            }
        }
        b.fees += fees;
        let Some(remaining) = b.deposit.checked_sub(b.paid + b.fees) else {
            return Err(Failure {
                checker: FUNDS_CONSERVED,
                at,
                detail: format!(
                    "job {job_id}: paid {} and {} in fees out of a deposit of {}",
                    b.paid, b.fees, b.deposit
                ),
            });
        };
        let reserve = escrow::cost_bound(
            b.max_price,
            b.total_steps - b.last_step,
            b.interval,
            b.fee,
            b.committee_size,
        );
        let pending = b.fee * U256::from(b.signed.iter().sum::<u64>());
        let job = w.escrow.job(U256::from(job_id));
        let escrow_view = job.map(|j| (j.remaining, j.fees_pending()));
        if remaining < reserve || escrow_view != Some((remaining, pending)) || pending != b.fees {
            return Err(Failure {
                checker: FUNDS_CONSERVED,
                at,
                detail: format!(
                    "job {job_id}: after a decision the books leave {remaining} with {pending} in fees pending \
                     (the rest of the job can cost {reserve}); the escrow says (remaining, fees pending) = {escrow_view:?}"
                ),
            });
        }
        self.budgets_left = self.budgets_left.saturating_sub(fees);
        self.fees_pending += fees;
        Ok(())
    }

    /// `FeesCredited`: a member's signed decisions × fee, once per job.
    fn fees_credited(
        &mut self,
        w: &World,
        job_id: JobId,
        verifier: Address,
        amount: U256,
    ) -> Result<(), Failure> {
        let at = w.now;
        let Some(b) = self.book(job_id) else {
            return Ok(());
        };
        let member = b.committee.iter().position(|m| *m == verifier);
        let due = member.map_or(U256::ZERO, |i| {
            b.fee * U256::from(b.signed.get(i).copied().unwrap_or(0))
        });
        let first = member.is_some_and(|i| b.credited.insert(i));
        if member.is_none() || !first || amount != due || due.is_zero() {
            return Err(Failure {
                checker: FEES_TO_SIGNERS,
                at,
                detail: format!(
                    "job {job_id}: {verifier} credited {amount} in fees; it signed for {due} (member {member:?}, first credit {first})"
                ),
            });
        }
        self.fees_pending = self.fees_pending.saturating_sub(amount);
        self.credit(verifier, amount);
        Ok(())
    }

    /// At settle or expiry: every member that signed a paid decision had its fees credited.
    fn all_fees_credited(&mut self, job_id: JobId, at: Millis) -> Result<(), Failure> {
        let Some(b) = self.book(job_id) else {
            return Ok(());
        };
        let owed: Vec<usize> = (0..b.signed.len())
            .filter(|i| b.signed[*i] > 0 && !b.credited.contains(i))
            .collect();
        if owed.is_empty() {
            return Ok(());
        }
        Err(Failure {
            checker: FEES_TO_SIGNERS,
            at,
            detail: format!(
                "job {job_id}: members {owed:?} signed paid decisions and were never credited"
            ),
        })
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
        let owed = self.budgets_left + self.fees_pending + self.credits_total + self.stake_held;
        if held != self.holdings || held != w.escrow.owed(TOKEN) || held != owed {
            return Err(Failure {
                checker: FUNDS_CONSERVED,
                at: w.now,
                detail: format!(
                    "escrow holds {held}, deposits less withdrawals say {}, its books say it owes {}; \
                     the checker's books: budgets {} + fees pending {} + credits {} + stakes {} = {owed}",
                    self.holdings,
                    w.escrow.owed(TOKEN),
                    self.budgets_left,
                    self.fees_pending,
                    self.credits_total,
                    self.stake_held,
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

/// The ground truth of a checkpoint hash, if the training model minted it.
fn truth_of(w: &World, checkpoint_hash: &gpuchain_protocol::Hash) -> Option<Truth> {
    w.driver
        .as_ref()
        .and_then(|d| d.known_id(checkpoint_hash))
        .and_then(|h| w.truths.get(&h))
        .cloned()
}
