//! The composite a node hosts (`roles::Roles`): inputs reach every machine, verdicts fold,
//! the timeout is the earliest, and each role comes back from a restart as the node restores it.
//! Long because each role of the composite is tested with its own fixtures in one place.
// Test code: a broken fixture should fail loudly where it is read.
#![allow(clippy::unwrap_used)]

use gpuchain_protocol::chain::{ChainEvent, ChainTx};
use gpuchain_protocol::faults::ClientFault;
use gpuchain_protocol::messages::{
    Bid, CheckpointAnnounce, DeviceKind, Hardware, Heartbeat, JobOffer, Vote, state_root,
};
use gpuchain_protocol::provider::CLAIM_AFTER;
use gpuchain_protocol::roles::{RoleConfigs, Roles};
use gpuchain_protocol::topics::{heartbeat_topic, job_topic};
use gpuchain_protocol::{
    Address, Checked, Client, ClientConfig, EscrowDomain, Hash, IgnoreReason, Input, JobSpec,
    Message, Notice, Output, Provider, ProviderConfig, RejectReason, Scheme, Sig65, SigningKey,
    StateMachine, Time, U256, Verdict, Verifier, VerifierConfig,
};

const BLOCK_TIME: u64 = 1_000_000;
const MAX_PRICE: u64 = 5_000;

fn domain() -> EscrowDomain {
    EscrowDomain {
        chain_id: 31337,
        escrow: Address::repeat_byte(0xee),
    }
}

fn t(ms: u64) -> Time {
    Time::from_millis(ms)
}

fn spec() -> JobSpec {
    JobSpec::fashion_cnn_demo(
        Hash::repeat_byte(0x10),
        Hash::repeat_byte(0x11),
        Hash::repeat_byte(0x12),
    )
}

/// The node under test (`node`), the clients and the other parties of its jobs.
struct Keys {
    node: SigningKey,
    client: SigningKey,
    provider: SigningKey,
    verifier: SigningKey,
    outsider: SigningKey,
}

fn keys() -> Keys {
    Keys {
        node: SigningKey::from_seed(300),
        client: SigningKey::from_seed(301),
        provider: SigningKey::from_seed(302),
        verifier: SigningKey::from_seed(303),
        outsider: SigningKey::from_seed(304),
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(domain())
}

fn provider_config() -> ProviderConfig {
    let hardware = Hardware {
        device: DeviceKind::Cuda,
        memory_bytes: 8 << 30,
    };
    ProviderConfig::new(domain(), hardware, U256::from(1_000))
}

fn verifier_config() -> VerifierConfig {
    VerifierConfig::new(domain(), 7)
}

fn all_roles() -> RoleConfigs {
    RoleConfigs {
        client: Some(client_config()),
        provider: Some(provider_config()),
        verifier: Some(verifier_config()),
    }
}

fn id(n: u64) -> U256 {
    U256::from(n)
}

/// The job's committee: a provider bids only where there are at least two (and the escrow
/// draws no fewer), so a job these tests give one verifier gets a second, silent one.
fn listed(verifiers: &[&SigningKey]) -> Vec<Address> {
    let mut v: Vec<Address> = verifiers.iter().map(|k| k.address()).collect();
    if v.len() == 1 {
        v.push(Address::repeat_byte(0xcc));
    }
    v
}

/// A strict majority of [`listed`].
fn quorum(verifiers: &[&SigningKey]) -> u8 {
    (listed(verifiers).len() / 2 + 1) as u8
}

fn created(job: u64, client: &SigningKey, verifiers: &[&SigningKey]) -> ChainEvent {
    let spec = spec();
    ChainEvent::JobCreated {
        job_id: id(job),
        client: client.address(),
        token: Address::repeat_byte(0x5d),
        budget: U256::from(5_000_000u64),
        max_price_per_step: U256::from(MAX_PRICE),
        total_steps: spec.total_steps,
        checkpoint_interval: spec.checkpoint_interval,
        spec_hash: spec.spec_hash(),
        committee_size: listed(verifiers).len() as u8,
        quorum: quorum(verifiers),
        verifier_fee: U256::from(1_000),
        deadline: BLOCK_TIME + 3_600,
        grace: 600,
        seed_block: 1,
    }
}

/// The draw of [`created`]'s job: `verifiers` (see [`listed`]) seated.
fn drawn(job: u64, client: &SigningKey, verifiers: &[&SigningKey]) -> ChainEvent {
    let committee = listed(verifiers);
    let terms = created(job, client, verifiers)
        .terms_with(&committee)
        .unwrap();
    ChainEvent::CommitteeDrawn {
        job_id: id(job),
        committee,
        terms,
    }
}

fn assigned(job: u64, epoch: u64, provider: &SigningKey, start: u64, from: Hash) -> ChainEvent {
    ChainEvent::ProviderAssigned {
        job_id: id(job),
        epoch,
        provider: provider.address(),
        price_per_step: U256::from(1_000),
        start_step: start,
        start_checkpoint: from,
    }
}

fn chain(event: ChainEvent) -> Input {
    Input::Chain {
        block_time: BLOCK_TIME,
        event,
    }
}

fn checked(m: Message) -> Checked {
    Checked::new(m, &domain(), Scheme::Secp256k1).unwrap()
}

fn offer(job: u64, client: &SigningKey, next_epoch: u64, verifiers: &[&SigningKey]) -> Message {
    Message::JobOffer(
        JobOffer {
            job_id: id(job),
            client: Address::ZERO,
            next_epoch,
            spec: spec(),
            max_price_per_step: U256::from(MAX_PRICE),
            committee: listed(verifiers),
            quorum: quorum(verifiers),
            signature: Sig65::ZERO,
        }
        .sign(client),
    )
}

fn heartbeat(job: u64, key: &SigningKey, epoch: u64, seq: u64) -> Message {
    Message::Heartbeat(
        Heartbeat {
            job_id: id(job),
            epoch,
            provider: Address::ZERO,
            seq,
            step: 10,
            loss: 0.5,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(key),
    )
}

fn vote(job: u64, key: &SigningKey, epoch: u64, step: u64) -> Message {
    Message::Vote(
        Vote {
            job_id: id(job),
            epoch,
            step,
            checkpoint_hash: Hash::repeat_byte(0x77),
            accept: true,
            verifier: Address::ZERO,
            signature: Sig65::ZERO,
        }
        .sign(&domain(), key),
    )
}

fn announce(job: u64, key: &SigningKey, epoch: u64, parent: u64, step: u64) -> Message {
    let hashes: Vec<Hash> = (parent..=step)
        .map(|s| Hash::left_padding_from(&s.to_be_bytes()))
        .collect();
    Message::CheckpointAnnounce(
        CheckpointAnnounce {
            job_id: id(job),
            epoch,
            provider: Address::ZERO,
            parent_step: parent,
            step,
            checkpoint_hash: Hash::repeat_byte(step as u8),
            state_root: state_root(&hashes),
            state_hashes: hashes.into(),
            anchor_steps: gpuchain_protocol::anchors::anchor_steps(parent, step),
            signature: Sig65::ZERO,
        }
        .sign(key),
    )
}

fn drain(r: &mut Roles) -> Vec<Output> {
    std::iter::from_fn(|| r.poll_output()).collect()
}

fn bids(outs: &[Output]) -> Vec<&Bid> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Publish {
                message: Message::Bid(b),
                ..
            } => Some(b),
            _ => None,
        })
        .collect()
}

#[test]
fn an_input_reaches_every_machine_and_outputs_keep_role_order() {
    let k = keys();
    let mut roles = Roles::new(all_roles(), &k.node);
    // Job 1 is the client's; the node is one of its verifiers. Job 2 is another client's,
    // and the node's provider holds its offer until the chain confirms it.
    let v = [&k.node, &k.verifier];
    assert_eq!(
        roles.handle_checked(t(0), &checked(offer(2, &k.outsider, 1, &[&k.verifier]))),
        Verdict::Accept
    );
    assert!(
        drain(&mut roles).is_empty(),
        "no bid before the chain confirms"
    );

    roles.handle_input(t(10), chain(created(1, &k.client, &v)));
    roles.handle_input(t(10), chain(drawn(1, &k.client, &v)));
    assert_eq!(
        drain(&mut roles),
        vec![Output::Subscribe {
            topic: job_topic(id(1))
        }],
        "the verifier follows job 1; the client and the provider have no part in it"
    );
    roles.handle_input(t(20), chain(created(2, &k.outsider, &[&k.verifier])));
    roles.handle_input(t(20), chain(drawn(2, &k.outsider, &[&k.verifier])));
    let outs = drain(&mut roles);
    let b = bids(&outs);
    assert_eq!(
        outs.len(),
        2,
        "the provider bids on job 2 and prepares its data, and only that: {outs:?}"
    );
    assert_eq!(b.len(), 1, "{outs:?}");
    assert!(
        matches!(outs[1], Output::PrepareJob { job_id, .. } if job_id == id(2)),
        "{outs:?}"
    );
    assert_eq!((b[0].job_id, b[0].epoch), (id(2), 1));
    assert_eq!(b[0].provider, k.node.address());

    // Outputs of two machines in one drain: the client's first (it follows the node's own
    // job 3), then the provider's (a standby bid for job 2's next epoch, as another
    // provider took epoch 1).
    roles.handle_input(t(30), chain(created(3, &k.node, &[&k.verifier])));
    roles.handle_input(t(30), chain(drawn(3, &k.node, &[&k.verifier])));
    roles.handle_input(t(30), chain(assigned(2, 1, &k.provider, 0, Hash::ZERO)));
    let outs = drain(&mut roles);
    let offered = outs.iter().position(|o| {
        *o == Output::Subscribe {
            topic: job_topic(id(3)),
        }
    });
    let standby = outs.iter().position(
        |o| matches!(o, Output::Publish { message: Message::Bid(b), .. } if b.epoch == 2),
    );
    assert!(
        matches!((offered, standby), (Some(o), Some(s)) if o < s),
        "client's subscription, then provider's standby bid: {outs:?}"
    );
}

#[test]
fn one_machine_alone_behaves_as_it_does_outside_the_composite() {
    let k = keys();
    let mut roles = Roles::new(
        RoleConfigs {
            provider: Some(provider_config()),
            ..RoleConfigs::default()
        },
        &k.node,
    );
    let mut alone = Provider::new(provider_config(), k.node.clone());
    let steps: Vec<Input> = vec![
        chain(created(1, &k.client, &[&k.verifier])),
        chain(drawn(1, &k.client, &[&k.verifier])),
        chain(assigned(1, 1, &k.node, 0, Hash::ZERO)),
    ];
    let m = checked(offer(1, &k.client, 1, &[&k.verifier]));
    assert_eq!(
        roles.handle_checked(t(0), &m),
        alone.handle_checked(t(0), &m)
    );
    for input in steps {
        roles.handle_input(t(5), input.clone());
        alone.handle_input(t(5), input);
    }
    roles.handle_timeout(t(500));
    alone.handle_timeout(t(500));
    let mine = drain(&mut roles);
    let theirs: Vec<Output> = std::iter::from_fn(|| alone.poll_output()).collect();
    assert!(
        mine.iter()
            .any(|o| matches!(o, Output::StartTraining { .. })),
        "{mine:?}"
    );
    // Debug, not ==: the first heartbeats carry a NaN loss (no step reported yet).
    assert_eq!(format!("{mine:?}"), format!("{theirs:?}"));
    assert_eq!(roles.poll_timeout(), alone.poll_timeout());
}

#[test]
fn verdicts_fold_reject_over_ignore_over_accept() {
    let k = keys();
    let history = [
        created(1, &k.client, &[&k.node, &k.verifier]),
        drawn(1, &k.client, &[&k.node, &k.verifier]),
        assigned(1, 1, &k.provider, 0, Hash::ZERO),
    ];
    let mut roles = Roles::new(all_roles(), &k.node);
    let mut client = Client::new(client_config(), k.node.clone());
    let mut provider = Provider::new(provider_config(), k.node.clone());
    let mut verifier = Verifier::new(verifier_config(), k.node.clone());
    for e in &history {
        roles.handle_input(t(0), chain(e.clone()));
        client.handle_input(t(0), chain(e.clone()));
        provider.handle_input(t(0), chain(e.clone()));
        verifier.handle_input(t(0), chain(e.clone()));
    }
    let v = [&k.node, &k.verifier];
    let cases = [
        // Every machine: accept (the assigned provider's heartbeat; the verifier and the
        // provider do not look at heartbeats).
        (heartbeat(1, &k.provider, 1, 1), Verdict::Accept),
        // The provider: a stale offer (epoch 1 is already assigned); the others accept.
        (
            offer(1, &k.client, 1, &v),
            Verdict::Ignore(IgnoreReason::StaleEpoch),
        ),
        // The verifier: an announcement for an epoch the chain has not opened.
        (
            announce(1, &k.provider, 2, 0, 50),
            Verdict::Ignore(IgnoreReason::FutureEpoch),
        ),
        // The verifier refuses a vote from outside the committee; the others accept it.
        (
            vote(1, &k.outsider, 1, 50),
            Verdict::Reject(RejectReason::NotListedVerifier),
        ),
        // The provider refuses an offer signed by someone other than the job's client.
        (
            offer(1, &k.outsider, 2, &v),
            Verdict::Reject(RejectReason::OfferMismatch),
        ),
    ];
    for (msg, expected) in cases {
        let c = checked(msg.clone());
        let each = client
            .handle_checked(t(100), &c)
            .combine(provider.handle_checked(t(100), &c))
            .combine(verifier.handle_checked(t(100), &c));
        let merged = roles.handle_checked(t(100), &c);
        assert_eq!(merged, expected, "{msg:?}");
        assert_eq!(merged, each, "the fold of what each machine says alone");
        assert_eq!(
            Roles::new(all_roles(), &k.node).handle_message(t(100), &msg),
            Verdict::Accept,
            "machines that know none of the jobs accept everything checked"
        );
    }
    assert_eq!(
        Roles::default().handle_checked(t(0), &checked(vote(1, &k.outsider, 1, 50))),
        Verdict::Accept,
        "a node with no role has nothing to object to"
    );
}

#[test]
fn the_timeout_is_the_earliest_of_the_machines() {
    let k = keys();
    let mut roles = Roles::new(all_roles(), &k.node);
    assert_eq!(roles.poll_timeout(), None, "nothing to wait for yet");
    // The client's own job opens a bid window (500 ms); the provider, assigned another job,
    // heartbeats at once and then every 100 ms; the verifier has no timers.
    roles.handle_input(t(1_000), chain(created(1, &k.node, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(drawn(1, &k.node, &[&k.verifier])));
    assert_eq!(roles.poll_timeout(), Some(t(1_500)));
    roles.handle_input(t(1_000), chain(created(2, &k.client, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(drawn(2, &k.client, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(assigned(2, 1, &k.node, 0, Hash::ZERO)));
    assert_eq!(roles.poll_timeout(), Some(t(1_100)));
    drain(&mut roles);

    roles.handle_timeout(t(1_100));
    let outs = drain(&mut roles);
    assert!(
        outs.iter().any(
            |o| matches!(o, Output::Publish { message: Message::Heartbeat(h), .. } if h.seq == 2)
        ),
        "the provider's timer ran: {outs:?}"
    );
    assert!(
        !outs.iter().any(|o| matches!(o, Output::Notice(_))),
        "the client's window is still open: {outs:?}"
    );
    assert_eq!(roles.poll_timeout(), Some(t(1_200)));
    // Past the bid window with no bids, the client offers again (new window from then).
    roles.handle_timeout(t(1_500));
    drain(&mut roles);
    let next = roles.poll_timeout().unwrap();
    assert_eq!(next, t(1_600), "the provider's next heartbeat comes first");
}

#[test]
fn the_client_timer_can_be_held_while_the_others_run() {
    let k = keys();
    let mut roles = Roles::new(all_roles(), &k.node);
    // As above: the client's bid window ends at 1,500 ms, the provider heartbeats every 100.
    roles.handle_input(t(1_000), chain(created(1, &k.node, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(drawn(1, &k.node, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(created(2, &k.client, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(drawn(2, &k.client, &[&k.verifier])));
    roles.handle_input(t(1_000), chain(assigned(2, 1, &k.node, 0, Hash::ZERO)));
    drain(&mut roles);
    assert_eq!(roles.client_timeout(), Some(t(1_500)));
    assert_eq!(roles.timeout_except_client(), Some(t(1_100)));

    // Late past both: the provider heartbeats, the client's window is left for later.
    roles.handle_timeout_except_client(t(1_550));
    let outs = drain(&mut roles);
    assert!(
        outs.iter().any(|o| matches!(
            o,
            Output::Publish {
                message: Message::Heartbeat(_),
                ..
            }
        )),
        "the provider's timer ran: {outs:?}"
    );
    assert!(
        !outs.iter().any(|o| matches!(o, Output::Notice(_))),
        "the client's timer did not: {outs:?}"
    );
    assert_eq!(roles.client_timeout(), Some(t(1_500)), "still due");
    assert_eq!(roles.timeout_except_client(), Some(t(1_650)));
    assert_eq!(roles.poll_timeout(), Some(t(1_500)));

    // Released, the client's window ends as it would have: no bids.
    roles.handle_timeout(t(1_650));
    let outs = drain(&mut roles);
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::Notice(Notice::NoUsableBids { .. }))),
        "the client's timer ran: {outs:?}"
    );
}

#[test]
fn a_restored_client_re_offers_its_open_job() {
    let k = keys();
    let history = [
        (BLOCK_TIME, created(1, &k.node, &[&k.verifier])),
        (BLOCK_TIME, drawn(1, &k.node, &[&k.verifier])),
    ];
    let configs = RoleConfigs {
        client: Some(client_config()),
        ..RoleConfigs::default()
    };
    let mut roles = Roles::restore(configs, &k.node, [spec()], &history, t(5_000));
    let outs = drain(&mut roles);
    assert!(outs.contains(&Output::Subscribe {
        topic: job_topic(id(1))
    }));
    assert!(outs.contains(&Output::Subscribe {
        topic: heartbeat_topic(id(1))
    }));
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::Publish { message: Message::JobOffer(o), .. } if o.job_id == id(1))),
        "{outs:?}"
    );
    assert_eq!(
        roles.poll_timeout(),
        Some(t(5_500)),
        "a bid window from now"
    );
    assert!(roles.client().unwrap().job_status(id(1)).is_some());
}

#[test]
fn a_restored_provider_drops_the_epoch_it_was_training_and_knows_the_chain() {
    let k = keys();
    let history = [
        (BLOCK_TIME, created(1, &k.client, &[&k.verifier])),
        (BLOCK_TIME, drawn(1, &k.client, &[&k.verifier])),
        (BLOCK_TIME + 2, assigned(1, 1, &k.node, 0, Hash::ZERO)),
    ];
    let configs = RoleConfigs {
        provider: Some(provider_config()),
        ..RoleConfigs::default()
    };
    let mut roles = Roles::restore(configs, &k.node, [], &history, t(0));
    assert_eq!(
        drain(&mut roles),
        vec![Output::Subscribe {
            topic: job_topic(id(1))
        }],
        "only the subscription survives the replay: no training, no heartbeat"
    );
    let p = roles.provider().unwrap();
    assert!(
        p.training(id(1)).is_none(),
        "the trainer died with the process"
    );
    assert_eq!(
        roles.poll_timeout(),
        None,
        "silent: the client's detector moves on"
    );

    // The replay taught it the chain: epoch 1 is taken, so an offer for it is stale, and a
    // re-offer for epoch 2 gets a bid. A fresh machine bids on the stale offer too.
    let stale = checked(offer(1, &k.client, 1, &[&k.verifier]));
    assert_eq!(
        roles.handle_checked(t(10), &stale),
        Verdict::Ignore(IgnoreReason::StaleEpoch)
    );
    let mut fresh = Roles::new(
        RoleConfigs {
            provider: Some(provider_config()),
            ..RoleConfigs::default()
        },
        &k.node,
    );
    fresh.handle_input(t(0), chain(created(1, &k.client, &[&k.verifier])));
    fresh.handle_input(t(0), chain(drawn(1, &k.client, &[&k.verifier])));
    assert_eq!(fresh.handle_checked(t(10), &stale), Verdict::Accept);
    assert_eq!(bids(&drain(&mut fresh)).len(), 1);

    roles.handle_checked(t(20), &checked(offer(1, &k.client, 2, &[&k.verifier])));
    let outs = drain(&mut roles);
    let b = bids(&outs);
    assert_eq!(b.len(), 1, "{outs:?}");
    assert_eq!(b[0].epoch, 2);
}

#[test]
fn a_restored_verifier_resumes_from_the_chains_accepted_checkpoint() {
    let k = keys();
    let accepted = Hash::repeat_byte(50);
    let history = [
        (BLOCK_TIME, created(1, &k.client, &[&k.node, &k.verifier])),
        (BLOCK_TIME, drawn(1, &k.client, &[&k.node, &k.verifier])),
        (BLOCK_TIME + 2, assigned(1, 1, &k.provider, 0, Hash::ZERO)),
        (
            BLOCK_TIME + 8,
            ChainEvent::CheckpointAccepted {
                job_id: id(1),
                epoch: 1,
                step: 50,
                checkpoint_hash: accepted,
                provider: k.provider.address(),
                amount: U256::from(50_000),
                voters: U256::from(0b11),
                fees: U256::from(2_000),
            },
        ),
    ];
    let configs = RoleConfigs {
        verifier: Some(verifier_config()),
        ..RoleConfigs::default()
    };
    let mut roles = Roles::restore(configs, &k.node, [], &history, t(0));
    assert_eq!(
        drain(&mut roles),
        vec![Output::Subscribe {
            topic: job_topic(id(1))
        }]
    );
    assert_eq!(roles.verifier().unwrap().head(id(1)), Some((50, accepted)));

    // The accepted step is decided; the next interval is fetched and tested.
    assert_eq!(
        roles.handle_checked(t(10), &checked(announce(1, &k.provider, 1, 0, 50))),
        Verdict::Ignore(IgnoreReason::AlreadyDecided)
    );
    roles.handle_checked(t(20), &checked(announce(1, &k.provider, 1, 50, 100)));
    let outs = drain(&mut roles);
    assert!(
        outs.iter().any(
            |o| matches!(o, Output::FetchBlob { hash, .. } if *hash == Hash::repeat_byte(100))
        ),
        "{outs:?}"
    );
}

#[test]
fn restore_rebuilds_every_role_of_one_node() {
    let k = keys();
    // The node was client of job 1, provider of job 2 (training it), verifier of job 3.
    let history = [
        (BLOCK_TIME, created(1, &k.node, &[&k.verifier])),
        (BLOCK_TIME, drawn(1, &k.node, &[&k.verifier])),
        (BLOCK_TIME, created(2, &k.client, &[&k.verifier])),
        (BLOCK_TIME, drawn(2, &k.client, &[&k.verifier])),
        (BLOCK_TIME, created(3, &k.outsider, &[&k.node, &k.verifier])),
        (BLOCK_TIME, drawn(3, &k.outsider, &[&k.node, &k.verifier])),
        (BLOCK_TIME + 2, assigned(2, 1, &k.node, 0, Hash::ZERO)),
    ];
    let mut roles = Roles::restore(all_roles(), &k.node, [spec()], &history, t(0));
    let outs = drain(&mut roles);
    let subs: Vec<&Output> = outs
        .iter()
        .filter(|o| matches!(o, Output::Subscribe { .. }))
        .collect();
    // Replayed subscriptions first (provider's job 2, verifier's job 3), then the client's:
    // its job's topic and the job's heartbeats, which only the client follows.
    assert_eq!(
        subs,
        vec![
            &Output::Subscribe {
                topic: job_topic(id(2))
            },
            &Output::Subscribe {
                topic: job_topic(id(3))
            },
            &Output::Subscribe {
                topic: job_topic(id(1))
            },
            &Output::Subscribe {
                topic: heartbeat_topic(id(1))
            },
        ]
    );
    assert!(roles.provider().unwrap().training(id(2)).is_none());
    assert!(roles.verifier().unwrap().head(id(3)).is_some());
    // The client's chain record (what it ranks bids by) is rebuilt from the same history,
    // every job's events included.
    let record = roles.client().unwrap().chain_record();
    assert_eq!(record.provider(&k.node.address()).epochs_assigned, 1);
    assert_eq!(record.verifier(&k.node.address()).seats, 1);
    assert_eq!(record.verifier(&k.verifier.address()).seats, 3);
    roles.handle_input(
        t(1),
        chain(ChainEvent::EpochEnded {
            job_id: id(2),
            epoch: 1,
            reason: gpuchain_protocol::EpochEndReason::Released,
        }),
    );
    assert_eq!(
        roles
            .client()
            .unwrap()
            .chain_record()
            .provider(&k.node.address())
            .epochs_lost,
        1
    );
    assert!(roles.client().unwrap().job_status(id(1)).is_some());
    assert!(
        !outs.iter().any(|o| matches!(
            o,
            Output::StartTraining { .. } | Output::StopTraining { .. }
        )),
        "{outs:?}"
    );
}

#[test]
fn a_restored_client_asks_again_for_the_draw_of_a_job_still_drawing() {
    let k = keys();
    let history = [
        (BLOCK_TIME, created(1, &k.node, &[&k.verifier])),
        (BLOCK_TIME, created(2, &k.client, &[&k.node, &k.verifier])),
        (BLOCK_TIME, drawn(2, &k.client, &[&k.node, &k.verifier])),
    ];
    let mut roles = Roles::restore(all_roles(), &k.node, [spec()], &history, t(0));
    let outs = drain(&mut roles);
    let draws: Vec<_> = outs
        .iter()
        .filter_map(|o| match o {
            Output::SubmitTx {
                tx: ChainTx::DrawCommittee { job_id },
                ..
            } => Some(*job_id),
            _ => None,
        })
        .collect();
    assert_eq!(draws, vec![id(1)], "{outs:?}");
    assert!(
        !outs.iter().any(|o| matches!(
            o,
            Output::Publish {
                message: Message::JobOffer(_),
                ..
            }
        )),
        "nothing to offer before the draw"
    );
    // The verifier learned its seat on job 2 from the replayed draw.
    assert_eq!(
        roles.verifier().unwrap().head(id(2)),
        Some((0, spec().spec_hash()))
    );
}

#[test]
fn a_client_fault_filters_the_client_only() {
    let k = keys();
    let mut roles = Roles::new(all_roles(), &k.node);
    roles.set_client_fault(Some(ClientFault::WithholdPay));
    let v = [&k.verifier, &k.outsider];
    // The node's own job 1, run by another provider; and job 2, where the node provides.
    for e in [
        created(1, &k.node, &v),
        drawn(1, &k.node, &v),
        assigned(1, 1, &k.provider, 0, Hash::ZERO),
        created(2, &k.client, &v),
        drawn(2, &k.client, &v),
        assigned(2, 1, &k.node, 0, Hash::ZERO),
    ] {
        roles.handle_input(t(0), chain(e));
    }
    roles.handle_input(
        t(10),
        Input::CheckpointReady {
            job_id: id(2),
            epoch: 1,
            step: 50,
            checkpoint_hash: Hash::repeat_byte(0x77),
            state_hashes: (0..=50u64)
                .map(|s| Hash::left_padding_from(&s.to_be_bytes()))
                .collect(),
        },
    );
    drain(&mut roles);
    for key in v {
        roles.handle_checked(t(20), &checked(vote(1, key, 1, 50)));
        roles.handle_checked(t(20), &checked(vote(2, key, 1, 50)));
    }
    roles.handle_timeout(t(20).saturating_add(CLAIM_AFTER));
    let txs: Vec<ChainTx> = drain(&mut roles)
        .into_iter()
        .filter_map(|o| match o {
            Output::SubmitTx { tx, .. } => Some(tx),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            &txs[..],
            [
                ChainTx::ReleaseProvider { job_id: one },
                ChainTx::AcceptCheckpoint { job_id: two, step: 50, .. },
            ] if *one == id(1) && *two == id(2)
        ),
        "the client withholds pay on its job; the provider still claims on the other: {txs:?}"
    );
}
