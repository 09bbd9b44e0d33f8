//! The lines a dashboard shows, as JSON text: `{"node":…,"timestamp_us":…,"event":…,…}` (the
//! run record's line format). A page that opens late gets every line so far, then the live
//! ones; the feed keeps them in memory for that.
//!
//! Heartbeats are most of the traffic (ten a second per provider) and say little once seen:
//! a heartbeat is kept for late pages only when it reports a step its provider had not
//! reported before (so the loss curve a client hears is complete), and pushed live at most
//! every [`BEAT_PUSH_EVERY_US`] per provider. The newest heartbeat of each provider is always
//! kept, so the page's "heartbeat age" is right. What the feed holds grows with the steps
//! trained, not with time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tokio::sync::broadcast;

/// How often, at most, a provider's heartbeats are pushed to open pages.
pub const BEAT_PUSH_EVERY_US: u64 = 250_000;
/// Lines a slow page may fall behind before it is sent everything again.
const LIVE_BUFFER: usize = 4096;

/// What makes a line a heartbeat: whose, and the step it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    pub key: String,
    pub step: u64,
}

#[derive(Default)]
struct BeatSlot {
    newest: Option<Arc<str>>,
    kept_step: Option<u64>,
    pushed_at_us: Option<u64>,
}

#[derive(Default)]
struct Held {
    lines: Vec<Arc<str>>,
    beats: HashMap<String, BeatSlot>,
    /// The newest heartbeat of each provider that is not also in `lines`.
    loose: HashMap<String, Arc<str>>,
}

/// Every line so far plus a live channel of new ones.
pub struct Feed {
    held: Mutex<Held>,
    live: broadcast::Sender<Arc<str>>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            held: Mutex::default(),
            live: broadcast::channel(LIVE_BUFFER).0,
        }
    }
}

impl Feed {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds one line at `timestamp_us`; `beat` when it is a heartbeat.
    pub fn push(&self, line: &impl Serialize, timestamp_us: u64, beat: Option<Beat>) {
        let text: Arc<str> = match serde_json::to_string(line) {
            Ok(t) => t.into(),
            Err(e) => {
                tracing::warn!(error = %e, "a dashboard line could not be serialised; left out");
                return;
            }
        };
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let push_live = match beat {
            None => {
                held.lines.push(text.clone());
                true
            }
            Some(Beat { key, step }) => {
                let slot = held.beats.entry(key.clone()).or_default();
                slot.newest = Some(text.clone());
                let new_step = slot.kept_step != Some(step);
                let due = slot
                    .pushed_at_us
                    .is_none_or(|t| timestamp_us.saturating_sub(t) >= BEAT_PUSH_EVERY_US);
                if new_step {
                    slot.kept_step = Some(step);
                }
                if new_step || due {
                    slot.pushed_at_us = Some(timestamp_us);
                }
                if new_step {
                    held.lines.push(text.clone());
                    held.loose.remove(&key);
                } else {
                    held.loose.insert(key, text.clone());
                }
                new_step || due
            }
        };
        if push_live {
            // No page open is not an error.
            let _ = self.live.send(text);
        }
    }

    /// Every line held, then the live channel, taken together so no line falls between.
    pub fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut lines = held.lines.clone();
        lines.extend(held.loose.values().cloned());
        (lines, self.live.subscribe())
    }

    /// Lines held for late pages.
    pub fn len(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.lines.len() + held.loose.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn beat(step: u64) -> Option<Beat> {
        Some(Beat {
            key: "A".into(),
            step,
        })
    }

    #[test]
    fn heartbeats_are_kept_once_per_step_and_pushed_at_most_every_quarter_second() {
        let feed = Feed::new();
        let (_, mut rx) = feed.subscribe();
        feed.push(&json!({"e": "offer"}), 0, None);
        // Ten heartbeats a second for two seconds, a step every half second.
        for i in 0..20u64 {
            feed.push(&json!({"seq": i}), i * 100_000, beat(i / 5));
        }
        let (held, _) = feed.subscribe();
        // The offer, one heartbeat per step (4 steps), and the newest heartbeat.
        assert_eq!(held.len(), 1 + 4 + 1, "{held:?}");
        assert_eq!(held.last().map(|l| &**l), Some(r#"{"seq":19}"#));
        let mut pushed = Vec::new();
        while let Ok(l) = rx.try_recv() {
            pushed.push(l);
        }
        // 0 (step), 3 (due), 5 (step), 8 (due), 10, 13, 15, 18.
        assert_eq!(pushed.len(), 1 + 8, "{pushed:?}");
        assert!(pushed.iter().any(|l| &**l == r#"{"seq":13}"#));
        assert!(!pushed.iter().any(|l| &**l == r#"{"seq":12}"#));
    }

    #[test]
    fn a_late_page_gets_what_an_early_page_got() {
        let feed = Feed::new();
        let (early_held, mut rx) = feed.subscribe();
        assert!(early_held.is_empty());
        for i in 0..50u64 {
            feed.push(&json!({"step": i}), i, None);
        }
        let (late_held, _) = feed.subscribe();
        let mut early = Vec::new();
        while let Ok(l) = rx.try_recv() {
            early.push(l);
        }
        assert_eq!(early, late_held);
        assert_eq!(feed.len(), 50);
    }
}
