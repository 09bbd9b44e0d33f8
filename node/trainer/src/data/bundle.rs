//! Dataset bundles: a job's training data and its eval data each travel as one blob, so a
//! split has one content address (BLAKE3 of the bundle) that the job can name and any peer can
//! serve.
//!
//! Layout (deterministic: the same files always give the same bytes, hence the same address):
//!
//! `b"gpuchain-bundle-v1"` ‖ entry count u32 ‖ entries sorted by name (byte order, no
//! duplicates), each `name len u32 ‖ name (UTF-8) ‖ data len u64 ‖ data`; integers
//! little-endian.
//!
//! Names are plain file names, because unpacking writes them into a directory: not empty, at
//! most [`MAX_NAME_LEN`] bytes, no `/`, `\`, `..` or NUL, and not `.`. Unpacking accepts only
//! that canonical form, so a bundle that unpacks re-packs to the same bytes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use super::fashion::{FASHION_EVAL_FILES, FASHION_TRAIN_FILES};
use crate::error::{Result, TrainerError};

pub const MAGIC: &[u8] = b"gpuchain-bundle-v1";

/// Leaves room under the usual 255-byte file-name limit for the temporary name used while
/// unpacking.
pub const MAX_NAME_LEN: usize = 200;

fn bad(reason: String) -> TrainerError {
    TrainerError::Bundle(reason)
}

/// Refuses names that could leave the target directory or that a file system would reject.
fn check_name(name: &str) -> Result<()> {
    let why = if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("is longer than 200 bytes")
    } else if name.contains('/') || name.contains('\\') {
        Some("contains a path separator")
    } else if name.contains("..") || name == "." {
        Some("contains `..` or is `.`")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else {
        None
    };
    match why {
        Some(why) => Err(bad(format!(
            "file name {name:?} {why}: bundles hold plain file names only"
        ))),
        None => Ok(()),
    }
}

/// Packs `(name, data)` pairs; the order given does not matter, duplicate names are refused.
pub fn pack_files(files: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let mut sorted: Vec<&(&str, &[u8])> = files.iter().collect();
    for (name, _) in &sorted {
        check_name(name)?;
    }
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(bad(format!("file name {:?} appears twice", w[0].0)));
    }
    let count = u32::try_from(sorted.len())
        .map_err(|_| bad(format!("{} files do not fit a u32 count", sorted.len())))?;
    let size = MAGIC.len()
        + 4
        + sorted
            .iter()
            .map(|(n, d)| 4 + n.len() + 8 + d.len())
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&count.to_le_bytes());
    for (name, data) in sorted {
        // check_name bounds the name at MAX_NAME_LEN bytes, so it fits a u32.
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// Packs the files `names` of `dir`, e.g. [`FASHION_TRAIN_FILES`] of the dataset directory.
pub fn pack_dir_files(dir: &Path, names: &[&str]) -> Result<Vec<u8>> {
    // Checked before any read, so a name cannot reach outside `dir`.
    for name in names {
        check_name(name)?;
    }
    let mut contents = Vec::with_capacity(names.len());
    for name in names {
        let path = dir.join(name);
        let data = fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                TrainerError::Missing {
                    what: "file to bundle",
                    path: path.clone(),
                    hint: format!(
                        "put {name} in {} or pack from the directory that holds it (for \
                         Fashion-MNIST: run scripts/setup, or set GPUCHAIN_FASHION_MNIST_DIR)",
                        dir.display()
                    ),
                }
            } else {
                TrainerError::io(&path, e)
            }
        })?;
        contents.push(data);
    }
    let files: Vec<(&str, &[u8])> = names
        .iter()
        .zip(&contents)
        .map(|(n, d)| (*n, d.as_slice()))
        .collect();
    pack_files(&files)
}

/// Parses a bundle without writing anything: its entries in order, borrowing their data.
/// Refuses anything but the canonical layout (see the module docs) and never allocates more
/// than the input's length.
pub fn unpack_entries(bytes: &[u8]) -> Result<Vec<(&str, &[u8])>> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(MAGIC.len(), "the magic")? != MAGIC {
        return Err(bad(format!(
            "does not start with {:?}",
            String::from_utf8_lossy(MAGIC)
        )));
    }
    let count = r.u32("the entry count")?;
    // No capacity from `count`: it is untrusted, and each entry pushed consumed ≥ 13 bytes.
    let mut entries: Vec<(&str, &[u8])> = Vec::new();
    for i in 0..count {
        let name_len = r.u32("a name length")? as usize;
        let name = std::str::from_utf8(r.take(name_len, "a name")?)
            .map_err(|_| bad(format!("entry {i}'s name is not UTF-8")))?;
        check_name(name)?;
        if let Some((prev, _)) = entries.last()
            && *prev >= name
        {
            return Err(bad(format!(
                "entry {name:?} follows {prev:?}: names must be sorted and distinct"
            )));
        }
        let len = r.u64("a data length")?;
        let len =
            usize::try_from(len).map_err(|_| bad(format!("entry {name:?} claims {len} bytes")))?;
        let data = r.take(len, "file data")?;
        entries.push((name, data));
    }
    if r.remaining() != 0 {
        return Err(bad(format!(
            "{} bytes follow the last of its {count} entries",
            r.remaining()
        )));
    }
    Ok(entries)
}

/// Unpacks a bundle into `dir` (created if missing) and returns the names written, sorted.
/// The whole bundle is checked before the first write, so a malformed one writes nothing; each
/// file appears atomically (temporary file, then rename), so a reader of `dir` never sees a
/// half-written file and an existing file is replaced whole.
pub fn unpack_to_dir(bytes: &[u8], dir: &Path) -> Result<Vec<String>> {
    let entries = unpack_entries(bytes)?;
    fs::create_dir_all(dir).map_err(|e| TrainerError::io(dir, e))?;
    let mut names = Vec::with_capacity(entries.len());
    for (name, data) in entries {
        write_atomic(dir, name, data)?;
        names.push(name.to_string());
    }
    Ok(names)
}

fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    // Unique per process and call, so concurrent unpacks into one directory do not collide.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp: PathBuf = dir.join(format!(".{name}.{}.{n}.part", std::process::id()));
    let dest = dir.join(name);
    let written = (|| {
        let mut f = fs::File::create_new(&tmp)?;
        f.write_all(data)?;
        // Durable before the rename makes it visible, or a crash could leave a short file
        // under the real name.
        f.sync_all()?;
        fs::rename(&tmp, &dest)
    })();
    written.map_err(|e| {
        // Best effort: the error that matters is the one returned.
        let _ = fs::remove_file(&tmp);
        TrainerError::io(&dest, e)
    })
}

/// A bounds-checked cursor: every read names what it was reading when the input ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(bad(format!(
                "truncated: {what} needs {n} bytes at offset {}, {} remain",
                self.at,
                self.remaining()
            )));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        pack_files(&[("b.txt", b"bee"), ("a.bin", &[0, 1, 2]), ("empty", b"")]).unwrap()
    }

    #[test]
    fn layout_is_the_documented_one() {
        let got = pack_files(&[("zz", b"Z"), ("a", b"xy")]).unwrap();
        let mut want = b"gpuchain-bundle-v1".to_vec();
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(b"a");
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"xy");
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(b"zz");
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(b"Z");
        assert_eq!(got, want);
        // Input order does not change the bytes.
        assert_eq!(got, pack_files(&[("a", b"xy"), ("zz", b"Z")]).unwrap());
    }

    #[test]
    fn unpack_round_trips_and_replaces_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("b.txt"), b"old contents, longer").unwrap();
        let names = unpack_to_dir(&sample(), dir.path()).unwrap();
        assert_eq!(names, ["a.bin", "b.txt", "empty"]);
        assert_eq!(fs::read(dir.path().join("a.bin")).unwrap(), [0, 1, 2]);
        assert_eq!(fs::read(dir.path().join("b.txt")).unwrap(), b"bee");
        assert_eq!(fs::read(dir.path().join("empty")).unwrap(), b"");
        // No temporary files left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 3);
        // Re-packing the unpacked directory gives the same bytes (same content address).
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(pack_dir_files(dir.path(), &refs).unwrap(), sample());
    }

    #[test]
    fn unpack_creates_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("x").join("y");
        unpack_to_dir(&sample(), &sub).unwrap();
        assert!(sub.join("a.bin").is_file());
    }

    #[test]
    fn unsafe_names_are_refused_both_ways() {
        let long = "n".repeat(MAX_NAME_LEN + 1);
        for name in [
            "", ".", "..", "../x", "a/b", "/abs", "a\\b", "a..b", "nul\0", &long,
        ] {
            let e = pack_files(&[(name, b"x")]).unwrap_err();
            assert!(matches!(e, TrainerError::Bundle(_)), "{name:?}: {e}");
            assert!(
                pack_dir_files(Path::new("/nonexistent"), &[name])
                    .unwrap_err()
                    .to_string()
                    .contains("plain file names"),
                "{name:?}"
            );
            // Hand-built bundle carrying the name: unpack must refuse and write nothing.
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&(name.len() as u32).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&1u64.to_le_bytes());
            b.push(b'x');
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("out");
            assert!(unpack_to_dir(&b, &target).is_err(), "{name:?}");
            assert!(!target.exists(), "{name:?}");
        }
        assert!(pack_files(&[("a..", b"x")]).is_err());
        assert!(pack_files(&[(".hidden", b"x"), ("x.gz", b"x")]).is_ok());
    }

    #[test]
    fn duplicates_and_disorder_are_refused() {
        let e = pack_files(&[("a", b"1"), ("b", b"2"), ("a", b"3")]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        // Swap the two entries of a valid bundle: same content, not canonical.
        let one = |name: &str, data: &[u8]| {
            let mut v = (name.len() as u32).to_le_bytes().to_vec();
            v.extend_from_slice(name.as_bytes());
            v.extend_from_slice(&(data.len() as u64).to_le_bytes());
            v.extend_from_slice(data);
            v
        };
        for (first, second) in [
            (one("b", b"2"), one("a", b"1")),
            (one("a", b"1"), one("a", b"2")),
        ] {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&2u32.to_le_bytes());
            b.extend(first);
            b.extend(second);
            let e = unpack_entries(&b).unwrap_err();
            assert!(e.to_string().contains("sorted and distinct"), "{e}");
        }
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error() {
        let good = sample();
        assert!(unpack_entries(&good).is_ok());
        for n in 0..good.len() {
            let e = unpack_entries(&good[..n]).unwrap_err();
            assert!(matches!(e, TrainerError::Bundle(_)), "prefix {n}: {e}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(
            unpack_entries(&trailing)
                .unwrap_err()
                .to_string()
                .contains("follow")
        );
        let mut magic = good.clone();
        magic[0] ^= 1;
        assert!(
            unpack_entries(&magic)
                .unwrap_err()
                .to_string()
                .contains("start")
        );
        let at_count = MAGIC.len();
        let at_first_len = at_count + 4;
        // Huge counts and lengths fail on the missing bytes instead of allocating.
        for (at, width) in [(at_count, 4), (at_first_len, 4), (at_first_len + 4 + 5, 8)] {
            let mut huge = good.clone();
            huge[at..at + width].fill(0xff);
            let e = unpack_entries(&huge).unwrap_err();
            assert!(e.to_string().contains("truncated"), "{e}");
        }
        let mut utf8 = good.clone();
        utf8[at_first_len + 4] = 0xff;
        assert!(
            unpack_entries(&utf8)
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }

    #[test]
    fn a_missing_input_file_is_named_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("here"), b"1").unwrap();
        let e = pack_dir_files(dir.path(), &["here", "gone.gz"]).unwrap_err();
        let TrainerError::Missing { path, hint, .. } = &e else {
            panic!("expected Missing, got {e}");
        };
        assert_eq!(path, &dir.path().join("gone.gz"));
        assert!(hint.contains("gone.gz"), "{hint}");
    }
}
