//! The wire codec: every gossip message is the CBOR array `[version, kind, body]`.
//!
//! The size bound is checked before any parsing; the version and kind are read before the body
//! is interpreted, so an unknown version or kind is a typed error, never a panic.

use ciborium::Value;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::messages::{
    Bid, CheckpointAnnounce, DeviceKind, Hardware, Heartbeat, JobOffer, NodeHello, Role, Vote,
};

/// Version this crate speaks; a peer with another version gets `UnsupportedVersion`.
pub const PROTOCOL_VERSION: u64 = 1;
/// Largest encoded message accepted (and the node's gossipsub `max_transmit_size`).
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    NodeHello(NodeHello),
    JobOffer(JobOffer),
    Bid(Bid),
    Heartbeat(Heartbeat),
    CheckpointAnnounce(CheckpointAnnounce),
    Vote(Vote),
}

/// The kind tag on the wire; numbers are fixed forever, new kinds get new numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    NodeHello = 1,
    JobOffer = 2,
    Bid = 3,
    Heartbeat = 4,
    CheckpointAnnounce = 5,
    Vote = 6,
}

impl MessageKind {
    pub fn from_tag(tag: u64) -> Option<Self> {
        Some(match tag {
            1 => MessageKind::NodeHello,
            2 => MessageKind::JobOffer,
            3 => MessageKind::Bid,
            4 => MessageKind::Heartbeat,
            5 => MessageKind::CheckpointAnnounce,
            6 => MessageKind::Vote,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message of {size} bytes exceeds the {max} byte limit")]
    Oversized { size: usize, max: usize },
    #[error("malformed CBOR: {0}")]
    Malformed(String),
    #[error("envelope is not [version, kind, body]")]
    BadEnvelope,
    #[error("unsupported protocol version {0}")]
    UnsupportedVersion(u64),
    #[error("unknown message kind {0}")]
    UnknownKind(u64),
    #[error("body does not match its kind: {0}")]
    BadBody(String),
    #[error("{0} bytes after the message")]
    TrailingBytes(usize),
}

fn to_value<T: Serialize>(body: &T) -> Value {
    // Our message structs only have string keys and plain values; conversion cannot fail.
    Value::serialized(body).expect("message body converts to a CBOR value")
}

/// Parses one CBOR item of at most `MAX_MESSAGE_SIZE` bytes, refusing trailing bytes.
pub(crate) fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_MESSAGE_SIZE {
        return Err(WireError::Oversized {
            size: bytes.len(),
            max: MAX_MESSAGE_SIZE,
        });
    }
    let mut rest = bytes;
    let value: T =
        ciborium::from_reader(&mut rest).map_err(|e| WireError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(WireError::TrailingBytes(rest.len()));
    }
    Ok(value)
}

impl Message {
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::NodeHello(_) => MessageKind::NodeHello,
            Message::JobOffer(_) => MessageKind::JobOffer,
            Message::Bid(_) => MessageKind::Bid,
            Message::Heartbeat(_) => MessageKind::Heartbeat,
            Message::CheckpointAnnounce(_) => MessageKind::CheckpointAnnounce,
            Message::Vote(_) => MessageKind::Vote,
        }
    }

    /// Encodes without a size check; use [`Message::try_encode`] where oversize is possible.
    pub fn encode(&self) -> Vec<u8> {
        let body = match self {
            Message::NodeHello(m) => to_value(m),
            Message::JobOffer(m) => to_value(m),
            Message::Bid(m) => to_value(m),
            Message::Heartbeat(m) => to_value(m),
            Message::CheckpointAnnounce(m) => to_value(m),
            Message::Vote(m) => to_value(m),
        };
        let envelope = Value::Array(vec![
            Value::Integer(PROTOCOL_VERSION.into()),
            Value::Integer((self.kind() as u64).into()),
            body,
        ]);
        let mut out = Vec::new();
        ciborium::into_writer(&envelope, &mut out).expect("a CBOR value serializes into memory");
        out
    }

    /// Encodes and refuses what peers would refuse as oversized.
    pub fn try_encode(&self) -> Result<Vec<u8>, WireError> {
        let bytes = self.encode();
        if bytes.len() > MAX_MESSAGE_SIZE {
            return Err(WireError::Oversized {
                size: bytes.len(),
                max: MAX_MESSAGE_SIZE,
            });
        }
        Ok(bytes)
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        let value: Value = decode_bounded(bytes)?;
        let Value::Array(mut items) = value else {
            return Err(WireError::BadEnvelope);
        };
        if items.len() != 3 {
            return Err(WireError::BadEnvelope);
        }
        let body = items.pop().ok_or(WireError::BadEnvelope)?;
        let kind = as_u64(&items[1]).ok_or(WireError::BadEnvelope)?;
        let version = as_u64(&items[0]).ok_or(WireError::BadEnvelope)?;
        if version != PROTOCOL_VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        let kind = MessageKind::from_tag(kind).ok_or(WireError::UnknownKind(kind))?;
        fn body_as<T: DeserializeOwned>(v: Value) -> Result<T, WireError> {
            v.deserialized()
                .map_err(|e| WireError::BadBody(e.to_string()))
        }
        Ok(match kind {
            MessageKind::NodeHello => Message::NodeHello(body_as(body)?),
            MessageKind::JobOffer => Message::JobOffer(body_as(body)?),
            MessageKind::Bid => Message::Bid(body_as(body)?),
            MessageKind::Heartbeat => Message::Heartbeat(body_as(body)?),
            MessageKind::CheckpointAnnounce => Message::CheckpointAnnounce(body_as(body)?),
            MessageKind::Vote => Message::Vote(body_as(body)?),
        })
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}
