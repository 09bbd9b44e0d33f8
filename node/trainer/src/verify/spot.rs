//! Re-execution spot checks: from a committed state, replay and compare the result with the
//! committed states after it. Exact mode compares state hashes (same hardware class and
//! micro-batch: CPU training is bit-for-bit deterministic). Tolerance mode, for mixed
//! hardware or micro-batches, compares the replayed weights with a served later state,
//! relative to the size of the update in between.
//!
//! A provider keeps only an interval's anchor states (the protocol's `anchors` rule: at most
//! three), not every step's. So a sampled transition `s - 1 → s` is replayed from the nearest
//! anchor at or before `s - 1`:
//! - exact mode replays anchor → `s` and checks the hash after EVERY replayed step against
//!   its commitment, so a faked step anywhere on the way is caught, not only at `s`;
//! - tolerance mode cannot check intermediate hashes (an honest replay on other hardware
//!   never matches them bit for bit), and the only served states to compare with are the
//!   anchors and the checkpoint. It replays the whole segment holding `s`, anchor to the next
//!   anchor (or the interval's end), and compares there, relative to the whole segment's
//!   update. Rounding drift grows with the segment but stays ~1e-5 of its update, while one
//!   skipped or faked step is about 1/len of it (updates of nearby steps mostly agree) or
//!   more: with segments of at most ⌈interval / 3⌉ steps a 1e-2 tolerance still separates
//!   the two for intervals up to ~150 steps.

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

/// The outcome of one sampled transition.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotResult {
    /// The sampled transition's first step (`step → step + 1`); the replay may start at an
    /// earlier anchor.
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
    // A one-step replay from a stored state is an anchored check whose anchor is that state.
    spot_check_from_anchor(
        job,
        candidate_meta,
        before,
        &[committed_before, committed_after],
    )
}

/// Exact mode from an anchor's state preimage (the blob the provider keeps, fetched by its
/// committed hash): `committed[0]` is the anchor's hash, `committed[k]` the committed state
/// after `k` more steps. Replays `committed.len() - 1` steps and checks every one.
pub fn spot_check_from_anchor(
    job: &Arc<Job>,
    candidate_meta: &CheckpointMeta,
    anchor: &[u8],
    committed: &[StateHash],
) -> Result<SpotResult> {
    let Some((&first, rest)) = committed.split_first() else {
        return Ok(refuse(0, "no committed states to check".into()));
    };
    if rest.is_empty() {
        return Ok(refuse(0, "nothing to replay after the anchor".into()));
    }
    let found = StateHash::of_preimage(anchor);
    if found != first {
        return Ok(refuse(
            0,
            format!("anchor preimage hashes to {found}, not the committed {first}"),
        ));
    }
    let ckpt = match checkpoint_from_preimage(job, candidate_meta, anchor) {
        Ok(c) => c,
        Err(e) => return Ok(refuse(0, format!("anchor preimage unreadable: {e}"))),
    };
    if ckpt.meta.state_hash != first {
        return Ok(refuse(
            ckpt.meta.step,
            format!(
                "anchor preimage re-encodes to {}, not the committed {first}",
                ckpt.meta.state_hash
            ),
        ));
    }
    Ok(replay_exact_through(job, &ckpt, rest))
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
    replay_exact_through(job, before, &[committed_after])
}

/// Replays `committed.len()` steps of `from` with the producer's micro-batch; the state after
/// replayed step `k` must hash to `committed[k - 1]`. The first mismatch refuses, naming its
/// step: any faked step on the way fails, not only the last.
fn replay_exact_through(job: &Arc<Job>, from: &Checkpoint, committed: &[StateHash]) -> SpotResult {
    let start = from.meta.step;
    let last = start + committed.len() as u64;
    // Reported as the sampled transition, the last one replayed.
    let sampled = last.saturating_sub(1);
    let opts = TrainerOptions {
        memory_budget: None,
        memory: None,
        micro_batch: Some(from.meta.micro_batch),
        keep_states: false,
    };
    let mut t = match Trainer::from_checkpoint(job.clone(), from, None, from.meta.epoch, opts) {
        Ok(t) => t,
        Err(e) => return refuse(sampled, format!("replay refused the served state: {e}")),
    };
    for (k, want) in committed.iter().enumerate() {
        let at = start + k as u64;
        let got = match t.step().map(|r| r.state_hash) {
            Ok(h) => h,
            Err(e) => {
                return refuse(
                    sampled,
                    format!("replay of step {at}→{} failed: {e}", at + 1),
                );
            }
        };
        if got != *want {
            return refuse(
                sampled,
                format!(
                    "step {at}→{}: replay gives {got}, committed {want} (replayed from {start})",
                    at + 1
                ),
            );
        }
    }
    SpotResult {
        step: sampled,
        matched: true,
        detail: format!(
            "step {sampled}→{last} replayed from {start} through {} committed hashes",
            committed.len()
        ),
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
    Ok(compare_tolerant(job, &b, &a, 1, max_ratio, memory_budget))
}

/// Replays `steps` steps of `b` with the verifier's own micro-batch and compares with `a`:
/// ‖replayed − a‖ / ‖replayed − b‖ within `max_ratio`.
fn compare_tolerant(
    job: &Arc<Job>,
    b: &Checkpoint,
    a: &Checkpoint,
    steps: u64,
    max_ratio: f64,
    memory_budget: Option<u64>,
) -> SpotResult {
    match try_compare_tolerant(job, b, a, steps, max_ratio, memory_budget) {
        Ok(r) => r,
        Err(e) => refuse(b.meta.step, format!("tolerance comparison failed: {e}")),
    }
}

fn try_compare_tolerant(
    job: &Arc<Job>,
    b: &Checkpoint,
    a: &Checkpoint,
    steps: u64,
    max_ratio: f64,
    memory_budget: Option<u64>,
) -> Result<SpotResult> {
    let step = b.meta.step;
    let replayed = (|| {
        let opts = TrainerOptions {
            memory_budget,
            memory: None,
            micro_batch: None,
            keep_states: false,
        };
        let mut t = Trainer::from_checkpoint(job.clone(), b, None, b.meta.epoch, opts)?;
        for _ in 0..steps {
            t.step()?;
        }
        t.snapshot()
    })();
    let r = match replayed {
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
            detail: format!(
                "steps {step}→{}: deviation {ratio:.2e} of the update (≤ {max_ratio:.0e})",
                step + steps
            ),
        }
    } else {
        refuse(
            step,
            format!(
                "steps {step}→{}: deviation {ratio:.2e} of the update exceeds {max_ratio:.0e}",
                step + steps
            ),
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

/// Checks `k` seeded transitions of an announced interval whose provider served every
/// step's state (each step an anchor): see [`spot_check_anchored`].
pub fn spot_check_interval(
    job: &Arc<Job>,
    start: u64,
    committed: &[StateHash],
    seed: u64,
    k: usize,
    mode: SpotMode,
    fetch: impl FnMut(u64) -> Result<Vec<u8>>,
) -> Result<SpotReport> {
    let every: Vec<u64> = (start..start + committed.len().saturating_sub(1) as u64).collect();
    spot_check_anchored(job, start, committed, &every, seed, k, mode, fetch)
}

/// The last anchor at or before `step`: where a replay through `step → step + 1` starts.
fn anchor_at_or_before(anchors: &[u64], step: u64) -> Option<u64> {
    anchors.iter().rev().find(|a| **a <= step).copied()
}

/// Checks `k` seeded transitions of an announced interval. `committed[i]` is the state hash
/// at step `start + i`; `anchors` are the steps whose states the provider serves (the
/// protocol's rule, ascending, the first being `start`); `fetch(step)` returns the provider's
/// served state at that step (its `serve_state`), and is only ever asked for anchors and, in
/// tolerance mode, the interval's last step (the checkpoint itself). A fetch failure counts
/// as a refusal: a provider that cannot serve its committed states cannot be checked.
#[allow(clippy::too_many_arguments)]
pub fn spot_check_anchored(
    job: &Arc<Job>,
    start: u64,
    committed: &[StateHash],
    anchors: &[u64],
    seed: u64,
    k: usize,
    mode: SpotMode,
    mut fetch: impl FnMut(u64) -> Result<Vec<u8>>,
) -> Result<SpotReport> {
    let transitions = committed.len().saturating_sub(1);
    let end = start + transitions as u64;
    let mut results = Vec::new();
    for i in choose_steps(seed, transitions, k) {
        let step = start + i as u64;
        let Some(anchor) = anchor_at_or_before(anchors, step).filter(|a| *a >= start) else {
            results.push(refuse(step, format!("no anchor at or before step {step}")));
            continue;
        };
        let from = (anchor - start) as usize;
        let served = match fetch(anchor) {
            Ok(b) => b,
            Err(e) => {
                results.push(refuse(step, format!("anchor {anchor} not served: {e}")));
                continue;
            }
        };
        let b = match Checkpoint::from_bytes(&served, &job.device) {
            Ok(b) => b,
            Err(e) => {
                results.push(refuse(
                    step,
                    format!("served anchor {anchor} unreadable: {e}"),
                ));
                continue;
            }
        };
        if b.meta.state_hash != committed[from] || b.meta.step != anchor {
            results.push(refuse(
                step,
                format!(
                    "served anchor {anchor} is state {} of step {}, not the committed {}",
                    b.meta.state_hash, b.meta.step, committed[from]
                ),
            ));
            continue;
        }
        let r = match mode {
            SpotMode::Exact => {
                let mut r = replay_exact_through(job, &b, &committed[from + 1..=i + 1]);
                r.step = step;
                r
            }
            SpotMode::Tolerance { max_ratio } => {
                // The whole segment: the next anchor after the sample, or the checkpoint.
                let to = anchors
                    .iter()
                    .copied()
                    .find(|a| *a > step && *a <= end)
                    .unwrap_or(end);
                match fetch(to) {
                    Ok(after) => match Checkpoint::from_bytes(&after, &job.device) {
                        Ok(a)
                            if a.meta.state_hash == committed[(to - start) as usize]
                                && a.meta.step == to =>
                        {
                            let mut r = compare_tolerant(job, &b, &a, to - anchor, max_ratio, None);
                            r.step = step;
                            r
                        }
                        Ok(_) => refuse(step, format!("served state {to} is not the committed")),
                        Err(e) => refuse(step, format!("served state {to} unreadable: {e}")),
                    },
                    Err(e) => refuse(step, format!("state {to} not served: {e}")),
                }
            }
        };
        results.push(r);
    }
    Ok(SpotReport {
        accepted: !results.is_empty() && results.iter().all(|r| r.matched),
        results,
    })
}
