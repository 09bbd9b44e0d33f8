//! The dashboard in a real headless Chromium (Debian's `chromium` through `chromium-driver`):
//! a replay of the recorded 4 Nov run, whose scrubber must land on the step the record says;
//! and a live local testnet, where the page must hold every step the providers logged, list
//! the run in order, show the money the chain shows, and show the detection and the new
//! epoch after its own "kill" button is pressed. Each writes screenshots to its run folder.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use gpuchain_testnet::browser::Browser;
use gpuchain_testnet::record::{RecordLine, read_record};
use gpuchain_testnet::{NodeEvent, binary};
use serde_json::{Value, json};

fn run_dir(tag: &str) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{tag}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The recorded run the product page replays.
fn recorded_run() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/runs/4nov/record.jsonl")
}

/// Steps trained per node, as the record has them (a `first_step` line and the `step` line
/// of the same step are one step).
fn steps_per_node(record: &[RecordLine]) -> std::collections::BTreeMap<String, usize> {
    let mut m: std::collections::BTreeMap<String, std::collections::BTreeSet<(u64, u64)>> =
        Default::default();
    for l in record {
        if let Some(NodeEvent::Step { epoch, step, .. } | NodeEvent::FirstStep { epoch, step, .. }) =
            l.node_event()
        {
            m.entry(l.node.clone()).or_default().insert((*epoch, *step));
        }
    }
    m.into_iter().map(|(n, s)| (n, s.len())).collect()
}

/// The step of the last step event at or before `t_us`.
fn step_at(record: &[RecordLine], t_us: u64) -> u64 {
    record
        .iter()
        .take_while(|l| l.timestamp_us <= t_us)
        .filter_map(|l| match l.node_event() {
            Some(NodeEvent::Step { step, .. } | NodeEvent::FirstStep { step, .. }) => Some(*step),
            _ => None,
        })
        .last()
        .unwrap_or(0)
}

/// The page's legend: points per provider curve.
const LEGEND: &str = "return Object.fromEntries([...document.querySelectorAll('#legend .legend')].map(e => [e.dataset.provider, Number(e.dataset.points)]));";

/// Kills the replay server when the test ends, passing or not.
struct Server(std::process::Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_scrubs_to_the_recorded_step() -> Result<()> {
    let dir = run_dir("dashboard-replay")?;
    let record_path = recorded_run();
    let record = read_record(&record_path)?;
    let mut child = Command::new(binary()?)
        .args(["dashboard", "--listen", "127.0.0.1:0", "--replay"])
        .arg(&record_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start gpuchain dashboard")?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let _server = Server(child);
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first)?;
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or_else(|| anyhow!("no URL in {first:?}"))?
        .to_string();

    let b = Browser::start(1400, 1100).await?;
    b.goto(&url).await?;
    b.wait_for(
        "the whole record",
        "return window.gpuchainDashboard && window.gpuchainDashboard.ready() && window.gpuchainDashboard.lines()",
        Duration::from_secs(30),
    )
    .await?;
    let lines = b.eval("return window.gpuchainDashboard.lines()", json!([])).await?;
    assert_eq!(lines, json!(record.len()), "the page holds every line of the record");

    let t0 = record[0].timestamp_us;
    let end_ms = (record[record.len() - 1].timestamp_us - t0) / 1000;
    // Forwards, backwards and to the end: the scrubber lands on the step the record says.
    for ms in [end_ms / 3, end_ms / 2, end_ms / 5, end_ms * 4 / 5, end_ms] {
        let shown = b
            .eval(
                "const s = document.getElementById('scrub'); s.value = String(arguments[0]); s.dispatchEvent(new Event('input')); return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(document.getElementById('now-step').textContent))));",
                json!([ms]),
            )
            .await?;
        let want = step_at(&record, t0 + ms * 1000);
        assert_eq!(shown, json!(want.to_string()), "scrubbed to {ms} ms");
        if ms == end_ms / 2 {
            b.screenshot(&dir.join("replay-mid.png")).await?;
        }
    }
    // At the end the chart holds every step each provider logged.
    let legend = b.eval(LEGEND, json!([])).await?;
    let want: Value = steps_per_node(&record)
        .into_iter()
        .map(|(n, c)| (n, json!(c)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    assert_eq!(legend, want, "points per provider");
    b.screenshot(&dir.join("replay-end.png")).await?;
    Ok(())
}
