//! Control-API request bodies: arbitrary bytes through the JSON deserialization axum's `Json`
//! extractor applies (`serde_json::from_slice`) for every POST body type, then the checks the
//! handler applies before acting (`gpuchain_node::api::{publish_data, check_fetch,
//! parse_peers}`), and the path parameters (job ids, blob hashes). The first byte picks the
//! body type, the rest is the body.
//!
//! Properties: nothing panics; a body that deserializes re-serializes to JSON that
//! deserializes to the same request; accepted hex re-encodes to the same bytes; accepted peer
//! ids and hashes read back from how they print.
#![no_main]

use gpuchain_api::types::{
    AddBlobRequest, ExportBlobRequest, FetchBlobRequest, HeartbeatRequest, PublishRequest,
    TopicRequest,
};
use gpuchain_node::api::{CheatRequest, PartitionRequest, check_fetch, parse_peers, publish_data};
use gpuchain_node::roles::ctx::SubmitRequest;
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Deserializes, and if that works, checks the JSON round trip by comparing the JSON values.
fn round_trip<T: Serialize + DeserializeOwned>(body: &[u8]) -> Option<T> {
    let r: T = serde_json::from_slice(body).ok()?;
    let json = serde_json::to_vec(&r).expect("a request serializes");
    let back: T = serde_json::from_slice(&json).expect("a serialized request deserializes");
    assert_eq!(
        serde_json::to_value(&back).expect("to value"),
        serde_json::to_value(&r).expect("to value")
    );
    Some(r)
}

fn check_peers(peers: &[String]) {
    if let Ok(ids) = parse_peers(peers) {
        assert_eq!(ids.len(), peers.len());
        let printed: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(parse_peers(&printed).expect("printed peer ids parse"), ids);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 10 {
        0 => {
            if let Some(r) = round_trip::<PublishRequest>(body)
                && let Ok(bytes) = publish_data(&r)
            {
                assert_eq!(hex::encode(&bytes), r.data_hex.to_ascii_lowercase());
            }
        }
        1 => {
            round_trip::<TopicRequest>(body);
        }
        2 => {
            round_trip::<HeartbeatRequest>(body);
        }
        3 => {
            round_trip::<AddBlobRequest>(body);
        }
        4 => {
            if let Some(r) = round_trip::<FetchBlobRequest>(body)
                && check_fetch(&r).is_ok()
            {
                check_peers(&r.from);
            }
        }
        5 => {
            round_trip::<ExportBlobRequest>(body);
        }
        6 => {
            let _ = serde_json::from_slice::<SubmitRequest>(body);
        }
        7 => {
            let _ = serde_json::from_slice::<CheatRequest>(body);
        }
        8 => {
            if let Ok(r) = serde_json::from_slice::<PartitionRequest>(body) {
                check_peers(&r.peers);
            }
        }
        _ => {
            // Path parameters: `/v1/jobs/{id}` and `/v1/blobs/{hash}`.
            if let Ok(s) = std::str::from_utf8(body) {
                let _ = s.parse::<gpuchain_protocol::JobId>();
                if let Ok(h) = gpuchain_node::blobs::parse_hash(s) {
                    let again = gpuchain_node::blobs::parse_hash(&h.to_string());
                    assert_eq!(again.expect("a printed hash parses"), h);
                }
            }
        }
    }
});
