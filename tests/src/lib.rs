//! Cross-crate end-to-end tests live in `tests/`; what several of them share is here.

use std::path::{Path, PathBuf};

/// An empty run folder `e2e-<tag>` under `tmp` (the test's `CARGO_TARGET_TMPDIR`), emptied
/// first so a run never reads the files of the one before.
pub fn run_dir(tmp: &str, tag: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(tmp).join(format!("e2e-{tag}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
