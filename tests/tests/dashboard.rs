//! The dashboard in a real headless Chromium (Debian's `chromium` through `chromium-driver`):
//! a replay of the recorded 4 Nov run, whose scrubber must land on the step the record says;
//! and a live local testnet, where the page must hold every step the providers logged, list
//! the run in order, show the money the chain shows, and show the detection and the new
//! epoch after its own "kill" button is pressed. Each writes screenshots to its run folder.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use gpuchain_testnet::browser::Browser;
use gpuchain_testnet::record::{RecordLine, read_record};
use gpuchain_testnet::{NodeEvent, binary};
use serde_json::{Value, json};

fn run_dir(tag: &str) -> Result<PathBuf> {
    gpuchain_e2e::run_dir(env!("CARGO_TARGET_TMPDIR"), tag)
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
        if let Some(
            NodeEvent::Step { epoch, step, .. } | NodeEvent::FirstStep { epoch, step, .. },
        ) = l.node_event()
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
    let lines = b
        .eval("return window.gpuchainDashboard.lines()", json!([]))
        .await?;
    assert_eq!(
        lines,
        json!(record.len()),
        "the page holds every line of the record"
    );

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

const STEPS: u64 = 120;
const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 120
checkpoint_interval = 20
eval_examples = 300
"#;

/// Texts of the page's timeline, in the order shown, with their times.
const TIMELINE: &str = "return [...document.querySelectorAll('#timeline li')].map(li => [Number(li.dataset.t), li.textContent]);";
/// The money rows: key → base units.
const MONEY: &str = "return Object.fromEntries([...document.querySelectorAll('#money tr')].map(r => [r.dataset.key, r.dataset.base]));";

fn timeline_has(needle: &str) -> String {
    format!(
        "return [...document.querySelectorAll('#timeline li')].some(li => li.textContent.includes({}));",
        json!(needle)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_live_page_follows_the_run_and_its_kill_button_fails_a_provider_over() -> Result<()> {
    use gpuchain_testnet::{ChainOpts, JobSubmission, Testnet, U256, USDC, event_is};

    let dir = run_dir("dashboard-live")?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    let dash = net.serve_dashboard("e2e").await?;
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for v in ["v1", "v2"] {
        let spec = net.role_spec(v, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    for (name, price) in [("A", "0.001"), ("B", "0.002"), ("C", "0.003")] {
        let spec = net
            .role_spec(name, "provider")?
            .arg("--price-per-step")
            .arg(price)
            .arg("--test-cheat-control");
        net.spawn(spec).await?;
        net.stake(name, U256::from(100 * USDC)).await?;
    }
    net.wait_mesh("client").await?;
    let job_file = dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    let job = net
        .submit_job(
            "client",
            &JobSubmission {
                file: job_file,
                budget: "1".into(),
                max_price: "0.003".into(),
                committee: 2,
                quorum: 2,
                verifier_fee: "0.001".into(),
                deadline_secs: 3600,
                grace_secs: 600,
            },
        )
        .await?;

    let b = Browser::start(1400, 1300).await?;
    b.goto(&dash.url()).await?;
    // A trains, and its first checkpoint is decided, on the page.
    b.wait_for(
        "A's first accepted checkpoint",
        &timeline_has("A paid"),
        Duration::from_secs(240),
    )
    .await?;

    // The controls act only with the token and only for this page's origin; the views
    // are open on loopback.
    let http = reqwest::Client::new();
    let view = dash.view_url();
    let info = http.get(format!("{view}info")).send().await?;
    assert_eq!(info.status(), 200, "the views need no token on loopback");
    let body = json!({ "node": "A", "action": "freeze" });
    let no_token = http.post(format!("{view}break")).json(&body).send().await?;
    assert_eq!(no_token.status(), 401, "a control without the token");
    let foreign = http
        .post(format!("{view}break"))
        .bearer_auth(&dash.token)
        .header("origin", "http://evil.example")
        .json(&body)
        .send()
        .await?;
    assert_eq!(foreign.status(), 403, "a control from a foreign origin");
    assert!(
        net.node("A")?.is_running(),
        "A untouched by the refused requests"
    );

    b.click(r#"button[data-node="A"][data-action="kill"]"#)
        .await?;
    b.wait_for(
        "the result of the kill",
        "return document.getElementById('break-result').textContent.includes('killed')",
        Duration::from_secs(10),
    )
    .await?;
    b.wait_for("A lost", &timeline_has("A lost"), Duration::from_secs(30))
        .await?;
    b.wait_for(
        "the new epoch on B",
        &timeline_has("epoch 2: B assigned"),
        Duration::from_secs(60),
    )
    .await?;
    b.screenshot(&dir.join("live-after-kill.png")).await?;

    // B's next checkpoint is junk, from its button: refused on the page, C takes over.
    b.click(r#"button[data-node="B"][data-action="cheat_junk"]"#)
        .await?;
    b.wait_for(
        "B's junk refused",
        "return [...document.querySelectorAll('#timeline li')].some(li => li.textContent.includes(\"B's checkpoint at step\") && li.textContent.includes('refused'))",
        Duration::from_secs(120),
    )
    .await?;
    b.wait_for(
        "the new epoch on C",
        &timeline_has("epoch 3: C assigned"),
        Duration::from_secs(60),
    )
    .await?;
    let junk = b
        .eval(
            "return document.getElementById('fig-junk-how').textContent",
            json!([]),
        )
        .await?;
    assert_eq!(junk, json!("1 of 1 cheating checkpoints refused, 0 paid"));
    let notice = b
        .eval(
            "return document.getElementById('fig-notice').textContent",
            json!([]),
        )
        .await?;
    assert!(
        notice.as_str().is_some_and(|s| s.ends_with(" ms")),
        "time to notice shown: {notice}"
    );

    net.wait_event("client", event_is!(ChainSettled), Duration::from_secs(300))
        .await?;
    b.wait_for(
        "the budget accounted for",
        "return document.getElementById('identity').dataset.holds === 'true'",
        Duration::from_secs(30),
    )
    .await?;

    // Every money figure is the chain's.
    let c = net.chain()?;
    let money = c.deployer().job_money(job, c.deploy_block()).await?;
    let page = b.eval(MONEY, json!([])).await?;
    let addr = |n: &str| net.node(n).map(|p| p.eth_address());
    for (key, want) in [
        ("paid:A", money.paid_to(addr("A")?)),
        ("paid:B", money.paid_to(addr("B")?)),
        ("paid:C", money.paid_to(addr("C")?)),
        (
            "slashed:B",
            money.slashed.get(&addr("B")?).copied().unwrap_or_default(),
        ),
        ("fees", money.fees_total()),
        ("fees:v1", money.fees_to(addr("v1")?)),
        ("fees:v2", money.fees_to(addr("v2")?)),
        ("refund", money.refunded),
        ("budget", money.deposit),
        ("held", money.remaining),
    ] {
        assert_eq!(
            page[key],
            json!(want.to_string()),
            "{key} on the page vs the chain"
        );
    }
    assert!(money.paid_to(addr("A")?) > U256::ZERO && money.paid_to(addr("C")?) > U256::ZERO);
    assert!(
        money
            .slashed
            .get(&addr("B")?)
            .is_some_and(|s| *s > U256::ZERO),
        "B slashed"
    );

    // The chart holds every step each provider logged; the timeline is the run in order.
    let record_path = gpuchain_testnet::record::write_record(&net, &dir, &[])?;
    let record = read_record(&record_path)?;
    let want: Value = steps_per_node(&record)
        .into_iter()
        .map(|(n, c)| (n, json!(c)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let legend = b.wait_for(
        "every step in the chart",
        &format!("const l = (() => {{ {LEGEND} }})(); return JSON.stringify(l) === JSON.stringify({want}) && l;"),
        Duration::from_secs(10),
    )
    .await
    .with_context(|| format!("want {want}"))?;
    assert_eq!(legend, want);
    let trained: usize = steps_per_node(&record).values().sum();
    assert!(trained as u64 >= STEPS, "{trained} steps trained in all");

    let timeline = b.eval(TIMELINE, json!([])).await?;
    let items = timeline.as_array().ok_or_else(|| anyhow!("no timeline"))?;
    let times: Vec<f64> = items.iter().filter_map(|i| i[0].as_f64()).collect();
    ensure!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "timeline out of time order: {times:?}"
    );
    let text: Vec<&str> = items.iter().filter_map(|i| i[1].as_str()).collect();
    let pos = |needle: &str| {
        text.iter()
            .position(|t| t.contains(needle))
            .ok_or_else(|| anyhow!("the timeline lacks {needle:?}: {text:#?}"))
    };
    let order = [
        pos("committee drawn")?,
        pos("epoch 1: A assigned")?,
        pos("A paid")?,
        pos("A killed")?,
        pos("A lost")?,
        pos("epoch 2: B assigned")?,
        pos("B told to cheat: junk")?,
        pos("B's checkpoint at step")?,
        pos("epoch 3: C assigned")?,
        pos("C paid")?,
        pos("final model accepted")?,
        pos("settled")?,
    ];
    ensure!(
        order.windows(2).all(|w| w[0] < w[1]),
        "events out of order: {order:?} in {text:#?}"
    );
    b.screenshot(&dir.join("live-end.png")).await?;

    // The client's own dashboard, on its control API: its job as it heard it (the
    // providers' heartbeats, the chain), no token needed on loopback.
    b.goto(&format!(
        "http://{}/dashboard/",
        net.node("client")?.api_addr()
    ))
    .await?;
    b.wait_for(
        "the client's job on its own page",
        "return window.gpuchainDashboard && window.gpuchainDashboard.ready() && [...document.querySelectorAll('#legend .legend')].some(e => Number(e.dataset.points) > 0) && [...document.querySelectorAll('#timeline li')].some(li => li.textContent.includes('settled'))",
        Duration::from_secs(20),
    )
    .await?;
    b.screenshot(&dir.join("client-own.png")).await?;
    net.stop_all().await;
    Ok(())
}

/// The page open on a long `testnet up`-like run does not grow without bound: 400-step jobs
/// back to back, providers heartbeating ten times a second, the DOM size and the page's JS
/// heap (after a gc) sampled every 30 s and printed. `GPUCHAIN_DASHBOARD_SOAK_MINUTES`
/// (default 30) sets how long. Run with
/// `cargo test -p gpuchain-e2e --test dashboard -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a 30-minute soak; run by name (see the README)"]
async fn the_page_stays_bounded_over_a_long_run() -> Result<()> {
    use std::time::Instant;

    use gpuchain_testnet::{ChainOpts, JobSubmission, Testnet, U256, USDC, event_is};

    let minutes: u64 = std::env::var("GPUCHAIN_DASHBOARD_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    let dir = run_dir("dashboard-soak")?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    let dash = net.serve_dashboard("soak").await?;
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for v in ["v1", "v2"] {
        let spec = net.role_spec(v, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    let spec = net
        .role_spec("A", "provider")?
        .arg("--price-per-step")
        .arg("0.0001");
    net.spawn(spec).await?;
    net.stake("A", U256::from(100 * USDC)).await?;
    net.wait_mesh("client").await?;
    let job_file = dir.join("job.toml");
    std::fs::write(
        &job_file,
        "model = \"fashion-cnn\"\ntotal_steps = 400\ncheckpoint_interval = 50\neval_examples = 300\n",
    )?;
    let submission = JobSubmission {
        file: job_file,
        budget: "1".into(),
        max_price: "0.0001".into(),
        committee: 2,
        quorum: 2,
        verifier_fee: "0.001".into(),
        deadline_secs: 3600,
        grace_secs: 600,
    };

    let b = Browser::start(1400, 1300).await?;
    b.goto(&dash.url()).await?;
    const SAMPLE: &str = "if (window.gc) window.gc(); return [document.getElementsByTagName('*').length, performance.memory ? performance.memory.usedJSHeapSize : 0, window.gpuchainDashboard.lines()];";
    let start = Instant::now();
    let mut jobs = 0u32;
    let mut samples: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut next_sample = Instant::now();
    let mut running: Option<std::time::SystemTime> = None;
    while start.elapsed() < Duration::from_secs(minutes * 60) {
        let settled = match running {
            None => true,
            Some(since) => net
                .node("client")?
                .events()?
                .iter()
                .any(|e| e.at >= since && event_is!(ChainSettled)(e)),
        };
        if settled {
            running = Some(std::time::SystemTime::now());
            net.submit_job("client", &submission).await?;
            jobs += 1;
        }
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(30);
            let v = b.eval(SAMPLE, json!([])).await?;
            let s = (
                start.elapsed().as_secs(),
                v[0].as_u64().unwrap_or(0),
                v[1].as_u64().unwrap_or(0),
                v[2].as_u64().unwrap_or(0),
            );
            println!(
                "t={:>5} s  jobs={jobs:>3}  DOM elements={:>5}  JS heap={:>6} KiB  lines folded={:>7}",
                s.0,
                s.1,
                s.2 / 1024,
                s.3
            );
            samples.push(s);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    b.screenshot(&dir.join("soak-end.png")).await?;
    let dom_max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let heap_max = samples.iter().map(|s| s.2).max().unwrap_or(0);
    println!(
        "{jobs} jobs in {minutes} min; DOM elements at most {dom_max}, JS heap at most {} KiB",
        heap_max / 1024
    );
    // The DOM is the page's tables and lists, each capped: a few thousand elements at most.
    ensure!(dom_max < 5_000, "the DOM grew to {dom_max} elements");
    Ok(())
}
