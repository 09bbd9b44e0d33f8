use std::sync::{Arc, OnceLock};

use candle_core::Device;
use gpuchain_trainer::data::{Dataset, fashion_dir};
use gpuchain_trainer::job::load_fashion;
use gpuchain_trainer::{Job, TrainSpec};

type Pair = (Arc<dyn Dataset>, Arc<dyn Dataset>);

/// Fashion-MNIST, decoded once per test binary.
pub fn fashion() -> Pair {
    static DATA: OnceLock<Pair> = OnceLock::new();
    DATA.get_or_init(|| {
        load_fashion(&fashion_dir(), 2000).expect("Fashion-MNIST installed by scripts/setup")
    })
    .clone()
}

pub fn job(spec: TrainSpec) -> Arc<Job> {
    let (train, eval) = fashion();
    Arc::new(Job::new(spec, train, eval, None, Device::Cpu).expect("valid job"))
}

/// The fast job: MLP, batch 64.
pub fn mlp_job(id: &str, seed: u64, steps: u64) -> Arc<Job> {
    job(TrainSpec::mlp(id, seed, steps))
}
