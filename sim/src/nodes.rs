//! The simulated node processes around the protocol machines: what each one is (a provider's
//! hardware, price and cheating habit), when it runs (start, churn failures, rejoins,
//! scripted kills), when a client starts its next job, and what a provider's trainer
//! produces at a checkpoint (honest, or its cheat) with the checkpoint's ground truth. The
//! decisions — bids, assignments, heartbeats, votes — are the machines' (`drive`).

use crate::cheat::CheatKind;
use crate::config::{ScriptAction, SimConfig};
use crate::escrow::{Call, Epoch, Hash, JobId, Step};
use crate::rng::SimRng;
use crate::training;
use crate::world::{Event, NodeId, Timer, Truth, World, ms};

/// A client process: its own draws (start jitter) and the job it runs. Its committees are
/// the escrow's draw, not its choice.
pub struct ClientState {
    pub rng: SimRng,
    pub jobs_started: u32,
    /// The job running: `Some(0)` from `createJob` until the chain names the job.
    pub current: Option<JobId>,
}

impl ClientState {
    pub fn new(rng: SimRng) -> Self {
        ClientState {
            rng,
            jobs_started: 0,
            current: None,
        }
    }
}

/// A provider process: what it is and whether it runs. What every one of its timers reads
/// (the incarnation, the training rate) comes first, in the struct's first cache line.
#[repr(C, align(64))]
pub struct ProviderState {
    /// Steps per second on its hardware; `None` when it cannot fit the smallest micro-batch.
    pub rate: Option<f64>,
    /// Bumped at every failure and rejoin: timers of an earlier life are dropped.
    pub incarnation: u32,
    pub online: bool,
    pub cheat: Option<CheatKind>,
    pub hardware: usize,
    pub price: u128,
    pub name: Option<String>,
    pub(crate) rng: SimRng,
}

impl ProviderState {
    /// Named providers are as given; the others are drawn from `setup`, in provider order
    /// (hardware, price, then whether and how it cheats).
    pub fn new(cfg: &SimConfig, index: usize, setup: &mut SimRng, rng: SimRng) -> Self {
        let (name, hardware, price, cheat) = match cfg.named_providers.get(index) {
            Some(np) => {
                let hw = cfg
                    .hardware
                    .iter()
                    .position(|h| h.name == np.hardware)
                    .unwrap_or(0);
                (Some(np.name.clone()), hw, np.price_per_step, np.cheat)
            }
            None => {
                let weights: Vec<f64> = cfg.hardware.iter().map(|h| h.weight).collect();
                let hw = setup.weighted(&weights);
                let span = (cfg.price_max - cfg.price_min) as u64;
                let price = cfg.price_min + u128::from(setup.below(span + 1));
                let cheat = if setup.chance(cfg.cheat.fraction) {
                    let k = setup.below(cfg.cheat.kinds.len() as u64) as usize;
                    cfg.cheat.kinds.get(k).copied()
                } else {
                    None
                };
                (None, hw, price, cheat)
            }
        };
        let rate = training::steps_per_s(&cfg.hardware[hardware], &cfg.job);
        ProviderState {
            name,
            hardware,
            rate,
            price,
            cheat,
            online: false,
            incarnation: 0,
            rng,
        }
    }
}

impl World {
    pub fn clients_start(&mut self, c: NodeId) {
        // Continuous runs spread job starts over the first seconds; presets start at 0.
        let jitter = if self.cfg.job.jobs_per_client == 0 {
            self.clients[c as usize].rng.below(5_000)
        } else {
            0
        };
        self.timer(c, jitter, Timer::CreateJob);
    }

    /// A provider process starts: it stakes, and its first failure is drawn.
    pub fn provider_start(&mut self, p: usize) {
        let node = self.provider_node(p);
        self.providers[p].online = true;
        self.submit(
            node,
            Call::Register {
                amount: gpuchain_protocol::U256::from(self.cfg.protocol.stake),
            },
        );
        self.schedule_failure(p);
    }

    fn schedule_failure(&mut self, p: usize) {
        if self.cfg.churn.mttf_s > 0.0 && self.faulty() {
            let d = ms(self.churn_rng.exp(self.cfg.churn.mttf_s));
            let node = self.provider_node(p);
            self.at(d, Event::Fail { node });
        }
    }

    /// A failure: the process stops, whatever it was doing; scripted kills never rejoin
    /// unless scripted, churn failures rejoin after a random downtime.
    pub fn provider_fail(&mut self, node: NodeId) {
        let Some(p) = self.provider_index(node) else {
            return;
        };
        if !self.providers[p].online {
            return;
        }
        let churn = self
            .cfg
            .script
            .iter()
            .all(|s| s.provider.as_str() != self.providers[p].name.as_deref().unwrap_or(""));
        if churn && !self.faulty() {
            return;
        }
        for (job, epoch) in self.drive_current(node) {
            let now = self.now;
            if let Some(b) = self.book_mut(job)
                && b.epoch == epoch
                && b.provider == Some(node)
            {
                b.failed_at = Some(now);
                self.metrics.failures_while_assigned += 1;
            }
            self.note(|w| format!("Job {job}: {} stops (process killed)", w.name(node)));
        }
        self.drive_kill(node);
        let st = &mut self.providers[p];
        st.online = false;
        st.incarnation += 1;
        if churn && self.cfg.churn.rejoin_s > 0.0 {
            let d = ms(self.churn_rng.exp(self.cfg.churn.rejoin_s));
            self.at(d, Event::Rejoin { node });
        }
    }

    pub fn provider_rejoin(&mut self, node: NodeId) {
        let Some(p) = self.provider_index(node) else {
            return;
        };
        if self.providers[p].online {
            return;
        }
        let st = &mut self.providers[p];
        st.online = true;
        st.incarnation += 1;
        self.drive_revive(node);
        self.note(|w| format!("{} rejoins", w.name(node)));
        self.schedule_failure(p);
    }

    /// A scripted kill or rejoin of a named provider.
    pub(crate) fn script(&mut self, index: usize) {
        let s = self.cfg.script[index].clone();
        let Some(p) = self
            .providers
            .iter()
            .position(|p| p.name.as_deref() == Some(s.provider.as_str()))
        else {
            return;
        };
        let node = self.provider_node(p);
        match s.action {
            ScriptAction::Kill => self.provider_fail(node),
            ScriptAction::Rejoin => self.provider_rejoin(node),
        }
    }

    /// Makes the checkpoint at `step` (honest, or this provider's cheat) and registers its
    /// ground truth; returns its hash and the probability that a re-executed step of its
    /// interval does not reproduce.
    pub(crate) fn produce_checkpoint(
        &mut self,
        p: usize,
        job: JobId,
        epoch: Epoch,
        step: Step,
        parent: Hash,
    ) -> (Hash, f64) {
        let cfg = &self.cfg;
        let faulty = self.faulty();
        let node = self.provider_node(p);
        let st = &mut self.providers[p];
        let cheat = match st.cheat {
            Some(k) if faulty && st.rng.chance(cfg.cheat.rate) => Some(k),
            _ => None,
        };
        let honest_acc =
            training::accuracy_at(&cfg.job, step as f64) + (st.rng.unit() - 0.5) * 0.01;
        let honest_loss =
            training::loss_at(&cfg.job, step as f64) * (1.0 + (st.rng.unit() - 0.5) * 0.02);
        let junk_acc = cfg.job.acc_base + st.rng.unit() * 0.15;
        let mut truth = Truth {
            job,
            epoch,
            step,
            provider: node,
            cheat,
            accuracy: honest_acc,
            loss: honest_loss,
            step_mismatch: 0.0,
            announced_at: self.now,
        };
        let hash = match cheat {
            None => self.register_truth(job, truth),
            Some(CheatKind::StaleParent) => parent,
            Some(CheatKind::OtherJob) if self.last_honest.is_some_and(|(j, _)| j != job) => {
                self.last_honest.map_or(parent, |(_, h)| h)
            }
            Some(kind) => {
                match kind {
                    CheatKind::Lazy => {
                        let skip = cfg.cheat.lazy_skip;
                        truth.accuracy =
                            training::accuracy_at(&cfg.job, step as f64 * (1.0 - skip));
                        truth.loss = training::loss_at(&cfg.job, step as f64 * (1.0 - skip));
                        truth.step_mismatch = skip;
                    }
                    CheatKind::WrongDataOrder => {
                        truth.accuracy -= 0.01;
                        truth.step_mismatch = 1.0;
                    }
                    CheatKind::Nan => {
                        truth.loss = f64::NAN;
                        truth.accuracy = f64::NAN;
                        truth.step_mismatch = 1.0;
                    }
                    // Junk, and other-job with no other job's checkpoint to steal yet.
                    _ => {
                        truth.accuracy = junk_acc;
                        truth.loss = cfg.job.loss_start * 1.5;
                        truth.step_mismatch = 1.0;
                        truth.cheat = Some(CheatKind::Junk);
                    }
                }
                self.register_truth(job, truth)
            }
        };
        if let Some(k) = cheat {
            let k = if k == CheatKind::OtherJob && self.last_honest.is_none_or(|(j, _)| j == job) {
                CheatKind::Junk
            } else {
                k
            };
            self.cheat_claims.insert((job, epoch, step), (k, self.now));
            self.metrics.cheats.entry(k).or_default().announced += 1;
            self.note(|w| {
                format!(
                    "Job {job}: {} announces a {} checkpoint at step {step}",
                    w.name(node),
                    k.name()
                )
            });
        }
        let mismatch = self.truths.get(&hash).map_or(1.0, |t| {
            if t.job == job && t.step == step {
                t.step_mismatch
            } else {
                1.0
            }
        });
        (hash, mismatch)
    }
}
