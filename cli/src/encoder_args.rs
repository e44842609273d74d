//! What the commands that run an embedding or reranking model share (`embed`, `rerank`,
//! `bench embed`): which model, where it runs, and loading it with a progress bar.

use anyhow::{Context, Result};
use hearth_cpu::Activations;
use hearth_engine::{BackendKind, Embedder, EngineOptions};
use hearth_models::ModelSpec;

use crate::model_args::{with_load_bar, ModelsDirArg};
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct EncoderArgs {
    /// Model: a path (GGUF file or Hugging Face folder), or a name in the models directory
    /// (`all-MiniLM-L6-v2`).
    #[arg(short, long)]
    pub model: String,
    /// Run on the plain f32 CPU reference (slow; for checking results).
    #[arg(long)]
    pub cpu: bool,
    /// The CPU executor's worker threads; default: one per core.
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,
    /// How the CPU executor's products take activations: q8 (fast) or f32 (exact).
    #[arg(long, default_value = "q8", value_name = "q8|f32")]
    pub activations: Activations,
    /// A model spec (TOML) to run the file with instead of the shipped one.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub models: ModelsDirArg,
}

impl EncoderArgs {
    /// Loads the model where `--cpu` and `--device` say, with a progress bar on stderr.
    pub fn load(&self, choice: &DeviceChoice) -> Result<Embedder> {
        load_embedder(&self.models, &self.model, &self.options(choice)?)
    }

    pub fn options(&self, choice: &DeviceChoice) -> Result<EngineOptions> {
        embedder_options(
            self.cpu,
            self.threads,
            self.activations,
            self.spec.as_deref(),
            choice,
        )
    }
}

/// An embedding model's options: the CPU reference with `cpu`, else the device `--device`
/// names or the host's default (the CPU executor on CPU-only hosts).
pub fn embedder_options(
    cpu: bool,
    threads: Option<usize>,
    activations: Activations,
    spec: Option<&std::path::Path>,
    choice: &DeviceChoice,
) -> Result<EngineOptions> {
    let mut options = EngineOptions {
        backend: BackendKind::Reference,
        threads,
        activations,
        isa: choice.isa,
        validate: choice.validate,
        spec: match spec {
            Some(p) => Some(ModelSpec::from_file(p)?),
            None => None,
        },
        ..EngineOptions::default()
    };
    if !cpu {
        choice.placement().apply(&mut options);
    }
    Ok(options)
}

/// Loads the embedding model `name` (found in `models`) with a progress bar on stderr.
pub fn load_embedder(
    models: &ModelsDirArg,
    name: &str,
    options: &EngineOptions,
) -> Result<Embedder> {
    let path = models.resolve(name)?;
    with_load_bar(|progress| Embedder::load(&path, options, progress))
        .with_context(|| format!("loading {}", path.display()))
}
