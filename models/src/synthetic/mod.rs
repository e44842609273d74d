//! Synthetic models: a GGUF file of a given shape, built in memory, so a model's speed can be
//! measured without downloading it (`hearth bench --synthetic llama-7b`) and every level's
//! tests can run a model of the shape they need.
//!
//! The file is an ordinary GGUF file as llama.cpp's converter writes one for the shape's
//! family (the metadata keys and tensor names its spec in `models/specs/` resolves), with a
//! minimal SentencePiece vocabulary (`<unk>`, `<s>`, `</s>`, the 256 byte tokens, then
//! filler pieces) and weights that are ordinary numbers: each weight matrix repeats one
//! random row, quantized once, in every row. Speed does not depend on the values, and
//! repeating a row keeps building a 7B model down to a memory copy. Norm gains are ones.
//!
//! - [`Family`]: the architectures, and the atoms each adds to the Llama block;
//! - [`Shape`]: the hyperparameters; [`Shape::check`] says whether the executors run it;
//! - [`PRESETS`]: the shapes of published models, one row each;
//! - [`Shape::build`] and [`Preset::build`]: the file.
//!
//! ```no_run
//! # fn main() -> hearth_models::Result<()> {
//! use hearth_quant::Format;
//!
//! let file = hearth_models::synthetic::preset("llama-7b")?.build(Format::Q4)?;
//! let model = hearth_models::resolve_gguf(&file)?; // as the engine loads it
//! # Ok(()) }
//! ```

mod check;
mod family;
mod presets;
mod tensors;
mod vocab;
mod weights;
mod write;

use hearth_quant::Format;

pub use crate::hf::Llama3Rope;
pub use family::Family;
pub use presets::{preset, Preset, PRESETS};

/// The hyperparameters of a network of one [`Family`]. Head dimension is `key_length`, or
/// `n_embd / n_head` without one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub family: Family,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rope_base: f32,
    pub norm_eps: f32,
    /// The output head is the token embedding (no `output.weight`).
    pub tied_embeddings: bool,
    /// A head width other than `n_embd / n_head` (`{arch}.attention.key_length`; Qwen3).
    pub key_length: Option<usize>,
    /// The window of local layers (`{arch}.attention.sliding_window`), which layers the
    /// family's spec names.
    pub sliding_window: Option<usize>,
    /// A mixture of experts in place of every block's MLP (Llama: Mixtral; Qwen3: Qwen3-MoE).
    pub experts: Option<ShapeExperts>,
}

/// A mixture of experts' shape: `used` of `count` experts run each token, each a gated MLP
/// `n_ff` wide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShapeExperts {
    pub count: usize,
    pub used: usize,
    pub n_ff: usize,
}

impl Shape {
    /// A Llama-family model small enough for tests on lavapipe: 2 layers of width 64, 4 query
    /// heads sharing 2 key/value heads of 16 dimensions, 256 tokens of vocabulary and context.
    pub const TINY: Shape =
        Shape::plain(Family::Llama, [2, 64, 128, 4, 2, 256, 256], 10_000.0, 1e-5);

    /// A shape of `family` with none of the optional atoms (untied embeddings, heads of
    /// `n_embd / n_head`, no window, no experts). `counts` are n_layer, n_embd, n_ff, n_head,
    /// n_head_kv, n_vocab and n_ctx_train, the columns of the presets' table.
    const fn plain(family: Family, counts: [usize; 7], rope_base: f32, norm_eps: f32) -> Shape {
        let [n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx_train] = counts;
        Shape {
            family,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            n_vocab,
            n_ctx_train,
            rope_base,
            norm_eps,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.key_length.unwrap_or(self.n_embd / self.n_head)
    }

    /// `general.architecture`: the family's, or its mixture-of-experts sibling's where the
    /// converter names one (Qwen3-MoE; Mixtral is `llama`).
    pub fn architecture(&self) -> &'static str {
        match (self.experts, self.family.moe_architecture()) {
            (Some(_), Some(moe)) => moe,
            _ => self.family.architecture(),
        }
    }

    /// Weights in the network, counted as `ModelConfig::n_params` counts them.
    pub fn n_params(&self) -> u64 {
        let tensors = self.tensors();
        tensors.iter().map(|t| (t.n_in * t.n_out) as u64).sum()
    }

    /// Bytes of tensor data with the weight matrices in `format` (norm gains stay F32);
    /// `None` when the rows do not fit the format's blocks.
    pub fn file_bytes(&self, format: Format) -> Option<u64> {
        self.tensors()
            .iter()
            .map(|t| {
                t.format(format)
                    .bytes_for(t.n_in * t.n_out)
                    .map(|b| b as u64)
            })
            .sum()
    }
}
