//! A spec resolved against one model file: hyperparameters from the file's metadata and the
//! name of every weight tensor, each checked against the file's tensor index. The runtime
//! executes a [`ResolvedModel`] without looking at metadata or the spec text again.

use std::collections::HashSet;

use super::{
    known_architectures, spec_for_architecture, GateUpLayout, MlpKind, ModelSpec, NetworkType,
    NormKind, NormPlacement, PositionSpec, QkvLayout, RopeLayout, TiedEmbeddings,
    LAYER_PLACEHOLDER,
};
use crate::error::{Error, Result};
use crate::gguf::{GgufFile, MetaArray, MetaValue};

/// RoPE parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Frequency base (theta).
    pub base: f32,
    /// Leading dimensions of each head that rotate; the rest pass through.
    pub dims: usize,
    pub layout: RopeLayout,
    /// Context extension from `{arch}.rope.scaling.type` and `.factor`.
    pub scaling: RopeScaling,
    /// The base local (windowed) layers rotate with, unscaled, where they have their own.
    pub local_base: Option<f32>,
    /// A factor on cos and sin (`{arch}.rope.scaling.attn_factor`: LongRoPE's).
    pub attn_factor: Option<f32>,
    /// The context before any extension (`{arch}.rope.scaling.original_context_length`, else
    /// the training context): where LongRoPE switches to its long factors.
    pub original_context: usize,
}

/// How a model stretches RoPE past the context it was trained with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (position interpolation).
    Linear {
        factor: f32,
    },
    /// YaRN: each pair's frequency blended between interpolated (divided by `factor`) and
    /// kept, by where its wavelength falls against the original context.
    Yarn(Yarn),
    /// Phi-3's LongRoPE (short and long factor tables).
    LongRope,
}

/// Sliding-window (local) attention: the layers it applies to attend only to the `size` most
/// recent positions, their own included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    pub size: usize,
    /// One per layer: whether the layer is windowed.
    pub layers: Vec<bool>,
}

impl SlidingWindow {
    /// Layer `l`'s window, `None` for a global layer.
    pub fn of_layer(&self, l: usize) -> Option<usize> {
        self.layers
            .get(l)
            .copied()
            .unwrap_or(false)
            .then_some(self.size)
    }
}

/// YaRN's parameters, as Hugging Face's `rope_scaling` of type `yarn` and llama.cpp's
/// `{arch}.rope.scaling.*` keys give them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    pub factor: f32,
    /// The context the model was trained with before the extension
    /// (`rope.scaling.original_context_length`; the training context without it).
    pub original_context: usize,
    /// Pairs turning more than `beta_fast` times over the original context keep their
    /// frequency; fewer than `beta_slow` times, are interpolated (32 and 1 by default).
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// How much of the kept frequencies the blend takes (1 by default: YaRN's ramp).
    pub ext_factor: f32,
    /// The factor on cos and sin, so on every score twice over (`yarn_attn_factor`; 0.1
    /// ln(factor) + 1 without it).
    pub attn_factor: f32,
}

/// The numbers that size every buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperParams {
    pub n_layer: usize,
    /// Model width (embedding length).
    pub n_embd: usize,
    /// Hidden width of the MLP.
    pub n_ff: usize,
    pub n_head: usize,
    /// Key/value heads; `n_head / n_head_kv` query heads share each (grouped-query attention).
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    pub norm_eps: f32,
    /// Present when the position embedding is RoPE.
    pub rope: Option<RopeParams>,
    /// Local attention, where the file gives a window (`{arch}.attention.sliding_window`).
    pub sliding_window: Option<SlidingWindow>,
    /// The factor on query-key scores, where the file gives one (`{arch}.attention.scale`);
    /// 1 / sqrt(head_dim) otherwise.
    pub attn_scale: Option<f32>,
    /// Attention scores become cap * tanh(score / cap) (`{arch}.attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Output logits likewise (`{arch}.final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// A mixture of experts in every block's MLP, where the file has experts.
    pub experts: Option<Experts>,
}

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
    },
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

/// A mixture of experts' sizes and routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    pub count: usize,
    /// Experts each token runs.
    pub used: usize,
    /// Each expert's MLP width.
    pub n_ff: usize,
    pub gating: super::Gating,
    pub normalize: bool,
    /// An expert every token runs besides its routed ones (Qwen2-MoE).
    pub shared: Option<SharedExpert>,
}

impl Experts {
    /// Rows of the router: one logit per expert, and the shared expert's gate where it has
    /// one.
    pub fn router_rows(&self) -> usize {
        self.count + self.shared.is_some_and(|sh| sh.gated) as usize
    }
}

/// A shared expert's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpert {
    /// Its MLP's width (`{arch}.expert_shared_feed_forward_length`, else the dense
    /// `feed_forward_length`, as llama.cpp reads it).
    pub n_ff: usize,
    /// Its output is scaled by sigmoid(x . ffn_gate_inp_shexp).
    pub gated: bool,
}

/// Every weight tensor the network reads, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelTensors {
    /// [n_embd, n_vocab]
    pub token_embd: String,
    /// [n_embd, n_ctx_train], for learned positions.
    pub position_embd: Option<String>,
    pub output_norm: NormTensors,
    /// [n_embd, n_vocab]; equal to `token_embd` when the embeddings are tied.
    pub output: String,
    pub tied_embeddings: bool,
    /// [rope dims / 2] f32 divisors of RoPE's per-pair frequencies (Llama 3's scaling), when
    /// the spec names them and the file has them.
    pub rope_freqs: Option<String>,
    /// LongRoPE's (long, short) divisors, [rope dims / 2] each, where the file has both.
    pub rope_factors: Option<(String, String)>,
    pub layers: Vec<LayerTensors>,
}

/// A model ready to execute: its atoms (the spec), hyperparameters and tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedModel {
    /// `general.architecture`.
    pub architecture: String,
    pub spec: ModelSpec,
    pub hparams: HyperParams,
    pub tensors: ModelTensors,
    /// Tensors in the file the spec does not use (in file order); the runtime may refuse a
    /// model whose unused tensors change its meaning (such as `rope_freqs.weight`).
    pub unused_tensors: Vec<String>,
}

/// Resolves the shipped spec for the file's `general.architecture` against the file.
pub fn resolve_gguf(file: &GgufFile) -> Result<ResolvedModel> {
    let arch = file.architecture()?;
    let spec = spec_for_architecture(arch)?.ok_or_else(|| Error::UnknownArchitecture {
        path: file.path().to_path_buf(),
        arch: arch.to_string(),
        known: known_architectures(),
    })?;
    spec.resolve_gguf(file)
}

impl ModelSpec {
    /// Reads the hyperparameters from the file's `{arch}.*` metadata and checks every tensor
    /// this spec needs against the file's tensor index.
    pub fn resolve_gguf(&self, file: &GgufFile) -> Result<ResolvedModel> {
        if self.network == NetworkType::EncoderDecoder {
            return Err(Error::spec(
                &self.name,
                "encoder-decoder networks cannot be resolved yet",
            ));
        }
        let arch = file.architecture()?.to_string();
        let hparams = self.gguf_hparams(file, &arch)?;
        let mut checker = Checker {
            file,
            used: HashSet::new(),
        };
        let tensors = self.tensors_for(&hparams, &mut checker)?;
        let unused_tensors = file
            .tensors()
            .iter()
            .filter(|t| !checker.used.contains(&t.name))
            .map(|t| t.name.clone())
            .collect();
        Ok(ResolvedModel {
            architecture: arch,
            spec: self.clone(),
            hparams,
            tensors,
            unused_tensors,
        })
    }

    fn gguf_hparams(&self, file: &GgufFile, arch: &str) -> Result<HyperParams> {
        let key = |k: &str| format!("{arch}.{k}");
        let path = file.path();
        // Counts are read as u32 (which every real model fits) so that products of two of
        // them cannot overflow further down.
        let positive = |k: &str| -> Result<Option<usize>> {
            match file.get::<u32>(k)? {
                Some(0) => Err(Error::metadata(path, k, "must be positive, found 0")),
                v => Ok(v.map(|v| v as usize)),
            }
        };
        let required = |k: &str| -> Result<usize> {
            positive(k)?.ok_or_else(|| Error::metadata(path, k, "missing"))
        };

        let n_layer = required(&key("block_count"))?;
        let n_embd = required(&key("embedding_length"))?;
        let n_ff = required(&key("feed_forward_length"))?;
        let head_count = key("attention.head_count");
        let n_head = required(&head_count)?;
        let head_count_kv = key("attention.head_count_kv");
        let n_head_kv = positive(&head_count_kv)?.unwrap_or(n_head);
        let n_ctx_train = required(&key("context_length"))?;

        let experts = self.experts(file, &key, n_ff)?;

        if n_head % n_head_kv != 0 {
            return Err(Error::metadata(
                path,
                &head_count_kv,
                format!("{n_head_kv} does not divide `{head_count}` = {n_head}"),
            ));
        }
        let head_dim = match positive(&key("attention.key_length"))? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(Error::metadata(
                    path,
                    &head_count,
                    format!(
                        "{n_head} heads do not divide `{}` = {n_embd}",
                        key("embedding_length")
                    ),
                ))
            }
        };
        let value_length = key("attention.value_length");
        if let Some(v) = positive(&value_length)? {
            if v != head_dim {
                return Err(Error::metadata(
                    path,
                    &value_length,
                    format!("{v} differs from the key head dimension {head_dim}"),
                ));
            }
        }

        let eps_key = match self.norm.kind {
            NormKind::Rms => key("attention.layer_norm_rms_epsilon"),
            NormKind::Layer => key("attention.layer_norm_epsilon"),
        };
        let norm_eps: f32 = file
            .get(&eps_key)?
            .ok_or_else(|| Error::metadata(path, &eps_key, "missing"))?;
        if !(norm_eps.is_finite() && norm_eps > 0.0) {
            return Err(Error::metadata(
                path,
                &eps_key,
                format!("{norm_eps} is not a positive number"),
            ));
        }

        let rope = match self.position {
            PositionSpec::Rope {
                layout,
                base_default,
                local_base_default,
            } => {
                let usable_base = |k: &str, default: Option<f32>| -> Result<Option<f32>> {
                    match file.get::<f32>(k)?.or(default) {
                        Some(b) if !(b.is_finite() && b > 1.0) => Err(Error::metadata(
                            path,
                            k,
                            format!("{b} is not a usable RoPE base"),
                        )),
                        b => Ok(b),
                    }
                };
                let base = usable_base(&key("rope.freq_base"), Some(base_default))?
                    .unwrap_or(base_default);
                let local_base = usable_base(&key("rope.freq_base_swa"), local_base_default)?;
                let dims_key = key("rope.dimension_count");
                let dims = positive(&dims_key)?.unwrap_or(head_dim);
                if dims > head_dim || dims % 2 != 0 {
                    return Err(Error::metadata(
                        path,
                        &dims_key,
                        format!("{dims} is not an even number up to the head dimension {head_dim}"),
                    ));
                }
                let scaling = rope_scaling(file, &key, n_ctx_train)?;
                let original_key = key("rope.scaling.original_context_length");
                let original_context = match positive(&original_key)? {
                    Some(n) => n,
                    None => n_ctx_train,
                };
                let attn_key = key("rope.scaling.attn_factor");
                let attn_factor = match file.get::<f32>(&attn_key)? {
                    Some(f) if !(f.is_finite() && f > 0.0) => {
                        return Err(Error::metadata(
                            path,
                            &attn_key,
                            format!("{f} is not a positive number"),
                        ))
                    }
                    f => f,
                };
                Some(RopeParams {
                    base,
                    dims,
                    layout,
                    scaling,
                    local_base,
                    attn_factor,
                    original_context,
                })
            }
            _ => None,
        };

        // The vocabulary is the tokenizer's; `{arch}.vocab_size`, when present, must agree.
        let vocab_key = key("vocab_size");
        let declared = positive(&vocab_key)?;
        let n_vocab = match file.get::<&[String]>("tokenizer.ggml.tokens")? {
            Some(tokens) => {
                if let Some(d) = declared.filter(|&d| d != tokens.len()) {
                    return Err(Error::metadata(
                        path,
                        &vocab_key,
                        format!(
                            "{d} disagrees with the {} tokens of the tokenizer",
                            tokens.len()
                        ),
                    ));
                }
                tokens.len()
            }
            None => declared.ok_or_else(|| {
                Error::metadata(path, "tokenizer.ggml.tokens", "missing (and no vocab_size)")
            })?,
        };

        let positive_f32 = |k: &str| -> Result<Option<f32>> {
            match file.get::<f32>(k)? {
                Some(v) if !(v.is_finite() && v > 0.0) => Err(Error::metadata(
                    path,
                    k,
                    format!("{v} is not a positive number"),
                )),
                v => Ok(v),
            }
        };
        let sliding_window = self.sliding_window(file, &key, n_layer, n_ctx_train)?;
        Ok(HyperParams {
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_vocab,
            n_ctx_train,
            norm_eps,
            rope,
            sliding_window,
            attn_scale: positive_f32(&key("attention.scale"))?.or_else(|| {
                let widths = &self.attention.width_scaled_block_counts;
                let by_width = widths.contains(&(n_layer as u32));
                by_width.then(|| 1.0 / (n_embd as f32 / n_head as f32).sqrt())
            }),
            attn_softcap: positive_f32(&key("attn_logit_softcapping"))?,
            final_softcap: positive_f32(&key("final_logit_softcapping"))?,
            experts,
        })
    }

    /// The experts where the file has them (`{arch}.expert_count` above 0; Mixtral is
    /// converted as `llama`), routed as the spec's `[moe]` says unless the file says otherwise.
    fn experts(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        n_ff_dense: usize,
    ) -> Result<Option<Experts>> {
        let path = file.path();
        let count_key = key("expert_count");
        let Some(count) = file.get::<u32>(&count_key)?.filter(|&n| n > 0) else {
            return Ok(None);
        };
        let Some(moe) = &self.moe else {
            return Err(Error::metadata(
                path,
                &count_key,
                format!(
                    "{count} experts, a mixture the `{}` spec does not describe (no [moe])",
                    self.name
                ),
            ));
        };
        let used_key = key("expert_used_count");
        let used = match file.get::<u32>(&used_key)? {
            Some(u) if (1..=count).contains(&u) => u as usize,
            Some(u) => {
                return Err(Error::metadata(
                    path,
                    &used_key,
                    format!("{u} is not between 1 and the {count} experts"),
                ))
            }
            None => return Err(Error::metadata(path, &used_key, "missing")),
        };
        let ff_key = key("expert_feed_forward_length");
        let n_ff = match file.get::<u32>(&ff_key)? {
            Some(0) => return Err(Error::metadata(path, &ff_key, "must be positive, found 0")),
            Some(n) => n as usize,
            None => n_ff_dense,
        };
        let gating_key = key("expert_gating_func");
        let gating = match file.get::<u32>(&gating_key)? {
            None => moe.gating,
            Some(1) => super::Gating::Softmax,
            Some(2) => super::Gating::Sigmoid,
            Some(other) => {
                return Err(Error::metadata(
                    path,
                    &gating_key,
                    format!("{other} is not a known gating (1 softmax, 2 sigmoid)"),
                ))
            }
        };
        let layer = &self.tensors.layer;
        let shared = match layer.ffn_up_shexp.is_some() {
            true => {
                let key = key("expert_shared_feed_forward_length");
                Some(SharedExpert {
                    n_ff: match file.get::<u32>(&key)? {
                        Some(0) => {
                            return Err(Error::metadata(path, &key, "must be positive, found 0"))
                        }
                        Some(n) => n as usize,
                        None => n_ff_dense,
                    },
                    gated: layer.ffn_gate_inp_shexp.is_some(),
                })
            }
            false => None,
        };
        Ok(Some(Experts {
            count: count as usize,
            used,
            n_ff,
            gating,
            normalize: file
                .get::<bool>(&key("expert_weights_norm"))?
                .unwrap_or(moe.normalize),
            shared,
        }))
    }

    /// The window from `{arch}.attention.sliding_window` (absent or 0: none) and the layers
    /// it covers: the file's `sliding_window_pattern` (a flag per layer, or a period) or the
    /// spec's `attention.window_period`.
    fn sliding_window(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        n_layer: usize,
        n_ctx_train: usize,
    ) -> Result<Option<SlidingWindow>> {
        let path = file.path();
        let size_key = key("attention.sliding_window");
        let size = match file.get::<u32>(&size_key)? {
            Some(0) => return Ok(None),
            Some(s) => s as usize,
            // A default window as long as the context changes nothing.
            None => match self.attention.window_default {
                Some(s) if (s as usize) < n_ctx_train => s as usize,
                _ => return Ok(None),
            },
        };
        if size > n_ctx_train {
            return Err(Error::metadata(
                path,
                &size_key,
                format!(
                    "window of {size} positions is longer than the context of {n_ctx_train} \
                     (`{}`)",
                    key("context_length")
                ),
            ));
        }
        let pattern_key = key("attention.sliding_window_pattern");
        let by_period = |period: u32| -> Vec<bool> {
            (0..n_layer)
                .map(|l| (l as u32) % period < period - 1 || period == 1)
                .collect()
        };
        let layers = match file.metadata().get(&pattern_key) {
            None => by_period(self.attention.window_period),
            Some(MetaValue::Array(MetaArray::Bool(flags))) => {
                if flags.len() != n_layer {
                    return Err(Error::metadata(
                        path,
                        &pattern_key,
                        format!("{} flags for {n_layer} layers", flags.len()),
                    ));
                }
                flags.clone()
            }
            Some(v) => match v.as_u64() {
                Some(period) if (1..=u32::MAX as u64).contains(&period) => by_period(period as u32),
                _ => {
                    return Err(Error::metadata(
                        path,
                        &pattern_key,
                        "must be a flag per layer or a positive period",
                    ))
                }
            },
        };
        Ok(Some(SlidingWindow { size, layers }))
    }

    fn tensors_for(&self, hp: &HyperParams, c: &mut Checker<'_>) -> Result<ModelTensors> {
        let names = &self.tensors;
        let (e, v) = (hp.n_embd as u64, hp.n_vocab as u64);
        // Each factor fits u32, so the products fit u64; the sum saturates rather than wraps.
        let q_dim = hp.n_head as u64 * hp.head_dim as u64;
        let kv_dim = hp.n_head_kv as u64 * hp.head_dim as u64;
        let qkv_dim = q_dim.saturating_add(kv_dim.saturating_mul(2));
        let ff = hp.n_ff as u64;
        let layer_norm = self.norm.kind == NormKind::Layer;

        let token_embd = c.require(&names.token_embd, &[e, v], "n_embd x n_vocab")?;
        let position_embd = match (&self.position, &names.position_embd) {
            (PositionSpec::Learned, Some(n)) => {
                Some(c.require(n, &[e, hp.n_ctx_train as u64], "n_embd x n_ctx_train")?)
            }
            _ => None,
        };
        let output_norm = c.norm(&names.output_norm, e, layer_norm, "n_embd")?;
        let rope_freqs = match (hp.rope, &names.rope_freqs) {
            (Some(r), Some(n)) if c.file.tensor(n).is_some() => {
                Some(c.require(n, &[r.dims as u64 / 2], "rope dimensions / 2")?)
            }
            _ => None,
        };
        let in_file = |n: &Option<String>| n.clone().filter(|n| c.file.tensor(n).is_some());
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

        let l = &names.layer;
        let (attn_bias, out_bias, mlp_bias) = (
            self.attention.bias,
            self.attention.output_bias,
            self.mlp.bias,
        );
        // block_count comes from the file: never size an allocation by it alone.
        let mut layers = Vec::with_capacity(hp.n_layer.min(c.file.tensors().len()));
        for i in 0..hp.n_layer {
            let name = |pattern: &str| pattern.replace(LAYER_PLACEHOLDER, &i.to_string());
            let named = |pattern: &Option<String>| -> Result<String> {
                pattern
                    .as_deref()
                    .map(name)
                    .ok_or_else(|| Error::spec(&self.name, "tensor name missing"))
            };
            let qkv = match self.attention.qkv {
                QkvLayout::Separate => QkvTensors::Separate {
                    q: c.linear(&named(&l.attn_q)?, e, q_dim, attn_bias)?,
                    k: c.linear(&named(&l.attn_k)?, e, kv_dim, attn_bias)?,
                    v: c.linear(&named(&l.attn_v)?, e, kv_dim, attn_bias)?,
                },
                QkvLayout::Fused => {
                    QkvTensors::Fused(c.linear(&named(&l.attn_qkv)?, e, qkv_dim, attn_bias)?)
                }
            };
            let hd = hp.head_dim as u64;
            let whole = self.attention.qk_norm_over == super::QkNormOver::Projection;
            let head_norm = |c: &mut Checker<'_>, pattern: &Option<String>, heads: u64| {
                let (n, meaning) = match whole {
                    true => (heads * hd, "heads x head_dim"),
                    false => (hd, "head_dim"),
                };
                match self.attention.qk_norm {
                    Some(kind) => Ok(Some(c.norm(
                        &named(pattern)?,
                        n,
                        kind == NormKind::Layer,
                        meaning,
                    )?)),
                    None => Ok(None),
                }
            };
            let q_norm = head_norm(c, &l.attn_q_norm, hp.n_head as u64)?;
            let k_norm = head_norm(c, &l.attn_k_norm, hp.n_head_kv as u64)?;
            let fused = self.mlp.gate_up == GateUpLayout::Fused;
            let mlp = match hp.experts {
                Some(x) => {
                    let (n, ffx) = (x.count as u64, x.n_ff as u64);
                    let stacked = "n_embd x n_ff_exp x n_expert";
                    MlpTensors::Experts {
                        router: c.require(
                            &named(&l.ffn_gate_inp)?,
                            &[e, n],
                            "n_embd x n_expert",
                        )?,
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
            layers.push(LayerTensors {
                attn_norm: c.norm(&name(&l.attn_norm), e, layer_norm, "n_embd")?,
                qkv,
                q_norm,
                k_norm,
                attn_output: c.linear(&name(&l.attn_output), q_dim, e, out_bias)?,
                attn_post_norm: post_norm(c, &l.attn_post_norm)?,
                ffn_norm: c.norm(&name(&l.ffn_norm), e, layer_norm, "n_embd")?,
                ffn_post_norm: post_norm(c, &l.ffn_post_norm)?,
                mlp,
            });
        }
        Ok(ModelTensors {
            token_embd,
            position_embd,
            output_norm,
            output,
            tied_embeddings: tied,
            rope_freqs,
            rope_factors,
            layers,
        })
    }
}

/// `{arch}.rope.scaling.type` and its factor (or the older `{arch}.rope.scale_linear`), as
/// llama.cpp's converter writes them; YaRN's other keys default as llama.cpp's do.
fn rope_scaling(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    n_ctx_train: usize,
) -> Result<RopeScaling> {
    let path = file.path();
    let (type_key, factor_key) = (key("rope.scaling.type"), key("rope.scaling.factor"));
    let factor = |k: &str| -> Result<f32> {
        let f: f32 = file
            .get(k)?
            .ok_or_else(|| Error::metadata(path, k, "missing"))?;
        if !(f.is_finite() && f > 0.0) {
            return Err(Error::metadata(
                path,
                k,
                format!("{f} is not a positive number"),
            ));
        }
        Ok(f)
    };
    let Some(kind) = file.get::<&str>(&type_key)? else {
        let legacy = key("rope.scale_linear");
        return Ok(match file.get::<f32>(&legacy)? {
            Some(_) => RopeScaling::Linear {
                factor: factor(&legacy)?,
            },
            None => RopeScaling::None,
        });
    };
    Ok(match kind {
        "none" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: factor(&factor_key)?,
        },
        "yarn" => {
            let factor = factor(&factor_key)?;
            let optional = |k: &str| -> Result<Option<f32>> {
                let k = key(k);
                match file.get::<f32>(&k)? {
                    Some(v) if !(v.is_finite() && v >= 0.0) => Err(Error::metadata(
                        path,
                        &k,
                        format!("{v} is not a usable number"),
                    )),
                    v => Ok(v),
                }
            };
            let original_key = key("rope.scaling.original_context_length");
            let original_context = match file.get::<u32>(&original_key)? {
                Some(0) => return Err(Error::metadata(path, &original_key, "must be positive")),
                Some(n) => n as usize,
                None => n_ctx_train,
            };
            RopeScaling::Yarn(Yarn {
                factor,
                original_context,
                beta_fast: optional("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: optional("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                ext_factor: optional("rope.scaling.yarn_ext_factor")?.unwrap_or(1.0),
                attn_factor: optional("rope.scaling.yarn_attn_factor")?
                    .unwrap_or(0.1 * factor.ln() + 1.0),
            })
        }
        "longrope" => RopeScaling::LongRope,
        other => {
            return Err(Error::metadata(
                path,
                &type_key,
                format!("unknown RoPE scaling `{other}` (none, linear, yarn, longrope)"),
            ))
        }
    })
}

/// Checks tensors against the file's index and records which ones the model uses.
struct Checker<'f> {
    file: &'f GgufFile,
    used: HashSet<String>,
}

impl Checker<'_> {
    /// `name` must exist with shape `expected` (ggml order); `meaning` explains the shape.
    fn require(&mut self, name: &str, expected: &[u64], meaning: &str) -> Result<String> {
        let path = self.file.path();
        let t = self.file.tensor(name).ok_or_else(|| {
            Error::tensor(path, name, "required by the model spec but not in the file")
        })?;
        // ggml drops trailing dimensions of 1, so compare with those trimmed on both sides.
        let trim = |s: &[u64]| -> Vec<u64> {
            let end = s.iter().rposition(|&d| d != 1).map_or(0, |p| p + 1);
            s[..end].to_vec()
        };
        if trim(&t.shape) != trim(expected) {
            return Err(Error::tensor(
                path,
                name,
                format!(
                    "shape {:?} disagrees with the spec: expected {expected:?} ({meaning})",
                    t.shape
                ),
            ));
        }
        self.used.insert(name.to_string());
        Ok(name.to_string())
    }

    /// A weight of shape [n_in, n_out] and, if `bias`, its [n_out] bias.
    fn linear(&mut self, weight: &str, n_in: u64, n_out: u64, bias: bool) -> Result<Linear> {
        let meaning = format!("{n_in} inputs x {n_out} outputs");
        let weight = self.require(weight, &[n_in, n_out], &meaning)?;
        let bias = if bias {
            Some(self.require(&bias_name(&weight), &[n_out], "one per output")?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// A norm's [n] gain and, if `with_bias`, its shift; `meaning` names n in errors.
    fn norm(
        &mut self,
        weight: &str,
        n: u64,
        with_bias: bool,
        meaning: &str,
    ) -> Result<NormTensors> {
        let weight = self.require(weight, &[n], meaning)?;
        let bias = if with_bias {
            Some(self.require(&bias_name(&weight), &[n], meaning)?)
        } else {
            None
        };
        Ok(NormTensors { weight, bias })
    }
}

/// `blk.0.attn_q.weight` -> `blk.0.attn_q.bias` (the spec checked the suffix).
fn bias_name(weight: &str) -> String {
    format!("{}.bias", weight.strip_suffix(".weight").unwrap_or(weight))
}
