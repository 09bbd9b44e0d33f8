//! `cargo run -p gpuchain-sim --example sim -- run nov4 --seed 1`: the CLI without the node
//! binary, for working on the simulator alone.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    cmd: gpuchain_sim::cli::SimCommand,
}

fn main() -> anyhow::Result<()> {
    gpuchain_sim::cli::run_cli(Cli::parse().cmd)
}
