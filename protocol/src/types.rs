//! Scalar vocabulary shared by every module; on-chain types come from alloy-primitives so
//! values cross into the escrow without conversion.

pub use alloy_primitives::{Address, B256, U256};

/// On-chain job id (`uint256`).
pub type JobId = U256;
/// Fencing token: each `assign` on chain opens a new epoch; older epochs are dead.
pub type Epoch = u64;
/// A training step index; step 0 is the untrained base model.
pub type Step = u64;
/// A BLAKE3 content address (iroh-blobs' hash), `bytes32` on chain.
pub type Hash = B256;

/// BLAKE3 of `bytes` as a [`Hash`].
pub fn blake3_hash(bytes: &[u8]) -> Hash {
    Hash::from(*blake3::hash(bytes).as_bytes())
}
