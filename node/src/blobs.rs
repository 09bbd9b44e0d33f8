//! The checkpoint store: an iroh endpoint (relays off unless configured) serving an
//! iroh-blobs fs store in the data dir. Content is addressed by its BLAKE3 hash; fetches are
//! verified while streaming.
//!
//! Peers get only what the protocol publishes: a blob is served while a tag in one of the
//! public namespaces ([`PUBLIC_TAGS`]) names it. Every request is intercepted and checked
//! against that set; requests for several blobs at once, or for a blob's children, are
//! refused, so nothing reaches a peer by a side door. A blob the store holds for any other
//! reason (tagged private, a partial download) is never served.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::StreamExt;
use iroh::address_lookup::MemoryLookup;
use iroh::endpoint::{PortmapperConfig, presets};
use iroh::protocol::Router;
use iroh::{Endpoint, EndpointAddr, EndpointId, RelayMode, RelayUrl, SecretKey, TransportAddr};
use iroh_blobs::api::downloader::{DownloadProgressItem, Downloader};
use iroh_blobs::provider::events::{
    AbortReason, EventMask, EventSender, ObserveMode, ProviderMessage, RequestMode, RequestUpdate,
};
use iroh_blobs::store::GcConfig;
use iroh_blobs::store::fs::FsStore;
use iroh_blobs::store::fs::options::Options;
use iroh_blobs::{BlobsProtocol, Hash, HashAndFormat};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// Untagged content (aborted downloads, superseded checkpoints) is collected this often.
/// Named tags protect accepted checkpoints and everything fetched on purpose.
pub const GC_INTERVAL: Duration = Duration::from_secs(600);
/// Prefix of the tags this node sets; `checkpoint/<hash>` marks an accepted checkpoint.
pub const TAG_PREFIX: &str = "gpuchain/";
/// Tag namespaces whose blobs peers may fetch: a job's spec and data, checkpoints, the
/// per-step states a verifier may ask for, what we fetched from peers (it is public
/// already), and files the operator imported with `share`.
pub const PUBLIC_TAGS: &[&str] = &[
    "gpuchain/job/",
    "gpuchain/checkpoint/",
    "gpuchain/states/",
    "gpuchain/fetched/",
    "gpuchain/shared/",
];
/// Imported files that are kept but not served.
pub const PRIVATE_TAG: &str = "gpuchain/private/";

pub fn is_public_tag(name: &str) -> bool {
    PUBLIC_TAGS.iter().any(|p| name.starts_with(p))
}

#[derive(Debug, Clone, Serialize)]
pub struct BlobInfo {
    pub hash: String,
    pub size: u64,
    pub tag: String,
    /// Whether peers may fetch it.
    pub shared: bool,
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
    shared: Shared,
    /// The largest blob [`BlobNode::fetch`] takes in (`--max-blob-mb`).
    max_fetch: u64,
}

/// The hashes peers may fetch, kept in step with the public tags. Tag changes and the
/// rebuild after a deletion are serialised, so a tag set while the set is rebuilt is not
/// lost.
#[derive(Debug, Clone, Default)]
struct Shared {
    hashes: Arc<RwLock<HashSet<Hash>>>,
    mutation: Arc<tokio::sync::Mutex<()>>,
}

impl Shared {
    fn contains(&self, hash: &Hash) -> bool {
        self.hashes.read().is_ok_and(|s| s.contains(hash))
    }

    fn insert(&self, hash: Hash) {
        if let Ok(mut s) = self.hashes.write() {
            s.insert(hash);
        }
    }

    async fn rebuild(&self, store: &FsStore) -> Result<()> {
        let mut fresh = HashSet::new();
        for prefix in PUBLIC_TAGS {
            let mut tags = store
                .tags()
                .list_prefix(prefix)
                .await
                .map_err(|e| anyhow!("cannot list tags {prefix}*: {e}"))?;
            while let Some(t) = tags.next().await {
                fresh.insert(
                    t.map_err(|e| anyhow!("cannot list tags {prefix}*: {e}"))?
                        .hash,
                );
            }
        }
        if let Ok(mut s) = self.hashes.write() {
            *s = fresh;
        }
        Ok(())
    }

    /// Answers the provider side's questions: a plain whole-or-ranged request for one blob
    /// we share, and nothing else.
    fn gate(&self) -> EventSender {
        let mask = EventMask {
            // Log: the transfer's progress comes too, to count the bytes served.
            get: RequestMode::InterceptLog,
            get_many: RequestMode::Disabled,
            observe: ObserveMode::Intercept,
            ..EventMask::DEFAULT
        };
        let (sender, mut rx) = EventSender::channel(64, mask);
        let shared = self.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    ProviderMessage::GetRequestReceived(m) => {
                        let ok = m.request.ranges.is_blob() && shared.contains(&m.request.hash);
                        if !ok {
                            tracing::debug!(hash = %m.request.hash, "refused a blob request for content this node does not share");
                        }
                        m.tx.send(if ok {
                            Ok(())
                        } else {
                            Err(AbortReason::Permission)
                        })
                        .await
                        .ok();
                        // The sender waits on this channel when it is full: drain it to the
                        // end, counting what each transfer sent, finished or not.
                        let mut updates = m.rx;
                        tokio::spawn(async move {
                            while let Ok(Some(u)) = updates.recv().await {
                                let sent = match u {
                                    RequestUpdate::Completed(c) => c.stats.payload_bytes_sent,
                                    RequestUpdate::Aborted(a) => a.stats.payload_bytes_sent,
                                    _ => continue,
                                };
                                crate::metrics::global().blob_bytes_out(sent);
                            }
                        });
                    }
                    ProviderMessage::ObserveRequestReceived(m) => {
                        let ok = shared.contains(&m.request.hash);
                        m.tx.send(if ok {
                            Ok(())
                        } else {
                            Err(AbortReason::Permission)
                        })
                        .await
                        .ok();
                    }
                    _ => {}
                }
            }
        });
        sender
    }
}

impl BlobNode {
    pub async fn start(
        dir: &Path,
        secret: SecretKey,
        bind: SocketAddr,
        relay: Option<RelayUrl>,
        max_fetch: u64,
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
        let shared = Shared::default();
        shared.rebuild(&store).await?;
        let blobs = BlobsProtocol::new(&store, Some(shared.gate()));
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
            shared,
            max_fetch,
        })
    }

    /// Whether peers may fetch this blob from us.
    pub fn is_shared(&self, hash: Hash) -> bool {
        self.shared.contains(&hash)
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

    /// Imports a file (copied into the store) and tags it so GC keeps it: under
    /// `gpuchain/shared/` when peers may fetch it, `gpuchain/private/` otherwise. The caller
    /// has already decided the path may be read (see `datadir::DataDir::import_path`).
    pub async fn add_path(&self, path: &Path, name: Option<&str>, share: bool) -> Result<BlobInfo> {
        let meta = std::fs::metadata(path).with_context(|| {
            format!("cannot read {}: check that the file exists", path.display())
        })?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let tt = self
            .store
            .blobs()
            .add_path(path)
            .temp_tag()
            .await
            .map_err(|e| anyhow!("cannot import {}: {e}", path.display()))?;
        let hash = tt.hash();
        let ns = if share {
            "gpuchain/shared/"
        } else {
            PRIVATE_TAG
        };
        let tag = match name {
            Some(n) => format!("{ns}{}", check_tag_name(n)?),
            None => format!("{ns}{hash}"),
        };
        self.tag(hash, &tag).await?;
        Ok(BlobInfo {
            hash: hash.to_string(),
            size: meta.len(),
            tag,
            shared: share,
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
        self.set_tag(hash, tag, sync).await?;
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
        let _serial = self.shared.mutation.lock().await;
        self.store
            .tags()
            .delete_prefix(prefix)
            .await
            .map_err(|e| anyhow!("cannot drop tags {prefix}*: {e}"))?;
        // Another public tag may still name a blob under this prefix, so the set is
        // recomputed from the tags rather than pruned.
        self.shared.rebuild(&self.store).await
    }

    /// Tags a blob and makes the store's metadata durable, so that what we acknowledged
    /// as stored is still there after a crash (the store batches its database writes).
    pub async fn tag(&self, hash: Hash, name: &str) -> Result<()> {
        self.set_tag(hash, name, true).await
    }

    async fn set_tag(&self, hash: Hash, name: &str, sync: bool) -> Result<()> {
        let _serial = self.shared.mutation.lock().await;
        self.store
            .tags()
            .set(name, HashAndFormat::raw(hash))
            .await
            .map_err(|e| anyhow!("cannot tag {hash}: {e}"))?;
        if is_public_tag(name) {
            self.shared.insert(hash);
        }
        if sync {
            self.store
                .sync_db()
                .await
                .map_err(|e| anyhow!("cannot sync the blob store: {e}"))?;
        }
        Ok(())
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
    pub async fn fetch(&self, hash: Hash, providers: Vec<EndpointId>) -> Result<FetchInfo> {
        let tag = format!("{TAG_PREFIX}fetched/{hash}");
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
        let failed = |e: &dyn std::fmt::Display| {
            anyhow!("fetching blob {hash} from {n} provider(s) failed: {e}")
        };
        let mut progress = self
            .downloader
            .download(hash, providers)
            .stream()
            .await
            .map_err(|e| failed(&e))?;
        // A blob matches its hash whatever its size, so a peer that names a huge one cannot
        // be caught by verification: the download is dropped (which stops it) once it
        // outgrows the limit.
        while let Some(item) = progress.next().await {
            match item {
                DownloadProgressItem::Progress(bytes) if bytes > self.max_fetch => {
                    bail!(
                        "blob {hash} is larger than the {} MiB this node fetches \
                         (--max-blob-mb); refused after {bytes} bytes",
                        self.max_fetch >> 20
                    );
                }
                DownloadProgressItem::Error(e) => return Err(failed(&e)),
                DownloadProgressItem::DownloadError => {
                    return Err(failed(&"no provider could serve it"));
                }
                _ => {}
            }
        }
        let Some(size) = self.complete_size(hash).await? else {
            bail!("fetching blob {hash}: no provider delivered it complete ({n} tried)");
        };
        self.tag(hash, &tag).await?;
        crate::metrics::global().blob_bytes_in(size);
        Ok(FetchInfo {
            hash: hash.to_string(),
            size,
            tag,
            elapsed_ms: start.elapsed().as_millis() as u64,
            transferred: true,
        })
    }

    /// Writes a blob to `target`, which the caller has confined (see
    /// `datadir::DataDir::export_path`).
    pub async fn export(&self, hash: Hash, target: &Path) -> Result<u64> {
        self.store
            .blobs()
            .export(hash, target)
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

/// Caller-chosen tag names stay inside the node's namespace and readable in listings.
fn check_tag_name(n: &str) -> Result<&str> {
    let ok = !n.is_empty()
        && n.len() <= 128
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b));
    if ok {
        Ok(n)
    } else {
        bail!("blob name {n:?}: use 1-128 letters, digits and -_./")
    }
}

pub fn parse_hash(s: &str) -> Result<Hash> {
    s.parse::<Hash>()
        .map_err(|e| anyhow!("{s:?} is not a blob hash ({e}); expected 64 hex characters (BLAKE3)"))
}
