//! Gossip wire messages: arbitrary bytes into the decoder and the stateless validator (what
//! the node's gossipsub validator runs on every message from a peer), and into the job spec's
//! CBOR decoder (an offer's spec blob). Properties, beyond "never panics":
//! - the validator never accepts bytes the decoder rejects, nor bytes over the size bound;
//! - a message that decodes re-encodes to bytes that decode to the same message (compared as
//!   bytes: NaN floats compare unequal as values), within the size bound;
//! - a spec that decodes re-encodes to bytes that decode to an equal spec.
#![no_main]

use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::validation::validate_message;
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{Address, JobSpec, MAX_MESSAGE_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let domain = EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xee),
    };
    let decoded = Message::decode(data);
    let verdict = validate_message(data, &domain);
    if verdict.is_accept() {
        assert!(
            decoded.is_ok(),
            "the validator accepted bytes the decoder rejects"
        );
        assert!(
            data.len() <= MAX_MESSAGE_SIZE,
            "accepted an oversized message"
        );
    }
    if let Ok(msg) = decoded {
        let bytes = msg.encode();
        let again =
            Message::decode(&bytes).expect("a decoded message re-encodes to something decodable");
        assert_eq!(again.encode(), bytes);
        assert_eq!(again.kind(), msg.kind());
    }
    if let Ok(spec) = JobSpec::from_cbor(data) {
        let bytes = spec.to_cbor();
        let again =
            JobSpec::from_cbor(&bytes).expect("a decoded spec re-encodes to something decodable");
        assert_eq!(again.to_cbor(), bytes);
        assert_eq!(again.spec_hash(), spec.spec_hash());
    }
});
