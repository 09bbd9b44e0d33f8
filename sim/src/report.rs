//! The run's figures, as text and JSON. Both are functions of the seed and the config only
//! (no wall-clock figures), so the same seed gives byte-identical reports.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::queue::Millis;
use crate::world::{World, usdc};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Dist {
    pub count: usize,
    pub min_ms: u64,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
    pub mean_ms: f64,
}

impl Dist {
    pub fn of(samples: &[Millis]) -> Dist {
        if samples.is_empty() {
            return Dist::default();
        }
        let mut v = samples.to_vec();
        v.sort_unstable();
        let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
        Dist {
            count: v.len(),
            min_ms: v[0],
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            max_ms: v[v.len() - 1],
            mean_ms: v.iter().sum::<u64>() as f64 / v.len() as f64,
        }
    }

    fn line(&self) -> String {
        if self.count == 0 {
            return "none".into();
        }
        format!(
            "n={} p50 {} p90 {} p99 {} max {} (mean {})",
            self.count,
            secs(self.p50_ms),
            secs(self.p90_ms),
            secs(self.p99_ms),
            secs(self.max_ms),
            secs(self.mean_ms.round() as u64)
        )
    }
}

fn secs(ms: u64) -> String {
    format!("{:.3} s", ms as f64 / 1000.0)
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CheatLine {
    pub announced: u64,
    pub caught: u64,
    pub missed: u64,
    pub undecided: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub name: String,
    pub seed: u64,
    pub simulated_s: f64,
    pub clients: u32,
    pub providers: u32,
    pub verifiers: u32,
    pub events: u64,
    pub messages_sent: u64,
    pub messages_dropped: u64,
    pub jobs_created: u64,
    pub jobs_completed: u64,
    pub jobs_expired: u64,
    pub jobs_running: u64,
    pub failures_while_assigned: u64,
    pub detection: Dist,
    pub false_detections: u64,
    pub training_again_after_failure: Dist,
    pub training_again_after_refusal: Dist,
    pub cheat_detection: Dist,
    pub steps_trained: u64,
    pub steps_accepted: u64,
    pub steps_lost: u64,
    /// Accepted steps / trained steps.
    pub goodput: f64,
    pub accepted_steps_per_hour: f64,
    /// Token units (6 decimals).
    pub paid: u128,
    pub refunded: u128,
    pub slashed: u128,
    /// Verifier fees taken from budgets by decisions, and credited to the committees by
    /// settle or expiry (the difference is what running or unsettled jobs still hold).
    pub fees: u128,
    pub fees_credited: u128,
    pub cost_per_accepted_step: f64,
    /// The checker's observations: honest stake lost, junk paid, honest work rejected
    /// without a slash, late accepts.
    pub observed: crate::checker::Observed,
    /// Byzantine verifiers and clients that withhold pay, as the config made them.
    pub byzantine_verifiers: u32,
    pub hostile_clients: u32,
    /// Committees drawn, by how many byzantine members they hold (key: that count).
    pub committees_by_byzantine: BTreeMap<String, u64>,
    pub cheats: BTreeMap<String, CheatLine>,
    pub paid_by_provider: BTreeMap<String, u128>,
    /// Fees credited per verifier (small runs, as the timeline).
    pub fees_by_verifier: BTreeMap<String, u128>,
    pub tx_ok: BTreeMap<String, u64>,
    pub tx_failed: BTreeMap<String, u64>,
    pub timeline: Vec<String>,
    /// Protocol driver only: signatures made and checked, deliveries, by message kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signatures: Option<crate::drive::CryptoCounts>,
    /// Cumulative accepted steps over time (seconds), for the plot; not in the text.
    #[serde(skip)]
    pub accepted_curve: Vec<(f64, u64)>,
    #[serde(skip)]
    pub detection_samples: Vec<Millis>,
    #[serde(skip)]
    pub recovery_samples: Vec<Millis>,
}

impl Report {
    pub fn from_world(w: &World) -> Report {
        let m = &w.metrics;
        let running = m.jobs_created - m.jobs_completed - m.jobs_expired;
        let lost = m.steps_trained.saturating_sub(m.steps_accepted);
        let mut cheats: BTreeMap<String, CheatLine> = m
            .cheats
            .iter()
            .map(|(k, t)| {
                (
                    k.name().to_string(),
                    CheatLine {
                        announced: t.announced,
                        caught: t.caught,
                        missed: t.missed,
                        undecided: 0,
                    },
                )
            })
            .collect();
        for line in cheats.values_mut() {
            line.undecided = line.announced.saturating_sub(line.caught + line.missed);
        }
        let hours = w.now as f64 / 3_600_000.0;
        let mut recovery = m.recovery_after_failure_ms.clone();
        recovery.extend(&m.recovery_after_reject_ms);
        Report {
            name: w.cfg.name.clone(),
            seed: w.seed,
            simulated_s: w.now as f64 / 1000.0,
            clients: w.cfg.clients,
            providers: w.cfg.providers,
            verifiers: w.cfg.verifiers,
            events: m.events,
            messages_sent: w.net.sent,
            messages_dropped: w.net.dropped,
            jobs_created: m.jobs_created,
            jobs_completed: m.jobs_completed,
            jobs_expired: m.jobs_expired,
            jobs_running: running,
            failures_while_assigned: m.failures_while_assigned,
            detection: Dist::of(&m.detection_ms),
            false_detections: m.false_detections,
            training_again_after_failure: Dist::of(&m.recovery_after_failure_ms),
            training_again_after_refusal: Dist::of(&m.recovery_after_reject_ms),
            cheat_detection: Dist::of(&m.cheat_detection_ms),
            steps_trained: m.steps_trained,
            steps_accepted: m.steps_accepted,
            steps_lost: lost,
            goodput: if m.steps_trained == 0 {
                0.0
            } else {
                m.steps_accepted as f64 / m.steps_trained as f64
            },
            accepted_steps_per_hour: if hours > 0.0 {
                m.steps_accepted as f64 / hours
            } else {
                0.0
            },
            paid: m.paid,
            refunded: m.refunded,
            slashed: m.slashed,
            fees: m.fees,
            fees_credited: m.fees_credited,
            observed: w.checker.observed.clone(),
            byzantine_verifiers: crate::config::HostileConfig::count(
                w.cfg.hostile.byzantine_verifiers,
                w.cfg.verifiers,
            ),
            hostile_clients: crate::config::HostileConfig::count(
                w.cfg.hostile.withhold_pay_clients,
                w.cfg.clients,
            ),
            committees_by_byzantine: m
                .committees_by_byzantine
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            cost_per_accepted_step: if m.steps_accepted == 0 {
                0.0
            } else {
                m.paid as f64 / m.steps_accepted as f64
            },
            cheats,
            paid_by_provider: m.paid_by_name.clone(),
            fees_by_verifier: m.fees_by_verifier.clone(),
            tx_ok: m
                .tx_ok
                .iter()
                .map(|(k, v)| ((*k).to_string(), *v))
                .collect(),
            tx_failed: m.tx_failed.clone(),
            timeline: m
                .timeline
                .iter()
                .map(|(t, s)| {
                    format!(
                        "{:02}:{:02}.{:03} {s}",
                        t / 60_000,
                        (t / 1000) % 60,
                        t % 1000
                    )
                })
                .collect(),
            signatures: w.driver.as_ref().map(crate::drive::Driver::crypto),
            accepted_curve: m
                .accepted_curve
                .iter()
                .map(|(t, s)| (*t as f64 / 1000.0, *s))
                .collect(),
            detection_samples: m.detection_ms.clone(),
            recovery_samples: recovery,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "gpuchain sim: {} (seed {})", self.name, self.seed);
        let _ = writeln!(
            s,
            "  {} clients, {} providers, {} verifiers; {:.0} s simulated, {} events, {} messages ({} lost)",
            self.clients,
            self.providers,
            self.verifiers,
            self.simulated_s,
            self.events,
            self.messages_sent,
            self.messages_dropped
        );
        let _ = writeln!(
            s,
            "jobs: {} created, {} completed, {} expired, {} still running",
            self.jobs_created, self.jobs_completed, self.jobs_expired, self.jobs_running
        );
        let _ = writeln!(
            s,
            "failures of assigned providers: {}",
            self.failures_while_assigned
        );
        let _ = writeln!(
            s,
            "  time to notice:               {}",
            self.detection.line()
        );
        let _ = writeln!(
            s,
            "  false alarms:                 {}",
            self.false_detections
        );
        let _ = writeln!(
            s,
            "  training again after failure: {}",
            self.training_again_after_failure.line()
        );
        let _ = writeln!(
            s,
            "  training again after refusal: {}",
            self.training_again_after_refusal.line()
        );
        let _ = writeln!(
            s,
            "steps: {} trained, {} accepted, {} lost; goodput {:.1} %, {:.0} accepted steps/h",
            self.steps_trained,
            self.steps_accepted,
            self.steps_lost,
            self.goodput * 100.0,
            self.accepted_steps_per_hour
        );
        let _ = writeln!(
            s,
            "money: paid {}, verifier fees {} ({} credited), refunded {}, slashed {} (burned); cost per accepted step {:.1} units",
            usdc(self.paid),
            usdc(self.fees),
            usdc(self.fees_credited),
            usdc(self.refunded),
            usdc(self.slashed),
            self.cost_per_accepted_step
        );
        for (name, paid) in &self.paid_by_provider {
            let _ = writeln!(s, "  Provider {name}: {}", usdc(*paid));
        }
        for (name, fees) in &self.fees_by_verifier {
            let _ = writeln!(s, "  {name} fees: {}", usdc(*fees));
        }
        let o = &self.observed;
        let _ = writeln!(
            s,
            "observed: honest stake lost {} ({}), junk paid {}; honest checkpoints rejected unslashed {}, \
             slashed unserved {}; late accepts {}",
            o.honest_stake_lost,
            usdc(o.honest_stake_lost_units),
            o.junk_paid,
            o.honest_rejected_unslashed,
            o.honest_unserved_slashed,
            o.late_accepts
        );
        if self.byzantine_verifiers > 0 || self.hostile_clients > 0 {
            let committees = self
                .committees_by_byzantine
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                s,
                "hostile: {} byzantine verifiers, {} clients withholding pay; committees by byzantine members: {committees}",
                self.byzantine_verifiers, self.hostile_clients
            );
        }
        if !self.cheats.is_empty() {
            let _ = writeln!(
                s,
                "cheats (checkpoints): announced / caught / missed / undecided"
            );
            for (k, c) in &self.cheats {
                let _ = writeln!(
                    s,
                    "  {k:<18} {:>6} {:>6} {:>6} {:>6}",
                    c.announced, c.caught, c.missed, c.undecided
                );
            }
            let _ = writeln!(s, "  time to refuse:     {}", self.cheat_detection.line());
        }
        let _ = writeln!(s, "transactions:");
        for (k, v) in &self.tx_ok {
            let _ = writeln!(s, "  {k:<40} {v:>8} ok");
        }
        for (k, v) in &self.tx_failed {
            let _ = writeln!(s, "  {k:<40} {v:>8} reverted");
        }
        if let Some(c) = &self.signatures {
            let list = |m: &BTreeMap<&'static str, u64>| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                s,
                "signatures ({}): {} made and checked ({}); {} bids and votes checked on chain; {} deliveries ({})",
                match c.scheme {
                    gpuchain_protocol::signing::Scheme::Secp256k1 => "secp256k1",
                    gpuchain_protocol::signing::Scheme::Simulated => "simulated, free",
                },
                c.signatures(),
                list(&c.signed),
                c.recovered_on_chain,
                c.delivered.values().sum::<u64>(),
                list(&c.delivered)
            );
        }
        if !self.timeline.is_empty() {
            let _ = writeln!(s, "timeline:");
            for line in &self.timeline {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_sample() {
        let d = Dist::of(&(1..=100).collect::<Vec<u64>>());
        assert_eq!(
            (d.count, d.min_ms, d.p50_ms, d.p90_ms, d.max_ms),
            (100, 1, 51, 90, 100)
        );
        assert_eq!(Dist::of(&[]), Dist::default());
    }
}
