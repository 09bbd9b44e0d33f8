//! Arbitrary bytes into the decoder and the stateless validator: any panic is a bug. A message
//! that decodes must re-encode to bytes that decode to the same message.
#![no_main]

use gpuchain_protocol::eip712::EscrowDomain;
use gpuchain_protocol::validation::validate_message;
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{Address, JobSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let domain = EscrowDomain { chain_id: 31337, escrow: Address::repeat_byte(0xee) };
    let _ = validate_message(data, &domain);
    let _ = JobSpec::from_cbor(data);
    if let Ok(msg) = Message::decode(data) {
        let again = Message::decode(&msg.encode());
        // NaN floats compare unequal, so compare the re-encoded bytes instead of the values.
        let again = again.expect("a decoded message re-encodes to something decodable");
        assert_eq!(again.encode(), msg.encode());
    }
});
