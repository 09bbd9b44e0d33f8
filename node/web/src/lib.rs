//! What a gpuchain process serves over HTTP to people and their browsers, the same for a
//! node, the testnet harness and a replay:
//! - [`access`]: the guard every request passes (the token, `Host`, `Origin`), in one place
//!   for the node's control API and the harness's dashboard server;
//! - [`feed`]: the lines a dashboard shows (record lines: a node's name, a time, a typed
//!   event), kept for pages that open late and pushed live to those already open;
//! - [`dashboard`]: the page itself (HTML, JS and CSS compiled into the binary: nothing is
//!   fetched at run time), its server-sent-event stream, and the break-it controls a testnet
//!   harness plugs in.

pub mod access;
pub mod dashboard;
pub mod feed;

pub use access::Access;
pub use dashboard::{BreakAction, BreakRequest, Controls, Dashboard, Mode, Target};
pub use feed::{Beat, Feed};
