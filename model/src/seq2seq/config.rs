//! An encoder-decoder's shape and atoms (T5), checked once against what the executors run:
//! RMSNorm before each branch, relative position buckets, attention without biases, and a
//! gated GELU MLP (or, where the file has no gate, T5 v1.0's ReLU one).

use hearth_models::spec::{
    Activation, MlpKind, MlpTensors, NetworkType, NormKind, NormPlacement, PositionSpec, QkvLayout,
};
use hearth_models::{GgufFile, ResolvedModel};

use crate::error::{Error, Result};

/// The MLP: `down(act(gate x) * up x)` when gated, else `down(act(up x))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seq2SeqMlp {
    pub gated: bool,
    pub act: Activation,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Seq2SeqConfig {
    pub n_encoder_layer: usize,
    pub n_decoder_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    /// The longest input the model was trained on (T5's `n_positions`); relative positions
    /// read longer ones too.
    pub n_ctx_train: usize,
    pub norm_eps: f32,
    /// The factor on query-key scores (T5: 1).
    pub attn_scale: f32,
    pub buckets: usize,
    pub max_distance: usize,
    pub mlp: Seq2SeqMlp,
    /// The output reuses the embeddings, and the last state is scaled by 1 / sqrt(n_embd)
    /// first (T5 v1.0, as transformers runs it).
    pub tied: bool,
    /// The decoder's first input token.
    pub decoder_start: u32,
}

impl Seq2SeqConfig {
    /// Positions a decoder row holds: relative positions read any length, so four times
    /// what the model was trained on, and at least 2048.
    pub fn decoder_positions(&self) -> usize {
        (4 * self.n_ctx_train).max(2048)
    }

    /// Width of the attention's heads together.
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
        if spec.network != NetworkType::EncoderDecoder {
            return Err(unsupported(format!(
                "network `{}` as an encoder-decoder",
                spec.network
            )));
        }
        if spec.norm.kind != NormKind::Rms || spec.norm.placement != NormPlacement::Pre {
            return Err(unsupported(format!(
                "an encoder-decoder with norm `{}` placed `{}` (RMSNorm before each branch is \
                 run)",
                spec.norm.kind, spec.norm.placement
            )));
        }
        let (h, t) = (&model.hparams, &model.tensors);
        let (Some(relative), Some(seq2seq), Some(tensors)) = (h.relative, h.seq2seq, &t.seq2seq)
        else {
            return Err(unsupported(format!(
                "an encoder-decoder with position embedding `{}` (relative buckets are run)",
                spec.position.kind_str()
            )));
        };
        debug_assert!(matches!(
            spec.position,
            PositionSpec::RelativeBuckets { .. }
        ));
        let a = &spec.attention;
        if a.bias || a.output_bias || a.qkv != QkvLayout::Separate || spec.mlp.bias {
            return Err(unsupported(
                "an encoder-decoder with biases or a fused q/k/v".into(),
            ));
        }
        if h.n_head_kv != h.n_head {
            return Err(unsupported(format!(
                "an encoder-decoder with {} key/value heads for {} query heads",
                h.n_head_kv, h.n_head
            )));
        }
        if spec.moe.is_some() || spec.mlp.kind != MlpKind::Gated {
            return Err(unsupported(
                "an encoder-decoder MLP other than a gated one".into(),
            ));
        }
        // Every block of both stacks gates, or none does.
        let gated = |mlp: &MlpTensors| matches!(mlp, MlpTensors::Dense { gate: Some(_), .. });
        let blocks = t.layers.iter().chain(&tensors.encoder_layers);
        let n_gated = blocks.clone().filter(|l| gated(&l.mlp)).count();
        if n_gated != 0 && n_gated != blocks.count() {
            return Err(unsupported(
                "an encoder-decoder whose blocks gate their MLPs in some blocks only".into(),
            ));
        }
        let mlp = match n_gated > 0 {
            true => Seq2SeqMlp {
                gated: true,
                act: spec.activation,
            },
            false => Seq2SeqMlp {
                gated: false,
                act: spec.mlp.ungated_activation.unwrap_or(spec.activation),
            },
        };
        if mlp.act == Activation::SwigluOai {
            return Err(unsupported(
                "an encoder-decoder with the clamped SwiGLU".into(),
            ));
        }
        if mlp.act == Activation::Silu && !mlp.gated {
            return Err(unsupported("an ungated SiLU MLP".into()));
        }
        if seq2seq.decoder_start as usize >= h.n_vocab {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                what: format!(
                    "decoder start token {} outside the vocabulary of {}",
                    seq2seq.decoder_start, h.n_vocab
                ),
            });
        }
        Ok(Self {
            n_encoder_layer: seq2seq.n_encoder_layer,
            n_decoder_layer: h.n_layer,
            n_embd: h.n_embd,
            n_ff: h.n_ff,
            n_head: h.n_head,
            head_dim: h.head_dim,
            n_vocab: h.n_vocab,
            n_ctx_train: h.n_ctx_train,
            norm_eps: h.norm_eps,
            attn_scale: h.attn_scale.unwrap_or(1.0 / (h.head_dim as f32).sqrt()),
            buckets: relative.buckets,
            max_distance: relative.max_distance,
            mlp,
            tied: t.tied_embeddings,
            decoder_start: seq2seq.decoder_start,
        })
    }
}
