//! TESTING ONLY: hostile behaviour for the role machines, so the simulator and the node's
//! test faults attack the honest parties with one implementation. Nothing here is used by
//! an honest node; a node enables a fault only through its test-fault configuration.
//!
//! A fault is a pure filter on a machine's outputs: the honest machine keeps running as
//! it would (it tallies, assigns and reacts to the chain), and the filter changes what it
//! does to the world. [`FaultyClient`] wraps a [`Client`] with one; [`crate::roles::Roles`]
//! applies one to its client's outputs (`Roles::set_client_fault`).

use crate::chain::ChainTx;
use crate::client::Client;
use crate::eip712::EscrowDomain;
use crate::io::{Input, Output, Passed, StateMachine};
use crate::signing::Scheme;
use crate::time::Time;
use crate::validation::{Checked, Verdict};
use crate::wire::Message;

/// What a hostile client does instead of its honest duty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientFault {
    /// Withhold pay: never submit an accept. When a quorum of accepts is in (the honest
    /// client would submit `acceptCheckpoint`), end the epoch with `releaseProvider`
    /// instead, so the accept would land on an epoch already over: the attack the
    /// escrow's decision window defeats (the provider's claim still lands late).
    WithholdPay,
}

impl ClientFault {
    /// The output a client with this fault produces where the honest client produced
    /// `out`. The transaction keeps its id, so a failure of the substitute reaches the
    /// client as the failure of what it meant to send.
    pub fn filter(self, out: Output) -> Output {
        match (self, out) {
            (
                ClientFault::WithholdPay,
                Output::SubmitTx {
                    id,
                    tx: ChainTx::AcceptCheckpoint { job_id, .. },
                },
            ) => Output::SubmitTx {
                id,
                tx: ChainTx::ReleaseProvider { job_id },
            },
            (_, out) => out,
        }
    }
}

/// A client machine whose outputs pass through a [`ClientFault`].
#[derive(Debug)]
pub struct FaultyClient {
    client: Client,
    fault: ClientFault,
}

impl FaultyClient {
    pub fn new(client: Client, fault: ClientFault) -> Self {
        FaultyClient { client, fault }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl StateMachine for FaultyClient {
    fn checks_under(&self) -> (EscrowDomain, Scheme) {
        self.client.checks_under()
    }

    fn on_checked(&mut self, now: Time, msg: &Message, passed: Passed) -> Verdict {
        self.client.on_checked(now, msg, passed)
    }

    fn handle_checked(&mut self, now: Time, msg: &Checked) -> Verdict {
        self.client.handle_checked(now, msg)
    }

    fn handle_message(&mut self, now: Time, msg: &Message) -> Verdict {
        self.client.handle_message(now, msg)
    }

    fn handle_input(&mut self, now: Time, input: Input) {
        self.client.handle_input(now, input);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.client.handle_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.client.poll_timeout()
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.client.poll_output().map(|o| self.fault.filter(o))
    }
}
