//! The quality test: a checkpoint must belong to the job, be finite, follow its parent with
//! new work, meet the spec's thresholds on the held-out set and not fall behind the
//! previous accepted checkpoint by more than the tolerance.

use std::fmt;

use candle_core::{D, Device, Tensor};

use crate::checkpoint::{Checkpoint, file_hash};
use crate::data::Dataset;
use crate::error::Result;
use crate::job::Job;
use crate::model::Model;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalReport {
    /// In [0, 1].
    pub accuracy: f64,
    /// Mean cross-entropy.
    pub loss: f64,
    pub examples: usize,
}

const EVAL_BATCH: usize = 250;

/// Accuracy and mean loss over the first `n` examples of `data`.
pub fn evaluate(
    model: &dyn Model,
    data: &dyn Dataset,
    n: usize,
    dev: &Device,
) -> Result<EvalReport> {
    let n = n.min(data.len());
    let mut correct = 0u64;
    let mut loss_sum = 0f64;
    let idx: Vec<usize> = (0..n).collect();
    for chunk in idx.chunks(EVAL_BATCH) {
        let batch = data.batch(chunk, dev)?;
        let logits = model.forward(&batch.input)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &batch.labels)?.to_scalar::<f32>()?;
        loss_sum += f64::from(loss) * chunk.len() as f64;
        let pred = logits.argmax(D::Minus1)?;
        correct += pred
            .eq(&batch.labels)?
            .to_dtype(candle_core::DType::U32)?
            .sum_all()?
            .to_scalar::<u32>()? as u64;
    }
    Ok(EvalReport {
        accuracy: correct as f64 / n.max(1) as f64,
        loss: loss_sum / n.max(1) as f64,
        examples: n,
    })
}

/// Why a checkpoint was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// Not a readable, self-consistent checkpoint.
    Unreadable(String),
    /// Another job's checkpoint, or tensors that do not fit this job's model.
    WrongJob(String),
    /// A weight or optimizer moment holds NaN or ±Inf.
    NonFinite {
        tensor: String,
    },
    /// It does not name the previous accepted checkpoint as its parent.
    WrongParent,
    /// Its step does not advance past the previous accepted checkpoint's.
    NoProgress {
        step: u64,
        previous: u64,
    },
    /// Its weights are the previous accepted checkpoint's: no work was done.
    Stale,
    BelowMinAccuracy {
        accuracy: f64,
        min: f64,
    },
    AboveMaxLoss {
        loss: f64,
        max: f64,
    },
    /// Accuracy fell more than the tolerance below the previous accepted checkpoint's.
    Regressed {
        accuracy: f64,
        previous: f64,
        tolerance: f64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable(m) => write!(f, "unreadable: {m}"),
            Self::WrongJob(m) => write!(f, "wrong job: {m}"),
            Self::NonFinite { tensor } => write!(f, "{tensor} holds NaN or Inf"),
            Self::WrongParent => write!(f, "its parent is not the previous accepted checkpoint"),
            Self::NoProgress { step, previous } => {
                write!(f, "step {step} does not advance past {previous}")
            }
            Self::Stale => write!(
                f,
                "weights identical to the previous accepted checkpoint (stale)"
            ),
            Self::BelowMinAccuracy { accuracy, min } => {
                write!(
                    f,
                    "accuracy {:.2} % below the minimum {:.2} %",
                    accuracy * 100.0,
                    min * 100.0
                )
            }
            Self::AboveMaxLoss { loss, max } => {
                write!(f, "loss {loss:.4} above the maximum {max:.4}")
            }
            Self::Regressed {
                accuracy,
                previous,
                tolerance,
            } => write!(
                f,
                "accuracy {:.2} % is more than {:.2} points below the previous {:.2} %",
                accuracy * 100.0,
                tolerance * 100.0,
                previous * 100.0
            ),
        }
    }
}

/// The typed outcome: accepted iff `reasons` is empty.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub accepted: bool,
    pub reasons: Vec<Reason>,
    pub step: Option<u64>,
    pub candidate: Option<EvalReport>,
    pub previous: Option<EvalReport>,
}

impl Verdict {
    fn refuse(reason: Reason) -> Self {
        Self {
            accepted: false,
            reasons: vec![reason],
            step: None,
            candidate: None,
            previous: None,
        }
    }
}

/// Loads a checkpoint's weights into a fresh model of the job.
pub fn model_from(job: &Job, ckpt: &Checkpoint) -> Result<Box<dyn Model>> {
    let model = job.build_model(job.spec.seed)?;
    for (name, var) in model.params() {
        let t = ckpt.state.params.get(name).ok_or_else(|| {
            crate::error::TrainerError::ckpt(format!("weights tensor {name} is missing"))
        })?;
        var.set(t)?;
    }
    Ok(model)
}

fn first_non_finite(ckpt: &Checkpoint) -> Result<Option<String>> {
    for (name, t) in ckpt.state.entries() {
        if !all_finite(t)? {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

fn all_finite(t: &Tensor) -> Result<bool> {
    Ok(t.flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .all(|x| x.is_finite()))
}

/// Runs the quality test on `candidate` against `previous` (the last accepted checkpoint,
/// `None` for a job's first interval). Errors only for infrastructure failures; every
/// problem with the candidate is a refusal with reasons.
pub fn quality_test(job: &Job, candidate: &[u8], previous: Option<&[u8]>) -> Result<Verdict> {
    quality_test_cached(job, candidate, previous, None)
}

/// [`quality_test`] reusing the previous accepted checkpoint's eval (a verifier computed it
/// when it accepted that checkpoint), which halves the test's cost.
pub fn quality_test_cached(
    job: &Job,
    candidate: &[u8],
    previous: Option<&[u8]>,
    previous_report: Option<EvalReport>,
) -> Result<Verdict> {
    let cand = match Checkpoint::from_bytes(candidate, &job.device) {
        Ok(c) => c,
        Err(e) => return Ok(Verdict::refuse(Reason::Unreadable(e.to_string()))),
    };
    if let Err(e) = cand.check_job(&job.spec, &job.param_shapes()?) {
        return Ok(Verdict::refuse(Reason::WrongJob(e.to_string())));
    }
    if let Some(tensor) = first_non_finite(&cand)? {
        return Ok(Verdict::refuse(Reason::NonFinite { tensor }));
    }
    let mut reasons = Vec::new();
    let q = &job.spec.quality;
    let prev = match previous {
        None => None,
        Some(bytes) => {
            let p = Checkpoint::from_bytes(bytes, &job.device)?;
            if cand.meta.parent != Some(file_hash(bytes)) {
                reasons.push(Reason::WrongParent);
            }
            if cand.meta.step <= p.meta.step {
                reasons.push(Reason::NoProgress {
                    step: cand.meta.step,
                    previous: p.meta.step,
                });
            }
            if cand.state.weights_hash()? == p.state.weights_hash()? {
                reasons.push(Reason::Stale);
            }
            Some(p)
        }
    };
    let report = evaluate(
        model_from(job, &cand)?.as_ref(),
        job.eval.as_ref(),
        job.eval_len(),
        &job.device,
    )?;
    // NaN compares as unordered, so a NaN accuracy or loss is refused too.
    if report
        .accuracy
        .partial_cmp(&q.min_accuracy)
        .is_none_or(|o| o.is_lt())
    {
        reasons.push(Reason::BelowMinAccuracy {
            accuracy: report.accuracy,
            min: q.min_accuracy,
        });
    }
    if report
        .loss
        .partial_cmp(&q.max_loss)
        .is_none_or(|o| o.is_gt())
    {
        reasons.push(Reason::AboveMaxLoss {
            loss: report.loss,
            max: q.max_loss,
        });
    }
    let prev_report = match &prev {
        None => None,
        Some(p) => {
            let r = match previous_report {
                Some(r) => r,
                None => evaluate(
                    model_from(job, p)?.as_ref(),
                    job.eval.as_ref(),
                    job.eval_len(),
                    &job.device,
                )?,
            };
            if report.accuracy < r.accuracy - q.max_regression {
                reasons.push(Reason::Regressed {
                    accuracy: report.accuracy,
                    previous: r.accuracy,
                    tolerance: q.max_regression,
                });
            }
            Some(r)
        }
    };
    Ok(Verdict {
        accepted: reasons.is_empty(),
        reasons,
        step: Some(cand.meta.step),
        candidate: Some(report),
        previous: prev_report,
    })
}
