//! The training model: how fast a hardware class trains a job and what its checkpoints look
//! like. Steps are not simulated one by one: progress is a linear function of time since the
//! epoch started training, so a day of training costs a handful of events.

use crate::config::{HardwareClass, JobConfig};

/// Gradient accumulation when a device cannot hold the full batch costs some throughput
/// (more kernel launches, smaller matmuls).
const ACCUMULATION_EFFICIENCY: f64 = 0.85;

/// Steps per second this class trains the job at, or `None` if it cannot fit the smallest
/// micro-batch.
pub fn steps_per_s(hw: &HardwareClass, job: &JobConfig) -> Option<f64> {
    if hw.memory_bytes < job.min_memory_bytes {
        return None;
    }
    if hw.memory_bytes >= job.batch_memory_bytes {
        Some(hw.steps_per_s)
    } else {
        // Micro-batch resized to memory, accumulated to the same effective batch.
        Some(hw.steps_per_s * ACCUMULATION_EFFICIENCY)
    }
}

/// Milliseconds to train `steps` steps at `rate` steps/s (at least 1 ms per step batch).
pub fn train_ms(steps: u64, rate: f64) -> u64 {
    ((steps as f64 / rate) * 1000.0).ceil().max(1.0) as u64
}

/// Honest eval loss after `step` steps.
pub fn loss_at(job: &JobConfig, step: f64) -> f64 {
    job.loss_floor + (job.loss_start - job.loss_floor) * (-step / job.loss_tau_steps).exp()
}

/// Honest held-out accuracy after `step` steps.
pub fn accuracy_at(job: &JobConfig, step: f64) -> f64 {
    job.acc_top - (job.acc_top - job.acc_base) * (-step / job.loss_tau_steps).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_devices_accumulate_and_tiny_ones_cannot_bid() {
        let job = JobConfig::default();
        let big = HardwareClass {
            memory_bytes: 8 << 30,
            steps_per_s: 10.0,
            ..HardwareClass::default()
        };
        let small = HardwareClass {
            memory_bytes: 1 << 30,
            ..big.clone()
        };
        let tiny = HardwareClass {
            memory_bytes: 1 << 20,
            ..big.clone()
        };
        assert_eq!(steps_per_s(&big, &job), Some(10.0));
        let s = steps_per_s(&small, &job).expect("fits a micro-batch");
        assert!(s < 10.0);
        assert_eq!(steps_per_s(&tiny, &job), None);
    }

    #[test]
    fn curves_improve_with_steps() {
        let job = JobConfig::default();
        assert!(loss_at(&job, 400.0) < loss_at(&job, 100.0));
        assert!(accuracy_at(&job, 400.0) > 0.8 && accuracy_at(&job, 0.0) < 0.2);
    }
}
