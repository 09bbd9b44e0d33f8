//! Writing the node's typed events ([`gpuchain_api::NodeEvent`]) into its log: one line each,
//! with target `gpuchain::event`, the event's name in `event`, the event as JSON in `data`,
//! and a sentence for people. Every event also moves its Prometheus series
//! ([`crate::metrics`]), so the log and `/metrics` count the same things; a client node also
//! keeps them for its dashboard ([`feed`]).

use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub use gpuchain_api::NodeEvent;
use gpuchain_api::events::{EVENT_TARGET, Level};
use gpuchain_web::{Beat, Feed};
use serde::Serialize;

/// The name of this node's own lines in its dashboard feed.
pub const SELF_NAME: &str = "this node";

static FEED: OnceLock<Arc<Feed>> = OnceLock::new();

/// Starts keeping events for the dashboard (a client node does, from its first event on).
/// Process-wide, as the log is: every part of the node emits through [`emit`] and none of
/// them should need a handle to be seen.
pub fn keep_for_dashboard() {
    FEED.get_or_init(Feed::new);
}

/// The dashboard's feed, on a node that keeps one.
pub fn feed() -> Option<Arc<Feed>> {
    FEED.get().cloned()
}

#[derive(Serialize)]
struct Line<'a> {
    node: &'static str,
    timestamp_us: u64,
    #[serde(flatten)]
    event: &'a NodeEvent,
}

pub fn emit(ev: NodeEvent, message: &str) {
    crate::metrics::global().observe(&ev);
    let (event, data) = ev.to_fields();
    match ev.level() {
        Level::Debug => tracing::debug!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Info => tracing::info!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Warn => tracing::warn!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Error => tracing::error!(target: EVENT_TARGET, %event, %data, "{message}"),
    }
    if let Some(feed) = FEED.get() {
        let timestamp_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let beat = match &ev {
            NodeEvent::Heartbeat { provider, step, .. } => Some(Beat {
                key: provider.clone(),
                step: *step,
            }),
            _ => None,
        };
        feed.push(
            &Line {
                node: SELF_NAME,
                timestamp_us,
                event: &ev,
            },
            timestamp_us,
            beat,
        );
    }
}
