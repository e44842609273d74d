//! The metadata of a converted file: the `{arch}.*` keys every decoder and encoder family
//! shares, read from `config.json`, then those of the family's conversion hook.

use super::config::Config;
use super::hooks;
use super::meta::Meta;
use crate::error::{Error, Result};
use crate::gguf::MetaValue;
use crate::spec::NetworkType;

/// The keys every decoder and encoder family shares, then the family's own, which its spec's
/// hook writes. An encoder-decoder's hook writes every key: llama.cpp's T5 converter writes
/// its own set in place of the shared one.
pub(crate) fn metadata(config: &Config) -> Result<Meta> {
    let mut m = Meta {
        arch: config.family.arch.as_str(),
        entries: Vec::new(),
    };
    if config.family.network != NetworkType::EncoderDecoder {
        shared(config, &mut m)?;
    }
    if let Some(hook) = &config.family.hf.hook {
        hooks::run(hook, config, &mut m)?;
    }
    Ok(m)
}

/// llama.cpp's `TextModel.set_gguf_parameters`.
fn shared(config: &Config, m: &mut Meta) -> Result<()> {
    m.u32("block_count", config.n_layer()?)?;
    if let Some(n) = config.u64("max_position_embeddings")? {
        m.u32("context_length", n)?;
    }
    m.u32("embedding_length", config.n_embd()?)?;
    if let Some(n) = config.u64("intermediate_size")? {
        m.u32("feed_forward_length", n)?;
    }
    m.u32("attention.head_count", config.n_head()?)?;
    m.u32("attention.head_count_kv", config.n_head_kv()?)?;
    let factor = config.rope_f64("factor")?;
    match (config.rope_type(), factor) {
        (Some("linear"), Some(f)) => {
            m.set("rope.scaling.type", MetaValue::String("linear".into()));
            m.f32("rope.scaling.factor", f);
        }
        (Some("yarn"), Some(f)) => {
            m.set("rope.scaling.type", MetaValue::String("yarn".into()));
            m.f32("rope.scaling.factor", f);
            let original = config
                .rope_f64("original_max_position_embeddings")?
                .ok_or_else(|| {
                    Error::metadata(
                        &config.path,
                        "rope_parameters.original_max_position_embeddings",
                        "YaRN needs the original context",
                    )
                })?;
            m.u32("rope.scaling.original_context_length", original as u64)?;
            for (hf, gguf) in [
                ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
            ] {
                if let Some(v) = config.rope_f64(hf)? {
                    m.f32(gguf, v);
                }
            }
        }
        _ => {}
    }
    if let Some(base) = config.rope_base()? {
        m.f32("rope.freq_base", base);
    }
    if let Some(base) = config.rope_base_local()? {
        m.f32("rope.freq_base_swa", base);
    }
    if let Some(eps) = config.f64("rms_norm_eps")? {
        m.f32("attention.layer_norm_rms_epsilon", eps);
    }
    if let Some(n) = config.n_experts()? {
        m.u32("expert_count", n)?;
    }
    if let Some(n) = config.u64("num_experts_per_tok")? {
        m.u32("expert_used_count", n)?;
    }
    if let Some(d) = config.u64("head_dim")? {
        m.u32("attention.key_length", d)?;
        m.u32("attention.value_length", d)?;
    }
    if let Some(n) = config.u64("n_group")? {
        m.u32("expert_group_count", n)?;
    }
    if let Some(n) = config.u64("topk_group")? {
        m.u32("expert_group_used_count", n)?;
    }
    Ok(())
}
