//! `hearth bench embed`: an embedding model's throughput, sentences per second at each batch
//! size (the runtime's `bench::embed` measures).

use anyhow::{Context, Result};
use hearth_cpu::Activations;
use hearth_engine::{BackendKind, Embedder, EngineOptions};
use hearth_tools::bench::{bench_embed, EmbedBenchParams};
use serde_json::json;

use crate::model_args::{with_load_bar, ModelsDirArg};
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct BenchEmbedArgs {
    /// An embedding model: a path, or a name in the models directory.
    #[arg(short, long)]
    model: String,
    /// Texts per batch, comma-separated.
    #[arg(short, long, value_delimiter = ',', default_value = "1,32")]
    batch: Vec<usize>,
    /// Timed batches per size (the mean is reported).
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// The CPU executor's worker threads; default: one per core.
    #[arg(long, short = 't', value_name = "N")]
    threads: Option<usize>,
    /// How the CPU executor's products take activations: q8 (fast) or f32 (exact).
    #[arg(long, default_value = "q8", value_name = "q8|f32")]
    activations: Activations,
    #[command(flatten)]
    models: ModelsDirArg,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &BenchEmbedArgs, choice: &DeviceChoice) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
    let mut options = EngineOptions {
        backend: BackendKind::Reference,
        threads: args.threads,
        activations: args.activations,
        isa: choice.isa,
        ..EngineOptions::default()
    };
    choice.placement().apply(&mut options);
    let mut embedder = with_load_bar(|progress| Embedder::load(&path, &options, progress))
        .with_context(|| format!("loading {}", path.display()))?;
    let params = EmbedBenchParams {
        batches: args.batch.clone(),
        reps: args.reps,
    };
    let rows = bench_embed(&mut embedder, &params)?;
    let info = embedder.info();
    if args.format == Format::Json {
        return emit_json(&json!({
            "model": info.name,
            "device": info.device,
            "dims": info.dims,
            "rows": rows,
        }));
    }
    let mut out = format!(
        "model: {} ({} dims) on {}\n",
        info.name, info.dims, info.device
    );
    out.push_str(&format!(
        "{:>6} {:>12} {:>16} {:>12}\n",
        "batch", "tokens/text", "sentences/s", "tokens/s"
    ));
    for r in &rows {
        out.push_str(&format!(
            "{:>6} {:>12.1} {:>10.1} ± {:<5.1} {:>10.0}\n",
            r.batch, r.tokens_per_text, r.sentences_per_s, r.sentences_per_s_sd, r.tokens_per_s
        ));
    }
    emit(&out)
}
