//! One ed25519 key is both the libp2p peer identity and the iroh endpoint key, so a peer's
//! blob endpoint id follows from its peer id and cannot be claimed by anyone else.

use libp2p::PeerId;
use libp2p::identity::{Keypair, PublicKey};

/// The iroh endpoint id of a peer, if its peer id embeds an ed25519 key.
pub fn endpoint_id(peer: &PeerId) -> Option<iroh::EndpointId> {
    let mh = peer.as_ref();
    // Identity multihash (code 0): the digest is the protobuf-encoded public key.
    if mh.code() != 0 {
        return None;
    }
    let pk = PublicKey::try_decode_protobuf(mh.digest()).ok()?;
    let ed = pk.try_into_ed25519().ok()?;
    iroh::EndpointId::from_bytes(&ed.to_bytes()).ok()
}

pub fn endpoint_id_hex(peer: &PeerId) -> Option<String> {
    endpoint_id(peer).map(|id| hex::encode(id.as_bytes()))
}

/// The iroh secret key made from the libp2p ed25519 keypair.
pub fn iroh_secret(keypair: &Keypair) -> anyhow::Result<iroh::SecretKey> {
    let ed = keypair
        .clone()
        .try_into_ed25519()
        .map_err(|_| anyhow::anyhow!("the node identity must be an ed25519 key"))?;
    let secret = ed.secret();
    let bytes: [u8; 32] = secret
        .as_ref()
        .try_into()
        .map_err(|_| anyhow::anyhow!("ed25519 secret has an unexpected length"))?;
    Ok(iroh::SecretKey::from_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_id_and_endpoint_id_share_the_key() {
        let kp = Keypair::generate_ed25519();
        let peer = kp.public().to_peer_id();
        let secret = iroh_secret(&kp).expect("secret");
        assert_eq!(endpoint_id(&peer), Some(secret.public()));
        let other = Keypair::generate_ed25519().public().to_peer_id();
        assert_ne!(endpoint_id(&other), Some(secret.public()));
    }
}
