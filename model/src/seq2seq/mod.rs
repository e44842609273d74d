//! Encoder-decoder networks (T5 and its kind): the encoder reads the whole input once; the
//! decoder then generates, each block attending to the tokens generated so far (causally,
//! through its own cache), then to the encoder's output, then running its MLP.
//!
//! - [`Seq2SeqConfig`]: the shape and atoms, checked against what the executors run;
//! - [`Seq2SeqWeights`] and [`read_seq2seq`]: the weights, packed as the file holds them;
//! - [`buckets`]: T5's relative position buckets;
//! - [`Seq2SeqModel`]: the forward pass on the host over any matrix [`Product`], the
//!   decoder's self-attention over a paged cache whose rows beams fork (the reference and
//!   the native CPU executor run it with their own products);
//! - [`Seq2Seq`]: what an executor offers the engine.

pub mod buckets;
mod cache;
mod config;
mod forward;
mod weights;

pub use config::{Seq2SeqConfig, Seq2SeqMlp};
pub use forward::{Product, Seq2SeqModel, DECODER_ROWS};
pub use weights::{read_seq2seq, CrossWeights, Seq2SeqBlock, Seq2SeqWeights};

use crate::backend::Logits;
use crate::error::Result;

/// An encoder-decoder loaded on an executor. The decoder keeps one sequence per row: a
/// beam search forks rows.
pub trait Seq2Seq: Send {
    fn config(&self) -> &Seq2SeqConfig;
    /// The encoder's output for one input, [tokens, n_embd], after its final norm.
    fn encode(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// Makes `row` a new decoder sequence over `memory` (an [`encode`](Self::encode)
    /// output), with nothing generated yet.
    fn begin(&mut self, row: usize, memory: &[f32]) -> Result<()>;
    /// Appends `tokens` to `row`'s sequence and returns their logits (`Last`: [n_vocab];
    /// `All`: [tokens, n_vocab]).
    fn decode(&mut self, row: usize, tokens: &[u32], logits: Logits) -> Result<Vec<f32>>;
    /// Makes `dst` a copy of `src`'s sequence (its encoder output shared, not copied).
    fn fork(&mut self, src: usize, dst: usize) -> Result<()>;
    /// Tokens decoded in `row` so far.
    fn len(&self, row: usize) -> usize;
    /// Forgets `row`'s sequence.
    fn end(&mut self, row: usize);
    /// Decoder rows (sequences at once: a beam search needs twice its width).
    fn rows(&self) -> usize;
}

/// Checks an input against the model: some tokens, each within the vocabulary.
pub fn check_tokens(config: &Seq2SeqConfig, what: &str, tokens: &[u32]) -> Result<()> {
    use crate::error::Error;
    if tokens.is_empty() {
        return Err(Error::options(what, "no tokens"));
    }
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= config.n_vocab) {
        return Err(Error::BadToken {
            id,
            n_vocab: config.n_vocab,
        });
    }
    Ok(())
}
