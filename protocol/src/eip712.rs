//! EIP-712 digests of `Bid` and `Vote`, byte for byte what JobEscrow's `hashBid`/`hashVote`
//! compute (docs/interfaces.md; checked against the shared vector in tests/eip712_vector.rs).

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, eip712_domain};

use crate::signing::{Scheme, Sig65, SignatureError, SigningKey};
use crate::types::{Epoch, Hash, JobId, Step};

pub const DOMAIN_NAME: &str = "GpuChain JobEscrow";
pub const DOMAIN_VERSION: &str = "1";

mod typed {
    alloy_sol_types::sol! {
        struct Bid { uint256 jobId; bytes32 terms; uint64 epoch; address provider; uint256 pricePerStep; uint64 expiry; }
        struct Vote { uint256 jobId; uint64 epoch; uint64 step; bytes32 checkpointHash; bool accept; }
        /// Not signed itself: `abi.encode`d, its keccak is `JobEscrow.termsOf`.
        struct Terms {
            address client; address token; uint256 budget; uint256 maxPricePerStep;
            uint64 totalSteps; uint64 checkpointInterval; bytes32 specHash; bytes32 committeeHash;
            uint8 quorum; uint256 verifierFee; uint64 deadline; uint64 grace;
        }
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

std::thread_local! {
    /// The last domain's separator: a process talks to one escrow, and hashing the domain
    /// was half the cost of every bid and vote digest.
    static SEPARATOR: std::cell::Cell<Option<(EscrowDomain, B256)>> = const { std::cell::Cell::new(None) };
}

/// `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct)`, as EIP-712 defines it.
fn signing_hash(domain: &EscrowDomain, struct_hash: B256) -> B256 {
    let separator = SEPARATOR.with(|c| match c.get() {
        Some((d, sep)) if d == *domain => sep,
        _ => {
            let sep = domain.separator();
            c.set(Some((*domain, sep)));
            sep
        }
    });
    let mut pre = [0u8; 66];
    pre[..2].copy_from_slice(&[0x19, 0x01]);
    pre[2..34].copy_from_slice(separator.as_slice());
    pre[34..].copy_from_slice(struct_hash.as_slice());
    alloy_primitives::keccak256(pre)
}

/// A job's contents as `createJob` fixed them and `drawCommittee` completed them: what a bid
/// is signed over, so a bid for one job cannot assign its provider to another job that
/// happens to get the same id (a reorg, or a second escrow at the same address on another
/// fork), nor to the same job with another committee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobTerms<'a> {
    pub client: Address,
    pub token: Address,
    pub budget: U256,
    pub max_price_per_step: U256,
    pub total_steps: Step,
    pub checkpoint_interval: Step,
    pub spec_hash: Hash,
    /// In draw order.
    pub committee: &'a [Address],
    pub quorum: u8,
    pub verifier_fee: U256,
    pub deadline: u64,
    pub grace: u64,
}

/// `keccak256(abi.encodePacked(committee))`: `encodePacked` pads each element of an address
/// array to a full word.
pub fn committee_hash(committee: &[Address]) -> Hash {
    let packed: Vec<u8> = committee.iter().flat_map(|v| v.into_word().0).collect();
    alloy_primitives::keccak256(&packed)
}

impl JobTerms<'_> {
    /// `keccak256(abi.encode(client, token, budget, maxPricePerStep, totalSteps,
    /// checkpointInterval, specHash, keccak256(abi.encodePacked(committee)), quorum,
    /// verifierFee, deadline, grace))`, as `JobEscrow.termsOf` stores it after the draw.
    pub fn hash(&self) -> Hash {
        use alloy_sol_types::SolValue;
        let terms = typed::Terms {
            client: self.client,
            token: self.token,
            budget: self.budget,
            maxPricePerStep: self.max_price_per_step,
            totalSteps: self.total_steps,
            checkpointInterval: self.checkpoint_interval,
            specHash: self.spec_hash,
            committeeHash: committee_hash(self.committee),
            quorum: self.quorum,
            verifierFee: self.verifier_fee,
            deadline: self.deadline,
            grace: self.grace,
        };
        // All fields are static, so this is abi.encode(client, …, grace): a word each.
        alloy_primitives::keccak256(terms.abi_encode())
    }
}

/// The signed fields of a bid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BidFields {
    pub job_id: JobId,
    /// [`JobTerms::hash`] of the job bid on.
    pub terms: Hash,
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
            terms: self.terms,
            epoch: self.epoch,
            provider: self.provider,
            pricePerStep: self.price_per_step,
            expiry: self.expiry,
        }
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
}

/// Type hash, digest, signing and recovery: the same for every signed struct.
macro_rules! signed_struct {
    ($fields:ty, $typed:ty) => {
        impl $fields {
            pub fn type_hash() -> B256 {
                alloy_primitives::keccak256(<$typed>::eip712_encode_type().as_bytes())
            }

            pub fn digest(&self, domain: &EscrowDomain) -> B256 {
                signing_hash(domain, self.typed().eip712_hash_struct())
            }

            pub fn sign(&self, domain: &EscrowDomain, key: &SigningKey) -> Sig65 {
                key.sign_with(|| self.digest(domain))
            }

            pub fn recover(
                &self,
                domain: &EscrowDomain,
                scheme: Scheme,
                sig: &Sig65,
            ) -> Result<Address, SignatureError> {
                scheme.recover(|| self.digest(domain), sig)
            }
        }
    };
}

signed_struct!(BidFields, typed::Bid);
signed_struct!(VoteFields, typed::Vote);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_strings_match_interfaces_doc() {
        assert_eq!(
            typed::Bid::eip712_encode_type(),
            "Bid(uint256 jobId,bytes32 terms,uint64 epoch,address provider,uint256 pricePerStep,uint64 expiry)"
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

    #[test]
    fn terms_are_twelve_abi_words() {
        let committee = [Address::repeat_byte(0xa), Address::repeat_byte(0xb)];
        let t = JobTerms {
            client: Address::repeat_byte(1),
            token: Address::repeat_byte(2),
            budget: U256::from(4_000),
            max_price_per_step: U256::from(10),
            total_steps: 400,
            checkpoint_interval: 50,
            spec_hash: Hash::repeat_byte(3),
            committee: &committee,
            quorum: 2,
            verifier_fee: U256::from(7),
            deadline: 1_000,
            grace: 60,
        };
        // abi.encode pads every static value to a word; encodePacked pads array elements.
        let word = |v: U256| v.to_be_bytes::<32>();
        let mut packed = Vec::new();
        for m in &committee {
            packed.extend_from_slice(&[0u8; 12]);
            packed.extend_from_slice(m.as_slice());
        }
        let mut words: Vec<[u8; 32]> = vec![
            t.client.into_word().0,
            t.token.into_word().0,
            word(t.budget),
            word(t.max_price_per_step),
            word(U256::from(400)),
            word(U256::from(50)),
            t.spec_hash.0,
            alloy_primitives::keccak256(&packed).0,
            word(U256::from(2)),
            word(U256::from(7)),
            word(U256::from(1_000)),
            word(U256::from(60)),
        ];
        let bytes: Vec<u8> = words.drain(..).flatten().collect();
        assert_eq!(bytes.len(), 12 * 32);
        assert_eq!(t.hash(), alloy_primitives::keccak256(&bytes));
        assert_eq!(
            committee_hash(&committee),
            alloy_primitives::keccak256(&packed)
        );
    }

    #[test]
    fn terms_bind_every_field_and_the_committee_order() {
        let (a, b) = (Address::repeat_byte(0xa), Address::repeat_byte(0xb));
        let committee = [a, b];
        let t = JobTerms {
            client: Address::repeat_byte(1),
            token: Address::repeat_byte(2),
            budget: U256::from(4_000),
            max_price_per_step: U256::from(10),
            total_steps: 400,
            checkpoint_interval: 50,
            spec_hash: Hash::repeat_byte(3),
            committee: &committee,
            quorum: 2,
            verifier_fee: U256::from(7),
            deadline: 1_000,
            grace: 60,
        };
        let base = t.hash();
        let swapped = [b, a];
        assert_ne!(
            JobTerms {
                committee: &swapped,
                ..t
            }
            .hash(),
            base
        );
        assert_ne!(JobTerms { grace: 61, ..t }.hash(), base);
        assert_ne!(
            JobTerms {
                verifier_fee: U256::from(8),
                ..t
            }
            .hash(),
            base
        );
        assert_ne!(
            JobTerms {
                spec_hash: Hash::repeat_byte(4),
                ..t
            }
            .hash(),
            base
        );
        let bid = BidFields {
            job_id: U256::from(7),
            terms: base,
            epoch: 1,
            provider: a,
            price_per_step: U256::from(5),
            expiry: 9,
        };
        let d = EscrowDomain {
            chain_id: 1,
            escrow: Address::repeat_byte(1),
        };
        assert_ne!(
            BidFields {
                terms: JobTerms { quorum: 1, ..t }.hash(),
                ..bid
            }
            .digest(&d),
            bid.digest(&d)
        );
    }
}
