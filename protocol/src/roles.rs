//! The roles one node hosts, as one machine: an optional [`Client`], [`Provider`] and
//! [`Verifier`] sharing the node's key. The node and the simulator both drive this composite,
//! so a node running several roles, and a node coming back from a restart, behave the same in
//! both.
//!
//! - Every input goes to every machine present (each ignores what is not its business), and
//!   each gossip message, checked once, to every machine; their verdicts fold with
//!   [`Verdict::combine`]. Ignore outranks Accept there because Accept is also what a machine
//!   says about a message it does not look at (a verifier about a heartbeat, a client about
//!   an offer): a stale heartbeat that the client ignores must stay ignored when the node
//!   also verifies.
//! - Outputs come out client first, then provider, then verifier, each machine's in the order
//!   it made them. A test fault ([`ClientFault`], TESTING ONLY) filters the client's.
//! - The timeout is the earliest of the machines'.
//! - [`Roles::restore`] rebuilds the machines after a restart from the chain history the
//!   node's chain follower had already handled: the client with [`Client::restore`], the
//!   provider and the verifier by replaying the history without acting on it (only their
//!   subscriptions are kept). The history includes the committee events (`JobCreated`,
//!   `CommitteeSeedMoved`, `CommitteeDrawn`): a client whose job was still drawing asks
//!   for the draw again, and a verifier learns its seats from the draws. An epoch the provider was training when the process died is
//!   lost with its trainer: the restored provider drops it and stays silent, and the client's
//!   detector moves on, rather than resuming half-known work.

use std::collections::{BTreeSet, VecDeque};

use crate::chain::ChainEvent;
use crate::client::{Client, ClientConfig};
use crate::faults::ClientFault;
use crate::io::{Input, Output, StateMachine};
use crate::provider::{Provider, ProviderConfig};
use crate::signing::SigningKey;
use crate::spec::JobSpec;
use crate::time::Time;
use crate::types::JobId;
use crate::validation::{Checked, Verdict};
use crate::verifier::{Verifier, VerifierConfig};
use crate::wire::Message;

/// Which roles a node runs, with each one's configuration.
#[derive(Clone, Debug, Default)]
pub struct RoleConfigs {
    pub client: Option<ClientConfig>,
    pub provider: Option<ProviderConfig>,
    pub verifier: Option<VerifierConfig>,
}

/// The role machines of one node. Each machine is boxed, so the composite is a few words
/// and finding the machines present reads one cache line, not a line inside each absent
/// machine's space (a simulator hosting 10,000 of these reads one on every event).
#[derive(Debug, Default)]
pub struct Roles {
    client: Option<Box<Client>>,
    provider: Option<Box<Provider>>,
    verifier: Option<Box<Verifier>>,
    /// TESTING ONLY: what the client's outputs go through.
    client_fault: Option<ClientFault>,
    /// What a restore kept from the provider's and verifier's replay (their subscriptions),
    /// handed out before anything the machines produce later.
    restored: VecDeque<Output>,
}

impl Roles {
    /// Fresh machines for the configured roles, all signing with `key`.
    pub fn new(configs: RoleConfigs, key: &SigningKey) -> Roles {
        Roles {
            client: configs
                .client
                .map(|c| Box::new(Client::new(c, key.clone()))),
            provider: configs
                .provider
                .map(|c| Box::new(Provider::new(c, key.clone()))),
            verifier: configs
                .verifier
                .map(|c| Box::new(Verifier::new(c, key.clone()))),
            client_fault: None,
            restored: VecDeque::new(),
        }
    }

    /// Machines built elsewhere (a test's, or a client already restored by hand).
    pub fn from_machines(
        client: Option<Client>,
        provider: Option<Provider>,
        verifier: Option<Verifier>,
    ) -> Roles {
        Roles {
            client: client.map(Box::new),
            provider: provider.map(Box::new),
            verifier: verifier.map(Box::new),
            client_fault: None,
            restored: VecDeque::new(),
        }
    }

    /// The machines of a restarted node, rebuilt from `history`: the `(block time, event)`
    /// pairs its chain follower had handled before the restart, oldest first. `specs` are the
    /// job specs the client kept. Nothing from the replay is acted on again; what the
    /// restored machines want now (the client's subscriptions and re-offers, the provider's
    /// and verifier's subscriptions) comes out of [`Roles::poll_output`].
    pub fn restore(
        configs: RoleConfigs,
        key: &SigningKey,
        specs: impl IntoIterator<Item = JobSpec>,
        history: &[(u64, ChainEvent)],
        now: Time,
    ) -> Roles {
        let client = configs
            .client
            .map(|c| Client::restore(c, key.clone(), specs, history.iter().cloned(), now));
        let mut roles = Roles::from_machines(
            client,
            configs.provider.map(|c| Provider::new(c, key.clone())),
            configs.verifier.map(|c| Verifier::new(c, key.clone())),
        );
        if let Some(p) = roles.provider.as_deref_mut() {
            roles.restored.extend(replay(p, now, history));
            let jobs: BTreeSet<JobId> = history.iter().map(|(_, e)| e.job_id()).collect();
            for job_id in jobs {
                if let Some(epoch) = p.training(job_id).map(|t| t.epoch) {
                    p.handle_input(
                        now,
                        Input::TrainingFailed {
                            job_id,
                            epoch,
                            reason: "node restarted".into(),
                        },
                    );
                }
            }
            // Stopping a trainer that no longer exists: nothing to do.
            while p.poll_output().is_some() {}
        }
        if let Some(v) = roles.verifier.as_deref_mut() {
            roles.restored.extend(replay(v, now, history));
        }
        roles
    }

    /// TESTING ONLY: makes this node's client hostile (see [`crate::faults`]); `None`
    /// makes it honest again.
    pub fn set_client_fault(&mut self, fault: Option<ClientFault>) {
        self.client_fault = fault;
    }

    pub fn client(&self) -> Option<&Client> {
        self.client.as_deref()
    }

    pub fn client_mut(&mut self) -> Option<&mut Client> {
        self.client.as_deref_mut()
    }

    pub fn provider(&self) -> Option<&Provider> {
        self.provider.as_deref()
    }

    pub fn provider_mut(&mut self) -> Option<&mut Provider> {
        self.provider.as_deref_mut()
    }

    pub fn verifier(&self) -> Option<&Verifier> {
        self.verifier.as_deref()
    }

    pub fn verifier_mut(&mut self) -> Option<&mut Verifier> {
        self.verifier.as_deref_mut()
    }

    fn machines(&mut self) -> [Option<&mut dyn StateMachine>; 3] {
        [
            self.client
                .as_deref_mut()
                .map(|m| m as &mut dyn StateMachine),
            self.provider
                .as_deref_mut()
                .map(|m| m as &mut dyn StateMachine),
            self.verifier
                .as_deref_mut()
                .map(|m| m as &mut dyn StateMachine),
        ]
    }

    /// A gossip message checked once for all of the node's machines; the verdicts folded.
    /// With no machine at all nothing objects: Accept.
    pub fn handle_checked(&mut self, now: Time, msg: &Checked) -> Verdict {
        self.machines()
            .into_iter()
            .flatten()
            .fold(Verdict::Accept, |v, m| {
                v.combine(m.handle_checked(now, msg))
            })
    }

    /// A gossip message as received, checked by each machine under its own domain and scheme.
    pub fn handle_message(&mut self, now: Time, msg: &Message) -> Verdict {
        self.machines()
            .into_iter()
            .flatten()
            .fold(Verdict::Accept, |v, m| {
                v.combine(m.handle_message(now, msg))
            })
    }

    /// An input for every machine present. The last one gets the input itself, so a node with
    /// one role copies nothing (a checkpoint's state hashes are thousands of bytes).
    pub fn handle_input(&mut self, now: Time, input: Input) {
        let mut left = self.machines().iter().flatten().count();
        for m in self.machines().into_iter().flatten() {
            left -= 1;
            if left == 0 {
                m.handle_input(now, input);
                return;
            }
            m.handle_input(now, input.clone());
        }
    }

    /// Each machine's own timers; a machine with nothing due does nothing.
    pub fn handle_timeout(&mut self, now: Time) {
        for m in self.machines().into_iter().flatten() {
            m.handle_timeout(now);
        }
    }

    /// The provider's and the verifier's timers, not the client's: a driver that holds back
    /// the client's verdicts on silence for a moment (the node does when its own timer fired
    /// late, until it has read what arrived meanwhile) must not hold back this node's own
    /// heartbeats with them.
    pub fn handle_timeout_except_client(&mut self, now: Time) {
        let [_, provider, verifier] = self.machines();
        for m in [provider, verifier].into_iter().flatten() {
            m.handle_timeout(now);
        }
    }

    /// The earliest of the machines' timeouts.
    pub fn poll_timeout(&self) -> Option<Time> {
        [self.client_timeout(), self.timeout_except_client()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The client's timeout alone (see [`Roles::handle_timeout_except_client`]).
    pub fn client_timeout(&self) -> Option<Time> {
        self.client.as_deref().and_then(StateMachine::poll_timeout)
    }

    /// The earliest of the provider's and the verifier's timeouts.
    pub fn timeout_except_client(&self) -> Option<Time> {
        let p = self
            .provider
            .as_deref()
            .and_then(StateMachine::poll_timeout);
        let v = self
            .verifier
            .as_deref()
            .and_then(StateMachine::poll_timeout);
        [p, v].into_iter().flatten().min()
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(o) = self.restored.pop_front() {
            return Some(o);
        }
        if let Some(o) = self
            .client
            .as_deref_mut()
            .and_then(StateMachine::poll_output)
        {
            return Some(match self.client_fault {
                Some(fault) => fault.filter(o),
                None => o,
            });
        }
        self.machines()
            .into_iter()
            .flatten()
            .find_map(|m| m.poll_output())
    }
}

/// Feeds history to a machine and keeps only its subscriptions: everything else it asks for
/// happened, or was abandoned, before the restart.
fn replay(m: &mut dyn StateMachine, now: Time, history: &[(u64, ChainEvent)]) -> Vec<Output> {
    let mut keep = Vec::new();
    for (block_time, event) in history {
        m.handle_input(
            now,
            Input::Chain {
                block_time: *block_time,
                event: event.clone(),
            },
        );
        while let Some(out) = m.poll_output() {
            if matches!(out, Output::Subscribe { .. } | Output::Unsubscribe { .. }) {
                keep.push(out);
            }
        }
    }
    keep
}
