//! What a spec must say consistently, checked when it is parsed, so that resolution can rely
//! on it: tensor names for every atom that needs them, and names that can be derived.

use super::{
    GateUpLayout, MlpKind, ModelSpec, NetworkType, NormKind, NormPlacement, PositionSpec,
    QkvLayout, TiedEmbeddings, LAYER_PLACEHOLDER,
};
use crate::error::{Error, Result};

impl ModelSpec {
    /// Consistency between atoms and tensor names, so resolution can rely on it.
    pub(super) fn validate(&self, source: &str) -> Result<()> {
        let bad = |reason: String| Err(Error::spec(source, reason));
        if self.architectures.is_empty() {
            return bad("`architectures` is empty".into());
        }
        if self.hf.as_ref().is_some_and(|hf| hf.classes.is_empty()) {
            return bad("`hf.classes` is empty".into());
        }
        let t = &self.tensors;
        let l = &t.layer;
        let per_layer = [
            ("attn_norm", Some(&l.attn_norm)),
            ("attn_q", l.attn_q.as_ref()),
            ("attn_k", l.attn_k.as_ref()),
            ("attn_v", l.attn_v.as_ref()),
            ("attn_qkv", l.attn_qkv.as_ref()),
            ("attn_q_a", l.attn_q_a.as_ref()),
            ("attn_q_a_norm", l.attn_q_a_norm.as_ref()),
            ("attn_q_b", l.attn_q_b.as_ref()),
            ("attn_kv_a_mqa", l.attn_kv_a_mqa.as_ref()),
            ("attn_kv_a_norm", l.attn_kv_a_norm.as_ref()),
            ("attn_k_b", l.attn_k_b.as_ref()),
            ("attn_v_b", l.attn_v_b.as_ref()),
            ("attn_kv_b", l.attn_kv_b.as_ref()),
            ("attn_q_norm", l.attn_q_norm.as_ref()),
            ("attn_k_norm", l.attn_k_norm.as_ref()),
            ("attn_output", Some(&l.attn_output)),
            ("attn_post_norm", l.attn_post_norm.as_ref()),
            ("ffn_norm", Some(&l.ffn_norm)),
            ("ffn_post_norm", l.ffn_post_norm.as_ref()),
            ("ffn_gate", l.ffn_gate.as_ref()),
            ("ffn_up", Some(&l.ffn_up)),
            ("ffn_down", Some(&l.ffn_down)),
            ("ffn_gate_inp", l.ffn_gate_inp.as_ref()),
            ("ffn_gate_exps", l.ffn_gate_exps.as_ref()),
            ("ffn_up_exps", l.ffn_up_exps.as_ref()),
            ("ffn_down_exps", l.ffn_down_exps.as_ref()),
            ("ffn_gate_shexp", l.ffn_gate_shexp.as_ref()),
            ("ffn_up_shexp", l.ffn_up_shexp.as_ref()),
            ("ffn_down_shexp", l.ffn_down_shexp.as_ref()),
            ("ffn_gate_inp_shexp", l.ffn_gate_inp_shexp.as_ref()),
            ("attn_sinks", l.attn_sinks.as_ref()),
            ("ffn_exp_probs_b", l.ffn_exp_probs_b.as_ref()),
        ];
        for (role, name) in per_layer {
            if let Some(name) = name {
                if !name.contains(LAYER_PLACEHOLDER) {
                    return bad(format!(
                        "tensors.layer.{role} = {name:?} lacks {LAYER_PLACEHOLDER}"
                    ));
                }
            }
        }
        match self.attention.qkv {
            QkvLayout::Separate
                if l.attn_q.is_none() || l.attn_k.is_none() || l.attn_v.is_none() =>
            {
                return bad("separate q/k/v needs tensors.layer.attn_q, attn_k and attn_v".into())
            }
            QkvLayout::Fused if l.attn_qkv.is_none() => {
                return bad("fused q/k/v needs tensors.layer.attn_qkv".into())
            }
            QkvLayout::Latent => {
                let low_rank = [&l.attn_q_a, &l.attn_q_a_norm, &l.attn_q_b];
                let split = l.attn_k_b.is_some() && l.attn_v_b.is_some();
                if l.attn_kv_a_mqa.is_none()
                    || l.attn_kv_a_norm.is_none()
                    || !(split || l.attn_kv_b.is_some())
                    || (l.attn_q.is_none() && low_rank.iter().any(|n| n.is_none()))
                {
                    return bad(
                        "latent attention needs tensors.layer.attn_kv_a_mqa, attn_kv_a_norm, \
                         attn_k_b and attn_v_b (or attn_kv_b), and attn_q or attn_q_a, \
                         attn_q_a_norm and attn_q_b"
                            .into(),
                    );
                }
                if self.attention.bias || self.attention.qk_norm.is_some() || self.attention.sinks {
                    return bad(
                        "latent attention has no q/k/v biases, query/key norm or sinks".into(),
                    );
                }
            }
            _ => {}
        }
        if self.attention.qk_norm.is_some() && (l.attn_q_norm.is_none() || l.attn_k_norm.is_none())
        {
            return bad("attention.qk_norm needs tensors.layer.attn_q_norm and attn_k_norm".into());
        }
        if self.attention.sinks && l.attn_sinks.is_none() {
            return bad("attention.sinks needs tensors.layer.attn_sinks".into());
        }
        if self.norm.placement == NormPlacement::Sandwich
            && (l.attn_post_norm.is_none() || l.ffn_post_norm.is_none())
        {
            return bad(
                "norm.placement = \"sandwich\" needs tensors.layer.attn_post_norm and \
                 ffn_post_norm"
                    .into(),
            );
        }
        let experts = [
            &l.ffn_gate_inp,
            &l.ffn_gate_exps,
            &l.ffn_up_exps,
            &l.ffn_down_exps,
        ];
        if self.moe.is_some() && experts.iter().any(|n| n.is_none()) {
            return bad(
                "[moe] needs tensors.layer.ffn_gate_inp, ffn_gate_exps, ffn_up_exps and \
                 ffn_down_exps"
                    .into(),
            );
        }
        let shared = [&l.ffn_gate_shexp, &l.ffn_up_shexp, &l.ffn_down_shexp];
        let named = shared.iter().filter(|n| n.is_some()).count();
        if (named > 0 || l.ffn_gate_inp_shexp.is_some()) && (named < 3 || self.moe.is_none()) {
            return bad(
                "a shared expert needs [moe] and all of tensors.layer.ffn_gate_shexp, \
                 ffn_up_shexp and ffn_down_shexp"
                    .into(),
            );
        }
        if self.attention.window_period == 0 {
            return bad("attention.window_period must be at least 1".into());
        }
        let fused_gate_up = self.mlp.gate_up == GateUpLayout::Fused;
        if self.mlp.kind == MlpKind::Gated && !fused_gate_up && l.ffn_gate.is_none() {
            return bad("a gated MLP needs tensors.layer.ffn_gate".into());
        }
        if fused_gate_up && (self.mlp.kind != MlpKind::Gated || l.ffn_gate.is_some()) {
            return bad(
                "mlp.gate_up = \"fused\" is for a gated MLP whose gate rows lead \
                 tensors.layer.ffn_up (no ffn_gate)"
                    .into(),
            );
        }
        if t.rope_factors_long.is_some() != t.rope_factors_short.is_some() {
            return bad(
                "LongRoPE needs both tensors.rope_factors_long and rope_factors_short".into(),
            );
        }
        if matches!(self.position, PositionSpec::Learned) && t.position_embd.is_none() {
            return bad("learned positions need tensors.position_embd".into());
        }
        if (self.network == NetworkType::EncoderDecoder) != t.seq2seq.is_some() {
            return bad("tensors.seq2seq is for, and needed by, an encoder-decoder network".into());
        }
        if let Some(s) = &t.seq2seq {
            let relative = matches!(self.position, PositionSpec::RelativeBuckets { .. });
            if relative && (s.encoder_relative_bias.is_none() || s.decoder_relative_bias.is_none())
            {
                return bad(
                    "relative positions need tensors.seq2seq.encoder_relative_bias and \
                     decoder_relative_bias"
                        .into(),
                );
            }
        }
        if self.network != NetworkType::EncoderOnly && t.output_norm.is_none() {
            return bad("a decoder needs tensors.output_norm".into());
        }
        if self.tied_embeddings != TiedEmbeddings::Always && t.output.is_none() {
            return bad("untied embeddings need tensors.output".into());
        }
        let needs_bias = self.norm.kind == NormKind::Layer
            || self.attention.bias
            || self.attention.output_bias
            || self.mlp.bias;
        if needs_bias {
            // The selection bias is a bias itself, named as the file names it.
            let names = per_layer
                .iter()
                .filter(|(role, _)| *role != "ffn_exp_probs_b")
                .filter_map(|(_, n)| *n);
            if let Some(n) = names
                .chain(t.output_norm.iter())
                .chain(t.embd_norm.iter())
                .find(|n| !n.ends_with(".weight"))
            {
                return bad(format!(
                    "{n:?} must end in .weight so its bias name can be derived"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::shipped::SHIPPED;
    use crate::spec::ModelSpec;

    #[test]
    fn bad_specs_are_rejected_with_a_reason() {
        let llama = SHIPPED[0].1;
        let deepseek2 = SHIPPED
            .iter()
            .find(|(n, _)| *n == "deepseek2.toml")
            .unwrap()
            .1;
        let cases = [
            (llama.replace("\"silu\"", "\"swish\""), "swish"),
            (
                llama.replace("blk.{layer}.ffn_up", "blk.ffn_up"),
                "lacks {layer}",
            ),
            (
                llama.replace("ffn_gate = ", "# "),
                "needs tensors.layer.ffn_gate",
            ),
            (
                llama.replace("qkv = \"separate\"", "qkv = \"fused\""),
                "attn_qkv",
            ),
            (
                llama.replace("causal = true", "causal = true\nwindow = 4"),
                "window",
            ),
            (
                llama.replace("causal = true", "causal = true\nwindow_period = 0"),
                "window_period",
            ),
            (
                llama.replace("kind = \"gated\"", "kind = \"gated\"\ngate_up = \"fused\""),
                "no ffn_gate",
            ),
            (
                llama.replace("placement = \"pre\"", "placement = \"sandwich\""),
                "attn_post_norm",
            ),
            (llama.replace("kind = \"rms\"", "kind = \"layer\""), ""),
            (
                llama.replace("causal = true", "causal = true\nqk_norm = \"rms\""),
                "attn_q_norm",
            ),
            (
                llama.replace("causal = true", "causal = true\nqk_norm = \"l2\""),
                "l2",
            ),
            // An [hf] table that serves no class, and one with a key it does not have.
            (
                llama.replace(
                    "\"LlamaForCausalLM\", \"MistralForCausalLM\", \"MixtralForCausalLM\"",
                    "",
                ),
                "`hf.classes` is empty",
            ),
            (
                llama.replace("hook = \"llama\"", "hook = \"llama\"\nrename = true"),
                "rename",
            ),
            // A shared expert without [moe], and one with only some of its tensors named.
            (
                format!("{llama}ffn_up_shexp = \"blk.{{layer}}.ffn_up_shexp.weight\"\n"),
                "a shared expert needs [moe]",
            ),
            (
                SHIPPED
                    .iter()
                    .find(|(n, _)| *n == "qwen2moe.toml")
                    .unwrap()
                    .1
                    .replace("ffn_down_shexp = ", "# "),
                "ffn_down_shexp",
            ),
            // Latent attention without its latent's projection, and with a q/k/v bias.
            (
                deepseek2.replace("attn_kv_a_mqa = ", "# "),
                "latent attention needs tensors.layer.attn_kv_a_mqa",
            ),
            (
                deepseek2.replace("qkv = \"latent\"", "qkv = \"latent\"\nbias = true"),
                "no q/k/v biases",
            ),
        ];
        for (text, fragment) in cases {
            match ModelSpec::from_toml("test.toml", &text) {
                Ok(_) => assert!(fragment.is_empty(), "accepted a spec with {fragment}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains("test.toml") && msg.contains(fragment), "{msg}");
                }
            }
        }
    }
}
