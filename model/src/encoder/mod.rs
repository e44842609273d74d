//! Encoder-only networks (BERT and its kind): what an embedding or reranking model is, read
//! once for every executor. A text's tokens attend to each other in both directions (with no
//! cache: the whole input is one step), and each block adds its attention and then its MLP
//! to the residual stream and normalizes after each add (post-norm).
//!
//! - [`EncoderConfig`]: the shape and atoms, checked against what the executors run;
//! - [`EncoderWeights`] and [`read_encoder`]: the weights, packed as the file holds them;
//! - [`Encoder`]: what an executor offers (a batch of texts in, each token's hidden state out);
//! - [`pool`] and [`Pooling`]: one vector per text, as sentence-transformers pools it.

mod config;
mod pool;
mod weights;

pub use config::{EncoderActivation, EncoderConfig};
pub use pool::{l2_normalize, pool, Pooling};
pub use weights::{read_encoder, ClassifierHead, EncoderLayer, EncoderWeights, Norm};

use crate::error::Result;

/// One text's input: its tokens and their segments (BERT's token types: 0 for the first
/// text of a pair, 1 for the second).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncoderInput {
    pub tokens: Vec<u32>,
    /// As many as `tokens`; empty means all 0.
    pub types: Vec<u32>,
}

/// An encoder model loaded on an executor.
pub trait Encoder {
    fn config(&self) -> &EncoderConfig;
    /// Each text's hidden states after the last block, [tokens, n_embd] per text, texts in
    /// the order given. Texts of different lengths run in one step; none sees another's
    /// tokens.
    fn encode(&mut self, batch: &[EncoderInput]) -> Result<Vec<Vec<f32>>>;
    /// The classifier head, where the model has one (cross-encoders).
    fn head(&self) -> Option<&ClassifierHead>;
}

/// Checks a batch against the model: lengths within the learned positions, ids within the
/// vocabulary and the token types.
pub fn check_batch(config: &EncoderConfig, batch: &[EncoderInput]) -> Result<()> {
    use crate::error::Error;
    for (i, input) in batch.iter().enumerate() {
        let n = input.tokens.len();
        if n == 0 {
            return Err(Error::options("input", format!("text {i} has no tokens")));
        }
        if n > config.n_positions {
            return Err(Error::options(
                "input",
                format!(
                    "text {i} has {n} tokens; the model reads at most {}",
                    config.n_positions
                ),
            ));
        }
        if let Some(&t) = input.tokens.iter().find(|&&t| t as usize >= config.n_vocab) {
            return Err(Error::options(
                "input",
                format!(
                    "token {t} of text {i} is outside the vocabulary of {}",
                    config.n_vocab
                ),
            ));
        }
        if !input.types.is_empty() && input.types.len() != n {
            return Err(Error::options(
                "input",
                format!(
                    "text {i} has {n} tokens but {} token types",
                    input.types.len()
                ),
            ));
        }
        if let Some(&t) = input
            .types
            .iter()
            .find(|&&t| t as usize >= config.n_token_types)
        {
            return Err(Error::options(
                "input",
                format!(
                    "token type {t} of text {i}: the model has {}",
                    config.n_token_types
                ),
            ));
        }
    }
    Ok(())
}
