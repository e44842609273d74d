//! `hearth inspect`: what a model file holds — architecture and resolved hyperparameters,
//! tokenizer, chat template, metadata, every tensor with its type, shape and size, and the
//! bytes and bits per weight of each tensor type (Hearth's formats by Hearth's names).
//! Problems with one part (an architecture without a spec, say) are reported in place so the
//! rest can still be inspected.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hearth_models::gguf::MetaValue;
use hearth_models::spec::{QkNormOver, RopeScaling};
use hearth_models::tokenizer::TokenizerKind;
use hearth_models::{
    resolve_with, ChatTemplate, GgmlType, GgufFile, ModelSpec, ResolvedModel, SafetensorsWeights,
    Tokenizer,
};
use serde_json::{json, Value};

use crate::model_args::ModelsDirArg;
use crate::output::{emit, size, Format};

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
}

/// Everything inspect reports about a GGUF file; each part may have failed on its own.
struct Report<'f> {
    path: &'f Path,
    file: &'f GgufFile,
    model: hearth_models::Result<ResolvedModel>,
    tokenizer: hearth_models::Result<Tokenizer>,
    template: hearth_models::Result<ChatTemplate>,
}

pub fn run(args: &InspectArgs) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
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

/// The tensors of one type: how many, how many weights, how many bytes.
struct TypeTotal {
    ggml_type: GgmlType,
    tensors: usize,
    elements: u64,
    bytes: u64,
}

impl TypeTotal {
    fn bits_per_weight(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.elements as f64
        }
    }

    /// All of `totals` together (its type is meaningless).
    fn sum(totals: &[TypeTotal]) -> TypeTotal {
        TypeTotal {
            ggml_type: GgmlType::F32,
            tensors: totals.iter().map(|t| t.tensors).sum(),
            elements: totals.iter().map(|t| t.elements).sum(),
            bytes: totals.iter().map(|t| t.bytes).sum(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "type": self.ggml_type.name(),
            "tensors": self.tensors,
            "weights": self.elements,
            "bytes": self.bytes,
            "bits_per_weight": self.bits_per_weight(),
        })
    }
}

/// Totals per tensor type, most bytes first.
fn type_totals(file: &GgufFile) -> Vec<TypeTotal> {
    let mut totals: Vec<TypeTotal> = Vec::new();
    for t in file.tensors() {
        let i = match totals.iter().position(|x| x.ggml_type == t.ggml_type) {
            Some(i) => i,
            None => {
                totals.push(TypeTotal {
                    ggml_type: t.ggml_type,
                    tensors: 0,
                    elements: 0,
                    bytes: 0,
                });
                totals.len() - 1
            }
        };
        totals[i].tensors += 1;
        totals[i].elements += t.n_elements();
        totals[i].bytes += t.n_bytes;
    }
    totals.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    totals
}

fn write_model(out: &mut String, m: &ResolvedModel) -> std::fmt::Result {
    let hp = &m.hparams;
    let s = &m.spec;
    writeln!(
        out,
        "architecture  {} (spec `{}`, {})",
        m.architecture, s.name, s.network
    )?;
    writeln!(out, "  layers          {}", hp.n_layer)?;
    writeln!(out, "  width           {}", hp.n_embd)?;
    writeln!(
        out,
        "  heads           {} (head dim {})",
        hp.n_head, hp.head_dim
    )?;
    writeln!(out, "  kv heads        {}", hp.n_head_kv)?;
    writeln!(out, "  ffn width       {}", hp.n_ff)?;
    writeln!(out, "  vocab           {}", hp.n_vocab)?;
    writeln!(out, "  context (train) {}", hp.n_ctx_train)?;
    writeln!(
        out,
        "  norm            {}, eps {:e}, {}-norm",
        s.norm.kind, hp.norm_eps, s.norm.placement
    )?;
    writeln!(out, "  activation      {}", s.activation)?;
    match hp.rope {
        Some(r) => writeln!(
            out,
            "  position        rope ({}), base {}, {} rotary dims{}",
            r.layout,
            r.base,
            r.dims,
            match &m.tensors.rope_freqs {
                Some(name) => format!(", frequencies divided by {name}"),
                None => String::new(),
            } + &match r.scaling {
                RopeScaling::None => String::new(),
                RopeScaling::Linear { factor } => format!(", positions divided by {factor}"),
                RopeScaling::Yarn(y) => format!(
                    ", YaRN x{} over {} positions (attention factor {:.4})",
                    y.factor, y.original_context, y.attn_factor
                ),
                other => format!(", scaling {other:?}"),
            } + &match r.local_base {
                Some(base) => format!(", local layers base {base}"),
                None => String::new(),
            } + &match &m.tensors.rope_factors {
                Some((long, short)) => format!(
                    ", LongRoPE ({long} past {} positions, else {short})",
                    r.original_context
                ),
                None => String::new(),
            } + &match r.attn_factor {
                Some(f) => format!(", cos and sin times {f}"),
                None => String::new(),
            }
        )?,
        None => writeln!(out, "  position        {}", s.position.kind_str())?,
    }
    writeln!(
        out,
        "  attention       {} q/k/v, {}, {}",
        s.attention.qkv,
        if s.attention.bias {
            "biased"
        } else {
            "no bias"
        },
        if s.attention.causal {
            "causal"
        } else {
            "bidirectional"
        }
    )?;
    if let Some(qk) = s.attention.qk_norm {
        let over = match s.attention.qk_norm_over {
            QkNormOver::Head => "per head",
            QkNormOver::Projection => "over the whole projections",
        };
        writeln!(out, "  query/key norm  {qk}, {over}")?;
    }
    if let Some(w) = &hp.sliding_window {
        let local = w.layers.iter().filter(|&&l| l).count();
        writeln!(
            out,
            "  local attention window of {} on {local} of {} layers",
            w.size, hp.n_layer
        )?;
    }
    if let Some(scale) = hp.attn_scale {
        writeln!(out, "  score scale     {scale}")?;
    }
    for (what, cap) in [("scores", hp.attn_softcap), ("logits", hp.final_softcap)] {
        if let Some(cap) = cap {
            writeln!(out, "  soft-capped     {what} at {cap}")?;
        }
    }
    writeln!(out, "  mlp             {}", s.mlp.kind)?;
    if let Some(x) = &hp.experts {
        let renormalized = if x.normalize { ", renormalized" } else { "" };
        write!(
            out,
            "  experts         {} of {} per token, {} wide, {} weights{renormalized}",
            x.used,
            x.count,
            x.n_ff,
            x.gating.as_str()
        )?;
        if let Some(sh) = x.shared {
            let gated = if sh.gated { ", gated" } else { "" };
            write!(out, "; a shared expert {} wide{gated}", sh.n_ff)?;
        }
        writeln!(out)?;
    }
    if let Some(scale) = s.embedding_scale {
        writeln!(out, "  embedding scale {scale}")?;
    }
    if m.tensors.tied_embeddings {
        writeln!(
            out,
            "  embeddings      tied (output reuses {})",
            m.tensors.token_embd
        )?;
    } else {
        writeln!(
            out,
            "  embeddings      separate output ({})",
            m.tensors.output
        )?;
    }
    if !m.unused_tensors.is_empty() {
        writeln!(out, "  unused tensors  {}", m.unused_tensors.join(", "))?;
    }
    Ok(())
}

fn write_tokenizer(out: &mut String, t: &Tokenizer) -> std::fmt::Result {
    let kind = match t.kind() {
        TokenizerKind::ByteLevelBpe => "byte-level BPE (gpt2)",
        TokenizerKind::SentencePieceBpe => "SentencePiece BPE (llama)",
    };
    let pre = t
        .pre_tokenizer()
        .map(|p| format!(", pre-tokenizer `{p}`"))
        .unwrap_or_default();
    writeln!(out, "  model           {kind}{pre}")?;
    let n_special = (0..t.vocab_size() as u32)
        .filter(|&id| t.token_type(id).is_some_and(|ty| ty.is_special()))
        .count();
    writeln!(
        out,
        "  vocab           {} tokens ({n_special} special)",
        t.vocab_size()
    )?;
    let show = |id: Option<u32>| match id {
        Some(id) => format!("{id} {:?}", t.piece(id).unwrap_or("")),
        None => "-".to_string(),
    };
    let s = t.special();
    writeln!(
        out,
        "  special ids     bos {}, eos {}, unk {}, pad {}",
        show(s.bos),
        show(s.eos),
        show(s.unk),
        show(s.pad)
    )?;
    writeln!(
        out,
        "  flags           add_bos {}, add_eos {}, add_space_prefix {}",
        s.add_bos, s.add_eos, s.add_space_prefix
    )?;
    let eog: Vec<String> = t
        .end_of_generation()
        .iter()
        .map(|&id| show(Some(id)))
        .collect();
    writeln!(out, "  end of turn     {}", eog.join(", "))
}

fn model_json(m: &ResolvedModel) -> Value {
    let hp = &m.hparams;
    let s = &m.spec;
    json!({
        "architecture": m.architecture,
        "spec": s.name,
        "network": s.network.as_str(),
        "n_layer": hp.n_layer,
        "n_embd": hp.n_embd,
        "n_head": hp.n_head,
        "n_head_kv": hp.n_head_kv,
        "head_dim": hp.head_dim,
        "n_ff": hp.n_ff,
        "n_vocab": hp.n_vocab,
        "n_ctx_train": hp.n_ctx_train,
        "norm": s.norm.kind.as_str(),
        "norm_eps": hp.norm_eps,
        "activation": s.activation.as_str(),
        "position": s.position.kind_str(),
        "rope": hp.rope.map(|r| json!({
            "base": r.base,
            "dims": r.dims,
            "layout": r.layout.as_str(),
            "freq_factors": m.tensors.rope_freqs,
            "scaling": match r.scaling {
                RopeScaling::None => json!("none"),
                RopeScaling::Linear { factor } => json!({ "type": "linear", "factor": factor }),
                RopeScaling::Yarn(y) => json!({
                    "type": "yarn",
                    "factor": y.factor,
                    "original_context": y.original_context,
                    "beta_fast": y.beta_fast,
                    "beta_slow": y.beta_slow,
                    "attn_factor": y.attn_factor,
                }),
                RopeScaling::LongRope => json!("longrope"),
            },
            "longrope_factors": m.tensors.rope_factors,
            "original_context": r.original_context,
            "attn_factor": r.attn_factor,
            "local_base": r.local_base,
        })),
        "qkv": s.attention.qkv.as_str(),
        "qk_norm": s.attention.qk_norm.map(|k| k.as_str()),
        "qk_norm_over": s.attention.qk_norm_over.as_str(),
        "sliding_window": hp.sliding_window.as_ref().map(|w| json!({
            "size": w.size,
            "layers": w.layers,
        })),
        "attn_scale": hp.attn_scale,
        "attn_softcap": hp.attn_softcap,
        "final_softcap": hp.final_softcap,
        "norm_placement": s.norm.placement.as_str(),
        "embedding_scale": s.embedding_scale.map(|e| e.as_str()),
        "mlp": s.mlp.kind.as_str(),
        "experts": hp.experts.map(|x| json!({
            "count": x.count,
            "used": x.used,
            "n_ff": x.n_ff,
            "gating": x.gating.as_str(),
            "normalize": x.normalize,
            "shared": x.shared.map(|sh| json!({"n_ff": sh.n_ff, "gated": sh.gated})),
        })),
        "gate_up": s.mlp.gate_up.as_str(),
        "tied_embeddings": m.tensors.tied_embeddings,
        "unused_tensors": m.unused_tensors,
    })
}

fn tokenizer_json(t: &Tokenizer) -> Value {
    let s = t.special();
    json!({
        "kind": match t.kind() {
            TokenizerKind::ByteLevelBpe => "gpt2",
            TokenizerKind::SentencePieceBpe => "llama",
        },
        "pre": t.pre_tokenizer(),
        "vocab_size": t.vocab_size(),
        "bos": s.bos,
        "eos": s.eos,
        "unk": s.unk,
        "pad": s.pad,
        "add_bos": s.add_bos,
        "add_eos": s.add_eos,
        "add_space_prefix": s.add_space_prefix,
        "end_of_generation": t.end_of_generation(),
    })
}

/// Metadata as JSON; arrays longer than a screenful are summarised by type and length.
fn meta_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Array(a) if a.len() > 16 => {
            json!({ "array": a.elem_type().name(), "len": a.len() })
        }
        MetaValue::Array(a) => (0..a.len())
            .filter_map(|i| a.get(i))
            .map(|v| meta_json(&v))
            .collect(),
        MetaValue::String(s) => json!(s),
        MetaValue::Bool(b) => json!(b),
        MetaValue::F32(f) => json!(f),
        MetaValue::F64(f) => json!(f),
        other => match (other.as_u64(), other.as_i64()) {
            (Some(u), _) => json!(u),
            (None, Some(i)) => json!(i),
            _ => Value::Null,
        },
    }
}

/// A Hugging Face style model directory: config.json and the tokenizer.
fn inspect_directory(path: &Path, format: Format) -> Result<()> {
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
            "format": "safetensors-dir",
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
        "format        safetensors directory, {} tensors in {}",
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
