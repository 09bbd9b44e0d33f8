//! The shared EIP-712 vector (made once with an independent Python implementation, also
//! checked by the forge suite): our digests, recovery and signing must match it byte for byte.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

use std::str::FromStr;

use gpuchain_protocol::eip712::{BidFields, EscrowDomain, VoteFields};
use gpuchain_protocol::signing::{Scheme, Sig65, SigningKey, recover_signer};
use gpuchain_protocol::{Address, B256, U256};
use serde_json::Value;

fn vector() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../contracts/test/vectors/eip712.json"
    );
    let text = std::fs::read_to_string(path).expect("the shared vector is committed");
    serde_json::from_str(&text).unwrap()
}

fn b256(v: &Value) -> B256 {
    B256::from_str(v.as_str().unwrap()).unwrap()
}

fn sig(v: &Value) -> Sig65 {
    Sig65::from_slice(&hex::decode(v.as_str().unwrap().trim_start_matches("0x")).unwrap()).unwrap()
}

fn key(v: &Value) -> SigningKey {
    let bytes: [u8; 32] = b256(v).0;
    SigningKey::from_bytes(&bytes).unwrap()
}

fn domain(v: &Value) -> EscrowDomain {
    let d = &v["domain"];
    assert_eq!(d["name"], "GpuChain JobEscrow");
    assert_eq!(d["version"], "1");
    EscrowDomain {
        chain_id: d["chainId"].as_u64().unwrap(),
        escrow: Address::from_str(d["verifyingContract"].as_str().unwrap()).unwrap(),
    }
}

#[test]
fn type_hashes_and_domain_separator_match() {
    let v = vector();
    assert_eq!(BidFields::type_hash(), b256(&v["bidTypehash"]));
    assert_eq!(VoteFields::type_hash(), b256(&v["voteTypehash"]));
    assert_eq!(domain(&v).separator(), b256(&v["domainSeparator"]));
}

#[test]
fn bid_digest_recovery_and_signing_match() {
    let v = vector();
    let d = domain(&v);
    let b = &v["bid"];
    let m = &b["message"];
    let fields = BidFields {
        job_id: U256::from(m["jobId"].as_u64().unwrap()),
        terms: b256(&m["terms"]),
        epoch: m["epoch"].as_u64().unwrap(),
        provider: Address::from_str(m["provider"].as_str().unwrap()).unwrap(),
        price_per_step: U256::from(m["pricePerStep"].as_u64().unwrap()),
        expiry: m["expiry"].as_u64().unwrap(),
    };
    assert_eq!(fields.digest(&d), b256(&b["digest"]));
    let k = key(&b["signerKey"]);
    assert_eq!(
        k.address(),
        fields.provider,
        "the bid is signed by its provider"
    );
    assert_eq!(
        fields
            .recover(&d, Scheme::Secp256k1, &sig(&b["signature"]))
            .unwrap(),
        fields.provider
    );
    assert_eq!(fields.sign(&d, &k), sig(&b["signature"]));
}

#[test]
fn vote_digests_recovery_and_signing_match() {
    let v = vector();
    let d = domain(&v);
    let votes = v["votes"].as_array().unwrap();
    assert!(votes.len() >= 3);
    for vote in votes {
        let m = &vote["message"];
        let fields = VoteFields {
            job_id: U256::from(m["jobId"].as_u64().unwrap()),
            epoch: m["epoch"].as_u64().unwrap(),
            step: m["step"].as_u64().unwrap(),
            checkpoint_hash: b256(&m["checkpointHash"]),
            accept: m["accept"].as_bool().unwrap(),
        };
        let digest = fields.digest(&d);
        assert_eq!(digest, b256(&vote["digest"]));
        let signer = Address::from_str(vote["signer"].as_str().unwrap()).unwrap();
        let s = sig(&vote["signature"]);
        assert_eq!(recover_signer(&digest, &s).unwrap(), signer);
        let k = key(&vote["signerKey"]);
        assert_eq!(k.address(), signer);
        assert_eq!(fields.sign(&d, &k), s);
    }
}

#[test]
fn vector_signatures_do_not_verify_under_another_domain() {
    let v = vector();
    let mut d = domain(&v);
    d.chain_id += 1;
    let b = &v["bid"];
    let m = &b["message"];
    let fields = BidFields {
        job_id: U256::from(m["jobId"].as_u64().unwrap()),
        terms: b256(&m["terms"]),
        epoch: m["epoch"].as_u64().unwrap(),
        provider: Address::from_str(m["provider"].as_str().unwrap()).unwrap(),
        price_per_step: U256::from(m["pricePerStep"].as_u64().unwrap()),
        expiry: m["expiry"].as_u64().unwrap(),
    };
    assert_ne!(
        fields
            .recover(&d, Scheme::Secp256k1, &sig(&b["signature"]))
            .ok(),
        Some(fields.provider)
    );
}
