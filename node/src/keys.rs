//! Key files in the data dir, created on first run: the ed25519 node identity and the
//! Ethereum key (Web3 secret-storage keystore, scrypt + AES, password from env or file).
//! Both are written to a temporary name and renamed, so a crash mid-write never leaves a
//! half-written key behind. Secrets are never logged; the Ethereum address may be.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use alloy_signer_local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow};
use libp2p::identity::Keypair;

pub use crate::datadir::{IDENTITY_FILE, KEYSTORE_DIR, KEYSTORE_FILE};
use crate::datadir::{identity_file, keystore_dir};

pub struct Keys {
    pub libp2p: Keypair,
    pub iroh: iroh::SecretKey,
    pub eth: PrivateKeySigner,
}

impl Keys {
    /// The Ethereum key in the protocol crate's form, for signing gossip, bids and votes.
    pub fn protocol_signer(&self) -> Result<gpuchain_protocol::signing::SigningKey> {
        gpuchain_protocol::signing::SigningKey::from_bytes(&self.eth.to_bytes().0)
            .map_err(|e| anyhow!("the keystore holds an unusable key: {e}"))
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("peer_id", &self.libp2p.public().to_peer_id())
            .field("eth_address", &self.eth.address())
            .finish_non_exhaustive()
    }
}

pub fn load_or_create(data_dir: &Path, password: &str) -> Result<Keys> {
    let libp2p = load_or_create_identity(&identity_file(data_dir))?;
    let iroh = crate::identity::iroh_secret(&libp2p)?;
    let eth = load_or_create_eth(&keystore_dir(data_dir), password)?;
    Ok(Keys { libp2p, iroh, eth })
}

fn load_or_create_identity(path: &Path) -> Result<Keypair> {
    if path.exists() {
        let bytes = fs::read(path)
            .with_context(|| format!("cannot read the node identity {}", path.display()))?;
        return Keypair::from_protobuf_encoding(&bytes).map_err(|e| {
            anyhow!(
                "the node identity {} is corrupt ({e}); move it away to start with a new identity",
                path.display()
            )
        });
    }
    let kp = Keypair::generate_ed25519();
    let bytes = kp
        .to_protobuf_encoding()
        .map_err(|e| anyhow!("cannot encode the new identity: {e}"))?;
    write_private_atomically(path, &bytes)?;
    Ok(kp)
}

fn load_or_create_eth(dir: &Path, password: &str) -> Result<PrivateKeySigner> {
    let path = dir.join(KEYSTORE_FILE);
    if path.exists() {
        return PrivateKeySigner::decrypt_keystore(&path, password).map_err(|e| {
            anyhow!(
                "cannot open the Ethereum keystore {} ({e}): check the password (GPUCHAIN_KEYSTORE_PASSWORD or --keystore-password-file)",
                path.display()
            )
        });
    }
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the keystore dir {}", dir.display()))?;
    let tmp_dir = dir.join(format!(".new-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp_dir);
    fs::create_dir_all(&tmp_dir).with_context(|| format!("cannot create {}", tmp_dir.display()))?;
    let mut rng = rand08::thread_rng();
    let (signer, _) =
        PrivateKeySigner::new_keystore(&tmp_dir, &mut rng, password, Some(KEYSTORE_FILE))
            .map_err(|e| anyhow!("cannot create the Ethereum keystore: {e}"))?;
    restrict(&tmp_dir.join(KEYSTORE_FILE))?;
    fs::rename(tmp_dir.join(KEYSTORE_FILE), &path)
        .with_context(|| format!("cannot move the new keystore into {}", path.display()))?;
    let _ = fs::remove_dir_all(&tmp_dir);
    Ok(signer)
}

fn write_private_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp: PathBuf = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = open_private(&tmp).with_context(|| {
        format!(
            "cannot write {}: check the data dir permissions",
            tmp.display()
        )
    })?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(())
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<fs::File> {
    fs::File::create(path)
}

#[cfg(unix)]
fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))
}

#[cfg(not(unix))]
fn restrict(_path: &Path) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_persist_and_wrong_password_fails() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = load_or_create(dir.path(), "pw").expect("create");
        let b = load_or_create(dir.path(), "pw").expect("reopen");
        assert_eq!(a.libp2p.public(), b.libp2p.public());
        assert_eq!(a.eth.address(), b.eth.address());
        let e = load_or_create(dir.path(), "wrong").expect_err("wrong password");
        assert!(e.to_string().contains("password"), "{e}");

        fs::write(dir.path().join(IDENTITY_FILE), b"junk").expect("write");
        let e = load_or_create(dir.path(), "pw").expect_err("corrupt identity");
        assert!(e.to_string().contains("corrupt"), "{e}");
    }
}
