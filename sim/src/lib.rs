//! gpuchain's deterministic simulator: virtual time, a seeded network, a training model per
//! hardware class, an in-memory model of JobEscrow, and invariant checkers after every event.
//! The same seed and config always give the same run, event for event, and the same report
//! byte for byte; a checker failure prints its seed so the run replays exactly.
//!
//! The roles are played either by the protocol crate's own sans-IO machines ([`drive`], the
//! code the node runs; small runs) or by the simulator's stand-ins ([`roles`]; any scale).

pub mod cheat;
pub mod checker;
pub mod cli;
pub mod config;
pub mod drive;
pub mod escrow;
pub mod metrics;
pub mod network;
pub mod plot;
pub mod presets;
pub mod queue;
pub mod report;
pub mod rng;
pub mod roles;
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
                calls: w.escrow.log().to_vec(),
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
