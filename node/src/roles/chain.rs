//! The runtime's side of the chain: submitting the machines' transactions, following the
//! escrow's events into them (committing the cursor only once they have seen a batch), and
//! preparing a client's job submission. Specs the client submitted are kept in the data dir
//! so a restarted client can re-offer its jobs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use gpuchain_contracts::chain::{ChainClient, EventFollower, FollowedEvent, FollowerConfig};
use gpuchain_protocol::client::JobParams;
use gpuchain_protocol::{ChainTx, Input, JobSpec, TxId};
use tokio::sync::{mpsc, oneshot, watch};

use super::jobs::{JobFile, blake3_of};
use super::{Ctx, RoleEvent, SubmitReply, SubmitRequest};

const SPECS_DIR: &str = "specs";
const CURSOR_DIR: &str = "chain";
/// Pause after a failed poll: the RPC may be restarting.
const RETRY_AFTER: Duration = Duration::from_secs(1);

fn specs_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(SPECS_DIR)
}

/// Writes the spec before `createJob` goes out: if we crash after the chain took the job,
/// the restarted client still knows what it offered.
pub fn save_spec(data_dir: &Path, spec: &JobSpec) {
    let dir = specs_dir(data_dir);
    let name = format!("{}.cbor", hex::encode(spec.spec_hash()));
    let result = std::fs::create_dir_all(&dir).and_then(|()| {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, spec.to_cbor())?;
        std::fs::rename(&tmp, dir.join(&name))
    });
    if let Err(e) = result {
        tracing::error!(target: "gpuchain::event", event = "spec_not_saved", error = %e, dir = %dir.display(), "cannot keep the job spec; a restart will not re-offer this job");
    }
}

/// Every spec kept by [`save_spec`]; unreadable files are reported and skipped.
pub fn load_specs(data_dir: &Path) -> Vec<JobSpec> {
    let Ok(entries) = std::fs::read_dir(specs_dir(data_dir)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "cbor") {
            continue;
        }
        match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| JobSpec::from_cbor(&b).map_err(|e| e.to_string()))
        {
            Ok(spec) => out.push(spec),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable job spec")
            }
        }
    }
    out
}

/// Packs and stores the job's blobs and works out the escrow terms.
pub async fn prepare_job(ctx: &Ctx, req: &SubmitRequest) -> Result<(JobSpec, JobParams)> {
    if req.verifiers.is_empty() {
        bail!("a job needs at least one verifier: pass --verifiers ADDR[,ADDR…]");
    }
    if req.quorum == 0 || usize::from(req.quorum) > req.verifiers.len() {
        bail!(
            "--quorum {} must be between 1 and the number of verifiers ({})",
            req.quorum,
            req.verifiers.len()
        );
    }
    if req.budget.is_zero() || req.max_price_per_step.is_zero() {
        bail!("--budget and --max-price must be positive");
    }
    let path = req.spec_path.clone();
    let (spec, blobs) = tokio::task::spawn_blocking(move || {
        let file = JobFile::load(&path)?;
        file.build(&path)
    })
    .await
    .map_err(|e| anyhow!("preparing the job: {e}"))??;
    let spec_hex = hex::encode(spec.spec_hash());
    let store = ctx.handle.blobs();
    for (name, bytes) in [
        ("model", blobs.model),
        ("train", blobs.train),
        ("eval", blobs.eval),
    ] {
        let want = blake3_of(&bytes);
        let got = store
            .add_bytes(bytes, &format!("gpuchain/job/{spec_hex}/{name}"), true)
            .await?;
        if super::jobs::from_iroh(got) != want {
            bail!("the blob store hashed the job's {name} data differently from BLAKE3");
        }
    }
    let now = ctx.chain.block_time().await?;
    let params = JobParams {
        token: ctx.chain.token(),
        budget: req.budget,
        max_price_per_step: req.max_price_per_step,
        verifiers: req.verifiers.clone(),
        quorum: req.quorum,
        deadline: now.saturating_add(req.deadline_secs),
        grace: req.grace_secs,
    };
    Ok((spec, params))
}

/// Sends one of the machines' transactions; a failure goes back to them as `TxFailed`.
pub async fn submit(
    ctx: Ctx,
    id: TxId,
    tx: ChainTx,
    reply: Option<oneshot::Sender<Result<SubmitReply>>>,
) {
    let spec_hash = match &tx {
        ChainTx::CreateJob { spec_hash, .. } => Some(*spec_hash),
        _ => None,
    };
    match ctx.chain.submit(&tx).await {
        Ok(outcome) => {
            tracing::info!(target: "gpuchain::event", event = "tx_mined", call = outcome.call, tx_hash = %outcome.hash, block = outcome.block_number, gas_used = outcome.gas_used, "transaction mined");
            if let Some(reply) = reply {
                let r = match (outcome.job_id, spec_hash) {
                    (Some(job_id), Some(spec_hash)) => Ok(SubmitReply {
                        job_id,
                        spec_hash,
                        tx_hash: outcome.hash.to_string(),
                    }),
                    _ => Err(anyhow!("createJob was mined but left no JobCreated event")),
                };
                let _ = reply.send(r);
            }
        }
        Err(e) => {
            let reason = format!("{e:#}");
            if let Some(reply) = reply {
                let _ = reply.send(Err(anyhow!("createJob failed: {reason}")));
            }
            ctx.input(Input::TxFailed { id, reason }).await;
        }
    }
}

/// Opens the follower on the data dir's cursor and returns what it had already handled.
pub async fn open_follower(
    chain: &ChainClient,
    data_dir: &Path,
) -> Result<(EventFollower, Vec<FollowedEvent>)> {
    let follower =
        EventFollower::open(chain, FollowerConfig::new(0, data_dir.join(CURSOR_DIR))).await?;
    if follower.restarted_from_scratch() {
        tracing::warn!(target: "gpuchain::event", event = "cursor_reset", "the chain cursor did not match this chain; reading the escrow's history from the start");
    }
    let history = follower.history().await?;
    Ok((follower, history))
}

/// Feeds new escrow events to the runtime; the cursor moves only after the machines saw them.
pub async fn follow(
    mut follower: EventFollower,
    events: mpsc::Sender<RoleEvent>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let batch = tokio::select! {
            b = follower.next_batch() => b,
            _ = shutdown.changed() => return,
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(target: "gpuchain::event", event = "chain_poll_failed", error = %e, "cannot read escrow events; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let (done, seen) = oneshot::channel();
        if events
            .send(RoleEvent::Chain {
                batch: batch.clone(),
                done,
            })
            .await
            .is_err()
            || seen.await.is_err()
        {
            return;
        }
        if let Err(e) = follower.commit(&batch) {
            tracing::error!(target: "gpuchain::event", event = "cursor_not_saved", error = %e, "cannot save the chain cursor; events may be re-read after a restart");
        }
    }
}
