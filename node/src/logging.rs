//! Logs go to stderr through `tracing`: readable text by default, one JSON object per line
//! with `--log-format json`. Machine-readable events use the target `gpuchain::event`, the
//! event's name in `event` and the typed event (`gpuchain_api::NodeEvent`) as JSON in `data`;
//! readers parse `data` back into the enum (see `events.rs`). RUST_LOG overrides the default
//! filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,libp2p_gossipsub=warn,libp2p_kad=error,iroh=warn,iroh_blobs=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
