//! Conversion hooks: the metadata a family's folders need beyond the common keys, each a
//! function named by its spec's `hf.hook` (`models/specs/*.toml`). A family whose folders
//! need nothing more names none.

use std::path::Path;

use super::config::Config;
use super::meta::Meta;
use crate::error::{Error, Result};
use crate::gguf::MetaValue;

/// Writes a family's own `{arch}.*` keys from its `config.json`.
type Hook = fn(&Config, &mut Meta) -> Result<()>;

/// Every hook, by the name specs give it.
const HOOKS: &[(&str, Hook)] = &[
    ("llama", llama),
    ("granite", granite),
    ("smollm3", smollm3),
    ("glm4", glm4),
    ("qwen2moe", qwen2moe),
    ("qwen3moe", qwen3moe),
    ("gemma2", gemma2),
    ("gemma3", gemma3),
    ("gptoss", gptoss),
    ("phi3", phi3),
    ("bert", bert),
    ("t5", t5),
    ("glm4moe", glm4moe),
    ("deepseek2", deepseek2),
];

/// Runs the hook called `name`; a name no hook has is an error of the spec that gives it.
pub(crate) fn run(name: &str, config: &Config, meta: &mut Meta) -> Result<()> {
    match HOOKS.iter().find(|(n, _)| *n == name) {
        Some((_, hook)) => hook(config, meta),
        None => Err(unknown(&config.family.spec, name)),
    }
}

fn unknown(spec: &str, name: &str) -> Error {
    let names: Vec<&str> = HOOKS.iter().map(|(n, _)| *n).collect();
    Error::spec(
        spec,
        format!(
            "hf.hook = {name:?} is no conversion hook (hooks: {})",
            names.join(", ")
        ),
    )
}

/// The vocabulary's size, RoPE's dimensions, and Mistral's window.
fn llama(c: &Config, m: &mut Meta) -> Result<()> {
    llama_sizes(c, m)?;
    // Mistral 7B's window; llama.cpp's converter drops it, transformers honours it.
    if let Some(w) = c.u64("sliding_window")?.filter(|&w| w > 0) {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

/// The vocabulary's size and RoPE's dimensions.
fn llama_sizes(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(n) = c.u64("vocab_size")? {
        m.u32("vocab_size", n)?;
    }
    m.u32("rope.dimension_count", c.head_dim()?)
}

/// Llama's keys and Granite's multipliers: on the scores, the embeddings, each branch's
/// output and (dividing) the logits.
fn granite(c: &Config, m: &mut Meta) -> Result<()> {
    llama(c, m)?;
    let keys = [
        ("attention_multiplier", "attention.scale"),
        ("embedding_multiplier", "embedding_scale"),
        ("residual_multiplier", "residual_scale"),
        ("logits_scaling", "logit_scale"),
    ];
    for (hf, gguf) in keys {
        // llama.cpp's converter writes none that is 0 or absent.
        if let Some(v) = c.f64(hf)?.filter(|&v| v != 0.0) {
            m.f32(gguf, v);
        }
    }
    Ok(())
}

/// Llama's keys. The layers without RoPE are not in llama.cpp's file (every fourth, fixed):
/// a folder whose `no_rope_layers` says otherwise, or that windows its attention, is refused
/// rather than converted into a file that runs another network.
fn smollm3(c: &Config, m: &mut Meta) -> Result<()> {
    let bad = |what: String| Error::metadata(Path::new("config.json"), "no_rope_layers", what);
    if let Some(list) = c.json("no_rope_layers").and_then(|v| v.as_array()) {
        for (i, v) in list.iter().enumerate() {
            let rotates = v
                .as_u64()
                .ok_or_else(|| bad(format!("entry {i} is not 0 or 1")))?;
            if (rotates == 1) != ((i + 1) % 4 != 0) {
                return Err(bad(format!(
                    "layer {i} {} RoPE; Hearth, as llama.cpp, runs every fourth layer without \
                     it and the others with it",
                    if rotates == 1 { "has" } else { "lacks" }
                )));
            }
        }
    }
    if c.bool("use_sliding_window") == Some(true) {
        return Err(Error::metadata(
            Path::new("config.json"),
            "use_sliding_window",
            "is true; SmolLM3's windowed layers are not converted",
        ));
    }
    llama_sizes(c, m)
}

/// The rotated dimensions: half of each head unless `partial_rotary_factor` says otherwise.
fn glm4(c: &Config, m: &mut Meta) -> Result<()> {
    let partial = c.rope_f64("partial_rotary_factor")?.unwrap_or(0.5);
    m.u32(
        "rope.dimension_count",
        (c.head_dim()? as f64 * partial) as u64,
    )
}

/// GLM-4.5's: GLM-4's rotated dimensions, the routed experts' count and width, the shared
/// experts', the leading dense blocks, the sigmoid gating, the weights' scale and
/// renormalization, and the NextN layers, which llama.cpp counts among the blocks.
fn glm4moe(c: &Config, m: &mut Meta) -> Result<()> {
    glm4(c, m)?;
    for (hf, gguf) in [
        ("n_routed_experts", "expert_count"),
        ("moe_intermediate_size", "expert_feed_forward_length"),
        ("n_shared_experts", "expert_shared_count"),
        ("first_k_dense_replace", "leading_dense_block_count"),
    ] {
        if let Some(n) = c.u64(hf)? {
            m.u32(gguf, n)?;
        }
    }
    // llama.cpp's ExpertGatingFuncType.SIGMOID.
    m.u32("expert_gating_func", 2)?;
    if let Some(v) = c.f64("routed_scaling_factor")? {
        m.f32("expert_weights_scale", v);
    }
    if let Some(b) = c.bool("norm_topk_prob") {
        m.set("expert_weights_norm", MetaValue::Bool(b));
    }
    if let Some(n) = c.u64("num_nextn_predict_layers")? {
        m.u32("block_count", c.n_layer()? + n)?;
        m.u32("nextn_predict_layers", n)?;
    }
    Ok(())
}

/// DeepSeek-V2's and V3's, as llama.cpp's `DeepseekV2Model` writes them: one key/value
/// head (the latent), latent attention's ranks and widths (the cache's as `key_length` and
/// `value_length`, each head's as `key_length_mla` and `value_length_mla`), the rotated
/// dimensions, the experts' width, count and shared count, the leading dense blocks, the
/// router's gating where the config names one, the weights' scale and renormalization, and
/// YaRN's `mscale_all_dim` (a tenth of it, as llama.cpp writes it).
fn deepseek2(c: &Config, m: &mut Meta) -> Result<()> {
    let path = Path::new("config.json");
    m.u32("attention.head_count_kv", 1)?;
    if c.f64("rms_norm_eps")?.is_none() {
        m.f32("attention.layer_norm_rms_epsilon", 1e-6);
    }
    let moe = c.u64("n_routed_experts")?.is_some();
    let dense = match c.u64("first_k_dense_replace")? {
        Some(n) => n,
        // Without experts every block is dense.
        None if !moe => c.n_layer()?,
        None => 0,
    };
    m.u32("leading_dense_block_count", dense)?;
    let kv_lora = c.u64("kv_lora_rank")?.unwrap_or(512);
    if let Some(n) = c.u64("vocab_size")? {
        m.u32("vocab_size", n)?;
    }
    if let Some(n) = c.u64("q_lora_rank")? {
        m.u32("attention.q_lora_rank", n)?;
    }
    let rope = c.require_u64("qk_rope_head_dim")?;
    let nope = c.require_u64("qk_nope_head_dim")?;
    m.u32("attention.kv_lora_rank", kv_lora)?;
    m.u32("attention.key_length", kv_lora + rope)?;
    m.u32("attention.value_length", kv_lora)?;
    m.u32("attention.key_length_mla", nope + rope)?;
    m.u32("attention.value_length_mla", c.require_u64("v_head_dim")?)?;
    let n_ff = c
        .u64("moe_intermediate_size")?
        .map_or_else(|| c.require_u64("intermediate_size"), Ok)?;
    m.u32("expert_feed_forward_length", n_ff)?;
    if let Some(n) = c.u64("n_routed_experts")? {
        m.u32("expert_count", n)?;
    }
    m.u32(
        "expert_shared_count",
        c.u64("n_shared_experts")?.unwrap_or(0),
    )?;
    if let Some(v) = c.f64("routed_scaling_factor")? {
        m.f32("expert_weights_scale", v);
    }
    if c.bool("norm_topk_prob") == Some(true) {
        m.set("expert_weights_norm", MetaValue::Bool(true));
    }
    // llama.cpp's TextModel reads the router's scores under any of these names.
    let scoring = [
        "score_function",
        "scoring_func",
        "score_func",
        "moe_router_activation",
        "moe_router_activation_func",
        "expert_selection_fn",
    ]
    .iter()
    .find_map(|k| c.json(k).map(|v| (*k, v)));
    if let Some((key, v)) = scoring {
        let gating = match v.as_str() {
            Some("softmax") => 1,
            Some("sigmoid") => 2,
            _ => {
                return Err(Error::metadata(
                    path,
                    key,
                    format!("{v}; Hearth runs softmax and sigmoid routers"),
                ))
            }
        };
        m.u32("expert_gating_func", gating)?;
    }
    m.u32("rope.dimension_count", rope)?;
    if let Some(v) = c.rope_f64("mscale_all_dim")? {
        m.f32("rope.scaling.yarn_log_multiplier", 0.1 * v);
    }
    Ok(())
}

/// Qwen3-MoE's keys and the shared expert's width.
fn qwen2moe(c: &Config, m: &mut Meta) -> Result<()> {
    qwen3moe(c, m)?;
    if let Some(n) = c.u64("shared_expert_intermediate_size")? {
        m.u32("expert_shared_feed_forward_length", n)?;
    }
    Ok(())
}

/// The experts' width.
fn qwen3moe(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(n) = c.u64("moe_intermediate_size")? {
        m.u32("expert_feed_forward_length", n)?;
    }
    Ok(())
}

/// The soft-caps of scores and logits, and the window.
fn gemma2(c: &Config, m: &mut Meta) -> Result<()> {
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(v) = c.f64(key)? {
            m.f32(key, v);
        }
    }
    if let Some(w) = c.u64("sliding_window")? {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

/// GPT-OSS: the window and the experts' width (`intermediate_size`). Its clamped SwiGLU's
/// constants are fixed, as llama.cpp fixes them (its files carry none): a folder with others
/// is refused rather than converted into a file that runs another network. Layers alternate
/// local and global from the first, as `attention.window_period` runs them, and YaRN keeps
/// its correction range unrounded: a folder whose `layer_types` or `truncate` says otherwise
/// is refused too.
fn gptoss(c: &Config, m: &mut Meta) -> Result<()> {
    let path = Path::new("config.json");
    for (key, fixed) in [("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)] {
        match c.f64(key)? {
            Some(v) if (v - fixed).abs() > 1e-6 => {
                return Err(Error::metadata(
                    path,
                    key,
                    format!("{v}; Hearth, as llama.cpp, runs GPT-OSS's SwiGLU with {fixed}"),
                ))
            }
            _ => {}
        }
    }
    if let Some(list) = c.json("layer_types").and_then(|v| v.as_array()) {
        for (i, v) in list.iter().enumerate() {
            let want = if i % 2 == 0 {
                "sliding_attention"
            } else {
                "full_attention"
            };
            if v.as_str() != Some(want) {
                return Err(Error::metadata(
                    path,
                    "layer_types",
                    format!(
                        "layer {i} is {v}; Hearth, as llama.cpp, runs even layers with the \
                         window and odd ones without"
                    ),
                ));
            }
        }
    }
    // GPT-OSS's YaRN does not round its correction range (`truncate` false), which the spec
    // fixes (`position.yarn_truncate`): llama.cpp's files say nothing of it.
    if c.rope_type() == Some("yarn") && c.rope_bool("truncate") != Some(false) {
        return Err(Error::metadata(
            path,
            "rope_parameters.truncate",
            "is not false; Hearth runs GPT-OSS's YaRN with its correction range unrounded",
        ));
    }
    let window = c
        .u64("sliding_window")?
        .ok_or_else(|| Error::metadata(path, "sliding_window", "missing"))?;
    m.u32("attention.sliding_window", window)?;
    if let Some(n) = c.u64("intermediate_size")? {
        m.u32("expert_feed_forward_length", n)?;
    }
    Ok(())
}

/// The logits' soft-cap and the window.
fn gemma3(c: &Config, m: &mut Meta) -> Result<()> {
    if let Some(cap) = c.f64("final_logit_softcapping")? {
        m.f32("final_logit_softcapping", cap);
    }
    if let Some(w) = c.u64("sliding_window")? {
        m.u32("attention.sliding_window", w)?;
    }
    Ok(())
}

/// LongRoPE's original context and factor on cos and sin, the rotated dimensions and
/// the window (0 for none).
fn phi3(c: &Config, m: &mut Meta) -> Result<()> {
    let n_ctx = c.require_u64("max_position_embeddings")?;
    let original = c
        .rope_f64("original_max_position_embeddings")?
        .map_or(n_ctx, |v| v as u64);
    m.u32("rope.scaling.original_context_length", original)?;
    let partial = c.rope_f64("partial_rotary_factor")?.unwrap_or(1.0);
    let n_embd = c.require_u64("hidden_size")?;
    m.u32(
        "rope.dimension_count",
        (partial * n_embd as f64) as u64 / c.n_head()?.max(1),
    )?;
    m.u32(
        "attention.sliding_window",
        c.u64("sliding_window")?.unwrap_or(0),
    )?;
    if c.rope_factors("long_factor")?.is_some() {
        // LongRoPE's scale of cos and sin for contexts past the original.
        let scale = n_ctx as f64 / original as f64;
        let attn = if scale > 1.0 {
            (1.0 + scale.ln() / (original as f64).ln()).sqrt()
        } else {
            1.0
        };
        m.f32("rope.scaling.attn_factor", attn);
    }
    Ok(())
}

/// Full attention, LayerNorm's epsilon, RoBERTa's positions past its padding row, and the
/// pooling a sentence-transformers folder asks
/// for (`modules.json`'s Pooling module), in llama.cpp's numbering: 1 mean, 2 first token
/// (CLS), 3 last token.
fn bert(c: &Config, m: &mut Meta) -> Result<()> {
    m.set("attention.causal", MetaValue::Bool(false));
    if let (Some(offset), Some(n)) = (c.position_offset()?, c.u64("max_position_embeddings")?) {
        m.u32("context_length", n.saturating_sub(offset))?;
    }
    m.f32(
        "attention.layer_norm_epsilon",
        c.f64("layer_norm_eps")?.unwrap_or(1e-12),
    );
    if let Some(pooling) = sentence_pooling(c)? {
        m.u32("pooling_type", pooling)?;
    }
    // A classifier's labels, unless they are the two placeholders transformers makes up.
    if let Some(serde_json::Value::Object(labels)) = c.json("id2label") {
        let mut by_id: Vec<(u64, String)> = labels
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_string())))
            .collect();
        by_id.sort();
        let names: Vec<String> = by_id.into_iter().map(|(_, v)| v).collect();
        if !(names.len() == 2 && names[0] == "LABEL_0") {
            m.set(
                "classifier.output_labels",
                MetaValue::Array(crate::gguf::MetaArray::String(names)),
            );
        }
    }
    Ok(())
}

/// Every key of an encoder-decoder (no shared ones: T5's config names its sizes its own way),
/// as llama.cpp's `T5Model` writes them, in its order. transformers' defaults stand in for
/// keys a config leaves out (llama.cpp's converter reads the config through transformers),
/// except the context: 512 where `n_positions` is absent, as llama.cpp assumes. A config
/// without `decoder_start_token_id` (transformers 5 keeps it in generation_config.json) starts
/// the decoder from the padding token, as T5 does; llama.cpp's converter refuses one.
fn t5(c: &Config, m: &mut Meta) -> Result<()> {
    m.u32("context_length", c.u64("n_positions")?.unwrap_or(512))?;
    m.u32("embedding_length", c.n_embd()?)?;
    m.u32("feed_forward_length", c.require_u64("d_ff")?)?;
    m.u32("block_count", c.n_layer()?)?;
    m.u32("decoder_block_count", c.n_decoder_layer()?)?;
    m.u32("attention.head_count", c.n_head()?)?;
    m.u32("attention.key_length", c.head_dim()?)?;
    m.u32("attention.value_length", c.head_dim()?)?;
    // T5's norms are RMSNorm; llama.cpp writes the epsilon under both names.
    let eps = c.f64("layer_norm_epsilon")?.unwrap_or(1e-6);
    m.f32("attention.layer_norm_epsilon", eps);
    m.u32(
        "attention.relative_buckets_count",
        c.u64("relative_attention_num_buckets")?.unwrap_or(32),
    )?;
    m.f32("attention.layer_norm_rms_epsilon", eps);
    let start = c.u64_any(&["decoder_start_token_id", "pad_token_id"])?;
    m.u32("decoder_start_token_id", start.unwrap_or(0))?;
    Ok(())
}

fn sentence_pooling(c: &Config) -> Result<Option<u64>> {
    let Some(dir) = c.path.parent() else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| -> Result<Option<serde_json::Value>> {
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| Error::metadata(path, "(file)", format!("not JSON: {e}")))
    };
    let modules_path = dir.join("modules.json");
    let Some(modules) = read(&modules_path)? else {
        return Ok(None);
    };
    let pooling_dir = modules.as_array().into_iter().flatten().find_map(|m| {
        let ty = m.get("type")?.as_str()?;
        ty.ends_with("Pooling")
            .then(|| m.get("path")?.as_str().map(String::from))?
    });
    let Some(pooling_dir) = pooling_dir else {
        return Ok(None);
    };
    let config_path = dir.join(pooling_dir).join("config.json");
    let Some(pooling) = read(&config_path)? else {
        return Ok(None);
    };
    let on = |key: &str| pooling.get(key).and_then(|v| v.as_bool()) == Some(true);
    let mode = pooling.get("pooling_mode").and_then(|v| v.as_str());
    Ok(Some(
        if on("pooling_mode_mean_tokens") || mode == Some("mean") {
            1
        } else if on("pooling_mode_cls_token") || mode == Some("cls") {
            2
        } else if on("pooling_mode_lasttoken") || mode == Some("lasttoken") {
            3
        } else {
            return Err(Error::metadata(
                &config_path,
                "pooling_mode",
                "none of mean, cls and lasttoken (the poolings Hearth runs)",
            ));
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::family::families;

    /// Every hook a shipped spec names exists, and every hook is some family's.
    #[test]
    fn hooks_and_specs_name_each_other() {
        let families = families().unwrap();
        let named: Vec<&str> = families
            .iter()
            .filter_map(|f| f.hf.hook.as_deref())
            .collect();
        for name in &named {
            assert!(
                HOOKS.iter().any(|(n, _)| n == name),
                "{}",
                unknown("spec", name)
            );
        }
        for (name, _) in HOOKS {
            assert!(named.contains(name), "no spec names the hook {name:?}");
        }
    }
}
