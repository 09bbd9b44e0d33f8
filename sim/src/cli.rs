//! `gpuchain sim ...`: the node binary mounts [`SimCommand`] and calls [`run_cli`].

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::SimConfig;
use crate::{SimError, presets};

#[derive(Debug, Args)]
pub struct SimCommand {
    #[command(subcommand)]
    pub action: SimAction,
}

#[derive(Debug, Subcommand)]
pub enum SimAction {
    /// Run a preset (nov4, break-it, faults, faults-protocol, hostile, churn-10k) or a config
    /// file (.toml).
    Run(RunArgs),
    /// List the presets.
    Presets,
    /// Print a preset as TOML, a starting point for a config file.
    Show { preset: String },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Preset name or path to a TOML config.
    pub target: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run this many seeds from --seed on; stop at the first checker failure.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Write the JSON report here (default: print the text report only).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// Write the escrow call log (JSON) here, for replay against the contract.
    #[arg(long)]
    pub calls: Option<PathBuf>,
}

pub fn load(target: &str) -> Result<SimConfig> {
    if let Some(cfg) = presets::by_name(target) {
        return Ok(cfg);
    }
    if !target.ends_with(".toml") {
        bail!(
            "unknown preset `{target}` (presets: {})",
            presets::NAMES.join(", ")
        );
    }
    let text = std::fs::read_to_string(target).with_context(|| format!("reading {target}"))?;
    let mut cfg = SimConfig::from_toml(&text).with_context(|| format!("in {target}"))?;
    if cfg.name == SimConfig::default().name {
        cfg.name = target.to_string();
    }
    Ok(cfg)
}

/// Writes to stdout; a reader that went away (`| head`) ends the run quietly instead of
/// panicking the way `print!` does on a closed pipe.
fn out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => r.context("writing to stdout"),
    }
}

pub fn run_cli(cmd: SimCommand) -> Result<()> {
    match cmd.action {
        SimAction::Presets => {
            for n in presets::NAMES {
                out(&format!("{n}\n"))?;
            }
            Ok(())
        }
        SimAction::Show { preset } => {
            let cfg =
                presets::by_name(&preset).with_context(|| format!("unknown preset `{preset}`"))?;
            out(&cfg.to_toml())?;
            Ok(())
        }
        SimAction::Run(args) => run_args(args),
    }
}

const SEEDS_BAR: &str = "{bar:30} {pos}/{len} seeds {elapsed_precise} {msg}";
const TIME_BAR: &str = "{bar:30} simulated {pos}/{len} s ({percent}%) {elapsed_precise} {msg}";

fn style(template: &str) -> ProgressStyle {
    // The templates are the constants above (checked by a test); the default bar is only a
    // fallback, never a reason to fail a run.
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn run_args(args: RunArgs) -> Result<()> {
    let mut cfg = load(&args.target)?;
    if args.calls.is_some() {
        cfg.keep_call_log = true;
    }
    let seeds = args.seed..args.seed.saturating_add(args.seeds.max(1));
    let single = seeds.end - seeds.start == 1;
    // One run: simulated time as it passes. Many: seeds done. Drawn on stderr only when it
    // is a terminal, so reports piped or captured stay clean.
    let bar = if single {
        ProgressBar::new(cfg.duration_s.ceil() as u64).with_style(style(TIME_BAR))
    } else {
        ProgressBar::new(seeds.end - seeds.start).with_style(style(SEEDS_BAR))
    };
    for seed in seeds {
        let started = Instant::now();
        let mut sim = crate::Sim::new(cfg.clone(), seed).map_err(crate::SimError::from)?;
        if single {
            let b = bar.clone();
            sim = sim.on_progress(move |now, _, events| {
                b.set_position(now as u64);
                b.set_message(format!("{events} events"));
            });
        }
        let result = sim.run();
        if single {
            bar.finish_and_clear();
        } else {
            bar.inc(1);
        }
        let outcome = match result {
            Ok(o) => o,
            Err(e @ SimError::Checker { .. }) => {
                // A smaller failing case, when one is found in a few dozen runs.
                if let Some(s) = crate::shrink(&cfg, seed, crate::escrow::Bugs::default(), 40)
                    && s.runs > 1
                    && s.cfg != cfg
                {
                    eprintln!("{s}\n");
                }
                bail!("{e}")
            }
            Err(e) => return Err(e.into()),
        };
        let wall = started.elapsed().as_secs_f64();
        out(&outcome.report.to_text())?;
        // Wall time is not part of the report: the report must not depend on the machine.
        eprintln!(
            "wall time {wall:.2} s, {:.0} events/s",
            outcome.report.events as f64 / wall.max(1e-9)
        );
        if let Some(p) = &args.json {
            std::fs::write(p, outcome.report.to_json())
                .with_context(|| format!("writing {}", p.display()))?;
        }
        if let Some(dir) = &args.plots {
            for f in crate::plot::write_all(&outcome.report, dir)? {
                eprintln!("wrote {}", f.display());
            }
        }
        if let Some(p) = &args.calls {
            let json = serde_json::to_string_pretty(&outcome.calls)?;
            std::fs::write(p, json).with_context(|| format!("writing {}", p.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_templates_parse() {
        for t in [SEEDS_BAR, TIME_BAR] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
        // A malformed width is an error, so the check above can fail.
        assert!(ProgressStyle::with_template("{bar:abc}").is_err());
    }
}
