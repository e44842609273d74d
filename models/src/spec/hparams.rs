//! The hyperparameters a spec reads from a file's `{arch}.*` metadata: the counts that size
//! every buffer, the vocabulary, the norm's epsilon, attention's scale and soft-caps.

use super::{
    Experts, LatentParams, ModelSpec, NetworkType, NormKind, PositionSpec, QkvLayout, RopeParams,
    SlidingWindow,
};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// The numbers that size every buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperParams {
    pub n_layer: usize,
    /// Model width (embedding length).
    pub n_embd: usize,
    /// Hidden width of the MLP.
    pub n_ff: usize,
    pub n_head: usize,
    /// Key/value heads; `n_head / n_head_kv` query heads share each (grouped-query attention).
    /// One for latent attention, whose cache holds one latent per position.
    pub n_head_kv: usize,
    /// Each query and key head's width; for latent attention, the cache's per position
    /// (kv_lora_rank + rope, the width attention scores over once the queries are absorbed).
    pub head_dim: usize,
    /// Latent attention's sizes (`attention.qkv = "latent"`).
    pub latent: Option<LatentParams>,
    pub n_vocab: usize,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    pub norm_eps: f32,
    /// Present when the position embedding is RoPE.
    pub rope: Option<RopeParams>,
    /// Local attention, where the file gives a window (`{arch}.attention.sliding_window`).
    pub sliding_window: Option<SlidingWindow>,
    /// The factor on query-key scores, where the file gives one (`{arch}.attention.scale`);
    /// 1 / sqrt(head_dim) otherwise.
    pub attn_scale: Option<f32>,
    /// Attention scores become cap * tanh(score / cap) (`{arch}.attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Output logits likewise (`{arch}.final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// A mixture of experts in every block's MLP, where the file has experts.
    pub experts: Option<Experts>,
    /// Granite's multipliers, where the file gives them: on the token embeddings
    /// (`{arch}.embedding_scale`), on each branch's output before its residual add
    /// (`{arch}.residual_scale`), and the divisor of the logits (`{arch}.logit_scale`).
    pub embedding_multiplier: Option<f32>,
    pub residual_scale: Option<f32>,
    pub logit_scale: Option<f32>,
    /// Relative position buckets, where the position embedding is relative (T5).
    pub relative: Option<RelativeBuckets>,
    /// An encoder-decoder network's encoder, where the network is one; `n_layer` then counts
    /// the decoder's blocks.
    pub seq2seq: Option<Seq2SeqParams>,
}

/// T5's relative positions: how many buckets, and the distance past which all share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelativeBuckets {
    pub buckets: usize,
    pub max_distance: usize,
}

/// What an encoder-decoder network adds to the hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seq2SeqParams {
    /// The encoder's blocks (`{arch}.block_count`; the decoder's are
    /// `{arch}.decoder_block_count`, as many where absent).
    pub n_encoder_layer: usize,
    /// The token the decoder starts from (`{arch}.decoder_start_token_id`; T5's pad, 0,
    /// where absent).
    pub decoder_start: u32,
}

impl ModelSpec {
    pub(super) fn gguf_hparams(&self, file: &GgufFile, arch: &str) -> Result<HyperParams> {
        let key = |k: &str| format!("{arch}.{k}");
        let path = file.path();
        let positive = |k: &str| positive_count(file, k);
        let required = |k: &str| -> Result<usize> {
            positive(k)?.ok_or_else(|| Error::metadata(path, k, "missing"))
        };

        let block_count = required(&key("block_count"))?;
        let encoder_decoder = self.network == NetworkType::EncoderDecoder;
        // llama.cpp counts NextN (multi-token prediction) layers among the blocks, after the
        // decoder's (GLM-4.5): decoding runs the blocks before them.
        let nextn_key = key("nextn_predict_layers");
        let nextn = file.get::<u32>(&nextn_key)?.unwrap_or(0) as usize;
        if nextn >= block_count {
            return Err(Error::metadata(
                path,
                &nextn_key,
                format!("{nextn} of the {block_count} blocks leaves none to decode"),
            ));
        }
        let n_layer = match encoder_decoder {
            true => positive(&key("decoder_block_count"))?.unwrap_or(block_count),
            false => block_count - nextn,
        };
        let seq2seq = match encoder_decoder {
            true => Some(Seq2SeqParams {
                n_encoder_layer: block_count,
                decoder_start: file
                    .get::<u32>(&key("decoder_start_token_id"))?
                    .unwrap_or(0),
            }),
            false => None,
        };
        let relative = match self.position {
            PositionSpec::RelativeBuckets { max_distance } => {
                let k = key("attention.relative_buckets_count");
                Some(RelativeBuckets {
                    buckets: positive(&k)?.ok_or_else(|| Error::metadata(path, &k, "missing"))?,
                    max_distance: max_distance as usize,
                })
            }
            _ => None,
        };
        let n_embd = required(&key("embedding_length"))?;
        let n_ff = required(&key("feed_forward_length"))?;
        let head_count = key("attention.head_count");
        let n_head = required(&head_count)?;
        let head_count_kv = key("attention.head_count_kv");
        let latent = match self.attention.qkv {
            QkvLayout::Latent => Some(self.latent_params(file, &key, n_embd, n_head)?),
            _ => None,
        };
        // Latent attention caches one latent per position: one key/value head for all.
        let n_head_kv = match latent {
            Some(_) => 1,
            None => positive(&head_count_kv)?.unwrap_or(n_head),
        };
        let n_ctx_train = required(&key("context_length"))?;

        let experts = self.experts(file, &key, n_ff)?;

        if n_head % n_head_kv != 0 {
            return Err(Error::metadata(
                path,
                &head_count_kv,
                format!("{n_head_kv} does not divide `{head_count}` = {n_head}"),
            ));
        }
        let head_dim = match (latent, positive(&key("attention.key_length"))?) {
            (Some(l), _) => l.cache_dim(),
            (None, Some(d)) => d,
            (None, None) if n_embd % n_head == 0 => n_embd / n_head,
            (None, None) => {
                return Err(Error::metadata(
                    path,
                    &head_count,
                    format!(
                        "{n_head} heads do not divide `{}` = {n_embd}",
                        key("embedding_length")
                    ),
                ))
            }
        };
        let value_length = key("attention.value_length");
        if let Some(v) = positive(&value_length)?.filter(|_| latent.is_none()) {
            if v != head_dim {
                return Err(Error::metadata(
                    path,
                    &value_length,
                    format!("{v} differs from the key head dimension {head_dim}"),
                ));
            }
        }

        let eps_key = match self.norm.kind {
            NormKind::Rms => key("attention.layer_norm_rms_epsilon"),
            NormKind::Layer => key("attention.layer_norm_epsilon"),
        };
        let norm_eps: f32 = file
            .get(&eps_key)?
            .ok_or_else(|| Error::metadata(path, &eps_key, "missing"))?;
        if !(norm_eps.is_finite() && norm_eps > 0.0) {
            return Err(Error::metadata(
                path,
                &eps_key,
                format!("{norm_eps} is not a positive number"),
            ));
        }

        let rope = self.rope_params(file, &key, head_dim, n_ctx_train)?;

        // The vocabulary is the tokenizer's; `{arch}.vocab_size`, when present, must agree.
        let vocab_key = key("vocab_size");
        let declared = positive(&vocab_key)?;
        let n_vocab = match file.get::<&[String]>("tokenizer.ggml.tokens")? {
            Some(tokens) => {
                if let Some(d) = declared.filter(|&d| d != tokens.len()) {
                    return Err(Error::metadata(
                        path,
                        &vocab_key,
                        format!(
                            "{d} disagrees with the {} tokens of the tokenizer",
                            tokens.len()
                        ),
                    ));
                }
                tokens.len()
            }
            None => declared.ok_or_else(|| {
                Error::metadata(path, "tokenizer.ggml.tokens", "missing (and no vocab_size)")
            })?,
        };

        let positive_f32 = |k: &str| -> Result<Option<f32>> {
            match file.get::<f32>(k)? {
                Some(v) if !(v.is_finite() && v > 0.0) => Err(Error::metadata(
                    path,
                    k,
                    format!("{v} is not a positive number"),
                )),
                v => Ok(v),
            }
        };
        let sliding_window = self.sliding_window(file, &key, n_layer, n_ctx_train)?;
        Ok(HyperParams {
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            latent,
            n_vocab,
            n_ctx_train,
            norm_eps,
            rope,
            sliding_window,
            attn_scale: positive_f32(&key("attention.scale"))?
                .or(self.attention.scale)
                .or_else(|| {
                    let widths = &self.attention.width_scaled_block_counts;
                    let by_width = widths.contains(&(n_layer as u32));
                    by_width.then(|| 1.0 / (n_embd as f32 / n_head as f32).sqrt())
                }),
            attn_softcap: positive_f32(&key("attn_logit_softcapping"))?,
            final_softcap: positive_f32(&key("final_logit_softcapping"))?,
            experts,
            embedding_multiplier: positive_f32(&key("embedding_scale"))?,
            residual_scale: positive_f32(&key("residual_scale"))?,
            logit_scale: positive_f32(&key("logit_scale"))?,
            relative,
            seq2seq,
        })
    }
}

/// The count under `k`, where the file has one; 0 is an error. Counts are read as u32 (which
/// every real model fits) so that products of two of them cannot overflow further down.
pub(super) fn positive_count(file: &GgufFile, k: &str) -> Result<Option<usize>> {
    match file.get::<u32>(k)? {
        Some(0) => Err(Error::metadata(file.path(), k, "must be positive, found 0")),
        v => Ok(v.map(|v| v as usize)),
    }
}
