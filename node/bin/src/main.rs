//! The one binary, `gpuchain`. It mounts the simulator and the local testnet beside the node
//! library's own commands, so the node library depends on neither.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gpuchain_node::config::NodeConfig;

mod dashboard_cmd;
mod testnet_cmd;

#[derive(Debug, Parser)]
#[command(
    name = "gpuchain",
    version,
    about = "gpuchain: fine-tune models on untrusted rented GPUs, paid per accepted step",
    long_about = "gpuchain: fine-tune models on untrusted rented GPUs, paid per accepted step.\n\n\
Every participant (client, provider, verifier) runs this one binary. Flags override environment \
variables (shown as [env: ...]), which override the TOML config file, which overrides the defaults."
)]
struct Cli {
    /// Log format: `text` is readable by people, `json` gives one JSON object per line for machines.
    #[arg(long, global = true, value_enum, default_value_t = gpuchain_node::cli::LogFormat::Text, env = "GPUCHAIN_LOG_FORMAT")]
    log_format: gpuchain_node::cli::LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node: join the swarm, gossip, serve and fetch checkpoint blobs.
    Node(Box<gpuchain_node::cli::NodeArgs>),
    /// Submit a training job through a running client node, or show a job's state.
    #[command(subcommand)]
    Job(gpuchain_node::cli::JobCommand),
    /// Stake as a provider (the escrow assigns only staked providers).
    #[command(subcommand)]
    Provider(gpuchain_node::cli::ProviderCommand),
    /// Stake into the escrow's verifier pool (committees are drawn from it), and see this
    /// key's seats, fees and record.
    #[command(subcommand)]
    Verifier(gpuchain_node::cli::VerifierCommand),
    /// Withdraw what the escrow credited to this node's key (payouts, refunds).
    Withdraw(gpuchain_node::cli::WithdrawArgs),
    /// Run a local network of this binary on anvil: the 4 Nov demo, or a network to use.
    #[command(subcommand)]
    Testnet(crate::testnet_cmd::TestnetCommand),
    /// Replay a recorded run in the browser (live dashboards: `gpuchain testnet`, client nodes).
    Dashboard(crate::dashboard_cmd::DashboardArgs),
    /// Run the deterministic discrete-event simulator over the protocol state machines.
    Sim(gpuchain_sim::cli::SimCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _log = gpuchain_node::logging::init(cli.log_format);
    match cli.command {
        Command::Node(args) => run_node(&args),
        Command::Job(cmd) => report("job", gpuchain_node::commands::run_job(cmd)),
        Command::Provider(cmd) => report("provider", gpuchain_node::commands::run_provider(cmd)),
        Command::Verifier(cmd) => report("verifier", gpuchain_node::commands::run_verifier(cmd)),
        Command::Withdraw(args) => report("withdraw", gpuchain_node::commands::run_withdraw(args)),
        Command::Testnet(cmd) => report("testnet", testnet_cmd::run(cmd)),
        Command::Dashboard(a) => report("dashboard", dashboard_cmd::run(a)),
        Command::Sim(cmd) => run_sim(cmd),
    }
}

fn report(name: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuchain {name}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_sim(cmd: gpuchain_sim::cli::SimCommand) -> ExitCode {
    match gpuchain_sim::cli::run_cli(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuchain sim: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_node(args: &gpuchain_node::cli::NodeArgs) -> ExitCode {
    let result = NodeConfig::from_args(args).and_then(|config| {
        let rt = tokio::runtime::Runtime::new()
            .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
        rt.block_on(gpuchain_node::node::run(config))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            gpuchain_node::events::emit(
                gpuchain_node::events::NodeEvent::Fatal {
                    error: format!("{e:#}"),
                },
                "node failed",
            );
            eprintln!("gpuchain node: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// clap checks a command's arguments only when that subcommand is parsed; this checks
    /// every one (a flag named twice would otherwise panic at its first use).
    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }
}
