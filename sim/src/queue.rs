//! The event queue in virtual time. Ties are broken by insertion order, never by the event's
//! content or a hash, so the same seed always processes events in the same order.
//!
//! A calendar: one FIFO bucket per millisecond for the next [`WINDOW`] ms, and a heap for
//! what lies beyond. Nearly every event of a run is a message or a timer due within seconds,
//! so it costs a push and a pop on a bucket instead of a walk down a binary heap of tens of
//! thousands of events (the heap was a tenth of a 10,000-node run). Order is the heap's
//! exactly, earliest first and FIFO among equals: an event enters its bucket in insertion
//! order, because the heap's events for a millisecond move into the calendar as soon as that
//! millisecond enters the window, before anything can be pushed straight into its bucket.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in milliseconds since the start of the run.
pub type Millis = u64;

/// Milliseconds covered by buckets (a power of two; about a minute).
const WINDOW: u64 = 1 << 16;

struct Scheduled<E> {
    at: Millis,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

pub struct EventQueue<E> {
    /// Every queued event in the window, each in a slot linked into its millisecond's FIFO
    /// (`next`); a popped slot is reused by the next push. One slab instead of a `VecDeque`
    /// per millisecond: the window's 65,536 buffers were each a cold cache line to push or pop
    /// into, where a reused slot is nearly always a warm one.
    slots: Vec<Slot<E>>,
    /// Free slots, the most recently freed last.
    free: Vec<u32>,
    /// First and last slot of each millisecond's FIFO (`NIL` when empty), for
    /// `base <= t < base + WINDOW` at `t % WINDOW`.
    heads: Vec<u32>,
    tails: Vec<u32>,
    /// The earliest millisecond an event can still be due at; no bucket before it is used.
    base: Millis,
    in_buckets: usize,
    /// Events due at `base + WINDOW` or later.
    later: BinaryHeap<Scheduled<E>>,
    seq: u64,
}

/// One queued event and the slot after it in its millisecond; a cache line each (the
/// simulator's events are 56 bytes), so popping one reads one line, not two.
#[repr(align(64))]
struct Slot<E> {
    next: u32,
    event: Option<E>,
}

/// No slot.
const NIL: u32 = u32::MAX;

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            slots: Vec::new(),
            free: Vec::new(),
            heads: vec![NIL; WINDOW as usize],
            tails: vec![NIL; WINDOW as usize],
            base: 0,
            in_buckets: 0,
            later: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `event` at `at`. Nothing is scheduled before the last event popped; such an
    /// `at` is taken as that time.
    pub fn push(&mut self, at: Millis, event: E) {
        let at = at.max(self.base);
        self.seq += 1;
        if at < self.base + WINDOW {
            self.push_bucket(at, event);
        } else {
            self.later.push(Scheduled {
                at,
                seq: self.seq,
                event,
            });
        }
    }

    /// Appends `event` to the FIFO of millisecond `at` (inside the window).
    fn push_bucket(&mut self, at: Millis, event: E) {
        let slot = Slot {
            next: NIL,
            event: Some(event),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 queued events");
                self.slots.push(slot);
                i
            }
        };
        let b = (at % WINDOW) as usize;
        match self.tails[b] {
            NIL => self.heads[b] = i,
            t => self.slots[t as usize].next = i,
        }
        self.tails[b] = i;
        self.in_buckets += 1;
    }

    /// Takes the first event of millisecond `base`'s FIFO.
    fn pop_bucket(&mut self) -> Option<E> {
        let b = (self.base % WINDOW) as usize;
        let i = self.heads[b];
        if i == NIL {
            return None;
        }
        let slot = &mut self.slots[i as usize];
        let event = slot.event.take();
        self.heads[b] = slot.next;
        if slot.next == NIL {
            self.tails[b] = NIL;
        }
        self.free.push(i);
        self.in_buckets -= 1;
        event
    }

    /// The earliest event if it is due at or before `until` (ties in insertion order);
    /// `None` when there is none that early.
    pub fn pop_until(&mut self, until: Millis) -> Option<(Millis, E)> {
        loop {
            if self.in_buckets == 0 {
                // Nothing within the window: jump to the first later event.
                let next = self.later.peek()?.at;
                if next > until {
                    return None;
                }
                self.base = next;
                self.admit();
            }
            if self.base > until {
                return None;
            }
            if let Some(event) = self.pop_bucket() {
                return Some((self.base, event));
            }
            self.base += 1;
            self.admit();
        }
    }

    /// Moves the later events that the window now reaches into their buckets, in order.
    fn admit(&mut self) {
        while let Some(top) = self.later.peek()
            && top.at < self.base + WINDOW
        {
            let Some(s) = self.later.pop() else { break };
            self.push_bucket(s.at, s.event);
        }
    }

    pub fn len(&self) -> usize {
        self.in_buckets + self.later.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::default();
        q.push(5, "b");
        q.push(3, "a");
        q.push(5, "c");
        q.push(5, "d");
        let order: Vec<_> = std::iter::from_fn(|| q.pop_until(u64::MAX)).collect();
        assert_eq!(order, vec![(3, "a"), (5, "b"), (5, "c"), (5, "d")]);
    }

    #[test]
    fn stops_at_the_horizon_and_keeps_the_rest() {
        let mut q = EventQueue::default();
        q.push(10, 1);
        q.push(WINDOW * 3, 2);
        assert_eq!(q.pop_until(9), None);
        assert_eq!(q.pop_until(10), Some((10, 1)));
        assert_eq!(q.pop_until(WINDOW * 2), None);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_until(u64::MAX), Some((WINDOW * 3, 2)));
        assert!(q.is_empty());
    }

    /// The calendar pops in exactly the order a binary heap of (time, insertion) does, with
    /// pushes interleaved with pops as a run makes them: near, far beyond the window, on the
    /// current millisecond, and at the window's edge.
    #[test]
    fn same_order_as_a_heap() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20 {
            let mut q = EventQueue::default();
            let mut heap = BinaryHeap::new();
            let mut seq = 0u64;
            let mut now = 0;
            let mut push = |q: &mut EventQueue<u64>, heap: &mut BinaryHeap<Scheduled<u64>>, at| {
                seq += 1;
                q.push(at, seq);
                heap.push(Scheduled {
                    at,
                    seq,
                    event: seq,
                });
            };
            for _ in 0..2_000 {
                let r = next();
                let delay = match r % 5 {
                    0 => 0,
                    1 => r % 50,
                    2 => WINDOW - 1 - r % 3,
                    3 => WINDOW + r % (WINDOW * 4),
                    _ => r % 5_000,
                };
                push(&mut q, &mut heap, now + delay);
                if next() % 3 != 0 {
                    let want = heap.pop().map(|s| (s.at, s.event));
                    let got = q.pop_until(u64::MAX);
                    assert_eq!(got, want, "round {round}");
                    if let Some((t, _)) = got {
                        now = t;
                    }
                }
            }
            while let Some(s) = heap.pop() {
                assert_eq!(
                    q.pop_until(u64::MAX),
                    Some((s.at, s.event)),
                    "round {round}"
                );
            }
            assert!(q.is_empty());
        }
    }
}
