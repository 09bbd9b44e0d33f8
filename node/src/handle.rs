//! The cloneable handle of the swarm and the blob store: the control API and the role
//! runtime use it to ask the event loop for state and to make it act.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use libp2p::PeerId;
use tokio::sync::{mpsc, oneshot, watch};

use crate::blobs::{BlobInfo, BlobNode, FetchInfo, parse_hash};
use crate::event_loop::{Command, Status};
use crate::events::NodeEvent;
use crate::inbound::GossipTicket;
use crate::state::{HeartbeatStats, PeerInfo, ReceivedMessage};

#[derive(Debug, Clone)]
pub struct NodeHandle {
    commands: mpsc::Sender<Command>,
    blobs: BlobNode,
    shutdown: watch::Sender<bool>,
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
        }
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| anyhow!("the node is shutting down"))?;
        rx.await.map_err(|_| anyhow!("the node is shutting down"))
    }

    /// Testnets only: cut this node off from `peers` (`blocked`) or heal it.
    pub async fn partition(&self, peers: Vec<PeerId>, blocked: bool) -> Result<()> {
        self.ask(|reply| Command::Partition {
            peers,
            blocked,
            reply,
        })
        .await
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

    /// Returns once the swarm has handled what it already had ready (see `Command::Sync`).
    pub async fn sync(&self) -> Result<()> {
        self.ask(Command::Sync).await
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

    /// Imports a file the caller has already confined to the import folder.
    pub async fn add_blob(
        &self,
        path: PathBuf,
        name: Option<String>,
        share: bool,
    ) -> Result<BlobInfo> {
        self.blobs.add_path(&path, name.as_deref(), share).await
    }

    /// Fetches a blob by hash from the named peers first, then from any peer that told us
    /// its blob address; optionally exports it afterwards to a file the caller has already
    /// confined to the export folder.
    pub async fn fetch_blob(
        &self,
        hash: &str,
        from: Vec<String>,
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
        let info = self.blobs.fetch(hash, sources).await?;
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
        self.blobs.fetch(hash, sources).await
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

    /// Hands the machines' verdict on a held gossip message back to the swarm. Never waits:
    /// the role runtime must not block on the swarm. A full queue leaves the message to
    /// gossipsub's validation timeout (dropped, no penalty).
    pub fn report_verdict(
        &self,
        ticket: GossipTicket,
        verdict: gpuchain_protocol::validation::Verdict,
    ) {
        if let Err(e) = self.commands.try_send(Command::Verdict { ticket, verdict }) {
            crate::events::emit(
                NodeEvent::VerdictDropped {
                    error: e.to_string(),
                },
                "the swarm is behind; a gossip verdict was not delivered",
            );
        }
    }

    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}
