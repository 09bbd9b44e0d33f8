//! The node's side of the wire: gossip payloads are the protocol crate's `Message`s. What
//! is added here is only how the node fills the fields the protocol keeps opaque.

use std::net::SocketAddr;

pub use gpuchain_protocol::wire::{
    DeviceKind, Hardware, Heartbeat, MAX_MESSAGE_SIZE, Message, NodeHello, Role as WireRole,
};

/// Most blob addresses a hello may list.
pub const MAX_BLOB_ADDRS: usize = 16;

/// `NodeHello::blob_endpoint` as the node writes it: `<endpoint id hex>@<ip:port>,<ip:port>`.
pub fn encode_blob_endpoint(endpoint_hex: &str, addrs: &[SocketAddr]) -> String {
    let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    format!("{endpoint_hex}@{}", addrs.join(","))
}

/// Parses [`encode_blob_endpoint`]'s form; None if anything is off.
pub fn parse_blob_endpoint(s: &str) -> Option<(String, Vec<SocketAddr>)> {
    let (id, addrs) = s.split_once('@')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let addrs: Vec<SocketAddr> = if addrs.is_empty() {
        Vec::new()
    } else {
        addrs
            .split(',')
            .map(|a| a.parse().ok())
            .collect::<Option<_>>()?
    };
    (addrs.len() <= MAX_BLOB_ADDRS).then(|| (id.to_ascii_lowercase(), addrs))
}

pub fn kind_name(m: &Message) -> &'static str {
    match m {
        Message::NodeHello(_) => "NodeHello",
        Message::JobOffer(_) => "JobOffer",
        Message::Bid(_) => "Bid",
        Message::Heartbeat(_) => "Heartbeat",
        Message::CheckpointAnnounce(_) => "CheckpointAnnounce",
        Message::Vote(_) => "Vote",
    }
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_endpoint_roundtrip_and_garbage() {
        let id = "ab".repeat(32);
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:5".parse().expect("addr"),
            "[::1]:6".parse().expect("addr"),
        ];
        let s = encode_blob_endpoint(&id, &addrs);
        assert_eq!(parse_blob_endpoint(&s), Some((id.clone(), addrs)));
        assert_eq!(
            parse_blob_endpoint(&format!("{id}@")),
            Some((id.clone(), vec![]))
        );
        assert!(parse_blob_endpoint("nonsense").is_none());
        assert!(parse_blob_endpoint(&format!("{id}@127.0.0.1")).is_none());
        assert!(parse_blob_endpoint("zz@127.0.0.1:1").is_none());
        let many = vec!["127.0.0.1:1".parse().expect("addr"); MAX_BLOB_ADDRS + 1];
        assert!(parse_blob_endpoint(&encode_blob_endpoint(&id, &many)).is_none());
    }
}
