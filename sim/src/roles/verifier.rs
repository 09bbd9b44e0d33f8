//! Verifier stand-in: follows the epochs of the jobs it is listed on, fetches each announced
//! checkpoint from its provider, runs the quality test against the last accepted checkpoint
//! and the re-execution spot check with its own random step choice, and votes.

use std::collections::{BTreeMap, BTreeSet};

use crate::cheat::quality_ok;
use crate::escrow::{self, Epoch, JobId, Step};
use crate::rng::SimRng;
use crate::world::{Msg, NodeId, Timer, World, ms};

pub struct VerifierState {
    rng: SimRng,
    epochs: BTreeMap<JobId, Epoch>,
    /// Accuracy of the last accepted checkpoint, per job (the quality test's baseline).
    baseline: BTreeMap<JobId, f64>,
    clients: BTreeMap<JobId, NodeId>,
    seen: BTreeSet<(JobId, Epoch, Step)>,
}

impl VerifierState {
    pub fn new(rng: SimRng) -> Self {
        VerifierState {
            rng,
            epochs: BTreeMap::new(),
            baseline: BTreeMap::new(),
            clients: BTreeMap::new(),
            seen: BTreeSet::new(),
        }
    }
}

impl World {
    pub fn verifier_message(&mut self, v: usize, msg: Msg) {
        let Msg::Announce {
            job,
            epoch,
            provider,
            step,
            hash,
        } = msg
        else {
            return;
        };
        let node = self.verifier_node(v);
        let vs = &mut self.verifiers[v];
        let Some(current) = vs.epochs.get(&job) else {
            return;
        };
        // An older epoch is fenced; a newer one means we lag the chain and will catch up.
        if epoch < *current || vs.seen.contains(&(job, epoch, step)) {
            return;
        }
        let bytes = self.cfg.job.checkpoint_bytes;
        // Only a fetch that starts counts as seen: a re-announce after a partition retries.
        if let Some(d) =
            self.net
                .transfer_ms(provider as usize, node as usize, bytes, &mut self.net_rng)
        {
            self.verifiers[v].seen.insert((job, epoch, step));
            self.timer(
                node,
                d,
                Timer::BlobFetched {
                    job,
                    epoch,
                    step,
                    hash,
                    provider,
                },
            );
        }
    }

    pub fn verifier_timer(&mut self, v: usize, timer: Timer) {
        let node = self.verifier_node(v);
        match timer {
            Timer::BlobFetched {
                job,
                epoch,
                step,
                hash,
                provider,
            } => {
                // The provider serves the blob: if it died meanwhile, the fetch failed.
                let served = self
                    .provider_index(provider)
                    .is_some_and(|p| self.providers[p].online);
                if !served {
                    return;
                }
                let observed = self.observe(hash, job, epoch, step);
                let vs = &mut self.verifiers[v];
                let baseline = vs
                    .baseline
                    .get(&job)
                    .copied()
                    .unwrap_or(self.cfg.job.acc_base);
                let quality = quality_ok(&observed, step, baseline, &self.cfg.job);
                let k = self.cfg.job.spot_check_steps;
                let spot = (0..k).all(|_| !vs.rng.chance(observed.step_mismatch));
                let busy_s = self.cfg.job.quality_test_s + f64::from(k) * self.cfg.job.spot_step_s;
                self.timer(
                    node,
                    ms(busy_s),
                    Timer::Verdict {
                        job,
                        epoch,
                        step,
                        hash,
                        accept: quality && spot,
                    },
                );
            }
            Timer::Verdict {
                job,
                epoch,
                step,
                hash,
                accept,
            } => {
                let vs = &self.verifiers[v];
                if vs.epochs.get(&job).is_none_or(|e| *e > epoch) {
                    return;
                }
                let Some(&client) = vs.clients.get(&job) else {
                    return;
                };
                self.send(
                    node,
                    client,
                    Msg::Vote {
                        job,
                        epoch,
                        step,
                        hash,
                        accept,
                        verifier: node,
                    },
                );
            }
            _ => {}
        }
    }

    pub fn verifier_chain(&mut self, v: usize, e: &escrow::Event) {
        let acc_base = self.cfg.job.acc_base;
        match e {
            escrow::Event::JobCreated { job_id, client, .. } => {
                let vs = &mut self.verifiers[v];
                vs.epochs.insert(*job_id, 0);
                vs.baseline.insert(*job_id, acc_base);
                vs.clients.insert(*job_id, *client);
            }
            escrow::Event::ProviderAssigned { job_id, epoch, .. } => {
                if let Some(cur) = self.verifiers[v].epochs.get_mut(job_id) {
                    *cur = (*cur).max(*epoch);
                }
            }
            escrow::Event::CheckpointAccepted {
                job_id,
                checkpoint_hash,
                ..
            } => {
                let acc = self.truths.get(checkpoint_hash).map(|t| t.accuracy);
                if let (Some(acc), Some(b)) = (acc, self.verifiers[v].baseline.get_mut(job_id)) {
                    *b = acc;
                }
            }
            escrow::Event::JobCompleted { job_id, .. }
            | escrow::Event::JobExpired { job_id, .. } => {
                let vs = &mut self.verifiers[v];
                vs.epochs.remove(job_id);
                vs.baseline.remove(job_id);
                vs.clients.remove(job_id);
                vs.seen.retain(|k| k.0 != *job_id);
            }
            _ => {}
        }
    }
}
