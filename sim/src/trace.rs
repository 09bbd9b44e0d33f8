//! The last events before a failure, kept in a ring so a failing run can print a short trace
//! without paying for formatting on the millions of events that pass.

use std::fmt::Write;

use crate::queue::Millis;
use crate::world::{Msg, NodeId, Timer};

#[derive(Clone, Debug)]
pub enum Detail {
    None,
    /// A protocol message, summarised when it is delivered (it is being read then anyway).
    /// Holding the message itself would keep it alive for another 64 events, and letting go
    /// of it here would touch its cold reference count on every later event.
    Msg(Summary),
    Timer(Timer),
}

/// A protocol message as the trace shows it: kind, job, epoch, step or sequence number, and
/// the signer's first bytes.
pub type Summary = (&'static str, u64, u64, u64, [u8; 3]);

impl From<&Msg> for Detail {
    fn from(m: &Msg) -> Self {
        let Msg::Wire(w) = m;
        Detail::Msg(wire_summary(w.message()))
    }
}

/// A protocol message, summarised (kind, job, epoch, step or sequence number, signer's first
/// bytes): the state hashes and signature bytes say nothing to a reader of a trace.
fn wire_summary(w: &gpuchain_protocol::wire::Message) -> Summary {
    use gpuchain_protocol::wire::Message as M;
    let job = |j: gpuchain_protocol::U256| u64::try_from(j).unwrap_or(u64::MAX);
    let short = |a: &gpuchain_protocol::Address| [a.0[0], a.0[1], a.0[2]];
    match w {
        M::NodeHello(h) => ("hello", 0, 0, h.issued_at, short(&h.address)),
        M::JobOffer(o) => ("offer", job(o.job_id), o.next_epoch, 0, short(&o.client)),
        M::Bid(b) => ("bid", job(b.job_id), b.epoch, b.expiry, short(&b.provider)),
        M::Heartbeat(h) => (
            "heartbeat",
            job(h.job_id),
            h.epoch,
            h.seq,
            short(&h.provider),
        ),
        M::CheckpointAnnounce(a) => (
            "announce",
            job(a.job_id),
            a.epoch,
            a.step,
            short(&a.provider),
        ),
        M::Vote(v) => (
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
    /// A ring: once full, `items[next]` is the oldest entry and the next one overwritten.
    items: Vec<(Millis, &'static str, NodeId, Detail)>,
    next: usize,
}

impl Trace {
    pub fn new(cap: usize) -> Self {
        Trace {
            cap,
            items: Vec::with_capacity(cap),
            next: 0,
        }
    }

    pub fn push(
        &mut self,
        at: Millis,
        kind: &'static str,
        node: NodeId,
        detail: impl Into<Detail>,
    ) {
        let item = (at, kind, node, detail.into());
        if self.items.len() < self.cap {
            self.items.push(item);
        } else if let Some(slot) = self.items.get_mut(self.next) {
            *slot = item;
            self.next = (self.next + 1) % self.cap;
        }
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let (newer, older) = self.items.split_at(self.next);
        for (at, kind, node, d) in older.iter().chain(newer) {
            let _ = match d {
                Detail::None => {
                    writeln!(s, "  {:>10.3}s {kind:<16} node {node}", *at as f64 / 1000.0)
                }
                Detail::Msg((what, job, epoch, n, from)) => {
                    writeln!(
                        s,
                        "  {:>10.3}s {kind:<16} node {node} {what} job {job} epoch {epoch} #{n} from 0x{:02x}{:02x}{:02x}…",
                        *at as f64 / 1000.0,
                        from[0],
                        from[1],
                        from[2]
                    )
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_events_oldest_first() {
        let mut t = Trace::new(4);
        for at in 0..10 {
            t.push(at * 1000, "fail", at as NodeId, &());
        }
        let text = t.render();
        let nodes: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split("node ").nth(1))
            .collect();
        assert_eq!(nodes, ["6", "7", "8", "9"]);
    }
}
