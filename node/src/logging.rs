//! Logs go to stderr through `tracing`: readable text by default, one JSON object per line
//! with `--log-format json`. Machine-readable events use the target `gpuchain::event`, the
//! event's name in `event` and the typed event (`gpuchain_api::NodeEvent`) as JSON in `data`;
//! readers parse `data` back into the enum (see `events.rs`). RUST_LOG overrides the default
//! filter.
//!
//! Lines are handed to a writer thread of their own: a log line is emitted on the runtime's
//! threads, beside heartbeats and gossip, and a write to a file or pipe that the kernel holds
//! (a busy disk, a slow reader) must not hold them. Nothing is dropped: when the writer falls
//! far behind, emitting waits for it, as a direct write would have.

use std::io::IsTerminal;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the subscriber. Keep the guard until the process ends: dropping it flushes the
/// lines not yet written.
#[must_use = "dropping the guard at once stops log output"]
pub fn init(format: LogFormat) -> WorkerGuard {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("log-writer")
        .finish(std::io::stderr());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,libp2p_gossipsub=warn,libp2p_kad=error,iroh=warn,iroh_blobs=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    guard
}
