//! The resolved model: architecture, hyperparameters and tensor names, as text and as JSON.
use std::fmt::Write as _;

use hearth_models::spec::{QkNormOver, RopeScaling};
use hearth_models::ResolvedModel;
use serde_json::{json, Value};

pub(super) fn write_model(out: &mut String, m: &ResolvedModel) -> std::fmt::Result {
    let hp = &m.hparams;
    let s = &m.spec;
    writeln!(
        out,
        "architecture  {} (spec `{}`, {})",
        m.architecture, s.name, s.network
    )?;
    writeln!(out, "  layers          {}", hp.n_layer)?;
    writeln!(out, "  width           {}", hp.n_embd)?;
    writeln!(
        out,
        "  heads           {} (head dim {})",
        hp.n_head, hp.head_dim
    )?;
    writeln!(out, "  kv heads        {}", hp.n_head_kv)?;
    if let Some(l) = &hp.latent {
        let queries = match l.q_lora {
            Some(r) => format!("queries through rank {r}"),
            None => "queries projected directly".to_string(),
        };
        writeln!(
            out,
            "  latent          {} + {} rotated values cached per position; heads of {} + {} \
             query/key and {} value dimensions; {queries}",
            l.kv_lora, l.rope, l.nope, l.rope, l.v_dim
        )?;
    }
    writeln!(out, "  ffn width       {}", hp.n_ff)?;
    writeln!(out, "  vocab           {}", hp.n_vocab)?;
    writeln!(out, "  context (train) {}", hp.n_ctx_train)?;
    writeln!(
        out,
        "  norm            {}, eps {:e}, {}-norm",
        s.norm.kind, hp.norm_eps, s.norm.placement
    )?;
    writeln!(out, "  activation      {}", s.activation)?;
    match hp.rope {
        Some(r) => writeln!(
            out,
            "  position        rope ({}), base {}, {} rotary dims{}",
            r.layout,
            r.base,
            r.dims,
            match &m.tensors.rope_freqs {
                Some(name) => format!(", frequencies divided by {name}"),
                None => String::new(),
            } + &match r.scaling {
                RopeScaling::None => String::new(),
                RopeScaling::Linear { factor } => format!(", positions divided by {factor}"),
                RopeScaling::Yarn(y) => format!(
                    ", YaRN x{} over {} positions (attention factor {:.4})",
                    y.factor, y.original_context, y.attn_factor
                ),
                other => format!(", scaling {other:?}"),
            } + &match r.local_base {
                Some(base) => format!(", local layers base {base}"),
                None => String::new(),
            } + &match &m.tensors.rope_factors {
                Some((long, short)) => format!(
                    ", LongRoPE ({long} past {} positions, else {short})",
                    r.original_context
                ),
                None => String::new(),
            } + &match r.attn_factor {
                Some(f) => format!(", cos and sin times {f}"),
                None => String::new(),
            }
        )?,
        None => writeln!(out, "  position        {}", s.position.kind_str())?,
    }
    writeln!(
        out,
        "  attention       {} q/k/v, {}, {}",
        s.attention.qkv,
        if s.attention.bias {
            "biased"
        } else {
            "no bias"
        },
        if s.attention.causal {
            "causal"
        } else {
            "bidirectional"
        }
    )?;
    if let Some(qk) = s.attention.qk_norm {
        let over = match s.attention.qk_norm_over {
            QkNormOver::Head => "per head",
            QkNormOver::Projection => "over the whole projections",
        };
        writeln!(out, "  query/key norm  {qk}, {over}")?;
    }
    if let Some(w) = &hp.sliding_window {
        let local = w.layers.iter().filter(|&&l| l).count();
        writeln!(
            out,
            "  local attention window of {} on {local} of {} layers",
            w.size, hp.n_layer
        )?;
    }
    if let Some(scale) = hp.attn_scale {
        writeln!(out, "  score scale     {scale}")?;
    }
    for (what, cap) in [("scores", hp.attn_softcap), ("logits", hp.final_softcap)] {
        if let Some(cap) = cap {
            writeln!(out, "  soft-capped     {what} at {cap}")?;
        }
    }
    writeln!(out, "  mlp             {}", s.mlp.kind)?;
    if let Some(x) = &hp.experts {
        let renormalized = if x.normalize { ", renormalized" } else { "" };
        write!(
            out,
            "  experts         {} of {} per token, {} wide, {} weights{renormalized}",
            x.used,
            x.count,
            x.n_ff,
            x.gating.as_str()
        )?;
        if let Some(sh) = x.shared {
            let gated = if sh.gated { ", gated" } else { "" };
            write!(out, "; a shared expert {} wide{gated}", sh.n_ff)?;
        }
        writeln!(out)?;
    }
    if let Some(scale) = s.embedding_scale {
        writeln!(out, "  embedding scale {scale}")?;
    }
    if m.tensors.tied_embeddings {
        writeln!(
            out,
            "  embeddings      tied (output reuses {})",
            m.tensors.token_embd
        )?;
    } else {
        writeln!(
            out,
            "  embeddings      separate output ({})",
            m.tensors.output
        )?;
    }
    if !m.unused_tensors.is_empty() {
        writeln!(out, "  unused tensors  {}", m.unused_tensors.join(", "))?;
    }
    Ok(())
}

pub(super) fn model_json(m: &ResolvedModel) -> Value {
    let hp = &m.hparams;
    let s = &m.spec;
    json!({
        "architecture": m.architecture,
        "spec": s.name,
        "network": s.network.as_str(),
        "n_layer": hp.n_layer,
        "n_embd": hp.n_embd,
        "n_head": hp.n_head,
        "n_head_kv": hp.n_head_kv,
        "head_dim": hp.head_dim,
        "n_ff": hp.n_ff,
        "n_vocab": hp.n_vocab,
        "n_ctx_train": hp.n_ctx_train,
        "norm": s.norm.kind.as_str(),
        "norm_eps": hp.norm_eps,
        "activation": s.activation.as_str(),
        "position": s.position.kind_str(),
        "rope": hp.rope.map(|r| json!({
            "base": r.base,
            "dims": r.dims,
            "layout": r.layout.as_str(),
            "freq_factors": m.tensors.rope_freqs,
            "scaling": match r.scaling {
                RopeScaling::None => json!("none"),
                RopeScaling::Linear { factor } => json!({ "type": "linear", "factor": factor }),
                RopeScaling::Yarn(y) => json!({
                    "type": "yarn",
                    "factor": y.factor,
                    "original_context": y.original_context,
                    "beta_fast": y.beta_fast,
                    "beta_slow": y.beta_slow,
                    "attn_factor": y.attn_factor,
                }),
                RopeScaling::LongRope => json!("longrope"),
            },
            "longrope_factors": m.tensors.rope_factors,
            "original_context": r.original_context,
            "attn_factor": r.attn_factor,
            "local_base": r.local_base,
        })),
        "qkv": s.attention.qkv.as_str(),
        "latent": hp.latent.map(|l| json!({
            "q_lora_rank": l.q_lora,
            "kv_lora_rank": l.kv_lora,
            "qk_nope_head_dim": l.nope,
            "qk_rope_head_dim": l.rope,
            "v_head_dim": l.v_dim,
            "mscale_all_dim": l.mscale_all_dim,
        })),
        "qk_norm": s.attention.qk_norm.map(|k| k.as_str()),
        "qk_norm_over": s.attention.qk_norm_over.as_str(),
        "sliding_window": hp.sliding_window.as_ref().map(|w| json!({
            "size": w.size,
            "layers": w.layers,
        })),
        "attn_scale": hp.attn_scale,
        "attn_softcap": hp.attn_softcap,
        "final_softcap": hp.final_softcap,
        "norm_placement": s.norm.placement.as_str(),
        "embedding_scale": s.embedding_scale.map(|e| e.as_str()),
        "mlp": s.mlp.kind.as_str(),
        "experts": hp.experts.map(|x| json!({
            "count": x.count,
            "used": x.used,
            "n_ff": x.n_ff,
            "gating": x.gating.as_str(),
            "normalize": x.normalize,
            "shared": x.shared.map(|sh| json!({"n_ff": sh.n_ff, "gated": sh.gated})),
        })),
        "gate_up": s.mlp.gate_up.as_str(),
        "tied_embeddings": m.tensors.tied_embeddings,
        "unused_tensors": m.unused_tensors,
    })
}
