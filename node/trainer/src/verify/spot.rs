//! Re-execution spot checks: from a committed state, replay one step and compare the result
//! with the committed next state. Exact mode compares state hashes (same hardware class and
//! micro-batch: CPU training is bit-for-bit deterministic). Tolerance mode, for mixed
//! hardware or micro-batches, compares the replayed weights with the served next state,
//! relative to the size of the step's update.

use std::sync::Arc;

use rand::Rng;

use crate::checkpoint::{Checkpoint, CheckpointMeta};
use crate::data::DataOrder;
use crate::error::Result;
use crate::init::rng_for;
use crate::job::Job;
use crate::state::{StateHash, TrainState, tensor_bytes};
use crate::trainer::{Trainer, TrainerOptions};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpotMode {
    /// The replay's state hash must equal the committed one.
    Exact,
    /// ‖replayed − served‖ / ‖replayed − before‖ over all weights must not exceed `max_ratio`
    /// (an honest replay on other hardware differs by rounding: ~1e-5; a skipped or faked
    /// step differs by a whole update: ≥ 1). The replay uses the verifier's own micro-batch.
    Tolerance { max_ratio: f64 },
}

/// The outcome of one replayed step.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotResult {
    /// The step the replay started from.
    pub step: u64,
    pub matched: bool,
    pub detail: String,
}

/// Picks `k` distinct transitions (indices into 0..transitions, sorted) with the verifier's
/// seed, so anyone can re-derive which steps were checked.
pub fn choose_steps(seed: u64, transitions: usize, k: usize) -> Vec<usize> {
    let mut rng = rng_for(seed, "spot-check");
    let mut all: Vec<usize> = (0..transitions).collect();
    let k = k.min(transitions);
    for i in 0..k {
        let j = rng.random_range(i..transitions);
        all.swap(i, j);
    }
    let mut chosen = all[..k].to_vec();
    chosen.sort_unstable();
    chosen
}

/// Replays one step from `before`; `micro_batch` None = the verifier's own choice.
pub fn replay(
    job: &Arc<Job>,
    before: &Checkpoint,
    micro_batch: Option<usize>,
    memory_budget: Option<u64>,
) -> Result<TrainState> {
    let opts = TrainerOptions {
        memory_budget,
        memory: None,
        micro_batch,
        keep_states: false,
    };
    let mut t = Trainer::from_checkpoint(job.clone(), before, None, before.meta.epoch, opts)?;
    t.step()?;
    t.snapshot()
}

fn refuse(step: u64, detail: String) -> SpotResult {
    SpotResult {
        step,
        matched: false,
        detail,
    }
}

/// Exact mode: `before` is the served state whose hash must be `committed_before`; the replay
/// (with the producer's micro-batch) must hash to `committed_after`.
pub fn spot_check(
    job: &Arc<Job>,
    before: &[u8],
    committed_before: StateHash,
    committed_after: StateHash,
) -> Result<SpotResult> {
    let b = match Checkpoint::from_bytes(before, &job.device) {
        Ok(b) => b,
        Err(e) => return Ok(refuse(0, format!("served state unreadable: {e}"))),
    };
    let step = b.meta.step;
    if b.meta.state_hash != committed_before {
        return Ok(refuse(
            step,
            format!(
                "served state {} is not the committed {committed_before}",
                b.meta.state_hash
            ),
        ));
    }
    Ok(replay_exact(job, &b, committed_after))
}

/// Exact mode from a state preimage (a blob fetched by its hash, [`TrainState::preimage`])
/// rather than a served checkpoint. A preimage carries only step, cursor and tensors, so the
/// rest of what a resume needs comes from the candidate checkpoint the interval ends in: its
/// job, spec fingerprint, model, epoch, data-order seed and, for an exact replay, the
/// producer's micro-batch.
pub fn spot_check_preimage(
    job: &Arc<Job>,
    candidate_meta: &CheckpointMeta,
    before: &[u8],
    committed_before: StateHash,
    committed_after: StateHash,
) -> Result<SpotResult> {
    let found = StateHash::of_preimage(before);
    if found != committed_before {
        return Ok(refuse(
            0,
            format!("state preimage hashes to {found}, not the committed {committed_before}"),
        ));
    }
    let ckpt = match checkpoint_from_preimage(job, candidate_meta, before) {
        Ok(c) => c,
        Err(e) => return Ok(refuse(0, format!("state preimage unreadable: {e}"))),
    };
    // Parsing accepts only canonical bytes, so this holds; checked because the replay must
    // start from exactly the committed state.
    if ckpt.meta.state_hash != committed_before {
        return Ok(refuse(
            ckpt.meta.step,
            format!(
                "state preimage re-encodes to {}, not the committed {committed_before}",
                ckpt.meta.state_hash
            ),
        ));
    }
    Ok(replay_exact(job, &ckpt, committed_after))
}

/// The checkpoint the provider's `serve_state` would have served for the state in `preimage`,
/// given the meta of the checkpoint its interval ends in (same job, epoch, parent and
/// micro-batch throughout an interval). It does not check the state against a commitment:
/// that is the caller's, e.g. by fetching the preimage by its committed hash.
pub fn checkpoint_from_preimage(
    job: &Job,
    candidate_meta: &CheckpointMeta,
    preimage: &[u8],
) -> Result<Checkpoint> {
    let state = TrainState::from_preimage(preimage, &job.device)?;
    let meta = CheckpointMeta {
        job_id: candidate_meta.job_id.clone(),
        spec_fingerprint: candidate_meta.spec_fingerprint,
        model: candidate_meta.model.clone(),
        epoch: candidate_meta.epoch,
        step: state.step,
        data_cursor: state.cursor,
        rng_seed: candidate_meta.rng_seed,
        // As the trainer records it: the pass of the job's data order that the cursor is in.
        rng_pass: DataOrder::new(job.spec.seed, job.train.len()).pass(state.cursor),
        parent: candidate_meta.parent,
        micro_batch: candidate_meta.micro_batch,
        state_hash: state.hash()?,
    };
    Ok(Checkpoint { meta, state })
}

/// Replays one step of `before` with the producer's micro-batch and compares the result's
/// hash with `committed_after`; a state the trainer refuses to resume is a refusal too.
fn replay_exact(job: &Arc<Job>, before: &Checkpoint, committed_after: StateHash) -> SpotResult {
    let step = before.meta.step;
    let replayed =
        match replay(job, before, Some(before.meta.micro_batch), None).and_then(|s| s.hash()) {
            Ok(h) => h,
            Err(e) => return refuse(step, format!("replay refused the served state: {e}")),
        };
    if replayed == committed_after {
        SpotResult {
            step,
            matched: true,
            detail: format!("step {step}→{} replayed to the committed hash", step + 1),
        }
    } else {
        refuse(
            step,
            format!(
                "step {step}→{}: replay gives {replayed}, committed {committed_after}",
                step + 1
            ),
        )
    }
}

/// Tolerance mode: both served states must match their commitments; the verifier's replay of
/// `before` must land on `after` within [`SpotMode::Tolerance`]'s ratio.
pub fn spot_check_tolerant(
    job: &Arc<Job>,
    before: &[u8],
    after: &[u8],
    committed: (StateHash, StateHash),
    max_ratio: f64,
    memory_budget: Option<u64>,
) -> Result<SpotResult> {
    let parse = |bytes: &[u8], what: &str| {
        Checkpoint::from_bytes(bytes, &job.device)
            .map_err(|e| format!("served {what} state unreadable: {e}"))
    };
    let (b, a) = match (parse(before, "before"), parse(after, "after")) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => return Ok(refuse(0, e)),
    };
    let step = b.meta.step;
    if b.meta.state_hash != committed.0 || a.meta.state_hash != committed.1 {
        return Ok(refuse(
            step,
            "served states are not the committed ones".into(),
        ));
    }
    if a.meta.step != step + 1 {
        return Ok(refuse(
            step,
            format!(
                "served next state is step {}, expected {}",
                a.meta.step,
                step + 1
            ),
        ));
    }
    let r = match replay(job, &b, None, memory_budget) {
        Ok(r) => r,
        Err(e) => {
            return Ok(refuse(
                step,
                format!("replay refused the served state: {e}"),
            ));
        }
    };
    let (mut diff, mut update) = (0f64, 0f64);
    for (name, rt) in &r.params {
        let (Some(at), Some(bt)) = (a.state.params.get(name), b.state.params.get(name)) else {
            return Ok(refuse(step, format!("served states lack {name}")));
        };
        let (rv, av, bv) = (floats(rt)?, floats(at)?, floats(bt)?);
        if rv.len() != av.len() || rv.len() != bv.len() {
            return Ok(refuse(step, format!("served {name} has the wrong shape")));
        }
        for i in 0..rv.len() {
            diff += f64::from(rv[i] - av[i]).powi(2);
            update += f64::from(rv[i] - bv[i]).powi(2);
        }
    }
    let ratio = diff.sqrt() / update.sqrt().max(f64::MIN_POSITIVE);
    Ok(if ratio.is_finite() && ratio <= max_ratio {
        SpotResult {
            step,
            matched: true,
            detail: format!("step {step}: deviation {ratio:.2e} of the update (≤ {max_ratio:.0e})"),
        }
    } else {
        refuse(
            step,
            format!("step {step}: deviation {ratio:.2e} of the update exceeds {max_ratio:.0e}"),
        )
    })
}

fn floats(t: &candle_core::Tensor) -> Result<Vec<f32>> {
    let b = tensor_bytes(t)?;
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The spot check of a whole interval.
#[derive(Clone, Debug)]
pub struct SpotReport {
    pub accepted: bool,
    pub results: Vec<SpotResult>,
}

/// Checks `k` seeded transitions of an announced interval. `committed[i]` is the state hash at
/// step `start + i`; `fetch(step)` returns the provider's served state at that step (its
/// `serve_state`). A fetch failure counts as a refusal: a provider that cannot serve its
/// committed states cannot be checked.
pub fn spot_check_interval(
    job: &Arc<Job>,
    start: u64,
    committed: &[StateHash],
    seed: u64,
    k: usize,
    mode: SpotMode,
    mut fetch: impl FnMut(u64) -> Result<Vec<u8>>,
) -> Result<SpotReport> {
    let transitions = committed.len().saturating_sub(1);
    let mut results = Vec::new();
    for i in choose_steps(seed, transitions, k) {
        let step = start + i as u64;
        let before = match fetch(step) {
            Ok(b) => b,
            Err(e) => {
                results.push(refuse(step, format!("state {step} not served: {e}")));
                continue;
            }
        };
        let r = match mode {
            SpotMode::Exact => spot_check(job, &before, committed[i], committed[i + 1])?,
            SpotMode::Tolerance { max_ratio } => match fetch(step + 1) {
                Ok(after) => spot_check_tolerant(
                    job,
                    &before,
                    &after,
                    (committed[i], committed[i + 1]),
                    max_ratio,
                    None,
                )?,
                Err(e) => refuse(step, format!("state {} not served: {e}", step + 1)),
            },
        };
        results.push(r);
    }
    Ok(SpotReport {
        accepted: !results.is_empty() && results.iter().all(|r| r.matched),
        results,
    })
}
