//! The training loop: one optimizer step at a time, driven by the caller, recording the
//! state hash after every step so the interval's states can be committed and served.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use candle_core::Tensor;

use crate::checkpoint::{Checkpoint, CheckpointMeta, file_hash};
use crate::data::DataOrder;
use crate::error::{Result, TrainerError};
use crate::job::Job;
use crate::model::Model;
use crate::optim::{AdamState, learning_rate};
use crate::state::{StateHash, TrainState};
use crate::verify::quality::{EvalReport, evaluate};

/// Provider-side choices that do not change what a job computes (up to float rounding when
/// the micro-batch differs).
#[derive(Clone, Debug)]
pub struct TrainerOptions {
    /// Bytes available for activations; the largest micro-batch that fits is chosen.
    pub memory_budget: Option<u64>,
    /// Bytes this provider offers for the whole training: the model's state comes out of it
    /// first and the rest holds activations ([`plan_for_memory`]). Give this or
    /// `memory_budget`, not both.
    pub memory: Option<u64>,
    /// Forces a micro-batch (a divisor of the effective batch): exact replays use the
    /// producer's.
    pub micro_batch: Option<usize>,
    /// Keep a copy of the current interval's states (every step's, or only the anchors
    /// once [`Trainer::keep_only`] names them), to serve them for spot checks.
    pub keep_states: bool,
}

impl Default for TrainerOptions {
    fn default() -> Self {
        Self {
            memory_budget: None,
            memory: None,
            micro_batch: None,
            keep_states: true,
        }
    }
}

/// How an effective batch is split: `accumulation` micro-batches of `micro_batch` examples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MicroBatchPlan {
    pub micro_batch: usize,
    pub accumulation: usize,
    pub bytes_per_example: u64,
}

/// The largest divisor of `effective` whose activations fit in `budget` bytes.
pub fn plan_micro_batch(
    effective: usize,
    bytes_per_example: u64,
    budget: Option<u64>,
) -> Result<MicroBatchPlan> {
    let fits = |d: usize| budget.is_none_or(|b| d as u64 * bytes_per_example <= b);
    let micro = (1..=effective)
        .rev()
        .find(|d| effective.is_multiple_of(*d) && fits(*d))
        .ok_or_else(|| TrainerError::Spec {
            field: "memory_budget",
            reason: format!(
                "{} bytes cannot hold one example (≈ {bytes_per_example} bytes of activations)",
                budget.unwrap_or(0)
            ),
        })?;
    Ok(MicroBatchPlan {
        micro_batch: micro,
        accumulation: effective / micro,
        bytes_per_example,
    })
}

/// What a model needs in memory to train: its state whatever the micro-batch (weights, their
/// gradients and Adam's two moments: four copies of the weights), then activations per
/// example ([`Model::bytes_per_example`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    pub state_bytes: u64,
    pub bytes_per_example: u64,
}

impl MemoryNeed {
    pub fn of(model: &dyn Model) -> Self {
        let weights: u64 = model
            .params()
            .values()
            .map(|v| (v.elem_count() * v.dtype().size_in_bytes()) as u64)
            .sum();
        Self {
            state_bytes: 4 * weights,
            bytes_per_example: model.bytes_per_example(),
        }
    }

    /// The least memory that trains at all: the state and one example's activations.
    pub fn minimum(&self) -> u64 {
        self.state_bytes.saturating_add(self.bytes_per_example)
    }
}

/// Bytes in MiB with two decimals, for messages to operators.
fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// The plan of a provider that offers `memory` bytes for a job of effective batch
/// `effective`: the state comes first, the largest micro-batch (a divisor of `effective`)
/// whose activations fit in the rest is chosen. An error, naming the figures, when not even
/// one example fits: such a provider must not bid.
pub fn plan_for_memory(effective: usize, need: MemoryNeed, memory: u64) -> Result<MicroBatchPlan> {
    if memory < need.minimum() {
        return Err(TrainerError::DoesNotFit {
            memory: mib(memory),
            state: mib(need.state_bytes),
            per_example: mib(need.bytes_per_example),
            minimum: mib(need.minimum()),
        });
    }
    plan_micro_batch(
        effective,
        need.bytes_per_example,
        Some(memory - need.state_bytes),
    )
}

/// What one step did; the node heartbeats `step` and `loss`.
#[derive(Clone, Debug)]
pub struct StepReport {
    /// Steps completed, this one included.
    pub step: u64,
    pub loss: f32,
    pub lr: f64,
    pub state_hash: StateHash,
    pub elapsed: Duration,
}

/// Why [`Trainer::train`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Reached,
    Cancelled,
    CallbackBreak,
}

pub struct Trainer {
    job: Arc<Job>,
    model: Box<dyn Model>,
    adam: AdamState,
    order: DataOrder,
    step: u64,
    epoch: u64,
    parent: Option<[u8; 32]>,
    plan: MicroBatchPlan,
    keep_states: bool,
    interval_start: u64,
    hashes: Vec<StateHash>,
    /// The kept states of the interval by step: all of them, or only the anchors once
    /// [`Trainer::keep_only`] named them.
    states: BTreeMap<u64, TrainState>,
    /// The steps of this interval whose states are kept; None keeps every step's.
    anchors: Option<Vec<u64>>,
}

impl Trainer {
    /// A job's first interval: weights from the job seed, step 0, epoch `epoch`.
    pub fn new(job: Arc<Job>, epoch: u64, opts: TrainerOptions) -> Result<Self> {
        let model = job.build_model(job.spec.seed)?;
        let adam = AdamState::zeros(model.params())?;
        Self::assemble(job, model, adam, 0, epoch, None, opts)
    }

    /// Continues from a checkpoint's bytes (refused if it is not this job's); its BLAKE3
    /// becomes the parent of the next checkpoint.
    pub fn resume(
        job: Arc<Job>,
        checkpoint: &[u8],
        epoch: u64,
        opts: TrainerOptions,
    ) -> Result<Self> {
        let ckpt = Checkpoint::from_bytes(checkpoint, &job.device)?;
        Self::from_checkpoint(job, &ckpt, Some(file_hash(checkpoint)), epoch, opts)
    }

    pub fn from_checkpoint(
        job: Arc<Job>,
        ckpt: &Checkpoint,
        parent: Option<[u8; 32]>,
        epoch: u64,
        opts: TrainerOptions,
    ) -> Result<Self> {
        let model = job.build_model(job.spec.seed)?;
        let shapes = model
            .params()
            .iter()
            .map(|(k, v)| (k.clone(), v.dims().to_vec()))
            .collect();
        ckpt.check_job(&job.spec, &shapes)?;
        for (name, var) in model.params() {
            // check_job guarantees presence and shape.
            var.set(&ckpt.state.params[name])?;
        }
        let adam = AdamState {
            m: ckpt.state.adam_m.clone(),
            v: ckpt.state.adam_v.clone(),
        };
        Self::assemble(job, model, adam, ckpt.meta.step, epoch, parent, opts)
    }

    fn assemble(
        job: Arc<Job>,
        model: Box<dyn Model>,
        adam: AdamState,
        step: u64,
        epoch: u64,
        parent: Option<[u8; 32]>,
        opts: TrainerOptions,
    ) -> Result<Self> {
        let eff = job.spec.effective_batch;
        let plan = match opts.micro_batch {
            Some(m) if m == 0 || !eff.is_multiple_of(m) => {
                return Err(TrainerError::Spec {
                    field: "micro_batch",
                    reason: format!("{m} does not divide the effective batch {eff}"),
                });
            }
            Some(m) => MicroBatchPlan {
                micro_batch: m,
                accumulation: eff / m,
                bytes_per_example: model.bytes_per_example(),
            },
            None => match (opts.memory, opts.memory_budget) {
                (Some(_), Some(_)) => {
                    return Err(TrainerError::Spec {
                        field: "memory",
                        reason: "give the memory offered or the activation budget, not both".into(),
                    });
                }
                (Some(m), None) => plan_for_memory(eff, MemoryNeed::of(model.as_ref()), m)?,
                (None, budget) => plan_micro_batch(eff, model.bytes_per_example(), budget)?,
            },
        };
        let order = DataOrder::new(job.spec.seed, job.train.len());
        let mut t = Self {
            job,
            model,
            adam,
            order,
            step,
            epoch,
            parent,
            plan,
            keep_states: opts.keep_states,
            interval_start: step,
            hashes: Vec::new(),
            states: BTreeMap::new(),
            anchors: None,
        };
        t.record()?;
        Ok(t)
    }

    pub fn job(&self) -> &Arc<Job> {
        &self.job
    }
    pub fn model(&self) -> &dyn Model {
        self.model.as_ref()
    }
    /// Steps completed.
    pub fn step_count(&self) -> u64 {
        self.step
    }
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    pub fn plan(&self) -> MicroBatchPlan {
        self.plan
    }
    pub fn cursor(&self) -> u64 {
        self.step * self.job.spec.effective_batch as u64
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> Result<TrainState> {
        let mut params = BTreeMap::new();
        for (k, v) in self.model.params() {
            params.insert(k.clone(), v.as_tensor().copy()?.detach());
        }
        Ok(TrainState {
            step: self.step,
            cursor: self.cursor(),
            params,
            adam_m: self.adam.m.clone(),
            adam_v: self.adam.v.clone(),
        })
    }

    pub fn state_hash(&self) -> Result<StateHash> {
        self.snapshot()?.hash()
    }

    fn record(&mut self) -> Result<StateHash> {
        let s = self.snapshot()?;
        let h = s.hash()?;
        self.hashes.push(h);
        let wanted = self
            .anchors
            .as_ref()
            .is_none_or(|a| a.binary_search(&s.step).is_ok());
        if self.keep_states && wanted {
            self.states.insert(s.step, s);
        }
        Ok(h)
    }

    /// The state hashes since the interval began: index 0 is the interval's starting state
    /// (the parent checkpoint's), index k the state after k more steps.
    pub fn interval_hashes(&self) -> &[StateHash] {
        &self.hashes
    }
    pub fn interval_start(&self) -> u64 {
        self.interval_start
    }

    /// Starts a new interval at the current state, e.g. after announcing a checkpoint whose
    /// hash is `parent`. It keeps every step's state (with `keep_states`) until
    /// [`Trainer::keep_only`] names the interval's anchors.
    pub fn start_interval(&mut self, parent: Option<[u8; 32]>) -> Result<()> {
        self.parent = parent;
        self.interval_start = self.step;
        self.hashes.clear();
        self.states.clear();
        self.anchors = None;
        self.record()?;
        Ok(())
    }

    /// Keeps only the states at `anchors` for the rest of this interval (and lets go of the
    /// others already kept): the anchors the protocol's rule names for the interval
    /// (`gpuchain_protocol::anchors::anchor_steps`), so a provider's memory and blob store
    /// hold a bounded number of states, not one per step. The trainer does not decide them:
    /// its caller knows where the interval ends.
    pub fn keep_only(&mut self, anchors: &[u64]) {
        let mut a = anchors.to_vec();
        a.sort_unstable();
        a.dedup();
        self.states.retain(|step, _| a.binary_search(step).is_ok());
        self.anchors = Some(a);
    }

    /// The steps whose states are kept now, ascending.
    pub fn kept_steps(&self) -> Vec<u64> {
        self.states.keys().copied().collect()
    }

    /// The recorded state at `step` as checkpoint bytes, for a verifier's spot check. The
    /// current state is served too: it is the checkpoint the interval ends in, which the
    /// provider stores anyway (a tolerance-mode replay ends a segment there).
    pub fn serve_state(&self, step: u64) -> Result<Vec<u8>> {
        if step == self.step && !self.states.contains_key(&step) {
            self.require_states()?;
            return self.checkpoint()?.to_bytes();
        }
        let state = self.recorded(step)?.clone();
        self.checkpoint_of(state)?.to_bytes()
    }

    /// The recorded state at `step` as its preimage ([`TrainState::preimage`]): a blob whose
    /// BLAKE3 is the committed state hash, so a verifier can fetch it by that hash.
    pub fn state_preimage(&self, step: u64) -> Result<Vec<u8>> {
        self.recorded(step)?.preimage()
    }

    /// Every kept state of the current interval as (state hash, preimage), in step order from
    /// the interval's start (only the anchors after [`Trainer::keep_only`]): what a provider
    /// publishes as blobs alongside its announce.
    pub fn interval_preimages(&self) -> Result<Vec<(StateHash, Vec<u8>)>> {
        self.require_states()?;
        self.states
            .values()
            .map(|s| {
                let bytes = s.preimage()?;
                Ok((StateHash::of_preimage(&bytes), bytes))
            })
            .collect()
    }

    fn require_states(&self) -> Result<()> {
        if self.keep_states {
            Ok(())
        } else {
            Err(TrainerError::ckpt(
                "this trainer does not keep per-step states (keep_states is off)",
            ))
        }
    }

    fn recorded(&self, step: u64) -> Result<&TrainState> {
        self.require_states()?;
        self.states.get(&step).ok_or_else(|| {
            if step < self.interval_start || step > self.step {
                TrainerError::ckpt(format!(
                    "step {step} is outside the recorded interval {}..={}",
                    self.interval_start, self.step
                ))
            } else {
                TrainerError::ckpt(format!(
                    "step {step}'s state was not kept (kept: {:?})",
                    self.kept_steps()
                ))
            }
        })
    }

    fn checkpoint_of(&self, state: TrainState) -> Result<Checkpoint> {
        let spec = &self.job.spec;
        let meta = CheckpointMeta {
            job_id: spec.job_id.clone(),
            spec_fingerprint: spec.fingerprint(),
            model: spec.model_name().to_string(),
            epoch: self.epoch,
            step: state.step,
            data_cursor: state.cursor,
            rng_seed: spec.seed,
            rng_pass: self.order.pass(state.cursor),
            parent: self.parent,
            micro_batch: self.plan.micro_batch,
            state_hash: state.hash()?,
        };
        Ok(Checkpoint { meta, state })
    }

    /// `state` as the checkpoint bytes this trainer would serve for it (same job, epoch,
    /// parent and micro-batch): how a caller serves a state it keeps itself, such as the
    /// parent state a provider does not keep as an anchor.
    pub fn checkpoint_of_state(&self, state: TrainState) -> Result<Vec<u8>> {
        self.checkpoint_of(state)?.to_bytes()
    }

    /// The current state as a checkpoint (parent = the interval's parent).
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        self.checkpoint_of(self.snapshot()?)
    }

    /// One optimizer step over the next effective batch, accumulated over micro-batches.
    pub fn step(&mut self) -> Result<StepReport> {
        let started = Instant::now();
        let spec = &self.job.spec;
        if self.step >= spec.total_steps {
            return Err(TrainerError::Spec {
                field: "total_steps",
                reason: format!("the job's {} steps are done", spec.total_steps),
            });
        }
        let eff = spec.effective_batch;
        let lr = learning_rate(&spec.optim, self.step, spec.total_steps);
        let indices = self.order.indices(self.cursor(), eff);
        let mut grads: BTreeMap<String, Tensor> = BTreeMap::new();
        let mut loss_sum = 0f32;
        for chunk in indices.chunks(self.plan.micro_batch) {
            let batch = self.job.train.batch(chunk, &self.job.device)?;
            let logits = self.model.forward(&batch.input)?;
            let mut loss = candle_nn::loss::cross_entropy(&logits, &batch.labels)?;
            if self.plan.accumulation > 1 {
                // Mean over the effective batch = Σ micro-batch means × (micro / effective).
                loss = (loss * (chunk.len() as f64 / eff as f64))?;
            }
            let store = loss.backward()?;
            loss_sum += loss.to_scalar::<f32>()?;
            for (name, var) in self.model.params() {
                let g = store.get(var.as_tensor()).ok_or_else(|| {
                    TrainerError::Model(format!(
                        "{name} received no gradient: it does not affect the loss"
                    ))
                })?;
                let g = g.detach();
                let acc = match grads.remove(name) {
                    Some(prev) => (prev + g)?,
                    None => g,
                };
                grads.insert(name.clone(), acc);
            }
        }
        self.adam
            .update(&spec.optim, self.model.params(), &grads, self.step, lr)?;
        self.step += 1;
        let state_hash = self.record()?;
        Ok(StepReport {
            step: self.step,
            loss: loss_sum,
            lr,
            state_hash,
            elapsed: started.elapsed(),
        })
    }

    /// Trains until `until` steps are done (capped at the job's total), checking `cancel`
    /// before each step and calling `on_step` after it.
    pub fn train(
        &mut self,
        until: u64,
        cancel: &AtomicBool,
        mut on_step: impl FnMut(&StepReport) -> ControlFlow<()>,
    ) -> Result<Stop> {
        let until = until.min(self.job.spec.total_steps);
        while self.step < until {
            if cancel.load(Ordering::Relaxed) {
                return Ok(Stop::Cancelled);
            }
            let r = self.step()?;
            if on_step(&r).is_break() {
                return Ok(Stop::CallbackBreak);
            }
        }
        Ok(Stop::Reached)
    }

    /// Accuracy and loss of the current weights on the job's eval set.
    pub fn evaluate(&self) -> Result<EvalReport> {
        evaluate(
            self.model.as_ref(),
            self.job.eval.as_ref(),
            self.job.eval_len(),
            &self.job.device,
        )
    }

    /// Advances the counters without training: only the lazy-training cheat calls this.
    pub(crate) fn skip_step(&mut self) -> Result<StateHash> {
        self.step += 1;
        self.record()
    }

    /// Replaces the data order: only the wrong-order cheat calls this.
    pub(crate) fn set_order_seed(&mut self, seed: u64) {
        self.order = DataOrder::new(seed, self.job.train.len());
    }
}
