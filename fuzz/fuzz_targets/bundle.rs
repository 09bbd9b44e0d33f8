//! Dataset bundles, as a provider or verifier fetches a job's training and eval data: the
//! bundle container, then what is inside it (Fashion-MNIST's gzip-compressed IDX files, a text
//! job's JSONL). Properties: nothing panics; a bundle that unpacks holds only plain file names
//! (no path separators, no `..`) in sorted order and re-packs to exactly its bytes; decoded
//! Fashion-MNIST has labels in 0..9 and 784 pixels an image; decoded JSONL has labels inside
//! its class count.
#![no_main]

use std::path::Path;

use candle_core::Device;
use gpuchain_trainer::data::bundle::{pack_files, unpack_entries};
use gpuchain_trainer::data::{Dataset, FashionMnist, parse_jsonl_text};
use libfuzzer_sys::fuzz_target;

fn check_fashion(images: &[u8], labels: &[u8]) {
    for ds in [
        FashionMnist::from_idx_gz(images, labels, None),
        // Past the gzip CRC, so the fuzzer reaches the IDX parser directly too.
        FashionMnist::from_idx(images.to_vec(), labels.to_vec(), Some(3)),
    ]
    .into_iter()
    .flatten()
    {
        for i in 0..ds.len() {
            assert!(ds.label(i) <= 9);
        }
        if !ds.is_empty() {
            let idx: Vec<usize> = (0..ds.len().min(2)).collect();
            ds.batch(&idx, &Device::Cpu)
                .expect("a decoded split yields batches");
        }
    }
}

fn check_jsonl(data: &[u8], classes: usize) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rows) = parse_jsonl_text(Path::new("train.jsonl"), text, classes) {
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| (r.label as usize) < classes));
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = unpack_entries(data) {
        for w in entries.windows(2) {
            assert!(w[0].0 < w[1].0, "names sorted and distinct");
        }
        for (name, _) in &entries {
            assert!(!name.is_empty() && !name.contains(['/', '\\', '\0']) && !name.contains(".."));
        }
        assert_eq!(
            pack_files(&entries).expect("an unpacked bundle re-packs"),
            data
        );
        if let [(_, images), (_, labels)] = entries.as_slice() {
            check_fashion(images, labels);
        }
        for (_, d) in &entries {
            check_jsonl(d, 4);
        }
    }
    // The contents on their own: the first byte picks where images end and labels begin.
    if let Some((&cut, rest)) = data.split_first() {
        let at = (usize::from(cut) * rest.len()) / 255;
        let (images, labels) = rest.split_at(at.min(rest.len()));
        check_fashion(images, labels);
        check_jsonl(rest, usize::from(cut % 8) + 1);
    }
});
