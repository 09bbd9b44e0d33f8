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

use gpuchain_protocol::escrow::is_strict_majority;
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
    pub verifiers: Vec<Address>,
    pub quorum: u8,
    /// Absolute deadline in block time.
    pub deadline: u64,
    /// The chain's latest block time. Before the chain is asked, pass 0 and the deadline
    /// in seconds from now: the check is then "the deadline is not 0".
    pub now: u64,
    /// Seconds after the deadline until the job can be expired.
    pub grace: u64,
    /// The creating account, when known: it may not be one of its verifiers.
    pub client: Option<Address>,
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
    #[error("the {what} {amount} is above the escrow's limit of {limit} (2^128 - 1 base units)")]
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
        "a job needs at least two verifiers, {count} given: pass --verifiers ADDR,ADDR[,ADDR…]"
    )]
    TooFewVerifiers { count: usize },
    #[error("{count} verifiers listed; the escrow allows at most {max}")]
    TooManyVerifiers { count: usize, max: usize },
    #[error("verifier #{position} is the zero address")]
    ZeroVerifier { position: usize },
    #[error("verifier {address} is listed twice (#{first} and #{second})")]
    DuplicateVerifier {
        address: Address,
        first: usize,
        second: usize,
    },
    #[error(
        "quorum {quorum} must be a strict majority of the {verifiers} verifiers \
         (more than half, at most all of them)"
    )]
    InvalidQuorum { quorum: u8, verifiers: usize },
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
    #[error("the client {0} is listed as one of its own verifiers; verifiers must be independent")]
    ClientIsVerifier(Address),
    #[error(
        "the budget {budget} is less than the maximum price {max_price} × {total_steps} steps \
         = {needed}; raise --budget to at least {needed} or lower --max-price",
        needed = .max_price.times(*.total_steps)
    )]
    BudgetTooSmall {
        budget: Tokens,
        max_price: Tokens,
        total_steps: u64,
    },
}

/// The contract's `createJob` checks, in its order, with `_listVerifiers`' zero and
/// duplicate checks (which the contract only makes after the others) folded in where
/// the verifier list is checked.
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
    let limit = U256::from(u128::MAX);
    for (what, amount) in [
        ("budget", t.budget),
        ("maximum price per step", t.max_price_per_step),
    ] {
        if amount > limit {
            return Err(CreateJobProblem::AmountTooLarge {
                what,
                amount: tokens(amount),
                limit: tokens(limit),
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
    if t.verifiers.len() < MIN_VERIFIERS {
        return Err(CreateJobProblem::TooFewVerifiers {
            count: t.verifiers.len(),
        });
    }
    if t.verifiers.len() > MAX_VERIFIERS {
        return Err(CreateJobProblem::TooManyVerifiers {
            count: t.verifiers.len(),
            max: MAX_VERIFIERS,
        });
    }
    for (i, v) in t.verifiers.iter().enumerate() {
        if v.is_zero() {
            return Err(CreateJobProblem::ZeroVerifier { position: i + 1 });
        }
        if let Some(j) = t.verifiers[..i].iter().position(|w| w == v) {
            return Err(CreateJobProblem::DuplicateVerifier {
                address: *v,
                first: j + 1,
                second: i + 1,
            });
        }
        if t.client == Some(*v) {
            return Err(CreateJobProblem::ClientIsVerifier(*v));
        }
    }
    if !is_strict_majority(t.quorum, t.verifiers.len()) {
        return Err(CreateJobProblem::InvalidQuorum {
            quorum: t.quorum,
            verifiers: t.verifiers.len(),
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
    // ≤ u128 × u64: cannot overflow U256
    let needed = t.max_price_per_step * U256::from(t.total_steps);
    if t.budget < needed {
        return Err(CreateJobProblem::BudgetTooSmall {
            budget: tokens(t.budget),
            max_price: tokens(t.max_price_per_step),
            total_steps: t.total_steps,
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
            verifiers: vec![a(1), a(2)],
            quorum: 2,
            deadline: 2_000,
            now: 1_000,
            grace: 60,
            client: Some(a(0xc)),
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
        t.budget = U256::from(5_000u64 * 40);
        assert_eq!(check_create_job(&t), Ok(()));
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
        assert!(m.contains("0.005 × 40 steps = 0.2"), "{m}");

        let m = problem(|t| t.budget = U256::from(u128::MAX) + U256::from(1u8));
        assert!(
            m.contains("budget 340282366920938463463374607431768.211456"),
            "{m}"
        );
        assert!(
            m.contains("limit of 340282366920938463463374607431768.211455"),
            "{m}"
        );

        let m = problem(|t| t.max_price_per_step = U256::MAX);
        assert!(m.contains("maximum price per step"), "{m}");

        let m = problem(|t| t.verifiers = vec![a(1), a(2), a(1)]);
        assert!(
            m.contains(&a(1).to_string()) && m.contains("#1 and #3"),
            "{m}"
        );

        let m = problem(|t| t.verifiers = vec![a(1), Address::ZERO]);
        assert!(m.contains("verifier #2 is the zero address"), "{m}");

        let m = problem(|t| t.quorum = 0);
        assert!(m.contains("quorum 0") && m.contains("2 verifiers"), "{m}");
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
        let m = problem(|t| t.verifiers[1] = a(0xc));
        assert!(m.contains("its own verifiers"), "{m}");
        let m = problem(|t| t.verifiers = vec![a(1)]);
        assert!(m.contains("at least two verifiers, 1 given"), "{m}");
        let m = problem(|t| {
            t.verifiers = vec![a(1), a(2), a(3), a(4)];
            t.quorum = 2;
        });
        assert!(m.contains("strict majority of the 4"), "{m}");
        let m = problem(|t| t.verifiers = (1..=33).map(a).collect());
        assert!(m.contains("33 verifiers"), "{m}");
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
