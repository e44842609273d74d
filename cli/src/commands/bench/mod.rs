//! `hearth bench`: a model's speed (`-m`, or a shape with `--synthetic`), serving throughput
//! (`--concurrency`) or the kernels (`bench kernels`). The runtime's `bench` module measures;
//! these modules parse the arguments and print what it returns.

pub mod kernels;
pub mod model;
pub mod serving;
pub mod speculative;

use anyhow::Result;
use clap::Subcommand;

use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    model: model::BenchModelArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Kernel throughput: matvec GB/s, matmul GFLOP/s, and read bandwidth.
    Kernels(kernels::BenchKernelsArgs),
}

pub fn run(args: &BenchArgs, choice: &DeviceChoice) -> Result<()> {
    match &args.command {
        Some(BenchCommand::Kernels(kernels)) => kernels::run(kernels, choice),
        None => model::run(&args.model, choice),
    }
}
