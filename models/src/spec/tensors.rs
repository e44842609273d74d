//! The weight tensors a spec names, resolved for one file: every name per layer, each checked
//! against the file's index with the shape the hyperparameters give.

use super::checker::Checker;
use super::{
    GateUpLayout, HyperParams, LatentParams, LayerTensorNames, MlpKind, ModelSpec, NormKind,
    NormPlacement, PositionSpec, QkNormOver, QkvLayout, Seq2SeqTensorNames, TiedEmbeddings,
    LAYER_PLACEHOLDER,
};
use crate::error::{Error, Result};

/// A linear layer: weight and optional bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linear {
    pub weight: String,
    pub bias: Option<String>,
}

/// A norm's scale and (for layer norm) shift.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormTensors {
    pub weight: String,
    pub bias: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QkvTensors {
    Separate {
        q: Linear,
        k: Linear,
        v: Linear,
    },
    /// Output rows are [q (n_head*head_dim) | k (n_head_kv*head_dim) | v (same)].
    Fused(Linear),
    /// Multi-head latent attention (`attention.qkv = "latent"`).
    Latent(LatentTensors),
}

/// Latent attention's tensors (see `LatentParams` for the widths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatentTensors {
    pub q: LatentQuery,
    /// [n_embd, kv_lora + rope]: the latent, then the rotated key every head shares.
    pub kv_a: String,
    /// [kv_lora]
    pub kv_a_norm: NormTensors,
    pub kv_b: LatentExpansion,
}

/// How latent attention's queries are projected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LatentQuery {
    /// [n_embd, n_head * (nope + rope)]
    Direct(String),
    /// [n_embd, q_lora], an RMSNorm [q_lora], then [q_lora, n_head * (nope + rope)].
    LowRank {
        a: String,
        norm: NormTensors,
        b: String,
    },
}

/// Each head's expansion of the latent into its key's unrotated part and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LatentExpansion {
    /// `k_b` [nope, kv_lora, n_head]: head h's [kv_lora, nope] (each row one latent value's
    /// weights on the key's unrotated part, so that it takes a query into the latent's space);
    /// `v_b` [kv_lora, v_head_dim, n_head]: head h's [v_head_dim, kv_lora].
    Split { k_b: String, v_b: String },
    /// Older files: [kv_lora, n_head * (nope + v_head_dim)], each head's key rows then its
    /// value rows.
    Fused(String),
}

/// The tensors of one block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerTensors {
    pub attn_norm: NormTensors,
    pub qkv: QkvTensors,
    /// Per-head query and key norms ([head_dim] each), for `attention.qk_norm`.
    pub q_norm: Option<NormTensors>,
    pub k_norm: Option<NormTensors>,
    pub attn_output: Linear,
    /// Each query head's sink logit ([n_head]), for `attention.sinks`.
    pub attn_sinks: Option<String>,
    /// Norms of the attention and MLP outputs (`norm.placement = "sandwich"`).
    pub attn_post_norm: Option<NormTensors>,
    pub ffn_norm: NormTensors,
    pub ffn_post_norm: Option<NormTensors>,
    pub mlp: MlpTensors,
}

/// A block's MLP: one, or a mixture of experts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MlpTensors {
    Dense {
        /// Present for gated MLPs with separate projections.
        gate: Option<Linear>,
        /// [n_embd, n_ff], or [n_embd, 2 n_ff] of gate outputs then up outputs for a gated
        /// MLP without `gate` (`mlp.gate_up = "fused"`).
        up: Linear,
        down: Linear,
    },
    Experts {
        /// [n_embd, n_expert]
        router: String,
        /// [n_embd, n_ff_exp, n_expert] each: expert e's rows at e * n_ff_exp.
        gate: String,
        up: String,
        /// [n_ff_exp, n_embd, n_expert]
        down: String,
        /// The expert every token runs besides its routed ones.
        shared: Option<SharedExpertTensors>,
        /// Biases of the router and of every expert's products, with `mlp.bias` (GPT-OSS).
        biases: Option<ExpertBiases>,
        /// [n_expert]: the selection bias (`tensors.layer.ffn_exp_probs_b`), where the file
        /// has it.
        select_bias: Option<String>,
    },
}

/// A mixture of experts' biases: the router's ([n_expert]) and each expert's gate and up
/// ([n_ff_exp, n_expert]) and down ([n_embd, n_expert]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertBiases {
    pub router: String,
    pub gate: String,
    pub up: String,
    pub down: String,
}

/// A shared expert's gated MLP, [n_embd, n_ff_shexp] gate and up and [n_ff_shexp, n_embd]
/// down, and its gate ([n_embd]), where it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedExpertTensors {
    pub gate: String,
    pub up: String,
    pub down: String,
    pub gate_inp: Option<String>,
}

/// Every weight tensor the network reads, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelTensors {
    /// [n_embd, n_vocab]
    pub token_embd: String,
    /// [n_embd, n_ctx_train], for learned positions.
    pub position_embd: Option<String>,
    /// [n_embd, n_token_types], where the spec names it and the file has it.
    pub token_types: Option<String>,
    /// The norm of the embeddings before the first block (BERT).
    pub embd_norm: Option<NormTensors>,
    /// The norm after the last block, where the network has one (every decoder).
    pub output_norm: Option<NormTensors>,
    /// A classifier head's dense layer and tanh (BERT's pooler), where the file has one.
    pub cls: Option<Linear>,
    /// A classifier head's output layer, [n_embd, n_labels], where the file has one.
    pub cls_output: Option<Linear>,
    /// [n_embd, n_vocab]; equal to `token_embd` when the embeddings are tied.
    pub output: String,
    pub tied_embeddings: bool,
    /// [rope dims / 2] f32 divisors of RoPE's per-pair frequencies (Llama 3's scaling), when
    /// the spec names them and the file has them.
    pub rope_freqs: Option<String>,
    /// LongRoPE's (long, short) divisors, [rope dims / 2] each, where the file has both.
    pub rope_factors: Option<(String, String)>,
    /// The decoder's blocks (an encoder's, for an encoder-only network).
    pub layers: Vec<LayerTensors>,
    /// An encoder-decoder network's encoder and cross-attention.
    pub seq2seq: Option<Seq2SeqTensors>,
}

/// What an encoder-decoder network has beyond its decoder's blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seq2SeqTensors {
    pub encoder_layers: Vec<LayerTensors>,
    pub encoder_norm: NormTensors,
    /// Each encoder block's relative position bias ([n_head, buckets]): its own, or the first
    /// block's; empty where the position embedding is not relative.
    pub encoder_relative_bias: Vec<String>,
    /// Each decoder block's, likewise.
    pub decoder_relative_bias: Vec<String>,
    /// Each decoder block's cross-attention.
    pub cross: Vec<CrossAttentionTensors>,
}

/// A decoder block's attention over the encoder's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossAttentionTensors {
    pub norm: NormTensors,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub output: Linear,
}

impl ModelSpec {
    pub(super) fn tensors_for(
        &self,
        hp: &HyperParams,
        c: &mut Checker<'_>,
    ) -> Result<ModelTensors> {
        let names = &self.tensors;
        let (e, v) = (hp.n_embd as u64, hp.n_vocab as u64);
        let layer_norm = self.norm.kind == NormKind::Layer;

        let token_embd = c.require(&names.token_embd, &[e, v], "n_embd x n_vocab")?;
        let position_embd = match (&self.position, &names.position_embd) {
            (PositionSpec::Learned, Some(n)) => {
                Some(c.require(n, &[e, hp.n_ctx_train as u64], "n_embd x n_ctx_train")?)
            }
            _ => None,
        };
        let token_types = match names
            .token_types
            .as_ref()
            .filter(|n| c.file.tensor(n).is_some())
        {
            Some(n) => {
                // Their count is the tensor's: BERT has two, RoBERTa one.
                let count = c
                    .file
                    .tensor(n)
                    .and_then(|t| t.shape.get(1).copied())
                    .unwrap_or(0);
                Some(c.require(n, &[e, count.max(1)], "n_embd x token types")?)
            }
            None => None,
        };
        let embd_norm = match &names.embd_norm {
            Some(n) => Some(c.norm(n, e, layer_norm, "n_embd")?),
            None => None,
        };
        let output_norm = match &names.output_norm {
            Some(n) => Some(c.norm(n, e, layer_norm, "n_embd")?),
            None => None,
        };
        let rope_freqs = match (hp.rope, &names.rope_freqs) {
            (Some(r), Some(n)) if c.file.tensor(n).is_some() => {
                Some(c.require(n, &[r.dims as u64 / 2], "rope dimensions / 2")?)
            }
            _ => None,
        };
        let in_file = |n: &Option<String>| n.clone().filter(|n| c.file.tensor(n).is_some());
        let cls = match in_file(&names.cls) {
            Some(n) => Some(c.linear(&n, e, e, true)?),
            None => None,
        };
        let cls_output = match in_file(&names.cls_output) {
            Some(n) => {
                let labels = c.file.tensor(&n).and_then(|t| t.shape.get(1).copied());
                Some(c.linear(&n, e, labels.unwrap_or(1).max(1), true)?)
            }
            None => None,
        };
        let rope_factors = match (hp.rope, in_file(&names.rope_factors_long)) {
            (Some(r), Some(long)) => {
                let short = names.rope_factors_short.clone().unwrap_or_default();
                let pairs = [r.dims as u64 / 2];
                let long = c.require(&long, &pairs, "rope dimensions / 2")?;
                let short = c.require(&short, &pairs, "rope dimensions / 2")?;
                Some((long, short))
            }
            _ => None,
        };
        let output_in_file = names.output.as_ref().filter(|n| c.file.tensor(n).is_some());
        let tied = match self.tied_embeddings {
            TiedEmbeddings::Always => true,
            TiedEmbeddings::Never => false,
            TiedEmbeddings::WhenOutputAbsent => output_in_file.is_none(),
        };
        let output = match (tied, &names.output) {
            (true, _) => token_embd.clone(),
            (false, Some(n)) => c.require(n, &[e, v], "n_embd x n_vocab")?,
            // validate() guarantees an output name unless embeddings are always tied.
            (false, None) => return Err(Error::spec(&self.name, "no output tensor named")),
        };

        // block_count comes from the file: never size an allocation by it alone.
        let cap = |n: usize| n.min(c.file.tensors().len());
        let mut layers = Vec::with_capacity(cap(hp.n_layer));
        for i in 0..hp.n_layer {
            layers.push(self.layer_tensors(&names.layer, i, hp, c)?);
        }
        let seq2seq = match (&names.seq2seq, hp.seq2seq) {
            (Some(n), Some(p)) => Some(self.seq2seq_tensors(n, p.n_encoder_layer, hp, c)?),
            _ => None,
        };
        Ok(ModelTensors {
            token_embd,
            position_embd,
            token_types,
            embd_norm,
            output_norm,
            cls,
            cls_output,
            output,
            tied_embeddings: tied,
            rope_freqs,
            rope_factors,
            layers,
            seq2seq,
        })
    }

    /// The tensors of block `i` named by `l`.
    fn layer_tensors(
        &self,
        l: &LayerTensorNames,
        i: usize,
        hp: &HyperParams,
        c: &mut Checker<'_>,
    ) -> Result<LayerTensors> {
        let e = hp.n_embd as u64;
        let q_dim = hp.n_head as u64 * hp.head_dim as u64;
        let kv_dim = hp.n_head_kv as u64 * hp.head_dim as u64;
        let qkv_dim = q_dim.saturating_add(kv_dim.saturating_mul(2));
        let ff = hp.n_ff as u64;
        let layer_norm = self.norm.kind == NormKind::Layer;
        let (attn_bias, out_bias, mlp_bias) = (
            self.attention.bias,
            self.attention.output_bias,
            self.mlp.bias,
        );
        let name = |pattern: &str| pattern.replace(LAYER_PLACEHOLDER, &i.to_string());
        let named = |pattern: &Option<String>| -> Result<String> {
            pattern
                .as_deref()
                .map(name)
                .ok_or_else(|| Error::spec(&self.name, "tensor name missing"))
        };
        let qkv = match (self.attention.qkv, hp.latent) {
            (QkvLayout::Latent, Some(lt)) => {
                QkvTensors::Latent(latent_tensors(l, &named, hp, lt, c)?)
            }
            (QkvLayout::Latent, None) => {
                return Err(Error::spec(
                    &self.name,
                    "latent attention without its sizes",
                ))
            }
            (QkvLayout::Separate, _) => QkvTensors::Separate {
                q: c.linear(&named(&l.attn_q)?, e, q_dim, attn_bias)?,
                k: c.linear(&named(&l.attn_k)?, e, kv_dim, attn_bias)?,
                v: c.linear(&named(&l.attn_v)?, e, kv_dim, attn_bias)?,
            },
            (QkvLayout::Fused, _) => {
                QkvTensors::Fused(c.linear(&named(&l.attn_qkv)?, e, qkv_dim, attn_bias)?)
            }
        };
        // The output projection reads every head's value: latent attention's are their own
        // width.
        let out_dim = match hp.latent {
            Some(lt) => hp.n_head as u64 * lt.v_dim as u64,
            None => q_dim,
        };
        let hd = hp.head_dim as u64;
        let whole = self.attention.qk_norm_over == QkNormOver::Projection;
        let head_norm = |c: &mut Checker<'_>, pattern: &Option<String>, heads: u64| {
            let (n, meaning) = match whole {
                true => (heads * hd, "heads x head_dim"),
                false => (hd, "head_dim"),
            };
            let Some(kind) = self.attention.qk_norm else {
                return Ok(None);
            };
            let name = named(pattern)?;
            if self.attention.qk_norm_optional && c.file.tensor(&name).is_none() {
                return Ok(None);
            }
            Ok(Some(c.norm(&name, n, kind == NormKind::Layer, meaning)?))
        };
        let q_norm = head_norm(c, &l.attn_q_norm, hp.n_head as u64)?;
        let k_norm = head_norm(c, &l.attn_k_norm, hp.n_head_kv as u64)?;
        let fused = self.mlp.gate_up == GateUpLayout::Fused;
        let mlp = match hp.experts.filter(|x| x.at(i)) {
            Some(x) => {
                let (n, ffx) = (x.count as u64, x.n_ff as u64);
                let stacked = "n_embd x n_ff_exp x n_expert";
                let bias =
                    |c: &mut Checker<'_>, pattern: &Option<String>, shape: &[u64], meaning| {
                        let weight = named(pattern)?;
                        let name = weight
                            .strip_suffix(".weight")
                            .unwrap_or(&weight)
                            .to_string();
                        c.require(&format!("{name}.bias"), shape, meaning)
                    };
                let biases = match mlp_bias {
                    true => Some(ExpertBiases {
                        router: bias(c, &l.ffn_gate_inp, &[n], "n_expert")?,
                        gate: bias(c, &l.ffn_gate_exps, &[ffx, n], "n_ff_exp x n_expert")?,
                        up: bias(c, &l.ffn_up_exps, &[ffx, n], "n_ff_exp x n_expert")?,
                        down: bias(c, &l.ffn_down_exps, &[e, n], "n_embd x n_expert")?,
                    }),
                    false => None,
                };
                let select_bias = match l.ffn_exp_probs_b.as_deref().map(name) {
                    Some(b) if c.file.tensor(&b).is_some() => {
                        Some(c.require(&b, &[n], "n_expert")?)
                    }
                    _ => None,
                };
                MlpTensors::Experts {
                    biases,
                    select_bias,
                    router: c.require(&named(&l.ffn_gate_inp)?, &[e, n], "n_embd x n_expert")?,
                    gate: c.require(&named(&l.ffn_gate_exps)?, &[e, ffx, n], stacked)?,
                    up: c.require(&named(&l.ffn_up_exps)?, &[e, ffx, n], stacked)?,
                    down: c.require(
                        &named(&l.ffn_down_exps)?,
                        &[ffx, e, n],
                        "n_ff_exp x n_embd x n_expert",
                    )?,
                    shared: match x.shared {
                        Some(sh) => {
                            let ffs = sh.n_ff as u64;
                            Some(SharedExpertTensors {
                                gate: c.require(
                                    &named(&l.ffn_gate_shexp)?,
                                    &[e, ffs],
                                    "n_embd x n_ff_shexp",
                                )?,
                                up: c.require(
                                    &named(&l.ffn_up_shexp)?,
                                    &[e, ffs],
                                    "n_embd x n_ff_shexp",
                                )?,
                                down: c.require(
                                    &named(&l.ffn_down_shexp)?,
                                    &[ffs, e],
                                    "n_ff_shexp x n_embd",
                                )?,
                                gate_inp: match sh.gated {
                                    true => Some(c.require(
                                        &named(&l.ffn_gate_inp_shexp)?,
                                        &[e],
                                        "n_embd",
                                    )?),
                                    false => None,
                                },
                            })
                        }
                        None => None,
                    },
                }
            }
            None => MlpTensors::Dense {
                gate: match self.mlp.kind {
                    // T5 v1.0's files have no gate (`mlp.ungated_activation`).
                    MlpKind::Gated
                        if self.mlp.ungated_activation.is_some()
                            && c.file.tensor(&named(&l.ffn_gate)?).is_none() =>
                    {
                        None
                    }
                    MlpKind::Gated if !fused => {
                        Some(c.linear(&named(&l.ffn_gate)?, e, ff, mlp_bias)?)
                    }
                    _ => None,
                },
                up: c.linear(
                    &name(&l.ffn_up),
                    e,
                    if fused { 2 * ff } else { ff },
                    mlp_bias,
                )?,
                down: c.linear(&name(&l.ffn_down), ff, e, mlp_bias)?,
            },
        };
        let sandwich = self.norm.placement == NormPlacement::Sandwich;
        let post_norm = |c: &mut Checker<'_>, pattern: &Option<String>| match sandwich {
            true => Ok(Some(c.norm(&named(pattern)?, e, layer_norm, "n_embd")?)),
            false => Ok(None),
        };
        Ok(LayerTensors {
            attn_norm: c.norm(&name(&l.attn_norm), e, layer_norm, "n_embd")?,
            qkv,
            q_norm,
            k_norm,
            attn_output: c.linear(&name(&l.attn_output), out_dim, e, out_bias)?,
            attn_sinks: match self.attention.sinks {
                true => Some(c.require(&named(&l.attn_sinks)?, &[hp.n_head as u64], "n_head")?),
                false => None,
            },
            attn_post_norm: post_norm(c, &l.attn_post_norm)?,
            ffn_norm: c.norm(&name(&l.ffn_norm), e, layer_norm, "n_embd")?,
            ffn_post_norm: post_norm(c, &l.ffn_post_norm)?,
            mlp,
        })
    }

    /// The encoder's `n_encoder` blocks, its norm, the relative biases and each decoder
    /// block's cross-attention.
    fn seq2seq_tensors(
        &self,
        n: &Seq2SeqTensorNames,
        n_encoder: usize,
        hp: &HyperParams,
        c: &mut Checker<'_>,
    ) -> Result<Seq2SeqTensors> {
        let e = hp.n_embd as u64;
        let q_dim = hp.n_head as u64 * hp.head_dim as u64;
        let kv_dim = hp.n_head_kv as u64 * hp.head_dim as u64;
        let layer_norm = self.norm.kind == NormKind::Layer;
        let cap = |n: usize| n.min(c.file.tensors().len());
        let mut encoder_layers = Vec::with_capacity(cap(n_encoder));
        for i in 0..n_encoder {
            encoder_layers.push(self.layer_tensors(&n.encoder_layer, i, hp, c)?);
        }
        let encoder_norm = c.norm(&n.encoder_norm, e, layer_norm, "n_embd")?;
        let buckets = hp.relative.map(|r| r.buckets as u64);
        let relative = |c: &mut Checker<'_>, pattern: &Option<String>, count: usize| {
            let (Some(buckets), Some(pattern)) = (buckets, pattern) else {
                return Ok(Vec::new());
            };
            let name = |i: usize| pattern.replace(LAYER_PLACEHOLDER, &i.to_string());
            let shape = [hp.n_head as u64, buckets];
            let first = c.require(&name(0), &shape, "n_head x relative buckets")?;
            (0..count)
                .map(|i| match c.file.tensor(&name(i)) {
                    Some(_) if i > 0 => c.require(&name(i), &shape, "n_head x relative buckets"),
                    _ => Ok(first.clone()),
                })
                .collect::<Result<Vec<_>>>()
        };
        let encoder_relative_bias = relative(c, &n.encoder_relative_bias, n_encoder)?;
        let decoder_relative_bias = relative(c, &n.decoder_relative_bias, hp.n_layer)?;
        let mut cross = Vec::with_capacity(cap(hp.n_layer));
        for i in 0..hp.n_layer {
            let name = |pattern: &str| pattern.replace(LAYER_PLACEHOLDER, &i.to_string());
            let (attn_bias, out_bias) = (self.attention.bias, self.attention.output_bias);
            cross.push(CrossAttentionTensors {
                norm: c.norm(&name(&n.cross_norm), e, layer_norm, "n_embd")?,
                q: c.linear(&name(&n.cross_q), e, q_dim, attn_bias)?,
                k: c.linear(&name(&n.cross_k), e, kv_dim, attn_bias)?,
                v: c.linear(&name(&n.cross_v), e, kv_dim, attn_bias)?,
                output: c.linear(&name(&n.cross_output), q_dim, e, out_bias)?,
            });
        }
        Ok(Seq2SeqTensors {
            encoder_layers,
            encoder_norm,
            encoder_relative_bias,
            decoder_relative_bias,
            cross,
        })
    }
}

/// Block `l`'s latent attention tensors: the low-rank queries where the file gives their
/// rank, the split expansions where the file has them (else the older fused one).
fn latent_tensors(
    l: &LayerTensorNames,
    named: &dyn Fn(&Option<String>) -> Result<String>,
    hp: &HyperParams,
    lt: LatentParams,
    c: &mut Checker<'_>,
) -> Result<LatentTensors> {
    let (e, heads) = (hp.n_embd as u64, hp.n_head as u64);
    let (kv_lora, rope) = (lt.kv_lora as u64, lt.rope as u64);
    let (nope, v) = (lt.nope as u64, lt.v_dim as u64);
    let q_dim = heads * lt.qk_dim() as u64;
    let q = match lt.q_lora {
        Some(r) => {
            let r = r as u64;
            LatentQuery::LowRank {
                a: c.require(&named(&l.attn_q_a)?, &[e, r], "n_embd x q_lora_rank")?,
                norm: c.norm(&named(&l.attn_q_a_norm)?, r, false, "q_lora_rank")?,
                b: c.require(
                    &named(&l.attn_q_b)?,
                    &[r, q_dim],
                    "q_lora_rank x n_head * (nope + rope)",
                )?,
            }
        }
        None => LatentQuery::Direct(c.require(
            &named(&l.attn_q)?,
            &[e, q_dim],
            "n_embd x n_head * (nope + rope)",
        )?),
    };
    let split = l.attn_k_b.is_some() && c.file.tensor(&named(&l.attn_k_b)?).is_some();
    let kv_b = match split || l.attn_kv_b.is_none() {
        true => LatentExpansion::Split {
            k_b: c.require(
                &named(&l.attn_k_b)?,
                &[nope, kv_lora, heads],
                "nope x kv_lora_rank x n_head",
            )?,
            v_b: c.require(
                &named(&l.attn_v_b)?,
                &[kv_lora, v, heads],
                "kv_lora_rank x v_head_dim x n_head",
            )?,
        },
        false => LatentExpansion::Fused(c.require(
            &named(&l.attn_kv_b)?,
            &[kv_lora, heads * (nope + v)],
            "kv_lora_rank x n_head * (nope + v_head_dim)",
        )?),
    };
    Ok(LatentTensors {
        q,
        kv_a: c.require(
            &named(&l.attn_kv_a_mqa)?,
            &[e, kv_lora + rope],
            "n_embd x kv_lora_rank + rope",
        )?,
        kv_a_norm: c.norm(&named(&l.attn_kv_a_norm)?, kv_lora, false, "kv_lora_rank")?,
        kv_b,
    })
}
