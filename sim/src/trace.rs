//! The last events before a failure, kept in a ring so a failing run can print a short trace
//! without paying for formatting on the millions of events that pass.

use std::collections::VecDeque;
use std::fmt::Write;

use crate::queue::Millis;
use crate::world::{Msg, NodeId, Timer};

#[derive(Clone, Debug)]
pub enum Detail {
    None,
    Msg(Msg),
    /// A protocol message, summarised (kind, job, epoch, step or sequence number, signer's
    /// first bytes): cloning a signed message with its state hashes on every delivery would
    /// cost more than the trace is worth, and the signature bytes say nothing to a reader.
    Wire(&'static str, u64, u64, u64, [u8; 3]),
    Timer(Timer),
}

impl From<&Msg> for Detail {
    fn from(m: &Msg) -> Self {
        use gpuchain_protocol::wire::Message as M;
        let Msg::Wire(w) = m else {
            return Detail::Msg(m.clone());
        };
        let job = |j: gpuchain_protocol::U256| u64::try_from(j).unwrap_or(u64::MAX);
        let short = |a: &gpuchain_protocol::Address| [a.0[0], a.0[1], a.0[2]];
        match w.as_ref() {
            M::NodeHello(h) => Detail::Wire("hello", 0, 0, h.issued_at, short(&h.address)),
            M::JobOffer(o) => {
                Detail::Wire("offer", job(o.job_id), o.next_epoch, 0, short(&o.client))
            }
            M::Bid(b) => Detail::Wire("bid", job(b.job_id), b.epoch, b.expiry, short(&b.provider)),
            M::Heartbeat(h) => Detail::Wire(
                "heartbeat",
                job(h.job_id),
                h.epoch,
                h.seq,
                short(&h.provider),
            ),
            M::CheckpointAnnounce(a) => Detail::Wire(
                "announce",
                job(a.job_id),
                a.epoch,
                a.step,
                short(&a.provider),
            ),
            M::Vote(v) => Detail::Wire(
                if v.accept {
                    "vote-accept"
                } else {
                    "vote-reject"
                },
                job(v.job_id),
                v.epoch,
                v.step,
                short(&v.verifier),
            ),
        }
    }
}

impl From<&Timer> for Detail {
    fn from(t: &Timer) -> Self {
        Detail::Timer(*t)
    }
}

impl From<&()> for Detail {
    fn from(_: &()) -> Self {
        Detail::None
    }
}

pub struct Trace {
    cap: usize,
    items: VecDeque<(Millis, &'static str, NodeId, Detail)>,
}

impl Trace {
    pub fn new(cap: usize) -> Self {
        Trace {
            cap,
            items: VecDeque::with_capacity(cap),
        }
    }

    pub fn push(
        &mut self,
        at: Millis,
        kind: &'static str,
        node: NodeId,
        detail: impl Into<Detail>,
    ) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back((at, kind, node, detail.into()));
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        for (at, kind, node, d) in &self.items {
            let _ = match d {
                Detail::None => {
                    writeln!(s, "  {:>10.3}s {kind:<16} node {node}", *at as f64 / 1000.0)
                }
                Detail::Msg(m) => writeln!(
                    s,
                    "  {:>10.3}s {kind:<16} node {node} {m:?}",
                    *at as f64 / 1000.0
                ),
                Detail::Wire(what, job, epoch, n, from) => writeln!(
                    s,
                    "  {:>10.3}s {kind:<16} node {node} {what} job {job} epoch {epoch} #{n} from 0x{:02x}{:02x}{:02x}…",
                    *at as f64 / 1000.0,
                    from[0],
                    from[1],
                    from[2]
                ),
                Detail::Timer(t) => writeln!(
                    s,
                    "  {:>10.3}s {kind:<16} node {node} {t:?}",
                    *at as f64 / 1000.0
                ),
            };
        }
        s
    }
}
