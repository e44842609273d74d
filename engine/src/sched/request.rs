//! What a request asks for and what the scheduler streams back.

use std::time::Instant;

use hearth_models::Tokenizer;
use serde::Serialize;

use crate::sample::{FinishReason, GenerateParams, Logprobs};

/// Names a request for its whole life, as `add_request` returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RequestId(pub u64);

/// A request: a prompt (token ids) and how to continue it.
#[derive(Clone, Debug)]
pub struct RequestParams {
    pub generate: GenerateParams,
    /// Completions of the same prompt, each sampled with seed `seed + i`; they share the
    /// prompt's KV blocks.
    pub n: usize,
}

impl RequestParams {
    /// Checks a request before any work: its generation settings against `prompt`, a
    /// context of `n_ctx` and a vocabulary of `n_vocab`, its grammar against `tokenizer`'s
    /// ([`GenerateParams::check`]), and at least one completion.
    pub(crate) fn check(
        &self,
        tokenizer: &Tokenizer,
        prompt: &[u32],
        n_ctx: usize,
        n_vocab: usize,
    ) -> hearth_model::Result<()> {
        self.generate.check(tokenizer, prompt, n_ctx, n_vocab)?;
        if self.n == 0 {
            return Err(hearth_model::Error::options("n", "must be at least 1"));
        }
        Ok(())
    }
}

impl Default for RequestParams {
    fn default() -> Self {
        Self {
            generate: GenerateParams::default(),
            n: 1,
        }
    }
}

/// One step's news for one completion: a token and the text it completed, or the end.
#[derive(Clone, Debug, Serialize)]
pub struct TokenEvent {
    pub request: RequestId,
    /// Which of the request's `n` completions.
    pub sample: usize,
    /// The sampled token (`None` on an event that only ends the completion).
    pub token: Option<u32>,
    /// Text made visible by this token (stop strings held back and removed).
    pub text: String,
    /// Set on the completion's last event.
    pub finish: Option<FinishReason>,
    /// The token's log probability and alternatives, when the request asked for them.
    pub logprobs: Option<Logprobs>,
}

/// When things happened to one completion, for latency reports.
#[derive(Clone, Copy, Debug)]
pub struct SeqTimes {
    pub added: Instant,
    pub first_token: Option<Instant>,
    pub finished: Option<Instant>,
    pub generated: usize,
    /// Tokens of the prompt.
    pub prompt: usize,
    /// Prompt tokens taken from a cached prefix at the last admission.
    pub reused: usize,
}
