//! The detection bench: sixteen node processes on loopback (a client, three verifiers, twelve
//! providers) on a real anvil, two jobs training at all times, and N trials of each failure a
//! provider can have: kill -9, freeze (SIGSTOP) and a hung GPU (training stops, heartbeats go
//! on; armed through the provider's test control). For each kind it prints the detection
//! latency (fault → the client's `provider_lost`), the time from detection until training
//! again (the replacement starts training from the last accepted checkpoint, and it has
//! finished its first step), each failover leg by leg, p50 / p99 / max beside the targets,
//! and every false failover: a provider given up on that no trial touched. Figures are
//! printed, not asserted: timing on a shared host is a measurement, not a test. Run by name:
//!
//! ```text
//! cargo build -p gpuchain
//! cargo test -p gpuchain-e2e --test detection -- --ignored --nocapture detection_latency
//! ```
//!
//! A kill or a freeze strikes at a random moment within a heartbeat period (seeded; the seed
//! is printed and `GPUCHAIN_DETECTION_SEED` replays it), as a real fault does: the bench
//! decides to strike when a heartbeat's log line shows the job ready, so without it every
//! fault came right after a heartbeat, the worst moment, and the latency measured the whole
//! liveness floor. The report also prints the silence the client judged on (its last
//! heartbeat from the victim → the verdict): that is the latency of a fault at the worst
//! moment.
//!
//! `GPUCHAIN_DETECTION_TRIALS` sets the trials per kind (default 20);
//! `GPUCHAIN_DETECTION_KINDS` the kinds (default `kill,freeze,hang`);
//! `GPUCHAIN_DETECTION_FLOOR_MS=500` measures the client with a 500 ms liveness floor instead
//! of the default 300 (the harness keeps the caller's `GPUCHAIN_*` settings from the nodes, so
//! the bench passes it as `--detector-floor-ms`). The soak reads it too, and prints the
//! heartbeats the providers themselves reported sending late, beside each false failover.
//!
//! The false-failover soak is its companion: the same sixteen processes with no fault at all,
//! a job training on every core, and busy threads at normal priority on top (an extra CPU
//! hog); it prints every provider the client gave up on (each one a false failover) and the
//! heartbeat gaps the client saw.
//!
//! ```text
//! cargo test -p gpuchain-e2e --test detection -- --ignored --nocapture false_failover_soak
//! ```
//!
//! `GPUCHAIN_SOAK_MINUTES` sets its length (default 30), `GPUCHAIN_SOAK_HOGS` its busy
//! threads (default 1).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use gpuchain_testnet::{
    Address, ChainOpts, JobSubmission, LogTail, Logged, NodeEvent, Testnet, U256, USDC, after,
    binary, event_is,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

const PROVIDERS: usize = 12;
const VERIFIERS: usize = 3;
/// Jobs in trial at once; more keep training after their last trial.
const ACTIVE_JOBS: usize = 2;
/// Trials per job: each excludes its victim from that job for good, so a job stops being
/// used for trials well before it runs out of providers.
const TRIALS_PER_JOB: usize = 6;
const STEPS: u64 = 120;
/// The nodes' heartbeat period (their default): a kill or a freeze strikes at a uniformly
/// random moment within one.
const HEARTBEAT_PERIOD: Duration = Duration::from_millis(100);
/// Where in an interval a fault strikes (the step the client last heard): more than three
/// steps from a checkpoint on either side, as in every run of this bench so far, so figures
/// stay comparable (the stall rule no longer widens near a checkpoint, only while the
/// provider says it is making one). A hang lands a step or two after it is armed, so it is
/// armed early in that window.
fn away_from_checkpoints(kind: Kind) -> std::ops::RangeInclusive<u64> {
    match kind {
        Kind::Hang => 4..=4,
        Kind::Kill | Kind::Freeze => 4..=6,
    }
}
const INTERVAL: u64 = 10;
/// Heartbeats in the victim's epoch before a fault: the client's detector knows its rhythm
/// (8 gaps) by then.
const SETTLED_HEARTBEATS: usize = 15;
/// Steps the victim completed in its epoch before a fault: the client knows its step time
/// (3 samples) by then, and a hang is judged against it rather than the first step's floor.
const SETTLED_STEPS: usize = 5;
const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 120
checkpoint_interval = 10
eval_examples = 200

[quality]
min_accuracy = 0.1
after_step = 30
max_accuracy_drop = 0.3
"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Kill,
    Freeze,
    Hang,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Kill, Kind::Freeze, Kind::Hang];

    fn chosen() -> Result<Vec<Kind>> {
        let Ok(list) = std::env::var("GPUCHAIN_DETECTION_KINDS") else {
            return Ok(Self::ALL.to_vec());
        };
        list.split(',')
            .map(|k| match k.trim() {
                "kill" => Ok(Kind::Kill),
                "freeze" => Ok(Kind::Freeze),
                "hang" => Ok(Kind::Hang),
                other => bail!("GPUCHAIN_DETECTION_KINDS: {other:?} is not kill, freeze or hang"),
            })
            .collect()
    }
}

struct Trial {
    kind: Kind,
    job: String,
    epoch: u64,
    victim: String,
    detect: Duration,
    /// The victim's last heartbeat → the verdict, as the client reported it.
    silent: Duration,
    /// Fault → the replacement's first step; `None` when no replacement trained within a minute.
    again: Option<Duration>,
    reason: String,
    /// The victim's median step time before the fault, as the client saw it.
    step_time: Duration,
    /// Where the time from detection to the replacement's first step went.
    path: Option<Failover>,
}

/// Milestones of a failover, each from the detection (the client's `provider_lost`): the
/// client picks a standby bid, its `assign` is mined and its chain client reads it back, the
/// replacement's chain client reads it, the replacement starts training (its checkpoint
/// fetched, the job loaded) and finishes its first step.
#[derive(Clone, Copy, Debug)]
struct Failover {
    selected: Duration,
    assigned_at_client: Duration,
    assigned_at_replacement: Duration,
    started: Duration,
    first_step: Duration,
}

impl Failover {
    const LEGS: [&'static str; 5] = [
        "select",
        "assign mined",
        "replacement hears",
        "training starts",
        "first step",
    ];

    /// Each leg's length: from the milestone before (the detection for the first).
    fn legs(&self) -> [Duration; 5] {
        let at = [
            self.selected,
            self.assigned_at_client,
            self.assigned_at_replacement,
            self.started,
            self.first_step,
        ];
        let mut prev = Duration::ZERO;
        at.map(|t| {
            let leg = t.saturating_sub(prev);
            prev = prev.max(t);
            leg
        })
    }
}

/// One job as the client's log tells it.
#[derive(Default)]
struct JobView {
    epoch: u64,
    provider: String,
    /// Heartbeats of the current epoch: (when, step).
    beats: Vec<(SystemTime, u64)>,
    done: bool,
    trials: usize,
    /// The provider's reported starvation at its latest step advance.
    starved_at_advance: u64,
}

impl JobView {
    fn step(&self) -> u64 {
        self.beats.last().map_or(0, |b| b.1)
    }

    /// When the step advanced in the current epoch, as heartbeats told it.
    fn advances(&self) -> Vec<SystemTime> {
        let mut advances = Vec::new();
        let mut last = None;
        for (at, step) in &self.beats {
            if last.is_some_and(|l| *step > l) {
                advances.push(*at);
            }
            last = Some(*step);
        }
        advances
    }

    /// The median time between step advances in the current epoch.
    fn step_time(&self) -> Duration {
        let mut gaps: Vec<Duration> = self
            .advances()
            .windows(2)
            .filter_map(|w| w[1].duration_since(w[0]).ok())
            .collect();
        gaps.sort();
        gaps.get(gaps.len() / 2).copied().unwrap_or_default()
    }
}

/// The client's log, followed as it grows.
struct ClientView {
    tail: LogTail,
    jobs: BTreeMap<String, JobView>,
    lost: Vec<Logged>,
    assigned: Vec<Logged>,
    selected: Vec<Logged>,
    /// The most starvation a provider reported between two of its step advances: the
    /// largest credit the client's stall rule gave.
    most_starved_ms: u64,
}

impl ClientView {
    fn update(&mut self) {
        for e in self.tail.read_new() {
            match &e.event {
                NodeEvent::ChainAssigned {
                    job_id,
                    epoch,
                    provider,
                    ..
                } => {
                    let j = self.jobs.entry(job_id.clone()).or_default();
                    j.epoch = *epoch;
                    j.provider = provider.to_lowercase();
                    j.beats.clear();
                    self.assigned.push(e.clone());
                }
                NodeEvent::Heartbeat {
                    job_id,
                    epoch,
                    step,
                    starved_ms,
                    ..
                } => {
                    if let Some(j) = self.jobs.get_mut(job_id)
                        && j.epoch == *epoch
                    {
                        if *step > j.step() || j.beats.is_empty() {
                            j.starved_at_advance = *starved_ms;
                        }
                        self.most_starved_ms = self
                            .most_starved_ms
                            .max(starved_ms.saturating_sub(j.starved_at_advance));
                        j.beats.push((e.at, *step));
                    }
                }
                NodeEvent::ChainCompleted { job_id, .. }
                | NodeEvent::ChainExpired { job_id, .. } => {
                    self.jobs.entry(job_id.clone()).or_default().done = true;
                }
                NodeEvent::ProviderLost { .. } => self.lost.push(e.clone()),
                NodeEvent::ProviderSelected { .. } => self.selected.push(e.clone()),
                _ => {}
            }
        }
    }

    fn lost_in(&self, job: &str, epoch: u64) -> Option<&Logged> {
        self.lost.iter().find(|l| {
            matches!(&l.event, NodeEvent::ProviderLost { job_id, epoch: e, .. }
                if job_id == job && *e == epoch)
        })
    }

    /// When the client chose the provider of `epoch`, and when its chain client read the
    /// assignment.
    fn chosen_in(&self, job: &str, epoch: u64) -> Option<(SystemTime, SystemTime)> {
        let selected = self.selected.iter().find(|l| {
            matches!(&l.event, NodeEvent::ProviderSelected { job_id, epoch: e, .. }
                if job_id == job && *e == epoch)
        })?;
        let assigned = self.assigned.iter().find(|l| {
            matches!(&l.event, NodeEvent::ChainAssigned { job_id, epoch: e, .. }
                if job_id == job && *e == epoch)
        })?;
        Some((selected.at, assigned.at))
    }

    fn assigned_in(&self, job: &str, epoch: u64) -> Option<String> {
        self.assigned.iter().find_map(|l| match &l.event {
            NodeEvent::ChainAssigned {
                job_id,
                epoch: e,
                provider,
                ..
            } if job_id == job && *e == epoch => Some(provider.to_lowercase()),
            _ => None,
        })
    }
}

/// A positive count from the environment, or `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn trials_per_kind() -> usize {
    env_count("GPUCHAIN_DETECTION_TRIALS", 20)
}

fn amount(base_units: u64) -> String {
    format!("{}.{:06}", base_units / USDC, base_units % USDC)
}

async fn start(dir: &std::path::Path) -> Result<(Testnet, HashMap<String, String>)> {
    let mut net = Testnet::with_new_chain(dir, binary()?, ChainOpts::default()).await?;
    let mut spec = net.role_spec("client", "client")?;
    if let Ok(ms) = std::env::var("GPUCHAIN_DETECTION_FLOOR_MS") {
        spec = spec.arg("--detector-floor-ms").arg(ms);
    }
    net.spawn(spec).await?;
    for i in 1..=VERIFIERS {
        let spec = net.role_spec(&format!("v{i}"), "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    let mut names = HashMap::new();
    for i in 0..PROVIDERS {
        let name = format!("p{:02}", i + 1);
        let price = 1_000 + 500 * i as u64;
        let spec = net
            .role_spec(&name, "provider")?
            .arg("--price-per-step")
            .arg(amount(price))
            .arg("--test-cheat-control");
        net.spawn(spec).await?;
        net.stake(&name, U256::from(100 * USDC)).await?;
        let addr: Address = net.node(&name)?.eth_address();
        names.insert(addr.to_string().to_lowercase(), name);
    }
    net.wait_mesh("client").await?;
    Ok((net, names))
}

/// The sixteen processes in a fresh run folder named `name`, the job file, and the client's
/// log followed from the start.
async fn start_watched(
    name: &str,
) -> Result<(Testnet, HashMap<String, String>, PathBuf, ClientView)> {
    let dir: PathBuf = gpuchain_e2e::run_dir(env!("CARGO_TARGET_TMPDIR"), name)?;
    let (net, names) = start(&dir).await?;
    let job_file = dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    let view = ClientView {
        tail: LogTail::new(net.node("client")?.log_path()),
        jobs: BTreeMap::new(),
        lost: Vec::new(),
        assigned: Vec::new(),
        selected: Vec::new(),
        most_starved_ms: 0,
    };
    Ok((net, names, job_file, view))
}

async fn submit(net: &Testnet, file: &std::path::Path) -> Result<String> {
    let id = net
        .submit_job(
            "client",
            &JobSubmission {
                file: file.to_path_buf(),
                budget: amount(10 * USDC),
                max_price: amount(20_000),
                committee: 2,
                quorum: 2,
                verifier_fee: amount(1_000),
                deadline_secs: 3600,
                grace_secs: 600,
            },
        )
        .await?;
    Ok(id.to_string())
}

/// Waits until `find` finds something in the client's view, updating it every 20 ms.
async fn until<T>(
    view: &mut ClientView,
    what: &str,
    timeout: Duration,
    find: impl Fn(&ClientView) -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        view.update();
        if let Some(t) = find(view) {
            return Ok(t);
        }
        if Instant::now() > deadline {
            bail!("no {what} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a bench: sixteen processes for many minutes; run by name (see the file's header)"]
async fn detection_latency_of_kill_freeze_and_hang() -> Result<()> {
    let per_kind = trials_per_kind();
    let kinds = Kind::chosen()?;
    let seed = match std::env::var("GPUCHAIN_DETECTION_SEED") {
        Ok(s) => s
            .parse::<u64>()
            .with_context(|| format!("GPUCHAIN_DETECTION_SEED: {s:?} is not a number"))?,
        Err(_) => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    println!("[detection] seed {seed} (GPUCHAIN_DETECTION_SEED={seed} replays the fault phases)");
    let mut phases = ChaCha8Rng::seed_from_u64(seed);
    let (mut net, names, job_file, mut view) = start_watched("bench-detection").await?;
    let mut trials: Vec<Trial> = Vec::new();
    let mut in_trial: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let began = Instant::now();
    while trials.len() < per_kind * kinds.len() {
        // Keep ACTIVE_JOBS jobs open to trials.
        view.update();
        in_trial.retain(|j| {
            view.jobs
                .get(j)
                .is_none_or(|v| !v.done && v.trials < TRIALS_PER_JOB)
        });
        while in_trial.len() < ACTIVE_JOBS {
            let id = submit(&net, &job_file).await?;
            println!("[detection] job {id} submitted");
            in_trial.push(id);
        }
        let kind_next = kinds[trials.len() % kinds.len()];
        let ready = in_trial.iter().find(|j| {
            view.jobs.get(*j).is_some_and(|v| {
                let s = v.step();
                // An epoch whose provider the client already gave up (its replacement not
                // yet assigned) has nothing left to detect.
                !v.done
                    && view.lost_in(j, v.epoch).is_none()
                    && v.beats.len() >= SETTLED_HEARTBEATS
                    && v.advances().len() >= SETTLED_STEPS
                    && away_from_checkpoints(kind_next).contains(&(s % INTERVAL))
                    && s + 2 * INTERVAL < STEPS
                    && names.contains_key(&v.provider)
            })
        });
        let Some(job) = ready.cloned() else {
            if began.elapsed() > Duration::from_secs(3600) {
                bail!("the bench ran for an hour without finishing");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let kind = kind_next;
        let (epoch, victim, step_time) = {
            let v = &view.jobs[&job];
            (v.epoch, names[&v.provider].clone(), v.step_time())
        };
        if kind != Kind::Hang {
            let phase = phases.random_range(0..HEARTBEAT_PERIOD.as_micros() as u64);
            tokio::time::sleep(Duration::from_micros(phase)).await;
        }
        let t0 = match kind {
            Kind::Kill => net.kill9(&victim)?,
            Kind::Freeze => {
                let t = SystemTime::now();
                net.pause(&victim)?;
                t
            }
            Kind::Hang => {
                let asked = SystemTime::now();
                net.node(&victim)?
                    .post("/v1/test/cheat", &json!({ "fault": "hang" }))
                    .await?;
                // The hang starts at the next step boundary, which the provider logs; an
                // epoch that ends first (the job moved on) never hangs.
                let hung = net
                    .wait_event(
                        &victim,
                        after(
                            asked,
                            event_is!(FaultEnabled { fault } if fault.starts_with("Hang")),
                        ),
                        Duration::from_secs(15),
                    )
                    .await;
                match hung {
                    Ok(e) => e.at,
                    Err(_) => {
                        // Disarm it for the victim's next epoch.
                        net.restart(&victim).await?;
                        skipped.push(format!("{kind:?} of {victim}: its epoch ended first"));
                        continue;
                    }
                }
            }
        };
        let lost = until(&mut view, "provider_lost", Duration::from_secs(60), |v| {
            v.lost_in(&job, epoch).cloned()
        })
        .await
        .with_context(|| format!("{kind:?} of {victim} in job {job} epoch {epoch}"))?;
        if lost.at < t0 {
            // Given up on before the fault struck: a false failover, reported below.
            skipped.push(format!("{kind:?} of {victim}: lost before the fault"));
            match kind {
                Kind::Kill => {
                    net.restart(&victim).await?;
                }
                Kind::Freeze => net.resume(&victim)?,
                Kind::Hang => {}
            }
            continue;
        }
        // The time until training again, if the job found a replacement within a minute (a
        // client stops assigning providers it saw fail, so a long bench can run out of them).
        let next = until(
            &mut view,
            "the next epoch's assignment",
            Duration::from_secs(60),
            |v| v.assigned_in(&job, epoch + 1),
        )
        .await
        .ok();
        let mut again = None;
        let mut replacement = "nobody".to_string();
        if let Some(name) = next.as_ref().and_then(|n| names.get(n)) {
            replacement = name.clone();
            let job_c = job.clone();
            again = net
                .wait_event(
                    name,
                    move |e: &Logged| {
                        e.at >= t0
                            && matches!(&e.event, NodeEvent::FirstStep { job_id, epoch: e2, .. }
                                if *job_id == job_c && *e2 == epoch + 1)
                    },
                    Duration::from_secs(60),
                )
                .await
                .ok()
                .map(|first| first.at.duration_since(t0).unwrap_or_default());
        }
        let path = match (again, view.chosen_in(&job, epoch + 1)) {
            (Some(first), Some((selected, assigned))) => {
                let heard = net.node(&replacement)?.events()?;
                let at = |pick: &dyn Fn(&NodeEvent) -> bool| {
                    heard
                        .iter()
                        .find(|e| e.at >= t0 && pick(&e.event))
                        .map(|e| e.at)
                };
                let next = epoch + 1;
                let heard_at = at(&|e| {
                    matches!(e, NodeEvent::ChainAssigned { job_id, epoch, .. }
                        if *job_id == job && *epoch == next)
                });
                let started = at(&|e| {
                    matches!(e, NodeEvent::TrainingStarted { job_id, epoch, .. }
                        if *job_id == job && *epoch == next)
                });
                let since = |t: SystemTime| t.duration_since(lost.at).unwrap_or_default();
                heard_at.zip(started).map(|(h, s)| Failover {
                    selected: since(selected),
                    assigned_at_client: since(assigned),
                    assigned_at_replacement: since(h),
                    started: since(s),
                    first_step: (t0 + first).duration_since(lost.at).unwrap_or_default(),
                })
            }
            _ => None,
        };
        let NodeEvent::ProviderLost {
            reason,
            silent_for_ms,
            ..
        } = &lost.event
        else {
            bail!("not a provider_lost: {lost:?}");
        };
        let trial = Trial {
            kind,
            job: job.clone(),
            epoch,
            victim: victim.clone(),
            detect: lost.at.duration_since(t0).unwrap_or_default(),
            silent: Duration::from_millis(*silent_for_ms),
            again,
            reason: reason.clone(),
            step_time,
            path,
        };
        println!(
            "[detection] {:>2} {:?} {} (job {} epoch {}): {} after {} ms, training again on {} after {}",
            trials.len() + 1,
            trial.kind,
            trial.victim,
            trial.job,
            trial.epoch,
            trial.reason,
            trial.detect.as_millis(),
            replacement,
            trial
                .again
                .map_or("(not within a minute)".to_string(), |a| format!(
                    "{} ms",
                    a.as_millis()
                ))
        );
        if let Some(p) = &trial.path {
            let legs = p.legs();
            let parts: Vec<String> = Failover::LEGS
                .iter()
                .zip(legs)
                .map(|(name, leg)| format!("{name} {}", ms(leg)))
                .collect();
            println!("[detection]    after detection (ms): {}", parts.join(", "));
        }
        trials.push(trial);
        if let Some(v) = view.jobs.get_mut(&job) {
            v.trials += 1;
        }
        match kind {
            Kind::Kill => {
                net.restart(&victim).await?;
            }
            Kind::Freeze => net.resume(&victim)?,
            // Fenced, it cancels its training and is idle again.
            Kind::Hang => {}
        }
    }
    view.update();
    report(&trials, &view, &names);
    println!("trials skipped: {}", skipped.len());
    for s in &skipped {
        println!("  {s}");
    }
    net.stop_all().await;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

fn report(trials: &[Trial], view: &ClientView, names: &HashMap<String, String>) {
    println!();
    println!(
        "detection over {} trials, 16 processes on loopback",
        trials.len()
    );
    println!(
        "{:<7} {:>3} {:>10} {:>6} {:>6} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6} {:>14}",
        "fault",
        "n",
        "detect p50",
        "p99",
        "max",
        "silent p50",
        "p99",
        "start p50",
        "p99",
        "step p50",
        "p99",
        "reasons"
    );
    for kind in Kind::ALL {
        let of: Vec<&Trial> = trials.iter().filter(|t| t.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        let mut detect: Vec<Duration> = of.iter().map(|t| t.detect).collect();
        let mut silent: Vec<Duration> = of.iter().map(|t| t.silent).collect();
        silent.sort();
        let mut again: Vec<Duration> = of
            .iter()
            .filter_map(|t| t.again.map(|a| a.saturating_sub(t.detect)))
            .collect();
        let mut started: Vec<Duration> = of
            .iter()
            .filter_map(|t| t.path.map(|p| p.started))
            .collect();
        detect.sort();
        again.sort();
        started.sort();
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for t in &of {
            *reasons.entry(t.reason.as_str()).or_default() += 1;
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}×{n}")).collect();
        println!(
            "{:<7} {:>3} {:>10} {:>6} {:>6} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6} {:>14}",
            format!("{kind:?}").to_lowercase(),
            of.len(),
            ms(percentile(&detect, 0.5)),
            ms(percentile(&detect, 0.99)),
            ms(detect.last().copied().unwrap_or_default()),
            ms(percentile(&silent, 0.5)),
            ms(percentile(&silent, 0.99)),
            ms(percentile(&started, 0.5)),
            ms(percentile(&started, 0.99)),
            ms(percentile(&again, 0.5)),
            ms(percentile(&again, 0.99)),
            reasons.join(" ")
        );
    }
    println!(
        "('silent': the victim's last heartbeat at the client until the verdict, the latency \
         of a fault just after a heartbeat; ms from detection: 'start' until the replacement starts training from the last \
         accepted checkpoint, 'step' until it has finished its first step, one step time later)"
    );
    let paths: Vec<[Duration; 5]> = trials
        .iter()
        .filter_map(|t| t.path.map(|p| p.legs()))
        .collect();
    if !paths.is_empty() {
        let legs: Vec<String> = Failover::LEGS
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut leg: Vec<Duration> = paths.iter().map(|p| p[i]).collect();
                leg.sort();
                format!(
                    "{name} {}/{}",
                    ms(percentile(&leg, 0.5)),
                    ms(percentile(&leg, 0.9))
                )
            })
            .collect();
        println!(
            "training again, leg by leg over {} failovers (p50/p90 ms): {}",
            paths.len(),
            legs.join(", ")
        );
    }
    let never = trials.iter().filter(|t| t.again.is_none()).count();
    println!("no replacement training within a minute: {never}");
    println!(
        "targets: kill and freeze p50 <= 300, p99 <= 500; hang <= 3 x step time + 500; training again <= 1000"
    );
    println!(
        "the client's liveness floor: {} ms",
        std::env::var("GPUCHAIN_DETECTION_FLOOR_MS").unwrap_or_else(|_| "the default".into())
    );
    let hangs: Vec<&Trial> = trials.iter().filter(|t| t.kind == Kind::Hang).collect();
    let within = hangs
        .iter()
        .filter(|t| t.detect <= t.step_time * 3 + Duration::from_millis(500))
        .count();
    let mut steps: Vec<Duration> = hangs.iter().map(|t| t.step_time).collect();
    steps.sort();
    println!(
        "hang: {within} of {} within 3 x the victim's median step time + 500 ms (median step {} ms)",
        hangs.len(),
        ms(percentile(&steps, 0.5))
    );
    let touched: Vec<(&str, u64)> = trials.iter().map(|t| (t.job.as_str(), t.epoch)).collect();
    let false_failovers: Vec<String> = view
        .lost
        .iter()
        .filter_map(|l| match &l.event {
            NodeEvent::ProviderLost {
                job_id,
                epoch,
                provider,
                reason,
                silent_for_ms,
            } if !touched.contains(&(job_id.as_str(), *epoch)) => Some(format!(
                "job {job_id} epoch {epoch}: {} {reason} after {silent_for_ms} ms",
                names
                    .get(&provider.to_lowercase())
                    .map_or(provider.as_str(), String::as_str)
            )),
            _ => None,
        })
        .collect();
    println!("false failovers: {}", false_failovers.len());
    for f in &false_failovers {
        println!("  {f}");
    }
}

/// Threads that spin at normal priority until dropped: load the nodes did not ask for.
struct Hog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hog {
    fn start(threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Hog { stop, threads }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a soak: sixteen processes and a CPU hog for 30 minutes; run by name (see the file's header)"]
async fn false_failover_soak() -> Result<()> {
    let minutes = env_count("GPUCHAIN_SOAK_MINUTES", 30);
    let hogs = env_count("GPUCHAIN_SOAK_HOGS", 1);
    // A job training on every core: the providers' own load.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let training = cores.clamp(2, PROVIDERS / 2);
    let (net, names, job_file, mut view) = start_watched("soak-false-failover").await?;
    let hog = Hog::start(hogs);
    println!(
        "[soak] {minutes} min, {training} jobs training at once, {hogs} busy thread(s), {cores} cores"
    );
    let began = Instant::now();
    let began_wall = SystemTime::now();
    let length = Duration::from_secs(60 * minutes as u64);
    let mut open: Vec<String> = Vec::new();
    let mut submitted = 0usize;
    let mut last_note = Instant::now();
    let mut gaps: Vec<Duration> = Vec::new();
    let mut seen_beats: BTreeMap<(String, u64), usize> = BTreeMap::new();
    while began.elapsed() < length {
        view.update();
        open.retain(|j| view.jobs.get(j).is_none_or(|v| !v.done));
        while open.len() < training {
            let id = submit(&net, &job_file).await?;
            submitted += 1;
            open.push(id);
        }
        // Heartbeat gaps of every epoch, as they come in.
        for (job, v) in &view.jobs {
            let seen = seen_beats.entry((job.clone(), v.epoch)).or_default();
            let from = seen.saturating_sub(1);
            gaps.extend(
                v.beats[from.min(v.beats.len())..]
                    .windows(2)
                    .filter_map(|w| w[1].0.duration_since(w[0].0).ok()),
            );
            *seen = v.beats.len();
        }
        if last_note.elapsed() > Duration::from_secs(60) {
            last_note = Instant::now();
            println!(
                "[soak] {:>3} min: {} jobs submitted, {} done, providers given up on: {}",
                began.elapsed().as_secs() / 60,
                submitted,
                view.jobs.values().filter(|v| v.done).count(),
                view.lost.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(hog);
    view.update();
    gaps.sort();
    println!();
    println!(
        "false-failover soak: {} min, 16 processes, {training} jobs training, {hogs} busy thread(s)",
        began.elapsed().as_secs() / 60
    );
    println!(
        "jobs submitted {submitted}, completed {}",
        view.jobs.values().filter(|v| v.done).count()
    );
    println!(
        "heartbeat gaps at the client: n {}, p50 {} ms, p99 {} ms, max {} ms",
        gaps.len(),
        ms(percentile(&gaps, 0.5)),
        ms(percentile(&gaps, 0.99)),
        ms(gaps.last().copied().unwrap_or_default())
    );
    let over = |limit_ms: u64| {
        gaps.iter()
            .filter(|g| **g > Duration::from_millis(limit_ms))
            .count()
    };
    println!(
        "heartbeat gaps over 200 ms: {}, over 250 ms: {}, over 300 ms: {}, over 500 ms: {}",
        over(200),
        over(250),
        over(300),
        over(500)
    );
    println!(
        "most CPU starvation a provider reported within one step: {} ms",
        view.most_starved_ms
    );
    let late = late_sends(&net, &names);
    let gap_of = |e: &Logged| match e.event {
        NodeEvent::HeartbeatLate { gap_ms, .. } => gap_ms,
        _ => 0,
    };
    let late_over = |limit: u64| late.iter().filter(|(_, e)| gap_of(e) > limit).count();
    println!(
        "heartbeats providers sent late (over two periods): {}, over 300 ms: {}, over 500 ms: {}",
        late.len(),
        late_over(300),
        late_over(500)
    );
    if let Some((who, e)) = late.iter().max_by_key(|(_, e)| gap_of(e)) {
        println!("  the longest: {who} {}", late_line(e, began_wall));
    }
    println!("false failovers: {}", view.lost.len());
    for l in &view.lost {
        if let NodeEvent::ProviderLost {
            job_id,
            epoch,
            provider,
            reason,
            silent_for_ms,
        } = &l.event
        {
            let name = names
                .get(&provider.to_lowercase())
                .map_or(provider.as_str(), String::as_str);
            let at = l.at.duration_since(began_wall).unwrap_or_default();
            println!(
                "  job {job_id} epoch {epoch}: {name} {reason} after {silent_for_ms} ms, at {:.3} s",
                at.as_secs_f64()
            );
            // What the provider said of its own heartbeats just before: a late send is the
            // host's stall; none means the path or the client held them.
            let near = |at: SystemTime| {
                l.at.duration_since(at)
                    .is_ok_and(|d| d <= Duration::from_secs(2))
                    || at
                        .duration_since(l.at)
                        .is_ok_and(|d| d <= Duration::from_secs(1))
            };
            for (who, e) in late.iter().filter(|(who, e)| who == name && near(e.at)) {
                println!("    {who} {}", late_line(e, began_wall));
            }
        }
    }
    net.stop_all().await;
    Ok(())
}

/// Every heartbeat a provider reported sending late ([`NodeEvent::HeartbeatLate`]), by node
/// name, read from the nodes' logs (only providers send heartbeats).
fn late_sends(net: &Testnet, names: &HashMap<String, String>) -> Vec<(String, Logged)> {
    let mut late = Vec::new();
    for name in names.values() {
        let Ok(node) = net.node(name) else { continue };
        for e in LogTail::new(node.log_path()).read_new() {
            if matches!(e.event, NodeEvent::HeartbeatLate { .. }) {
                late.push((name.clone(), e));
            }
        }
    }
    late.sort_by_key(|(_, e)| e.at);
    late
}

/// `e` as a line, its time counted from `since`.
fn late_line(e: &Logged, since: SystemTime) -> String {
    let NodeEvent::HeartbeatLate {
        job_id,
        gap_ms,
        timer_late_ms,
        publish_ms,
    } = &e.event
    else {
        return String::new();
    };
    let at = e.at.duration_since(since).unwrap_or_default().as_secs_f64();
    format!(
        "at {at:.3} s sent job {job_id}'s heartbeat {gap_ms} ms after the one before (timer {timer_late_ms} ms late, swarm took {publish_ms} ms)"
    )
}
