//! An encoder's shape and atoms, checked once against what the executors run: LayerNorm
//! after each residual add, learned positions and token types, full attention with biases,
//! and an ungated MLP with biases.

use hearth_models::spec::{
    Activation, MlpKind, NetworkType, NormKind, NormPlacement, PositionSpec, QkvLayout,
};
use hearth_models::{GgufFile, ResolvedModel};

use super::pool::Pooling;
use crate::error::{Error, Result};

/// The MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderActivation {
    /// x * Phi(x), with erf (BERT's `gelu`).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
    Relu,
}

impl EncoderActivation {
    pub fn apply(self, x: &mut [f32]) {
        match self {
            EncoderActivation::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
            gelu => {
                let y = crate::ops::gelu(x, gelu == EncoderActivation::Gelu);
                x.copy_from_slice(&y);
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    /// Learned positions: the longest input.
    pub n_positions: usize,
    /// Rows of the token-type table (1 where the model has none).
    pub n_token_types: usize,
    pub norm_eps: f32,
    pub act: EncoderActivation,
    /// How a text's token states become one vector (`{arch}.pooling_type`; mean where the
    /// file says nothing).
    pub pooling: Pooling,
    /// Outputs of the classifier head over the first token (a cross-encoder's scores), where
    /// the model has one.
    pub n_labels: Option<usize>,
}

impl EncoderConfig {
    /// Rows of the fused q/k/v projection.
    pub fn qkv_dim(&self) -> usize {
        3 * self.n_head * self.head_dim
    }

    /// Width of the attention output.
    pub fn attn_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Checks the spec's atoms against what the executors run; anything else is an error
    /// naming the atom.
    pub fn from_resolved(file: &GgufFile, model: &ResolvedModel) -> Result<Self> {
        let path = file.path();
        let spec = &model.spec;
        let unsupported = |what: String| Error::Unsupported {
            path: path.to_path_buf(),
            what,
        };
        if spec.network != NetworkType::EncoderOnly {
            return Err(unsupported(format!(
                "network `{}` (embeddings need an encoder-only model)",
                spec.network
            )));
        }
        if spec.norm.kind != NormKind::Layer || spec.norm.placement != NormPlacement::Post {
            return Err(unsupported(format!(
                "an encoder with norm `{}` placed `{}` (LayerNorm after each residual add is \
                 run)",
                spec.norm.kind, spec.norm.placement
            )));
        }
        if spec.position != PositionSpec::Learned {
            return Err(unsupported(format!(
                "an encoder with position embedding `{}` (learned positions are run)",
                spec.position.kind_str()
            )));
        }
        let a = &spec.attention;
        if a.causal || !a.bias || !a.output_bias || a.qkv != QkvLayout::Separate {
            return Err(unsupported(
                "an encoder attention other than full attention with biases on separate q, k, \
                 v and output projections"
                    .into(),
            ));
        }
        if spec.mlp.kind != MlpKind::Plain || !spec.mlp.bias || spec.moe.is_some() {
            return Err(unsupported(
                "an encoder MLP other than an ungated one with biases".into(),
            ));
        }
        let act = match spec.activation {
            Activation::Gelu => EncoderActivation::Gelu,
            Activation::GeluTanh => EncoderActivation::GeluTanh,
            Activation::Relu => EncoderActivation::Relu,
            Activation::Silu | Activation::SwigluOai => {
                return Err(unsupported("an encoder MLP with SiLU".into()));
            }
        };
        let h = &model.hparams;
        if h.n_head_kv != h.n_head {
            return Err(unsupported(format!(
                "an encoder with {} key/value heads for {} query heads",
                h.n_head_kv, h.n_head
            )));
        }
        let t = &model.tensors;
        if t.position_embd.is_none() || t.embd_norm.is_none() {
            return Err(unsupported(
                "an encoder without position embeddings or an embedding norm".into(),
            ));
        }
        let n_token_types = match &t.token_types {
            Some(name) => file
                .tensor(name)
                .and_then(|i| i.shape.get(1).copied())
                .unwrap_or(1) as usize,
            None => 1,
        };
        let pooling_key = format!("{}.pooling_type", model.architecture);
        let pooling = match file.get::<u32>(&pooling_key)? {
            None => Pooling::Mean,
            Some(n) => Pooling::from_gguf(n).ok_or_else(|| Error::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "`{pooling_key}` = {n} (mean 1, first token 2 and last token 3 are run)"
                ),
            })?,
        };
        Ok(Self {
            n_layer: h.n_layer,
            n_embd: h.n_embd,
            n_ff: h.n_ff,
            n_head: h.n_head,
            head_dim: h.head_dim,
            n_vocab: h.n_vocab,
            n_positions: h.n_ctx_train,
            n_token_types,
            norm_eps: h.norm_eps,
            act,
            pooling,
            n_labels: t.cls_output.as_ref().and_then(|l| {
                let shape = &file.tensor(&l.weight)?.shape;
                Some(shape.get(1).copied().unwrap_or(1) as usize)
            }),
        })
    }
}
