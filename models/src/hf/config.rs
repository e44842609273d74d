//! `config.json`: which family a Hugging Face folder holds and the hyperparameters its GGUF
//! metadata carries, under the keys and with the values llama.cpp's converter writes.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::rope::Llama3Rope;
use crate::error::{Error, Result};
use crate::gguf::MetaValue;

/// A family as `config.json` names it (`architectures`) and as GGUF files know it.
pub(crate) struct Family {
    /// The classes transformers saves it as.
    pub hf: &'static [&'static str],
    /// `general.architecture`, which picks the spec.
    pub arch: &'static str,
    /// llama.cpp's "llama" files rotate adjacent pairs, Hugging Face's halves: Q and K rows
    /// are reordered so each head's halves interleave.
    pub permute_qk: bool,
    /// Gemma stores its norm gains as offsets from 1 (`weight + 1` multiplies).
    pub norm_plus_one: bool,
    /// Phi-3's converter takes tokenizer.json's added tokens into the SentencePiece vocabulary.
    pub added_tokens_from_tokenizer_json: bool,
    /// Metadata beyond the common keys.
    pub extra: fn(&Config, &mut Meta) -> Result<()>,
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        hf: &[
            "LlamaForCausalLM",
            "MistralForCausalLM",
            "MixtralForCausalLM",
        ],
        arch: "llama",
        permute_qk: true,
        norm_plus_one: false,
        added_tokens_from_tokenizer_json: false,
        extra: llama,
    },
    family(&["Qwen2ForCausalLM"], "qwen2", none),
    family(&["Qwen2MoeForCausalLM"], "qwen2moe", qwen2moe),
    family(&["Qwen3ForCausalLM"], "qwen3", none),
    family(&["Qwen3MoeForCausalLM"], "qwen3moe", qwen3moe),
    family(&["OlmoeForCausalLM"], "olmoe", none),
    Family {
        hf: &["Gemma2ForCausalLM"],
        arch: "gemma2",
        permute_qk: false,
        norm_plus_one: true,
        added_tokens_from_tokenizer_json: false,
        extra: gemma2,
    },
    Family {
        hf: &["Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"],
        arch: "gemma3",
        permute_qk: false,
        norm_plus_one: true,
        added_tokens_from_tokenizer_json: false,
        extra: gemma3,
    },
    Family {
        hf: &["Phi3ForCausalLM"],
        arch: "phi3",
        permute_qk: false,
        norm_plus_one: false,
        added_tokens_from_tokenizer_json: true,
        extra: phi3,
    },
];

const fn family(
    hf: &'static [&'static str],
    arch: &'static str,
    extra: fn(&Config, &mut Meta) -> Result<()>,
) -> Family {
    Family {
        hf,
        arch,
        permute_qk: false,
        norm_plus_one: false,
        added_tokens_from_tokenizer_json: false,
        extra,
    }
}

/// A parsed `config.json`; for a multimodal checkpoint, its `text_config` over the top level.
pub(crate) struct Config {
    pub path: PathBuf,
    json: Map<String, Value>,
    pub family: &'static Family,
    /// RoPE's parameters for global layers and, where they differ, for local ones.
    rope: Map<String, Value>,
    rope_local: Option<Map<String, Value>>,
}

impl Config {
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let top: Map<String, Value> = serde_json::from_slice(&text)
            .map_err(|e| Error::metadata(&path, "(file)", format!("not a JSON object: {e}")))?;
        let classes: Vec<&str> = top
            .get("architectures")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let family = classes
            .iter()
            .find_map(|c| FAMILIES.iter().find(|f| f.hf.contains(c)))
            .ok_or_else(|| {
                let known: Vec<&str> = FAMILIES.iter().flat_map(|f| f.hf.iter().copied()).collect();
                Error::metadata(
                    &path,
                    "architectures",
                    format!(
                        "{classes:?} is no family Hearth converts (it converts {})",
                        known.join(", ")
                    ),
                )
            })?;
        let mut json = top.clone();
        if let Some(Value::Object(text)) = top.get("text_config") {
            json.extend(text.clone());
        }
        let (rope, rope_local) = rope_parameters(&json);
        Ok(Config {
            path,
            json,
            family,
            rope,
            rope_local,
        })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.bad(key, v, "a whole number")),
        }
    }

    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.u64(key)?
            .ok_or_else(|| Error::metadata(&self.path, key, "missing"))
    }

    /// The first of `keys` present.
    pub fn u64_any(&self, keys: &[&str]) -> Result<Option<u64>> {
        for key in keys {
            if let Some(v) = self.u64(key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        number(&self.path, &self.json, key)
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    fn bad(&self, key: &str, v: &Value, want: &str) -> Error {
        Error::metadata(&self.path, key, format!("{v} is not {want}"))
    }

    /// A key of the global layers' RoPE parameters (`rope_parameters`, or the older
    /// `rope_scaling` and `rope_theta`).
    pub fn rope_f64(&self, key: &str) -> Result<Option<f64>> {
        number(&self.path, &self.rope, key)
    }

    pub fn rope_type(&self) -> Option<&str> {
        self.rope.get("rope_type").and_then(Value::as_str)
    }

    pub fn rope_factors(&self, key: &str) -> Result<Option<Vec<f32>>> {
        match self.rope.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.bad(&format!("rope_parameters.{key}"), &a[0], "numbers")),
            Some(v) => Err(self.bad(&format!("rope_parameters.{key}"), v, "a list")),
        }
    }

    /// Query and key width per head: `head_dim`, else the width over the heads.
    pub fn head_dim(&self) -> Result<u64> {
        match self.u64("head_dim")? {
            Some(d) => Ok(d),
            None => Ok(self.require_u64("hidden_size")? / self.n_head()?.max(1)),
        }
    }

    pub fn n_head(&self) -> Result<u64> {
        self.require_u64("num_attention_heads")
    }

    pub fn n_head_kv(&self) -> Result<u64> {
        Ok(self.u64("num_key_value_heads")?.unwrap_or(self.n_head()?))
    }

    pub fn n_layer(&self) -> Result<u64> {
        self.require_u64("num_hidden_layers")
    }

    pub fn n_experts(&self) -> Result<Option<u64>> {
        self.u64_any(&["num_local_experts", "num_experts"])
    }

    pub fn tied_embeddings(&self) -> bool {
        self.bool("tie_word_embeddings").unwrap_or(false)
    }

    /// Llama 3.1's divisors, where `rope_type` is `llama3`.
    pub fn llama3_rope(&self) -> Result<Option<Llama3Rope>> {
        if !self
            .rope_type()
            .is_some_and(|t| t.eq_ignore_ascii_case("llama3"))
        {
            return Ok(None);
        }
        let get = |key, default: f64| Ok::<_, Error>(self.rope_f64(key)?.unwrap_or(default));
        Ok(Some(Llama3Rope {
            factor: get("factor", 8.0)? as f32,
            low_freq_factor: get("low_freq_factor", 1.0)? as f32,
            high_freq_factor: get("high_freq_factor", 4.0)? as f32,
            original_context: get("original_max_position_embeddings", 8192.0)? as usize,
        }))
    }

    pub fn rope_base(&self) -> Result<Option<f64>> {
        self.rope_f64("rope_theta")
    }

    pub fn rope_base_local(&self) -> Result<Option<f64>> {
        match &self.rope_local {
            Some(local) => number(&self.path, local, "rope_theta"),
            None => Ok(None),
        }
    }
}

fn number(path: &Path, map: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match map.get(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| Error::metadata(path, key, format!("{v} is not a number"))),
    }
}

/// transformers 5 keeps RoPE's settings in `rope_parameters` (per layer type where local and
/// global layers differ); earlier versions in `rope_scaling` (`type` for `rope_type`) beside a
/// top-level `rope_theta`.
fn rope_parameters(json: &Map<String, Value>) -> (Map<String, Value>, Option<Map<String, Value>>) {
    let object = |v: Option<&Value>| match v {
        Some(Value::Object(m)) => Some(m.clone()),
        _ => None,
    };
    let (mut global, local) = match object(json.get("rope_parameters")) {
        Some(p) if p.contains_key("full_attention") => (
            object(p.get("full_attention")).unwrap_or_default(),
            object(p.get("sliding_attention")),
        ),
        Some(p) => (p, None),
        None => (object(json.get("rope_scaling")).unwrap_or_default(), None),
    };
    if let Some(t) = global.remove("type") {
        global.entry("rope_type").or_insert(t);
    }
    for key in [
        "rope_theta",
        "partial_rotary_factor",
        "original_max_position_embeddings",
    ] {
        if let Some(v) = json.get(key).filter(|v| !v.is_null()) {
            global.entry(key).or_insert_with(|| v.clone());
        }
    }
    (global, local)
}

/// Metadata under `{arch}.` being written.
pub(crate) struct Meta {
    pub arch: &'static str,
    pub entries: Vec<(String, MetaValue)>,
}

impl Meta {
    pub fn set(&mut self, key: &str, value: MetaValue) {
        let key = format!("{}.{key}", self.arch);
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn u32(&mut self, key: &str, value: u64) -> Result<()> {
        let v = u32::try_from(value).map_err(|_| {
            Error::metadata(
                Path::new("config.json"),
                key,
                format!("{value} is too large"),
            )
        })?;
        self.set(key, MetaValue::U32(v));
        Ok(())
    }

    pub fn f32(&mut self, key: &str, value: f64) {
        self.set(key, MetaValue::F32(value as f32));
    }
}

/// The keys every family shares (llama.cpp's `TextModel.set_gguf_parameters`), then the
/// family's own.
pub(crate) fn metadata(config: &Config) -> Result<Meta> {
    let mut m = Meta {
        arch: config.family.arch,
        entries: Vec::new(),
    };
    m.u32("block_count", config.n_layer()?)?;
    if let Some(n) = config.u64("max_position_embeddings")? {
        m.u32("context_length", n)?;
    }
    m.u32("embedding_length", config.require_u64("hidden_size")?)?;
    if let Some(n) = config.u64("intermediate_size")? {
        m.u32("feed_forward_length", n)?;
    }
    m.u32("attention.head_count", config.n_head()?)?;
    m.u32("attention.head_count_kv", config.n_head_kv()?)?;
    let factor = config.rope_f64("factor")?;
    match (config.rope_type(), factor) {
        (Some("linear"), Some(f)) => {
            m.set("rope.scaling.type", MetaValue::String("linear".into()));
            m.f32("rope.scaling.factor", f);
        }
        (Some("yarn"), Some(f)) => {
            m.set("rope.scaling.type", MetaValue::String("yarn".into()));
            m.f32("rope.scaling.factor", f);
            let original = config
                .rope_f64("original_max_position_embeddings")?
                .ok_or_else(|| {
                    Error::metadata(
                        &config.path,
                        "rope_parameters.original_max_position_embeddings",
                        "YaRN needs the original context",
                    )
                })?;
            m.u32("rope.scaling.original_context_length", original as u64)?;
            for (hf, gguf) in [
                ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
            ] {
                if let Some(v) = config.rope_f64(hf)? {
                    m.f32(gguf, v);
                }
            }
        }
        _ => {}
    }
    if let Some(base) = config.rope_base()? {
        m.f32("rope.freq_base", base);
    }
    if let Some(base) = config.rope_base_local()? {
        m.f32("rope.freq_base_swa", base);
    }
    if let Some(eps) = config.f64("rms_norm_eps")? {
        m.f32("attention.layer_norm_rms_epsilon", eps);
    }
    if let Some(n) = config.n_experts()? {
        m.u32("expert_count", n)?;
    }
    if let Some(n) = config.u64("num_experts_per_tok")? {
        m.u32("expert_used_count", n)?;
    }
    if let Some(d) = config.u64("head_dim")? {
        m.u32("attention.key_length", d)?;
        m.u32("attention.value_length", d)?;
    }
    (config.family.extra)(config, &mut m)?;
    Ok(m)
}

fn none(_: &Config, _: &mut Meta) -> Result<()> {
    Ok(())
}

fn llama(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(n) = c.u64("vocab_size")? {
        m.u32("vocab_size", n)?;
    }
    m.u32("rope.dimension_count", c.head_dim()?)?;
    // Mistral 7B's window; llama.cpp's converter drops it, transformers honours it.
    if let Some(w) = c.u64("sliding_window")?.filter(|&w| w > 0) {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

fn qwen2moe(c: &Config, m: &mut Meta) -> Result<()> {
    qwen3moe(c, m)?;
    if let Some(n) = c.u64("shared_expert_intermediate_size")? {
        m.u32("expert_shared_feed_forward_length", n)?;
    }
    Ok(())
}

fn qwen3moe(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(n) = c.u64("moe_intermediate_size")? {
        m.u32("expert_feed_forward_length", n)?;
    }
    Ok(())
}

fn gemma2(c: &Config, m: &mut Meta) -> Result<()> {
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(v) = c.f64(key)? {
            m.f32(key, v);
        }
    }
    if let Some(w) = c.u64("sliding_window")? {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

fn gemma3(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(cap) = c.f64("final_logit_softcapping")? {
        m.f32("final_logit_softcapping", cap);
    }
    if let Some(w) = c.u64("sliding_window")? {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

fn phi3(c: &Config, m: &mut Meta) -> Result<()> {
    let n_ctx = c.require_u64("max_position_embeddings")?;
    let original = c
        .rope_f64("original_max_position_embeddings")?
        .map_or(n_ctx, |v| v as u64);
    m.u32("rope.scaling.original_context_length", original)?;
    let partial = c.rope_f64("partial_rotary_factor")?.unwrap_or(1.0);
    let n_embd = c.require_u64("hidden_size")?;
    m.u32(
        "rope.dimension_count",
        (partial * n_embd as f64) as u64 / c.n_head()?.max(1),
    )?;
    m.u32(
        "attention.sliding_window",
        c.u64("sliding_window")?.unwrap_or(0),
    )?;
    if c.rope_factors("long_factor")?.is_some() {
        // LongRoPE's scale of cos and sin for contexts past the original.
        let scale = n_ctx as f64 / original as f64;
        let attn = if scale > 1.0 {
            (1.0 + scale.ln() / (original as f64).ln()).sqrt()
        } else {
            1.0
        };
        m.f32("rope.scaling.attn_factor", attn);
    }
    Ok(())
}
