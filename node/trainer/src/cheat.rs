//! Dishonest providers, for tests and the demo's `--fault` flag. Each produces what a cheat
//! would submit; the verification tests show every one refused.

use crate::checkpoint::{Checkpoint, file_hash};
use crate::error::Result;
use crate::job::Job;
use crate::spec::TrainSpec;
use crate::state::StateHash;
use crate::trainer::Trainer;

/// Junk: a well-formed checkpoint of the claimed step whose weights are a fresh random
/// initialisation from `seed` (≈ chance accuracy).
pub fn junk(job: &Job, checkpoint: &[u8], seed: u64) -> Result<Vec<u8>> {
    let mut c = Checkpoint::from_bytes(checkpoint, &job.device)?;
    let fresh = job.build_model(seed)?;
    for (name, var) in fresh.params() {
        c.state
            .params
            .insert(name.clone(), var.as_tensor().copy()?.detach());
    }
    reseal(c)
}

/// Stale: the parent checkpoint resubmitted as the work up to `claimed_step`.
pub fn stale(job: &Job, parent: &[u8], claimed_step: u64) -> Result<Vec<u8>> {
    let mut c = Checkpoint::from_bytes(parent, &job.device)?;
    c.meta.parent = Some(file_hash(parent));
    c.meta.step = claimed_step;
    c.meta.data_cursor = claimed_step * job.spec.effective_batch as u64;
    c.state.step = claimed_step;
    c.state.cursor = c.meta.data_cursor;
    reseal(c)
}

/// NaN weights: the first element of the first weight tensor set to NaN.
pub fn nan(job: &Job, checkpoint: &[u8]) -> Result<Vec<u8>> {
    let mut c = Checkpoint::from_bytes(checkpoint, &job.device)?;
    if let Some((name, t)) = c
        .state
        .params
        .iter()
        .next()
        .map(|(k, t)| (k.clone(), t.clone()))
    {
        let mut v = t.flatten_all()?.to_vec1::<f32>()?;
        if let Some(x) = v.first_mut() {
            *x = f32::NAN;
        }
        let poisoned = candle_core::Tensor::from_vec(v, t.dims(), &job.device)?;
        c.state.params.insert(name, poisoned);
    }
    reseal(c)
}

/// Lazy training: of the next `steps` steps only every `real_every`-th is computed; the rest
/// advance the step counter and data cursor and are committed as if trained.
pub fn lazy(trainer: &mut Trainer, steps: u64, real_every: u64) -> Result<Vec<StateHash>> {
    let mut out = Vec::new();
    for k in 0..steps {
        if real_every > 0 && k % real_every == 0 {
            out.push(trainer.step()?.state_hash);
        } else {
            out.push(trainer.skip_step()?);
        }
    }
    Ok(out)
}

/// Wrong data order: from now on the trainer reads batches in the order of another seed
/// while its checkpoints still claim the job's.
pub fn wrong_order(trainer: &mut Trainer, other_seed: u64) {
    trainer.set_order_seed(other_seed);
}

/// Another job: the same model and data under a different job id and seed. A provider that
/// trains this and submits the result is offering another job's checkpoint.
pub fn other_job(spec: &TrainSpec) -> TrainSpec {
    TrainSpec {
        job_id: format!("{}-other", spec.job_id),
        seed: spec.seed.wrapping_add(1),
        ..spec.clone()
    }
}

/// Recomputes the state hash so the forged file is self-consistent (a cheat would).
fn reseal(mut c: Checkpoint) -> Result<Vec<u8>> {
    c.meta.state_hash = c.state.hash()?;
    c.to_bytes()
}
