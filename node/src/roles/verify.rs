//! The verifier's runners and the blob fetches every role asks for. A checkpoint must be the
//! state its announce committed to (its state hash is the announce's last one), pass the
//! quality test against the previous accepted checkpoint, and survive the re-execution of
//! the seeded spot-check steps, each replayed from the nearest anchor state (fetched by its
//! committed hash) with every replayed state checked against its committed hash.

use anyhow::{Result, anyhow};
use gpuchain_protocol::io::{QualityReport, SpotStep};
use gpuchain_protocol::{Address, Epoch, Hash, Input, JobId, Step};
use gpuchain_trainer::verify::quality::Reason;
use gpuchain_trainer::{Checkpoint, StateHash, quality_test_cached, spot_check_from_anchor};

use super::ctx::Ctx;
use super::jobs::{fetch_bytes, to_iroh};
use crate::events::NodeEvent;

/// `Output::FetchBlob`: from the hinted address's peers first, then anyone; always answered.
pub async fn fetch_for_machine(ctx: Ctx, hash: Hash, from: Option<Address>) {
    let preferred = match from {
        Some(a) => ctx.handle.peers_of(a).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let started = std::time::Instant::now();
    // One try per output: the machine that asked decides whether and when to try again.
    let ok = match ctx.handle.fetch_hash(to_iroh(hash), preferred).await {
        Ok(_) => {
            crate::events::emit(
                NodeEvent::BlobFetched {
                    hash: hash.to_string(),
                    elapsed_ms: started.elapsed().as_millis() as u64,
                },
                "blob fetched",
            );
            true
        }
        Err(e) => {
            crate::events::emit(
                NodeEvent::BlobFetchFailed {
                    hash: hash.to_string(),
                    error: format!("{e:#}"),
                },
                "blob fetch failed",
            );
            false
        }
    };
    ctx.input(Input::BlobFetched { hash, ok }).await;
}

/// What both runners start from: the job's spec, the job ready to run, the candidate's bytes.
async fn job_and_candidate(
    ctx: &Ctx,
    job_id: JobId,
    spec_hash: Hash,
    checkpoint: Hash,
) -> Result<(
    gpuchain_protocol::JobSpec,
    std::sync::Arc<gpuchain_trainer::Job>,
    Vec<u8>,
)> {
    let spec = ctx
        .library
        .spec(spec_hash)
        .ok_or_else(|| anyhow!("job {job_id}'s spec {spec_hash} was never offered to this node"))?;
    let job = ctx
        .library
        .prepare(&spec, &ctx.handle, &ctx.data_dir)
        .await?;
    let candidate = fetch_bytes(&ctx.handle, checkpoint).await?;
    Ok((spec, job, candidate))
}

pub struct QualityJob {
    pub job_id: JobId,
    pub spec_hash: Hash,
    pub epoch: Epoch,
    pub step: Step,
    pub checkpoint_hash: Hash,
    pub baseline: Hash,
    /// The announce's last state hash.
    pub committed_state: Hash,
    /// TESTING (`--fault reject-all`): vote reject whatever the test says.
    pub byzantine: bool,
}

pub async fn quality(ctx: Ctx, q: QualityJob) {
    let mut report = match run_quality(&ctx, &q).await {
        Ok(r) => r,
        Err(e) => {
            crate::events::emit(
                NodeEvent::QualityError {
                    job_id: q.job_id.to_string(),
                    step: q.step,
                    error: format!("{e:#}"),
                },
                "quality test could not run; voting reject",
            );
            QualityReport {
                pass: false,
                accuracy: f64::NAN,
                loss: f64::NAN,
            }
        }
    };
    if q.byzantine {
        report.pass = false;
    }
    ctx.input(Input::QualityResult {
        job_id: q.job_id,
        epoch: q.epoch,
        step: q.step,
        checkpoint_hash: q.checkpoint_hash,
        report,
    })
    .await;
}

async fn run_quality(ctx: &Ctx, q: &QualityJob) -> Result<QualityReport> {
    let (spec, job, candidate) =
        job_and_candidate(ctx, q.job_id, q.spec_hash, q.checkpoint_hash).await?;
    let previous = if q.baseline == spec.spec_hash() {
        None
    } else {
        Some(fetch_bytes(&ctx.handle, q.baseline).await?)
    };
    let (step, committed, thresholds) = (q.step, q.committed_state, spec.quality.clone());
    let spec_hash = spec.spec_hash();
    let previous_eval = previous
        .as_ref()
        .and_then(|_| ctx.library.eval(spec_hash, q.baseline));
    let library = ctx.library.clone();
    let checkpoint_hash = q.checkpoint_hash;
    let (report, detail, prev_acc) = crate::compute::run("quality-test", move || -> Result<_> {
        let fail = |d: String| {
            (
                QualityReport {
                    pass: false,
                    accuracy: f64::NAN,
                    loss: f64::NAN,
                },
                d,
                None,
            )
        };
        let ckpt = match Checkpoint::from_bytes(&candidate, &job.device) {
            Ok(c) => c,
            Err(e) => return Ok(fail(format!("unreadable checkpoint: {e}"))),
        };
        // Scored even when it fails the commitment check, so the refusal can say how bad
        // the substitute was.
        let state = ckpt.state.hash()?;
        let mut refusals: Vec<String> = Vec::new();
        if committed != Hash::from(state.0) {
            refusals.push("the checkpoint is not the state its announce committed to".into());
        }
        if ckpt.meta.step != step {
            refusals.push(format!(
                "the checkpoint is of step {}, announced as {step}",
                ckpt.meta.step
            ));
        }
        let v = quality_test_cached(&job, &candidate, previous.as_deref(), previous_eval)?;
        if let Some(c) = v.candidate {
            library.remember_eval(spec_hash, checkpoint_hash, c);
        }
        // The trainer says what the checkpoint is (readable, finite, built on its parent,
        // not stale) and measures it; the thresholds are the protocol's one rule, the same
        // the simulator's verifiers apply.
        refusals.extend(
            v.reasons
                .iter()
                .filter(|r| {
                    !matches!(
                        r,
                        Reason::BelowMinAccuracy { .. }
                            | Reason::AboveMaxLoss { .. }
                            | Reason::Regressed { .. }
                    )
                })
                .map(|r| format!("{r:?}")),
        );
        let cand = v.candidate.as_ref();
        match cand {
            Some(c) => refusals.extend(
                thresholds
                    .failures(
                        step,
                        c.accuracy,
                        c.loss,
                        v.previous.as_ref().map(|p| p.accuracy),
                    )
                    .iter()
                    .map(|f| format!("{f:?}")),
            ),
            None if refusals.is_empty() => refusals.push("the checkpoint was not scored".into()),
            None => {}
        }
        Ok((
            QualityReport {
                pass: refusals.is_empty(),
                accuracy: cand.map_or(f64::NAN, |e| e.accuracy),
                loss: cand.map_or(f64::NAN, |e| e.loss),
            },
            refusals.join("; "),
            v.previous.as_ref().map(|e| e.accuracy),
        ))
    })
    .await??;
    crate::events::emit(
        NodeEvent::QualityTest {
            job_id: q.job_id.to_string(),
            epoch: q.epoch,
            step: q.step,
            checkpoint: q.checkpoint_hash.to_string(),
            pass: report.pass,
            accuracy: report.accuracy,
            loss: report.loss,
            previous_accuracy: prev_acc,
            reasons: detail.to_string(),
        },
        "quality test",
    );
    Ok(report)
}

/// The parent state's preimage: from the previous checkpoint, or the spec's initial state
/// when the interval starts the job (`parent` is then the spec hash, the escrow's convention).
async fn parent_preimage(
    ctx: &Ctx,
    spec: &gpuchain_protocol::JobSpec,
    job: &std::sync::Arc<gpuchain_trainer::Job>,
    parent: Hash,
) -> Result<Vec<u8>> {
    let bytes = if parent == spec.spec_hash() {
        None
    } else {
        Some(fetch_bytes(&ctx.handle, parent).await?)
    };
    let job = job.clone();
    crate::compute::run("spot-check", move || -> Result<Vec<u8>> {
        let state = match bytes {
            Some(b) => Checkpoint::from_bytes(&b, &job.device)?.state,
            None => {
                let opts = gpuchain_trainer::TrainerOptions {
                    keep_states: false,
                    ..Default::default()
                };
                gpuchain_trainer::Trainer::new(job, 0, opts)?.snapshot()?
            }
        };
        Ok(state.preimage()?)
    })
    .await?
}

pub struct SpotJob {
    pub job_id: JobId,
    pub spec_hash: Hash,
    pub epoch: Epoch,
    pub step: Step,
    pub checkpoint_hash: Hash,
    pub provider: Address,
    pub parent_step: Step,
    pub parent_checkpoint: Hash,
    pub steps: Vec<SpotStep>,
}

pub async fn spot(ctx: Ctx, s: SpotJob) {
    let pass = match run_spot(&ctx, &s).await {
        Ok(p) => p,
        Err(e) => {
            crate::events::emit(
                NodeEvent::SpotCheckError {
                    job_id: s.job_id.to_string(),
                    step: s.step,
                    error: format!("{e:#}"),
                },
                "spot check could not run; voting reject",
            );
            false
        }
    };
    ctx.input(Input::SpotCheckResult {
        job_id: s.job_id,
        epoch: s.epoch,
        step: s.step,
        checkpoint_hash: s.checkpoint_hash,
        pass,
    })
    .await;
}

/// Reports a failed spot check (at the sampled `checked_step`, when it got that far); the
/// check's verdict, `false`.
fn refused(s: &SpotJob, checked_step: Option<u64>, detail: String) -> bool {
    crate::events::emit(
        NodeEvent::SpotCheck {
            job_id: s.job_id.to_string(),
            step: s.step,
            pass: false,
            checked_step,
            checked: None,
            detail,
        },
        "spot check",
    );
    false
}

async fn run_spot(ctx: &Ctx, s: &SpotJob) -> Result<bool> {
    let (spec, job, candidate) =
        job_and_candidate(ctx, s.job_id, s.spec_hash, s.checkpoint_hash).await?;
    let dev = job.device.clone();
    let meta = crate::compute::run("spot-check", move || {
        Checkpoint::from_bytes(&candidate, &dev)
    })
    .await?;
    let meta = match meta {
        Ok(c) => c.meta,
        Err(e) => return Ok(refused(s, None, format!("unreadable checkpoint: {e}"))),
    };
    let peers = ctx.handle.peers_of(s.provider).await.unwrap_or_default();
    for st in &s.steps {
        // Only the anchor is fetched: the states after it are replayed, each checked against
        // its committed hash. An anchor the provider cannot serve fails the check, so a
        // provider that did not keep the states its announce promised is not paid.
        let Some(anchor) = st.anchor() else {
            return Ok(false);
        };
        let bytes = if st.anchor_step == s.parent_step {
            // The parent state needs no blob: the previous checkpoint holds it. A parent the
            // provider did not build on fails the replay's first hash comparison.
            parent_preimage(ctx, &spec, &job, s.parent_checkpoint).await?
        } else {
            if let Err(e) = ctx.handle.fetch_hash(to_iroh(anchor), peers.clone()).await {
                let detail = format!("anchor state of step {} not served: {e:#}", st.anchor_step);
                return Ok(refused(s, Some(st.step), detail));
            }
            ctx.handle.blobs().read(to_iroh(anchor)).await?
        };
        let committed: Vec<StateHash> = st.hashes.iter().map(|h| StateHash(h.0)).collect();
        let (job, meta) = (job.clone(), meta.clone());
        let r = crate::compute::run("spot-check", move || {
            spot_check_from_anchor(&job, &meta, &bytes, &committed)
        })
        .await??;
        if !r.matched {
            return Ok(refused(s, Some(st.step), r.detail.to_string()));
        }
    }
    crate::events::emit(
        NodeEvent::SpotCheck {
            job_id: s.job_id.to_string(),
            step: s.step,
            checked: Some(s.steps.len()),
            checked_step: None,
            detail: String::new(),
            pass: true,
        },
        "spot check",
    );
    Ok(true)
}
