//! Multi-head latent attention's sizes as a file gives them (`attention.qkv = "latent"`,
//! DeepSeek-V2/V3): the ranks of the queries' and the keys' and values' low-rank
//! projections, each head's key and value widths, and YaRN's `mscale_all_dim`.

use super::hparams::positive_count;
use super::ModelSpec;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// Latent attention's sizes. The cache keeps, per position, the normed latent (`kv_lora`
/// values) and the rotated key part every head shares (`rope` values): one "key head" of
/// `kv_lora + rope` values whose first `kv_lora` are also the value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatentParams {
    /// The queries' rank (`{arch}.attention.q_lora_rank`), where they go through one; `None`:
    /// one projection (`attn_q`, DeepSeek-V2-Lite).
    pub q_lora: Option<usize>,
    /// The latent's width (`{arch}.attention.kv_lora_rank`).
    pub kv_lora: usize,
    /// Each query head's unrotated and rotated widths: `{arch}.attention.key_length_mla`
    /// less `rope.dimension_count`, and `rope.dimension_count`.
    pub nope: usize,
    pub rope: usize,
    /// Each head's value width (`{arch}.attention.value_length_mla`).
    pub v_dim: usize,
    /// YaRN's `mscale_all_dim`, where the file gives one: llama.cpp's converter writes a
    /// tenth of it as `{arch}.rope.scaling.yarn_log_multiplier` (every latent-attention
    /// family's converter does), and llama.cpp reads it back times 10.
    pub mscale_all_dim: Option<f32>,
}

impl LatentParams {
    /// A query head's width before absorption: its unrotated and rotated parts.
    pub fn qk_dim(&self) -> usize {
        self.nope + self.rope
    }

    /// The cache's width per position, and the width attention scores over: the latent and
    /// the rotated key.
    pub fn cache_dim(&self) -> usize {
        self.kv_lora + self.rope
    }
}

impl ModelSpec {
    /// Latent attention's sizes from `{arch}.attention.*`. Files from llama.cpp's converter
    /// give the cache's widths as `key_length` (kv_lora_rank + rope) and `value_length`
    /// (kv_lora_rank) and each head's as `key_length_mla` and `value_length_mla`; older files
    /// lack the `_mla` keys and give each head's widths as `key_length` and `value_length`.
    pub(super) fn latent_params(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        n_embd: usize,
        n_head: usize,
    ) -> Result<LatentParams> {
        let path = file.path();
        let required = |k: &str| -> Result<usize> {
            positive_count(file, k)?.ok_or_else(|| Error::metadata(path, k, "missing"))
        };
        let kv_lora = required(&key("attention.kv_lora_rank"))?;
        let rope_key = key("rope.dimension_count");
        let rope = required(&rope_key)?;
        let q_lora = positive_count(file, &key("attention.q_lora_rank"))?;
        let (k_key, v_key) = (key("attention.key_length"), key("attention.value_length"));
        let (k_mla_key, v_mla_key) = (
            key("attention.key_length_mla"),
            key("attention.value_length_mla"),
        );
        let (k_len, v_len) = (positive_count(file, &k_key)?, positive_count(file, &v_key)?);
        let (qk_dim, v_dim) = match (
            positive_count(file, &k_mla_key)?,
            positive_count(file, &v_mla_key)?,
        ) {
            (Some(k), Some(v)) => {
                // The cache's widths, where the file gives them, must be the latent's.
                for (name, got, want) in [(&k_key, k_len, kv_lora + rope), (&v_key, v_len, kv_lora)]
                {
                    if let Some(got) = got.filter(|&g| g != want) {
                        return Err(Error::metadata(
                            path,
                            name,
                            format!(
                                "{got}, but latent attention caches {want} values per position \
                                 (kv_lora_rank {kv_lora}, rope {rope})"
                            ),
                        ));
                    }
                }
                (k, v)
            }
            (None, None) => {
                let per_head = n_embd / n_head.max(1);
                (k_len.unwrap_or(per_head), v_len.unwrap_or(per_head))
            }
            (Some(_), None) => return Err(Error::metadata(path, &v_mla_key, "missing")),
            (None, Some(_)) => return Err(Error::metadata(path, &k_mla_key, "missing")),
        };
        if rope % 2 != 0 || rope >= qk_dim {
            return Err(Error::metadata(
                path,
                &rope_key,
                format!(
                    "{rope} is not an even number below each query head's {qk_dim} values \
                     (some must stay unrotated)"
                ),
            ));
        }
        let log_mul_key = key("rope.scaling.yarn_log_multiplier");
        let mscale_all_dim = match file.get::<f32>(&log_mul_key)? {
            Some(v) if !(v.is_finite() && v >= 0.0) => {
                return Err(Error::metadata(
                    path,
                    &log_mul_key,
                    format!("{v} is not a usable number"),
                ))
            }
            v => v.map(|v| v / 0.1),
        };
        Ok(LatentParams {
            q_lora,
            kv_lora,
            nope: qk_dim - rope,
            rope,
            v_dim,
            mscale_all_dim,
        })
    }
}
