//! The model every executor runs, described once and owned by none: its configuration
//! ([`ModelConfig`]), its weights per block ([`Layer`], read packed by [`WeightReader`]), the
//! operations executors share ([`ops`]), what an executor offers ([`Backend`],
//! [`BatchedBackend`]; [`Stage`]: its [`Part`] of a model split between executors), the paged
//! KV cache's block tables and policies ([`kv`]), quantizing a model's weights
//! ([`quantize`]), and encoder-only networks for embeddings ([`encoder`]).

pub mod activations;
mod backend;
mod config;
pub mod encoder;
mod error;
pub mod kv;
mod layer;
mod matrix;
pub mod ops;
pub mod quantize;
pub mod seq2seq;
mod shard;
mod stage;
mod weights;

pub use backend::{check_step, forward_steps, Backend, BatchedBackend, Logits, Profile, SeqStep};
pub use config::{ModelConfig, Rope};
pub use error::{Error, Result};
pub use layer::{ExpertBias, LatentWeights, Layer, LayerWeights, Mlp, SharedMlp};
pub use matrix::{fitting_format, import_format, min_row_block, Matrix, Projection};
pub use shard::{CutBlocks, Shard};
pub use stage::{check_hidden, Part, PlacedPart, Stage, StageOutput, Sublayer};
pub use weights::{
    load_format, part_file_bytes, LoadProgress, ProgressFn, TensorReader, WeightReader,
};
