//! `gpuchain testnet`: a local network of this same binary on anvil, for newcomers (`demo`)
//! and researchers (`up`). Everything runs in a run folder (logs per node, the run record);
//! every process is stopped on exit, Ctrl-C or failure.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use gpuchain_testnet::{ChainOpts, Testnet, U256, USDC, demo};

#[derive(Debug, Subcommand)]
pub enum TestnetCommand {
    /// Replay the product page's 4 Nov run and print what was measured.
    Demo(DemoArgs),
    /// Start a long-lived local network (anvil, a client, verifiers, providers) until Ctrl-C.
    Up(UpArgs),
    /// Play a scenario file (nodes, job, faults at a step or a time; see testnet/scenarios/).
    Run(RunArgs),
    /// Run jobs back to back on a live testnet under a seeded random schedule of faults,
    /// checking the chain's books after every job; a failing seed reproduces its schedule.
    Chaos(ChaosArgs),
}

#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// The schedule's seed: the same seed fires the same faults at the same times.
    #[arg(long)]
    pub seed: u64,
    /// How long to run, in minutes (faults stop a minute before the end).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario (TOML).
    pub scenario: PathBuf,
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder for node logs and the run record. Default: a new folder under the system's
    /// temporary directory.
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The job to replay the story on: `fashion` (the product page's fashion-cnn), `text`
    /// (bert-lora on Debian fortunes, tiny encoder) or `minilm` (the same on the real
    /// all-MiniLM-L6-v2 weights, 80 steps, a few minutes on 2 cores).
    #[arg(long, default_value = "fashion")]
    pub job: String,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Providers to start (each staked, prices 0.001, 0.002, …).
    #[arg(long, default_value_t = 3)]
    pub providers: usize,
    /// Verifiers to start, each staked into the escrow's pool (at least 2: a committee needs
    /// two members).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=32))]
    pub verifiers: u8,
}

fn run_dir(given: Option<PathBuf>, kind: &str) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => d,
        None => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            std::env::temp_dir().join(format!("gpuchain-{kind}-{stamp}-{}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the run folder {}", dir.display()))?;
    Ok(dir)
}

pub fn run(cmd: TestnetCommand) -> Result<()> {
    let binary = std::env::current_exe()
        .map_err(|e| anyhow!("cannot find this program's own path to start nodes: {e}"))?;
    let rt = tokio::runtime::Runtime::new()
        .map_err(|e| anyhow!("cannot start the async runtime: {e}"))?;
    rt.block_on(async move {
        match cmd {
            TestnetCommand::Demo(a) => {
                // Check the name before starting anything.
                let job = demo::DemoJob::named(&a.job)?;
                let dir = run_dir(a.run_dir, "demo")?;
                eprintln!("[demo] run folder: {}", dir.display());
                let report = tokio::select! {
                    r = demo::run_job(&dir, &binary, &job) => r?,
                    _ = tokio::signal::ctrl_c() => {
                        return Err(anyhow!("interrupted; every node was stopped (logs in {})", dir.display()));
                    }
                };
                if a.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.table());
                }
                Ok(())
            }
            TestnetCommand::Up(a) => up(a, &binary).await,
            TestnetCommand::Chaos(a) => {
                let dir = run_dir(a.run_dir, "chaos")?;
                eprintln!("[chaos] run folder: {}", dir.display());
                let report = tokio::select! {
                    r = gpuchain_testnet::chaos::run(&dir, &binary, a.seed, a.minutes) => r?,
                    _ = tokio::signal::ctrl_c() => {
                        return Err(anyhow!("chaos seed {} interrupted; every node was stopped (logs in {})", a.seed, dir.display()));
                    }
                };
                if a.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.text());
                }
                Ok(())
            }
            TestnetCommand::Run(a) => {
                // Check the file before starting anything: a typo costs nothing.
                gpuchain_testnet::scenario::Scenario::load(&a.scenario)?;
                let dir = run_dir(a.run_dir, "scenario")?;
                eprintln!("[scenario] run folder: {}", dir.display());
                let report = tokio::select! {
                    r = gpuchain_testnet::scenario::run(&a.scenario, &dir, &binary) => r?,
                    _ = tokio::signal::ctrl_c() => {
                        return Err(anyhow!("interrupted; every node was stopped (logs in {})", dir.display()));
                    }
                };
                if a.json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.text());
                }
                Ok(())
            }
        }
    })
}

async fn up(a: UpArgs, binary: &std::path::Path) -> Result<()> {
    let dir = run_dir(a.run_dir, "testnet")?;
    let mut net = Testnet::with_new_chain(&dir, binary, ChainOpts::default()).await?;
    let dashboard = net.serve_dashboard("local testnet").await?;
    let chain = net.chain()?;
    let (rpc, escrow, token) = (
        chain.rpc_url().to_string(),
        chain.escrow().to_string(),
        chain.usdc().to_string(),
    );
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for i in 1..=a.verifiers {
        let name = format!("verifier-{i}");
        let spec = net.role_spec(&name, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    // The escrow draws each job's committee from the staked verifiers: ask for all of them
    // (at most 3), with the smallest strict majority.
    let committee = a.verifiers.min(3);

    for i in 1..=a.providers {
        let name = format!("provider-{i}");
        let spec = net
            .role_spec(&name, "provider")?
            .arg("--price-per-step")
            .arg(format!("0.{:06}", 1_000 * i))
            // The dashboard's break-it controls may make its next checkpoint cheat.
            .arg("--test-cheat-control");
        net.spawn(spec).await?;
        net.stake(&name, U256::from(100 * USDC)).await?;
    }
    let client = net.node("client")?;
    println!(
        "gpuchain local testnet is up (Ctrl-C stops everything). Run folder: {}",
        dir.display()
    );
    println!("  chain      {rpc}  escrow {escrow}  test USDC {token}");
    println!("  bootstrap  {}", client.listen_addr());
    println!("  client     data dir {}", client.data_dir().display());
    println!("  dashboard  {}", dashboard.url());
    println!(
        "             (the client's own: http://{}/dashboard/)",
        client.api_addr()
    );
    println!("\nSubmit a job (any job file; `testnet/scenarios/` has examples):\n");
    println!(
        "  {} job submit --data-dir {} --spec job.toml --budget 5 --max-price 0.003 --committee {committee} --quorum {} --verifier-fee 0.001",
        binary.display(),
        client.data_dir().display(),
        committee / 2 + 1
    );
    println!(
        "  {} job status <id> --rpc-url {rpc} --escrow {escrow}",
        binary.display()
    );
    tokio::signal::ctrl_c().await?;
    eprintln!("stopping…");
    net.stop_all().await;
    drop(dashboard);
    drop(net);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}
