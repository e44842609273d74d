//! Model specifications: a transformer described as a combination of atoms (network type,
//! norm, activation, position embedding, attention, MLP, tied embeddings) plus the names of
//! the tensors holding its weights. Specs are TOML files in `models/specs/`, embedded in the
//! binary; a model file's `general.architecture` picks one, and [`resolve_gguf`] combines it
//! with the file's hyperparameters and tensor index into a [`ResolvedModel`].
//!
//! A new model that combines known atoms needs a spec file, not code.

mod resolved;

use serde::Deserialize;

pub use resolved::{
    resolve_gguf, Experts, HyperParams, LayerTensors, Linear, MlpTensors, ModelTensors,
    NormTensors, QkvTensors, ResolvedModel, RopeParams, RopeScaling, SharedExpert,
    SharedExpertTensors, SlidingWindow, Yarn,
};

use crate::error::{Error, Result};

/// The specs shipped with Hearth: (file name, TOML text).
const SHIPPED: &[(&str, &str)] = &[
    ("llama.toml", include_str!("../../specs/llama.toml")),
    ("qwen2.toml", include_str!("../../specs/qwen2.toml")),
    ("qwen3.toml", include_str!("../../specs/qwen3.toml")),
    ("qwen2moe.toml", include_str!("../../specs/qwen2moe.toml")),
    ("qwen3moe.toml", include_str!("../../specs/qwen3moe.toml")),
    ("gemma2.toml", include_str!("../../specs/gemma2.toml")),
    ("gemma3.toml", include_str!("../../specs/gemma3.toml")),
    ("phi3.toml", include_str!("../../specs/phi3.toml")),
    ("olmoe.toml", include_str!("../../specs/olmoe.toml")),
];

/// Placeholder for the layer index in per-layer tensor names.
pub const LAYER_PLACEHOLDER: &str = "{layer}";

/// How the blocks are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkType {
    /// Causal language model (Llama, GPT).
    DecoderOnly,
    /// Bidirectional encoder (BERT, MiniLM).
    EncoderOnly,
    /// Encoder plus cross-attending decoder (T5). Parsed, not yet resolvable.
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
    },
    /// A learned table added to the token embeddings (`tensors.position_embd`).
    Learned,
    /// Fixed sine/cosine table (the original Transformer).
    Sinusoidal,
    None,
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
    /// Causal mask (decoders) or full attention (encoders).
    pub causal: bool,
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

/// Tensor names. Per-layer names contain `{layer}`; a bias, where the atoms call for one, is
/// the weight's name with `.weight` replaced by `.bias`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorNames {
    pub token_embd: String,
    pub position_embd: Option<String>,
    pub output_norm: String,
    pub output: Option<String>,
    /// RoPE frequency divisors, one per rotated pair, where the file has them (Llama 3.1's
    /// `rope_freqs.weight`).
    pub rope_freqs: Option<String>,
    /// LongRoPE's divisors (Phi-3 128k): the long set when the context exceeds the original
    /// one (`{arch}.rope.scaling.original_context_length`), the short set otherwise.
    pub rope_factors_long: Option<String>,
    pub rope_factors_short: Option<String>,
    pub layer: LayerTensorNames,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerTensorNames {
    pub attn_norm: String,
    pub attn_q: Option<String>,
    pub attn_k: Option<String>,
    pub attn_v: Option<String>,
    pub attn_qkv: Option<String>,
    /// Per-head query and key norm gains, for `attention.qk_norm`.
    pub attn_q_norm: Option<String>,
    pub attn_k_norm: Option<String>,
    pub attn_output: String,
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
}

/// A model specification as written in a spec file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: String,
    /// `general.architecture` values this spec serves.
    pub architectures: Vec<String>,
    pub network: NetworkType,
    pub activation: Activation,
    pub tied_embeddings: TiedEmbeddings,
    /// A factor on the token embeddings, where the family has one.
    #[serde(default)]
    pub embedding_scale: Option<EmbeddingScale>,
    pub norm: NormSpec,
    pub position: PositionSpec,
    pub attention: AttentionSpec,
    pub mlp: MlpSpec,
    /// Routing, for files with experts (Mixtral, Qwen3-MoE); a file with experts and a spec
    /// without it is refused.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
    pub tensors: TensorNames,
}

impl ModelSpec {
    /// Parses and checks a spec; `source` names it in errors.
    pub fn from_toml(source: &str, text: &str) -> Result<Self> {
        let spec: ModelSpec =
            toml::from_str(text).map_err(|e| Error::spec(source, e.to_string().trim_end()))?;
        spec.validate(source)?;
        Ok(spec)
    }

    /// Consistency between atoms and tensor names, so resolution can rely on it.
    fn validate(&self, source: &str) -> Result<()> {
        let bad = |reason: String| Err(Error::spec(source, reason));
        if self.architectures.is_empty() {
            return bad("`architectures` is empty".into());
        }
        let t = &self.tensors;
        let l = &t.layer;
        let per_layer = [
            ("attn_norm", Some(&l.attn_norm)),
            ("attn_q", l.attn_q.as_ref()),
            ("attn_k", l.attn_k.as_ref()),
            ("attn_v", l.attn_v.as_ref()),
            ("attn_qkv", l.attn_qkv.as_ref()),
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
            _ => {}
        }
        if self.attention.qk_norm.is_some() && (l.attn_q_norm.is_none() || l.attn_k_norm.is_none())
        {
            return bad("attention.qk_norm needs tensors.layer.attn_q_norm and attn_k_norm".into());
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
        if self.tied_embeddings != TiedEmbeddings::Always && t.output.is_none() {
            return bad("untied embeddings need tensors.output".into());
        }
        let needs_bias = self.norm.kind == NormKind::Layer
            || self.attention.bias
            || self.attention.output_bias
            || self.mlp.bias;
        if needs_bias {
            let names = per_layer.iter().filter_map(|(_, n)| *n);
            if let Some(n) = names
                .chain([&t.output_norm])
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
    Activation { Silu => "silu", Gelu => "gelu", GeluTanh => "gelu-tanh", Relu => "relu" }
    NormKind { Rms => "rms", Layer => "layer" }
    QkNormOver { Head => "head", Projection => "projection" }
    NormPlacement { Pre => "pre", Post => "post", Sandwich => "sandwich" }
    EmbeddingScale { SqrtNEmbd => "sqrt-n-embd" }
    Gating { Softmax => "softmax", Sigmoid => "sigmoid" }
    RopeLayout { Gptj => "gptj", Neox => "neox" }
    QkvLayout { Separate => "separate", Fused => "fused" }
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
            PositionSpec::None => "none",
        }
    }
}

impl ModelSpec {
    /// A spec from a TOML file of the user's (`--spec FILE`), which serves the files whose
    /// `general.architecture` it lists, in place of any shipped spec.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::spec(&source, format!("cannot be read: {e}")))?;
        Self::from_toml(&source, &text)
    }
}

/// Resolves `file` with `spec` where one is given (a user's), else with the shipped spec for
/// its architecture. A given spec must list the file's architecture.
pub fn resolve_with(file: &crate::GgufFile, spec: Option<&ModelSpec>) -> Result<ResolvedModel> {
    let Some(spec) = spec else {
        return resolve_gguf(file);
    };
    let arch = file.architecture()?;
    if !spec.architectures.iter().any(|a| a == arch) {
        return Err(Error::spec(
            &spec.name,
            format!(
                "serves architectures {:?}, not `{arch}` of {}",
                spec.architectures,
                file.path().display()
            ),
        ));
    }
    spec.resolve_gguf(file)
}

/// Every shipped spec, parsed.
pub fn shipped_specs() -> Result<Vec<ModelSpec>> {
    SHIPPED
        .iter()
        .map(|(file, text)| ModelSpec::from_toml(file, text))
        .collect()
}

/// The shipped spec serving `general.architecture = arch`, or `None`.
pub fn spec_for_architecture(arch: &str) -> Result<Option<ModelSpec>> {
    Ok(shipped_specs()?
        .into_iter()
        .find(|s| s.architectures.iter().any(|a| a == arch)))
}

/// Architectures the shipped specs serve, for messages.
pub fn known_architectures() -> Vec<String> {
    shipped_specs()
        .map(|specs| specs.into_iter().flat_map(|s| s.architectures).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_specs_parse() {
        let specs = shipped_specs().unwrap();
        let llama = &specs[0];
        assert_eq!(llama.architectures, vec!["llama".to_string()]);
        assert_eq!(llama.network, NetworkType::DecoderOnly);
        assert_eq!(llama.norm.kind, NormKind::Rms);
        assert_eq!(
            llama.position,
            PositionSpec::Rope {
                layout: RopeLayout::Gptj,
                base_default: 10_000.0,
                local_base_default: None,
            }
        );
        assert_eq!(llama.mlp.kind, MlpKind::Gated);
        assert_eq!(llama.tied_embeddings, TiedEmbeddings::WhenOutputAbsent);
    }

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

    #[test]
    fn bad_specs_are_rejected_with_a_reason() {
        let llama = SHIPPED[0].1;
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
