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
    Timer(Timer),
}

impl From<&Msg> for Detail {
    fn from(m: &Msg) -> Self {
        Detail::Msg(m.clone())
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
