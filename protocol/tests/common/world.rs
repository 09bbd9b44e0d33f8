//! A small deterministic world for the scenario tests: the role machines in virtual time, a
//! gossip that delivers everything after `NET`, scripted trainers and verifier runners, and
//! the escrow model as the chain (each transaction mined in a block of its own, `TX` after it
//! was sent, the block hashes recorded for the committee draw).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

use gpuchain_protocol::chain::{ChainEvent, ChainTx, TxId};
use gpuchain_protocol::escrow::{Block, Escrow, Event as EscrowEvent};
use gpuchain_protocol::io::QualityReport;
use gpuchain_protocol::wire::Message;
use gpuchain_protocol::{Address, Hash, Input, Notice, Output, StateMachine, Time, Verdict};

use super::{BLOCK_TIME, block_hash, ckpt, job, states};

pub const NET: Duration = Duration::from_millis(5);
pub const TX: Duration = Duration::from_millis(50);
pub const STEP: Duration = Duration::from_millis(40);
pub const BLOB: Duration = Duration::from_millis(10);
pub const TEST: Duration = Duration::from_millis(30);
/// The demo job's checkpoint interval.
pub const INTERVAL: u64 = 50;

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

pub struct World {
    pub now: Time,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    events: BTreeMap<usize, Event>,
    pub nodes: Vec<Box<dyn StateMachine>>,
    pub alive: Vec<bool>,
    trainers: BTreeMap<usize, Trainer>,
    pub escrow: Escrow,
    /// The last block mined.
    pub block_number: u64,
    /// Each node's address: the sender of its transactions.
    pub addresses: Vec<Address>,
    /// Each node's checkpoint tag (what `ckpt` names its checkpoints by).
    pub tags: Vec<u8>,
    /// Nodes whose checkpoints fail the quality test.
    pub junk: BTreeSet<usize>,
    /// A node that dies right after the given step.
    pub kill: Option<(usize, u64)>,
    /// Every job event the escrow emitted, with when.
    pub chain_log: Vec<(Time, ChainEvent)>,
    /// Every escrow event (stake, fees, payouts too).
    pub escrow_log: Vec<EscrowEvent>,
    /// Every transaction that landed, with its sender node.
    pub landed: Vec<(usize, ChainTx)>,
    pub tx_failures: Vec<(usize, ChainTx, String)>,
    pub notices: Vec<(Time, usize, Notice)>,
    /// (when, node, epoch, from step, from checkpoint) of every StartTraining.
    pub starts: Vec<(Time, usize, u64, u64, Hash)>,
    pub verdicts: Vec<(usize, Verdict)>,
    pub killed_at: Option<Time>,
    pub killed_step: u64,
}

impl World {
    pub fn new(
        nodes: Vec<Box<dyn StateMachine>>,
        addresses: Vec<Address>,
        tags: Vec<u8>,
        escrow: Escrow,
    ) -> World {
        let n = nodes.len();
        World {
            now: Time::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            nodes,
            alive: vec![true; n],
            trainers: BTreeMap::new(),
            escrow,
            // The fixture's escrow staked everyone in block 1.
            block_number: 1,
            addresses,
            tags,
            junk: BTreeSet::new(),
            kill: None,
            chain_log: vec![],
            escrow_log: vec![],
            landed: vec![],
            tx_failures: vec![],
            notices: vec![],
            starts: vec![],
            verdicts: vec![],
            killed_at: None,
            killed_step: 0,
        }
    }

    fn schedule(&mut self, after: Duration, event: Event) {
        self.seq += 1;
        let id = self.seq as usize;
        self.events.insert(id, event);
        self.queue
            .push(Reverse((self.now.saturating_add(after), self.seq, id)));
    }

    /// Executes what node `from` asked for.
    pub fn route(&mut self, from: usize) {
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
                Output::StopTraining { epoch, .. } => {
                    if self.trainers.get(&from).is_some_and(|t| t.epoch == epoch) {
                        self.trainers.remove(&from);
                    }
                }
                Output::FetchBlob { hash, .. } => {
                    self.schedule(
                        BLOB,
                        Event::Input {
                            to: from,
                            input: Input::BlobFetched { hash, ok: true },
                        },
                    );
                }
                Output::RunQualityTest {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash,
                    ..
                } => {
                    // A junk node's checkpoint: ~10 % accuracy, below the previous accepted one.
                    let junk = self
                        .junk
                        .iter()
                        .any(|n| checkpoint_hash == ckpt(self.tags[*n], step));
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
                Output::Subscribe { .. }
                | Output::Unsubscribe { .. }
                | Output::PrepareJob { .. } => {}
            }
        }
    }

    /// Runs the next timer or event; false when nothing is left.
    pub fn step(&mut self) -> bool {
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
            Event::Tx { from, id, tx } => self.mine(now, from, id, tx),
            Event::TrainStep { node, epoch } => self.train(now, node, epoch),
        }
        true
    }

    /// The transaction in a block of its own; its job events to every live node.
    fn mine(&mut self, now: Time, from: usize, id: TxId, tx: ChainTx) {
        self.escrow
            .record_block_hash(self.block_number, block_hash(self.block_number));
        self.block_number += 1;
        let block = Block {
            number: self.block_number,
            time: BLOCK_TIME + now.as_millis() / 1000,
        };
        match self
            .escrow
            .apply(&tx.clone().into(), self.addresses[from], block)
        {
            Ok(events) => {
                self.landed.push((from, tx));
                for event in events {
                    self.escrow_log.push(event.clone());
                    let Some(event) = event.job().cloned() else {
                        continue;
                    };
                    self.chain_log.push((now, event.clone()));
                    for to in 0..self.nodes.len() {
                        if self.alive[to] {
                            self.nodes[to].handle_input(
                                now,
                                Input::Chain {
                                    block_time: block.time,
                                    event: event.clone(),
                                },
                            );
                            self.route(to);
                        }
                    }
                }
            }
            Err(e) => {
                let reason = e.to_string();
                self.tx_failures.push((from, tx, reason.clone()));
                if self.alive[from] {
                    self.nodes[from].handle_input(now, Input::TxFailed { id, reason });
                    self.route(from);
                }
            }
        }
    }

    fn train(&mut self, now: Time, node: usize, epoch: u64) {
        if !self.alive[node] {
            return;
        }
        let Some(tr) = self.trainers.get_mut(&node).filter(|t| t.epoch == epoch) else {
            return;
        };
        tr.step += 1;
        let (step, parent, until) = (tr.step, tr.last_ckpt, tr.until);
        let mut inputs = vec![Input::StepDone {
            job_id: job(),
            epoch,
            step,
            loss: 1.0 / step as f32,
        }];
        if step % INTERVAL == 0 || step == until {
            tr.last_ckpt = step;
            inputs.push(Input::CheckpointReady {
                job_id: job(),
                epoch,
                step,
                checkpoint_hash: ckpt(self.tags[node], step),
                state_hashes: states(self.tags[node], parent, step),
            });
        }
        for input in inputs {
            self.nodes[node].handle_input(now, input);
            self.route(node);
        }
        if self.kill == Some((node, step)) {
            // Dies mid-interval: no more output, no more input.
            self.alive[node] = false;
            self.killed_at = Some(now);
            self.killed_step = step;
            self.trainers.remove(&node);
        } else if step < until {
            self.schedule(STEP, Event::TrainStep { node, epoch });
        }
    }

    /// Runs until nothing is left, failing past `limit` of virtual time.
    pub fn run(&mut self, limit: Duration) {
        while self.step() {
            assert!(
                self.now < Time::ZERO.saturating_add(limit),
                "the story ends in virtual time"
            );
        }
    }

    /// The job's events of one kind, in order.
    pub fn events<T>(&self, f: impl Fn(&ChainEvent) -> Option<T>) -> Vec<T> {
        self.chain_log.iter().filter_map(|(_, e)| f(e)).collect()
    }
}
