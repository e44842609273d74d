//! The atoms a spec combines: network type, activation, norm, position embedding, attention,
//! MLP, mixture of experts and tied embeddings, each named as spec files write it.

use serde::Deserialize;

/// How the blocks are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkType {
    /// Causal language model (Llama, GPT).
    DecoderOnly,
    /// Bidirectional encoder (BERT, MiniLM).
    EncoderOnly,
    /// Encoder plus cross-attending decoder (T5): `tensors.seq2seq` names the encoder's
    /// blocks and the decoder's cross-attention.
    EncoderDecoder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    Silu,
    /// The exact GELU, x * Phi(x).
    Gelu,
    /// GELU's tanh approximation (`gelu_pytorch_tanh`: Gemma).
    GeluTanh,
    Relu,
    /// GPT-OSS's clamped SwiGLU: the gate clamped above at 7 and the up projection to
    /// [-7, 7], then (up + 1) * gate * sigmoid(1.702 * gate). Gated MLPs (its experts) only.
    SwigluOai,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormKind {
    /// x / rms(x) * w
    Rms,
    /// (x - mean) / std * w + b
    Layer,
}

/// What a query/key norm normalizes at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QkNormOver {
    /// Each head of `head_dim` values.
    #[default]
    Head,
    /// The whole query projection (n_head x head_dim) and the whole key projection.
    Projection,
}

/// Where the norm sits relative to each residual branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormPlacement {
    /// x + f(norm(x)) (Llama, GPT-2)
    #[default]
    Pre,
    /// norm(x + f(x)) (BERT)
    Post,
    /// x + post_norm(f(norm(x))): a second norm on each branch's output before the residual
    /// add (Gemma 2/3), with gains `attn_post_norm` and `ffn_post_norm`.
    Sandwich,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NormSpec {
    pub kind: NormKind,
    #[serde(default)]
    pub placement: NormPlacement,
}

/// Which elements RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RopeLayout {
    /// Adjacent pairs (x[2i], x[2i+1]): GPT-J, and llama.cpp's LLAMA_ROPE_TYPE_NORM.
    Gptj,
    /// Halves (x[i], x[i + d/2]): GPT-NeoX and Hugging Face Llama checkpoints.
    Neox,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PositionSpec {
    /// Rotary embedding. Base and rotary dimensions come from `{arch}.rope.freq_base` and
    /// `{arch}.rope.dimension_count`, defaulting to `base_default` and the head dimension.
    Rope {
        layout: RopeLayout,
        #[serde(default = "default_rope_base")]
        base_default: f32,
        /// Local (windowed) layers rotate with a base of their own and no scaling (Gemma 3:
        /// 10000 against the global layers' 1000000), `{arch}.rope.freq_base_swa` where the
        /// file gives it. Without either, local layers rotate as global ones do.
        #[serde(default)]
        local_base_default: Option<f32>,
        /// Of each run of this many layers, the last has no rotary embedding at all (SmolLM3:
        /// 4, as llama.cpp fixes it; its files carry nothing).
        #[serde(default)]
        nope_period: Option<u32>,
        /// Whether YaRN rounds its correction range outward to whole pairs (llama.cpp and
        /// transformers' default: true). GPT-OSS's does not (`truncate: false`), and its
        /// files do not say so.
        #[serde(default)]
        yarn_truncate: Option<bool>,
    },
    /// A learned table added to the token embeddings (`tensors.position_embd`).
    Learned,
    /// Fixed sine/cosine table (the original Transformer).
    Sinusoidal,
    /// A learned bias per head on each query-key score, looked up by the distance between
    /// the two positions in `{arch}.attention.relative_buckets_count` log-spaced buckets
    /// (T5): exact up to half the buckets, logarithmic up to `max_distance`, the last bucket
    /// beyond. Encoders count distances both ways (half the buckets each way), decoders only
    /// backwards.
    RelativeBuckets {
        #[serde(default = "default_max_distance")]
        max_distance: u32,
    },
    None,
}

fn default_max_distance() -> u32 {
    128
}

fn default_rope_base() -> f32 {
    10_000.0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QkvLayout {
    /// Three matrices `attn_q`, `attn_k`, `attn_v`.
    Separate,
    /// One matrix `attn_qkv` whose output is [q | k | v].
    Fused,
    /// Multi-head latent attention (DeepSeek-V2/V3): queries from `attn_q`, or through a
    /// low rank (`attn_q_a`, its RMSNorm `attn_q_a_norm`, `attn_q_b`); keys and values from
    /// one latent per position (`attn_kv_a_mqa`: `{arch}.attention.kv_lora_rank` values,
    /// RMS-normed by `attn_kv_a_norm`, and `rope.dimension_count` more that RoPE rotates and
    /// every head shares), expanded per head by `attn_k_b` and `attn_v_b` (or the older
    /// `attn_kv_b` that holds both). The cache keeps the latent and the rotated part only;
    /// attention runs on them, the queries' unrotated part taken into the latent's space by
    /// `attn_k_b` and each head's output out of it by `attn_v_b`.
    Latent,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionSpec {
    pub qkv: QkvLayout,
    /// Biases on the q/k/v projections.
    #[serde(default)]
    pub bias: bool,
    /// Bias on the output projection.
    #[serde(default)]
    pub output_bias: bool,
    /// A norm over each query and key head before RoPE, with gains `attn_q_norm` and
    /// `attn_k_norm` of one head's width (Qwen3, Gemma 3).
    #[serde(default)]
    pub qk_norm: Option<NormKind>,
    /// What the query/key norm spans: each head (the default), or the whole query and key
    /// projections with gains of their widths (OLMoE).
    #[serde(default)]
    pub qk_norm_over: QkNormOver,
    /// With `qk_norm`: the norm applies where the file has its gains, and not where it has
    /// none (GLM-4.5 has them, GLM-4.5-Air not).
    #[serde(default)]
    pub qk_norm_optional: bool,
    /// Causal mask (decoders) or full attention (encoders).
    pub causal: bool,
    /// A fixed factor on query-key scores where the family's differs from 1 / sqrt(head_dim)
    /// and its files carry none (T5: 1, its initialization having folded the scale into the
    /// query weights).
    #[serde(default)]
    pub scale: Option<f32>,
    /// Where the file gives a window (`{arch}.attention.sliding_window`), which layers use it:
    /// of each run of `window_period` layers, all but the last attend only to the window's
    /// most recent positions (Gemma 2: 2, Gemma 3: 6; 1, the default, windows every layer, as
    /// Mistral does). A per-layer list in the file (`{arch}.attention.sliding_window_pattern`)
    /// takes precedence.
    #[serde(default = "default_window_period")]
    pub window_period: u32,
    /// The window where the file gives none (Gemma 2's early conversions lack the key).
    #[serde(default)]
    pub window_default: Option<u32>,
    /// Block counts of the sizes whose scores are scaled by 1 / sqrt(n_embd / n_head) rather
    /// than 1 / sqrt(head_dim) (Gemma 2 and 3 27B). Their GGUF files carry no scale, and
    /// llama.cpp tells those sizes by their block count too.
    #[serde(default)]
    pub width_scaled_block_counts: Vec<u32>,
    /// A learned logit per query head that joins each softmax's denominator and has no value
    /// (`tensors.layer.attn_sinks`, [n_head]: GPT-OSS's attention sinks).
    #[serde(default)]
    pub sinks: bool,
}

fn default_window_period() -> u32 {
    1
}

/// How a mixture-of-experts MLP routes each token, where the file has experts
/// (`{arch}.expert_count`): its router's logits pick `{arch}.expert_used_count` experts, whose
/// gated MLPs' outputs are summed with the router's weights.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// The weights from the router's logits (`{arch}.expert_gating_func` overrides).
    pub gating: Gating,
    /// The chosen experts' weights divided by their sum (Mixtral, Qwen3-MoE;
    /// `{arch}.expert_weights_norm` overrides).
    pub normalize: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gating {
    /// Softmax over every expert's logit.
    Softmax,
    /// Each logit's sigmoid.
    Sigmoid,
}

/// A factor on the token embeddings before the first block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EmbeddingScale {
    /// sqrt(n_embd) (Gemma).
    SqrtNEmbd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MlpKind {
    /// down(act(gate(x)) * up(x))
    Gated,
    /// down(act(up(x)))
    Plain,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpSpec {
    pub kind: MlpKind,
    #[serde(default)]
    pub bias: bool,
    /// A gated MLP's gate and up projections as one matrix `ffn_up` of 2 n_ff outputs, gate
    /// first (Phi-3), rather than `ffn_gate` and `ffn_up`.
    #[serde(default)]
    pub gate_up: GateUpLayout,
    /// A gated MLP whose file may lack `ffn_gate`: such a file's MLP is ungated, with this
    /// activation (T5 v1.0 is ReLU's plain MLP; v1.1 and Flan-T5 gate GELU).
    #[serde(default)]
    pub ungated_activation: Option<Activation>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateUpLayout {
    #[default]
    Separate,
    Fused,
}

/// Whether the output projection reuses the token embedding matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TiedEmbeddings {
    Always,
    Never,
    /// Tied exactly when the file has no output tensor.
    WhenOutputAbsent,
}

/// `as_str` and `Display` giving each atom the name its spec files use.
macro_rules! atom_names {
    ($($ty:ident { $($variant:ident => $name:literal),* $(,)? })*) => {$(
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),*
                }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

atom_names! {
    NetworkType {
        DecoderOnly => "decoder-only",
        EncoderOnly => "encoder-only",
        EncoderDecoder => "encoder-decoder",
    }
    Activation {
        Silu => "silu",
        Gelu => "gelu",
        GeluTanh => "gelu-tanh",
        Relu => "relu",
        SwigluOai => "swiglu-oai",
    }
    NormKind { Rms => "rms", Layer => "layer" }
    QkNormOver { Head => "head", Projection => "projection" }
    NormPlacement { Pre => "pre", Post => "post", Sandwich => "sandwich" }
    EmbeddingScale { SqrtNEmbd => "sqrt-n-embd" }
    Gating { Softmax => "softmax", Sigmoid => "sigmoid" }
    RopeLayout { Gptj => "gptj", Neox => "neox" }
    QkvLayout { Separate => "separate", Fused => "fused", Latent => "latent" }
    MlpKind { Gated => "gated", Plain => "plain" }
    GateUpLayout { Separate => "separate", Fused => "fused" }
    TiedEmbeddings {
        Always => "always",
        Never => "never",
        WhenOutputAbsent => "when-output-absent",
    }
}

impl PositionSpec {
    pub fn kind_str(&self) -> &'static str {
        match self {
            PositionSpec::Rope { .. } => "rope",
            PositionSpec::Learned => "learned",
            PositionSpec::Sinusoidal => "sinusoidal",
            PositionSpec::RelativeBuckets { .. } => "relative-buckets",
            PositionSpec::None => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atom_names_are_the_toml_names() {
        #[derive(Deserialize)]
        struct One {
            v: NetworkType,
        }
        for n in [
            NetworkType::DecoderOnly,
            NetworkType::EncoderOnly,
            NetworkType::EncoderDecoder,
        ] {
            let parsed: One = toml::from_str(&format!("v = \"{n}\"")).unwrap();
            assert_eq!(parsed.v, n);
        }
        assert_eq!(
            TiedEmbeddings::WhenOutputAbsent.to_string(),
            "when-output-absent"
        );
    }
}
