//! Dataset bundles over the real Fashion-MNIST files: the train and eval blobs, unpacked into
//! one directory, make a directory `Job::fashion` loads.

use candle_core::Device;
use gpuchain_trainer::data::bundle::{
    FASHION_EVAL_FILES, FASHION_TRAIN_FILES, pack_dir_files, unpack_to_dir,
};
use gpuchain_trainer::data::fashion_dir;
use gpuchain_trainer::{Job, TrainSpec, TrainerError, file_hash};

use crate::common::fashion;

#[test]
fn fashion_bundles_unpack_to_a_loadable_dir() {
    let train = pack_dir_files(&fashion_dir(), &FASHION_TRAIN_FILES).unwrap();
    let eval = pack_dir_files(&fashion_dir(), &FASHION_EVAL_FILES).unwrap();
    // Deterministic, so every provider packing the same files names the same blob.
    assert_eq!(
        file_hash(&train),
        file_hash(&pack_dir_files(&fashion_dir(), &FASHION_TRAIN_FILES).unwrap())
    );
    assert_ne!(file_hash(&train), file_hash(&eval));

    let dir = tempfile::tempdir().unwrap();
    let spec = TrainSpec::mlp("bundle", 1, 10);
    // The train bundle alone is not a job's data: the eval files are missing.
    assert_eq!(
        unpack_to_dir(&train, dir.path()).unwrap(),
        FASHION_TRAIN_FILES
    );
    let e = Job::fashion(spec.clone(), dir.path(), Device::Cpu)
        .err()
        .unwrap();
    assert!(matches!(e, TrainerError::Missing { .. }), "{e}");
    assert!(e.to_string().contains("t10k-images-idx3-ubyte.gz"), "{e}");

    assert_eq!(
        unpack_to_dir(&eval, dir.path()).unwrap(),
        FASHION_EVAL_FILES
    );
    let job = Job::fashion(spec, dir.path(), Device::Cpu).unwrap();
    let (sys_train, sys_eval) = fashion();
    assert_eq!(job.train.len(), sys_train.len());
    assert_eq!(job.eval.len(), sys_eval.len());
    // Same examples, not just the same count.
    let idx = [0, 1, 12_345, 59_999];
    let a = job.train.batch(&idx, &Device::Cpu).unwrap();
    let b = sys_train.batch(&idx, &Device::Cpu).unwrap();
    assert_eq!(
        a.labels.to_vec1::<u32>().unwrap(),
        b.labels.to_vec1::<u32>().unwrap()
    );
}
