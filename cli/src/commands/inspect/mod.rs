//! `hearth inspect`: what a model file holds — architecture and resolved hyperparameters,
//! tokenizer, chat template, metadata, every tensor with its type, shape and size, and the
//! bytes and bits per weight of each tensor type (Hearth's formats by Hearth's names).
//! Problems with one part (an architecture without a spec, say) are reported in place so the
//! rest can still be inspected.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use hearth_models::{resolve_with, ChatTemplate, GgufFile, ModelSpec, ResolvedModel, Tokenizer};
use serde_json::{json, Value};

mod directory;
mod metadata;
mod model;
mod placement;
mod tokenizer;
mod types;

use crate::model_args::{parse_kv_type, ModelsDirArg, SplitArgs};
use crate::output::{emit, size, Format};
use crate::DeviceChoice;
use directory::inspect_directory;
use hearth_model::kv::KvType;
use metadata::meta_json;
use model::{model_json, write_model};
use tokenizer::{tokenizer_json, write_tokenizer};
use types::{type_totals, TypeTotal};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Model: a path, or a name in the models directory (`smollm2-135m-instruct`).
    model: String,
    #[command(flatten)]
    models: ModelsDirArg,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Resolve the file with this spec (TOML, as in models/specs/) instead of the shipped
    /// one for its architecture.
    #[arg(long, value_name = "FILE")]
    spec: Option<std::path::PathBuf>,
    /// Where loading would put each layer and what each device would hold (with the
    /// options below), without loading the model.
    #[arg(long)]
    placement: bool,
    #[command(flatten)]
    split: SplitArgs,
    /// Context the placement sizes the KV cache for [default: the model's, at most 4096].
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    ctx_size: Option<usize>,
    /// Sequences the KV cache holds at once (as `hearth serve --parallel`).
    #[arg(long, default_value_t = 1, value_name = "N")]
    parallel: usize,
    /// How the KV cache stores K and V (f16, f32, q8).
    #[arg(long, default_value = "f16", value_name = "TYPE", value_parser = parse_kv_type)]
    kv_type: KvType,
    /// Most tokens per step (the scratch is sized by it).
    #[arg(long, default_value_t = 256, value_name = "N")]
    ubatch: usize,
}

/// Everything inspect reports about a GGUF file; each part may have failed on its own.
struct Report<'f> {
    path: &'f Path,
    file: &'f GgufFile,
    model: hearth_models::Result<ResolvedModel>,
    tokenizer: hearth_models::Result<Tokenizer>,
    template: hearth_models::Result<ChatTemplate>,
}

pub fn run(args: &InspectArgs, device: &DeviceChoice) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
    if args.placement {
        let ask = placement::PlacementAsk {
            split: &args.split,
            n_ctx: args.ctx_size,
            n_seq: args.parallel,
            kv_type: args.kv_type,
            ubatch: args.ubatch,
        };
        return placement::run(&path, device, &ask, args.format);
    }
    if path.is_dir() {
        return inspect_directory(&path, args.format);
    }
    let file = GgufFile::open(&path)?;
    let spec = match &args.spec {
        Some(spec) => Some(ModelSpec::from_file(spec)?),
        None => None,
    };
    let report = Report {
        path: &path,
        file: &file,
        model: resolve_with(&file, spec.as_ref()),
        tokenizer: Tokenizer::from_gguf(&file),
        template: ChatTemplate::from_gguf(&file),
    };
    match args.format {
        Format::Json => emit(&(serde_json::to_string_pretty(&report.to_json())? + "\n")),
        Format::Table => {
            let mut out = String::new();
            report.write_table(&mut out)?;
            emit(&out)
        }
    }
}

impl Report<'_> {
    fn write_table(&self, out: &mut String) -> std::fmt::Result {
        let file = self.file;
        writeln!(out, "model         {}", self.path.display())?;
        if let Ok(Some(name)) = file.get::<&str>("general.name") {
            writeln!(out, "name          {name}")?;
        }
        writeln!(
            out,
            "format        GGUF v{}, alignment {}, {} metadata keys, {} tensors, {}",
            file.version(),
            file.alignment(),
            file.metadata().len(),
            file.tensors().len(),
            size(file.file_size())
        )?;

        writeln!(out)?;
        match &self.model {
            Ok(m) => write_model(out, m)?,
            Err(e) => writeln!(
                out,
                "architecture  {}: {e}",
                file.architecture().unwrap_or("?")
            )?,
        }

        writeln!(out, "\ntokenizer")?;
        match &self.tokenizer {
            Ok(t) => write_tokenizer(out, t)?,
            Err(e) => writeln!(out, "  {e}")?,
        }

        writeln!(out, "\nchat template")?;
        match &self.template {
            Ok(t) if t.is_fallback() => writeln!(
                out,
                "  (none in the file; the plain `Role: text` format is used)"
            )?,
            Ok(t) => {
                for line in t.source().lines() {
                    writeln!(out, "  | {line}")?;
                }
            }
            Err(e) => writeln!(out, "  {e}")?,
        }

        writeln!(out, "\nmetadata")?;
        let width = file
            .metadata()
            .iter()
            .map(|(k, _)| k.len())
            .max()
            .unwrap_or(0);
        for (k, v) in file.metadata().iter() {
            writeln!(out, "  {k:width$}  {v}")?;
        }

        writeln!(out, "\ntensors")?;
        let name_w = file
            .tensors()
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(0)
            .max(4);
        writeln!(
            out,
            "  {:name_w$}  {:7}  {:>15}  {:>10}",
            "name", "type", "shape", "size"
        )?;
        for t in file.tensors() {
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            writeln!(
                out,
                "  {:name_w$}  {:7}  {:>15}  {:>10}",
                t.name,
                t.ggml_type.name(),
                shape.join(" x "),
                size(t.n_bytes)
            )?;
        }

        writeln!(out, "\ntensor types")?;
        writeln!(
            out,
            "  {:7}  {:>7}  {:>12}  {:>10}  {:>11}",
            "type", "tensors", "weights", "size", "bits/weight"
        )?;
        let totals = type_totals(file);
        for t in &totals {
            writeln!(
                out,
                "  {:7}  {:>7}  {:>12}  {:>10}  {:>11.2}",
                t.ggml_type.name(),
                t.tensors,
                t.elements,
                size(t.bytes),
                t.bits_per_weight()
            )?;
        }
        let all = TypeTotal::sum(&totals);
        writeln!(
            out,
            "  {:7}  {:>7}  {:>12}  {:>10}  {:>11.2}",
            "total",
            all.tensors,
            all.elements,
            size(all.bytes),
            all.bits_per_weight()
        )
    }

    fn to_json(&self) -> Value {
        let file = self.file;
        let totals = type_totals(file);
        let all = TypeTotal::sum(&totals);
        let error = |e: &hearth_models::Error| json!({ "error": e.to_string() });
        json!({
            "path": self.path,
            "format": "gguf",
            "version": file.version(),
            "alignment": file.alignment(),
            "file_size": file.file_size(),
            "architecture": file.architecture().ok(),
            "model": self.model.as_ref().map_or_else(error, model_json),
            "tokenizer": self.tokenizer.as_ref().map_or_else(error, tokenizer_json),
            "chat_template": match &self.template {
                Ok(t) if t.is_fallback() => Value::Null,
                Ok(t) => json!(t.source()),
                Err(e) => error(e),
            },
            "metadata": file
                .metadata()
                .iter()
                .map(|(k, v)| (k.to_string(), meta_json(v)))
                .collect::<serde_json::Map<_, _>>(),
            "tensors": file
                .tensors()
                .iter()
                .map(|t| json!({
                    "name": t.name,
                    "type": t.ggml_type.name(),
                    "shape": t.shape,
                    "bytes": t.n_bytes,
                    "bits_per_weight": t.ggml_type.bits_per_weight(),
                    "offset": file.index().data_offset + t.offset,
                }))
                .collect::<Vec<_>>(),
            "tensor_types": totals.iter().map(TypeTotal::to_json).collect::<Vec<_>>(),
            "total_tensor_bytes": all.bytes,
            "total_weights": all.elements,
            "bits_per_weight": all.bits_per_weight(),
        })
    }
}
