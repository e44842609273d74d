//! The shape and atoms of a model, checked once against what the executors support. Both the
//! CPU reference and the Vulkan executor are built from this, never from the model's name.

use std::path::Path;

use hearth_models::spec::{
    Activation, MlpKind, NetworkType, NormKind, NormPlacement, PositionSpec, RopeLayout,
};
use hearth_models::ResolvedModel;

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
    pub fn from_resolved(path: &Path, model: &ResolvedModel) -> Result<Self> {
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
        })
    }
}
