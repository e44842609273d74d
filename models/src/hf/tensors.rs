//! The weights: Hugging Face names to GGUF's (a decoder's here, an encoder's in
//! `encoder_names`, an encoder-decoder's in `t5_names`), shapes reversed (GGUF lists the
//! fastest-varying dimension first), and the layouts llama.cpp's files differ in: Q and K rows
//! interleaved for "llama" files, Gemma's norm gains stored plus one, experts stacked into one
//! tensor per layer, 1-D tensors in f32, and RoPE tensors computed from `config.json`.
//! Everything else is borrowed from the mapped files, not copied.

use std::borrow::Cow;
use std::collections::BTreeMap;

use hearth_quant::BlockType;

use super::config::{Config, N_LAYER};
use super::encoder_names::{encoder_name, EncoderName};
use super::shapes::{check_shapes, contradiction, Blocks};
use super::t5_names::{first_embedding, t5_name, Stack, T5Name};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;
use crate::safetensors::{Element, SafeTensorInfo, SafetensorsWeights};
use crate::spec::NetworkType;

/// One GGUF tensor, ready for the writer.
pub(crate) struct Converted<'a> {
    pub name: String,
    pub ty: GgmlType,
    pub shape: Vec<u64>,
    pub data: Cow<'a, [u8]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Gate,
    Up,
    Down,
}

impl Part {
    fn gguf(self) -> &'static str {
        match self {
            Part::Gate => "ffn_gate_exps",
            Part::Up => "ffn_up_exps",
            Part::Down => "ffn_down_exps",
        }
    }
}

/// Which names the folder's tensors have: a decoder's, an encoder's (and whether it has a
/// classifier head), or an encoder-decoder's.
#[derive(Clone, Copy)]
enum Network {
    Decoder,
    Encoder { classifier: bool },
    EncoderDecoder,
}

enum Target {
    Global(&'static str),
    Layer(usize, &'static str),
    /// A block of an encoder-decoder's encoder or decoder.
    Block(Stack, usize, &'static str),
    /// A copy of an encoder-decoder's shared embeddings.
    SharedEmbedding,
    Expert {
        layer: usize,
        part: Part,
        expert: usize,
    },
    /// A layer's experts in one tensor, as GPT-OSS stores them.
    Fused(usize, FusedExperts),
    Skip,
}

/// GPT-OSS's experts, each tensor all of a layer's: gate and up in one, their columns
/// interleaved (gate at even, up at odd), products stored transposed ([n_expert, in, out]),
/// or the MXFP4 blocks and scales of the products stored [n_expert, out, in].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FusedExperts {
    /// [n_expert, n_embd, 2 n_ff]
    GateUp,
    /// [n_expert, 2 n_ff]
    GateUpBias,
    /// [n_expert, n_ff, n_embd]
    Down,
    /// [n_expert, n_embd]
    DownBias,
    /// MXFP4: [n_expert, 2 n_ff, n_embd / 32, 16] nibbles and [n_expert, 2 n_ff, n_embd / 32]
    /// exponents, gate and up rows interleaved.
    GateUpBlocks,
    GateUpScales,
    /// MXFP4: [n_expert, n_embd, n_ff / 32, 16] and [n_expert, n_embd, n_ff / 32].
    DownBlocks,
    DownScales,
}

/// Where a Hugging Face tensor goes; `None` for a name this converter does not know.
fn target(name: &str, post_attention_is_post_norm: bool, network: Network) -> Option<Target> {
    match network {
        Network::Encoder { classifier } => {
            return encoder_name(name, classifier).map(|n| match n {
                EncoderName::Global(g) => Target::Global(g),
                EncoderName::Layer(l, g) => Target::Layer(l, g),
                EncoderName::Skip => Target::Skip,
            });
        }
        Network::EncoderDecoder => {
            return t5_name(name).map(|n| match n {
                T5Name::Embedding => Target::SharedEmbedding,
                T5Name::Global(g) => Target::Global(g),
                T5Name::Block(stack, l, g) => Target::Block(stack, l, g),
            });
        }
        Network::Decoder => {}
    }
    if name.ends_with("rotary_emb.inv_freq")
        || [
            "vision_tower",
            "multi_modal_projector",
            "vision_model",
            "audio_tower",
        ]
        .iter()
        .any(|p| name.contains(p))
    {
        return Some(Target::Skip);
    }
    // Multimodal checkpoints nest the text model one level down.
    let name = [
        "model.language_model.",
        "language_model.model.",
        "language_model.",
    ]
    .iter()
    .find_map(|p| name.strip_prefix(p).map(|rest| format!("model.{rest}")))
    .unwrap_or_else(|| name.to_string());
    let name = name.as_str();
    let global = match name {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" | "model.lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(g) = global {
        return Some(Target::Global(g));
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let expert = |prefix: &str, parts: [(&str, Part); 3]| -> Option<Target> {
        let (e, tail) = rest.strip_prefix(prefix)?.split_once('.')?;
        let expert = e.parse().ok()?;
        let part = parts.iter().find(|(suffix, _)| tail == *suffix)?.1;
        Some(Target::Expert {
            layer,
            part,
            expert,
        })
    };
    let fused = match rest {
        "mlp.experts.gate_up_proj" => Some(FusedExperts::GateUp),
        "mlp.experts.gate_up_proj_bias" => Some(FusedExperts::GateUpBias),
        "mlp.experts.down_proj" => Some(FusedExperts::Down),
        "mlp.experts.down_proj_bias" => Some(FusedExperts::DownBias),
        "mlp.experts.gate_up_proj_blocks" => Some(FusedExperts::GateUpBlocks),
        "mlp.experts.gate_up_proj_scales" => Some(FusedExperts::GateUpScales),
        "mlp.experts.down_proj_blocks" => Some(FusedExperts::DownBlocks),
        "mlp.experts.down_proj_scales" => Some(FusedExperts::DownScales),
        _ => None,
    };
    if let Some(f) = fused {
        return Some(Target::Fused(layer, f));
    }
    if let Some(t) = expert(
        "mlp.experts.",
        [
            ("gate_proj.weight", Part::Gate),
            ("up_proj.weight", Part::Up),
            ("down_proj.weight", Part::Down),
        ],
    )
    .or_else(|| {
        expert(
            "block_sparse_moe.experts.",
            [
                ("w1.weight", Part::Gate),
                ("w3.weight", Part::Up),
                ("w2.weight", Part::Down),
            ],
        )
    }) {
        return Some(t);
    }
    let gguf = match rest {
        "input_layernorm.weight" => "attn_norm.weight",
        // Gemma 2/3 normalize after attention and before the MLP separately.
        "post_attention_layernorm.weight" if post_attention_is_post_norm => {
            "post_attention_norm.weight"
        }
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "pre_feedforward_layernorm.weight" => "ffn_norm.weight",
        "post_feedforward_layernorm.weight" => "post_ffw_norm.weight",
        // GLM-4 normalizes each branch's output too, by these names.
        "post_self_attn_layernorm.weight" => "post_attention_norm.weight",
        "post_mlp_layernorm.weight" => "post_ffw_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.o_proj.bias" => "attn_output.bias",
        "self_attn.qkv_proj.weight" => "attn_qkv.weight",
        // Latent attention (DeepSeek-V2/V3); `kv_b_proj` is split into `attn_k_b` and
        // `attn_v_b` (`split_kv_b`).
        "self_attn.q_a_proj.weight" => "attn_q_a.weight",
        "self_attn.q_a_layernorm.weight" => "attn_q_a_norm.weight",
        "self_attn.q_b_proj.weight" => "attn_q_b.weight",
        "self_attn.kv_a_proj_with_mqa.weight" => "attn_kv_a_mqa.weight",
        "self_attn.kv_a_layernorm.weight" => "attn_kv_a_norm.weight",
        "self_attn.kv_b_proj.weight" => "attn_kv_b.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        // Phi-3: gate rows, then up rows.
        "mlp.gate_up_proj.weight" => "ffn_up.weight",
        "mlp.gate.weight" | "block_sparse_moe.gate.weight" | "mlp.router.weight" => {
            "ffn_gate_inp.weight"
        }
        // GPT-OSS: the router's bias, and each head's sink logit.
        "mlp.router.bias" => "ffn_gate_inp.bias",
        "self_attn.sinks" => "attn_sinks.weight",
        "mlp.shared_expert.gate_proj.weight" => "ffn_gate_shexp.weight",
        "mlp.shared_expert.up_proj.weight" => "ffn_up_shexp.weight",
        "mlp.shared_expert.down_proj.weight" => "ffn_down_shexp.weight",
        "mlp.shared_expert_gate.weight" => "ffn_gate_inp_shexp.weight",
        // GLM-4.5: the router's selection bias, the shared experts, and a NextN layer's own
        // tensors.
        "mlp.gate.e_score_correction_bias" => "exp_probs_b.bias",
        "mlp.shared_experts.gate_proj.weight" => "ffn_gate_shexp.weight",
        "mlp.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
        "mlp.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
        "eh_proj.weight" => "nextn.eh_proj.weight",
        "enorm.weight" => "nextn.enorm.weight",
        "hnorm.weight" => "nextn.hnorm.weight",
        "shared_head.norm.weight" => "nextn.shared_head_norm.weight",
        "shared_head.head.weight" => "nextn.shared_head_head.weight",
        "embed_tokens.weight" => "nextn.embed_tokens.weight",
        _ => return None,
    };
    Some(Target::Layer(layer, gguf))
}

fn ggml_type(element: &Element) -> Option<GgmlType> {
    match element {
        Element::F32 => Some(GgmlType::F32),
        Element::F16 => Some(GgmlType::F16),
        Element::BF16 => Some(GgmlType::BF16),
        Element::Other(_) => None,
    }
}

fn to_f32(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let block = match ty {
        GgmlType::F16 => BlockType::F16,
        GgmlType::BF16 => BlockType::BF16,
        _ => BlockType::F32,
    };
    let mut out = vec![0f32; bytes.len() / ty.bytes_for(1).unwrap_or(4) as usize];
    // Sizes agree by construction: one value per element.
    let _ = hearth_quant::dequantize(block, bytes, &mut out);
    out
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Interleaves each head's two halves of rows (`[h][2][d/2]` to `[h][d/2][2]`), as
/// llama.cpp's converter does for files whose RoPE rotates adjacent pairs.
fn permute_rows(bytes: &[u8], rows: usize, heads: usize) -> Option<Vec<u8>> {
    if heads == 0 || rows % (2 * heads) != 0 || bytes.len() % rows != 0 {
        return None;
    }
    let row = bytes.len() / rows;
    let (head, half) = (rows / heads, rows / heads / 2);
    let mut out = Vec::with_capacity(bytes.len());
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let src = h * head + j * half + i;
                out.extend_from_slice(&bytes[src * row..(src + 1) * row]);
            }
        }
    }
    Some(out)
}

/// A safetensors tensor with its name.
type Named<'a> = (&'a str, &'a SafeTensorInfo);

/// Every tensor of the folder, converted, in layer order.
pub(crate) fn tensors<'a>(
    weights: &'a SafetensorsWeights,
    config: &Config,
) -> Result<Vec<Converted<'a>>> {
    let family = config.family;
    let post_norm = family.hf.post_attention_norm
        || weights
            .tensors()
            .any(|(n, _)| n.contains("pre_feedforward_layernorm"));
    let position_offset = config.position_offset()?;
    let network = match family.network {
        NetworkType::EncoderOnly => Network::Encoder {
            classifier: weights
                .tensors()
                .any(|(n, _)| n.ends_with("classifier.weight")),
        },
        NetworkType::EncoderDecoder => Network::EncoderDecoder,
        NetworkType::DecoderOnly => Network::Decoder,
    };
    // A tied output is the embeddings; T5's converter keeps an lm_head whatever the config
    // says (T5 v1.0's checkpoints may store the embeddings' copy there).
    let drop_output = config.tied_embeddings() && !matches!(network, Network::EncoderDecoder);
    let shared = match network {
        Network::EncoderDecoder => first_embedding(weights),
        _ => None,
    };
    // NextN (multi-token prediction) layers follow the decoder's (GLM-4.5), converted as
    // blocks too.
    let n_nextn = config.u64("num_nextn_predict_layers")?.unwrap_or(0);
    let drop_nextn = family.hf.drop_nextn;
    let n_layer = (config.n_layer()? + if drop_nextn { 0 } else { n_nextn }) as usize;
    let n_decoder_layer = config.n_decoder_layer()? as usize;
    let (n_head, n_head_kv) = (config.n_head()? as usize, config.n_head_kv()? as usize);
    let n_experts = config.n_experts()?.unwrap_or(0) as usize;
    let mut out: Vec<(usize, Converted<'a>)> = Vec::new();
    let mut experts: BTreeMap<(usize, Part), Vec<Option<Named<'a>>>> = BTreeMap::new();

    let mut fused: BTreeMap<(usize, FusedExperts), Named<'a>> = BTreeMap::new();
    for (name, info) in weights.tensors() {
        let file = weights.file_of(info);
        let bad = |reason: String| Error::tensor(file, name, reason);
        let target = target(name, post_norm, network)
            .ok_or_else(|| bad(format!("no GGUF name for it in a {} model", family.arch)))?;
        let layer = match target {
            Target::Layer(l, _) | Target::Fused(l, _) => Some(l),
            Target::Expert { layer, .. } => Some(layer),
            _ => None,
        };
        if drop_nextn && layer.is_some_and(|l| l >= n_layer) {
            continue;
        }
        match target {
            Target::Skip => continue,
            Target::Fused(layer, part) => {
                if layer >= n_layer {
                    return Err(contradiction(
                        config,
                        config.named(N_LAYER),
                        format!("{n_layer}, but tensor `{name}` is in layer {layer}"),
                    ));
                }
                fused.insert((layer, part), (name, info));
                continue;
            }
            _ => {}
        }
        let ty = ggml_type(&info.element).ok_or_else(|| {
            bad(format!(
                "{} values (f32, f16 and bf16 convert)",
                info.element.name()
            ))
        })?;
        let shape: Vec<u64> = info.shape.iter().rev().map(|&d| d as u64).collect();
        let bytes = weights.bytes(info);
        let (order, gguf) = match target {
            Target::Skip | Target::Fused(..) => continue,
            Target::Global("output.weight") if drop_output => continue,
            Target::SharedEmbedding if shared != Some(name) => continue,
            Target::SharedEmbedding => (0, "token_embd.weight".to_string()),
            Target::Global(g) => (
                if g == "token_embd.weight" {
                    0
                } else {
                    usize::MAX
                },
                g.to_string(),
            ),
            Target::Layer(l, g) => {
                if l >= n_layer {
                    return Err(contradiction(
                        config,
                        config.named(N_LAYER),
                        format!("{n_layer}, but tensor `{name}` is in layer {l}"),
                    ));
                }
                (l + 1, format!("blk.{l}.{g}"))
            }
            // The encoder's blocks, then the decoder's.
            Target::Block(stack, l, g) => {
                let (n, key, order) = match stack {
                    Stack::Encoder => (n_layer, config.named(N_LAYER), l + 1),
                    Stack::Decoder => (n_decoder_layer, "num_decoder_layers", n_layer + l + 1),
                };
                if l >= n {
                    return Err(contradiction(
                        config,
                        key,
                        format!("{n}, but tensor `{name}` is in block {l}"),
                    ));
                }
                (order, format!("{}.{l}.{g}", stack.prefix()))
            }
            Target::Expert {
                layer,
                part,
                expert,
            } => {
                if expert >= n_experts || layer >= n_layer {
                    return Err(contradiction(
                        config,
                        "num_experts",
                        format!("{n_experts} experts in {n_layer} layers, but `{name}` is expert {expert} of layer {layer}"),
                    ));
                }
                let slots = experts
                    .entry((layer, part))
                    .or_insert_with(|| vec![None; n_experts]);
                slots[expert] = Some((name, info));
                continue;
            }
        };
        // RoBERTa's positions start past its padding row: the rows below go, as llama.cpp's
        // converter drops them.
        let (shape, bytes) = match (gguf.as_str(), position_offset) {
            ("position_embd.weight", Some(offset)) if shape.len() == 2 && offset < shape[1] => {
                let row = bytes.len() / shape[1].max(1) as usize;
                let kept = vec![shape[0], shape[1] - offset];
                (kept, &bytes[offset as usize * row..])
            }
            _ => (shape, bytes),
        };
        let is_vector = shape.len() == 1;
        let data: Cow<'a, [u8]> = if is_vector {
            let mut v = to_f32(ty, bytes);
            if family.hf.norm_plus_one && gguf.ends_with("norm.weight") {
                v.iter_mut().for_each(|x| *x += 1.0);
            }
            Cow::Owned(f32_bytes(&v))
        } else {
            Cow::Borrowed(bytes)
        };
        let ty = if is_vector { GgmlType::F32 } else { ty };
        let heads = match gguf.rsplit('.').nth(1) {
            _ if !family.hf.permute_qk => None,
            Some("attn_q") => Some(n_head),
            Some("attn_k") => Some(n_head_kv),
            _ => None,
        };
        if gguf.ends_with(".attn_kv_b.weight") {
            for (at, t) in split_kv_b(config, &gguf, ty, &shape, &data).map_err(bad)? {
                out.push((order + at, t));
            }
            continue;
        }
        let data = match heads {
            Some(h) => {
                let rows = info.shape[0];
                Cow::Owned(permute_rows(&data, rows, h).ok_or_else(|| {
                    bad(format!("{rows} rows do not split into {h} heads of pairs"))
                })?)
            }
            None => data,
        };
        out.push((
            order,
            Converted {
                name: gguf,
                ty,
                shape,
                data,
            },
        ));
    }

    for ((layer, part), slots) in experts {
        let missing = slots.iter().position(Option::is_none);
        if let Some(e) = missing {
            return Err(Error::tensor(
                &config.path,
                &format!("model.layers.{layer}.mlp.experts.{e}"),
                format!("expert {e} of layer {layer} has no {part:?} projection, though config.json gives {n_experts} experts"),
            ));
        }
        let slots: Vec<Named<'a>> = slots.into_iter().flatten().collect();
        let (first_name, first) = slots[0];
        let ty = ggml_type(&first.element).unwrap_or(GgmlType::F32);
        let mut data = Vec::with_capacity(weights.bytes(first).len() * slots.len());
        for (name, info) in &slots {
            if info.shape != first.shape || info.element != first.element {
                return Err(Error::tensor(
                    weights.file_of(info),
                    name,
                    format!(
                        "{:?} {} where `{first_name}` is {:?} {}: experts must agree",
                        info.shape,
                        info.element.name(),
                        first.shape,
                        first.element.name()
                    ),
                ));
            }
            data.extend_from_slice(weights.bytes(info));
        }
        let mut shape: Vec<u64> = first.shape.iter().rev().map(|&d| d as u64).collect();
        shape.push(slots.len() as u64);
        out.push((
            layer + 1,
            Converted {
                name: format!("blk.{layer}.{}.weight", part.gguf()),
                ty,
                shape,
                data: Cow::Owned(data),
            },
        ));
    }

    for (layer, tensor) in fused_experts(weights, &fused)? {
        out.push((layer + 1, tensor));
    }

    for (name, values) in computed(config)? {
        out.push((
            0,
            Converted {
                name: name.to_string(),
                ty: GgmlType::F32,
                shape: vec![values.len() as u64],
                data: Cow::Owned(f32_bytes(&values)),
            },
        ));
    }
    let (blocks, embeddings) = match network {
        Network::EncoderDecoder => (
            vec![
                Blocks::new("enc.blk", n_layer, config.named(N_LAYER)),
                Blocks::new("dec.blk", n_decoder_layer, "num_decoder_layers"),
            ],
            "shared.weight",
        ),
        _ => (
            vec![Blocks::new("blk", n_layer, config.named(N_LAYER))],
            "model.embed_tokens.weight",
        ),
    };
    let found: Vec<(&str, &[u64])> = out
        .iter()
        .map(|(_, t)| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    check_shapes(config, &found, &blocks, embeddings)?;
    out.sort_by_key(|t| t.0);
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

/// GPT-OSS's experts as llama.cpp's converter writes them: gate and up apart (the even and
/// the odd columns), each product [n_expert, out, in] (GGUF: in, out, n_expert), biases
/// [n_expert, out]; MXFP4 blocks repacked into ggml's MXFP4.
fn fused_experts<'a>(
    weights: &'a SafetensorsWeights,
    fused: &BTreeMap<(usize, FusedExperts), Named<'a>>,
) -> Result<Vec<(usize, Converted<'a>)>> {
    use FusedExperts::*;
    let mut out = Vec::new();
    for (&(layer, part), &(name, info)) in fused {
        let file = weights.file_of(info);
        let bad = |reason: String| Error::tensor(file, name, reason);
        let bytes = weights.bytes(info);
        let dims = &info.shape;
        let gguf = |stem: &str, suffix: &str| format!("blk.{layer}.{stem}.{suffix}");
        let float = || {
            ggml_type(&info.element).ok_or_else(|| {
                bad(format!(
                    "{} values (f32, f16 and bf16 convert)",
                    info.element.name()
                ))
            })
        };
        let rank = |n: usize| match dims.len() == n {
            true => Ok(()),
            false => Err(bad(format!("{dims:?} is not {n}-dimensional"))),
        };
        match part {
            GateUp | Down => {
                rank(3)?;
                let ty = float()?;
                let size = ty.bytes_for(1).unwrap_or(4) as usize;
                let (experts, rows_in, cols) = (dims[0], dims[1], dims[2]);
                // [e][in][out] to [e][out][in]: for gate/up, `pick` of every other column.
                let picks: Vec<(&str, usize, usize)> = match part {
                    GateUp => vec![("ffn_gate_exps", 0, 2), ("ffn_up_exps", 1, 2)],
                    _ => vec![("ffn_down_exps", 0, 1)],
                };
                for (stem, first, step) in picks {
                    let width = cols / step;
                    let mut data = Vec::with_capacity(experts * width * rows_in * size);
                    for e in 0..experts {
                        let expert = &bytes[e * rows_in * cols * size..][..rows_in * cols * size];
                        for o in 0..width {
                            let col = first + o * step;
                            for i in 0..rows_in {
                                let at = (i * cols + col) * size;
                                data.extend_from_slice(&expert[at..at + size]);
                            }
                        }
                    }
                    let shape = vec![rows_in as u64, width as u64, experts as u64];
                    out.push((layer, converted(gguf(stem, "weight"), ty, shape, data)));
                }
            }
            GateUpBias | DownBias => {
                rank(2)?;
                let ty = float()?;
                let values = to_f32(ty, bytes);
                let (experts, cols) = (dims[0], dims[1]);
                let picks: Vec<(&str, usize, usize)> = match part {
                    GateUpBias => vec![("ffn_gate_exps", 0, 2), ("ffn_up_exps", 1, 2)],
                    _ => vec![("ffn_down_exps", 0, 1)],
                };
                for (stem, first, step) in picks {
                    let width = cols / step;
                    let picked: Vec<f32> = (0..experts)
                        .flat_map(|e| (0..width).map(move |o| (e, o)))
                        .map(|(e, o)| values[e * cols + first + o * step])
                        .collect();
                    let shape = vec![width as u64, experts as u64];
                    let data = f32_bytes(&picked);
                    out.push((
                        layer,
                        converted(gguf(stem, "bias"), GgmlType::F32, shape, data),
                    ));
                }
            }
            GateUpScales | DownScales => {
                let blocks_part = match part {
                    GateUpScales => GateUpBlocks,
                    _ => DownBlocks,
                };
                let Some(&(_, blocks)) = fused.get(&(layer, blocks_part)) else {
                    return Err(bad("MXFP4 scales without their blocks".into()));
                };
                rank(3)?;
                let b = &blocks.shape;
                if b.len() != 4 || b[..3] != dims[..] || b[3] != 16 {
                    return Err(bad(format!(
                        "{dims:?} scales for {b:?} blocks (each scale takes 16 bytes)"
                    )));
                }
                let (experts, rows, per_row) = (dims[0], dims[1], dims[2]);
                let nibbles = weights.bytes(blocks);
                let picks: Vec<(&str, usize, usize)> = match part {
                    GateUpScales => vec![("ffn_gate_exps", 0, 2), ("ffn_up_exps", 1, 2)],
                    _ => vec![("ffn_down_exps", 0, 1)],
                };
                for (stem, first, step) in picks {
                    let kept = rows / step;
                    let mut data = Vec::with_capacity(experts * kept * per_row * 17);
                    for e in 0..experts {
                        for r in 0..kept {
                            let row = e * rows + first + r * step;
                            for blk in 0..per_row {
                                let at = row * per_row + blk;
                                data.push(bytes[at]);
                                data.extend(mxfp4_nibbles(&nibbles[at * 16..][..16]));
                            }
                        }
                    }
                    let shape = vec![(per_row * 32) as u64, kept as u64, experts as u64];
                    out.push((
                        layer,
                        converted(gguf(stem, "weight"), GgmlType::MXFP4, shape, data),
                    ));
                }
            }
            GateUpBlocks | DownBlocks => {
                let scales_part = match part {
                    GateUpBlocks => GateUpScales,
                    _ => DownScales,
                };
                if !fused.contains_key(&(layer, scales_part)) {
                    return Err(bad("MXFP4 blocks without their scales".into()));
                }
            }
        }
    }
    Ok(out)
}

/// One block's 32 values of 4 bits as OpenAI stores them (byte j: value 2j in the low
/// nibble, 2j + 1 in the high) in ggml's MXFP4 order (byte j: value j low, j + 16 high).
fn mxfp4_nibbles(block: &[u8]) -> [u8; 16] {
    let value = |k: usize| (block[k / 2] >> (4 * (k % 2))) & 0x0F;
    std::array::from_fn(|j| value(j) | (value(j + 16) << 4))
}

fn converted<'a>(name: String, ty: GgmlType, shape: Vec<u64>, data: Vec<u8>) -> Converted<'a> {
    Converted {
        name,
        ty,
        shape,
        data: Cow::Owned(data),
    }
}

/// Latent attention's `kv_b_proj` ([n_head * (nope + v_head_dim), kv_lora], each head's key
/// rows then its value rows) as llama.cpp's converter splits it for the absorbed form: each
/// head's key rows transposed (`attn_k_b`, [n_head][kv_lora][nope]: GGUF [nope, kv_lora,
/// n_head]) and its value rows as they are (`attn_v_b`, [n_head][v_head_dim][kv_lora]: GGUF
/// [kv_lora, v_head_dim, n_head]).
fn split_kv_b<'a>(
    config: &Config,
    gguf: &str,
    ty: GgmlType,
    shape: &[u64],
    data: &[u8],
) -> std::result::Result<Vec<(usize, Converted<'a>)>, String> {
    let number = |k: &str| -> std::result::Result<usize, String> {
        match config.u64(k) {
            Ok(Some(v)) => Ok(v as usize),
            _ => Err(format!(
                "latent attention's `{k}` is missing from config.json"
            )),
        }
    };
    let (heads, nope, v) = (
        number("num_key_value_heads").or_else(|_| number("num_attention_heads"))?,
        number("qk_nope_head_dim")?,
        number("v_head_dim")?,
    );
    let size = ty.bytes_for(1).unwrap_or(4) as usize;
    let (rows, lora) = match shape {
        [cols, rows] => (*rows as usize, *cols as usize),
        _ => return Err(format!("{shape:?} is not a matrix")),
    };
    if rows != heads * (nope + v) || data.len() != rows * lora * size {
        return Err(format!(
            "{rows} rows are not {heads} heads of {nope} key and {v} value rows"
        ));
    }
    let row = |r: usize| &data[r * lora * size..(r + 1) * lora * size];
    let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
    for h in 0..heads {
        let first = h * (nope + v);
        for i in 0..lora {
            for c in 0..nope {
                k_b.extend_from_slice(&row(first + c)[i * size..(i + 1) * size]);
            }
        }
        for r in 0..v {
            v_b.extend_from_slice(row(first + nope + r));
        }
    }
    let stem = gguf.trim_end_matches("attn_kv_b.weight");
    let (h, n, v, l) = (heads as u64, nope as u64, v as u64, lora as u64);
    Ok(vec![
        (
            0,
            converted(format!("{stem}attn_k_b.weight"), ty, vec![n, l, h], k_b),
        ),
        (
            0,
            converted(format!("{stem}attn_v_b.weight"), ty, vec![l, v, h], v_b),
        ),
    ])
}

/// The tensors llama.cpp computes from `config.json`: Llama 3.1's frequency divisors and
/// LongRoPE's long and short factors.
fn computed(config: &Config) -> Result<Vec<(&'static str, Vec<f32>)>> {
    let mut out = Vec::new();
    if let Some(rule) = config.llama3_rope()? {
        let base = config.rope_base()?.unwrap_or(10000.0) as f32;
        out.push((
            "rope_freqs.weight",
            rule.factors(config.head_dim()? as usize, base),
        ));
    }
    if let (Some(long), Some(short)) = (
        config.rope_factors("long_factor")?,
        config.rope_factors("short_factor")?,
    ) {
        let partial = config.rope_f64("partial_rotary_factor")?.unwrap_or(1.0);
        let dims = (partial * config.head_dim()? as f64) as usize;
        for (key, v) in [("long_factor", &long), ("short_factor", &short)] {
            if v.len() * 2 != dims {
                return Err(contradiction(
                    config,
                    &format!("rope_parameters.{key}"),
                    format!(
                        "{} factors, but {dims} rotated dimensions take {}",
                        v.len(),
                        dims / 2
                    ),
                ));
            }
        }
        out.push(("rope_factors_long.weight", long));
        out.push(("rope_factors_short.weight", short));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenAI's MXFP4 blocks (value 2j in the low nibble of byte j, 2j + 1 in the high, as
    /// transformers unpacks them) dequantize through ggml's layout to the same values.
    #[test]
    fn mxfp4_blocks_keep_their_values() {
        use hearth_quant::formats::mxfp4::{BlockMxfp4, LEVELS};
        let codes: Vec<u8> = (0..32u8).map(|k| (k * 7 + 3) % 16).collect();
        let openai: Vec<u8> = codes.chunks(2).map(|p| p[0] | (p[1] << 4)).collect();
        let block = BlockMxfp4 {
            e: 128,
            qs: mxfp4_nibbles(&openai),
        };
        let mut out = [0f32; 32];
        block.dequantize(&mut out);
        for (k, (&v, &code)) in out.iter().zip(&codes).enumerate() {
            // e = 128: a scale of 2, on levels that are the values doubled.
            assert_eq!(v, f32::from(LEVELS[usize::from(code)]), "value {k}");
        }
    }

    #[test]
    fn permuting_interleaves_each_heads_halves() {
        // 2 heads of 4 rows, one byte per row: [a0 a1 b0 b1] per head becomes [a0 b0 a1 b1].
        let rows: Vec<u8> = (0..8).collect();
        assert_eq!(
            permute_rows(&rows, 8, 2).unwrap(),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
        assert!(permute_rows(&rows, 8, 3).is_none());
    }

    #[test]
    fn names_map_as_llama_cpp_maps_them() {
        let layer = |name: &str, post: bool| match target(name, post, Network::Decoder) {
            Some(Target::Layer(l, g)) => Some(format!("blk.{l}.{g}")),
            _ => None,
        };
        assert_eq!(
            layer("model.layers.3.post_attention_layernorm.weight", false).as_deref(),
            Some("blk.3.ffn_norm.weight")
        );
        assert_eq!(
            layer("model.layers.3.post_attention_layernorm.weight", true).as_deref(),
            Some("blk.3.post_attention_norm.weight")
        );
        assert_eq!(
            layer(
                "model.language_model.layers.0.self_attn.q_norm.weight",
                false
            )
            .as_deref(),
            Some("blk.0.attn_q_norm.weight")
        );
        assert!(matches!(
            target(
                "model.layers.1.block_sparse_moe.experts.7.w2.weight",
                false,
                Network::Decoder
            ),
            Some(Target::Expert {
                layer: 1,
                part: Part::Down,
                expert: 7
            })
        ));
        assert!(matches!(
            target(
                "model.vision_tower.blocks.0.attn.weight",
                false,
                Network::Decoder
            ),
            Some(Target::Skip)
        ));
        assert!(target("model.layers.0.mystery.weight", false, Network::Decoder).is_none());
    }
}
