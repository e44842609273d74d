//! An encoder-decoder (T5) on the reference: the model crate's host forward pass over f32
//! matrices dequantized once at load. The oracle the other executors' encoder-decoders are
//! tested against, itself tested against transformers.

use hearth_model::seq2seq::{read_seq2seq, Product, Seq2SeqConfig, Seq2SeqModel};
use hearth_model::{ProgressFn, Result};
use hearth_models::{GgufFile, ResolvedModel};

use crate::matmul::matmul;

/// A matrix in f32, [rows, cols].
pub struct F32Matrix {
    values: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl Product for F32Matrix {
    fn product(&self, x: &[f32], _n: usize) -> Vec<f32> {
        matmul(x, &self.values, self.rows, self.cols)
    }
}

/// An encoder-decoder on the reference.
pub type RefSeq2Seq = Seq2SeqModel<F32Matrix>;

/// Loads `model` from `file` with every matrix in f32.
pub fn load_seq2seq(
    file: &GgufFile,
    model: &ResolvedModel,
    progress: &mut ProgressFn,
) -> Result<RefSeq2Seq> {
    let config = Seq2SeqConfig::from_resolved(file, model)?;
    let weights = read_seq2seq(file, model, &config, progress)?;
    let weights = weights.map_matrices(|p| F32Matrix {
        rows: p.rows(),
        cols: p.runs.first().map_or(0, |r| r.cols),
        values: p.to_f32(),
    });
    Ok(Seq2SeqModel::new(config, weights))
}
