//! Waiting: on a node's events (read back from its log) and on any condition polled.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};

use crate::events::Logged;
use crate::testnet::Testnet;

/// How often log files and the API are polled while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(50);

impl Testnet {
    /// Polls the node's log until an event matches `pred` (e.g. [`crate::event_is!`]);
    /// returns it. Fails after `timeout`, or at once when the node has exited without
    /// logging one, quoting its log.
    pub async fn wait_event(
        &self,
        name: &str,
        pred: impl Fn(&Logged) -> bool,
        timeout: Duration,
    ) -> Result<Logged> {
        self.wait_for(name, |e| pred(e).then(|| e.clone()), timeout)
            .await
    }

    /// Polls the node's log until `find` picks something out of one of its events (a
    /// `match` on [`crate::NodeEvent`] returning the fields it wants); returns that. Fails
    /// like [`Testnet::wait_event`].
    pub async fn wait_for<T>(
        &self,
        name: &str,
        find: impl Fn(&Logged) -> Option<T>,
        timeout: Duration,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let node = self.node(name)?;
        loop {
            let running = node.is_running();
            if let Some(found) = node.events()?.iter().find_map(&find) {
                return Ok(found);
            }
            if !running {
                bail!(
                    "node {name} is not running and logged no matching event; its log {}:\n{}",
                    node.log_path().display(),
                    node.log_tail(4000)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {name} logged no matching event within {timeout:?}; its log {}:\n{}",
                    node.log_path().display(),
                    node.log_tail(4000)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Polls `check` until it returns true; fails after `timeout` naming `what` and the last
/// error `check` returned (errors count as "not yet": a node may be busy or restarting).
pub async fn poll_until(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
