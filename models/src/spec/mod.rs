//! Model specifications: a transformer described as a combination of atoms (network type,
//! norm, activation, position embedding, attention, MLP, tied embeddings) plus the names of
//! the tensors holding its weights. Specs are TOML files in `models/specs/`, embedded in the
//! binary; a model file's `general.architecture` picks one, and [`resolve_gguf`] combines it
//! with the file's hyperparameters and tensor index into a [`ResolvedModel`].
//!
//! A new model that combines known atoms needs a spec file, not code.
//!
//! - a spec: [`ModelSpec`], its atoms ([`NormSpec`], [`PositionSpec`], [`AttentionSpec`],
//!   [`MlpSpec`], [`MoeSpec`], ...), its [`TensorNames`] and its `[hf]` table ([`HfSpec`]),
//!   checked for consistency when parsed;
//! - [`shipped_specs`]: the specs Hearth ships, one per family;
//! - resolution against a file: [`HyperParams`] (with [`RopeParams`], [`SlidingWindow`] and
//!   [`Experts`]) and [`ModelTensors`], each tensor checked against the file's index, in a
//!   [`ResolvedModel`].

mod atoms;
mod checker;
mod conversion;
mod experts;
mod hparams;
mod latent;
mod resolved;
mod rope;
mod shipped;
mod tensor_names;
mod tensors;
mod validate;
mod window;

use serde::Deserialize;

pub use atoms::{
    Activation, AttentionSpec, EmbeddingScale, GateUpLayout, Gating, MlpKind, MlpSpec, MoeSpec,
    NetworkType, NormKind, NormPlacement, NormSpec, PositionSpec, QkNormOver, QkvLayout,
    RopeLayout, TiedEmbeddings,
};
pub use conversion::HfSpec;
pub use experts::{Experts, GroupScore, SharedExpert};
pub use hparams::{HyperParams, RelativeBuckets, Seq2SeqParams};
pub use latent::LatentParams;
pub use resolved::{resolve_gguf, resolve_with, ResolvedModel};
pub use rope::{RopeParams, RopeScaling, Yarn};
pub use shipped::{known_architectures, shipped_specs, spec_for_architecture};
pub use tensor_names::{LayerTensorNames, Seq2SeqTensorNames, TensorNames, LAYER_PLACEHOLDER};
pub use tensors::{
    CrossAttentionTensors, ExpertBiases, LatentExpansion, LatentQuery, LatentTensors, LayerTensors,
    Linear, MlpTensors, ModelTensors, NormTensors, QkvTensors, Seq2SeqTensors, SharedExpertTensors,
};
pub use window::SlidingWindow;

use crate::error::{Error, Result};

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
    /// How a Hugging Face folder of the family converts to a file of its first architecture,
    /// where Hearth converts the family's folders.
    #[serde(default)]
    pub hf: Option<HfSpec>,
}

impl ModelSpec {
    /// Parses and checks a spec; `source` names it in errors.
    pub fn from_toml(source: &str, text: &str) -> Result<Self> {
        let spec: ModelSpec =
            toml::from_str(text).map_err(|e| Error::spec(source, e.to_string().trim_end()))?;
        spec.validate(source)?;
        Ok(spec)
    }

    /// A spec from a TOML file of the user's (`--spec FILE`), which serves the files whose
    /// `general.architecture` it lists, in place of any shipped spec.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::spec(&source, format!("cannot be read: {e}")))?;
        Self::from_toml(&source, &text)
    }
}
