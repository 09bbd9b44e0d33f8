//! The checkpoint store: an iroh endpoint (relays off unless configured) serving an
//! iroh-blobs fs store in the data dir. Content is addressed by its BLAKE3 hash; fetches are
//! verified while streaming; whatever we hold complete, we serve.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use iroh::address_lookup::MemoryLookup;
use iroh::endpoint::{PortmapperConfig, presets};
use iroh::protocol::Router;
use iroh::{Endpoint, EndpointAddr, EndpointId, RelayMode, RelayUrl, SecretKey, TransportAddr};
use iroh_blobs::api::downloader::Downloader;
use iroh_blobs::store::GcConfig;
use iroh_blobs::store::fs::FsStore;
use iroh_blobs::store::fs::options::Options;
use iroh_blobs::{BlobsProtocol, Hash, HashAndFormat};
use serde::Serialize;

/// Untagged content (aborted downloads, superseded checkpoints) is collected this often.
/// Named tags protect accepted checkpoints and everything fetched on purpose.
pub const GC_INTERVAL: Duration = Duration::from_secs(600);
/// Prefix of the tags this node sets; `checkpoint/<hash>` marks an accepted checkpoint.
pub const TAG_PREFIX: &str = "gpuchain/";

#[derive(Debug, Clone, Serialize)]
pub struct BlobInfo {
    pub hash: String,
    pub size: u64,
    pub tag: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FetchInfo {
    pub hash: String,
    pub size: u64,
    pub tag: String,
    pub elapsed_ms: u64,
    /// False when the blob was already complete locally.
    pub transferred: bool,
}

#[derive(Debug, Clone)]
pub struct BlobNode {
    endpoint: Endpoint,
    store: FsStore,
    router: Router,
    lookup: MemoryLookup,
    downloader: Downloader,
}

impl BlobNode {
    pub async fn start(
        dir: &Path,
        secret: SecretKey,
        bind: SocketAddr,
        relay: Option<RelayUrl>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the blob store dir {}", dir.display()))?;
        let mut options = Options::new(dir);
        options.gc = Some(GcConfig {
            interval: GC_INTERVAL,
            add_protected: None,
        });
        let store = FsStore::load_with_opts(dir.join("blobs.db"), options)
            .await
            .map_err(|e| anyhow!("cannot open the blob store in {}: {e}", dir.display()))?;

        let lookup = MemoryLookup::new();
        // Without a relay the node is meant for direct (LAN, loopback, public IP) use, where
        // probing the gateway for port mappings only adds start-up traffic.
        let (relay_mode, portmapper) = match relay {
            Some(url) => (RelayMode::custom([url]), PortmapperConfig::default()),
            None => (RelayMode::Disabled, PortmapperConfig::Disabled),
        };
        let endpoint = Endpoint::builder(presets::Minimal)
            .secret_key(secret)
            .relay_mode(relay_mode)
            .portmapper_config(portmapper)
            .clear_address_lookup()
            .address_lookup(lookup.clone())
            .clear_ip_transports()
            .bind_addr(bind)
            .map_err(|e| anyhow!("--blob-bind {bind}: {e}"))?
            .bind()
            .await
            .map_err(|e| anyhow!("cannot bind the blob endpoint on {bind}: {e}"))?;
        let blobs = BlobsProtocol::new(&store, None);
        let router = Router::builder(endpoint.clone())
            .accept(iroh_blobs::ALPN, blobs)
            .spawn();
        let downloader = store.downloader(&endpoint);
        Ok(Self {
            endpoint,
            store,
            router,
            lookup,
            downloader,
        })
    }

    pub fn id(&self) -> EndpointId {
        self.endpoint.id()
    }

    /// Direct socket addresses others can reach us on. A wildcard bind is expanded by iroh
    /// into the interface addresses; the bound port is added for loopback use.
    pub fn socket_addrs(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = self.endpoint.addr().ip_addrs().copied().collect();
        for s in self.endpoint.bound_sockets() {
            if !s.ip().is_unspecified() && !out.contains(&s) {
                out.push(s);
            }
        }
        if out.is_empty() {
            for s in self.endpoint.bound_sockets() {
                let ip: std::net::IpAddr = if s.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                };
                out.push(SocketAddr::new(ip, s.port()));
            }
        }
        out
    }

    /// Remembers where a peer's endpoint can be reached (learned from its NodeHello).
    pub fn learn(&self, id: EndpointId, addrs: &[SocketAddr]) {
        let addr = EndpointAddr::from_parts(id, addrs.iter().copied().map(TransportAddr::Ip));
        self.lookup.add_endpoint_info(addr);
    }

    pub fn knows(&self, id: EndpointId) -> bool {
        self.lookup.get_endpoint_info(id).is_some()
    }

    /// Imports a file (copied into the store) and tags it so GC keeps it.
    pub async fn add_path(&self, path: &Path, tag: Option<String>) -> Result<BlobInfo> {
        let path: PathBuf =
            std::path::absolute(path).with_context(|| format!("bad path {}", path.display()))?;
        let meta = std::fs::metadata(&path).with_context(|| {
            format!("cannot read {}: check that the file exists", path.display())
        })?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let tt = self
            .store
            .blobs()
            .add_path(&path)
            .temp_tag()
            .await
            .map_err(|e| anyhow!("cannot import {}: {e}", path.display()))?;
        let hash = tt.hash();
        let tag = tag.unwrap_or_else(|| format!("{TAG_PREFIX}added/{hash}"));
        self.tag(hash, &tag).await?;
        Ok(BlobInfo {
            hash: hash.to_string(),
            size: meta.len(),
            tag,
        })
    }

    /// Stores bytes under `tag` (kept from GC until the tag is removed) and returns the hash.
    /// `sync` makes the tag durable at once; spot-check states skip it (they are only
    /// useful while the process that made them lives).
    pub async fn add_bytes(&self, bytes: Vec<u8>, tag: &str, sync: bool) -> Result<Hash> {
        let tt = self
            .store
            .blobs()
            .add_bytes(bytes)
            .temp_tag()
            .await
            .map_err(|e| anyhow!("cannot store a blob: {e}"))?;
        let hash = tt.hash();
        if sync {
            self.tag(hash, tag).await?;
        } else {
            self.store
                .tags()
                .set(tag, HashAndFormat::raw(hash))
                .await
                .map_err(|e| anyhow!("cannot tag {hash}: {e}"))?;
        }
        Ok(hash)
    }

    /// The whole blob, if held complete.
    pub async fn read(&self, hash: Hash) -> Result<Vec<u8>> {
        let bytes = self
            .store
            .blobs()
            .get_bytes(hash)
            .await
            .map_err(|e| anyhow!("blob {hash} is not complete in the local store: {e}"))?;
        Ok(bytes.to_vec())
    }

    /// Drops every tag under `prefix`; GC then reclaims what nothing else protects.
    pub async fn untag_prefix(&self, prefix: &str) -> Result<()> {
        self.store
            .tags()
            .delete_prefix(prefix)
            .await
            .map_err(|e| anyhow!("cannot drop tags {prefix}*: {e}"))?;
        Ok(())
    }

    /// Tags a blob and makes the store's metadata durable, so that what we acknowledged
    /// as stored is still there after a crash (the store batches its database writes).
    pub async fn tag(&self, hash: Hash, name: &str) -> Result<()> {
        self.store
            .tags()
            .set(name, HashAndFormat::raw(hash))
            .await
            .map_err(|e| anyhow!("cannot tag {hash}: {e}"))?;
        self.store
            .sync_db()
            .await
            .map_err(|e| anyhow!("cannot sync the blob store: {e}"))
    }

    /// Size of the blob if we hold it complete.
    pub async fn complete_size(&self, hash: Hash) -> Result<Option<u64>> {
        let local = self
            .store
            .remote()
            .local(HashAndFormat::raw(hash))
            .await
            .map_err(|e| anyhow!("blob store: {e}"))?;
        if local.is_complete() {
            Ok(Some(local.local_bytes()))
        } else {
            Ok(None)
        }
    }

    /// Fetches a blob from the given providers, tried in order, verifying every chunk against
    /// the hash as it streams in, then tags it so it is kept and served on.
    pub async fn fetch(
        &self,
        hash: Hash,
        providers: Vec<EndpointId>,
        tag: Option<String>,
    ) -> Result<FetchInfo> {
        let tag = tag.unwrap_or_else(|| format!("{TAG_PREFIX}fetched/{hash}"));
        let start = Instant::now();
        if let Some(size) = self.complete_size(hash).await? {
            self.tag(hash, &tag).await?;
            return Ok(FetchInfo {
                hash: hash.to_string(),
                size,
                tag,
                elapsed_ms: 0,
                transferred: false,
            });
        }
        if providers.is_empty() {
            bail!(
                "no known peer can serve blob {hash}: name a provider or wait until peers have said hello"
            );
        }
        let n = providers.len();
        self.downloader
            .download(hash, providers)
            .await
            .map_err(|e| anyhow!("fetching blob {hash} from {n} provider(s) failed: {e}"))?;
        let Some(size) = self.complete_size(hash).await? else {
            bail!("fetching blob {hash}: no provider delivered it complete ({n} tried)");
        };
        self.tag(hash, &tag).await?;
        Ok(FetchInfo {
            hash: hash.to_string(),
            size,
            tag,
            elapsed_ms: start.elapsed().as_millis() as u64,
            transferred: true,
        })
    }

    pub async fn export(&self, hash: Hash, target: &Path) -> Result<u64> {
        let target = std::path::absolute(target)
            .with_context(|| format!("bad path {}", target.display()))?;
        self.store
            .blobs()
            .export(hash, &target)
            .finish()
            .await
            .map_err(|e| anyhow!("cannot export {hash} to {}: {e}", target.display()))
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.router.shutdown().await {
            tracing::warn!(error = %e, "blob router shutdown");
        }
        // The store acknowledges shutdown by dropping its reply channel, so an error here
        // is the normal case.
        if let Err(e) = self.store.shutdown().await {
            tracing::debug!(error = %e, "blob store shutdown");
        }
    }
}

pub fn parse_hash(s: &str) -> Result<Hash> {
    s.parse::<Hash>()
        .map_err(|e| anyhow!("{s:?} is not a blob hash ({e}); expected 64 hex characters (BLAKE3)"))
}
