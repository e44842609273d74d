//! `config.json`: which family a Hugging Face folder holds and the hyperparameters its GGUF
//! metadata carries, read as llama.cpp's converter reads them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::family::Family;
use super::rope::Llama3Rope;
use crate::error::{Error, Result};

/// The names of the model's width, heads and blocks: transformers' standard ones, then T5's
/// (which its `attribute_map` maps to them).
pub const N_EMBD: &[&str] = &["hidden_size", "d_model"];
pub const N_HEAD: &[&str] = &["num_attention_heads", "num_heads"];
pub const N_LAYER: &[&str] = &["num_hidden_layers", "num_layers"];

/// A parsed `config.json`; for a multimodal checkpoint, its `text_config` over the top level.
pub(crate) struct Config {
    pub path: PathBuf,
    json: Map<String, Value>,
    pub family: &'static Family,
    /// The class of `architectures` that picked the family.
    pub class: String,
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
        let family = Family::serving(&path, &classes)?;
        let class = classes
            .iter()
            .find(|c| family.hf.classes.iter().any(|k| k == *c))
            .map_or(String::new(), |c| c.to_string());
        let mut json = top.clone();
        if let Some(Value::Object(text)) = top.get("text_config") {
            json.extend(text.clone());
        }
        let (rope, rope_local) = rope_parameters(&json);
        Ok(Config {
            path,
            json,
            family,
            class,
            rope,
            rope_local,
        })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    /// Rows of a RoBERTa's (or XLM-RoBERTa's) learned positions before its first position:
    /// positions count from `pad_token_id + 1`, and llama.cpp's converter drops the rows below.
    pub fn position_offset(&self) -> Result<Option<u64>> {
        if !["Roberta", "XLMRoberta"]
            .iter()
            .any(|p| self.class.starts_with(p))
        {
            return Ok(None);
        }
        Ok(self.u64("pad_token_id")?.map(|pad| pad + 1))
    }

    /// A key's JSON value as it is, where present.
    pub fn json(&self, key: &str) -> Option<&Value> {
        self.get(key)
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

    pub fn rope_bool(&self, key: &str) -> Option<bool> {
        self.rope.get(key).and_then(Value::as_bool)
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

    /// The first of `keys` present, else an error naming the first.
    pub fn require_any(&self, keys: &[&str]) -> Result<u64> {
        self.u64_any(keys)?
            .ok_or_else(|| Error::metadata(&self.path, keys[0], "missing"))
    }

    /// The first of `keys` that `config.json` has, else the first: the name a message about
    /// that value gives it.
    pub fn named<'k>(&self, keys: &[&'k str]) -> &'k str {
        keys.iter()
            .find(|k| self.get(k).is_some())
            .unwrap_or(&keys[0])
    }

    /// Query and key width per head: `head_dim` (T5's `d_kv`), else the width over the heads.
    pub fn head_dim(&self) -> Result<u64> {
        match self.u64_any(&["head_dim", "d_kv"])? {
            Some(d) => Ok(d),
            None => Ok(self.n_embd()? / self.n_head()?.max(1)),
        }
    }

    pub fn n_embd(&self) -> Result<u64> {
        self.require_any(N_EMBD)
    }

    pub fn n_head(&self) -> Result<u64> {
        self.require_any(N_HEAD)
    }

    pub fn n_head_kv(&self) -> Result<u64> {
        Ok(self.u64("num_key_value_heads")?.unwrap_or(self.n_head()?))
    }

    /// The blocks: a decoder's, an encoder's, or an encoder-decoder's encoder blocks.
    pub fn n_layer(&self) -> Result<u64> {
        self.require_any(N_LAYER)
    }

    /// An encoder-decoder's decoder blocks: `num_decoder_layers`, else as many as the
    /// encoder's (transformers' default).
    pub fn n_decoder_layer(&self) -> Result<u64> {
        match self.u64("num_decoder_layers")? {
            Some(n) => Ok(n),
            None => self.n_layer(),
        }
    }

    pub fn n_experts(&self) -> Result<Option<u64>> {
        self.u64_any(&["num_local_experts", "num_experts", "n_routed_experts"])
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
