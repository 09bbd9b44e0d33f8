//! Every precondition `JobEscrow.createJob` checks, in Rust, so that a job the escrow would
//! refuse is refused before anything is sent (no `approve` left behind), with an error that
//! names the offending value and prints amounts in tokens rather than raw units.
//!
//! [`check_create_job`] mirrors the contract's checks in the contract's order; the chain
//! client runs it with the chain's block time, then simulates the transactions
//! ([`super::ChainClient::preflight_create_job`]), then sends them. The command line runs it
//! early with what it knows (see [`CreateJobTerms::token`] and [`CreateJobTerms::now`]).

use std::fmt;

use alloy::primitives::utils::{format_units, parse_units};
use alloy::primitives::{Address, U256};
use alloy::sol_types::SolInterface;

use super::revert::{RevertReason, decode_revert};
use crate::{JobEscrow, TestUSDC};

use gpuchain_protocol::escrow::{MAX_JOB_AMOUNT, checkpoints_in, cost_bound, is_strict_majority};
pub use gpuchain_protocol::escrow::{MAX_VERIFIERS, MIN_VERIFIERS};

/// Decimals of the test USDC the testnets pay in.
pub const TEST_USDC_DECIMALS: u8 = 6;

/// An amount in a token's base units, shown in tokens (`0.04`, `1`, `1.000001`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens {
    pub raw: U256,
    pub decimals: u8,
}

impl Tokens {
    pub fn new(raw: U256, decimals: u8) -> Self {
        Self { raw, decimals }
    }

    /// `n` times this amount (saturating).
    pub fn times(&self, n: u64) -> Self {
        Self::new(self.raw.saturating_mul(U256::from(n)), self.decimals)
    }
}

impl fmt::Display for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_tokens(self.raw, self.decimals))
    }
}

/// Base units → tokens without trailing zeros: `40000` at 6 decimals is `0.04`.
pub fn format_tokens(raw: U256, decimals: u8) -> String {
    let Ok(s) = format_units(raw, decimals) else {
        return format!("{raw} base units");
    };
    match s.split_once('.') {
        Some((int, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                int.to_string()
            } else {
                format!("{int}.{frac}")
            }
        }
        None => s,
    }
}

/// Why a decimal amount in tokens cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("must be positive, got {0}")]
    Negative(String),
    #[error("{given:?} has more than {decimals} decimals (the token's smallest unit)")]
    TooPrecise { given: String, decimals: u8 },
    #[error("{0:?} is not an amount; give a decimal number like 5 or 0.0025")]
    NotANumber(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Tokens → base units: `"0.0025"` at 6 decimals is 2500. Negative amounts, more decimals
/// than the token has (which would otherwise be cut off silently) and anything but plain
/// decimal digits are refused.
pub fn parse_tokens(s: &str, decimals: u8) -> Result<U256, AmountError> {
    let t = s;
    if t.starts_with('-') {
        return Err(AmountError::Negative(t.to_string()));
    }
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(AmountError::NotANumber(t.to_string()));
    }
    if frac.len() > usize::from(decimals) {
        return Err(AmountError::TooPrecise {
            given: t.to_string(),
            decimals,
        });
    }
    // parse_units wants a digit before the point
    let text = if int.is_empty() {
        format!("0{t}")
    } else {
        t.to_string()
    };
    parse_units(&text, decimals)
        .map(|p| p.get_absolute())
        .map_err(|_| AmountError::TooLarge(t.to_string()))
}

/// The arguments of one `createJob`, plus what the checks need to know about the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateJobTerms {
    /// `None` before the payment token is known (the command line: the node picks it).
    pub token: Option<Address>,
    pub budget: U256,
    pub max_price_per_step: U256,
    pub total_steps: u64,
    pub checkpoint_interval: u64,
    /// How many verifiers the escrow draws for the job's committee.
    pub committee_size: u8,
    pub quorum: u8,
    /// What each committee member signing a decision earns, out of the budget.
    pub verifier_fee: U256,
    /// Absolute deadline in block time.
    pub deadline: u64,
    /// The chain's latest block time. Before the chain is asked, pass 0 and the deadline
    /// in seconds from now: the check is then "the deadline is not 0".
    pub now: u64,
    /// Seconds after the deadline until the job can be expired.
    pub grace: u64,
    /// Pooled verifiers the escrow could draw for this client (the pool, less the client if
    /// it is pooled), when read from the chain.
    pub available_verifiers: Option<u64>,
    /// The escrow's bounds on deadline and grace, when read from the chain.
    pub limits: Option<EscrowLimits>,
    /// The payment token's decimals, for the messages.
    pub decimals: u8,
}

/// `JobEscrow.maxDuration` and `maxGrace`: how far ahead a deadline and how long a grace may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowLimits {
    pub max_duration: u64,
    pub max_grace: u64,
}

/// One reason `createJob` would revert, naming the value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateJobProblem {
    #[error("the payment token is the zero address; configure the node's --token")]
    ZeroToken,
    #[error("the budget must be positive, got {0}")]
    ZeroBudget(Tokens),
    #[error("the maximum price per step must be positive, got {0}")]
    ZeroMaxPrice(Tokens),
    #[error("the {what} {amount} is above the escrow's limit of {limit} (2^96 - 1 base units)")]
    AmountTooLarge {
        what: &'static str,
        amount: Tokens,
        limit: Tokens,
    },
    #[error("the job has 0 total steps")]
    NoSteps,
    #[error("the job's checkpoint interval is 0")]
    ZeroInterval,
    #[error("the checkpoint interval {interval} is longer than the job's {total_steps} steps")]
    IntervalAboveSteps { interval: u64, total_steps: u64 },
    #[error(
        "a committee of {size} verifiers is outside the escrow's {min}..={max}: \
         give --committee N within it"
    )]
    CommitteeSize { size: u8, min: usize, max: usize },
    #[error(
        "quorum {quorum} must be a strict majority of the committee of {committee} \
         (more than half, at most all of them)"
    )]
    InvalidQuorum { quorum: u8, committee: u8 },
    #[error("the deadline is 0 seconds from now; give --deadline SECS > 0")]
    ZeroDeadline,
    #[error("the deadline {deadline} is not after the chain's time {now}")]
    DeadlinePassed { deadline: u64, now: u64 },
    #[error(
        "the deadline is {secs} s from now; the escrow allows at most {max} s: lower --deadline"
    )]
    DeadlineTooFar { secs: u64, max: u64 },
    #[error("the grace {grace} s is longer than the escrow's {max} s: lower --grace")]
    GraceTooLong { grace: u64, max: u64 },
    #[error(
        "the budget {budget} is less than the {needed} the job can cost: every step at the \
         maximum price {max_price} plus the verifier fee {fee} × {committee} members × \
         {checkpoints} checkpoints; raise --budget to at least {needed} or lower --max-price \
         or --verifier-fee"
    )]
    BudgetTooSmall {
        budget: Tokens,
        needed: Tokens,
        max_price: Tokens,
        fee: Tokens,
        committee: u8,
        checkpoints: u64,
    },
    #[error(
        "the escrow's verifier pool has {available} verifiers this client could be given, \
         fewer than the committee of {needed}: lower --committee, or wait for verifiers to \
         register (gpuchain verifier register)"
    )]
    NotEnoughVerifiers { available: u64, needed: u8 },
}

/// The contract's `createJob` checks, in its order.
// The budget problem carries every figure of its message (about 170 bytes): a check run once
// per job, whose error the chain client boxes (`ChainError::CreateJobRefused`).
#[allow(clippy::result_large_err)]
pub fn check_create_job(t: &CreateJobTerms) -> Result<(), CreateJobProblem> {
    let tokens = |raw: U256| Tokens::new(raw, t.decimals);
    if t.token == Some(Address::ZERO) {
        return Err(CreateJobProblem::ZeroToken);
    }
    if t.budget.is_zero() {
        return Err(CreateJobProblem::ZeroBudget(tokens(t.budget)));
    }
    if t.max_price_per_step.is_zero() {
        return Err(CreateJobProblem::ZeroMaxPrice(tokens(t.max_price_per_step)));
    }
    for (what, amount) in [
        ("budget", t.budget),
        ("maximum price per step", t.max_price_per_step),
        ("verifier fee", t.verifier_fee),
    ] {
        if amount > MAX_JOB_AMOUNT {
            return Err(CreateJobProblem::AmountTooLarge {
                what,
                amount: tokens(amount),
                limit: tokens(MAX_JOB_AMOUNT),
            });
        }
    }
    if t.total_steps == 0 {
        return Err(CreateJobProblem::NoSteps);
    }
    if t.checkpoint_interval == 0 {
        return Err(CreateJobProblem::ZeroInterval);
    }
    if t.checkpoint_interval > t.total_steps {
        return Err(CreateJobProblem::IntervalAboveSteps {
            interval: t.checkpoint_interval,
            total_steps: t.total_steps,
        });
    }
    let size = usize::from(t.committee_size);
    if !(MIN_VERIFIERS..=MAX_VERIFIERS).contains(&size) {
        return Err(CreateJobProblem::CommitteeSize {
            size: t.committee_size,
            min: MIN_VERIFIERS,
            max: MAX_VERIFIERS,
        });
    }
    if !is_strict_majority(t.quorum, size) {
        return Err(CreateJobProblem::InvalidQuorum {
            quorum: t.quorum,
            committee: t.committee_size,
        });
    }
    if t.deadline <= t.now {
        return Err(if t.now == 0 {
            CreateJobProblem::ZeroDeadline
        } else {
            CreateJobProblem::DeadlinePassed {
                deadline: t.deadline,
                now: t.now,
            }
        });
    }
    if let Some(l) = t.limits {
        let secs = t.deadline.saturating_sub(t.now);
        // Without the chain's time (now = 0) the deadline's distance is unknown.
        if t.now != 0 && secs > l.max_duration {
            return Err(CreateJobProblem::DeadlineTooFar {
                secs,
                max: l.max_duration,
            });
        }
        if t.grace > l.max_grace {
            return Err(CreateJobProblem::GraceTooLong {
                grace: t.grace,
                max: l.max_grace,
            });
        }
    }
    let needed = cost_bound(
        t.max_price_per_step,
        t.total_steps,
        t.checkpoint_interval,
        t.verifier_fee,
        t.committee_size,
    );
    if t.budget < needed {
        return Err(CreateJobProblem::BudgetTooSmall {
            budget: tokens(t.budget),
            needed: tokens(needed),
            max_price: tokens(t.max_price_per_step),
            fee: tokens(t.verifier_fee),
            committee: t.committee_size,
            checkpoints: checkpoints_in(t.total_steps, t.checkpoint_interval),
        });
    }
    if let Some(available) = t.available_verifiers
        && available < u64::from(t.committee_size)
    {
        return Err(CreateJobProblem::NotEnoughVerifiers {
            available,
            needed: t.committee_size,
        });
    }
    Ok(())
}

/// [`decode_revert`], with the amounts of the errors that carry them (the escrow's and the
/// token's) printed in tokens.
pub fn decode_revert_in_tokens(data: &[u8], decimals: u8) -> RevertReason {
    use JobEscrow::JobEscrowErrors as E;
    use TestUSDC::TestUSDCErrors as T;
    let tk = |raw: U256| Tokens::new(raw, decimals);
    let custom = |name: &str, detail: String| RevertReason::Custom {
        name: name.to_string(),
        detail,
    };
    if let Ok(e) = E::abi_decode(data) {
        return match e {
            E::BudgetTooSmall(e) => custom(
                "BudgetTooSmall",
                format!(
                    "BudgetTooSmall: the budget {} is less than the {} every step at the maximum price needs",
                    tk(e.budget),
                    tk(e.needed)
                ),
            ),
            E::PriceTooHigh(e) => custom(
                "PriceTooHigh",
                format!(
                    "PriceTooHigh: price {} per step is above the job's maximum {}",
                    tk(e.price),
                    tk(e.maxPrice)
                ),
            ),
            E::InsufficientStake(e) => custom(
                "InsufficientStake",
                format!(
                    "InsufficientStake: bonded {}, {} needed (the minimum stake for each live epoch)",
                    tk(e.bonded),
                    tk(e.needed)
                ),
            ),
            E::DepositMismatch(e) => custom(
                "DepositMismatch",
                format!(
                    "DepositMismatch: the escrow received {} of the token, expected {}",
                    tk(e.received),
                    tk(e.expected)
                ),
            ),
            _ => decode_revert(data),
        };
    }
    if let Ok(e) = T::abi_decode(data) {
        return match e {
            T::ERC20InsufficientBalance(e) => custom(
                "ERC20InsufficientBalance",
                format!(
                    "ERC20InsufficientBalance: {} holds {} of the token, {} needed",
                    e.sender,
                    tk(e.balance),
                    tk(e.needed)
                ),
            ),
            T::ERC20InsufficientAllowance(e) => custom(
                "ERC20InsufficientAllowance",
                format!(
                    "ERC20InsufficientAllowance: {} may spend {}, {} needed",
                    e.spender,
                    tk(e.allowance),
                    tk(e.needed)
                ),
            ),
            _ => decode_revert(data),
        };
    }
    decode_revert(data)
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolError;

    use super::*;

    fn a(n: u8) -> Address {
        Address::repeat_byte(n)
    }

    fn good() -> CreateJobTerms {
        CreateJobTerms {
            token: Some(a(0xaa)),
            budget: U256::from(1_000_000u64),
            max_price_per_step: U256::from(5_000u64),
            total_steps: 40,
            checkpoint_interval: 10,
            committee_size: 2,
            quorum: 2,
            verifier_fee: U256::from(100u64),
            deadline: 2_000,
            now: 1_000,
            grace: 60,
            available_verifiers: Some(2),
            limits: Some(EscrowLimits {
                max_duration: 1_000,
                max_grace: 60,
            }),
            decimals: 6,
        }
    }

    fn problem(f: impl FnOnce(&mut CreateJobTerms)) -> String {
        let mut t = good();
        f(&mut t);
        check_create_job(&t)
            .expect_err("should be refused")
            .to_string()
    }

    #[test]
    fn good_terms_pass_and_the_budget_may_be_exactly_enough() {
        assert_eq!(check_create_job(&good()), Ok(()));
        let mut t = good();
        // every step at the maximum price, and a fee for each member at each of 4 checkpoints
        t.budget = U256::from(5_000u64 * 40 + 100 * 2 * 4);
        assert_eq!(check_create_job(&t), Ok(()));
        t.budget -= U256::from(1u8);
        assert!(matches!(
            check_create_job(&t),
            Err(CreateJobProblem::BudgetTooSmall { .. })
        ));
        t.budget += U256::from(1u8);
        // the command line's form: no token, deadline relative to now = 0
        t.token = None;
        t.now = 0;
        t.deadline = 1;
        assert_eq!(check_create_job(&t), Ok(()));
    }

    #[test]
    fn each_problem_names_the_value_in_tokens() {
        let m = problem(|t| t.budget = U256::from(100_000u64));
        assert!(m.contains("budget 0.1 "), "{m}");
        assert!(m.contains("less than the 0.2008 the job can cost"), "{m}");
        assert!(m.contains("0.0001 × 2 members × 4 checkpoints"), "{m}");

        let m = problem(|t| t.budget = MAX_JOB_AMOUNT + U256::from(1u8));
        assert!(m.contains("budget 79228162514264337593543.950336"), "{m}");
        assert!(m.contains("limit of 79228162514264337593543.950335"), "{m}");

        let m = problem(|t| t.max_price_per_step = U256::MAX);
        assert!(m.contains("maximum price per step"), "{m}");
        let m = problem(|t| t.verifier_fee = U256::MAX);
        assert!(m.contains("verifier fee"), "{m}");

        let m = problem(|t| t.quorum = 0);
        assert!(
            m.contains("quorum 0") && m.contains("committee of 2"),
            "{m}"
        );
        let m = problem(|t| t.quorum = 3);
        assert!(m.contains("quorum 3"), "{m}");

        let m = problem(|t| {
            t.now = 0;
            t.deadline = 0;
        });
        assert!(m.contains("--deadline"), "{m}");
        let m = problem(|t| t.deadline = 1_000);
        assert!(
            m.contains("deadline 1000") && m.contains("time 1000"),
            "{m}"
        );

        let m = problem(|t| t.budget = U256::ZERO);
        assert!(m.contains("budget must be positive"), "{m}");
        let m = problem(|t| t.max_price_per_step = U256::ZERO);
        assert!(m.contains("maximum price"), "{m}");
        let m = problem(|t| t.token = Some(Address::ZERO));
        assert!(m.contains("--token"), "{m}");
        let m = problem(|t| t.total_steps = 0);
        assert!(m.contains("0 total steps"), "{m}");
        let m = problem(|t| t.checkpoint_interval = 0);
        assert!(m.contains("interval is 0"), "{m}");
        let m = problem(|t| t.checkpoint_interval = 41);
        assert!(m.contains("41") && m.contains("40 steps"), "{m}");
        let m = problem(|t| t.deadline = 2_001);
        assert!(
            m.contains("1001 s from now") && m.contains("at most 1000 s"),
            "{m}"
        );
        let m = problem(|t| t.grace = 61);
        assert!(m.contains("grace 61 s") && m.contains("--grace"), "{m}");
        let m = problem(|t| t.available_verifiers = Some(1));
        assert!(
            m.contains("1 verifiers") && m.contains("committee of 2"),
            "{m}"
        );
        let m = problem(|t| t.committee_size = 1);
        assert!(m.contains("committee of 1 verifiers"), "{m}");
        let m = problem(|t| {
            t.committee_size = 4;
            t.quorum = 2;
            t.available_verifiers = Some(4);
        });
        assert!(m.contains("strict majority of the committee of 4"), "{m}");
        let m = problem(|t| t.committee_size = 33);
        assert!(m.contains("committee of 33"), "{m}");
    }

    #[test]
    fn checks_run_in_the_contracts_order() {
        // zero budget (ZeroAmount) comes before the quorum and the deadline
        let mut t = good();
        t.budget = U256::ZERO;
        t.quorum = 0;
        t.deadline = 0;
        assert!(matches!(
            check_create_job(&t),
            Err(CreateJobProblem::ZeroBudget(_))
        ));
    }

    #[test]
    fn tokens_print_without_trailing_zeros() {
        assert_eq!(format_tokens(U256::from(40_000u64), 6), "0.04");
        assert_eq!(format_tokens(U256::from(1_000_000u64), 6), "1");
        assert_eq!(format_tokens(U256::from(1_000_001u64), 6), "1.000001");
        assert_eq!(format_tokens(U256::ZERO, 6), "0");
        assert_eq!(format_tokens(U256::from(7u8), 0), "7");
    }

    #[test]
    fn parse_tokens_refuses_negatives_and_lost_precision() {
        assert_eq!(parse_tokens("5", 6), Ok(U256::from(5_000_000u64)));
        assert_eq!(parse_tokens("0.0025", 6), Ok(U256::from(2_500u64)));
        assert_eq!(parse_tokens(".5", 6), Ok(U256::from(500_000u64)));
        assert_eq!(parse_tokens("5.", 6), Ok(U256::from(5_000_000u64)));
        let e = parse_tokens("-1", 6).expect_err("negative");
        assert_eq!(e.to_string(), "must be positive, got -1");
        assert!(matches!(
            parse_tokens("0.0000001", 6),
            Err(AmountError::TooPrecise { .. })
        ));
        for bad in ["", ".", "1e5", "1,5", "abc", "1.2.3", "+1", " 1"] {
            assert!(
                matches!(parse_tokens(bad, 6), Err(AmountError::NotANumber(_))),
                "{bad:?}"
            );
        }
        let huge = "9".repeat(100);
        assert!(matches!(
            parse_tokens(&huge, 6),
            Err(AmountError::TooLarge(_))
        ));
        // above uint128 but within uint256: parsed, refused later by the check
        assert!(parse_tokens("1000000000000000000000000000000000000000", 6).is_ok());
    }

    #[test]
    fn reverts_with_amounts_are_printed_in_tokens() {
        let data = JobEscrow::BudgetTooSmall {
            budget: U256::from(100_000u64),
            needed: U256::from(200_000u64),
        }
        .abi_encode();
        let r = decode_revert_in_tokens(&data, 6);
        assert_eq!(r.name(), Some("BudgetTooSmall"));
        let text = r.to_string();
        assert!(text.contains("0.1") && text.contains("0.2"), "{text}");
        assert!(!text.contains("100000"), "{text}");

        let data = TestUSDC::ERC20InsufficientBalance {
            sender: a(1),
            balance: U256::from(1_500_000u64),
            needed: U256::from(2_000_000u64),
        }
        .abi_encode();
        let text = decode_revert_in_tokens(&data, 6).to_string();
        assert!(
            text.contains("holds 1.5") && text.contains("2 needed"),
            "{text}"
        );

        // errors without amounts decode as before
        let data = JobEscrow::InvalidVerifiers {}.abi_encode();
        assert_eq!(
            decode_revert_in_tokens(&data, 6).name(),
            Some("InvalidVerifiers")
        );
    }
}
