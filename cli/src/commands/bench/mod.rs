//! `hearth bench`: a model's speed (`-m`, or a shape with `--synthetic`), serving throughput
//! (`--concurrency`), the kernels (`bench kernels`) or an embedding model (`bench embed`).
//! The runtime's `bench` module measures; these modules parse the arguments and print what
//! it returns.

pub mod embed;
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
    /// An embedding model's sentences per second at each batch size.
    Embed(embed::BenchEmbedArgs),
}

pub fn run(args: &BenchArgs, choice: &DeviceChoice) -> Result<()> {
    match &args.command {
        Some(BenchCommand::Kernels(kernels)) => kernels::run(kernels, choice),
        Some(BenchCommand::Embed(embed)) => embed::run(embed, choice),
        None => model::run(&args.model, choice),
    }
}
