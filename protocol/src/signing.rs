//! secp256k1 keys and 65-byte `r ‖ s ‖ v` signatures, Ethereum style (v = 27/28, low-s only),
//! so what we sign is exactly what `ecrecover` in JobEscrow accepts.

use std::fmt;

use alloy_primitives::{Address, B256, keccak256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("secret key is not a valid secp256k1 scalar")]
    BadKey,
    #[error("v must be 27 or 28")]
    BadV,
    #[error("s is in the upper half of the curve order (malleable)")]
    HighS,
    #[error("signature does not recover to a public key")]
    Unrecoverable,
}

/// A 65-byte signature `r ‖ s ‖ v`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sig65(pub [u8; 65]);

impl Sig65 {
    pub const ZERO: Sig65 = Sig65([0; 65]);

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 65]>::try_from(bytes).ok().map(Sig65)
    }
}

impl fmt::Debug for Sig65 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sig65(0x{})", alloy_primitives::hex::encode(self.0))
    }
}

impl Serialize for Sig65 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Sig65 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Sig65;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("65 signature bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Sig65, E> {
                Sig65::from_slice(v).ok_or_else(|| E::invalid_length(v.len(), &self))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Sig65, E> {
                self.visit_bytes(&v)
            }
        }
        d.deserialize_bytes(V)
    }
}

/// How a signature is made and checked. The node, the wire path (`decode_validated`) and the
/// chain only know `Secp256k1`; a machine checks what it receives under the scheme of its own
/// key, so no peer can choose the scheme it is judged by.
///
/// `Simulated` exists for the simulator's large runs, where secp256k1 would be nearly all of
/// the work (tens of millions of heartbeats a simulated day): the signature names its signer
/// and nothing more, so the machines' checks (claimed signer = signer, listed verifier,
/// assigned provider) run unchanged at the cost of a comparison. It proves nothing — anyone
/// can forge it — so it must never be used for anything but a simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    #[default]
    Secp256k1,
    Simulated,
}

/// `v` of a simulated signature: outside {27, 28}, so secp256k1 recovery refuses it (`BadV`).
const SIMULATED_V: u8 = 0;

impl Scheme {
    /// Recovers the signer. The digest is a closure because computing it (CBOR and keccak of
    /// the body) is most of a check once recovery is memoized, and `Simulated` needs none.
    pub fn recover(
        self,
        digest: impl FnOnce() -> B256,
        sig: &Sig65,
    ) -> Result<Address, SignatureError> {
        match self {
            Scheme::Secp256k1 => recover_signer(&digest(), sig),
            Scheme::Simulated => {
                // Only the exact shape `sign_with` makes: a secp256k1 signature (or garbage)
                // handed to a simulated machine is refused like a bad signature.
                if sig.0[64] != SIMULATED_V {
                    return Err(SignatureError::BadV);
                }
                if sig.0[20..64].iter().any(|b| *b != 0) {
                    return Err(SignatureError::Unrecoverable);
                }
                Ok(Address::from_slice(&sig.0[..20]))
            }
        }
    }
}

#[derive(Clone)]
enum Key {
    Secp256k1(Box<k256::ecdsa::SigningKey>),
    Simulated,
}

/// A node's Ethereum key (or, in the simulator, a [`Scheme::Simulated`] identity). Signing is
/// deterministic (RFC 6979), so no RNG enters the machines. The address is derived once:
/// every message a machine signs names it.
#[derive(Clone)]
pub struct SigningKey {
    key: Key,
    address: Address,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({:?}, {})", self.scheme(), self.address)
    }
}

impl SigningKey {
    pub fn from_bytes(secret: &[u8; 32]) -> Result<Self, SignatureError> {
        let key =
            k256::ecdsa::SigningKey::from_slice(secret).map_err(|_| SignatureError::BadKey)?;
        let address = Address::from_public_key(key.verifying_key());
        Ok(SigningKey {
            key: Key::Secp256k1(Box::new(key)),
            address,
        })
    }

    /// A key derived from a seed, for tests and the simulator (never for real funds).
    pub fn from_seed(seed: u64) -> Self {
        let mut counter = 0u64;
        loop {
            if let Ok(k) = Self::from_bytes(&keccak256(seed_material(seed, counter)).0) {
                return k;
            }
            // Only ~2^-128 of hashes are out of range; try the next one.
            counter += 1;
        }
    }

    /// The [`Scheme::Simulated`] identity of `from_seed(seed)`: the same address, nothing
    /// secret. Same addresses mean a simulation runs the same under either scheme (they
    /// order bids, verifier lists and ties), only cheaper.
    pub fn simulated(seed: u64) -> Self {
        SigningKey {
            key: Key::Simulated,
            address: Self::from_seed(seed).address,
        }
    }

    pub fn scheme(&self) -> Scheme {
        match self.key {
            Key::Secp256k1(_) => Scheme::Secp256k1,
            Key::Simulated => Scheme::Simulated,
        }
    }

    pub fn address(&self) -> Address {
        self.address
    }

    /// Signs a 32-byte digest, returning a low-s signature with v = 27/28 (secp256k1).
    pub fn sign_digest(&self, digest: &B256) -> Sig65 {
        self.sign_with(|| *digest)
    }

    /// Signs the digest `digest` computes, computing it only where the scheme needs it.
    pub fn sign_with(&self, digest: impl FnOnce() -> B256) -> Sig65 {
        let key = match &self.key {
            Key::Secp256k1(key) => key,
            Key::Simulated => {
                let mut out = [0u8; 65];
                out[..20].copy_from_slice(self.address.as_slice());
                out[64] = SIMULATED_V;
                return Sig65(out);
            }
        };
        // k256 signs any 32-byte prehash; failure would mean a broken key, which from_bytes rules out.
        let (sig, recid) = key
            .sign_prehash_recoverable(digest().as_slice())
            .expect("signing a 32-byte prehash with a valid key cannot fail");
        let (sig, flip) = match sig.normalize_s() {
            Some(low) => (low, true),
            None => (sig, false),
        };
        let parity = recid.is_y_odd() ^ flip;
        let mut out = [0u8; 65];
        out[..64].copy_from_slice(&sig.to_bytes());
        out[64] = 27 + u8::from(parity);
        Sig65(out)
    }
}

fn seed_material(seed: u64, counter: u64) -> [u8; 16] {
    let mut material = [0u8; 16];
    material[..8].copy_from_slice(&seed.to_le_bytes());
    material[8..].copy_from_slice(&counter.to_le_bytes());
    material
}

/// Recoveries remembered per thread. In the node one gossip message is checked by the
/// validator and again by each role machine; in the simulator by every receiver. Recovery is
/// ~50× the cost of a lookup and a pure function of its inputs, so memoizing it changes no
/// result (and keeps runs deterministic).
const RECOVERY_CACHE: usize = 8192;

type RecoveryKey = (B256, [u8; 65]);

std::thread_local! {
    static RECOVERED: std::cell::RefCell<std::collections::HashMap<RecoveryKey, Result<Address, SignatureError>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Recovers the signer of `digest`, refusing what JobEscrow refuses (v ∉ {27, 28}, high s).
pub fn recover_signer(digest: &B256, sig: &Sig65) -> Result<Address, SignatureError> {
    let key = (*digest, sig.0);
    if let Some(hit) = RECOVERED.with(|c| c.borrow().get(&key).cloned()) {
        return hit;
    }
    let result = recover_uncached(digest, sig);
    RECOVERED.with(|c| {
        let mut c = c.borrow_mut();
        // Forgetting everything at once is crude but bounded and cheap; hot messages
        // (the ones many receivers check) come straight back.
        if c.len() >= RECOVERY_CACHE {
            c.clear();
        }
        c.insert(key, result.clone());
    });
    result
}

fn recover_uncached(digest: &B256, sig: &Sig65) -> Result<Address, SignatureError> {
    let v = sig.0[64];
    if v != 27 && v != 28 {
        return Err(SignatureError::BadV);
    }
    let parsed = alloy_primitives::Signature::from_bytes_and_parity(&sig.0[..64], v == 28);
    if parsed.normalize_s().is_some() {
        return Err(SignatureError::HighS);
    }
    parsed
        .recover_address_from_prehash(digest)
        .map_err(|_| SignatureError::Unrecoverable)
}

/// Digest for gossip-only signed bodies (NodeHello, JobOffer, Heartbeat, CheckpointAnnounce):
/// keccak256 of a domain tag and the CBOR of the body with a zeroed signature. The tag keeps
/// these from ever colliding with an EIP-712 digest (whose preimage starts with 0x1901).
pub fn gossip_digest<T: Serialize>(kind: &str, body: &T) -> B256 {
    let mut pre = format!("gpuchain/1/{kind}\0").into_bytes();
    // In-memory CBOR of our own message structs cannot fail.
    ciborium::into_writer(body, &mut pre).expect("message body serializes into memory");
    keccak256(&pre)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_recovery_answers_exactly_as_uncached_recovery() {
        let key = SigningKey::from_seed(11);
        let digest = keccak256(b"cached");
        let good = key.sign_digest(&digest);
        let mut bad_v = good;
        bad_v.0[64] = 29;
        let mut flipped = good;
        flipped.0[5] ^= 1;
        for sig in [good, bad_v, flipped] {
            let first = recover_signer(&digest, &sig);
            // The second call is answered from the cache.
            assert_eq!(recover_signer(&digest, &sig), first);
            assert_eq!(first, recover_uncached(&digest, &sig));
        }
        assert_eq!(recover_signer(&digest, &good), Ok(key.address()));
        assert_eq!(recover_signer(&digest, &bad_v), Err(SignatureError::BadV));
        // Past the bound the cache starts over and still answers correctly.
        for i in 0..(RECOVERY_CACHE as u64 + 10) {
            let d = keccak256(i.to_le_bytes());
            let _ = recover_signer(&d, &good);
        }
        assert_eq!(recover_signer(&digest, &good), Ok(key.address()));
    }

    #[test]
    fn sign_then_recover_round_trips() {
        let key = SigningKey::from_seed(7);
        let digest = keccak256(b"hello");
        let sig = key.sign_digest(&digest);
        assert!(sig.0[64] == 27 || sig.0[64] == 28);
        assert_eq!(recover_signer(&digest, &sig).unwrap(), key.address());
        assert_ne!(
            recover_signer(&keccak256(b"other"), &sig).ok(),
            Some(key.address())
        );
    }

    #[test]
    fn high_s_and_bad_v_are_refused() {
        let key = SigningKey::from_seed(8);
        let digest = keccak256(b"x");
        let sig = key.sign_digest(&digest);
        let mut bad_v = sig;
        bad_v.0[64] = 1;
        assert_eq!(recover_signer(&digest, &bad_v), Err(SignatureError::BadV));
        // The malleable twin (n - s, flipped v) recovers the same key on a lax verifier.
        let parsed =
            alloy_primitives::Signature::from_bytes_and_parity(&sig.0[..64], sig.0[64] == 28);
        let n = alloy_primitives::U256::from_be_slice(&alloy_primitives::hex!(
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
        ));
        let mut twin = sig;
        twin.0[32..64].copy_from_slice(&(n - parsed.s()).to_be_bytes::<32>());
        twin.0[64] = if sig.0[64] == 27 { 28 } else { 27 };
        assert_eq!(recover_signer(&digest, &twin), Err(SignatureError::HighS));
    }

    #[test]
    fn schemes_do_not_accept_each_others_signatures() {
        let digest = keccak256(b"scheme");
        let real = SigningKey::from_seed(3);
        let sim = SigningKey::simulated(3);
        assert_eq!(real.scheme(), Scheme::Secp256k1);
        assert_eq!(sim.scheme(), Scheme::Simulated);
        assert_eq!(real.address(), sim.address());
        let real_sig = real.sign_digest(&digest);
        let sim_sig = sim.sign_digest(&digest);
        assert_eq!(
            Scheme::Secp256k1.recover(|| digest, &real_sig),
            Ok(real.address())
        );
        assert_eq!(
            Scheme::Simulated.recover(|| digest, &sim_sig),
            Ok(sim.address())
        );
        // The wire's scheme refuses a simulated signature; a simulated machine refuses a real one.
        assert_eq!(
            Scheme::Secp256k1.recover(|| digest, &sim_sig),
            Err(SignatureError::BadV)
        );
        assert!(Scheme::Simulated.recover(|| digest, &real_sig).is_err());
        let mut padded = sim_sig;
        padded.0[40] = 1;
        assert_eq!(
            Scheme::Simulated.recover(|| digest, &padded),
            Err(SignatureError::Unrecoverable)
        );
        // A simulated signature never computes the digest.
        let sig = sim.sign_with(|| unreachable!("the simulated scheme needs no digest"));
        assert_eq!(
            Scheme::Simulated.recover(|| unreachable!("nor to check one"), &sig),
            Ok(sim.address())
        );
    }

    #[test]
    fn sig65_serde_rejects_wrong_length() {
        let mut buf = Vec::new();
        ciborium::into_writer(&ciborium::Value::Bytes(vec![1; 64]), &mut buf).unwrap();
        assert!(ciborium::from_reader::<Sig65, _>(buf.as_slice()).is_err());
        let mut buf = Vec::new();
        ciborium::into_writer(&Sig65([9; 65]), &mut buf).unwrap();
        assert_eq!(
            ciborium::from_reader::<Sig65, _>(buf.as_slice()).unwrap(),
            Sig65([9; 65])
        );
    }
}
