//! The gossip validation seam: every received gossip message goes through a
//! [`GossipValidator`], whose [`Verdict`] maps one to one onto gossipsub's
//! Accept / Ignore / Reject (Reject is what scores the sender down).
//!
//! [`StatelessValidator`] runs the protocol crate's stateless checks (size, decoding,
//! version, signatures, commitments) and adds what only the node can check: that the
//! message is on its topic, and that a hello speaks for the libp2p peer that signed it.

use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::validation::{self as pv, Checked, decode_validated};
use libp2p::PeerId;

use crate::topics::topic_for;
use crate::wire::{MAX_MESSAGE_SIZE, Message, parse_blob_endpoint};

/// The protocol's verdict, with its reason as text for logs and the API. A reason starts
/// with an identifier (the protocol's reason name, or the node's own below), which is what
/// the metrics count it by (`metrics::reason_label`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Not wrong, just not useful (stale, duplicate, early): dropped without penalty.
    Ignore(String),
    /// Provably bad: dropped and the propagating peer is penalised.
    Reject(String),
}

impl From<pv::Verdict> for Verdict {
    fn from(v: pv::Verdict) -> Self {
        match v {
            pv::Verdict::Accept => Verdict::Accept,
            pv::Verdict::Ignore(r) => Verdict::Ignore(format!("{r:?}")),
            pv::Verdict::Reject(r) => Verdict::Reject(format!("{r:?}")),
        }
    }
}

pub trait GossipValidator: Send + 'static {
    /// Judges one gossip payload. `source` is the signed author (gossipsub strict mode checked
    /// the signature before we get here). Returns the decoded message when accepted, with
    /// the protocol's proof of its stateless checks, which the role machines take as is.
    fn validate(
        &self,
        topic: &str,
        source: Option<&PeerId>,
        data: &[u8],
    ) -> (Verdict, Option<Checked>);
}

#[derive(Debug, Clone)]
pub struct StatelessValidator {
    /// EIP-712 domain that bids and votes must be signed for.
    pub domain: EscrowDomain,
}

impl GossipValidator for StatelessValidator {
    fn validate(
        &self,
        topic: &str,
        source: Option<&PeerId>,
        data: &[u8],
    ) -> (Verdict, Option<Checked>) {
        if data.len() > MAX_MESSAGE_SIZE {
            return (Verdict::Reject("Oversized".into()), None);
        }
        let Some(source) = source else {
            return (
                Verdict::Reject("Unsigned: gossip message without an author".into()),
                None,
            );
        };
        let checked = match decode_validated(data, &self.domain) {
            Ok(c) => c,
            Err(v) => return (v.into(), None),
        };
        let msg = checked.message();
        let expected = topic_for(msg);
        if expected != topic {
            return (
                Verdict::Reject(format!(
                    "WrongTopic: belongs on {expected}, sent on {topic}"
                )),
                None,
            );
        }
        if let Message::NodeHello(h) = msg {
            if h.peer_id != source.to_bytes() {
                return (
                    Verdict::Reject(format!(
                        "HelloPeerMismatch: NodeHello for another peer, signed by {source}"
                    )),
                    None,
                );
            }
            let own = crate::identity::endpoint_id_hex(source);
            match parse_blob_endpoint(&h.blob_endpoint) {
                Some((id, _)) if Some(&id) == own.as_ref() => {}
                _ => {
                    return (
                        Verdict::Reject(
                            "HelloEndpointMismatch: NodeHello blob endpoint is not the sender's"
                                .into(),
                        ),
                        None,
                    );
                }
            }
        }
        (Verdict::Accept, Some(checked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DeviceKind, Hardware, Heartbeat, NodeHello, encode_blob_endpoint};
    use gpuchain_protocol::signing::{Sig65, SigningKey};
    use gpuchain_protocol::types::{Address, U256};

    fn validator() -> StatelessValidator {
        StatelessValidator {
            domain: EscrowDomain {
                chain_id: 31337,
                escrow: Address::ZERO,
            },
        }
    }

    fn hello(peer: &PeerId, endpoint: &str) -> Vec<u8> {
        Message::NodeHello(
            NodeHello {
                peer_id: peer.to_bytes(),
                address: Address::ZERO,
                roles: vec![],
                hardware: Hardware {
                    device: DeviceKind::Cpu,
                    memory_bytes: 0,
                },
                blob_endpoint: encode_blob_endpoint(endpoint, &["127.0.0.1:1".parse().expect("a")]),
                issued_at: 1,
                signature: Sig65::ZERO,
            }
            .sign(&SigningKey::from_seed(1)),
        )
        .encode()
    }

    #[test]
    fn verdicts() {
        let v = validator();
        let kp = libp2p::identity::Keypair::generate_ed25519();
        let me = kp.public().to_peer_id();
        let other = libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id();
        let ep = crate::identity::endpoint_id_hex(&me).expect("ed25519");
        let topic = crate::topics::HELLO_TOPIC;
        assert_eq!(
            v.validate(topic, Some(&me), &hello(&me, &ep)).0,
            Verdict::Accept
        );
        // Someone else's identity, someone else's endpoint, no signer, wrong topic, garbage.
        assert!(matches!(
            v.validate(topic, Some(&other), &hello(&me, &ep)).0,
            Verdict::Reject(_)
        ));
        assert!(matches!(
            v.validate(topic, Some(&me), &hello(&me, &"00".repeat(32)))
                .0,
            Verdict::Reject(_)
        ));
        assert!(matches!(
            v.validate(topic, None, &hello(&me, &ep)).0,
            Verdict::Reject(_)
        ));
        assert!(matches!(
            v.validate(crate::topics::JOBS_TOPIC, Some(&me), &hello(&me, &ep))
                .0,
            Verdict::Reject(_)
        ));
        assert!(matches!(
            v.validate(topic, Some(&me), b"\xff junk").0,
            Verdict::Reject(_)
        ));
        assert!(matches!(
            v.validate(topic, Some(&me), &vec![0u8; MAX_MESSAGE_SIZE + 1])
                .0,
            Verdict::Reject(_)
        ));
        // A heartbeat whose signature does not match its claimed provider.
        let mut hb = Heartbeat {
            job_id: U256::from(5),
            epoch: 1,
            provider: Address::ZERO,
            seq: 1,
            step: 1,
            loss: 0.0,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(&SigningKey::from_seed(2));
        hb.step = 2;
        let t = crate::topics::job_topic(U256::from(5));
        assert!(matches!(
            v.validate(&t, Some(&me), &Message::Heartbeat(hb).encode())
                .0,
            Verdict::Reject(_)
        ));
    }
}
