//! The shape and atoms of a model, checked once against what the executors support. Both the
//! CPU reference and the Vulkan executor are built from this, never from the model's name.

use hearth_models::gguf::GgufFile;
use hearth_models::spec::{
    Activation, MlpKind, NetworkType, NormKind, NormPlacement, PositionSpec, RopeLayout,
};
use hearth_models::{GgmlType, ResolvedModel};

use crate::cpu::ops;
use crate::error::{Error, Result};

/// Rotary embedding: base, rotated dimensions per head and pairing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub base: f32,
    pub dims: usize,
    pub layout: ops::RopeLayout,
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
}

impl ModelConfig {
    /// Rows of the fused q/k/v projection: query heads, key heads, value heads.
    pub fn qkv_dim(&self) -> usize {
        (self.n_head + 2 * self.n_head_kv) * self.head_dim
    }

    /// Width of the attention output (the input of the output projection).
    pub fn attn_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Each rotated pair's angle per position, `None` without RoPE.
    pub fn rope_freqs(&self) -> Option<Vec<f64>> {
        let r = self.rope?;
        Some(ops::rope_freqs(
            r.dims,
            r.base as f64,
            self.rope_factors.as_deref(),
        ))
    }

    /// RoPE's (cos, sin) table for positions below `n_ctx` (`cpu::ops::rope_table_of`).
    pub fn rope_table(&self, n_ctx: usize) -> Option<Vec<[f32; 2]>> {
        Some(ops::rope_table_of(n_ctx, &self.rope_freqs()?))
    }

    /// Weights in the network (embedding and output head counted once when tied).
    pub fn n_params(&self, tied: bool) -> u64 {
        let layer = self.qkv_dim() * self.n_embd
            + self.n_embd * self.attn_dim()
            + 3 * self.n_ff * self.n_embd
            + 2 * self.n_embd;
        let head = if tied { 0 } else { self.n_vocab * self.n_embd };
        (self.n_layer * layer + self.n_vocab * self.n_embd + head + self.n_embd) as u64
    }

    /// Checks the spec's atoms against what this runtime executes: a pre-norm decoder with
    /// RMSNorm, RoPE or no position embedding, causal attention without biases and a SiLU-gated
    /// MLP. Anything else is a clear error naming the atom.
    pub fn from_resolved(file: &GgufFile, model: &ResolvedModel) -> Result<Self> {
        let path = file.path();
        let spec = &model.spec;
        let unsupported = |what: String| Error::Unsupported {
            path: path.to_path_buf(),
            what,
        };
        if spec.network != NetworkType::DecoderOnly {
            return Err(unsupported(format!(
                "network `{:?}` (text generation needs a decoder-only model)",
                spec.network
            )));
        }
        if spec.norm.kind != NormKind::Rms || spec.norm.placement != NormPlacement::Pre {
            return Err(unsupported(format!(
                "norm {:?} with placement {:?} (RMSNorm before each block is)",
                spec.norm.kind, spec.norm.placement
            )));
        }
        if spec.mlp.kind != MlpKind::Gated || spec.activation != Activation::Silu || spec.mlp.bias {
            return Err(unsupported(format!(
                "MLP {:?} with activation {:?}{} (SiLU-gated MLPs without bias are)",
                spec.mlp.kind,
                spec.activation,
                if spec.mlp.bias { " and bias" } else { "" }
            )));
        }
        if spec.attention.bias || spec.attention.output_bias || !spec.attention.causal {
            return Err(unsupported(
                "attention with biases or without a causal mask".to_string(),
            ));
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
            }),
            (PositionSpec::None, _) => None,
            (other, _) => return Err(unsupported(format!("position embedding {other:?}"))),
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
            Some(name) => Some(rope_factors(file, name)?),
            None => None,
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
            norm_eps: h.norm_eps,
            rope,
            rope_factors,
        })
    }
}

/// The f32 frequency divisors in tensor `name` (its length was checked on resolving).
fn rope_factors(file: &GgufFile, name: &str) -> Result<Vec<f32>> {
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
