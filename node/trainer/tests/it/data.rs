use std::io::Write;

use gpuchain_trainer::TrainerError;
use gpuchain_trainer::data::{FashionMnist, Split, fashion_dir, parse_ag_news_csv, parse_jsonl};

use crate::common::fashion;

#[test]
fn fashion_mnist_loads_the_real_files() {
    let (train, eval) = fashion();
    assert_eq!(train.len(), 60_000);
    assert_eq!(eval.len(), 2_000);
    assert_eq!(train.num_classes(), 10);
    let b = train
        .batch(&[0, 1, 59_999], &candle_core::Device::Cpu)
        .unwrap();
    let labels = b.labels.to_vec1::<u32>().unwrap();
    assert!(labels.iter().all(|&l| l < 10));
    // The first training image of Fashion-MNIST is an ankle boot (class 9).
    assert_eq!(labels[0], 9);
    let err = eval
        .batch(&[1999, 2000], &candle_core::Device::Cpu)
        .err()
        .unwrap();
    assert!(err.to_string().contains("index 2000"), "{err}");
    let test = FashionMnist::load(&fashion_dir(), Split::Test, None).unwrap();
    assert_eq!(gpuchain_trainer::data::Dataset::len(&test), 10_000);
}

#[test]
fn missing_fashion_dir_names_the_setup_script() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("nope");
    let err = FashionMnist::load(&gone, Split::Train, None).err().unwrap();
    assert!(matches!(err, TrainerError::Missing { .. }));
    assert!(err.to_string().contains("scripts/setup"), "{err}");
    // A directory without the files names the file that is missing.
    let err = FashionMnist::load(dir.path(), Split::Test, None)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("t10k-images-idx3-ubyte.gz"),
        "{err}"
    );
}

#[test]
fn corrupt_idx_file_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"] {
        let f = std::fs::File::create(dir.path().join(name)).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(&[0, 0, 8, 3, 0, 0, 0, 1]).unwrap();
        gz.finish().unwrap();
    }
    let err = FashionMnist::load(dir.path(), Split::Test, None)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("t10k-images-idx3-ubyte.gz"),
        "{err}"
    );
}

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn ag_news_csv_parses_and_reports_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(
        &dir,
        "ok.csv",
        "\"3\",\"Wall St. Bears Claw Back\",\"Short-sellers, Wall Street's dwindling band, are seeing green.\"\n\
         \"1\",\"Talks \"\"stall\"\"\",\"Diplomats met.\"\n",
    );
    let ex = parse_ag_news_csv(&ok).unwrap();
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].label, 2);
    assert!(ex[0].text.contains("dwindling band, are"));
    assert_eq!(ex[1].text, "Talks \"stall\". Diplomats met.");

    let bad_class = write(&dir, "c.csv", "\"1\",\"a\",\"b\"\n\"5\",\"a\",\"b\"\n");
    let err = parse_ag_news_csv(&bad_class).unwrap_err().to_string();
    assert!(
        err.contains("c.csv:2:") && err.contains("outside 1–4"),
        "{err}"
    );
    let few = write(&dir, "f.csv", "\"1\",\"a\",\"b\"\n\n\"2\",\"only two\"\n");
    let err = parse_ag_news_csv(&few).unwrap_err().to_string();
    assert!(
        err.contains("f.csv:3:") && err.contains("3 fields"),
        "{err}"
    );
    let unterminated = write(&dir, "u.csv", "\"1\",\"a,\"b\n");
    assert!(
        parse_ag_news_csv(&unterminated)
            .unwrap_err()
            .to_string()
            .contains("u.csv:1:")
    );
}

#[test]
fn jsonl_parses_and_reports_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(
        &dir,
        "ok.jsonl",
        "{\"text\": \"good movie\", \"label\": 1}\n{\"text\": \"bad\", \"label\": 0}\n",
    );
    let ex = parse_jsonl(&ok, 2).unwrap();
    assert_eq!((ex[0].label, ex[1].text.as_str()), (1, "bad"));
    let bad = write(
        &dir,
        "b.jsonl",
        "{\"text\": \"x\", \"label\": 1}\n{\"text\": \"x\"}\n",
    );
    let err = parse_jsonl(&bad, 2).unwrap_err().to_string();
    assert!(err.contains("b.jsonl:2:") && err.contains("label"), "{err}");
    let range = write(&dir, "r.jsonl", "{\"text\": \"x\", \"label\": 2}\n");
    let err = parse_jsonl(&range, 2).unwrap_err().to_string();
    assert!(
        err.contains("r.jsonl:1:") && err.contains("outside 0..1"),
        "{err}"
    );
}

/// The text job's set as Debian's `fortunes` package ships it: every default category parses,
/// the classes are of comparable size, ≥ 2,000 examples in all, about a tenth held out.
#[test]
fn fortunes_categories_load_from_the_debian_package() {
    use gpuchain_trainer::data::fortunes::{DEFAULT_CATEGORIES, fortunes_dir, load_fortunes};
    let (train, eval) = load_fortunes(&fortunes_dir(), &DEFAULT_CATEGORIES)
        .expect("fortunes installed by scripts/setup");
    let total = train.len() + eval.len();
    let per_class: Vec<usize> = (0..4)
        .map(|c| train.iter().chain(&eval).filter(|e| e.label == c).count())
        .collect();
    println!(
        "fortunes {DEFAULT_CATEGORIES:?}: {total} examples ({} train, {} held out), per class {per_class:?}",
        train.len(),
        eval.len()
    );
    assert!(total >= 2000, "{total}");
    assert!(per_class.iter().all(|&n| n >= 500), "{per_class:?}");
    assert!(
        (total / 14..total / 7).contains(&eval.len()),
        "{}",
        eval.len()
    );
    assert!(train.iter().chain(&eval).all(|e| !e.text.contains('\u{8}')));
}
