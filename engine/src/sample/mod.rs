//! Choosing the next token from the model's logits, and deciding where generated text stops.
//!
//! [`Sampler`] runs llama.cpp's default chain with llama.cpp's default settings, so that a user
//! moving between the two gets the same behaviour from the same numbers:
//!
//! ```text
//! penalties -> top-k -> top-p -> min-p -> temperature -> draw from the softmax
//! ```
//!
//! A temperature of 0 or below replaces everything after the penalties with argmax. Top-p and
//! min-p see probabilities at temperature 1, because temperature comes after them. The chain
//! works on a list of `(token id, logit)` candidates that shrinks at each step, and top-k and
//! top-p use selections rather than a sort, so a vocabulary of 150k tokens costs a few passes.
//!
//! [`StopStrings`] is separate: it works on decoded text, not tokens. [`TokenStream`] puts the
//! two together for one generated sequence, with end of generation, detokenization and the
//! final flush; sessions and the batching scheduler both generate through it.

pub mod beam_scores;
mod filters;
mod logprobs;
mod sampler;
mod stop;
mod stream;

pub use logprobs::{logprobs, Logprobs, TokenLogprob, MAX_TOP_LOGPROBS};
pub use sampler::{Sampler, SamplerParamError, SamplerParams, DEFAULT_SEED};
pub use stop::{StopDelta, StopStrings};
pub use stream::{FinishReason, GenerateParams, Sampled, TokenStream};
