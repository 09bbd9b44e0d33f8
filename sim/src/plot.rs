//! SVG plots of the report: time to notice, time until training again, accepted steps over
//! time, cheats caught and missed. plotters with only its SVG backend (no font stack).

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use crate::report::Report;

const SIZE: (u32, u32) = (800, 480);

/// Writes the plots into `dir` and returns the files written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    let p = dir.join("detection.svg");
    histogram(
        &p,
        "time to notice a lost provider (s)",
        &report.detection_samples,
    )?;
    out.push(p);
    let p = dir.join("training-again.svg");
    histogram(
        &p,
        "time until training again (s)",
        &report.recovery_samples,
    )?;
    out.push(p);
    let p = dir.join("accepted-steps.svg");
    accepted(&p, report)?;
    out.push(p);
    let p = dir.join("cheats.svg");
    cheats(&p, report)?;
    out.push(p);
    Ok(out)
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e:?}")
}

fn histogram(path: &Path, title: &str, samples_ms: &[u64]) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let secs: Vec<f64> = samples_ms.iter().map(|m| *m as f64 / 1000.0).collect();
    let max = secs.iter().copied().fold(0.0_f64, f64::max).max(0.001);
    let bins = 30usize;
    let width = max / bins as f64;
    let mut counts = vec![0u32; bins];
    for s in &secs {
        let i = ((s / width) as usize).min(bins - 1);
        counts[i] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title}, n = {}", secs.len()), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0.0..max * 1.02, 0u32..top + 1)
        .map_err(err)?;
    chart.configure_mesh().draw().map_err(err)?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, c)| {
            let x0 = i as f64 * width;
            Rectangle::new([(x0, 0), (x0 + width, *c)], BLUE.filled())
        }))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn accepted(path: &Path, report: &Report) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let tmax = report.simulated_s.max(1.0);
    let smax = report.accepted_curve.last().map_or(1, |p| p.1).max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption("accepted steps over time (s)", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..tmax, 0u64..smax + smax / 20 + 1)
        .map_err(err)?;
    chart.configure_mesh().draw().map_err(err)?;
    chart
        .draw_series(LineSeries::new(report.accepted_curve.iter().copied(), &RED))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn cheats(path: &Path, report: &Report) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let kinds: Vec<(&String, u64, u64)> = report
        .cheats
        .iter()
        .map(|(k, c)| (k, c.caught, c.missed))
        .collect();
    let n = kinds.len().max(1) as u32;
    let top = kinds.iter().map(|k| k.1.max(k.2)).max().unwrap_or(0).max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "cheating checkpoints: caught (green) and missed (red)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0u32..n * 3, 0u64..top + 1)
        .map_err(err)?;
    let names: Vec<String> = kinds.iter().map(|k| k.0.clone()).collect();
    chart
        .configure_mesh()
        .x_labels(names.len() * 3)
        .x_label_formatter(&|x| {
            if x % 3 == 0 {
                names.get((x / 3) as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    for (i, (_, caught, missed)) in kinds.iter().enumerate() {
        let x = i as u32 * 3;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x, 0), (x + 1, *caught)],
                GREEN.filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x + 1, 0), (x + 2, *missed)],
                RED.filled(),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
