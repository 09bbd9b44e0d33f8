//! The text job's labelled set: quotations from Debian's `fortunes` package, one file per
//! category (`/usr/share/games/fortunes/computers`, `…/politics`, …), each a list of entries
//! separated by lines holding only `%`. The label is the category the package files the
//! quotation under, a property of the text that a classifier can learn.
//!
//! The held-out split is a function of the text alone (BLAKE3 of it), so it needs no seed,
//! never changes with the categories picked, and a quotation filed twice lands in one split.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::text::TextExample;
use crate::error::{Result, TrainerError};

/// Where Debian's `fortunes` package installs the files (`scripts/setup` installs it).
pub const DEFAULT_FORTUNES_DIR: &str = "/usr/share/games/fortunes";
/// Overrides [`DEFAULT_FORTUNES_DIR`].
pub const FORTUNES_DIR_ENV: &str = "GPUCHAIN_FORTUNES_DIR";
/// The text job's default classes: four topics with 630–1,050 quotations each.
pub const DEFAULT_CATEGORIES: [&str; 4] = ["computers", "politics", "science", "work"];
/// One quotation in this many is held out for the quality test.
pub const HELD_OUT_ONE_IN: u64 = 10;
/// Longest quotation accepted, in bytes: the package's longest is a few kB; anything far
/// beyond is not a fortune file.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// `GPUCHAIN_FORTUNES_DIR`, else [`DEFAULT_FORTUNES_DIR`].
pub fn fortunes_dir() -> PathBuf {
    std::env::var_os(FORTUNES_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_FORTUNES_DIR))
}

fn bad(path: &Path, line: usize, reason: impl Into<String>) -> TrainerError {
    TrainerError::BadData {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

/// The entries of one fortune file, each labelled `label`. Overstrikes (`x\bx`, the files'
/// old bold/underline) are applied and other control characters but tab and newline dropped;
/// a file that is not UTF-8, holds an empty entry or an oversized one is refused with its line.
pub fn parse_fortunes(path: &Path, label: u32) -> Result<Vec<TextExample>> {
    let bytes = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TrainerError::Missing {
                what: "fortune category file",
                path: path.to_path_buf(),
                hint: "install Debian's `fortunes` package (scripts/setup does), or pick a \
                       category that exists there"
                    .into(),
            }
        } else {
            TrainerError::io(path, e)
        }
    })?;
    let mut out = Vec::new();
    let mut entry = String::new();
    let mut entry_start = 1;
    let mut finish = |entry: &mut String, line: usize, start: usize| -> Result<()> {
        let text = entry.trim();
        if text.is_empty() {
            return Err(bad(
                path,
                line,
                format!("the entry starting at line {start} is empty (two `%` lines in a row?)"),
            ));
        }
        out.push(TextExample {
            text: text.to_string(),
            label,
        });
        entry.clear();
        Ok(())
    };
    let mut n = 0;
    for raw in bytes.split(|&b| b == b'\n') {
        n += 1;
        let line = std::str::from_utf8(raw)
            .map_err(|e| bad(path, n, format!("not UTF-8 ({e}): is this a fortune file?")))?;
        if line == "%" {
            finish(&mut entry, n, entry_start)?;
            entry_start = n + 1;
            continue;
        }
        if !entry.is_empty() {
            entry.push('\n');
        }
        for c in line.chars() {
            match c {
                '\u{8}' => {
                    entry.pop();
                }
                '\t' => entry.push(c),
                c if c.is_control() => {}
                c => entry.push(c),
            }
        }
        if entry.len() > MAX_ENTRY_BYTES {
            return Err(bad(
                path,
                n,
                format!("the entry starting at line {entry_start} exceeds {MAX_ENTRY_BYTES} bytes"),
            ));
        }
    }
    // The last entry has no `%` after it; a file ending in `%` has nothing left.
    if !entry.trim().is_empty() {
        finish(&mut entry, n, entry_start)?;
    }
    if out.is_empty() {
        return Err(bad(path, 0, "no entries"));
    }
    Ok(out)
}

/// Whether a quotation belongs to the held-out (eval) split.
pub fn is_held_out(text: &str) -> bool {
    let h = blake3::hash(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(first) % HELD_OUT_ONE_IN == 0
}

/// The training and held-out examples of `categories` (label = position in the list), in
/// category then file order. A quotation filed under two categories has no single label and
/// is left out; one filed twice under the same category is kept once.
pub fn load_fortunes(
    dir: &Path,
    categories: &[&str],
) -> Result<(Vec<TextExample>, Vec<TextExample>)> {
    let mut all = Vec::new();
    for (label, cat) in categories.iter().enumerate() {
        // A name with a separator could read outside the package's folder.
        if cat.is_empty() || cat.contains(['/', '\\', '.']) {
            return Err(TrainerError::Spec {
                field: "categories",
                reason: format!("{cat:?} is not a fortune category name"),
            });
        }
        let label = u32::try_from(label).map_err(|_| TrainerError::Spec {
            field: "categories",
            reason: "too many".into(),
        })?;
        all.extend(parse_fortunes(&dir.join(cat), label)?);
    }
    let mut labels: HashMap<&str, Vec<u32>> = HashMap::new();
    for ex in &all {
        let l = labels.entry(ex.text.as_str()).or_default();
        if !l.contains(&ex.label) {
            l.push(ex.label);
        }
    }
    let keep: Vec<bool> = {
        let mut seen = std::collections::HashSet::new();
        all.iter()
            .map(|ex| labels[ex.text.as_str()].len() == 1 && seen.insert(ex.text.as_str()))
            .collect()
    };
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (ex, keep) in all.iter().zip(keep) {
        if !keep {
            continue;
        }
        if is_held_out(&ex.text) {
            eval.push(ex.clone());
        } else {
            train.push(ex.clone());
        }
    }
    Ok((train, eval))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).expect("write");
        p
    }

    #[test]
    fn entries_are_split_on_percent_lines_and_overstrikes_applied() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "science",
            b"One.\n%\nTwo\n\tlines.\n%\n_\x08B_\x08o_\x08l_\x08d\x07 text\n",
        );
        let ex = parse_fortunes(&p, 2).expect("parse");
        let texts: Vec<&str> = ex.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(texts, ["One.", "Two\n\tlines.", "Bold text"]);
        assert!(ex.iter().all(|e| e.label == 2));
        // A trailing `%` adds no empty entry.
        let p = write(dir.path(), "law", b"A\n%\nB\n%\n");
        assert_eq!(parse_fortunes(&p, 0).expect("parse").len(), 2);
    }

    #[test]
    fn malformed_files_are_refused_with_file_and_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let cases: [(&str, &[u8], &str); 4] = [
            (
                "twice",
                b"A\n%\n%\nB\n",
                ":3: the entry starting at line 3 is empty",
            ),
            ("binary", b"A\n%\nB\xff\xfe\n", ":3: not UTF-8"),
            ("empty", b"", "no entries"),
            ("blank", b"\n  \n", "no entries"),
        ];
        for (name, body, want) in cases {
            let p = write(dir.path(), name, body);
            let e = parse_fortunes(&p, 0).expect_err(name).to_string();
            assert!(e.contains(name) && e.contains(want), "{name}: {e}");
        }
        let e = parse_fortunes(&dir.path().join("absent"), 0)
            .expect_err("missing")
            .to_string();
        assert!(e.contains("fortunes"), "{e}");
        let big = format!("{}\n", "x".repeat(MAX_ENTRY_BYTES + 1));
        let p = write(dir.path(), "huge", big.as_bytes());
        let e = parse_fortunes(&p, 0).expect_err("huge").to_string();
        assert!(e.contains("exceeds"), "{e}");
    }

    #[test]
    fn ambiguous_quotations_are_dropped_and_the_split_follows_the_text() {
        let dir = tempfile::tempdir().expect("tmp");
        let a: String = (0..60).map(|i| format!("alpha {i}\n%\n")).collect();
        let b: String = (0..60).map(|i| format!("beta {i}\n%\n")).collect();
        write(
            dir.path(),
            "a",
            format!("{a}shared\n%\nalpha 0\n").as_bytes(),
        );
        write(dir.path(), "b", format!("{b}shared\n").as_bytes());
        let (train, eval) = load_fortunes(dir.path(), &["a", "b"]).expect("load");
        assert_eq!(train.len() + eval.len(), 120);
        assert!(train.iter().chain(&eval).all(|e| e.text != "shared"));
        assert!(eval.iter().all(|e| is_held_out(&e.text)));
        assert!(train.iter().all(|e| !is_held_out(&e.text)));
        assert!(!eval.is_empty(), "120 texts and none held out");
        let e = load_fortunes(dir.path(), &["a", "../b"]).expect_err("path");
        assert!(e.to_string().contains("category"), "{e}");
    }
}
