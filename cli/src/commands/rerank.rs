//! `hearth rerank`: documents ordered by their relevance to a query, as a cross-encoder
//! (BertForSequenceClassification: ms-marco-MiniLM and its kind) scores each pair.

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::encoder_args::EncoderArgs;
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct RerankArgs {
    /// The cross-encoder.
    #[command(flatten)]
    model: EncoderArgs,
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
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &RerankArgs, choice: &DeviceChoice) -> Result<()> {
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
    let mut model = args.model.load(choice)?;
    let docs: Vec<&str> = documents.iter().map(String::as_str).collect();
    let scores = model.rerank(&args.query, &docs)?;
    let order = hearth_engine::embed::ranking(&scores, args.top_n);
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
