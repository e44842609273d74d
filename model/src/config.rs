//! The shape and atoms of a model, checked once against what the executors support. Both the
//! CPU reference and the Vulkan executor are built from this, never from the model's name.

use hearth_models::gguf::GgufFile;
use hearth_models::spec::{
    Activation, EmbeddingScale, Experts, LatentParams, MlpKind, NetworkType, NormKind,
    NormPlacement, PositionSpec, QkNormOver, RopeLayout, RopeScaling, SlidingWindow, Yarn,
};
use hearth_models::{GgmlType, ResolvedModel};

use crate::error::{Error, Result};
use crate::ops;

/// Rotary embedding: base, rotated dimensions per head and pairing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub base: f32,
    pub dims: usize,
    pub layout: ops::RopeLayout,
    /// Positions are multiplied by this (1 / linear scaling's factor; 1 without scaling).
    pub position_scale: f32,
    /// Local layers' own base, unscaled and without frequency divisors (Gemma 3).
    pub local_base: Option<f32>,
    /// YaRN's blend of the frequencies and its factor on cos and sin.
    pub yarn: Option<Yarn>,
    /// A factor on cos and sin (LongRoPE's), besides YaRN's.
    pub attn_factor: Option<f32>,
    /// The context before any extension, where LongRoPE switches to its long factors.
    pub original_context: usize,
}

/// LongRoPE's divisors of RoPE's per-pair frequencies (Phi-3 128k): `long` where the context
/// exceeds the original one, else `short`.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    pub long: Vec<f32>,
    pub short: Vec<f32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub norm_eps: f32,
    /// `None` when the model has no position embedding.
    pub rope: Option<Rope>,
    /// Divisors of RoPE's per-pair frequencies (Llama 3's `rope_freqs`), one per rotated pair.
    pub rope_factors: Option<Vec<f32>>,
    /// LongRoPE's divisors, chosen by the context.
    pub long_rope: Option<LongRope>,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// An RMSNorm over each query and key head before RoPE (Qwen3).
    pub qk_norm: bool,
    /// With `qk_norm`: over all the queries and all the keys at once (OLMoE).
    pub qk_norm_whole: bool,
    /// Local attention on the layers it names (Mistral, Gemma 2).
    pub sliding_window: Option<SlidingWindow>,
    /// The factor on query-key scores: 1 / sqrt(head_dim) unless the file says otherwise.
    pub attn_scale: f32,
    /// Scores become cap * tanh(score / cap) before the softmax (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Logits likewise (Gemma 2).
    pub logit_softcap: Option<f32>,
    /// Of each run of this many layers, the last rotates nothing (SmolLM3: 4).
    pub nope_period: Option<usize>,
    /// A learned sink logit per query head in every softmax's denominator (GPT-OSS):
    /// `Layer::attn_sinks`.
    pub attn_sinks: bool,
    /// A bias on the attention's output projection (GPT-OSS): `Layer::wo_bias`.
    pub attn_out_bias: bool,
    /// A factor on the token embeddings (Gemma: sqrt(n_embd); Granite: its embedding
    /// multiplier over its residual multiplier, see `from_resolved`).
    pub embd_scale: Option<f32>,
    /// The logits' divisor (Granite's `logits_scaling`), folded into the final norm's gain.
    pub logit_scale: Option<f32>,
    /// RMSNorms of the attention and MLP outputs before their residual adds (Gemma 2).
    pub post_norms: bool,
    /// The gated MLP's activation.
    pub mlp_act: ops::GatedAct,
    /// Every block's MLP a mixture of experts (Mixtral, Qwen3-MoE).
    pub experts: Option<Experts>,
    /// Multi-head latent attention (DeepSeek-V2/V3). `n_head_kv` is then 1 and `head_dim`
    /// the cache's width per position (the latent, then the rotated key); RoPE rotates the
    /// rotated parts alone (`rope.dims` of them); `attn_scale` is 1 / sqrt of a query head's
    /// width before absorption, times YaRN's mscale squared; `attn_dim` is the heads'
    /// values' width, the output projection's input.
    pub latent: Option<LatentParams>,
}

impl ModelConfig {
    /// Rows of the fused q/k/v projection: query heads, key heads, value heads; with latent
    /// attention, of the projection of the block's input: the queries (or their low-rank
    /// part), the latent and the rotated key.
    pub fn qkv_dim(&self) -> usize {
        match &self.latent {
            Some(l) => self.latent_q_rows() + l.kv_lora + l.rope,
            None => (self.n_head + 2 * self.n_head_kv) * self.head_dim,
        }
    }

    /// Width of the attention output (the input of the output projection).
    pub fn attn_dim(&self) -> usize {
        match &self.latent {
            Some(l) => self.n_head * l.v_dim,
            None => self.n_head * self.head_dim,
        }
    }

    /// Latent attention's query rows of the input's projection: the low rank where the queries
    /// go through one, else every head's (unrotated and rotated parts).
    pub fn latent_q_rows(&self) -> usize {
        match &self.latent {
            Some(l) => l.q_lora.unwrap_or(self.n_head * l.qk_dim()),
            None => 0,
        }
    }

    /// Layer `l`'s attention window, `None` for a global layer.
    pub fn window(&self, l: usize) -> Option<usize> {
        self.sliding_window.as_ref()?.of_layer(l)
    }

    /// Each rotated pair's angle per position over the training context, `None` without
    /// RoPE.
    pub fn rope_freqs(&self) -> Option<Vec<f64>> {
        self.rope_freqs_at(self.n_ctx_train)
    }

    /// Each rotated pair's angle per position for a context of `n_ctx` (which picks LongRoPE's
    /// divisors). Linear scaling's position factor is folded in: pos * scale * f = pos *
    /// (scale * f).
    pub fn rope_freqs_at(&self, n_ctx: usize) -> Option<Vec<f64>> {
        let r = self.rope?;
        let divisors = match &self.long_rope {
            Some(l) if n_ctx > r.original_context => Some(&l.long[..]),
            Some(l) => Some(&l.short[..]),
            None => self.rope_factors.as_deref(),
        };
        let freqs = ops::rope_freqs(r.dims, r.base as f64, divisors);
        let freqs = match &r.yarn {
            Some(y) => ops::yarn_freqs(&freqs, r.base as f64, y),
            None => freqs,
        };
        let scale = r.position_scale as f64;
        Some(freqs.into_iter().map(|f| f * scale).collect())
    }

    /// RoPE's (cos, sin) table for positions below `n_ctx` (`ops::rope_table_of`), times
    /// YaRN's and LongRoPE's attention factors where they apply.
    pub fn rope_table(&self, n_ctx: usize) -> Option<Vec<[f32; 2]>> {
        let r = self.rope?;
        let mut table = ops::rope_table_of(n_ctx, &self.rope_freqs_at(n_ctx)?);
        let factor = r.yarn.map_or(1.0, |y| y.attn_factor) * r.attn_factor.unwrap_or(1.0);
        if factor != 1.0 {
            for cs in &mut table {
                *cs = cs.map(|v| v * factor);
            }
        }
        Some(table)
    }

    /// The table of local layers that rotate with a base of their own, `None` where they
    /// rotate as global layers do.
    pub fn local_rope_table(&self, n_ctx: usize) -> Option<Vec<[f32; 2]>> {
        let r = self.rope?;
        let base = r.local_base.filter(|_| self.sliding_window.is_some())?;
        Some(ops::rope_table(n_ctx, r.dims, base as f64))
    }

    /// Layer `l`'s rotary embedding: the model's, or none on its layers without one.
    pub fn rope_at(&self, l: usize) -> Option<Rope> {
        match self.nope_period {
            Some(n) if (l + 1) % n == 0 => None,
            _ => self.rope,
        }
    }

    /// Whether layer `l` rotates with the local table ([`local_rope_table`](Self::local_rope_table)).
    pub fn local_rope(&self, l: usize) -> bool {
        self.window(l).is_some() && self.rope.is_some_and(|r| r.local_base.is_some())
    }

    /// Weights in the network (embedding and output head counted once when tied).
    pub fn n_params(&self, tied: bool) -> u64 {
        let dense = 3 * self.n_ff * self.n_embd;
        // The mixture's blocks' MLPs, and the leading dense blocks' (GLM-4.5).
        let mlps = match self.experts {
            Some(x) => {
                let shared = x.shared.map_or(0, |sh| {
                    3 * sh.n_ff * self.n_embd + if sh.gated { self.n_embd } else { 0 }
                });
                let moe = x.count * (self.n_embd + 3 * x.n_ff * self.n_embd) + shared;
                let leading = x.leading_dense.min(self.n_layer);
                leading * dense + (self.n_layer - leading) * moe
            }
            None => self.n_layer * dense,
        };
        // Latent attention's matrices after the input's projection, and its norms.
        let latent = self.latent.map_or(0, |l| {
            let q = l.q_lora.map_or(0, |r| r + r * self.n_head * l.qk_dim());
            q + l.kv_lora + self.n_head * l.kv_lora * (l.nope + l.v_dim)
        });
        let layer = self.qkv_dim() * self.n_embd
            + latent
            + self.n_embd * self.attn_dim()
            + 2 * self.n_embd
            + if self.qkv_bias { self.qkv_dim() } else { 0 }
            + match (self.qk_norm, self.qk_norm_whole) {
                (false, _) => 0,
                (true, false) => 2 * self.head_dim,
                (true, true) => (self.n_head + self.n_head_kv) * self.head_dim,
            }
            + if self.post_norms { 2 * self.n_embd } else { 0 };
        let head = if tied { 0 } else { self.n_vocab * self.n_embd };
        (self.n_layer * layer + mlps + self.n_vocab * self.n_embd + head + self.n_embd) as u64
    }

    /// Checks the spec's atoms against what this runtime executes: a decoder with RMSNorm
    /// before each block (and after it, sandwich-style), RoPE or no position embedding,
    /// causal attention (q/k/v and output biases, a per-head query/key RMSNorm, local
    /// windows, soft-capping and sinks allowed) and a SiLU-, GELU- or clamped-SwiGLU-gated
    /// MLP (biases only on a mixture of experts). Anything else is a clear error naming the
    /// atom.
    pub fn from_resolved(file: &GgufFile, model: &ResolvedModel) -> Result<Self> {
        let path = file.path();
        let spec = &model.spec;
        let unsupported = |what: String| Error::Unsupported {
            path: path.to_path_buf(),
            what,
        };
        match spec.network {
            NetworkType::DecoderOnly => {}
            NetworkType::EncoderOnly => {
                return Err(unsupported(
                    "network `encoder-only` (text generation needs a decoder; `hearth embed`, \
                     `hearth rerank` and `hearth serve` run encoders)"
                        .into(),
                ))
            }
            NetworkType::EncoderDecoder => {
                return Err(unsupported(
                    "network `encoder-decoder` here (`hearth generate` runs encoder-decoders; \
                     chat and the server do not yet)"
                        .into(),
                ))
            }
        }
        if spec.norm.kind != NormKind::Rms || spec.norm.placement == NormPlacement::Post {
            return Err(unsupported(format!(
                "norm `{}` with placement `{}` (RMSNorm before each block, or before and \
                 after it, is)",
                spec.norm.kind, spec.norm.placement
            )));
        }
        // Biases on a mixture of experts are its router's and its experts' (GPT-OSS).
        let dense_bias = spec.mlp.bias && model.hparams.experts.is_none();
        let mlp_act = match (spec.mlp.kind, spec.activation, dense_bias) {
            (MlpKind::Gated, Activation::Silu, false) => ops::GatedAct::Silu,
            (MlpKind::Gated, Activation::GeluTanh, false) => ops::GatedAct::GeluTanh,
            (MlpKind::Gated, Activation::SwigluOai, false) => ops::GatedAct::SwigluOai,
            _ => {
                return Err(unsupported(format!(
                    "MLP `{}` with activation `{}`{} (SiLU-, GELU-tanh- or clamped-SwiGLU-gated \
                     MLPs without bias are, and mixtures of experts with biases)",
                    spec.mlp.kind,
                    spec.activation,
                    if spec.mlp.bias { " and bias" } else { "" }
                )))
            }
        };
        let a = &spec.attention;
        if !a.causal {
            return Err(unsupported("attention without a causal mask".to_string()));
        }
        if a.qk_norm.is_some_and(|k| k != NormKind::Rms) {
            return Err(unsupported(
                "a query/key norm other than RMSNorm".to_string(),
            ));
        }
        // Tensors that would change how positions rotate, which the spec does not run.
        if let Some(t) = model.unused_tensors.iter().find(|t| t.starts_with("rope_")) {
            return Err(unsupported(format!(
                "RoPE factors in `{t}` (LongRoPE), which the `{}` spec does not run",
                spec.name
            )));
        }
        let h = &model.hparams;
        let rope = match (&spec.position, h.rope) {
            (PositionSpec::Rope { .. }, Some(r)) => Some(Rope {
                base: r.base,
                dims: r.dims,
                layout: match r.layout {
                    RopeLayout::Neox => ops::RopeLayout::Neox,
                    RopeLayout::Gptj => ops::RopeLayout::Gptj,
                },
                position_scale: match r.scaling {
                    RopeScaling::None | RopeScaling::Yarn(_) => 1.0,
                    RopeScaling::Linear { factor } => 1.0 / factor,
                    other => return Err(unsupported(format!("RoPE scaling {other:?}"))),
                },
                local_base: r.local_base,
                yarn: match r.scaling {
                    RopeScaling::Yarn(y) => Some(y),
                    _ => None,
                },
                attn_factor: r.attn_factor,
                original_context: r.original_context,
            }),
            (PositionSpec::None, _) => None,
            (other, _) => return Err(unsupported(format!("position embedding {other:?}"))),
        };
        // Latent attention's scores and cos and sin, as llama.cpp's deepseek2 graph scales
        // them: YaRN's factor on cos and sin is mscale / mscale_all_dim (1, as llama.cpp takes
        // mscale for mscale_all_dim) where the file gives mscale_all_dim, and the scores'
        // factor that times 1 + 0.1 mscale_all_dim ln(factor), squared, over sqrt of a query
        // head's width (transformers' `yarn_get_mscale(factor, mscale_all_dim)` squared).
        let mut rope = rope;
        let latent_scale = match (&h.latent, &mut rope) {
            (Some(l), r) => {
                let yarn = r.as_mut().and_then(|r| r.yarn.as_mut());
                let ln_factor = yarn.as_ref().map_or(0.0, |y| y.factor.max(1.0).ln());
                if let (Some(y), Some(_)) = (yarn, l.mscale_all_dim) {
                    y.attn_factor = 1.0;
                }
                let cos_sin = r.map_or(1.0, |r| {
                    r.yarn.map_or(1.0, |y| y.attn_factor) * r.attn_factor.unwrap_or(1.0)
                });
                let mscale = cos_sin * (1.0 + 0.1 * l.mscale_all_dim.unwrap_or(0.0) * ln_factor);
                Some(mscale * mscale / (l.qk_dim() as f32).sqrt())
            }
            (None, _) => None,
        };
        if let Some(r) = rope {
            if r.dims % 2 != 0 || r.dims > h.head_dim {
                return Err(unsupported(format!(
                    "RoPE over {} of {} head dimensions",
                    r.dims, h.head_dim
                )));
            }
        }
        if h.head_dim % 2 != 0 {
            return Err(unsupported(format!("odd head dimension {}", h.head_dim)));
        }
        let rope_factors = match &model.tensors.rope_freqs {
            Some(name) => Some(read_factors(file, name)?),
            None => None,
        };
        let long_rope = match &model.tensors.rope_factors {
            Some((long, short)) => Some(LongRope {
                long: read_factors(file, long)?,
                short: read_factors(file, short)?,
            }),
            None => None,
        };
        // Granite adds each branch's output times r to the residual stream. Every block and
        // the output read the stream through an RMSNorm, which ignores its scale but for the
        // epsilon: so the stream is run divided by r, unscaled adds, with the embeddings
        // divided by r and every norm's epsilon by r squared. Exact, and no executor needs a
        // step of its own.
        let spec_scale = spec.embedding_scale.map(|s| match s {
            EmbeddingScale::SqrtNEmbd => (h.n_embd as f32).sqrt(),
        });
        let embd = match (spec_scale, h.embedding_multiplier) {
            (Some(a), Some(b)) => Some(a * b),
            (a, b) => a.or(b),
        };
        let (embd_scale, norm_eps) = match h.residual_scale {
            None => (embd, h.norm_eps),
            Some(r) => {
                if a.qk_norm.is_some() || spec.norm.placement == NormPlacement::Sandwich {
                    return Err(unsupported(
                        "a residual multiplier with query/key norms or norms after each block \
                         (the stream's scale would reach them)"
                            .into(),
                    ));
                }
                (Some(embd.unwrap_or(1.0) / r), h.norm_eps / (r * r))
            }
        };
        Ok(Self {
            n_layer: h.n_layer,
            n_embd: h.n_embd,
            n_ff: h.n_ff,
            n_head: h.n_head,
            n_head_kv: h.n_head_kv,
            head_dim: h.head_dim,
            n_vocab: h.n_vocab,
            n_ctx_train: h.n_ctx_train,
            norm_eps,
            rope,
            rope_factors,
            long_rope,
            qkv_bias: a.bias,
            qk_norm: a.qk_norm.is_some(),
            qk_norm_whole: a.qk_norm_over == QkNormOver::Projection,
            sliding_window: h.sliding_window.clone(),
            attn_scale: latent_scale
                .or(h.attn_scale)
                .unwrap_or(1.0 / (h.head_dim as f32).sqrt()),
            attn_softcap: h.attn_softcap,
            logit_softcap: h.final_softcap,
            nope_period: match spec.position {
                PositionSpec::Rope { nope_period, .. } => nope_period.map(|n| n.max(1) as usize),
                _ => None,
            },
            attn_sinks: a.sinks,
            attn_out_bias: a.output_bias,
            embd_scale,
            logit_scale: h.logit_scale,
            post_norms: spec.norm.placement == NormPlacement::Sandwich,
            mlp_act,
            experts: h.experts,
            latent: h.latent,
        })
    }
}

#[cfg(test)]
impl ModelConfig {
    /// A Llama block of this shape without RoPE and without any other atom, for tests that
    /// set the fields they need.
    pub(crate) fn plain_for_tests(
        n_layer: usize,
        n_embd: usize,
        n_head: (usize, usize),
        head_dim: usize,
        n_vocab: usize,
    ) -> Self {
        Self {
            n_layer,
            n_embd,
            n_ff: 2 * n_embd,
            n_head: n_head.0,
            n_head_kv: n_head.1,
            head_dim,
            n_vocab,
            n_ctx_train: 64,
            norm_eps: 1e-5,
            rope: None,
            rope_factors: None,
            long_rope: None,
            qkv_bias: false,
            qk_norm: false,
            qk_norm_whole: false,
            sliding_window: None,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            attn_softcap: None,
            logit_softcap: None,
            nope_period: None,
            attn_sinks: false,
            attn_out_bias: false,
            embd_scale: None,
            logit_scale: None,
            post_norms: false,
            mlp_act: ops::GatedAct::Silu,
            experts: None,
            latent: None,
        }
    }
}

/// The f32 frequency divisors in tensor `name` (its length was checked on resolving).
fn read_factors(file: &GgufFile, name: &str) -> Result<Vec<f32>> {
    let view = file.tensor_view(name)?;
    let bad = |reason: &str| Error::Tensor {
        path: file.path().to_path_buf(),
        tensor: name.to_string(),
        reason: reason.to_string(),
    };
    if view.info.ggml_type != GgmlType::F32 {
        return Err(bad("RoPE frequency factors must be F32"));
    }
    let factors: Vec<f32> = view
        .data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
        return Err(bad("RoPE frequency factors must be finite and positive"));
    }
    Ok(factors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linear scaling by 4 turns position p as position p / 4; the frequency divisors apply
    /// on top.
    #[test]
    fn linear_scaling_and_factors_shape_the_rope_table() {
        let mut c = ModelConfig {
            n_ctx_train: 16,
            rope: Some(Rope {
                base: 10_000.0,
                dims: 8,
                layout: ops::RopeLayout::Neox,
                position_scale: 0.25,
                local_base: None,
                yarn: None,
                attn_factor: None,
                original_context: 16,
            }),
            rope_factors: Some(vec![1.0, 2.0, 4.0, 8.0]),
            ..ModelConfig::plain_for_tests(1, 8, (1, 1), 8, 4)
        };
        let table = c.rope_table(64).unwrap();
        let plain = ops::rope_table(64, 8, 10_000.0);
        for i in 0..4 {
            // Position 32 of the scaled table is position 8 of the plain one, with pair i's
            // angle divided by 2^i.
            let angle = 8.0 * 10_000f64.powf(-2.0 * i as f64 / 8.0) / (1 << i) as f64;
            let [cos, sin] = table[32 * 4 + i];
            assert!((cos as f64 - angle.cos()).abs() < 1e-6, "pair {i}");
            assert!((sin as f64 - angle.sin()).abs() < 1e-6, "pair {i}");
        }
        c.rope_factors = None;
        assert_eq!(
            c.rope_table(64).unwrap()[32 * 4..33 * 4],
            plain[8 * 4..9 * 4]
        );
    }
}
