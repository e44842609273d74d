//! `hearth`: Hearth's command-line interface.

mod bench_kernels;
mod bench_model;
mod bench_serving;
mod chat;
mod devices;
mod generate;
mod inspect;
mod model_args;
mod perplexity;
mod quantize;
mod tokenize;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "hearth", version, about = "Run LLMs on any Vulkan device")]
struct Cli {
    /// Vulkan device index (see `hearth devices`); default: the best device found.
    #[arg(long, global = true, env = "HEARTH_DEVICE")]
    device: Option<usize>,
    /// Enable the Khronos validation layer (slow; for debugging).
    #[arg(long, global = true)]
    validate: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every Vulkan device with the capabilities Hearth uses.
    Devices(devices::DevicesArgs),
    /// Complete a prompt, streaming the text.
    Generate(generate::GenerateArgs),
    /// Chat with a model in the terminal.
    Chat(chat::ChatArgs),
    /// Benchmark a model (`-m`, like llama-bench), a model shape without its file
    /// (`--synthetic llama-7b`) or the kernels (`bench kernels`).
    Bench(BenchArgs),
    /// Perplexity of a text, as llama-perplexity computes it.
    Perplexity(perplexity::PerplexityArgs),
    /// Show a model file: architecture, hyperparameters, tokenizer, chat template, tensors.
    Inspect(inspect::InspectArgs),
    /// Print the token ids and pieces of a text.
    Tokenize(tokenize::TokenizeArgs),
    /// Write a copy of a model with its weights in another format (Q3H, Q4, Q8, ...).
    Quantize(quantize::QuantizeArgs),
}

#[derive(clap::Args)]
struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    model: bench_model::BenchModelArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Kernel throughput: matvec GB/s, matmul GFLOP/s, and read bandwidth.
    Kernels(bench_kernels::BenchKernelsArgs),
}

/// Options every command that opens a device shares.
pub struct DeviceChoice {
    pub index: Option<usize>,
    pub validate: bool,
}

impl DeviceChoice {
    pub fn open(&self) -> Result<std::sync::Arc<hearth_runtime::vk::Device>> {
        Ok(hearth_runtime::vk::Device::new(
            hearth_runtime::vk::DeviceDesc {
                index: self.index,
                validation: self.validate,
            },
        )?)
    }
}

/// Table for people, JSON for machines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let choice = DeviceChoice {
        index: cli.device,
        validate: cli.validate,
    };
    let result = match &cli.command {
        Command::Devices(args) => devices::run(args),
        Command::Generate(args) => generate::run(args, &choice),
        Command::Chat(args) => chat::run(args, &choice),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Kernels(args)),
            ..
        }) => bench_kernels::run(args, &choice),
        Command::Bench(BenchArgs {
            command: None,
            model: args,
        }) => bench_model::run(args, &choice),
        Command::Perplexity(args) => perplexity::run(args, &choice),
        Command::Inspect(args) => inspect::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Quantize(args) => quantize::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
