//! The escrow model (`gpuchain_protocol::escrow`) rule by rule: the committee draw against an
//! independent computation, the verifier pool, fees and their slack rule, unanimity for
//! slashing, settle once, expiry from Drawing, the decision window, the deliberate bugs, and
//! the books after every call. The contract itself is held to the model by the differential
//! test (`contracts/bindings/tests/escrow_model.rs`).
//! Long because it walks the contract's rules one by one, like the model it tests.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

use alloy_primitives::{Address, U256, keccak256};
use alloy_sol_types::SolValue;
use gpuchain_protocol::chain::{ChainEvent, ChainTx, EpochEndReason};
use gpuchain_protocol::eip712::{BidFields, EscrowDomain, JobTerms, VoteFields};
use gpuchain_protocol::escrow::{
    Block, Call, ClosedEpoch, Escrow, EscrowError, Event, MAX_JOB_AMOUNT, Params, Status,
    VerifierStake, cost_bound, draw, draw_seed,
};
use gpuchain_protocol::signing::{Scheme, Sig65, SigningKey};
use gpuchain_protocol::types::{Epoch, Hash, JobId, Step};

const TOKEN: Address = Address::repeat_byte(0xAA);
const PARAMS: Params = Params {
    min_stake: U256::from_limbs([100, 0, 0, 0]),
    unbond_delay: 10,
    max_duration: 2_000,
    max_grace: 200,
    decision_window: 60,
    min_verifier_stake: U256::from_limbs([50, 0, 0, 0]),
};
const H: Hash = Hash::repeat_byte(5);

fn domain() -> EscrowDomain {
    EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xEE),
    }
}

struct F {
    e: Escrow,
    client: SigningKey,
    prov: SigningKey,
    prov2: SigningKey,
    /// Every pooled verifier, in registration order.
    vs: Vec<SigningKey>,
    /// The last block mined.
    number: u64,
}

/// What a test job looks like; `setup` creates and draws it.
#[derive(Clone, Copy)]
struct JobShape {
    verifiers: usize,
    committee_size: u8,
    quorum: u8,
    fee: u64,
    budget: u64,
}

const PAIR: JobShape = JobShape {
    verifiers: 2,
    committee_size: 2,
    quorum: 2,
    fee: 0,
    budget: 1_000,
};

impl F {
    fn new(verifiers: usize) -> F {
        let e = Escrow::new(domain(), Scheme::Secp256k1, TOKEN, PARAMS).unwrap();
        let mut f = F {
            e,
            client: SigningKey::from_seed(1),
            prov: SigningKey::from_seed(2),
            prov2: SigningKey::from_seed(3),
            vs: (0..verifiers)
                .map(|i| SigningKey::from_seed(10 + i as u64))
                .collect(),
            number: 0,
        };
        let escrow = f.e.address();
        let mut funded = vec![
            (f.client.address(), 10_000u64),
            (f.prov.address(), 1_000),
            (f.prov2.address(), 1_000),
        ];
        funded.extend(f.vs.iter().map(|v| (v.address(), 100)));
        for (who, amount) in funded {
            f.e.mint(TOKEN, who, U256::from(amount));
            f.e.approve(TOKEN, who, escrow, U256::MAX);
        }
        for p in [f.prov.address(), f.prov2.address()] {
            f.call(
                Call::Register {
                    amount: U256::from(100),
                },
                p,
                1,
            )
            .unwrap();
        }
        for v in f.vs.iter().map(SigningKey::address).collect::<Vec<_>>() {
            f.call(
                Call::RegisterVerifier {
                    amount: U256::from(50),
                },
                v,
                1,
            )
            .unwrap();
        }
        f
    }

    /// Mines `call` from `sender` in the next block (at `time`), the previous block's hash
    /// known by then.
    fn call(&mut self, call: Call, sender: Address, time: u64) -> Result<Vec<Event>, EscrowError> {
        self.e
            .record_block_hash(self.number, keccak256(self.number.to_be_bytes()));
        self.number += 1;
        self.e.apply(
            &call,
            sender,
            Block {
                number: self.number,
                time,
            },
        )
    }

    fn create(&mut self, s: JobShape, time: u64) -> Result<Vec<Event>, EscrowError> {
        let tx = ChainTx::CreateJob {
            token: TOKEN,
            budget: U256::from(s.budget),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 25,
            spec_hash: Hash::repeat_byte(77),
            committee_size: s.committee_size,
            quorum: s.quorum,
            verifier_fee: U256::from(s.fee),
            deadline: 1_000,
            grace: 100,
        };
        let client = self.client.address();
        self.call(tx.into(), client, time)
    }

    fn draw(&mut self, job_id: JobId, time: u64) -> Result<Vec<Event>, EscrowError> {
        let anyone = Address::repeat_byte(0x99);
        self.call(ChainTx::DrawCommittee { job_id }.into(), anyone, time)
    }

    fn bid(&self, key: &SigningKey, job_id: JobId, epoch: Epoch, price: u64) -> ChainTx {
        let price = U256::from(price);
        let fields = BidFields {
            job_id,
            terms: self.e.terms_of(job_id).unwrap_or_default(),
            epoch,
            provider: key.address(),
            price_per_step: price,
            expiry: 500,
        };
        ChainTx::Assign {
            job_id,
            provider: key.address(),
            price_per_step: price,
            bid_expiry: 500,
            bid_signature: fields.sign(&self.e.domain, key),
        }
    }

    fn assign(&mut self, job_id: JobId, epoch: Epoch, now: u64) -> Result<Vec<Event>, EscrowError> {
        let tx = self.bid(&self.prov, job_id, epoch, 4);
        let client = self.client.address();
        self.call(tx.into(), client, now)
    }

    fn assign2(
        &mut self,
        job_id: JobId,
        epoch: Epoch,
        now: u64,
    ) -> Result<Vec<Event>, EscrowError> {
        let tx = self.bid(&self.prov2, job_id, epoch, 6);
        let client = self.client.address();
        self.call(tx.into(), client, now)
    }

    /// Votes of the verifiers at `who` (indices into `vs`).
    fn votes(
        &self,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        accept: bool,
        who: &[usize],
    ) -> Vec<Sig65> {
        let fields = VoteFields {
            job_id,
            epoch,
            step,
            checkpoint_hash: H,
            accept,
        };
        who.iter()
            .map(|i| fields.sign(&self.e.domain, &self.vs[*i]))
            .collect()
    }

    fn all(&self) -> Vec<usize> {
        (0..self.vs.len()).collect()
    }

    fn decide(
        &mut self,
        accept: bool,
        epoch: Epoch,
        step: Step,
        sigs: Vec<Sig65>,
        now: u64,
    ) -> Result<Vec<Event>, EscrowError> {
        let job_id = U256::from(1);
        let tx = ChainTx::decision(accept, job_id, epoch, step, H, sigs);
        let anyone = Address::repeat_byte(0x98);
        self.call(tx.into(), anyone, now)
    }

    fn accept(
        &mut self,
        epoch: Epoch,
        step: Step,
        who: &[usize],
        now: u64,
    ) -> Result<Vec<Event>, EscrowError> {
        let sigs = self.votes(U256::from(1), epoch, step, true, who);
        self.decide(true, epoch, step, sigs, now)
    }

    fn reject(
        &mut self,
        epoch: Epoch,
        step: Step,
        who: &[usize],
        now: u64,
    ) -> Result<Vec<Event>, EscrowError> {
        let sigs = self.votes(U256::from(1), epoch, step, false, who);
        self.decide(false, epoch, step, sigs, now)
    }

    /// The `voters` bit set of the verifiers at `who`, by their committee positions.
    fn voters(&self, who: &[usize]) -> U256 {
        let job = self.e.job(U256::from(1)).unwrap();
        who.iter().fold(U256::ZERO, |acc, i| {
            let at = job.member_index(self.vs[*i].address()).unwrap();
            acc | (U256::from(1) << at)
        })
    }

    fn books_balance(&self) {
        let held = self.e.balance_of(TOKEN, self.e.address());
        assert_eq!(held, self.e.owed(TOKEN), "running books");
        assert_eq!(held, self.e.owed_recomputed(TOKEN), "recomputed books");
    }
}

/// A drawn job of shape `s`: created at time 1, drawn at time 2.
fn setup(s: JobShape) -> (F, JobId) {
    let mut f = F::new(s.verifiers);
    let created = f.create(s, 1).unwrap();
    let j = U256::from(1);
    // A late reader rebuilds exactly the event the creation emitted.
    assert_eq!(
        created.first().and_then(Event::job),
        f.e.created_event(j).as_ref()
    );
    assert_eq!(f.e.drawn_event(j), None);
    let drawn = f.draw(j, 2).unwrap();
    assert_eq!(
        drawn.first().and_then(Event::job),
        f.e.drawn_event(j).as_ref()
    );
    f.books_balance();
    (f, j)
}

fn job_event(ev: &[Event], i: usize) -> &ChainEvent {
    ev[i].job().unwrap()
}

#[test]
fn the_draw_is_the_seed_formula_bit_for_bit() {
    // An independent computation: js-sha3's keccak256 over the same words (node, with the
    // contracts' own node_modules, a shuffle over a whole array) gave this seed for blockhash
    // 0x11…11 and job 1, and over the pool 0x01…, …, 0x06… (the client 0x03… in it) the
    // shuffle's steps i = 0, 1, 2, 3, 4, 5 swap position i with j = 3, 3, 2, 3, 4, 5: step 0
    // draws 0x04… (and moves 0x01… to position 3), step 1 lands on position 3 again and draws
    // 0x01…, step 2 draws the client (skipped), step 3 draws 0x02…, then 0x05… and 0x06….
    let seed = draw_seed(Hash::repeat_byte(0x11), U256::from(1));
    assert_eq!(
        seed,
        "0x7deb3b60ec0f1bf56dbdd0ffedbadafddeaa08947884ff0f215ce93ee1826102"
            .parse::<Hash>()
            .unwrap()
    );
    // The same words through alloy's ABI encoder.
    assert_eq!(
        seed,
        keccak256((Hash::repeat_byte(0x11), U256::from(1)).abi_encode())
    );
    let pool: Vec<Address> = (1..=6).map(Address::repeat_byte).collect();
    let client = Address::repeat_byte(3);
    let expected: Vec<Address> = [4, 1, 2].into_iter().map(Address::repeat_byte).collect();
    assert_eq!(draw(seed, &pool, client, 3), Some(expected.clone()));
    assert_eq!(
        draw(seed, &pool, client, 5),
        Some(
            [4, 1, 2, 5, 6]
                .into_iter()
                .map(Address::repeat_byte)
                .collect()
        ),
        "every entry but the client, once"
    );
    assert_eq!(
        draw(seed, &pool, client, 6),
        None,
        "five besides the client"
    );

    // The model draws the same, from a pool registered in that order, the client in it.
    let mut e = Escrow::new(domain(), Scheme::Secp256k1, TOKEN, PARAMS).unwrap();
    for who in &pool {
        e.mint(TOKEN, *who, U256::from(10_000));
        e.approve(TOKEN, *who, domain().escrow, U256::MAX);
        e.apply(
            &Call::RegisterVerifier {
                amount: U256::from(50),
            },
            *who,
            Block { number: 1, time: 1 },
        )
        .unwrap();
    }
    assert_eq!(e.pool(), &pool[..]);
    let create = ChainTx::CreateJob {
        token: TOKEN,
        budget: U256::from(5_000),
        max_price_per_step: U256::from(10),
        total_steps: 100,
        checkpoint_interval: 25,
        spec_hash: Hash::repeat_byte(77),
        committee_size: 3,
        quorum: 2,
        verifier_fee: U256::from(5),
        deadline: 1_000,
        grace: 100,
    };
    let ev = e
        .apply(
            &create.into(),
            client,
            Block {
                number: 40,
                time: 1,
            },
        )
        .unwrap();
    assert!(matches!(
        job_event(&ev, 0),
        ChainEvent::JobCreated {
            seed_block: 40,
            committee_size: 3,
            ..
        }
    ));
    let j = U256::from(1);
    let draw_tx: Call = ChainTx::DrawCommittee { job_id: j }.into();
    let anyone = Address::repeat_byte(0x77);
    assert_eq!(
        e.apply(
            &draw_tx,
            anyone,
            Block {
                number: 40,
                time: 1
            }
        ),
        Err(EscrowError::SeedNotMined(40))
    );
    e.record_block_hash(40, Hash::repeat_byte(0x11));
    let ev = e
        .apply(
            &draw_tx,
            anyone,
            Block {
                number: 41,
                time: 2,
            },
        )
        .unwrap();
    let terms = JobTerms {
        client,
        token: TOKEN,
        budget: U256::from(5_000),
        max_price_per_step: U256::from(10),
        total_steps: 100,
        checkpoint_interval: 25,
        spec_hash: Hash::repeat_byte(77),
        committee: &expected,
        quorum: 2,
        verifier_fee: U256::from(5),
        deadline: 1_000,
        grace: 100,
    }
    .hash();
    assert_eq!(
        ev,
        vec![Event::Job(ChainEvent::CommitteeDrawn {
            job_id: j,
            committee: expected.clone(),
            terms
        })]
    );
    // The provider's recomputation from the creation event agrees.
    assert_eq!(
        e.created_event(j).unwrap().terms_with(&expected),
        Some(terms)
    );
    let job = e.job(j).unwrap();
    assert_eq!((job.status, job.terms), (Status::Open, terms));
    assert_eq!(e.member_of(j, Address::repeat_byte(1)), (2, 0));
    assert_eq!(e.member_of(j, client), (0, 0));
    assert_eq!(e.member_of(U256::from(2), client), (0, 0));
    assert!(e.is_verifier(j, Address::repeat_byte(2)));
    assert!(!e.is_verifier(j, Address::repeat_byte(5)));
    assert_eq!(
        e.apply(
            &draw_tx,
            anyone,
            Block {
                number: 42,
                time: 3
            }
        ),
        Err(EscrowError::WrongStatus(Status::Open))
    );
}

#[test]
fn a_lost_seed_moves_and_a_shrunk_pool_cannot_draw() {
    let mut f = F::new(3);
    let shape = JobShape {
        verifiers: 3,
        committee_size: 3,
        quorum: 2,
        fee: 1,
        budget: 2_000,
    };
    // The client in the pool does not count as available for its own job.
    let client = f.client.address();
    f.e.mint(TOKEN, client, U256::from(50));
    f.call(
        Call::RegisterVerifier {
            amount: U256::from(50),
        },
        client,
        1,
    )
    .unwrap();
    assert_eq!(f.e.pool().len(), 4);
    let too_many = JobShape {
        committee_size: 4,
        quorum: 3,
        ..shape
    };
    assert_eq!(
        f.create(too_many, 1),
        Err(EscrowError::NotEnoughVerifiers {
            available: U256::from(3),
            needed: U256::from(4)
        })
    );
    f.create(shape, 1).unwrap();
    let j = U256::from(1);
    let seed_block = f.number;
    assert_eq!(f.e.job(j).unwrap().status, Status::Drawing);
    // Nothing can be assigned before the draw.
    assert_eq!(
        f.assign(j, 1, 2),
        Err(EscrowError::WrongStatus(Status::Drawing))
    );
    // Over 256 blocks later the seed's hash is gone: the seed moves, nothing is drawn.
    f.number += 300;
    let ev = f.draw(j, 3).unwrap();
    let moved_to = f.number;
    assert_eq!(
        ev,
        vec![Event::Job(ChainEvent::CommitteeSeedMoved {
            job_id: j,
            seed_block: moved_to
        })]
    );
    assert!(moved_to > seed_block + 256);
    assert_eq!(f.e.job(j).unwrap().seed_block, moved_to);
    assert_eq!(f.e.job(j).unwrap().status, Status::Drawing);
    // A verifier leaves the pool after the seed block: whoever had seen the seed could have
    // chosen that change, so the draw moves the seed again instead of drawing.
    let leaver = f.vs[0].address();
    f.call(
        Call::RequestVerifierUnbond {
            amount: U256::from(1),
        },
        leaver,
        4,
    )
    .unwrap();
    assert_eq!(f.e.pool_changed_at(), f.number);
    assert!(f.e.pool_changed_at() > moved_to);
    let ev = f.draw(j, 5).unwrap();
    assert!(
        matches!(job_event(&ev, 0), ChainEvent::CommitteeSeedMoved { seed_block, .. } if *seed_block == f.number),
        "{ev:?}"
    );
    // Against the fresh seed, three seats cannot be filled any more.
    assert_eq!(
        f.draw(j, 5),
        Err(EscrowError::NotEnoughVerifiers {
            available: U256::from(2),
            needed: U256::from(3)
        })
    );
    // It comes back (appended again): the seed moves once more, then the draw succeeds,
    // the client not seated.
    f.call(
        Call::RegisterVerifier {
            amount: U256::from(1),
        },
        leaver,
        6,
    )
    .unwrap();
    let ev = f.draw(j, 7).unwrap();
    assert!(
        matches!(job_event(&ev, 0), ChainEvent::CommitteeSeedMoved { .. }),
        "{ev:?}"
    );
    // A top-up that keeps membership is no pool change.
    let changed = f.e.pool_changed_at();
    f.call(
        Call::RegisterVerifier {
            amount: U256::from(1),
        },
        f.vs[1].address(),
        7,
    )
    .unwrap();
    assert_eq!(f.e.pool_changed_at(), changed);
    let ev = f.draw(j, 7).unwrap();
    let ChainEvent::CommitteeDrawn { committee, .. } = job_event(&ev, 0) else {
        panic!("{ev:?}")
    };
    let mut seated = committee.clone();
    seated.sort();
    let mut want: Vec<Address> = f.vs.iter().map(SigningKey::address).collect();
    want.sort();
    assert_eq!(seated, want);
    f.books_balance();
}

#[test]
fn expire_from_drawing_refunds_the_whole_budget() {
    let mut f = F::new(2);
    f.create(PAIR, 1).unwrap();
    let j = U256::from(1);
    let expire: Call = ChainTx::Expire { job_id: j }.into();
    let client = f.client.address();
    assert_eq!(
        f.call(expire.clone(), client, 1_099),
        Err(EscrowError::TooEarly {
            allowed_at: U256::from(1_100)
        })
    );
    assert_eq!(
        f.call(expire, client, 1_100).unwrap(),
        vec![Event::Job(ChainEvent::JobExpired {
            job_id: j,
            refund: U256::from(1_000)
        })]
    );
    assert_eq!(f.e.withdrawable(client, TOKEN), U256::from(1_000));
    assert_eq!(
        f.draw(j, 1_101),
        Err(EscrowError::WrongStatus(Status::Expired))
    );
    f.books_balance();
}

#[test]
fn pays_steps_and_fees_and_settles_once() {
    let shape = JobShape {
        fee: 5,
        budget: 2_000,
        ..PAIR
    };
    let (mut f, j) = setup(shape);
    f.assign(j, 1, 2).unwrap();
    let ev = f.accept(1, 25, &[0, 1], 3).unwrap();
    assert_eq!(
        ev,
        vec![Event::Job(ChainEvent::CheckpointAccepted {
            job_id: j,
            epoch: 1,
            step: 25,
            checkpoint_hash: H,
            provider: f.prov.address(),
            amount: U256::from(100),
            voters: U256::from(0b11),
            fees: U256::from(10),
        })]
    );
    assert_eq!(f.e.withdrawable(f.prov.address(), TOKEN), U256::from(100));
    // Fees are held, not credited, until the job is settled: the books count them pending.
    assert_eq!(f.e.withdrawable(f.vs[0].address(), TOKEN), U256::ZERO);
    f.books_balance();
    let ev = f.accept(1, 100, &[1, 0], 4).unwrap();
    let refund = U256::from(2_000 - 400 - 20);
    assert_eq!(
        ev[1..].to_vec(),
        vec![
            Event::Job(ChainEvent::EpochEnded {
                job_id: j,
                epoch: 1,
                reason: EpochEndReason::Completed
            }),
            Event::Job(ChainEvent::JobCompleted { job_id: j, refund })
        ]
    );
    assert_eq!(f.e.withdrawable(f.prov.address(), TOKEN), U256::from(400));
    // Completion credits nothing to the client: `settle` does, once, for anyone.
    assert_eq!(f.e.withdrawable(f.client.address(), TOKEN), U256::ZERO);
    assert_eq!(f.e.stake_of(f.prov.address()).live_epochs, 0);
    for v in &f.vs {
        assert_eq!(f.e.member_of(j, v.address()).1, 2);
    }
    f.books_balance();
    let settle: Call = ChainTx::Settle { job_id: j }.into();
    let stranger = Address::repeat_byte(0x99);
    let committee = f.e.job(j).unwrap().committee.clone();
    let ev = f.call(settle.clone(), stranger, 5).unwrap();
    assert_eq!(
        ev,
        vec![
            Event::FeesCredited {
                job_id: j,
                verifier: committee[0],
                amount: U256::from(10)
            },
            Event::FeesCredited {
                job_id: j,
                verifier: committee[1],
                amount: U256::from(10)
            },
            Event::Job(ChainEvent::JobSettled {
                job_id: j,
                client: f.client.address(),
                refund
            }),
        ]
    );
    assert_eq!(f.e.withdrawable(f.client.address(), TOKEN), refund);
    assert_eq!(f.e.withdrawable(committee[0], TOKEN), U256::from(10));
    assert!(f.e.job(j).unwrap().settled);
    assert_eq!(
        f.call(settle, stranger, 6),
        Err(EscrowError::NothingToSettle)
    );
    f.books_balance();
    // Budget identity: paid + fees + refunded == budget.
    let paid = f.e.withdrawable(f.prov.address(), TOKEN);
    let fees = committee
        .iter()
        .fold(U256::ZERO, |a, v| a + f.e.withdrawable(*v, TOKEN));
    assert_eq!(paid + fees + refund, U256::from(2_000));
}

#[test]
fn a_job_that_spent_its_whole_budget_still_settles_its_fees() {
    // The budget is exactly the bound: every step at the maximum price, every member's fee
    // on every checkpoint.
    let budget = cost_bound(U256::from(10), 100, 25, U256::from(5), 2);
    assert_eq!(budget, U256::from(1_040));
    let shape = JobShape {
        fee: 5,
        budget: 1_040,
        ..PAIR
    };
    let mut f = F::new(2);
    assert_eq!(
        f.create(
            JobShape {
                budget: 1_039,
                ..shape
            },
            1
        ),
        Err(EscrowError::BudgetTooSmall {
            budget: U256::from(1_039),
            needed: U256::from(1_040)
        })
    );
    // Job amounts are stored in 96 bits.
    let huge = ChainTx::CreateJob {
        token: TOKEN,
        budget: MAX_JOB_AMOUNT + U256::from(1),
        max_price_per_step: U256::from(10),
        total_steps: 100,
        checkpoint_interval: 25,
        spec_hash: Hash::ZERO,
        committee_size: 2,
        quorum: 2,
        verifier_fee: U256::ZERO,
        deadline: 1_000,
        grace: 0,
    };
    let client = f.client.address();
    assert_eq!(
        f.call(huge.into(), client, 1),
        Err(EscrowError::AmountTooLarge)
    );
    assert_eq!(MAX_JOB_AMOUNT, U256::from(u128::MAX >> 32));
    f.create(shape, 1).unwrap();
    let j = U256::from(1);
    f.draw(j, 2).unwrap();
    let tx = f.bid(&f.prov, j, 1, 10);
    f.call(tx.into(), client, 2).unwrap();
    for step in [25, 50, 75] {
        f.accept(1, step, &[0, 1], 3).unwrap();
    }
    let ev = f.accept(1, 100, &[0, 1], 3).unwrap();
    assert_eq!(
        ev.last(),
        Some(&Event::Job(ChainEvent::JobCompleted {
            job_id: j,
            refund: U256::ZERO
        }))
    );
    let settle: Call = ChainTx::Settle { job_id: j }.into();
    let ev = f.call(settle.clone(), client, 4).unwrap();
    assert_eq!(
        ev.len(),
        3,
        "settled with a zero refund, and the fees: {ev:?}"
    );
    assert_eq!(f.call(settle, client, 5), Err(EscrowError::NothingToSettle));
    assert_eq!(f.e.withdrawable(f.vs[1].address(), TOKEN), U256::from(20));
    f.books_balance();
}

#[test]
fn rejects_pay_fees_only_from_slack_and_slash_only_when_unanimous() {
    // Three members, quorum two, a budget with no slack at all.
    let tight = JobShape {
        verifiers: 3,
        committee_size: 3,
        quorum: 2,
        fee: 5,
        budget: 1_060,
    };
    let (mut f, j) = setup(tight);
    f.assign(j, 1, 2).unwrap();
    let ev = f.reject(1, 25, &[0, 1], 3).unwrap();
    let voters = f.voters(&[0, 1]);
    assert_eq!(
        ev,
        vec![
            Event::Job(ChainEvent::CheckpointRejected {
                job_id: j,
                epoch: 1,
                step: 25,
                checkpoint_hash: H,
                provider: f.prov.address(),
                slashed: U256::ZERO,
                voters,
                fees: U256::ZERO,
            }),
            Event::Job(ChainEvent::EpochEnded {
                job_id: j,
                epoch: 1,
                reason: EpochEndReason::Rejected
            }),
        ],
        "no slash (one member did not sign), no fees (no slack)"
    );
    assert_eq!(f.e.stake_of(f.prov.address()).bonded, U256::from(100));
    assert_eq!(f.e.burned(), U256::ZERO);
    assert_eq!(f.e.member_of(j, f.vs[0].address()).1, 0);
    // An accept always pays its signers, slack or not.
    f.assign(j, 2, 3).unwrap();
    let ev = f.accept(2, 25, &[2, 0], 4).unwrap();
    assert!(matches!(
        job_event(&ev, 0),
        ChainEvent::CheckpointAccepted { fees, .. } if *fees == U256::from(10)
    ));
    // The whole committee rejects: the stake is slashed and burned.
    f.assign(j, 3, 4).unwrap();
    let all = f.all();
    let ev = f.reject(3, 50, &all, 5).unwrap();
    assert!(matches!(
        job_event(&ev, 0),
        ChainEvent::CheckpointRejected { slashed, fees, .. }
            // The accept at a price below the maximum left slack for the fees.
            if *slashed == U256::from(100) && *fees == U256::from(15)
    ));
    assert_eq!(
        ev[1],
        Event::Slashed {
            provider: f.prov.address(),
            job_id: j,
            amount: U256::from(100)
        }
    );
    assert_eq!(f.e.burned(), U256::from(100));
    assert_eq!(f.e.withdrawable(f.client.address(), TOKEN), U256::ZERO);
    f.books_balance();

    // With slack, a reject pays its signers.
    let roomy = JobShape {
        budget: 2_000,
        ..tight
    };
    let (mut f, j) = setup(roomy);
    f.assign(j, 1, 2).unwrap();
    let ev = f.reject(1, 25, &[1, 2], 3).unwrap();
    assert!(matches!(
        job_event(&ev, 0),
        ChainEvent::CheckpointRejected { fees, slashed, .. }
            if *fees == U256::from(10) && slashed.is_zero()
    ));
    assert_eq!(f.e.job(j).unwrap().remaining, U256::from(1_990));
    assert_eq!(f.e.member_of(j, f.vs[1].address()).1, 1);
    assert_eq!(f.e.member_of(j, f.vs[0].address()).1, 0);
    f.books_balance();
    // Expiry credits the fees earned so far, then refunds the rest.
    let expire: Call = ChainTx::Expire { job_id: j }.into();
    let client = f.client.address();
    let ev = f.call(expire, client, 1_100).unwrap();
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(matches!(ev[0], Event::FeesCredited { amount, .. } if amount == U256::from(5)));
    assert_eq!(
        ev[2],
        Event::Job(ChainEvent::JobExpired {
            job_id: j,
            refund: U256::from(1_990)
        })
    );
    f.books_balance();
}

#[test]
fn fencing_and_signatures_follow_the_contract() {
    let (mut f, j) = setup(PAIR);
    f.assign(j, 1, 2).unwrap();
    // A bid signed for epoch 1 recovers to a stranger in epoch 2.
    let replay = f.assign(j, 1, 2);
    assert!(
        matches!(replay, Err(EscrowError::WrongSigner { expected, .. }) if expected == f.prov.address()),
        "{replay:?}"
    );
    f.assign(j, 2, 2).unwrap();
    // An epoch with no record of the client ending it: fenced.
    assert_eq!(
        f.accept(5, 25, &[0, 1], 3),
        Err(EscrowError::WrongEpoch {
            given: 5,
            current: 2
        })
    );
    assert_eq!(
        f.reject(1, 25, &[0, 1], 3),
        Err(EscrowError::WrongEpoch {
            given: 1,
            current: 2
        }),
        "rejects never take the late path"
    );
    assert_eq!(
        f.accept(2, 30, &[0, 1], 3),
        Err(EscrowError::StepOffInterval(30))
    );
    assert_eq!(
        f.accept(2, 25, &[0], 3),
        Err(EscrowError::QuorumNotReached {
            have: U256::from(1),
            need: U256::from(2)
        })
    );
    let twice = f.votes(j, 2, 25, true, &[0, 0]);
    assert_eq!(
        f.decide(true, 2, 25, twice, 3),
        Err(EscrowError::DuplicateSigner(f.vs[0].address()))
    );
    let mut bad = f.votes(j, 2, 25, true, &[0, 1]);
    bad[1].0[64] = 29;
    assert_eq!(
        f.decide(true, 2, 25, bad, 3),
        Err(EscrowError::BadSignature {
            index: U256::from(1)
        })
    );
    // Accept votes do not count for a reject: they recover to strangers.
    let wrong_kind = f.votes(j, 2, 25, true, &[0, 1]);
    let res = f.decide(false, 2, 25, wrong_kind, 3);
    assert!(matches!(res, Err(EscrowError::NotVerifier(_))), "{res:?}");
    let ev = f.reject(2, 25, &[0, 1], 3).unwrap();
    assert!(ev.contains(&Event::Slashed {
        provider: f.prov.address(),
        job_id: j,
        amount: U256::from(100),
    }));
    assert_eq!(
        f.assign(j, 3, 4),
        Err(EscrowError::InsufficientStake {
            bonded: U256::ZERO,
            needed: U256::from(100)
        })
    );
    let withdraw: Call = ChainTx::Withdraw { token: TOKEN }.into();
    let client = f.client.address();
    assert_eq!(
        f.call(withdraw, client, 5),
        Err(EscrowError::NothingToWithdraw)
    );
    f.books_balance();
}

#[test]
fn a_late_accept_pays_the_epoch_the_client_ended_within_the_window() {
    let shape = JobShape {
        fee: 5,
        budget: 2_000,
        ..PAIR
    };
    let (mut f, j) = setup(shape);
    let client = f.client.address();
    f.assign(j, 1, 2).unwrap();
    let release: Call = ChainTx::ReleaseProvider { job_id: j }.into();
    assert_eq!(
        f.call(release.clone(), client, 10).unwrap(),
        vec![Event::Job(ChainEvent::EpochEnded {
            job_id: j,
            epoch: 1,
            reason: EpochEndReason::Released
        })]
    );
    assert_eq!(
        f.e.closed_epoch(j, 1),
        ClosedEpoch {
            provider: f.prov.address(),
            price_per_step: U256::from(4),
            step_at_end: 0,
            window_end: 70
        }
    );
    assert_eq!(
        f.reject(1, 25, &[0, 1], 11),
        Err(EscrowError::WrongStatus(Status::Open)),
        "rejects never take the late path"
    );
    assert_eq!(
        f.accept(1, 50, &[0, 1], 11),
        Err(EscrowError::BeyondNextCheckpoint(50))
    );
    let mut after_window = f.e.clone();
    let sigs = f.votes(j, 1, 25, true, &[0, 1]);
    let late: Call = ChainTx::AcceptCheckpoint {
        job_id: j,
        epoch: 1,
        step: 25,
        checkpoint_hash: H,
        sigs,
    }
    .into();
    assert_eq!(
        after_window.apply(
            &late,
            client,
            Block {
                number: 999,
                time: 71
            }
        ),
        Err(EscrowError::WindowClosed { window_end: 70 })
    );
    // The deliberate bug lets it through.
    after_window.bugs.late_accept_after_window = true;
    after_window
        .apply(
            &late,
            client,
            Block {
                number: 999,
                time: 71,
            },
        )
        .unwrap();

    // Another provider was assigned from the old head meanwhile: the late accept pays the
    // ended epoch's provider at its price, and supersedes the live epoch, unslashed.
    f.assign2(j, 2, 20).unwrap();
    let ev = f.accept(1, 25, &[0, 1], 30).unwrap();
    assert_eq!(
        ev,
        vec![
            Event::Job(ChainEvent::CheckpointAccepted {
                job_id: j,
                epoch: 1,
                step: 25,
                checkpoint_hash: H,
                provider: f.prov.address(),
                amount: U256::from(100),
                voters: U256::from(0b11),
                fees: U256::from(10),
            }),
            Event::Job(ChainEvent::EpochEnded {
                job_id: j,
                epoch: 2,
                reason: EpochEndReason::Superseded
            }),
        ]
    );
    let job = f.e.job(j).unwrap();
    assert_eq!((job.status, job.last_accepted_step), (Status::Open, 25));
    assert_eq!(f.e.stake_of(f.prov2.address()).live_epochs, 0);
    assert_eq!(f.e.stake_of(f.prov2.address()).bonded, U256::from(100));
    assert_eq!(f.e.withdrawable(f.prov.address(), TOKEN), U256::from(100));
    // Once only.
    assert_eq!(f.e.closed_epoch(j, 1), ClosedEpoch::default());
    assert_eq!(
        f.accept(1, 25, &[0, 1], 31),
        Err(EscrowError::WrongStatus(Status::Open))
    );
    // The superseded epoch was not ended by the client: no late accept for it.
    assert_eq!(f.e.closed_epoch(j, 2), ClosedEpoch::default());

    // A record is good only while the head is where its epoch ended.
    f.assign2(j, 3, 32).unwrap();
    f.call(release, client, 33).unwrap();
    f.assign(j, 4, 34).unwrap();
    f.accept(4, 50, &[0, 1], 35).unwrap();
    assert_eq!(
        f.accept(3, 50, &[0, 1], 36),
        Err(EscrowError::MovedOn {
            last_accepted: 50,
            step_at_end: 25
        })
    );

    // A replaced epoch's late accept of the final step completes the job.
    f.accept(4, 75, &[0, 1], 37).unwrap();
    f.assign2(j, 5, 38).unwrap();
    let ev = f.accept(4, 100, &[0, 1], 39).unwrap();
    let reasons: Vec<_> = ev
        .iter()
        .filter_map(|e| match e.job() {
            Some(ChainEvent::EpochEnded { epoch, reason, .. }) => Some((*epoch, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, vec![(5, EpochEndReason::Superseded)]);
    assert!(matches!(
        ev.last().and_then(Event::job),
        Some(ChainEvent::JobCompleted { .. })
    ));
    assert_eq!(f.e.job(j).unwrap().status, Status::Completed);
    for p in [f.prov.address(), f.prov2.address()] {
        assert_eq!(f.e.stake_of(p).live_epochs, 0);
    }
    f.books_balance();
}

#[test]
fn the_verifier_pool_appends_and_swap_removes() {
    let mut f = F::new(0);
    let who: Vec<Address> = (1..=4).map(Address::repeat_byte).collect();
    for w in &who {
        f.e.mint(TOKEN, *w, U256::from(200));
        f.e.approve(TOKEN, *w, domain().escrow, U256::MAX);
    }
    // Below the minimum: staked, not pooled; crossing it appends.
    let ev = f
        .call(
            Call::RegisterVerifier {
                amount: U256::from(30),
            },
            who[0],
            1,
        )
        .unwrap();
    assert_eq!(
        ev,
        vec![Event::VerifierStaked {
            verifier: who[0],
            amount: U256::from(30),
            total: U256::from(30)
        }]
    );
    assert!(f.e.pool().is_empty());
    for w in &who[1..] {
        f.call(
            Call::RegisterVerifier {
                amount: U256::from(60),
            },
            *w,
            1,
        )
        .unwrap();
    }
    f.call(
        Call::RegisterVerifier {
            amount: U256::from(20),
        },
        who[0],
        1,
    )
    .unwrap();
    assert_eq!(f.e.pool(), &[who[1], who[2], who[3], who[0]]);
    assert_eq!(
        f.call(Call::RegisterVerifier { amount: U256::ZERO }, who[0], 1),
        Err(EscrowError::ZeroAmount)
    );
    // Unbonding that stays above the minimum keeps the seat.
    f.call(
        Call::RequestVerifierUnbond {
            amount: U256::from(10),
        },
        who[1],
        2,
    )
    .unwrap();
    assert_eq!(f.e.pool().len(), 4);
    assert_eq!(
        f.call(
            Call::RequestVerifierUnbond {
                amount: U256::from(51)
            },
            who[1],
            2
        ),
        Err(EscrowError::StakeLocked {
            free: U256::from(50),
            requested: U256::from(51)
        })
    );
    // Falling below it: the last entry moves into the leaver's place.
    let ev = f
        .call(
            Call::RequestVerifierUnbond {
                amount: U256::from(1),
            },
            who[1],
            3,
        )
        .unwrap();
    assert_eq!(
        ev,
        vec![Event::VerifierUnbondRequested {
            verifier: who[1],
            amount: U256::from(1),
            available_at: 13
        }]
    );
    assert_eq!(f.e.pool(), &[who[0], who[2], who[3]]);
    assert_eq!(
        f.e.verifier_stake_of(who[1]),
        VerifierStake {
            bonded: U256::from(49),
            unbonding: U256::from(11),
            unbond_at: 13,
            pooled: false
        }
    );
    assert_eq!(
        f.call(Call::WithdrawVerifierStake, who[1], 12),
        Err(EscrowError::TooEarly {
            allowed_at: U256::from(13)
        })
    );
    assert_eq!(
        f.call(Call::WithdrawVerifierStake, who[1], 13).unwrap(),
        vec![Event::VerifierStakeWithdrawn {
            verifier: who[1],
            amount: U256::from(11)
        }]
    );
    assert_eq!(f.e.balance_of(TOKEN, who[1]), U256::from(151));
    assert_eq!(
        f.call(Call::WithdrawVerifierStake, who[1], 14),
        Err(EscrowError::NotUnbonding)
    );
    f.books_balance();
}

#[test]
fn stake_is_reserved_per_epoch_and_a_provider_can_resign() {
    let (mut f, j) = setup(PAIR);
    let c = f.client.address();
    let p = f.prov.address();
    let shape = |committee_size: u8, quorum: u8| JobShape {
        committee_size,
        quorum,
        ..PAIR
    };
    assert_eq!(f.create(shape(1, 1), 1), Err(EscrowError::InvalidVerifiers));
    assert_eq!(
        f.create(shape(33, 17), 1),
        Err(EscrowError::InvalidVerifiers)
    );
    assert_eq!(f.create(shape(3, 1), 1), Err(EscrowError::InvalidQuorum));
    assert_eq!(f.create(shape(2, 3), 1), Err(EscrowError::InvalidQuorum));
    let create = |deadline: u64, grace: u64| {
        Call::from(ChainTx::CreateJob {
            token: TOKEN,
            budget: U256::from(1_000),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 25,
            spec_hash: Hash::repeat_byte(78),
            committee_size: 2,
            quorum: 2,
            verifier_fee: U256::ZERO,
            deadline,
            grace,
        })
    };
    assert_eq!(
        f.call(create(2_002, 0), c, 1),
        Err(EscrowError::DeadlineTooFar {
            deadline: 2_002,
            latest: U256::from(2_001)
        })
    );
    assert_eq!(
        f.call(create(900, 201), c, 1),
        Err(EscrowError::GraceTooLong {
            grace: 201,
            max_grace: 200
        })
    );
    // A second job, drawn while the provider is not in the pool.
    f.create(PAIR, 1).unwrap();
    let k2 = U256::from(2);
    f.draw(k2, 2).unwrap();
    // The provider joins the pool: a third job's committee of three seats it, and the
    // escrow then refuses to assign it there.
    f.call(
        Call::RegisterVerifier {
            amount: U256::from(50),
        },
        p,
        1,
    )
    .unwrap();
    let three = JobShape {
        verifiers: 3,
        committee_size: 3,
        quorum: 2,
        ..PAIR
    };
    f.create(three, 1).unwrap();
    let k3 = U256::from(3);
    f.draw(k3, 2).unwrap();
    assert!(f.e.is_verifier(k3, p));
    assert_eq!(f.assign(k3, 1, 2), Err(EscrowError::ProviderIsVerifier(p)));
    // One minimum stake cannot back two epochs.
    f.assign(j, 1, 2).unwrap();
    assert_eq!(
        f.assign(k2, 1, 2),
        Err(EscrowError::InsufficientStake {
            bonded: U256::from(100),
            needed: U256::from(200)
        })
    );
    // Re-assigning the same provider to its own job releases the old reservation first.
    f.assign(j, 2, 2).unwrap();
    f.call(
        Call::Register {
            amount: U256::from(50),
        },
        p,
        2,
    )
    .unwrap();
    assert_eq!(
        f.call(
            Call::RequestUnbond {
                amount: U256::from(51)
            },
            p,
            2
        ),
        Err(EscrowError::StakeLocked {
            free: U256::from(50),
            requested: U256::from(51)
        })
    );
    f.call(
        Call::RequestUnbond {
            amount: U256::from(50),
        },
        p,
        2,
    )
    .unwrap();
    let resign: Call = ChainTx::Resign { job_id: j }.into();
    assert_eq!(f.call(resign.clone(), c, 3), Err(EscrowError::NotProvider));
    assert_eq!(
        f.call(resign.clone(), p, 3).unwrap(),
        vec![Event::Job(ChainEvent::EpochEnded {
            job_id: j,
            epoch: 2,
            reason: EpochEndReason::Resigned
        })]
    );
    assert_eq!(
        f.call(resign, p, 3),
        Err(EscrowError::WrongStatus(Status::Open))
    );
    // A resigned epoch leaves no record for a late accept.
    assert_eq!(f.e.closed_epoch(j, 2), ClosedEpoch::default());
    let st = f.e.stake_of(p);
    assert_eq!(
        (st.bonded, st.unbonding, st.live_epochs),
        (U256::from(100), U256::from(50), 0)
    );
    f.books_balance();
}

#[test]
fn a_failed_pull_reverts_the_whole_call() {
    let (mut f, _) = setup(PAIR);
    let poor = SigningKey::from_seed(9).address();
    let create = |token| {
        Call::from(ChainTx::CreateJob {
            token,
            budget: U256::from(1_000),
            max_price_per_step: U256::from(10),
            total_steps: 100,
            checkpoint_interval: 25,
            spec_hash: Hash::ZERO,
            committee_size: 2,
            quorum: 2,
            verifier_fee: U256::ZERO,
            deadline: 1_000,
            grace: 0,
        })
    };
    assert_eq!(
        f.call(create(TOKEN), poor, 1),
        Err(EscrowError::Erc20InsufficientAllowance {
            spender: f.e.address(),
            allowance: U256::ZERO,
            needed: U256::from(1_000)
        })
    );
    f.e.approve(TOKEN, poor, f.e.address(), U256::from(5_000));
    assert_eq!(
        f.call(create(TOKEN), poor, 1),
        Err(EscrowError::Erc20InsufficientBalance {
            sender: poor,
            balance: U256::ZERO,
            needed: U256::from(1_000)
        })
    );
    let client = f.client.address();
    assert_eq!(
        f.call(create(Address::repeat_byte(0x77)), client, 1),
        Err(EscrowError::NotAToken)
    );
    assert_eq!(f.e.job_count(), 1);
    // A finite allowance is spent; an unlimited one is not.
    f.e.mint(TOKEN, poor, U256::from(1_000));
    f.call(create(TOKEN), poor, 1).unwrap();
    assert_eq!(
        f.e.token(TOKEN).unwrap().allowance(poor, f.e.address()),
        U256::from(4_000)
    );
    assert_eq!(
        f.e.token(TOKEN).unwrap().allowance(client, f.e.address()),
        U256::MAX
    );
    f.books_balance();
}

#[test]
fn simulated_signatures_name_their_signer() {
    let (mut f, j) = setup(PAIR);
    f.e.scheme = Scheme::Simulated;
    let sim = SigningKey::simulated(2);
    f.e.mint(TOKEN, sim.address(), U256::from(100));
    f.e.approve(TOKEN, sim.address(), domain().escrow, U256::MAX);
    f.call(
        Call::Register {
            amount: U256::from(100),
        },
        sim.address(),
        1,
    )
    .unwrap();
    let tx = f.bid(&sim, j, 1, 4);
    let client = f.client.address();
    f.call(tx.into(), client, 2).unwrap();
    // A secp256k1 signature is refused by the simulated scheme, as its machines refuse it.
    assert_eq!(
        f.accept(1, 25, &[0, 1], 3),
        Err(EscrowError::BadSignature { index: U256::ZERO })
    );
}

#[test]
fn blockhash_reads_like_solidity() {
    let mut e = Escrow::new(domain(), Scheme::Secp256k1, TOKEN, PARAMS).unwrap();
    let h = Hash::repeat_byte(7);
    e.record_block_hash(10, h);
    assert_eq!(e.blockhash(10, 10), Hash::ZERO, "the current block");
    assert_eq!(e.blockhash(10, 9), Hash::ZERO, "a later block");
    assert_eq!(e.blockhash(10, 11), h);
    assert_eq!(e.blockhash(10, 266), h);
    assert_eq!(e.blockhash(10, 267), Hash::ZERO, "over 256 blocks back");
    assert_eq!(e.blockhash(9, 11), Hash::ZERO, "never recorded");
    // Recording far newer blocks forgets what no call could read any more.
    e.record_block_hash(1_000, h);
    assert_eq!(e.blockhash(10, 11), Hash::ZERO);
}

#[test]
fn the_deliberate_bugs_break_the_new_rules() {
    let shape = JobShape {
        verifiers: 3,
        committee_size: 3,
        quorum: 2,
        fee: 5,
        budget: 1_060,
    };
    let (mut f, _) = setup(shape);
    f.e.bugs.slash_without_unanimity = true;
    f.e.bugs.reject_fees_without_slack = true;
    f.assign(U256::from(1), 1, 2).unwrap();
    let ev = f.reject(1, 25, &[0, 1], 3).unwrap();
    assert!(matches!(
        job_event(&ev, 0),
        ChainEvent::CheckpointRejected { slashed, fees, .. }
            if *slashed == U256::from(100) && *fees == U256::from(10)
    ));
    // The books still balance: the bugs break promises, not conservation.
    f.books_balance();
}

/// A zero fee still counts every signed decision, rejects included (the contract's
/// `memberOf().paid`, the record settle credits from), and settle then credits 0 to each.
#[test]
fn a_zero_fee_still_counts_decisions() {
    let (mut f, j) = setup(PAIR);
    f.assign(j, 1, 3).unwrap();
    let all = f.all();
    f.reject(1, 25, &all, 4).unwrap();
    for v in f.vs.iter().map(SigningKey::address).collect::<Vec<_>>() {
        assert_eq!(f.e.member_of(j, v).1, 1, "{v} signed the reject");
    }
    f.assign2(j, 2, 5).unwrap();
    for step in [25, 50, 75, 100] {
        f.accept(2, step, &all, 6).unwrap();
    }
    let ev = f
        .call(ChainTx::Settle { job_id: j }.into(), f.client.address(), 7)
        .unwrap();
    let credited: Vec<U256> = ev
        .iter()
        .filter_map(|e| match e {
            Event::FeesCredited { amount, .. } => Some(*amount),
            _ => None,
        })
        .collect();
    assert_eq!(credited, vec![U256::ZERO; 2], "{ev:?}");
    for v in f.vs.iter().map(SigningKey::address).collect::<Vec<_>>() {
        assert_eq!(f.e.member_of(j, v).1, 5, "{v}: one reject and four accepts");
    }
    f.books_balance();
}
