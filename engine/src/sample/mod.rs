//! Choosing the next token from the model's logits, and deciding where generated text stops.
//!
//! [`Sampler`] runs llama.cpp's default chain with llama.cpp's default settings, so that a user
//! moving between the two gets the same behaviour from the same numbers:
//!
//! ```text
//! logit bias -> penalties -> DRY -> top-k -> tail-free -> typical -> top-p -> min-p -> XTC
//!            -> temperature -> draw from the softmax
//! ```
//!
//! A temperature of 0 or below replaces everything after DRY with argmax; FSD (deterministic,
//! `fsd`) replaces it with its own choice, and Mirostat (`mirostat`) replaces the filters
//! with its truncation at the sampling temperature. The filters see probabilities at
//! temperature 1, because temperature comes after them. Mirostat and DRY follow llama.cpp's
//! samplers of those names; typical, tail-free and XTC do too (`tail`, `xtc`). The chain
//! works on a list of `(token id, logit)` candidates that shrinks at each step, and top-k and
//! top-p use selections rather than a sort, so a vocabulary of 150k tokens costs a few passes.
//!
//! [`StopStrings`] is separate: it works on decoded text, not tokens. [`TokenStream`] puts the
//! two together for one generated sequence, with end of generation, detokenization and the
//! final flush; sessions and the batching scheduler both generate through it.

pub mod beam_scores;
mod dry;
mod filters;
mod fsd;
mod logprobs;
mod mirostat;
mod sampler;
mod stop;
mod stream;
mod tail;
mod xtc;

pub use logprobs::{logprobs, Logprobs, TokenLogprob, MAX_TOP_LOGPROBS};
pub use sampler::{Sampler, SamplerParamError, SamplerParams, DEFAULT_SEED, DRY_SEQUENCE_BREAKERS};
pub use stop::{StopDelta, StopStrings};
pub use stream::{FinishReason, GenerateParams, Sampled, TokenStream};
