//! The cloneable handle the control API uses to reach the role runtime: apart from the
//! swarm's [`crate::handle::NodeHandle`], so each exists once its owner does and neither is
//! filled in later.

use anyhow::{Result, anyhow};
use gpuchain_protocol::JobId;
use gpuchain_protocol::client::JobStatus;
use tokio::sync::{mpsc, oneshot};

use super::ctx::{RoleEvent, SubmitReply, SubmitRequest};

#[derive(Debug, Clone)]
pub struct RolesHandle {
    tx: mpsc::Sender<RoleEvent>,
}

impl RolesHandle {
    pub fn new(tx: mpsc::Sender<RoleEvent>) -> Self {
        Self { tx }
    }

    /// The runtime's own queue, for the chain follower.
    pub fn sender(&self) -> mpsc::Sender<RoleEvent> {
        self.tx.clone()
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> RoleEvent) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| anyhow!("the node is shutting down"))?;
        rx.await.map_err(|_| anyhow!("the node is shutting down"))
    }

    /// Hands a job to the client machine; answers once the chain has created it.
    pub async fn submit_job(&self, request: SubmitRequest) -> Result<SubmitReply> {
        self.ask(|reply| RoleEvent::SubmitJob { request, reply })
            .await?
    }

    pub async fn bid_refusals(&self) -> Result<Option<std::collections::BTreeMap<String, u64>>> {
        self.ask(|reply| RoleEvent::BidRefusals { reply }).await
    }

    pub async fn job_status(&self, job_id: JobId) -> Result<Option<JobStatus>> {
        self.ask(|reply| RoleEvent::JobStatus { job_id, reply })
            .await
    }
}
