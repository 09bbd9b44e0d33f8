use std::fmt;

use alloy::primitives::Bytes;
use alloy::sol_types::{SolInterface, decode_revert_reason};

use crate::{JobEscrow, TestUSDC};

/// Why a call reverted, as readable as the revert data allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevertReason {
    /// One of the escrow's (or the token's) custom errors: `name` is the Solidity error name,
    /// `detail` its arguments, e.g. `WrongEpoch { given: 2, current: 1 }`.
    Custom { name: String, detail: String },
    /// `Error(string)`, a `Panic(uint256)` or an empty revert, in words.
    Message(String),
    /// Data none of our ABIs knows.
    Unknown(Bytes),
}

impl RevertReason {
    /// The custom error's name, if it is one.
    pub fn name(&self) -> Option<&str> {
        match self {
            RevertReason::Custom { name, .. } => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for RevertReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RevertReason::Custom { detail, .. } => f.write_str(detail),
            RevertReason::Message(m) => f.write_str(m),
            RevertReason::Unknown(data) => write!(f, "unknown revert data {data}"),
        }
    }
}

/// Decodes revert data against the escrow's errors, then the token's (its errors bubble up
/// through `SafeERC20`), then Solidity's built-in `Error`/`Panic`.
pub fn decode_revert(data: &[u8]) -> RevertReason {
    if data.is_empty() {
        return RevertReason::Message("reverted without data".into());
    }
    if let Ok(e) = JobEscrow::JobEscrowErrors::abi_decode(data) {
        return custom(&format!("{e:?}"));
    }
    if let Ok(e) = TestUSDC::TestUSDCErrors::abi_decode(data) {
        return custom(&format!("{e:?}"));
    }
    match decode_revert_reason(data) {
        Some(m) => RevertReason::Message(m),
        None => RevertReason::Unknown(Bytes::copy_from_slice(data)),
    }
}

/// The generated enums print as `Name(Name { field: value, .. })`; keep the inner part, which
/// reads like the Solidity error.
fn custom(debug: &str) -> RevertReason {
    let name: String = debug
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let detail = debug
        .strip_prefix(&name)
        .and_then(|rest| rest.strip_prefix('('))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or(debug)
        .to_string();
    RevertReason::Custom { name, detail }
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolError;

    use super::*;

    #[test]
    fn escrow_errors_decode_with_name_and_arguments() {
        let data = JobEscrow::WrongEpoch {
            given: 2,
            current: 1,
        }
        .abi_encode();
        let reason = decode_revert(&data);
        assert_eq!(reason.name(), Some("WrongEpoch"));
        let text = reason.to_string();
        assert!(text.contains("given: 2"), "{text}");
        assert!(text.contains("current: 1"), "{text}");
    }

    #[test]
    fn unit_errors_and_garbage_do_not_panic() {
        let data = JobEscrow::NothingToWithdraw {}.abi_encode();
        assert_eq!(decode_revert(&data).name(), Some("NothingToWithdraw"));
        assert!(matches!(decode_revert(&[]), RevertReason::Message(_)));
        // short data is no custom error (alloy may read it as text)
        assert_eq!(decode_revert(&[1, 2, 3]).name(), None);
        assert!(matches!(
            decode_revert(&[0xde, 0xad, 0xbe, 0xef, 0, 1]),
            RevertReason::Unknown(_)
        ));
    }
}
