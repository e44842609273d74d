//! `hearth embed`: sentence embeddings from an encoder model (BERT-style: all-MiniLM, BGE,
//! E5), one unit-length vector per text, like llama.cpp's llama-embedding.

use std::io::Read;

use anyhow::{bail, Context, Result};
use hearth_engine::embed::cosine;
use serde_json::json;

use crate::encoder_args::EncoderArgs;
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    model: EncoderArgs,
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
    /// `table`: one line of values per text; `json`: OpenAI's embeddings shape.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &EmbedArgs, choice: &DeviceChoice) -> Result<()> {
    let texts = texts(args)?;
    if texts.is_empty() {
        bail!("no text to embed: give texts, --file FILE, or lines on standard input");
    }
    let mut embedder = args.model.load(choice)?;
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
