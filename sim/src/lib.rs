//! gpuchain's deterministic simulator: virtual time, a seeded network, a training model per
//! hardware class, an in-memory model of JobEscrow, and invariant checkers after every event.
//! The same seed and config always give the same run, event for event, and the same report
//! byte for byte; a checker failure prints its seed so the run replays exactly.
//!
//! The roles are the protocol crate's own sans-IO machines, the code the node runs: each
//! simulated node hosts one `gpuchain_protocol::roles::Roles` ([`drive`]); [`nodes`] is the
//! model of the processes around them (hardware, churn, cheats).

pub mod cheat;
pub mod checker;
pub mod cli;
pub mod config;
pub mod drive;
pub mod escrow;
pub mod fasthash;
pub mod metrics;
pub mod network;
pub mod nodes;
pub mod plot;
pub mod presets;
pub mod queue;
pub mod report;
pub mod rng;
pub mod trace;
pub mod training;
pub mod world;

use std::fmt;

pub use checker::Failure;
pub use config::{ConfigError, SimConfig};
pub use report::Report;

use escrow::{Bugs, CallRecord};
use world::World;

/// A finished run: its report and (when the config keeps it) the escrow call log.
pub struct Outcome {
    pub report: Report,
    pub calls: Vec<CallRecord>,
    /// The escrow model at the end, when the config keeps the call log (small runs).
    pub escrow: Option<escrow::Escrow>,
}

#[derive(Debug)]
pub enum SimError {
    Config(ConfigError),
    /// A checker fired. Carries everything needed to replay it.
    Checker {
        name: String,
        seed: u64,
        failure: Failure,
        trace: String,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(e) => write!(f, "{e}"),
            SimError::Checker {
                name,
                seed,
                failure,
                trace,
            } => write!(
                f,
                "{failure}\n  seed {seed}; replay with: gpuchain sim run {name} --seed {seed}\n  last events:\n{trace}"
            ),
        }
    }
}

impl std::error::Error for SimError {}

impl From<ConfigError> for SimError {
    fn from(e: ConfigError) -> Self {
        SimError::Config(e)
    }
}

/// A configured run, not yet started.
pub struct Sim {
    world: World,
}

impl Sim {
    pub fn new(cfg: SimConfig, seed: u64) -> Result<Sim, ConfigError> {
        cfg.validate()?;
        Ok(Sim {
            world: World::new(cfg, seed),
        })
    }

    /// Calls `f` with (simulated seconds so far, simulated seconds in all, events so far)
    /// every 65,536 events, for a progress display. It cannot change the run.
    pub fn on_progress(mut self, mut f: impl FnMut(f64, f64, u64) + 'static) -> Sim {
        self.world.progress = Some(Box::new(move |now, end, events| {
            f(now as f64 / 1000.0, end as f64 / 1000.0, events)
        }));
        self
    }

    /// Breaks the escrow model on purpose (checker tests).
    pub fn with_bugs(mut self, bugs: Bugs) -> Sim {
        self.world.escrow.bugs = bugs;
        self
    }

    pub fn run(mut self) -> Result<Outcome, SimError> {
        let w = &mut self.world;
        match w.run() {
            Ok(()) => Ok(Outcome {
                report: Report::from_world(w),
                calls: std::mem::take(&mut w.calls),
                escrow: w.cfg.keep_call_log.then(|| w.escrow.clone()),
            }),
            Err(failure) => Err(SimError::Checker {
                name: w.cfg.name.clone(),
                seed: w.seed,
                failure,
                trace: w.trace.render(),
            }),
        }
    }
}

/// Runs `cfg` with `seed` to the end.
pub fn run(cfg: SimConfig, seed: u64) -> Result<Outcome, SimError> {
    Sim::new(cfg, seed)?.run()
}

/// A failing run made smaller: the config the shrinker ended on, its failure and how many runs
/// it took.
pub struct Shrunk {
    pub cfg: SimConfig,
    pub error: SimError,
    pub runs: usize,
}

impl fmt::Display for Shrunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let SimError::Checker { seed, .. } = &self.error else {
            return write!(f, "{}", self.error);
        };
        write!(
            f,
            "shrunk in {} runs to {} clients, {} providers, {} verifiers, {:.0} s; \
             save this as shrunk.toml and replay with: gpuchain sim run shrunk.toml --seed {seed}\n{}\n{}",
            self.runs,
            self.cfg.clients,
            self.cfg.providers,
            self.cfg.verifiers,
            self.cfg.duration_s,
            self.cfg.to_toml(),
            self.error
        )
    }
}

fn checker_of(r: &Result<Outcome, SimError>) -> Option<&'static str> {
    match r {
        Err(SimError::Checker { failure, .. }) => Some(failure.checker),
        _ => None,
    }
}

/// Shrinks a failing run: with the same seed, tries a horizon just past the failure, then
/// fewer clients, providers and verifiers (halving, then one less), keeping each change under
/// which the same checker still fires, until nothing smaller fails or `max_runs` runs are
/// spent. `None` when the run does not fail. Every node draws from its own seeded stream, so a
/// smaller swarm is a different run of the same kind, not a prefix: what it keeps is a
/// smaller failing case and a shorter trace.
pub fn shrink(cfg: &SimConfig, seed: u64, bugs: Bugs, max_runs: usize) -> Option<Shrunk> {
    let attempt = |c: &SimConfig| -> Result<Outcome, SimError> {
        Sim::new(c.clone(), seed)?.with_bugs(bugs).run()
    };
    let first = attempt(cfg);
    let checker = checker_of(&first)?;
    let mut best = cfg.clone();
    let mut error = first.err()?;
    let mut runs = 1;
    loop {
        let at_s = match &error {
            SimError::Checker { failure, .. } => failure.at as f64 / 1000.0,
            SimError::Config(_) => best.duration_s,
        };
        let mut candidates: Vec<SimConfig> = Vec::new();
        let mut with = |f: &dyn Fn(&mut SimConfig)| {
            let mut c = best.clone();
            f(&mut c);
            if c != best && c.validate().is_ok() {
                candidates.push(c);
            }
        };
        with(&|c| {
            c.duration_s = c.duration_s.min((at_s + 1.0).ceil());
            c.job.last_start_s = c.job.last_start_s.min(c.duration_s);
        });
        with(&|c| c.clients = (c.clients / 2).max(1));
        with(&|c| c.providers = (c.providers / 2).max(1));
        with(&|c| c.verifiers = (c.verifiers / 2).max(1));
        with(&|c| c.clients = c.clients.saturating_sub(1).max(1));
        with(&|c| c.providers = c.providers.saturating_sub(1).max(1));
        with(&|c| c.verifiers = c.verifiers.saturating_sub(1).max(1));
        let mut improved = false;
        for c in candidates {
            if runs >= max_runs {
                break;
            }
            runs += 1;
            let r = attempt(&c);
            if checker_of(&r) == Some(checker)
                && let Err(e) = r
            {
                best = c;
                error = e;
                improved = true;
                break;
            }
        }
        if !improved || runs >= max_runs {
            return Some(Shrunk {
                cfg: best,
                error,
                runs,
            });
        }
    }
}
