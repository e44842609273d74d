//! The families a synthetic file can have, and what each adds to the Llama block. Every
//! difference between families that the writer knows of is answered here.

/// The architectures a synthetic file can have: each is the Llama block (pre-RMSNorm, RoPE,
/// grouped-query attention, SiLU-gated MLP) with its family's atoms, written with the
/// metadata keys and tensor names of llama.cpp's converter for that family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Llama,
    /// Biases on the q, k and v projections.
    Qwen2,
    /// An RMSNorm over each query and key head before RoPE.
    Qwen3,
    /// Gemma 2's block: norms after attention and MLP too, a GELU-gated MLP, scaled and tied
    /// embeddings, soft-capped scores (50) and logits (30), and every other layer local.
    Gemma2,
    /// Gemma 3's: Gemma 2's without the score soft-cap, with the query/key norm, five local
    /// layers to a global one, and local layers rotating with their own base (10000).
    Gemma3,
    /// Phi-3's: q/k/v in one matrix and gate/up in another.
    Phi3,
}

impl Family {
    /// `general.architecture`.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
            Family::Phi3 => "phi3",
        }
    }

    /// `general.architecture` of the family with a mixture of experts, where it has one
    /// here: Mixtral's files are `llama`, Qwen3-MoE's `qwen3moe`.
    pub(super) fn moe_architecture(self) -> Option<&'static str> {
        match self {
            Family::Llama => Some("llama"),
            Family::Qwen3 => Some("qwen3moe"),
            _ => None,
        }
    }

    /// The experts' width is a key of its own (`expert_feed_forward_length`); Mixtral's
    /// experts are `feed_forward_length` wide.
    pub(super) fn experts_have_own_width(self) -> bool {
        self != Family::Llama
    }

    /// Biases on the q, k and v projections.
    pub(super) fn qkv_bias(self) -> bool {
        self == Family::Qwen2
    }

    /// A norm over each query and key head.
    pub(super) fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Gemma3)
    }

    /// Norms after attention and after the MLP too.
    pub(super) fn sandwich(self) -> bool {
        matches!(self, Family::Gemma2 | Family::Gemma3)
    }

    /// q/k/v in one matrix (`attn_qkv`) and gate/up in another (`ffn_up`).
    pub(super) fn fused(self) -> bool {
        self == Family::Phi3
    }

    /// The soft-caps of attention scores and of logits.
    pub(super) fn softcaps(self) -> Option<(f32, f32)> {
        match self {
            Family::Gemma2 => Some((50.0, 30.0)),
            _ => None,
        }
    }
}
