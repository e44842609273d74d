//! `hearth embed`: sentence embeddings from an encoder model (BERT-style: all-MiniLM, BGE,
//! E5), one unit-length vector per text, like llama.cpp's llama-embedding.

use std::io::Read;

use anyhow::{bail, Context, Result};
use hearth_cpu::Activations;
use hearth_engine::embed::cosine;
use hearth_engine::{BackendKind, Embedder, EngineOptions};
use hearth_models::ModelSpec;
use serde_json::json;

use crate::model_args::{with_load_bar, ModelsDirArg};
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// Model: a path (GGUF file or Hugging Face folder), or a name in the models directory
    /// (`all-MiniLM-L6-v2`).
    #[arg(short, long)]
    model: String,
    /// Texts to embed, one vector each; none: the lines of --file, or of standard input.
    texts: Vec<String>,
    /// A file of texts, one per line (`-`: standard input).
    #[arg(short, long, value_name = "FILE")]
    file: Option<String>,
    /// Vectors as the model pools them, not scaled to unit length.
    #[arg(long)]
    no_normalize: bool,
    /// After the vectors, the cosine similarity of every pair of texts.
    #[arg(long)]
    similarity: bool,
    /// Run on the plain f32 CPU reference (slow; for checking results).
    #[arg(long)]
    cpu: bool,
    /// The CPU executor's worker threads; default: one per core.
    #[arg(long, short = 't', value_name = "N")]
    threads: Option<usize>,
    /// How the CPU executor's products take activations: q8 (fast) or f32 (exact).
    #[arg(long, default_value = "q8", value_name = "q8|f32")]
    activations: Activations,
    /// A model spec (TOML) to run the file with instead of the shipped one.
    #[arg(long, value_name = "FILE")]
    spec: Option<std::path::PathBuf>,
    #[command(flatten)]
    models: ModelsDirArg,
    /// `table`: one line of values per text; `json`: OpenAI's embeddings shape.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &EmbedArgs, choice: &DeviceChoice) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
    let texts = texts(args)?;
    if texts.is_empty() {
        bail!("no text to embed: give texts, --file FILE, or lines on standard input");
    }
    let mut options = EngineOptions {
        backend: BackendKind::Reference,
        threads: args.threads,
        activations: args.activations,
        isa: choice.isa,
        spec: match &args.spec {
            Some(p) => Some(ModelSpec::from_file(p)?),
            None => None,
        },
        ..EngineOptions::default()
    };
    // The device --device names, or the host's default (the CPU executor on CPU-only hosts).
    if !args.cpu {
        choice.placement().apply(&mut options);
    }
    let mut embedder = with_load_bar(|progress| Embedder::load(&path, &options, progress))
        .with_context(|| format!("loading {}", path.display()))?;
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| embedder.tokenize(t)).collect();
    let vectors = embedder.embed_tokens(&ids, !args.no_normalize)?;
    let info = embedder.info();
    match args.format {
        Format::Json => {
            let data: Vec<_> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
                .collect();
            let tokens: usize = ids.iter().map(Vec::len).sum();
            emit_json(&json!({
                "object": "list",
                "model": info.name,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }))?;
        }
        Format::Table => {
            let mut out = String::new();
            for v in &vectors {
                let values: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
                out.push_str(&values.join(" "));
                out.push('\n');
            }
            if args.similarity {
                out.push_str("\ncosine similarity:\n");
                for a in &vectors {
                    let row: Vec<String> = vectors
                        .iter()
                        .map(|b| format!("{:6.3}", cosine(a, b)))
                        .collect();
                    out.push_str(&row.join(" "));
                    out.push('\n');
                }
            }
            emit(&out)?;
        }
    }
    Ok(())
}

/// The texts: as given, else the lines of the file or of standard input (blank lines
/// skipped).
fn texts(args: &EmbedArgs) -> Result<Vec<String>> {
    if !args.texts.is_empty() {
        if args.file.is_some() {
            bail!("give texts or --file, not both");
        }
        return Ok(args.texts.clone());
    }
    let text = match args.file.as_deref() {
        Some("-") | None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading texts from standard input")?;
            s
        }
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
    };
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}
