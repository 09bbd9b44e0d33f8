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

/// The shipped scenario files (`testnet/scenarios`).
pub fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testnet/scenarios")
}

/// Plays the shipped scenario `name` in a fresh run folder `<prefix>-<name>` under `tmp`
/// (the test's `CARGO_TARGET_TMPDIR`) and prints its report; the report and that folder.
pub async fn play_scenario(
    tmp: &str,
    prefix: &str,
    name: &str,
) -> anyhow::Result<(gpuchain_testnet::scenario::ScenarioReport, PathBuf)> {
    let dir = Path::new(tmp).join(format!("{prefix}-{name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let report = gpuchain_testnet::scenario::run(
        &scenarios_dir().join(format!("{name}.toml")),
        &dir,
        &gpuchain_testnet::binary()?,
    )
    .await?;
    println!("{}", report.text());
    Ok((report, dir))
}

/// The value named `name` in a report's (name, value) list.
pub fn value_of(list: &[(String, String)], name: &str) -> Option<String> {
    list.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}
