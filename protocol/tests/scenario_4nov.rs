//! The product page's 4 Nov run, played through the three roles in virtual time with a
//! the escrow model and scripted trainer/verifier results, asserting every decision:
//! fashion-cnn, 400 steps, checkpoint every 50; A trains and 50..150 are accepted; A dies at
//! step 158 and is noticed within 0.3 s; P resumes from 150 in a new epoch, its checkpoint
//! fails the quality test and both verifiers reject it; B resumes from 150 and finishes.
//! Payouts: A 150 steps, B 250 steps, P nothing and slashed. The chain is the escrow model
//! (`gpuchain_protocol::escrow`), the one the simulator runs and the differential test holds
//! to the contract, so every transaction the machines submit meets the contract's checks.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

mod common;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use common::*;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, TxId};
use gpuchain_protocol::client::JobParams;
use gpuchain_protocol::escrow::{Escrow, Status};
use gpuchain_protocol::io::QualityReport;
use gpuchain_protocol::signing::SigningKey;
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{
    Address, Client, ClientConfig, Hash, Input, Notice, Output, Provider, ProviderConfig,
    StateMachine, Time, U256, Verdict, Verifier, VerifierConfig,
};

const CLIENT: usize = 0;
const A: usize = 1;
const P: usize = 2;
const B: usize = 3;
const V1: usize = 4;
const V2: usize = 5;

const NET: Duration = Duration::from_millis(5);
const TX: Duration = Duration::from_millis(50);
const STEP: Duration = Duration::from_millis(40);
const BLOB: Duration = Duration::from_millis(10);
const TEST: Duration = Duration::from_millis(30);
const BUDGET: u64 = 5_000_000;

fn tag(node: usize) -> u8 {
    [0, 0xa, 0xf, 0xb][node]
}

enum Event {
    Deliver { to: usize, bytes: Vec<u8> },
    Input { to: usize, input: Input },
    Tx { from: usize, id: TxId, tx: ChainTx },
    TrainStep { node: usize, epoch: u64 },
}

struct Trainer {
    epoch: u64,
    step: u64,
    last_ckpt: u64,
    until: u64,
}

struct World {
    now: Time,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    events: BTreeMap<usize, Event>,
    nodes: Vec<Box<dyn StateMachine>>,
    alive: Vec<bool>,
    trainers: BTreeMap<usize, Trainer>,
    escrow: Escrow,
    /// Each node's address: the sender of its transactions.
    addresses: Vec<Address>,
    chain_log: Vec<(Time, ChainEvent)>,
    tx_failures: Vec<(usize, String)>,
    notices: Vec<(Time, usize, Notice)>,
    starts: Vec<(Time, usize, u64, u64, Hash)>,
    verdicts: Vec<(usize, Verdict)>,
    killed_at: Option<Time>,
    killed_step: u64,
}

impl World {
    fn schedule(&mut self, after: Duration, event: Event) {
        self.seq += 1;
        let id = self.seq as usize;
        self.events.insert(id, event);
        self.queue
            .push(Reverse((self.now.saturating_add(after), self.seq, id)));
    }

    fn route(&mut self, from: usize) {
        while let Some(out) = self.nodes[from].poll_output() {
            match out {
                Output::Publish { message, .. } => {
                    let bytes = message.try_encode().expect("honest messages fit");
                    for to in 0..self.nodes.len() {
                        if to != from {
                            self.schedule(
                                NET,
                                Event::Deliver {
                                    to,
                                    bytes: bytes.clone(),
                                },
                            );
                        }
                    }
                }
                Output::SubmitTx { id, tx } => self.schedule(TX, Event::Tx { from, id, tx }),
                Output::StartTraining {
                    epoch,
                    from_step,
                    from_checkpoint,
                    until_step,
                    ..
                } => {
                    self.starts
                        .push((self.now, from, epoch, from_step, from_checkpoint));
                    self.trainers.insert(
                        from,
                        Trainer {
                            epoch,
                            step: from_step,
                            last_ckpt: from_step,
                            until: until_step,
                        },
                    );
                    self.schedule(STEP, Event::TrainStep { node: from, epoch });
                }
                Output::StopTraining { .. } => {
                    self.trainers.remove(&from);
                }
                Output::FetchBlob { hash, .. } => {
                    if from != CLIENT {
                        self.schedule(
                            BLOB,
                            Event::Input {
                                to: from,
                                input: Input::BlobFetched { hash, ok: true },
                            },
                        );
                    }
                }
                Output::RunQualityTest {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    ..
                } => {
                    // P's checkpoint is junk: ~10 % accuracy, below the previous accepted one.
                    let junk = checkpoint_hash == ckpt(tag(P), step);
                    let report = if junk {
                        QualityReport {
                            pass: false,
                            accuracy: 0.1,
                            loss: 2.3,
                        }
                    } else {
                        QualityReport {
                            pass: true,
                            accuracy: 0.8,
                            loss: 0.5,
                        }
                    };
                    let input = Input::QualityResult {
                        job_id,
                        epoch,
                        step,
                        checkpoint_hash,
                        report,
                    };
                    self.schedule(TEST, Event::Input { to: from, input });
                }
                Output::RunSpotCheck {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    steps,
                    ..
                } => {
                    assert!(!steps.is_empty());
                    let input = Input::SpotCheckResult {
                        job_id,
                        epoch,
                        step,
                        checkpoint_hash,
                        pass: true,
                    };
                    self.schedule(TEST, Event::Input { to: from, input });
                }
                Output::Notice(n) => self.notices.push((self.now, from, n)),
                Output::Subscribe { .. } | Output::Unsubscribe { .. } => {}
            }
        }
    }

    fn step(&mut self) -> bool {
        let next_event = self.queue.peek().map(|Reverse((t, _, _))| *t);
        let next_timer = (0..self.nodes.len())
            .filter(|&i| self.alive[i])
            .filter_map(|i| self.nodes[i].poll_timeout())
            .min();
        let Some(now) = [next_event, next_timer].into_iter().flatten().min() else {
            return false;
        };
        assert!(now >= self.now, "time never runs backwards");
        self.now = now;
        if next_timer == Some(now) {
            for i in 0..self.nodes.len() {
                if self.alive[i] && self.nodes[i].poll_timeout().is_some_and(|t| t <= now) {
                    self.nodes[i].handle_timeout(now);
                    self.route(i);
                }
            }
            return true;
        }
        let Some(Reverse((_, _, id))) = self.queue.pop() else {
            return false;
        };
        let Some(event) = self.events.remove(&id) else {
            return true;
        };
        match event {
            Event::Deliver { to, bytes } => {
                if self.alive[to] {
                    let msg = Message::decode(&bytes).expect("honest bytes decode");
                    let v = self.nodes[to].handle_message(now, &msg);
                    self.verdicts.push((to, v));
                    self.route(to);
                }
            }
            Event::Input { to, input } => {
                if self.alive[to] {
                    self.nodes[to].handle_input(now, input);
                    self.route(to);
                }
            }
            Event::Tx { from, id, tx } => {
                let block_time = BLOCK_TIME + now.as_millis() / 1000;
                match self
                    .escrow
                    .apply(&tx.into(), self.addresses[from], block_time)
                {
                    Ok(events) => {
                        for event in events.into_iter().filter_map(|e| e.job().cloned()) {
                            self.chain_log.push((now, event.clone()));
                            for to in 0..self.nodes.len() {
                                if self.alive[to] {
                                    self.nodes[to].handle_input(
                                        now,
                                        Input::Chain {
                                            block_time,
                                            event: event.clone(),
                                        },
                                    );
                                    self.route(to);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        self.tx_failures.push((from, e.to_string()));
                        if self.alive[from] {
                            let reason = e.to_string();
                            self.nodes[from].handle_input(now, Input::TxFailed { id, reason });
                            self.route(from);
                        }
                    }
                }
            }
            Event::TrainStep { node, epoch } => {
                if !self.alive[node] {
                    return true;
                }
                let Some(tr) = self.trainers.get_mut(&node).filter(|t| t.epoch == epoch) else {
                    return true;
                };
                tr.step += 1;
                let (step, parent, until) = (tr.step, tr.last_ckpt, tr.until);
                let mut inputs = vec![Input::StepDone {
                    job_id: job(),
                    epoch,
                    step,
                    loss: 1.0 / step as f32,
                }];
                if step % 50 == 0 || step == until {
                    tr.last_ckpt = step;
                    inputs.push(Input::CheckpointReady {
                        job_id: job(),
                        epoch,
                        step,
                        checkpoint_hash: ckpt(tag(node), step),
                        state_hashes: states(tag(node), parent, step),
                    });
                }
                for input in inputs {
                    self.nodes[node].handle_input(now, input);
                    self.route(node);
                }
                if node == A && step == 158 {
                    // A dies mid-interval: no more output, no more input.
                    self.alive[A] = false;
                    self.killed_at = Some(now);
                    self.killed_step = step;
                    self.trainers.remove(&A);
                } else if step < until {
                    self.schedule(STEP, Event::TrainStep { node, epoch });
                }
            }
        }
        true
    }
}

fn provider(key: &SigningKey, price: u64) -> Box<dyn StateMachine> {
    Box::new(Provider::new(
        ProviderConfig::new(domain(), gpu(8), U256::from(price)),
        key.clone(),
    ))
}

#[test]
fn four_november_story() {
    let k = keys();
    let mut client = Client::new(ClientConfig::new(domain()), k.client.clone());
    client.create_job(
        spec(),
        JobParams {
            token: TOKEN,
            budget: U256::from(BUDGET),
            max_price_per_step: U256::from(MAX_PRICE),
            verifiers: vec![k.v1.address(), k.v2.address()],
            quorum: 2,
            deadline: BLOCK_TIME + 3600,
            grace: 600,
        },
    );
    let mut w = World {
        now: Time::ZERO,
        seq: 0,
        queue: BinaryHeap::new(),
        events: BTreeMap::new(),
        nodes: vec![
            Box::new(client),
            provider(&k.a, 1000),
            provider(&k.p, 2000),
            provider(&k.b, 3000),
            Box::new(Verifier::new(
                VerifierConfig::new(domain(), 1),
                k.v1.clone(),
            )),
            Box::new(Verifier::new(
                VerifierConfig::new(domain(), 2),
                k.v2.clone(),
            )),
        ],
        alive: vec![true; 6],
        trainers: BTreeMap::new(),
        escrow: escrow(&k),
        addresses: [&k.client, &k.a, &k.p, &k.b, &k.v1, &k.v2]
            .iter()
            .map(|key| key.address())
            .collect(),
        chain_log: vec![],
        tx_failures: vec![],
        notices: vec![],
        starts: vec![],
        verdicts: vec![],
        killed_at: None,
        killed_step: 0,
    };
    w.route(CLIENT);
    while w.step() {
        assert!(
            w.now < Time::from_millis(120_000),
            "the story ends in virtual time"
        );
    }

    let addr = |n: usize| {
        [
            k.client.address(),
            k.a.address(),
            k.p.address(),
            k.b.address(),
        ][n]
    };

    // Honest traffic is never rejected (only stale/duplicate ignores).
    let rejects: Vec<_> = w
        .verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Reject(_)))
        .collect();
    assert!(rejects.is_empty(), "{rejects:?}");

    // Selections: A (cheapest) for epoch 1, P for epoch 2 after A's loss, B for epoch 3.
    let selected: Vec<(u64, Address)> = w
        .notices
        .iter()
        .filter_map(|(_, _, n)| match n {
            Notice::ProviderSelected {
                epoch, provider, ..
            } => Some((*epoch, *provider)),
            _ => None,
        })
        .collect();
    assert_eq!(selected, vec![(1, addr(A)), (2, addr(P)), (3, addr(B))]);

    // Assignments on chain, each new epoch resuming at the last accepted checkpoint.
    let assignments: Vec<(u64, Address, u64, Hash)> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } => Some((*epoch, *provider, *start_step, *start_checkpoint)),
            _ => None,
        })
        .collect();
    let a150 = ckpt(tag(A), 150);
    let base = spec().spec_hash();
    assert_eq!(
        assignments,
        vec![
            (1, addr(A), 0, base),
            (2, addr(P), 150, a150),
            (3, addr(B), 150, a150)
        ]
    );
    // The providers started their trainers exactly there.
    let starts: Vec<_> = w
        .starts
        .iter()
        .map(|(_, n, e, s, h)| (*n, *e, *s, *h))
        .collect();
    assert_eq!(
        starts,
        vec![(A, 1, 0, base), (P, 2, 150, a150), (B, 3, 150, a150)]
    );

    // Accepted checkpoints: A's 50..150, B's 200..400; P's 200 rejected.
    let accepted: Vec<(u64, u64, Address)> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                provider,
                ..
            } => Some((*epoch, *step, *provider)),
            _ => None,
        })
        .collect();
    let mut expected: Vec<_> = [50, 100, 150].iter().map(|s| (1, *s, addr(A))).collect();
    expected.extend([200, 250, 300, 350, 400].iter().map(|s| (3, *s, addr(B))));
    assert_eq!(accepted, expected);
    let rejected: Vec<_> = w
        .chain_log
        .iter()
        .filter_map(|(_, e)| match e {
            ChainEvent::CheckpointRejected {
                epoch,
                step,
                provider,
                ..
            } => Some((*epoch, *step, *provider)),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, vec![(2, 200, addr(P))]);

    // Both verifiers voted on every checkpoint: accept for A's and B's, reject for P's.
    for v in [V1, V2] {
        let votes: Vec<(u64, u64, bool)> = w
            .notices
            .iter()
            .filter(|(_, n, _)| *n == v)
            .filter_map(|(_, _, n)| match n {
                Notice::Voted {
                    epoch,
                    step,
                    accept,
                    ..
                } => Some((*epoch, *step, *accept)),
                _ => None,
            })
            .collect();
        let mut want: Vec<_> = [50, 100, 150].iter().map(|s| (1, *s, true)).collect();
        want.push((2, 200, false));
        want.extend([200, 250, 300, 350, 400].iter().map(|s| (3, *s, true)));
        assert_eq!(votes, want, "verifier {v}");
    }

    // A died at step 158 and was noticed within 0.3 s of virtual time, not earlier.
    let killed = w.killed_at.expect("A was killed");
    assert_eq!(w.killed_step, 158);
    let lost: Vec<_> = w
        .notices
        .iter()
        .filter_map(|(t, _, n)| match n {
            Notice::ProviderLost {
                provider, epoch, ..
            } => Some((*t, *provider, *epoch)),
            _ => None,
        })
        .collect();
    assert_eq!(lost.len(), 1, "exactly one loss: {lost:?}");
    let (noticed, who, epoch) = lost[0];
    assert_eq!((who, epoch), (addr(A), 1));
    assert!(noticed > killed);
    assert!(
        noticed.since(killed) <= Duration::from_millis(300),
        "noticed after {:?}",
        noticed.since(killed)
    );
    // Training again (P's StartTraining) well inside the 5 s target, the assignment included.
    let p_start = w
        .starts
        .iter()
        .find(|s| s.1 == P)
        .map(|s| s.0)
        .expect("P started");
    assert!(
        p_start.since(killed) <= Duration::from_secs(1),
        "training again after {:?}",
        p_start.since(killed)
    );

    eprintln!(
        "A killed at {killed:?}; noticed after {:?}; P training again after {:?}; done at {:?}",
        noticed.since(killed),
        p_start.since(killed),
        w.now
    );

    // P was fenced by the rejection and stopped.
    assert!(w.notices.iter().any(|(_, n, x)| *n == P
        && *x
            == Notice::Fenced {
                job_id: job(),
                epoch: 2
            }));

    // Every transaction the machines sent passed the contract's checks.
    assert!(w.tx_failures.is_empty(), "{:?}", w.tx_failures);

    // Payouts: A 150 steps × 1000, B 250 steps × 3000, P nothing; the rest refunded once the
    // client's `settle` lands; P's stake slashed and burned, so the client gains nothing by it.
    let e = &w.escrow;
    assert_eq!(e.job(job()).map(|j| j.status), Some(Status::Completed));
    assert_eq!(e.withdrawable(addr(A), TOKEN), U256::from(150_000));
    assert_eq!(e.withdrawable(addr(B), TOKEN), U256::from(750_000));
    assert_eq!(e.withdrawable(addr(P), TOKEN), U256::ZERO);
    assert_eq!(e.stake_of(addr(P)).bonded, U256::ZERO);
    assert_eq!(e.stake_of(addr(B)).bonded, U256::from(MIN_STAKE));
    assert_eq!(e.burned(), U256::from(MIN_STAKE));
    // The client's refund: credited by its settle, or already withdrawn.
    let client_total = e.withdrawable(addr(CLIENT), TOKEN) + e.balance_of(TOKEN, addr(CLIENT));
    assert_eq!(client_total, U256::from(5_000_000u64 - BUDGET + 4_100_000));
    assert_eq!(
        e.balance_of(TOKEN, domain().escrow),
        e.owed_recomputed(TOKEN)
    );
    let refund = w.chain_log.iter().find_map(|(_, e)| match e {
        ChainEvent::JobCompleted { refund, .. } => Some(*refund),
        _ => None,
    });
    assert_eq!(refund, Some(U256::from(4_100_000)));
    assert!(
        w.notices
            .iter()
            .any(|(_, n, x)| *n == CLIENT && *x == Notice::JobFinished { job_id: job() })
    );
}
