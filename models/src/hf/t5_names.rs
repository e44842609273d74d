//! T5's tensor names (T5 v1.0, v1.1 and Flan-T5, mT5, UMT5) as llama.cpp's converter renames
//! them: the shared embeddings, each encoder block's self-attention and MLP under `enc.blk.N`,
//! each decoder block's self-attention, cross-attention (`EncDecAttention`) and MLP under
//! `dec.blk.N`, the two stacks' final norms, and the output. Every name is pre-norm: a
//! branch's `layer_norm` is the norm before it. T5 v1.0's MLP is `wi` then `wo` (up, down);
//! v1.1's gates (`wi_0` the gate, `wi_1` up). T5 keeps its relative position bias in the first
//! block of each stack, UMT5 in every block.

use crate::safetensors::SafetensorsWeights;

/// The encoder's blocks or the decoder's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stack {
    Encoder,
    Decoder,
}

impl Stack {
    /// GGUF's prefix for the stack's blocks.
    pub fn prefix(self) -> &'static str {
        match self {
            Stack::Encoder => "enc.blk",
            Stack::Decoder => "dec.blk",
        }
    }
}

/// Where a T5 tensor goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum T5Name {
    /// A copy of the embeddings the encoder, the decoder (and T5 v1.0's output) share: the
    /// first becomes `token_embd.weight` ([`first_embedding`]) and the rest are dropped.
    Embedding,
    Global(&'static str),
    Block(Stack, usize, &'static str),
}

/// `None` for a name that is not T5's.
pub(crate) fn t5_name(name: &str) -> Option<T5Name> {
    let global = match name {
        "shared.weight" | "encoder.embed_tokens.weight" | "decoder.embed_tokens.weight" => {
            return Some(T5Name::Embedding)
        }
        "lm_head.weight" => Some("output.weight"),
        "encoder.final_layer_norm.weight" => Some("enc.output_norm.weight"),
        "decoder.final_layer_norm.weight" => Some("dec.output_norm.weight"),
        _ => None,
    };
    if let Some(g) = global {
        return Some(T5Name::Global(g));
    }
    let (stack, rest) = match name.strip_prefix("encoder.block.") {
        Some(rest) => (Stack::Encoder, rest),
        None => (Stack::Decoder, name.strip_prefix("decoder.block.")?),
    };
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    // Self-attention is each block's first branch; the decoder's cross-attention its second;
    // the MLP the last.
    let mlp = match stack {
        Stack::Encoder => "layer.1.",
        Stack::Decoder => "layer.2.",
    };
    let gguf = if let Some(part) = rest.strip_prefix("layer.0.") {
        match part {
            "layer_norm.weight" => "attn_norm.weight",
            "SelfAttention.q.weight" => "attn_q.weight",
            "SelfAttention.k.weight" => "attn_k.weight",
            "SelfAttention.v.weight" => "attn_v.weight",
            "SelfAttention.o.weight" => "attn_o.weight",
            "SelfAttention.relative_attention_bias.weight" => "attn_rel_b.weight",
            _ => return None,
        }
    } else if let Some(part) = rest.strip_prefix(mlp) {
        match part {
            "layer_norm.weight" => "ffn_norm.weight",
            "DenseReluDense.wi.weight" | "DenseReluDense.wi_1.weight" => "ffn_up.weight",
            "DenseReluDense.wi_0.weight" => "ffn_gate.weight",
            "DenseReluDense.wo.weight" => "ffn_down.weight",
            _ => return None,
        }
    } else if stack == Stack::Decoder {
        match rest.strip_prefix("layer.1.")? {
            "layer_norm.weight" => "cross_attn_norm.weight",
            "EncDecAttention.q.weight" => "cross_attn_q.weight",
            "EncDecAttention.k.weight" => "cross_attn_k.weight",
            "EncDecAttention.v.weight" => "cross_attn_v.weight",
            "EncDecAttention.o.weight" => "cross_attn_o.weight",
            "EncDecAttention.relative_attention_bias.weight" => "cross_attn_rel_b.weight",
            _ => return None,
        }
    } else {
        return None;
    };
    Some(T5Name::Block(stack, layer, gguf))
}

/// The copy of the shared embeddings that becomes `token_embd.weight`: the first in the order
/// llama.cpp's converter reads safetensors (file by file, each file's tensors by name).
/// Checkpoints' copies are the same values; which one is read matters only where they differ.
pub(crate) fn first_embedding(weights: &SafetensorsWeights) -> Option<&str> {
    weights
        .tensors()
        .filter(|(name, _)| t5_name(name) == Some(T5Name::Embedding))
        .min_by_key(|(name, info)| (weights.file_of(info), *name))
        .map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gguf(name: &str) -> Option<String> {
        match t5_name(name)? {
            T5Name::Embedding => Some("(embedding)".into()),
            T5Name::Global(g) => Some(g.into()),
            T5Name::Block(stack, l, g) => Some(format!("{}.{l}.{g}", stack.prefix())),
        }
    }

    #[test]
    fn names_map_as_llama_cpp_maps_them() {
        for (hf, want) in [
            ("shared.weight", "(embedding)"),
            ("decoder.embed_tokens.weight", "(embedding)"),
            ("lm_head.weight", "output.weight"),
            ("encoder.final_layer_norm.weight", "enc.output_norm.weight"),
            ("decoder.final_layer_norm.weight", "dec.output_norm.weight"),
            (
                "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                "enc.blk.0.attn_rel_b.weight",
            ),
            (
                "encoder.block.2.layer.0.layer_norm.weight",
                "enc.blk.2.attn_norm.weight",
            ),
            (
                "encoder.block.1.layer.1.layer_norm.weight",
                "enc.blk.1.ffn_norm.weight",
            ),
            (
                "encoder.block.1.layer.1.DenseReluDense.wi.weight",
                "enc.blk.1.ffn_up.weight",
            ),
            (
                "encoder.block.1.layer.1.DenseReluDense.wi_0.weight",
                "enc.blk.1.ffn_gate.weight",
            ),
            (
                "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
                "enc.blk.1.ffn_up.weight",
            ),
            (
                "decoder.block.4.layer.0.SelfAttention.o.weight",
                "dec.blk.4.attn_o.weight",
            ),
            (
                "decoder.block.0.layer.1.layer_norm.weight",
                "dec.blk.0.cross_attn_norm.weight",
            ),
            (
                "decoder.block.0.layer.1.EncDecAttention.k.weight",
                "dec.blk.0.cross_attn_k.weight",
            ),
            (
                "decoder.block.1.layer.2.layer_norm.weight",
                "dec.blk.1.ffn_norm.weight",
            ),
            (
                "decoder.block.1.layer.2.DenseReluDense.wo.weight",
                "dec.blk.1.ffn_down.weight",
            ),
        ] {
            assert_eq!(gguf(hf).as_deref(), Some(want), "{hf}");
        }
        // The encoder has no cross-attention and no third branch; names not T5's are none.
        for hf in [
            "encoder.block.0.layer.1.EncDecAttention.q.weight",
            "encoder.block.0.layer.2.layer_norm.weight",
            "decoder.block.0.layer.1.DenseReluDense.wi.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "encoder.block.x.layer.0.layer_norm.weight",
        ] {
            assert_eq!(gguf(hf), None, "{hf}");
        }
    }
}
