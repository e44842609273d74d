//! `hearth rerank`: documents ordered by their relevance to a query, as a cross-encoder
//! (BertForSequenceClassification: ms-marco-MiniLM and its kind) scores each pair.

use anyhow::{bail, Context, Result};
use hearth_cpu::Activations;
use hearth_engine::{BackendKind, Embedder, EngineOptions};
use serde_json::json;

use crate::model_args::{with_load_bar, ModelsDirArg};
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct RerankArgs {
    /// A cross-encoder: a path (GGUF file or Hugging Face folder), or a name in the models
    /// directory.
    #[arg(short, long)]
    model: String,
    /// What the documents are ranked against.
    #[arg(short, long)]
    query: String,
    /// The documents; none: the lines of --file.
    documents: Vec<String>,
    /// A file of documents, one per line.
    #[arg(short, long, value_name = "FILE")]
    file: Option<String>,
    /// Only the N most relevant.
    #[arg(long, value_name = "N")]
    top_n: Option<usize>,
    /// Run on the plain f32 CPU reference (slow; for checking results).
    #[arg(long)]
    cpu: bool,
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

pub fn run(args: &RerankArgs, choice: &DeviceChoice) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
    let documents: Vec<String> = match (&args.file, args.documents.is_empty()) {
        (Some(_), false) => bail!("give documents or --file, not both"),
        (Some(file), true) => std::fs::read_to_string(file)
            .with_context(|| format!("reading {file}"))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        (None, _) => args.documents.clone(),
    };
    if documents.is_empty() {
        bail!("no documents to rank: give them as arguments or --file FILE");
    }
    let mut options = EngineOptions {
        backend: BackendKind::Reference,
        threads: args.threads,
        activations: args.activations,
        isa: choice.isa,
        ..EngineOptions::default()
    };
    // The device --device names, or the host's default (the CPU executor on CPU-only hosts).
    if !args.cpu {
        choice.placement().apply(&mut options);
    }
    let mut model = with_load_bar(|progress| Embedder::load(&path, &options, progress))
        .with_context(|| format!("loading {}", path.display()))?;
    let docs: Vec<&str> = documents.iter().map(String::as_str).collect();
    let scores = model.rerank(&args.query, &docs)?;
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(args.top_n.unwrap_or(order.len()));
    match args.format {
        Format::Json => {
            let results: Vec<_> = order
                .iter()
                .map(|&i| json!({"index": i, "relevance_score": scores[i], "document": docs[i]}))
                .collect();
            emit_json(&json!({ "query": args.query, "results": results }))?;
        }
        Format::Table => {
            let mut out = String::new();
            for &i in &order {
                out.push_str(&format!("{:>9.4}  {:>3}  {}\n", scores[i], i, docs[i]));
            }
            emit(&out)?;
        }
    }
    Ok(())
}
