//! The provider's trainer: one blocking thread per assigned epoch, started and stopped by
//! the provider machine. Each checkpoint goes into the blob store with the interval's anchor
//! states (`gpuchain_protocol::anchors`: at most three, blobs named by their state hash, so
//! verifiers fetch exactly what the announce committed to), then back to the machine as
//! `CheckpointReady` with every step's hash. Keeping anchors rather than every step bounds
//! the store to three states per interval whatever the model; a verifier replays from the
//! nearest anchor instead of from the step before its sample.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Result, anyhow, bail};
use gpuchain_protocol::anchors::anchor_steps;
use gpuchain_protocol::{Epoch, Hash, Input, JobId, JobSpec, Step};
use gpuchain_trainer::{Job, Trainer, TrainerOptions, cheat};

use super::ctx::Ctx;
use super::jobs::{fetch_bytes, from_iroh};
use crate::cli::Fault;
use crate::events::NodeEvent;

#[derive(Debug, Clone)]
pub struct Start {
    pub job_id: JobId,
    pub epoch: Epoch,
    pub spec_hash: Hash,
    pub from_step: Step,
    pub from_checkpoint: Hash,
    pub until_step: Step,
    pub checkpoint_interval: Step,
    pub fault: Option<Fault>,
}

/// What the runtime and one epoch's training thread share.
#[derive(Default)]
pub struct Control {
    /// Set when the epoch is over: the thread stops before its next step.
    cancel: AtomicBool,
    /// The highest step of this epoch that the chain decided (accepted or rejected). The
    /// interval states up to it can never be spot-checked again, so the thread lets them go;
    /// until then it keeps them however long the committee takes (a verifier slowed by a dead
    /// peer's fetches must still find them).
    decided: AtomicU64,
}

/// The running trainers, by job.
#[derive(Default)]
pub struct Trainers {
    running: HashMap<JobId, (Epoch, Arc<Control>)>,
}

fn states_prefix(job_id: JobId, epoch: Epoch) -> String {
    format!("gpuchain/states/{job_id}/{epoch}/")
}

impl Trainers {
    pub fn start(&mut self, ctx: Ctx, start: Start) {
        if let Some((_, old)) = self.running.remove(&start.job_id) {
            old.cancel.store(true, Ordering::Relaxed);
        }
        let control = Arc::new(Control::default());
        self.running
            .insert(start.job_id, (start.epoch, control.clone()));
        tokio::spawn(async move {
            let (job_id, epoch) = (start.job_id, start.epoch);
            if let Err(e) = run(ctx.clone(), start, control).await {
                let reason = format!("{e:#}");
                crate::events::emit(
                    NodeEvent::TrainingFailed {
                        job_id: job_id.to_string(),
                        epoch,
                        error: reason.to_string(),
                    },
                    "training failed",
                );
                ctx.input(Input::TrainingFailed {
                    job_id,
                    epoch,
                    reason,
                })
                .await;
            }
        });
    }

    /// The chain decided the checkpoint at `step` of `job_id`'s `epoch`.
    pub fn decided(&self, job_id: JobId, epoch: Epoch, step: Step) {
        if let Some((e, control)) = self.running.get(&job_id)
            && *e == epoch
        {
            control.decided.fetch_max(step, Ordering::Relaxed);
        }
    }

    pub fn stop(&mut self, ctx: &Ctx, job_id: JobId, epoch: Epoch) {
        if self.running.get(&job_id).is_some_and(|(e, _)| *e == epoch)
            && let Some((_, control)) = self.running.remove(&job_id)
        {
            control.cancel.store(true, Ordering::Relaxed);
        }
        // A fenced epoch's states can never be checked again.
        let blobs = ctx.handle.blobs().clone();
        tokio::spawn(async move {
            let _ = blobs.untag_prefix(&states_prefix(job_id, epoch)).await;
        });
    }

    /// Whether any epoch is training here (its heartbeats report the host's starvation).
    pub fn any(&self) -> bool {
        !self.running.is_empty()
    }

    pub fn stop_all(&mut self) {
        for (_, (_, control)) in self.running.drain() {
            control.cancel.store(true, Ordering::Relaxed);
        }
    }
}

async fn run(ctx: Ctx, start: Start, control: Arc<Control>) -> Result<()> {
    let spec = ctx.library.spec(start.spec_hash).ok_or_else(|| {
        anyhow!(
            "assigned to job {} but its spec {} was never offered to this node",
            start.job_id,
            start.spec_hash
        )
    })?;
    let job = ctx
        .library
        .prepare(&spec, &ctx.handle, &ctx.data_dir)
        .await?;
    // The escrow names the start: the last accepted checkpoint (fetched from whoever kept
    // it: the client and the verifiers do), or the spec itself before any acceptance.
    let resume = if start.from_checkpoint == start.spec_hash {
        None
    } else {
        Some(fetch_bytes(&ctx.handle, start.from_checkpoint).await?)
    };
    crate::events::emit(
        NodeEvent::TrainingStarted {
            job_id: start.job_id.to_string(),
            epoch: start.epoch,
            from_step: start.from_step,
            from_checkpoint: start.from_checkpoint.to_string(),
            fault: start.fault.map(|f| format!("{f:?}")),
        },
        "training started",
    );
    let rt = tokio::runtime::Handle::current();
    crate::compute::run("training", move || {
        train_loop(&rt, &ctx, &start, &spec, job, resume, &control)
    })
    .await?
}

fn train_loop(
    rt: &tokio::runtime::Handle,
    ctx: &Ctx,
    s: &Start,
    spec: &JobSpec,
    job: Arc<Job>,
    resume: Option<Vec<u8>>,
    control: &Control,
) -> Result<()> {
    let cancel = &control.cancel;
    // The plan comes from the memory this provider offers; a resume may split the batch
    // differently from the checkpoint's producer (only the optimizer steps carry over).
    let opts = TrainerOptions {
        keep_states: true,
        memory: Some(ctx.memory_bytes),
        ..TrainerOptions::default()
    };
    let mut trainer = match &resume {
        None => Trainer::new(job.clone(), s.epoch, opts)?,
        Some(bytes) => Trainer::resume(job.clone(), bytes, s.epoch, opts)?,
    };
    keep_anchors(&mut trainer, spec);
    let plan = trainer.plan();
    crate::events::emit(
        NodeEvent::TrainingPlan {
            job_id: s.job_id.to_string(),
            epoch: s.epoch,
            effective_batch: spec.effective_batch.into(),
            micro_batch: plan.micro_batch as u64,
            accumulation: plan.accumulation as u64,
            memory_bytes: ctx.memory_bytes,
            bytes_per_example: plan.bytes_per_example,
        },
        &format!(
            "training plan: {} micro-batches of {} a step, within {} MiB",
            plan.accumulation,
            plan.micro_batch,
            ctx.memory_bytes >> 20
        ),
    );
    if trainer.step_count() != s.from_step {
        bail!(
            "the start checkpoint is at step {} but the escrow assigned from step {}",
            trainer.step_count(),
            s.from_step
        );
    }
    if s.fault == Some(Fault::WrongOrder) {
        cheat::wrong_order(&mut trainer, spec.seed.wrapping_add(1));
    }
    // What a stale provider resubmits: the interval's starting checkpoint (kept also where
    // the testnet's controls may arm a stale checkpoint).
    let keep_start = s.fault == Some(Fault::Stale) || ctx.cheat.is_some();
    let mut interval_start = if keep_start {
        Some(trainer.checkpoint()?.to_bytes()?)
    } else {
        None
    };
    let blobs = ctx.handle.blobs().clone();
    let mut first = true;
    let mut hang_at = None;
    // Checkpoint steps whose interval states are still kept, oldest first.
    let mut kept: std::collections::VecDeque<Step> = std::collections::VecDeque::new();
    while trainer.step_count() < s.until_step {
        if cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        if hang_at == Some(trainer.step_count())
            || ctx.cheat.as_ref().is_some_and(|c| c.take_hang())
        {
            hang(s, trainer.step_count(), cancel);
            return Ok(());
        }
        let report = trainer.step()?;
        if first {
            first = false;
            crate::events::emit(
                NodeEvent::FirstStep {
                    job_id: s.job_id.to_string(),
                    epoch: s.epoch,
                    step: report.step,
                    loss: report.loss,
                },
                "training: first step of the epoch done",
            );
        }
        rt.block_on(ctx.input(Input::StepDone {
            job_id: s.job_id,
            epoch: s.epoch,
            step: report.step,
            loss: report.loss,
        }));
        if !spec.is_checkpoint_step(report.step) {
            continue;
        }
        if cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        let honest = trainer.checkpoint()?.to_bytes()?;
        let armed = ctx.cheat.as_ref().and_then(|c| c.take_checkpoint_cheat());
        if let Some(f) = armed {
            crate::events::emit(
                NodeEvent::FaultEnabled {
                    fault: format!("{f:?} (this checkpoint, at step {})", report.step),
                },
                "TESTING: this checkpoint cheats, as the testnet's controls asked",
            );
        }
        let bytes = match armed.or(s.fault) {
            Some(Fault::Junk) => cheat::junk(&job, &honest, spec.seed ^ report.step ^ 0x6a75_6e6b)?,
            Some(Fault::Nan) => cheat::nan(&job, &honest)?,
            Some(Fault::Stale) => match &interval_start {
                Some(parent) => cheat::stale(&job, parent, report.step)?,
                None => honest,
            },
            Some(
                Fault::WrongOrder
                | Fault::Hang
                | Fault::CrashMidCheckpoint
                | Fault::RejectAll
                | Fault::WithholdPay,
            )
            | None => honest,
        };
        let state_hashes: Vec<Hash> = trainer
            .interval_hashes()
            .iter()
            .map(|h| Hash::from(h.0))
            .collect();
        let preimages = trainer.interval_preimages()?;
        let step = report.step;
        let prefix = states_prefix(s.job_id, s.epoch);
        rt.block_on(async {
            for (h, pre) in preimages {
                blobs
                    .add_bytes(pre, &format!("{prefix}{step}/{h}"), false)
                    .await?;
            }
            anyhow::Ok(())
        })?;
        let tag = format!("gpuchain/checkpoint/{}/{}/{step}", s.job_id, s.epoch);
        if s.fault == Some(Fault::CrashMidCheckpoint) {
            crash_mid_write(s, step, rt, &blobs, bytes, tag);
        }
        let hash = rt.block_on(blobs.add_bytes(bytes.clone(), &tag, true))?;
        let checkpoint_hash = from_iroh(hash);
        rt.block_on(ctx.input(Input::CheckpointReady {
            job_id: s.job_id,
            epoch: s.epoch,
            step,
            checkpoint_hash,
            state_hashes,
        }));
        trainer.start_interval(Some(checkpoint_hash.0))?;
        keep_anchors(&mut trainer, spec);
        if s.fault == Some(Fault::Hang) && hang_at.is_none() {
            hang_at = Some(step + crate::cli::HANG_AFTER_CHECKPOINT);
        }
        if keep_start {
            interval_start = Some(bytes);
        }
        kept.push_back(step);
        let decided = control.decided.load(Ordering::Relaxed);
        while kept.front().is_some_and(|k| *k <= decided) {
            if let Some(old) = kept.pop_front() {
                // Not waited for: untagging commits the store's database, and on a busy disk
                // that sync took seconds, with the step clock already running again after the
                // announce and no CPU wait to show for it (the client called an honest
                // provider stalled).
                let blobs = blobs.clone();
                let old_states = format!("{prefix}{old}/");
                rt.spawn(async move {
                    let _ = blobs.untag_prefix(&old_states).await;
                });
            }
        }
    }
    crate::events::emit(
        NodeEvent::TrainingDone {
            job_id: s.job_id.to_string(),
            epoch: s.epoch,
            step: trainer.step_count(),
        },
        "training reached the job's last step",
    );
    Ok(())
}

/// Keeps only the anchors of the interval the trainer is at the start of: the protocol's rule
/// over `start ..= the next checkpoint step`, the very steps the announce will name. The
/// first anchor, the interval's start, is not kept: it is the previous checkpoint's state
/// (or the spec's initial state), which verifiers replay from without a state blob. So the
/// store holds the checkpoint and at most two more states an interval.
fn keep_anchors(trainer: &mut Trainer, spec: &JobSpec) {
    let start = trainer.step_count();
    // Past the job's last step there is no interval, and nothing will be kept.
    let anchors = spec
        .next_checkpoint_step(start)
        .map(|end| anchor_steps(start, end))
        .unwrap_or_default();
    trainer.keep_only(anchors.get(1..).unwrap_or_default());
}

/// `--fault crash-mid-checkpoint`: starts storing the checkpoint, then aborts the process a
/// moment later, while the store is writing it.
fn crash_mid_write(
    s: &Start,
    step: Step,
    rt: &tokio::runtime::Handle,
    blobs: &crate::blobs::BlobNode,
    bytes: Vec<u8>,
    tag: String,
) -> ! {
    crate::events::emit(
        NodeEvent::FaultEnabled {
            fault: format!(
                "CrashMidCheckpoint (job {} epoch {}: aborting while step {step}'s checkpoint is written)",
                s.job_id, s.epoch
            ),
        },
        "TESTING: the process aborts while it writes a checkpoint",
    );
    let blobs = blobs.clone();
    rt.spawn(async move { blobs.add_bytes(bytes, &tag, true).await });
    std::thread::sleep(std::time::Duration::from_millis(2));
    std::process::abort()
}

/// `--fault hang` (or a hang armed from the API): the training thread stops making progress
/// at `step` (a hung GPU) until the epoch is cancelled; the roles runtime keeps heartbeating
/// meanwhile.
fn hang(s: &Start, step: Step, cancel: &AtomicBool) {
    crate::events::emit(
        NodeEvent::FaultEnabled {
            fault: format!(
                "Hang (job {} epoch {}: training stops after step {step}, heartbeats go on)",
                s.job_id, s.epoch
            ),
        },
        "TESTING: training hangs here while the node keeps heartbeating",
    );
    while !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
