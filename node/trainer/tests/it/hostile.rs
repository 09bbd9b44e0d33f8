//! Bytes from outside, as a hostile peer would send them: checkpoint blobs, state preimages,
//! dataset bundles and text datasets. Every decoder must refuse what it cannot read with an
//! error, never panic, and whatever it accepts must be what it claims (it re-encodes to bytes
//! that decode the same). The same decoders have libFuzzer targets for long runs; these run in
//! CI on every change.

use std::sync::{Arc, OnceLock};

use candle_core::Device;
use gpuchain_trainer::data::bundle::{pack_files, unpack_entries, unpack_to_dir};
use gpuchain_trainer::data::parse_jsonl;
use gpuchain_trainer::{Checkpoint, Job, TrainState, Trainer, TrainerOptions};
use proptest::prelude::*;

use crate::common::mlp_job;

/// A real checkpoint and a real state preimage, made once.
fn real() -> &'static (Vec<u8>, Vec<u8>) {
    static REAL: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    REAL.get_or_init(|| {
        let job: Arc<Job> = mlp_job("hostile", 3, 20);
        let mut t = Trainer::new(job, 0, TrainerOptions::default()).unwrap();
        t.step().unwrap();
        t.step().unwrap();
        let ckpt = t.checkpoint().unwrap().to_bytes().unwrap();
        let pre = t.state_preimage(t.step_count()).unwrap();
        (ckpt, pre)
    })
}

/// `bytes` with some of them changed, cut short, or grown.
fn mutate(bytes: &[u8], edits: &[(usize, u8)], cut: Option<usize>, tail: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for (i, b) in edits {
        if !out.is_empty() {
            let n = out.len();
            out[i % n] = *b;
        }
    }
    if let Some(c) = cut {
        out.truncate(c % (bytes.len() + 1));
    }
    out.extend_from_slice(tail);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_as_a_checkpoint_are_refused_or_read(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Checkpoint::from_bytes(&bytes, &Device::Cpu);
    }

    #[test]
    fn a_damaged_checkpoint_is_refused_or_consistent(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in proptest::option::of(any::<usize>()),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let bytes = mutate(&real().0, &edits, cut, &tail);
        if let Ok(c) = Checkpoint::from_bytes(&bytes, &Device::Cpu) {
            // Accepted: it must be a checkpoint that stands for itself.
            let again = c.to_bytes().unwrap();
            let back = Checkpoint::from_bytes(&again, &Device::Cpu).unwrap();
            prop_assert_eq!(back.to_bytes().unwrap(), again);
        }
    }

    #[test]
    fn a_damaged_state_preimage_is_refused_or_hashes_to_itself(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in proptest::option::of(any::<usize>()),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let bytes = mutate(&real().1, &edits, cut, &tail);
        if let Ok(s) = TrainState::from_preimage(&bytes, &Device::Cpu) {
            // Only the canonical encoding is accepted: the state re-encodes to these bytes.
            prop_assert_eq!(s.preimage().unwrap(), bytes);
        }
    }

    #[test]
    fn any_bytes_as_a_bundle_are_refused_or_unpack_inside_the_folder(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        let _ = unpack_entries(&bytes);
        let dir = tempfile::tempdir().unwrap();
        if let Ok(names) = unpack_to_dir(&bytes, dir.path()) {
            for n in names {
                prop_assert!(dir.path().join(&n).starts_with(dir.path()));
                prop_assert!(!n.contains('/') && !n.contains("..") && !n.is_empty(), "{n:?}");
            }
        }
    }

    #[test]
    fn a_damaged_bundle_is_refused_or_unpacks_inside_the_folder(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let good = pack_files(&[("a.bin", b"first file"), ("b.bin", b"second")]).unwrap();
        let bytes = mutate(&good, &edits, cut, &[]);
        let dir = tempfile::tempdir().unwrap();
        if let Ok(names) = unpack_to_dir(&bytes, dir.path()) {
            for n in names {
                prop_assert!(!n.contains('/') && !n.contains("..") && !n.is_empty(), "{n:?}");
                prop_assert!(dir.path().join(&n).is_file());
            }
        }
    }

    #[test]
    fn any_text_as_a_jsonl_dataset_is_refused_or_labelled_in_range(
        text in "(\\PC|\\n){0,400}",
        classes in 1usize..8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.jsonl");
        std::fs::write(&path, &text).unwrap();
        if let Ok(examples) = parse_jsonl(&path, classes) {
            for e in examples {
                prop_assert!((e.label as usize) < classes);
            }
        }
    }
}
