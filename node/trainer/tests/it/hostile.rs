//! Bytes from outside, as a hostile peer would send them: checkpoint blobs, state preimages,
//! dataset bundles and what they hold (Fashion-MNIST IDX files, text datasets). Every decoder must refuse what it cannot read with an
//! error, never panic, and whatever it accepts must be what it claims (it re-encodes to bytes
//! that decode the same). The same decoders have libFuzzer targets for long runs (`fuzz/`,
//! `scripts/fuzz`); these run in CI on every change.

use std::sync::{Arc, OnceLock};

use candle_core::Device;
use gpuchain_trainer::data::bundle::{pack_files, unpack_entries, unpack_to_dir};
use gpuchain_trainer::data::{Dataset, FashionMnist, MAX_IDX_BYTES, parse_jsonl};
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

/// An IDX file of unsigned bytes: `magic`, big-endian `dims`, then `data`.
fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = magic.to_be_bytes().to_vec();
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Two 28×28 images and their labels, as the IDX pair of a split.
fn fashion_pair() -> (Vec<u8>, Vec<u8>) {
    let pixels: Vec<u8> = (0..2 * 28 * 28).map(|i| (i % 251) as u8).collect();
    (
        idx(0x0803, &[2, 28, 28], &pixels),
        idx(0x0801, &[2], &[3, 9]),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_as_fashion_idx_are_refused_or_labelled_in_range(
        images in proptest::collection::vec(any::<u8>(), 0..64),
        labels in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let _ = FashionMnist::from_idx_gz(&images, &labels, None);
        if let Ok(ds) = FashionMnist::from_idx(images, labels, None) {
            prop_assert!((0..ds.len()).all(|i| ds.label(i) <= 9));
        }
    }

    #[test]
    fn a_damaged_fashion_pair_is_refused_or_labelled_in_range(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
        tail in proptest::collection::vec(any::<u8>(), 0..8),
        on_labels in any::<bool>(),
        zipped in any::<bool>(),
    ) {
        let (mut images, mut labels) = fashion_pair();
        if zipped {
            images = gzip(&images);
            labels = gzip(&labels);
        }
        if on_labels {
            labels = mutate(&labels, &edits, cut, &tail);
        } else {
            images = mutate(&images, &edits, cut, &tail);
        }
        let ds = if zipped {
            FashionMnist::from_idx_gz(&images, &labels, None)
        } else {
            FashionMnist::from_idx(images, labels, None)
        };
        if let Ok(ds) = ds {
            prop_assert!((0..ds.len()).all(|i| ds.label(i) <= 9));
            let all: Vec<usize> = (0..ds.len()).collect();
            prop_assert!(ds.batch(&all, &Device::Cpu).is_ok());
        }
    }
}

#[test]
fn a_real_fashion_pair_decodes() {
    let (images, labels) = fashion_pair();
    let ds = FashionMnist::from_idx_gz(&gzip(&images), &gzip(&labels), None).unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!((ds.label(0), ds.label(1)), (3, 9));
    assert_eq!(
        FashionMnist::from_idx(images, labels, Some(1))
            .unwrap()
            .len(),
        1
    );
}

/// Dims whose product overflows a usize used to panic (debug) or wrap past the length check
/// (release); they are refused.
#[test]
fn idx_dims_that_overflow_are_refused() {
    let images = idx(0x0803, &[u32::MAX, u32::MAX, u32::MAX], &[]);
    let (_, labels) = fashion_pair();
    let Err(e) = FashionMnist::from_idx(images, labels, None) else {
        panic!("overflowing dims accepted");
    };
    assert!(e.to_string().contains("header promises"), "{e}");
}

/// A gzip bomb is refused once it inflates past the bound, not read to the end.
#[test]
fn an_idx_file_that_inflates_past_the_bound_is_refused() {
    let bomb = gzip(&vec![0u8; MAX_IDX_BYTES as usize + 1]);
    let (_, labels) = fashion_pair();
    let Err(e) = FashionMnist::from_idx_gz(&bomb, &gzip(&labels), None) else {
        panic!("gzip bomb accepted");
    };
    assert!(e.to_string().contains("inflates to more than"), "{e}");
}

/// A state preimage entry with no data but dims whose product overflows (found by the
/// `checkpoint` fuzz target: candle multiplied them into strides and panicked) is refused.
#[test]
fn a_preimage_with_an_empty_tensor_of_huge_dims_is_refused() {
    let mut b = b"gpuchain-state-v1".to_vec();
    b.extend_from_slice(&0u64.to_le_bytes()); // step
    b.extend_from_slice(&0u64.to_le_bytes()); // cursor
    b.extend_from_slice(&1u32.to_le_bytes()); // one entry
    let name = b"param/w";
    b.extend_from_slice(&(name.len() as u32).to_le_bytes());
    b.extend_from_slice(name);
    b.push(0); // f32
    b.extend_from_slice(&3u32.to_le_bytes());
    for d in [0u64, 1 << 40, 1 << 40] {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&0u64.to_le_bytes()); // no data
    let Err(e) = TrainState::from_preimage(&b, &Device::Cpu) else {
        panic!("huge empty tensor accepted");
    };
    assert!(e.to_string().contains("too large to lay out"), "{e}");
}

/// The same shape in a checkpoint's safetensors header is refused too.
#[test]
fn a_checkpoint_with_an_empty_tensor_of_huge_dims_is_refused() {
    let header = format!(
        r#"{{"__metadata__":{{"format":"gpuchain-checkpoint-v1","job_id":"j","spec":"{h}","model":"mlp","epoch":"0","step":"0","data_cursor":"0","rng":"chacha8-data-order seed=1 pass=0","parent":"none","micro_batch":"1","state_hash":"{h}"}},"param/w":{{"dtype":"F32","shape":[0,{d},{d}],"data_offsets":[0,0]}}}}"#,
        d = 1u64 << 40,
        h = "00".repeat(32)
    );
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    let Err(e) = Checkpoint::from_bytes(&b, &Device::Cpu) else {
        panic!("huge empty tensor accepted");
    };
    assert!(e.to_string().contains("too large to lay out"), "{e}");
}
