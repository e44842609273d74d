//! `hearth bench embed`: an embedding model's throughput, sentences per second at each batch
//! size (the runtime's `bench::embed` measures).

use anyhow::Result;
use hearth_tools::bench::{bench_embed, EmbedBenchParams};
use serde_json::json;

use crate::encoder_args::EncoderArgs;
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct BenchEmbedArgs {
    #[command(flatten)]
    model: EncoderArgs,
    /// Texts per batch, comma-separated.
    #[arg(short, long, value_delimiter = ',', default_value = "1,32")]
    batch: Vec<usize>,
    /// Timed batches per size (the mean is reported).
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &BenchEmbedArgs, choice: &DeviceChoice) -> Result<()> {
    let mut embedder = args.model.load(choice)?;
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
