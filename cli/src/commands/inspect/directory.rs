//! A Hugging Face folder: its config, tokenizer and weights (safetensors or PyTorch's).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hearth_models::SafetensorsWeights;
use serde_json::{json, Value};

use crate::output::{emit, Format};

/// A Hugging Face style model directory: config.json and the tokenizer.
pub(super) fn inspect_directory(path: &Path, format: Format) -> Result<()> {
    let config_path = path.join("config.json");
    let bytes = std::fs::read(&config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    let config: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("parsing {}", config_path.display()))?;
    let tokenizer = hearth_models::HfTokenizer::from_file(path);
    let weights = SafetensorsWeights::open(path)?;
    // The family it runs as (converted at load), or why it does not.
    let runs_as = hearth_models::HfFolder::open(path).map(|f| f.architecture());
    // Elements and tensors per dtype.
    let mut by_dtype: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for (_, t) in weights.tensors() {
        let entry = by_dtype.entry(t.element.name().to_string()).or_default();
        entry.0 += t.shape.iter().product::<usize>() as u64;
        entry.1 += 1;
    }
    let files: Vec<String> = weights
        .files()
        .map(|f| {
            f.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // The weights' container: safetensors, or PyTorch's pickled checkpoints.
    let pickled = files.iter().all(|f| f.ends_with(".bin"));
    let (kind, described) = match pickled {
        true => ("pytorch-dir", "PyTorch checkpoint directory"),
        false => ("safetensors-dir", "safetensors directory"),
    };
    if format == Format::Json {
        let tensors: Vec<Value> = weights
            .tensors()
            .map(|(name, t)| {
                json!({
                    "name": name,
                    "dtype": t.element.name(),
                    "shape": t.shape,
                    "file": weights.file_of(t).file_name().map(|f| f.to_string_lossy()),
                })
            })
            .collect();
        let report = json!({
            "path": path,
            "format": kind,
            "files": files,
            "tensors": tensors,
            "config": config,
            "runs_as": match &runs_as {
                Ok(arch) => json!({ "architecture": arch }),
                Err(e) => json!({ "error": e.to_string() }),
            },
            "tokenizer": match &tokenizer {
                Ok(t) => json!({ "vocab_size": t.vocab_size(), "source": t.source() }),
                Err(e) => json!({ "error": e.to_string() }),
            },
        });
        return emit(&(serde_json::to_string_pretty(&report)? + "\n"));
    }
    let mut out = String::new();
    writeln!(out, "model         {}", path.display())?;
    writeln!(
        out,
        "format        {described}, {} tensors in {}",
        weights.tensors().count(),
        files.join(", ")
    )?;
    for (dtype, (elements, tensors)) in &by_dtype {
        writeln!(out, "  {dtype:5} {tensors} tensors, {elements} values")?;
    }
    match &runs_as {
        Ok(arch) => writeln!(
            out,
            "runs as       {arch} (converted as it loads; `hearth convert` writes the GGUF file)"
        )?,
        Err(e) => writeln!(out, "runs as       none: {e}")?,
    }
    writeln!(out, "\nconfig.json")?;
    if let Some(obj) = config.as_object() {
        let width = obj.keys().map(String::len).max().unwrap_or(0);
        for (k, v) in obj {
            writeln!(out, "  {k:width$}  {v}")?;
        }
    }
    writeln!(out, "\ntokenizer")?;
    match tokenizer {
        Ok(t) => writeln!(out, "  {} ({} tokens)", t.source(), t.vocab_size())?,
        Err(e) => writeln!(out, "  {e}")?,
    }
    emit(&out)
}
