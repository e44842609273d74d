//! The names of a spec's weight tensors, as a file of the family spells them.

use serde::Deserialize;

/// Placeholder for the layer index in per-layer tensor names.
pub const LAYER_PLACEHOLDER: &str = "{layer}";

/// Tensor names. Per-layer names contain `{layer}`; a bias, where the atoms call for one, is
/// the weight's name with `.weight` replaced by `.bias`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorNames {
    pub token_embd: String,
    pub position_embd: Option<String>,
    /// [n_embd, n_token_types]: segment embeddings added to the token embeddings (BERT's
    /// token types).
    pub token_types: Option<String>,
    /// The norm of the summed embeddings before the first block (BERT).
    pub embd_norm: Option<String>,
    /// The norm after the last block; decoders have one, post-norm encoders none.
    pub output_norm: Option<String>,
    /// A classifier head over the first token's state (cross-encoders), where the file has
    /// one: `cls` ([n_embd, n_embd], then tanh: BERT's pooler) and `cls_output`
    /// ([n_embd, n_labels]).
    pub cls: Option<String>,
    pub cls_output: Option<String>,
    pub output: Option<String>,
    /// RoPE frequency divisors, one per rotated pair, where the file has them (Llama 3.1's
    /// `rope_freqs.weight`).
    pub rope_freqs: Option<String>,
    /// LongRoPE's divisors (Phi-3 128k): the long set when the context exceeds the original
    /// one (`{arch}.rope.scaling.original_context_length`), the short set otherwise.
    pub rope_factors_long: Option<String>,
    pub rope_factors_short: Option<String>,
    /// The decoder's blocks (an encoder's, for an encoder-only network).
    pub layer: LayerTensorNames,
    /// An encoder-decoder network's encoder and cross-attention.
    pub seq2seq: Option<Seq2SeqTensorNames>,
}

/// What an encoder-decoder network (T5) has beyond a decoder's tensors.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seq2SeqTensorNames {
    /// The encoder's blocks (`ffn_gate` where the decoder's has one).
    pub encoder_layer: LayerTensorNames,
    /// The norm after the encoder's last block.
    pub encoder_norm: String,
    /// Relative position biases ([n_head, buckets], `{layer}` in the name): layer 0 has one
    /// and later layers reuse it unless the file gives them their own (UMT5 does).
    pub encoder_relative_bias: Option<String>,
    pub decoder_relative_bias: Option<String>,
    /// Each decoder block's attention over the encoder's output: its pre-norm, then q from
    /// the decoder's state, k and v from the encoder's, and the output projection.
    pub cross_norm: String,
    pub cross_q: String,
    pub cross_k: String,
    pub cross_v: String,
    pub cross_output: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerTensorNames {
    pub attn_norm: String,
    pub attn_q: Option<String>,
    pub attn_k: Option<String>,
    pub attn_v: Option<String>,
    pub attn_qkv: Option<String>,
    /// Latent attention's tensors (`attention.qkv = "latent"`): the queries' low-rank pair
    /// ([n_embd, q_lora_rank] and [q_lora_rank, n_head * (nope + rope)]) with the norm
    /// between ([q_lora_rank]), used where the file gives `{arch}.attention.q_lora_rank`
    /// (else `attn_q`, [n_embd, n_head * (nope + rope)]); the latent and shared rotated key
    /// ([n_embd, kv_lora_rank + rope]) and the latent's norm ([kv_lora_rank]); each head's
    /// key expansion ([nope, kv_lora_rank, n_head], rows of the latent's width per head) and
    /// value expansion ([kv_lora_rank, v_head_dim, n_head]), or both in the older
    /// `attn_kv_b` ([kv_lora_rank, n_head * (nope + v_head_dim)]).
    pub attn_q_a: Option<String>,
    pub attn_q_a_norm: Option<String>,
    pub attn_q_b: Option<String>,
    pub attn_kv_a_mqa: Option<String>,
    pub attn_kv_a_norm: Option<String>,
    pub attn_k_b: Option<String>,
    pub attn_v_b: Option<String>,
    pub attn_kv_b: Option<String>,
    /// Per-head query and key norm gains, for `attention.qk_norm`.
    pub attn_q_norm: Option<String>,
    pub attn_k_norm: Option<String>,
    pub attn_output: String,
    /// Each query head's sink logit ([n_head]), for `attention.sinks`.
    pub attn_sinks: Option<String>,
    /// The norm of the attention output before the residual add (`norm.placement =
    /// "sandwich"`).
    pub attn_post_norm: Option<String>,
    pub ffn_norm: String,
    /// The norm of the MLP output before the residual add (`norm.placement = "sandwich"`).
    pub ffn_post_norm: Option<String>,
    pub ffn_gate: Option<String>,
    pub ffn_up: String,
    pub ffn_down: String,
    /// A mixture of experts' router ([n_embd, n_expert]) and the experts' stacked gate, up
    /// ([n_embd, n_ff_exp, n_expert]) and down ([n_ff_exp, n_embd, n_expert]) projections,
    /// for `[moe]`; in place of the dense MLP's where the file has experts.
    pub ffn_gate_inp: Option<String>,
    pub ffn_gate_exps: Option<String>,
    pub ffn_up_exps: Option<String>,
    pub ffn_down_exps: Option<String>,
    /// A shared expert that every token runs besides its routed ones (Qwen2-MoE): a gated MLP
    /// `{arch}.expert_shared_feed_forward_length` wide, and optionally its gate
    /// ([n_embd]: the output is scaled by the sigmoid of its product with x).
    pub ffn_gate_shexp: Option<String>,
    pub ffn_up_shexp: Option<String>,
    pub ffn_down_shexp: Option<String>,
    pub ffn_gate_inp_shexp: Option<String>,
    /// A mixture of experts' selection bias ([n_expert]): added to the gating's weights to
    /// choose the experts, not to weigh them (DeepSeek-V3's and GLM-4.5's score correction),
    /// used where the file has it.
    pub ffn_exp_probs_b: Option<String>,
}
