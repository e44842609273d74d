//! `hearth`: Hearth's command-line interface. The command tree is here, each command in its
//! own module under `commands`, the printing they share in `output`; the measurements behind
//! `hearth bench` are the runtime's `bench` module.

mod commands;
mod draft_args;
mod encoder_args;
mod grammar_args;
mod hub;
mod model_args;
mod output;
mod sampling_args;

use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Subcommand};
use hearth_cpu::Isa;
use hearth_engine::Placement;

use commands::{
    bench, chat, completions, convert, devices, embed, generate, imatrix, inspect, perplexity,
    pull, quantize, rerank, serve, tokenize, tune,
};

#[derive(clap::Parser)]
#[command(name = "hearth", version, about = "Run LLMs on any Vulkan device")]
struct Cli {
    /// Where models run: `cpu` (the native CPU executor) or `vulkan:N` (a device from
    /// `hearth devices`; a bare N too); default: the best Vulkan GPU, or the CPU executor where
    /// the only Vulkan devices are CPUs (lavapipe).
    #[arg(
        long,
        global = true,
        env = "HEARTH_DEVICE",
        value_name = "cpu|vulkan:N"
    )]
    device: Option<Placement>,
    /// The CPU executor's instruction set, lower than the best this CPU has (for tests and
    /// comparisons): portable, avx2, avx-vnni, avx512-vnni or neon-dotprod.
    #[arg(long, global = true, env = "HEARTH_CPU_ISA", value_parser = parse_isa)]
    isa: Option<Isa>,
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
    Bench(bench::BenchArgs),
    /// Perplexity of a text, as llama-perplexity computes it.
    Perplexity(perplexity::PerplexityArgs),
    /// Show a model file: architecture, hyperparameters, tokenizer, chat template, tensors.
    Inspect(inspect::InspectArgs),
    /// Print the token ids and pieces of a text.
    Tokenize(tokenize::TokenizeArgs),
    /// Sentence embeddings from an encoder model (all-MiniLM, BGE, E5): one unit-length
    /// vector per text.
    Embed(embed::EmbedArgs),
    /// Order documents by their relevance to a query with a cross-encoder.
    Rerank(rerank::RerankArgs),
    /// Write a copy of a model with its weights in another format (Q3H, Q4, Q8, ...).
    Quantize(quantize::QuantizeArgs),
    /// Serve the model over OpenAI's HTTP API (chat, completions, models), with
    /// continuous batching, /health and /metrics.
    Serve(serve::ServeArgs),
    /// Write a Hugging Face folder (config.json, safetensors, tokenizer) as a GGUF file.
    Convert(convert::ConvertArgs),
    /// Download a model from the Hugging Face hub into the models directory:
    /// ORG/REPO[:QUANT], a GGUF file or a Hugging Face folder (resumable, checked against
    /// the hub's checksums).
    Pull(pull::PullArgs),
    /// Write an importance matrix of a model over a text, for `quantize --imatrix`.
    Imatrix(imatrix::ImatrixArgs),
    /// Time the kernels' variants on a device for a model and keep the fastest for later
    /// runs (a quick tune also happens on a model's first load; --no-tune skips it).
    Tune(tune::TuneArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Write man pages into a folder.
    #[command(hide = true)]
    Man(completions::ManArgs),
    /// Render chat templates for `hearth serve` in this process, its memory capped: a JSON
    /// line in, a JSON line out (see hearth_models::chat_sandbox).
    #[command(hide = true)]
    TemplateWorker,
}

/// `--version`'s long form: the version, the commit, the Vulkan version and what compiled
/// the kernels.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{}\ncommit {}\n{}",
            env!("CARGO_PKG_VERSION"),
            env!("HEARTH_COMMIT"),
            hearth_kernels::build_info()
        )
    })
}

/// The command tree, as parsing, completions and man pages see it.
pub fn command() -> clap::Command {
    Cli::command().long_version(long_version())
}

/// An instruction set the running CPU supports, by name.
fn parse_isa(name: &str) -> std::result::Result<Isa, String> {
    Isa::named(name).map_err(|e| e.to_string())
}

/// Options every command that opens a device shares.
pub struct DeviceChoice {
    /// `--device`; `None`: [`Placement::default_for_host`].
    pub placement: Option<Placement>,
    /// `--isa`: the CPU executor's instruction set.
    pub isa: Option<Isa>,
    pub validate: bool,
}

impl DeviceChoice {
    /// Where models run.
    pub fn placement(&self) -> Placement {
        self.placement.unwrap_or_else(Placement::default_for_host)
    }

    /// The Vulkan device chosen (the best where `--device` names none), for commands that
    /// run Vulkan kernels themselves.
    pub fn open(&self) -> Result<std::sync::Arc<hearth_kernels::vk::Device>> {
        let index = match self.placement {
            Some(Placement::Cpu) => {
                anyhow::bail!("this command runs Vulkan kernels: --device cpu does not apply")
            }
            Some(Placement::Vulkan(index)) => index,
            None => None,
        };
        Ok(hearth_kernels::vk::Device::new(
            hearth_kernels::vk::DeviceDesc {
                index,
                validation: self.validate,
            },
        )?)
    }
}

/// Parses the command line and runs the command; errors go to stderr with exit status 1.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let choice = DeviceChoice {
        placement: cli.device,
        isa: cli.isa,
        validate: cli.validate,
    };
    match run(&cli.command, &choice) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: &Command, choice: &DeviceChoice) -> Result<()> {
    match command {
        Command::Devices(args) => devices::run(args, choice),
        Command::Generate(args) => generate::run(args, choice),
        Command::Chat(args) => chat::run(args, choice),
        Command::Bench(args) => bench::run(args, choice),
        Command::Perplexity(args) => perplexity::run(args, choice),
        Command::Inspect(args) => inspect::run(args, choice),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Embed(args) => embed::run(args, choice),
        Command::Rerank(args) => rerank::run(args, choice),
        Command::Quantize(args) => quantize::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Pull(args) => pull::run(args),
        Command::Serve(args) => serve::run(args, choice),
        Command::Imatrix(args) => imatrix::run(args),
        Command::Tune(args) => tune::run(args, choice),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
        Command::TemplateWorker => Ok(hearth_models::chat::serve_template_worker()?),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_tree_is_consistent() {
        super::command().debug_assert();
    }

    #[test]
    fn the_long_version_names_the_commit_vulkan_and_the_kernels() {
        let v = super::long_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        assert!(v.contains("\ncommit "), "{v}");
        assert!(v.contains("Vulkan API 1.2"), "{v}");
        assert!(v.contains("shaderc (SPIR-V 1."), "{v}");
    }
}
