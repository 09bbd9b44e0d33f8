use std::process::ExitCode;

use clap::Parser;
use gpuchain_node::cli::{Cli, Command};
use gpuchain_node::config::NodeConfig;

fn main() -> ExitCode {
    let cli = Cli::parse();
    gpuchain_node::logging::init(cli.log_format);
    match cli.command {
        Command::Node(args) => run_node(&args),
        Command::Job(cmd) => report("job", gpuchain_node::commands::run_job(cmd)),
        Command::Provider(cmd) => report("provider", gpuchain_node::commands::run_provider(cmd)),
        Command::Withdraw(args) => report("withdraw", gpuchain_node::commands::run_withdraw(args)),
        Command::Testnet(cmd) => report("testnet", gpuchain_node::testnet_cmd::run(cmd)),
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
            tracing::error!(target: "gpuchain::event", event = "fatal", error = %format!("{e:#}"), "node failed");
            eprintln!("gpuchain node: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
