//! `gpuchain dashboard --replay <run dir or record.jsonl>`: the dashboard of a recorded run,
//! with a scrubber, play/pause and speed. Live dashboards are served by `gpuchain testnet`
//! (the network's view) and by any client node (`/dashboard/` on its control API).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::Args;

#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The run to replay: a run folder (with its `record.jsonl`) or the record file itself.
    #[arg(long, value_name = "PATH")]
    pub replay: PathBuf,
    /// Where to serve the page. Loopback by default; the page needs no token there.
    #[arg(long, default_value = "127.0.0.1:7700", value_name = "ADDR")]
    pub listen: SocketAddr,
}

pub fn run(a: DashboardArgs) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()
        .map_err(|e| anyhow!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        let (addr, task) = gpuchain_testnet::dashboard::serve_replay(&a.replay, a.listen).await?;
        println!("dashboard: http://{addr}/dashboard/  (Ctrl-C stops it)");
        std::io::stdout().flush()?;
        tokio::select! {
            _ = task => Err(anyhow!("the dashboard server stopped")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
