//! The cloneable handle the control API and the CLI (later also the job drivers) use to
//! ask the event loop for state and to make it act.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use libp2p::PeerId;
use tokio::sync::{mpsc, oneshot, watch};

use crate::blobs::{BlobInfo, BlobNode, FetchInfo, parse_hash};
use crate::event_loop::{Command, Status};
use crate::roles::{RoleEvent, SubmitReply, SubmitRequest};
use crate::state::{HeartbeatStats, PeerInfo, ReceivedMessage};
use gpuchain_protocol::JobId;
use gpuchain_protocol::client::JobStatus;
use std::sync::{Arc, OnceLock};

#[derive(Debug, Clone)]
pub struct NodeHandle {
    commands: mpsc::Sender<Command>,
    blobs: BlobNode,
    shutdown: watch::Sender<bool>,
    /// Set once the role runtime runs (nodes without roles have none).
    roles: Arc<OnceLock<mpsc::Sender<RoleEvent>>>,
}

impl NodeHandle {
    pub fn new(
        commands: mpsc::Sender<Command>,
        blobs: BlobNode,
        shutdown: watch::Sender<bool>,
    ) -> Self {
        Self {
            commands,
            blobs,
            shutdown,
            roles: Arc::new(OnceLock::new()),
        }
    }

    pub fn attach_roles(&self, tx: mpsc::Sender<RoleEvent>) {
        let _ = self.roles.set(tx);
    }

    async fn ask_roles<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> RoleEvent) -> Result<T> {
        let tx = self.roles.get().ok_or_else(|| {
            anyhow!("this node runs no role; start it with --role client (and --rpc-url, --escrow)")
        })?;
        let (reply, rx) = oneshot::channel();
        tx.send(make(reply))
            .await
            .map_err(|_| anyhow!("the node is shutting down"))?;
        rx.await.map_err(|_| anyhow!("the node is shutting down"))
    }

    /// Hands a job to the client machine; answers once the chain has created it.
    pub async fn submit_job(&self, request: SubmitRequest) -> Result<SubmitReply> {
        self.ask_roles(|reply| RoleEvent::SubmitJob { request, reply })
            .await?
    }

    pub async fn job_status(&self, job_id: JobId) -> Result<Option<JobStatus>> {
        self.ask_roles(|reply| RoleEvent::JobStatus { job_id, reply })
            .await
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| anyhow!("the node is shutting down"))?;
        rx.await.map_err(|_| anyhow!("the node is shutting down"))
    }

    pub async fn status(&self) -> Result<Status> {
        self.ask(Command::Status).await
    }

    pub async fn peers(&self) -> Result<Vec<PeerInfo>> {
        self.ask(Command::Peers).await
    }

    /// Publishes raw bytes (an encoded protocol message) on a gossip topic; returns the
    /// gossipsub message id.
    pub async fn publish(&self, topic: String, data: Vec<u8>) -> Result<String> {
        self.ask(|reply| Command::Publish { topic, data, reply })
            .await?
    }

    pub async fn subscribe(&self, topic: String) -> Result<()> {
        self.ask(|reply| Command::Subscribe { topic, reply })
            .await?
    }

    pub async fn heartbeat(&self, topic: String, on: bool) -> Result<()> {
        self.ask(|reply| Command::Heartbeat { topic, on, reply })
            .await?
    }

    pub async fn messages(&self, since: u64) -> Result<Vec<ReceivedMessage>> {
        self.ask(|reply| Command::Messages { since, reply }).await
    }

    pub async fn heartbeat_stats(&self, raw: bool, reset: bool) -> Result<HeartbeatStats> {
        self.ask(|reply| Command::HeartbeatStats { raw, reset, reply })
            .await
    }

    pub async fn add_blob(&self, path: PathBuf, tag: Option<String>) -> Result<BlobInfo> {
        self.blobs.add_path(&path, tag).await
    }

    /// Fetches a blob by hash from the named peers first, then from any peer that told us
    /// its blob address; optionally exports it to a file afterwards.
    pub async fn fetch_blob(
        &self,
        hash: &str,
        from: Vec<String>,
        tag: Option<String>,
        export: Option<PathBuf>,
    ) -> Result<FetchInfo> {
        let hash = parse_hash(hash)?;
        let preferred = from
            .iter()
            .map(|s| {
                s.parse::<PeerId>()
                    .map_err(|e| anyhow!("{s:?} is not a peer id: {e}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let sources = self
            .ask(|reply| Command::BlobSources { preferred, reply })
            .await?;
        let info = self.blobs.fetch(hash, sources, tag).await?;
        if let Some(path) = export {
            self.blobs.export(hash, &path).await?;
        }
        Ok(info)
    }

    /// Fetches a blob from the given peers first, then from any peer that said hello.
    pub async fn fetch_hash(
        &self,
        hash: iroh_blobs::Hash,
        preferred: Vec<PeerId>,
    ) -> Result<FetchInfo> {
        let sources = self
            .ask(|reply| Command::BlobSources { preferred, reply })
            .await?;
        self.blobs.fetch(hash, sources, None).await
    }

    /// The peers bound to an Ethereum address by their hello, connected ones first.
    pub async fn peers_of(&self, address: gpuchain_protocol::Address) -> Result<Vec<PeerId>> {
        self.ask(|reply| Command::PeersOf { address, reply }).await
    }

    pub async fn unsubscribe(&self, topic: String) -> Result<()> {
        self.commands
            .send(Command::Unsubscribe { topic })
            .await
            .map_err(|_| anyhow!("the node is shutting down"))
    }

    pub fn blobs(&self) -> &BlobNode {
        &self.blobs
    }

    pub async fn blob_size(&self, hash: &str) -> Result<Option<u64>> {
        self.blobs.complete_size(parse_hash(hash)?).await
    }

    pub async fn export_blob(&self, hash: &str, path: PathBuf) -> Result<u64> {
        self.blobs.export(parse_hash(hash)?, &path).await
    }

    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}
