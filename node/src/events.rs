//! Writing the node's typed events ([`gpuchain_api::NodeEvent`]) into its log: one line each,
//! with target `gpuchain::event`, the event's name in `event`, the event as JSON in `data`,
//! and a sentence for people. Every event also moves its Prometheus series
//! ([`crate::metrics`]), so the log and `/metrics` count the same things.

pub use gpuchain_api::NodeEvent;
use gpuchain_api::events::{EVENT_TARGET, Level};

pub fn emit(ev: NodeEvent, message: &str) {
    crate::metrics::global().observe(&ev);
    let (event, data) = ev.to_fields();
    match ev.level() {
        Level::Debug => tracing::debug!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Info => tracing::info!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Warn => tracing::warn!(target: EVENT_TARGET, %event, %data, "{message}"),
        Level::Error => tracing::error!(target: EVENT_TARGET, %event, %data, "{message}"),
    }
}
