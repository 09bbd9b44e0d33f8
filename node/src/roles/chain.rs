//! The runtime's side of the chain: submitting the machines' transactions, following the
//! escrow's events into them (committing the cursor only once they have seen a batch), and
//! preparing a client's job submission. Specs the client submitted are kept in the data dir
//! so a restarted client can re-offer its jobs.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use gpuchain_contracts::chain::{
    ChainClient, ChainError, CreateJobTerms, EventFollower, FollowedEvent, FollowerConfig,
    check_create_job,
};
use gpuchain_protocol::client::JobParams;
use gpuchain_protocol::{Address, ChainTx, Input, JobSpec, TxId};
use tokio::sync::{mpsc, oneshot, watch};

use super::ctx::{Ctx, RoleEvent, SubmitReply, SubmitRequest};
use super::jobs::{JobFile, blake3_of};
use crate::datadir::specs_dir;
use crate::events::{NodeEvent, emit};

/// Pause after a failed poll: the RPC may be restarting.
const RETRY_AFTER: Duration = Duration::from_secs(1);

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
        emit(
            NodeEvent::SpecNotSaved {
                dir: dir.display().to_string(),
                error: e.to_string(),
            },
            "cannot keep the job spec; a restart will not re-offer this job",
        );
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

/// Checks the submission against everything the escrow will check (the verifier pool it
/// will draw the committee from included), simulates the `createJob` it leads to, then packs and stores the job's blobs
/// and works out the escrow terms. Nothing is stored or sent for a job the escrow would
/// refuse.
pub async fn prepare_job(ctx: &Ctx, req: &SubmitRequest) -> Result<(JobSpec, JobParams)> {
    let path = req.spec_path.clone();
    let file = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || JobFile::load(&path))
            .await
            .map_err(|e| anyhow!("reading the job file: {e}"))??
    };
    let token = ctx.chain.token();
    let decimals = ctx.chain.token_decimals(token).await;
    let now = ctx.chain.block_time().await?;
    let deadline = now.saturating_add(req.deadline_secs);
    check_create_job(&CreateJobTerms {
        token: Some(token),
        budget: req.budget,
        max_price_per_step: req.max_price_per_step,
        total_steps: file.total_steps,
        checkpoint_interval: file.checkpoint_interval,
        committee_size: req.committee_size,
        quorum: req.quorum,
        verifier_fee: req.verifier_fee,
        deadline,
        // the deadline is relative: only "0 seconds" can fail here, and it says so
        now: if req.deadline_secs == 0 { 0 } else { now },
        grace: req.grace_secs,
        available_verifiers: Some(ctx.chain.available_verifiers(ctx.chain.address()).await?),
        limits: Some(ctx.chain.escrow_limits().await?),
        decimals,
    })?;

    let (spec, blobs) = tokio::task::spawn_blocking(move || file.build(&path))
        .await
        .map_err(|e| anyhow!("preparing the job: {e}"))??;
    let params = JobParams {
        token,
        budget: req.budget,
        max_price_per_step: req.max_price_per_step,
        committee_size: req.committee_size,
        quorum: req.quorum,
        verifier_fee: req.verifier_fee,
        deadline,
        grace: req.grace_secs,
    };
    // The chain has the last word (balance, allowance, its clock): ask it before storing
    // anything. The chain client asks again right before it sends.
    ctx.chain
        .preflight_create_job(&ChainTx::CreateJob {
            token,
            budget: params.budget,
            max_price_per_step: params.max_price_per_step,
            total_steps: spec.total_steps,
            checkpoint_interval: spec.checkpoint_interval,
            spec_hash: spec.spec_hash(),
            committee_size: params.committee_size,
            quorum: params.quorum,
            verifier_fee: params.verifier_fee,
            deadline: params.deadline,
            grace: params.grace,
        })
        .await?;

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
    Ok((spec, params))
}

/// Sends one of the machines' transactions, through an RPC outage of about half a minute; a
/// failure goes back to them as `TxFailed`.
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
    match ctx
        .chain
        .submit_through_outage(&tx, &gpuchain_protocol::retry::CHAIN_OUTAGE)
        .await
    {
        Ok(outcome) => {
            emit(
                NodeEvent::TxMined {
                    call: outcome.call.to_string(),
                    tx_hash: outcome.hash.to_string(),
                    block: outcome.block_number,
                    gas_used: outcome.gas_used,
                },
                "transaction mined",
            );
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
    let follower = EventFollower::open(
        chain,
        FollowerConfig::new(0, crate::datadir::cursor_dir(data_dir)),
    )
    .await?;
    if follower.restarted_from_scratch() {
        emit(
            NodeEvent::CursorReset,
            "the chain cursor did not match this chain; reading the escrow's history from the start",
        );
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
            _ = shutdown.changed() => {
                // The last commit's write may be in flight; a stop that cuts it off only
                // makes the next start re-read that batch.
                let _ = follower.flush().await;
                return;
            }
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                emit(
                    NodeEvent::ChainPollFailed {
                        error: e.to_string(),
                    },
                    "cannot read escrow events; retrying",
                );
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
        if let Err(e) = follower.commit(&batch).await {
            emit(
                NodeEvent::CursorNotSaved {
                    error: e.to_string(),
                },
                "cannot save the chain cursor; events may be re-read after a restart",
            );
        }
    }
}

/// How often a provider re-reads its stake: staking and unbonding are not job events, and a
/// stake registered after the node started must not leave its offers refused for long.
const STAKE_POLL: Duration = Duration::from_secs(2);

/// Tells the provider machine its bonded stake whenever the chain's figure changes.
pub async fn watch_stake(
    chain: ChainClient,
    me: Address,
    events: mpsc::Sender<RoleEvent>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = None;
    loop {
        let read =
            async { Ok::<_, ChainError>((chain.stake_of(me).await?, chain.min_stake().await?)) };
        match read.await {
            Ok((stake, min_stake)) if last != Some((stake.bonded, min_stake)) => {
                last = Some((stake.bonded, min_stake));
                let input = Input::StakeChanged {
                    bonded: stake.bonded,
                    min_stake,
                };
                if events.send(RoleEvent::Input(input)).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => emit(
                NodeEvent::ChainPollFailed {
                    error: e.to_string(),
                },
                "cannot read this provider's stake; retrying",
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(STAKE_POLL) => {}
            _ = shutdown.changed() => return,
        }
    }
}
