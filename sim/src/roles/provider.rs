//! Provider stand-in: stakes, bids when idle, acts on the chain's assignment (not on gossip),
//! fetches the start checkpoint, trains at its hardware's rate, heartbeats, checkpoints every
//! interval (honestly or, for a cheater, in its way), stops when its epoch ends.

use crate::cheat::CheatKind;
use crate::config::SimConfig;
use crate::escrow::{self, Call, Epoch, Hash, JobId, Step};
use crate::queue::Millis;
use crate::rng::SimRng;
use crate::training;
use crate::world::{Msg, NodeId, Timer, Truth, World, ms};

pub struct Assignment {
    pub job: JobId,
    pub epoch: Epoch,
    client: NodeId,
    verifiers: Vec<NodeId>,
    start_step: Step,
    total_steps: Step,
    interval: Step,
    /// The last checkpoint this epoch builds on (accepted start, then its own announcements).
    parent: Hash,
    train_start: Option<Millis>,
    fetch_sources: Vec<NodeId>,
    fetch_attempt: usize,
    /// The latest announcement and the chain's last accepted step: gossip can lose an
    /// announcement, so an undecided one is announced again until the chain moves past it.
    announced: Option<(Step, Hash)>,
    accepted: Step,
    reannounce_armed: bool,
}

pub struct ProviderState {
    pub name: Option<String>,
    pub hardware: usize,
    pub rate: Option<f64>,
    pub price: u128,
    pub cheat: Option<CheatKind>,
    pub online: bool,
    pub incarnation: u32,
    pub busy: Option<Assignment>,
    reserved: bool,
    pub(crate) rng: SimRng,
    node: NodeId,
}

impl ProviderState {
    pub fn new(
        cfg: &SimConfig,
        index: usize,
        node: NodeId,
        setup: &mut SimRng,
        rng: SimRng,
    ) -> Self {
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
            busy: None,
            reserved: false,
            rng,
            node,
        }
    }

    /// The step reached at `now` (training is continuous across checkpoints).
    fn progress(&self, now: Millis) -> Step {
        let (Some(a), Some(rate)) = (&self.busy, self.rate) else {
            return 0;
        };
        match a.train_start {
            None => a.start_step,
            Some(t0) => {
                let done = ((now.saturating_sub(t0)) as f64 / 1000.0 * rate).floor() as u64;
                (a.start_step + done).min(a.total_steps)
            }
        }
    }
}

impl World {
    pub fn provider_start(&mut self, p: usize) {
        let node = self.provider_node(p);
        self.providers[p].online = true;
        self.set_idle(p, true);
        self.submit(
            node,
            Call::Register {
                amount: self.cfg.protocol.stake,
            },
        );
        self.schedule_failure(p);
    }

    fn schedule_failure(&mut self, p: usize) {
        if self.cfg.churn.mttf_s > 0.0 && self.faulty() {
            let d = ms(self.churn_rng.exp(self.cfg.churn.mttf_s));
            let node = self.provider_node(p);
            self.at(d, crate::world::Event::Fail { node });
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
        let mut current: Vec<(JobId, Epoch)> = self.providers[p]
            .busy
            .as_ref()
            .map(|a| (a.job, a.epoch))
            .into_iter()
            .collect();
        current.extend(self.drive_current(node));
        for (job, epoch) in current {
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
        self.provider_stop(p);
        self.drive_kill(node);
        let st = &mut self.providers[p];
        st.online = false;
        st.reserved = false;
        st.incarnation += 1;
        self.set_idle(p, false);
        if churn && self.cfg.churn.rejoin_s > 0.0 {
            let d = ms(self.churn_rng.exp(self.cfg.churn.rejoin_s));
            self.at(d, crate::world::Event::Rejoin { node });
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
        self.set_idle(p, true);
        self.drive_revive(node);
        self.note(|w| format!("{} rejoins", w.name(node)));
        self.schedule_failure(p);
    }

    /// Ends the current assignment, counting the steps it trained.
    pub fn provider_stop(&mut self, p: usize) {
        let now = self.now;
        let reached = self.providers[p].progress(now);
        if let Some(a) = self.providers[p].busy.take() {
            self.metrics.steps_trained += reached.saturating_sub(a.start_step);
        }
        if self.providers[p].online && !self.providers[p].reserved {
            self.set_idle(p, true);
        }
    }

    pub fn provider_message(&mut self, p: usize, msg: Msg) {
        let st = &self.providers[p];
        if !st.online {
            return;
        }
        if let Msg::Offer {
            job,
            client,
            next_epoch,
            max_price,
        } = msg
        {
            if st.busy.is_some() || st.reserved || st.rate.is_none() || st.price > max_price {
                return;
            }
            let node = st.node;
            let price = st.price;
            let expiry = self.chain_time_s() + self.cfg.protocol.bid_ttl_s;
            self.providers[p].reserved = true;
            self.set_idle(p, false);
            self.send(
                node,
                client,
                Msg::Bid {
                    job,
                    epoch: next_epoch,
                    provider: node,
                    price,
                    expiry,
                },
            );
            // Held for this bid until the round and its assignment had time to land.
            let hold = self.cfg.protocol.bid_window_ms * 2 + self.cfg.chain.block_ms * 2 + 2_000;
            self.timer(node, hold, Timer::Unreserve);
        }
    }

    pub fn provider_timer(&mut self, p: usize, timer: Timer) {
        let node = self.providers[p].node;
        match timer {
            Timer::Unreserve => {
                let st = &mut self.providers[p];
                st.reserved = false;
                if st.online && st.busy.is_none() {
                    self.set_idle(p, true);
                }
            }
            Timer::Heartbeat { job, epoch } => {
                let Some(a) = &self.providers[p].busy else {
                    return;
                };
                if a.job != job || a.epoch != epoch {
                    return;
                }
                let client = a.client;
                let step = self.providers[p].progress(self.now);
                self.send_heartbeat(node, client, job, epoch, step);
                self.timer(
                    node,
                    self.cfg.protocol.heartbeat_ms,
                    Timer::Heartbeat { job, epoch },
                );
            }
            Timer::FetchStart { job, epoch } => self.fetch_start(p, job, epoch),
            Timer::Reannounce { job, epoch } => {
                let Some(a) = self.providers[p].busy.as_mut() else {
                    return;
                };
                if a.job != job || a.epoch != epoch {
                    return;
                }
                // Armed only while something is undecided: idle timers cost events at scale.
                if a.announced.is_some_and(|(s, _)| s > a.accepted) {
                    self.announce(p);
                    self.timer(
                        node,
                        self.cfg.protocol.reannounce_ms,
                        Timer::Reannounce { job, epoch },
                    );
                } else {
                    a.reannounce_armed = false;
                }
            }
            Timer::StartFetched { job, epoch } => {
                let now = self.now;
                let Some(a) = self.providers[p].busy.as_mut() else {
                    return;
                };
                if a.job != job || a.epoch != epoch || a.train_start.is_some() {
                    return;
                }
                a.train_start = Some(now);
                let next = ((a.start_step / a.interval) + 1) * a.interval;
                let next = next.min(a.total_steps);
                let start = a.start_step;
                self.training_started(job, node, start, now);
                self.schedule_checkpoint(p, next);
            }
            Timer::CheckpointDue { job, epoch, step } => {
                let Some(a) = &self.providers[p].busy else {
                    return;
                };
                if a.job != job || a.epoch != epoch {
                    return;
                }
                self.checkpoint(p, step);
                let Some(a) = &self.providers[p].busy else {
                    return;
                };
                if step < a.total_steps {
                    let next = (step + a.interval).min(a.total_steps);
                    self.schedule_checkpoint(p, next);
                }
            }
            _ => {}
        }
    }

    fn schedule_checkpoint(&mut self, p: usize, step: Step) {
        let st = &self.providers[p];
        let (Some(a), Some(rate)) = (&st.busy, st.rate) else {
            return;
        };
        let Some(t0) = a.train_start else { return };
        let at = t0 + training::train_ms(step - a.start_step, rate);
        let (job, epoch, node) = (a.job, a.epoch, st.node);
        self.timer(
            node,
            at.saturating_sub(self.now),
            Timer::CheckpointDue { job, epoch, step },
        );
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
        let st = &mut self.providers[p];
        let node = st.node;
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

    /// Produces the checkpoint at `step`, honest or cheating, and announces it.
    fn checkpoint(&mut self, p: usize, step: Step) {
        let Some(a) = &self.providers[p].busy else {
            return;
        };
        let (job, epoch, parent) = (a.job, a.epoch, a.parent);
        let (hash, _) = self.produce_checkpoint(p, job, epoch, step, parent);
        let node = self.providers[p].node;
        let Some(a) = self.providers[p].busy.as_mut() else {
            return;
        };
        a.parent = hash;
        let arm = !a.reannounce_armed;
        a.reannounce_armed = true;
        a.announced = Some((step, hash));
        self.announce(p);
        if arm {
            self.timer(
                node,
                self.cfg.protocol.reannounce_ms,
                Timer::Reannounce { job, epoch },
            );
        }
    }

    fn announce(&mut self, p: usize) {
        let node = self.providers[p].node;
        let Some(a) = &self.providers[p].busy else {
            return;
        };
        let Some((step, hash)) = a.announced else {
            return;
        };
        let (job, epoch) = (a.job, a.epoch);
        let mut to = a.verifiers.clone();
        to.push(a.client);
        for n in to {
            self.send(
                node,
                n,
                Msg::Announce {
                    job,
                    epoch,
                    provider: node,
                    step,
                    hash,
                },
            );
        }
    }

    fn fetch_start(&mut self, p: usize, job: JobId, epoch: Epoch) {
        let node = self.providers[p].node;
        let Some(a) = self.providers[p].busy.as_mut() else {
            return;
        };
        if a.job != job || a.epoch != epoch || a.train_start.is_some() {
            return;
        }
        let source = a.fetch_sources[a.fetch_attempt % a.fetch_sources.len()];
        a.fetch_attempt += 1;
        let bytes = self.cfg.job.checkpoint_bytes;
        match self
            .net
            .transfer_ms(source as usize, node as usize, bytes, &mut self.net_rng)
        {
            Some(d) => self.timer(node, d, Timer::StartFetched { job, epoch }),
            // Try the next holder after a second.
            None => self.timer(node, 1_000, Timer::FetchStart { job, epoch }),
        }
    }

    pub fn provider_chain(&mut self, p: usize, e: &escrow::Event) {
        let node = self.providers[p].node;
        if !self.providers[p].online {
            return;
        }
        match e {
            escrow::Event::ProviderAssigned {
                job_id,
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } if *provider == node => {
                if self.providers[p].busy.is_some() {
                    // Holding another job: it will not heartbeat here, and the client moves on.
                    return;
                }
                let Some(j) = self.escrow.job(*job_id) else {
                    return;
                };
                if j.epoch != *epoch {
                    return;
                }
                // The client and the job's verifiers keep the accepted checkpoint.
                let mut sources = vec![j.client];
                sources.extend(j.verifiers.iter().copied());
                let a = Assignment {
                    job: *job_id,
                    epoch: *epoch,
                    client: j.client,
                    verifiers: j.verifiers.clone(),
                    start_step: *start_step,
                    total_steps: j.total_steps,
                    interval: j.checkpoint_interval,
                    parent: *start_checkpoint,
                    train_start: None,
                    fetch_sources: sources,
                    fetch_attempt: 0,
                    announced: None,
                    accepted: *start_step,
                    reannounce_armed: false,
                };
                let st = &mut self.providers[p];
                st.busy = Some(a);
                st.reserved = false;
                self.set_idle(p, false);
                self.timer(
                    node,
                    0,
                    Timer::Heartbeat {
                        job: *job_id,
                        epoch: *epoch,
                    },
                );
                self.fetch_start(p, *job_id, *epoch);
            }
            escrow::Event::EpochEnded { job_id, epoch, .. } => {
                let mine = self.providers[p]
                    .busy
                    .as_ref()
                    .is_some_and(|a| a.job == *job_id && a.epoch == *epoch);
                if mine {
                    self.provider_stop(p);
                    if self.escrow.withdrawable(node) > 0 {
                        self.submit(node, Call::Withdraw);
                    }
                }
            }
            escrow::Event::CheckpointAccepted {
                job_id,
                epoch,
                step,
                ..
            } => {
                if let Some(a) = self.providers[p].busy.as_mut()
                    && a.job == *job_id
                    && a.epoch == *epoch
                {
                    a.accepted = a.accepted.max(*step);
                }
            }
            escrow::Event::CheckpointRejected { provider, .. } if *provider == node => {
                let have = self.escrow.stake_of(node).amount;
                let need = self.escrow.min_stake;
                if have < need {
                    self.submit(
                        node,
                        Call::Register {
                            amount: need - have,
                        },
                    );
                }
            }
            _ => {}
        }
    }
}
