//! Accept / Ignore / Reject for every inbound message, with typed reasons: the node maps them
//! onto gossipsub's validation result and peer score; the simulator counts them.
//!
//! [`validate_message`] is the stateless part (size, decoding, version, signatures, internal
//! consistency); the role machines add what needs state (epochs, assignments, verifier lists,
//! duplicates) through their `handle_message` verdicts.

use crate::eip712::EscrowDomain;
use crate::messages::SignatureCheck;
use crate::signing::Scheme;
use crate::wire::{MAX_MESSAGE_SIZE, Message, WireError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accept,
    /// Harmless but useless: do not forward, do not penalise the sender.
    Ignore(IgnoreReason),
    /// Invalid: do not forward, penalise the sender.
    Reject(RejectReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// For an epoch the chain has already fenced.
    StaleEpoch,
    /// For an epoch the chain has not opened yet (we may lag the chain).
    FutureEpoch,
    /// Already counted (same vote, same heartbeat sequence number, same bid).
    Duplicate,
    /// A heartbeat older than one already seen in the same epoch.
    Replayed,
    /// The bid expires before the escrow could act on it.
    Expired,
    /// About a checkpoint at or before the last accepted step, or one already decided.
    AlreadyDecided,
    /// About a job this role is not tracking (the node should still have forwarded it).
    UnknownJob,
    /// A bid from a provider this client no longer assigns (lost or rejected before).
    ProviderExcluded,
    /// Too much queued already (announcements far ahead of verification).
    Overloaded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    Oversized,
    Malformed,
    UnsupportedVersion,
    UnknownKind,
    BadSignature,
    /// A vote from an address outside the job's committee.
    NotListedVerifier,
    /// A heartbeat or checkpoint from someone other than the epoch's assigned provider.
    NotAssignedProvider,
    /// State hashes that do not match their root or the step range.
    InvalidCommitment,
    /// A checkpoint at a step the spec does not checkpoint at.
    InvalidCheckpointStep,
    /// An offer whose spec or verifier set is unusable.
    InvalidOffer,
    /// A bid above the job's on-chain maximum price.
    PriceAboveMax,
    /// A bid signed over other terms than the job's on chain: the escrow would refuse it.
    TermsMismatch,
    /// A verifier voting both ways on the same checkpoint.
    Equivocation,
    /// An offer whose spec does not hash to the on-chain spec hash, or names another client.
    OfferMismatch,
}

impl Verdict {
    pub fn is_accept(&self) -> bool {
        matches!(self, Verdict::Accept)
    }

    /// Verdicts of several roles on one message: any Reject wins, then any Ignore.
    pub fn combine(self, other: Verdict) -> Verdict {
        match (self, other) {
            (r @ Verdict::Reject(_), _) | (_, r @ Verdict::Reject(_)) => r,
            (i @ Verdict::Ignore(_), _) | (_, i @ Verdict::Ignore(_)) => i,
            _ => Verdict::Accept,
        }
    }
}

impl From<&WireError> for RejectReason {
    fn from(e: &WireError) -> Self {
        match e {
            WireError::Oversized { .. } => RejectReason::Oversized,
            WireError::UnsupportedVersion(_) => RejectReason::UnsupportedVersion,
            WireError::UnknownKind(_) => RejectReason::UnknownKind,
            WireError::Malformed(_)
            | WireError::BadEnvelope
            | WireError::BadBody(_)
            | WireError::TrailingBytes(_) => RejectReason::Malformed,
        }
    }
}

fn sig(result: Result<(), SignatureCheck>) -> Result<(), RejectReason> {
    result.map_err(|_| RejectReason::BadSignature)
}

/// Stateless checks of an already decoded message: signatures (under `scheme`, the checking
/// machine's own; see [`Scheme`]) and internal consistency.
pub fn check_message(msg: &Message, domain: &EscrowDomain, scheme: Scheme) -> Verdict {
    let result = match msg {
        Message::NodeHello(m) => sig(m.check_signature(scheme)),
        Message::JobOffer(m) => sig(m.check_signature(scheme)).and_then(|()| {
            let quorum_ok = m.quorum >= 1 && usize::from(m.quorum) <= m.committee.len();
            if m.spec.check().is_ok() && quorum_ok && m.next_epoch >= 1 {
                Ok(())
            } else {
                Err(RejectReason::InvalidOffer)
            }
        }),
        Message::Bid(m) => sig(m.check_signature(domain, scheme)),
        Message::Heartbeat(m) => sig(m.check_signature(scheme)),
        Message::CheckpointAnnounce(m) => sig(m.check_signature(scheme)).and_then(|()| {
            if m.commitment_is_consistent() {
                Ok(())
            } else {
                Err(RejectReason::InvalidCommitment)
            }
        }),
        Message::Vote(m) => sig(m.check_signature(domain, scheme)),
    };
    match result {
        Ok(()) => Verdict::Accept,
        Err(r) => Verdict::Reject(r),
    }
}

/// A message that passed the stateless checks ([`check_message`]) under one escrow domain
/// and signature scheme. The role machines act on these (`StateMachine::handle_checked`), so
/// a message checked once — by the node for all of its roles, by the simulator for all of a
/// publication's receivers — is not checked again by each machine. Only [`Checked::new`]
/// makes one.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    message: Message,
    domain: EscrowDomain,
    scheme: Scheme,
}

impl Checked {
    pub fn new(
        message: Message,
        domain: &EscrowDomain,
        scheme: Scheme,
    ) -> Result<Checked, Verdict> {
        match check_message(&message, domain, scheme) {
            Verdict::Accept => Ok(Checked {
                message,
                domain: *domain,
                scheme,
            }),
            other => Err(other),
        }
    }

    pub fn message(&self) -> &Message {
        &self.message
    }

    pub fn into_message(self) -> Message {
        self.message
    }

    /// Whether the message passes the checks a machine with this domain and scheme makes:
    /// at once when it was checked under them, otherwise checked again.
    pub fn check_for(&self, domain: &EscrowDomain, scheme: Scheme) -> Result<(), Verdict> {
        if self.domain == *domain && self.scheme == scheme {
            return Ok(());
        }
        match check_message(&self.message, domain, scheme) {
            Verdict::Accept => Ok(()),
            other => Err(other),
        }
    }
}

/// Decodes and checks raw gossip bytes; the message comes back only when accepted, checked
/// (so the node's roles do not check it again).
pub fn decode_validated(bytes: &[u8], domain: &EscrowDomain) -> Result<Checked, Verdict> {
    if bytes.len() > MAX_MESSAGE_SIZE {
        return Err(Verdict::Reject(RejectReason::Oversized));
    }
    let msg = Message::decode(bytes).map_err(|e| Verdict::Reject((&e).into()))?;
    // Bytes come from the network: only real signatures.
    Checked::new(msg, domain, Scheme::Secp256k1)
}

/// The stateless verdict on raw gossip bytes, for the node's gossipsub validator.
pub fn validate_message(bytes: &[u8], domain: &EscrowDomain) -> Verdict {
    match decode_validated(bytes, domain) {
        Ok(_) => Verdict::Accept,
        Err(v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_prefers_reject_then_ignore() {
        let r = Verdict::Reject(RejectReason::BadSignature);
        let i = Verdict::Ignore(IgnoreReason::Duplicate);
        assert_eq!(Verdict::Accept.combine(i), i);
        assert_eq!(i.combine(r), r);
        assert_eq!(Verdict::Accept.combine(Verdict::Accept), Verdict::Accept);
    }
}
