//! EIP-712 digests of `Bid` and `Vote`, byte for byte what JobEscrow's `hashBid`/`hashVote`
//! compute (docs/interfaces.md; checked against the shared vector in tests/eip712_vector.rs).

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, eip712_domain};

use crate::signing::{Sig65, SignatureError, SigningKey, recover_signer};
use crate::types::{Epoch, Hash, JobId, Step};

pub const DOMAIN_NAME: &str = "GpuChain JobEscrow";
pub const DOMAIN_VERSION: &str = "1";

mod typed {
    alloy_sol_types::sol! {
        struct Bid { uint256 jobId; uint64 epoch; address provider; uint256 pricePerStep; uint64 expiry; }
        struct Vote { uint256 jobId; uint64 epoch; uint64 step; bytes32 checkpointHash; bool accept; }
    }
}

/// Which escrow a signature is for: chain id and the JobEscrow address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EscrowDomain {
    pub chain_id: u64,
    pub escrow: Address,
}

impl EscrowDomain {
    pub fn eip712(&self) -> Eip712Domain {
        eip712_domain! {
            name: DOMAIN_NAME,
            version: DOMAIN_VERSION,
            chain_id: self.chain_id,
            verifying_contract: self.escrow,
        }
    }

    pub fn separator(&self) -> B256 {
        self.eip712().separator()
    }
}

/// The signed fields of a bid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BidFields {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub provider: Address,
    pub price_per_step: U256,
    pub expiry: u64,
}

/// The signed fields of a vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoteFields {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub step: Step,
    pub checkpoint_hash: Hash,
    pub accept: bool,
}

impl BidFields {
    fn typed(&self) -> typed::Bid {
        typed::Bid {
            jobId: self.job_id,
            epoch: self.epoch,
            provider: self.provider,
            pricePerStep: self.price_per_step,
            expiry: self.expiry,
        }
    }

    pub fn type_hash() -> B256 {
        alloy_primitives::keccak256(typed::Bid::eip712_encode_type().as_bytes())
    }

    pub fn digest(&self, domain: &EscrowDomain) -> B256 {
        self.typed().eip712_signing_hash(&domain.eip712())
    }

    pub fn sign(&self, domain: &EscrowDomain, key: &SigningKey) -> Sig65 {
        key.sign_digest(&self.digest(domain))
    }

    pub fn recover(&self, domain: &EscrowDomain, sig: &Sig65) -> Result<Address, SignatureError> {
        recover_signer(&self.digest(domain), sig)
    }
}

impl VoteFields {
    fn typed(&self) -> typed::Vote {
        typed::Vote {
            jobId: self.job_id,
            epoch: self.epoch,
            step: self.step,
            checkpointHash: self.checkpoint_hash,
            accept: self.accept,
        }
    }

    pub fn type_hash() -> B256 {
        alloy_primitives::keccak256(typed::Vote::eip712_encode_type().as_bytes())
    }

    pub fn digest(&self, domain: &EscrowDomain) -> B256 {
        self.typed().eip712_signing_hash(&domain.eip712())
    }

    pub fn sign(&self, domain: &EscrowDomain, key: &SigningKey) -> Sig65 {
        key.sign_digest(&self.digest(domain))
    }

    pub fn recover(&self, domain: &EscrowDomain, sig: &Sig65) -> Result<Address, SignatureError> {
        recover_signer(&self.digest(domain), sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_strings_match_interfaces_doc() {
        assert_eq!(
            typed::Bid::eip712_encode_type(),
            "Bid(uint256 jobId,uint64 epoch,address provider,uint256 pricePerStep,uint64 expiry)"
        );
        assert_eq!(
            typed::Vote::eip712_encode_type(),
            "Vote(uint256 jobId,uint64 epoch,uint64 step,bytes32 checkpointHash,bool accept)"
        );
    }

    #[test]
    fn digest_binds_domain_and_every_field() {
        let d = EscrowDomain {
            chain_id: 1,
            escrow: Address::repeat_byte(1),
        };
        let v = VoteFields {
            job_id: U256::from(1),
            epoch: 1,
            step: 50,
            checkpoint_hash: Hash::repeat_byte(5),
            accept: true,
        };
        let base = v.digest(&d);
        assert_ne!(VoteFields { accept: false, ..v }.digest(&d), base);
        assert_ne!(VoteFields { epoch: 2, ..v }.digest(&d), base);
        assert_ne!(v.digest(&EscrowDomain { chain_id: 2, ..d }), base);
    }
}
