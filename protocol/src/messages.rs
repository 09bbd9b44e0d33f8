//! The gossip payloads. Each carries the address that signed it; validation checks the
//! signature recovers to that address before any state machine sees the message.

use std::sync::Arc;

use alloy_primitives::{Address, U256};
use serde::{Deserialize, Serialize};

use crate::anchors::anchor_steps;
use crate::eip712::{BidFields, EscrowDomain, VoteFields};
use crate::signing::{Scheme, Sig65, SignatureError, SigningKey, gossip_digest};
use crate::spec::JobSpec;
use crate::types::{Epoch, Hash, JobId, Step};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Client,
    Provider,
    Verifier,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
    Metal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hardware {
    pub device: DeviceKind,
    pub memory_bytes: u64,
}

/// Binds a libp2p PeerId (its bytes; this crate has no libp2p) to an Ethereum address, and
/// says what the node offers and where its blob store listens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeHello {
    pub peer_id: Vec<u8>,
    pub address: Address,
    pub roles: Vec<Role>,
    pub hardware: Hardware,
    /// The iroh-blobs endpoint address (node id and direct addresses), opaque here.
    pub blob_endpoint: String,
    /// Unix seconds at signing; a newer hello supersedes an older one.
    pub issued_at: u64,
    pub signature: Sig65,
}

/// The client's call for bids on a job whose committee the escrow has drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOffer {
    pub job_id: JobId,
    pub client: Address,
    /// The epoch bids should name: the next assignment opens it.
    pub next_epoch: Epoch,
    pub spec: JobSpec,
    pub max_price_per_step: U256,
    /// The committee the escrow drew (`CommitteeDrawn`), in draw order. Advisory: providers
    /// and verifiers act on the chain's event, never on this copy.
    pub committee: Vec<Address>,
    pub quorum: u8,
    pub signature: Sig65,
}

/// A provider's EIP-712 signed offer to take `epoch` of a job; its signature is the
/// `bidSig` of `assign`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bid {
    pub job_id: JobId,
    /// The job's terms hash (`JobEscrow.termsOf`): carried so any relay can check the
    /// signature; the client takes only bids whose terms are its job's.
    pub terms: Hash,
    pub epoch: Epoch,
    pub provider: Address,
    pub price_per_step: U256,
    /// Unix seconds (block time) after which the escrow refuses the bid.
    pub expiry: u64,
    /// Advisory (not in the EIP-712 struct): the provider's own NodeHello is authoritative.
    pub hardware: Hardware,
    pub signature: Sig65,
}

/// Liveness and progress of the provider holding `epoch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub provider: Address,
    /// Strictly increasing within an epoch, so a replayed heartbeat cannot keep a dead
    /// provider alive.
    pub seq: u64,
    pub step: Step,
    /// Training loss at `step`; NaN before the first step of the epoch.
    pub loss: f32,
    /// The trainer is making `step`'s checkpoint (hashing its states, adding the blobs): the
    /// client allows a checkpoint's time for the next step, not a step's.
    pub checkpointing: bool,
    /// How long, in ms since the provider started, its compute threads were ready to run but
    /// waited for a CPU (Linux's per-thread run-queue delay). A host that starves its trainer
    /// makes slow steps, not no steps: the client adds what was starved to its stall allowance,
    /// so load is not taken for a hung GPU and a hang is still caught at the provider's own
    /// pace. The client caps the credit; a provider that inflates it only delays its own
    /// failover by that cap.
    pub starved_ms: u64,
    pub signature: Sig65,
}

/// A checkpoint ready for verification, with the commitment to the interval's per-step states.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointAnnounce {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub provider: Address,
    pub parent_step: Step,
    pub step: Step,
    pub checkpoint_hash: Hash,
    /// `state_hash(parent_step) ..= state_hash(step)`, one per step (docs/interfaces.md).
    /// Shared, not copied: the provider keeps its announcement until the escrow decides it,
    /// and each verifier queues what it receives, an interval's hundreds of hashes each time.
    /// Encoded as a list, as a `Vec` would be.
    pub state_hashes: Arc<[Hash]>,
    /// [`state_root`] of `state_hashes`.
    pub state_root: Hash,
    /// The steps whose states the provider serves as blobs for spot checks: exactly
    /// [`anchor_steps`]`(parent_step, step)`. Signed, so a provider whose anchors cannot be
    /// fetched is answerable for having promised them.
    pub anchor_steps: Vec<Step>,
    pub signature: Sig65,
}

/// A verifier's EIP-712 signed verdict on a checkpoint; a quorum of them goes on chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub step: Step,
    pub checkpoint_hash: Hash,
    pub accept: bool,
    pub verifier: Address,
    pub signature: Sig65,
}

/// Commitment root of an interval's state hashes: BLAKE3 over their concatenation, in order.
pub fn state_root(state_hashes: &[Hash]) -> Hash {
    // Fed 16 KiB at a time, not a hash per update: BLAKE3 then compresses sixteen chunks at
    // once (SIMD), several times faster on an interval's hundreds of hashes. Same digest.
    const PER_BATCH: usize = 512;
    let mut h = blake3::Hasher::new();
    let mut buf = [0u8; PER_BATCH * 32];
    for batch in state_hashes.chunks(PER_BATCH) {
        for (dst, s) in buf.chunks_exact_mut(32).zip(batch) {
            dst.copy_from_slice(s.as_slice());
        }
        h.update(&buf[..batch.len() * 32]);
    }
    Hash::from(*h.finalize().as_bytes())
}

/// Why a message's signature is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureCheck {
    #[error("malformed signature: {0}")]
    Malformed(#[from] SignatureError),
    #[error("signed by {recovered}, claims {claimed}")]
    WrongSigner {
        claimed: Address,
        recovered: Address,
    },
}

fn expect_signer(
    claimed: Address,
    recovered: Result<Address, SignatureError>,
) -> Result<(), SignatureCheck> {
    let recovered = recovered?;
    if recovered == claimed {
        Ok(())
    } else {
        Err(SignatureCheck::WrongSigner { claimed, recovered })
    }
}

/// Messages signed over their own CBOR (not EIP-712): the chain never sees them.
macro_rules! gossip_signed {
    ($ty:ty, $kind:literal, $signer:ident) => {
        impl $ty {
            /// The digest signed: the body with a zeroed signature, under a per-kind tag.
            pub fn digest(&self) -> alloy_primitives::B256 {
                let mut body = self.clone();
                body.signature = Sig65::ZERO;
                gossip_digest($kind, &body)
            }

            /// Sets the claimed signer to `key`'s address and signs.
            pub fn sign(mut self, key: &SigningKey) -> Self {
                self.$signer = key.address();
                self.signature = key.sign_with(|| self.digest());
                self
            }

            pub fn check_signature(&self, scheme: Scheme) -> Result<(), SignatureCheck> {
                expect_signer(
                    self.$signer,
                    scheme.recover(|| self.digest(), &self.signature),
                )
            }
        }
    };
}

gossip_signed!(NodeHello, "node-hello", address);
gossip_signed!(JobOffer, "job-offer", client);
gossip_signed!(Heartbeat, "heartbeat", provider);
gossip_signed!(CheckpointAnnounce, "checkpoint-announce", provider);

impl Bid {
    pub fn fields(&self) -> BidFields {
        BidFields {
            job_id: self.job_id,
            terms: self.terms,
            epoch: self.epoch,
            provider: self.provider,
            price_per_step: self.price_per_step,
            expiry: self.expiry,
        }
    }

    pub fn sign(mut self, domain: &EscrowDomain, key: &SigningKey) -> Self {
        self.provider = key.address();
        self.signature = self.fields().sign(domain, key);
        self
    }

    pub fn check_signature(
        &self,
        domain: &EscrowDomain,
        scheme: Scheme,
    ) -> Result<(), SignatureCheck> {
        expect_signer(
            self.provider,
            self.fields().recover(domain, scheme, &self.signature),
        )
    }
}

impl Vote {
    pub fn fields(&self) -> VoteFields {
        VoteFields {
            job_id: self.job_id,
            epoch: self.epoch,
            step: self.step,
            checkpoint_hash: self.checkpoint_hash,
            accept: self.accept,
        }
    }

    pub fn sign(mut self, domain: &EscrowDomain, key: &SigningKey) -> Self {
        self.verifier = key.address();
        self.signature = self.fields().sign(domain, key);
        self
    }

    pub fn check_signature(
        &self,
        domain: &EscrowDomain,
        scheme: Scheme,
    ) -> Result<(), SignatureCheck> {
        expect_signer(
            self.verifier,
            self.fields().recover(domain, scheme, &self.signature),
        )
    }
}

impl CheckpointAnnounce {
    /// Whether the committed list has one hash per step of `parent_step..=step`, the root
    /// matches it, and the anchors are the rule's ([`anchor_steps`]).
    pub fn commitment_is_consistent(&self) -> bool {
        // Checked: both steps are attacker-chosen, and step - parent + 1 can overflow.
        let expected = self
            .step
            .checked_sub(self.parent_step)
            .and_then(|d| d.checked_add(1));
        self.step > self.parent_step
            && expected.is_some()
            && u64::try_from(self.state_hashes.len()).ok() == expected
            && self.anchor_steps == anchor_steps(self.parent_step, self.step)
            && state_root(&self.state_hashes) == self.state_root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_root_is_blake3_of_the_concatenation() {
        // Lengths around the batch size the root is fed in.
        for n in [0usize, 1, 51, 511, 512, 513, 1025] {
            let hashes: Vec<Hash> = (0..n)
                .map(|i| Hash::from(*blake3::hash(&i.to_le_bytes()).as_bytes()))
                .collect();
            let concatenated: Vec<u8> = hashes.iter().flat_map(|h| h.0).collect();
            assert_eq!(
                state_root(&hashes),
                Hash::from(*blake3::hash(&concatenated).as_bytes()),
                "{n} hashes"
            );
        }
    }

    #[test]
    fn gossip_signatures_bind_content_and_signer() {
        let key = SigningKey::from_seed(1);
        let hb = Heartbeat {
            job_id: U256::from(3),
            epoch: 1,
            provider: Address::ZERO,
            seq: 1,
            step: 10,
            loss: 0.5,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(&key);
        assert_eq!(hb.provider, key.address());
        assert_eq!(hb.check_signature(Scheme::Secp256k1), Ok(()));
        let mut tampered = hb.clone();
        tampered.step = 11;
        assert!(matches!(
            tampered.check_signature(Scheme::Secp256k1),
            Err(SignatureCheck::WrongSigner { .. })
        ));
        // A relay cannot buy the provider stall allowance.
        let mut inflated = hb.clone();
        inflated.starved_ms = 60_000;
        inflated.checkpointing = true;
        assert!(inflated.check_signature(Scheme::Secp256k1).is_err());
        let mut impostor = hb.clone();
        impostor.provider = SigningKey::from_seed(2).address();
        assert!(impostor.check_signature(Scheme::Secp256k1).is_err());
    }

    #[test]
    fn shared_state_hashes_encode_as_the_list_they_were() {
        // Sharing them must not change the wire format (nor the digest a signature covers).
        let hashes: Vec<Hash> = (0..51u8).map(Hash::repeat_byte).collect();
        let shared: Arc<[Hash]> = hashes.clone().into();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        ciborium::into_writer(&hashes, &mut a).unwrap();
        ciborium::into_writer(&shared, &mut b).unwrap();
        assert_eq!(a, b);
        let back: Arc<[Hash]> = ciborium::from_reader(a.as_slice()).unwrap();
        assert_eq!(&back[..], &hashes[..]);
    }

    #[test]
    fn commitment_consistency() {
        let hashes: Vec<Hash> = (0..51u8).map(Hash::repeat_byte).collect();
        let mut a = CheckpointAnnounce {
            job_id: U256::from(1),
            epoch: 1,
            provider: Address::ZERO,
            parent_step: 0,
            step: 50,
            checkpoint_hash: Hash::repeat_byte(9),
            state_root: state_root(&hashes),
            state_hashes: hashes.into(),
            anchor_steps: anchor_steps(0, 50),
            signature: Sig65::ZERO,
        };
        assert!(a.commitment_is_consistent());
        // Anchors off the rule: fewer (a state the provider would not keep), more, or moved.
        for anchors in [vec![0, 16], vec![0, 16, 33, 40], vec![0, 17, 33], vec![]] {
            let mut off = a.clone();
            off.anchor_steps = anchors;
            assert!(!off.commitment_is_consistent(), "{:?}", off.anchor_steps);
        }
        let short = a.state_hashes.len() - 1;
        a.state_hashes = a.state_hashes[..short].into();
        assert!(!a.commitment_is_consistent());
    }
}
