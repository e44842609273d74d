//! Text generation over a [`Backend`]: feed a prompt, sample, stream text, stop.
//!
//! A session remembers which tokens its KV cache holds. Each request passes the whole token
//! sequence (for a chat, the rendered conversation so far); the session keeps the longest
//! common prefix cached and feeds only the rest, so a multi-turn chat never recomputes earlier
//! turns, and editing an earlier message recomputes from the edit on.

use std::time::{Duration, Instant};

use hearth_models::Tokenizer;
use serde::Serialize;

pub use crate::sample::{FinishReason, GenerateParams};
use crate::sample::{Sampled, TokenStream};
use crate::speculative::{
    Acceptance, DraftLength, DraftModel, DraftSource, DraftStats, Drafter, PromptLookup, Verdict,
};
use hearth_model::Result;
use hearth_model::{Backend, Logits};

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Timings {
    /// Prompt tokens computed (those not already cached).
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the cache.
    pub cached_tokens: usize,
    #[serde(serialize_with = "as_ms")]
    pub prompt: Duration,
    pub generated_tokens: usize,
    /// From the first generated token's step to the last.
    #[serde(serialize_with = "as_ms")]
    pub generation: Duration,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Timings {
    pub fn prompt_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt.as_secs_f64().max(1e-9)
    }

    /// Decode speed: every generated token after the first costs one step.
    pub fn generation_tokens_per_second(&self) -> f64 {
        self.generated_tokens.saturating_sub(1) as f64 / self.generation.as_secs_f64().max(1e-9)
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    /// The text shown to the user (stop strings removed).
    pub text: String,
    /// Generated token ids, including a final end-of-generation token.
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    pub timings: Timings,
    /// Drafted and accepted tokens, when decoding speculatively.
    pub draft: DraftStats,
}

/// One model with its KV cache and the tokens the cache holds.
pub struct Session {
    backend: Box<dyn Backend + Send>,
    /// Tokens at positions 0..cached.len(); the backend may hold more after
    /// [`backend_at`](Session::backend_at), which the next use drops.
    cached: Vec<u32>,
    /// The model that drafts for speculative decoding, when one is loaded.
    draft: Option<DraftModel>,
}

impl Session {
    pub fn new(backend: Box<dyn Backend + Send>) -> Self {
        Self {
            backend,
            cached: Vec::new(),
            draft: None,
        }
    }

    /// Loads the model that drafts for [`DraftSource::Model`].
    pub fn set_draft_model(&mut self, draft: Option<DraftModel>) {
        self.draft = draft;
    }

    pub fn draft_model(&self) -> Option<&DraftModel> {
        self.draft.as_ref()
    }

    /// The backend (its cache emptied, as [`fresh_backend`](Self::fresh_backend)) and the
    /// draft model, for a scheduler that runs both.
    pub fn batching_parts(&mut self) -> (&mut dyn Backend, Option<&mut DraftModel>) {
        self.cached.clear();
        self.backend.truncate(0);
        (&mut *self.backend, self.draft.as_mut())
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The backend, the session consumed.
    pub fn into_backend(self) -> Box<dyn Backend + Send> {
        self.backend
    }

    /// Empties the cache and hands out the backend for direct use (benchmarks, perplexity);
    /// the session treats the cache as empty afterwards.
    pub fn fresh_backend(&mut self) -> &mut dyn Backend {
        self.cached.clear();
        self.backend.truncate(0);
        &mut *self.backend
    }

    /// Hands out the backend with the cache holding `prefix` (the part already cached is
    /// kept, the rest runs), for direct use past it: benchmarks at a depth run the depth once.
    /// The session then counts only `prefix` as cached.
    pub fn backend_at(&mut self, prefix: &[u32]) -> Result<&mut dyn Backend> {
        let keep = self.keep_prefix(prefix, prefix.len());
        if keep < prefix.len() {
            self.backend.forward(&prefix[keep..], Logits::Last)?;
        }
        self.cached = prefix.to_vec();
        Ok(&mut *self.backend)
    }

    /// Cuts the cache back to what it shares with `tokens`, at most `limit` tokens, and
    /// returns how many it kept.
    fn keep_prefix(&mut self, tokens: &[u32], limit: usize) -> usize {
        let keep = common_prefix(&self.cached, tokens)
            .min(limit)
            .min(self.backend.len());
        self.backend.truncate(keep);
        // An evicting pool may not go back that far and start over instead.
        let keep = self.backend.len();
        self.cached.truncate(keep);
        keep
    }

    /// Tokens in the KV cache.
    pub fn cached(&self) -> &[u32] {
        &self.cached
    }

    /// Empties the cache.
    pub fn clear(&mut self) {
        self.cached.clear();
        self.backend.truncate(0);
    }

    /// Generates a continuation of `prompt` (the whole sequence, not just a new turn),
    /// streaming text to `on_text`; returning `false` from it stops generation.
    pub fn generate(
        &mut self,
        tokenizer: &Tokenizer,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        self.generate_tokens(tokenizer, prompt, params, &mut |step| match step {
            Step::Token(next) => next.text.is_empty() || on_text(&next.text),
            Step::Tail(tail) => on_text(tail),
        })
    }

    /// [`generate`](Self::generate), reporting every sampled token (its id, text and log
    /// probabilities) and then the held-back text; returning `false` from a token stops
    /// generation.
    pub fn generate_tokens(
        &mut self,
        tokenizer: &Tokenizer,
        prompt: &[u32],
        params: &GenerateParams,
        on_step: &mut dyn FnMut(Step<'_>) -> bool,
    ) -> Result<Generation> {
        let n_ctx = self.backend.n_ctx();
        params.check(tokenizer, prompt, n_ctx, self.backend.config().n_vocab)?;
        let mut stream = TokenStream::new(tokenizer, prompt, params)?;

        // Reuse the cached prefix; at least one token must run to produce logits.
        let keep = self.keep_prefix(prompt, prompt.len() - 1);

        let start = Instant::now();
        let new = &prompt[keep..];
        let logits = self.backend.forward(new, Logits::Last)?;
        self.cached.extend_from_slice(new);
        let mut timings = Timings {
            prompt_tokens: new.len(),
            cached_tokens: keep,
            prompt: start.elapsed(),
            ..Timings::default()
        };

        crate::speculative::check_drafting(
            params.speculative,
            self.draft.is_some(),
            self.backend.kv_policy_stats().is_some(),
        )?;
        let mut drafter = drafter(&mut self.draft, params)?;
        let acceptance = params
            .speculative
            .map_or(Acceptance::Exact, |s| s.acceptance);
        let mut draft = DraftStats::default();
        let mut length = DraftLength::new(params.speculative.map_or(1, |s| s.max));
        let mut text = String::new();
        let gen_start = Instant::now();
        let finish = 'generate: {
            // Only `max_tokens: Some(0)` ends here: later tokens end below, in the stream.
            if stream.at_max_tokens() {
                break 'generate FinishReason::Length;
            }
            let first = stream.sample(tokenizer, &logits);
            text.push_str(&first.text);
            if !on_step(Step::Token(&first)) {
                break 'generate FinishReason::Cancelled;
            }
            if let Some(reason) = first.finish {
                break 'generate reason;
            }
            // The last token drawn, not yet in the cache.
            let mut pending = first.token;
            loop {
                let len = self.backend.len();
                if len >= n_ctx {
                    break 'generate FinishReason::Length;
                }
                // Room for the pending token and the drafts, in the cache and in
                // `max_tokens` (the pending token is already counted).
                let room = (n_ctx - len - 1).min(stream.remaining());
                let drafts = match (&mut drafter, params.speculative) {
                    (Some(d), Some(spec)) if room > 0 => {
                        d.propose(stream.tokens(), length.get().min(room), spec.p_min)?
                    }
                    _ => Vec::new(),
                };
                let mut input = Vec::with_capacity(1 + drafts.len());
                input.push(pending);
                input.extend_from_slice(&drafts);
                let which = if drafts.is_empty() {
                    Logits::Last
                } else {
                    Logits::All
                };
                let rows = self.backend.forward(&input, which)?;
                self.cached.extend_from_slice(&input);
                if !drafts.is_empty() {
                    draft.steps += 1;
                    draft.drafted += drafts.len();
                }
                let n_vocab = rows.len() / input.len();
                // Row i scores the token after input[i]: drafts[i] while drafts last, then
                // the bonus token after a fully accepted draft.
                for (i, row) in rows.chunks_exact(n_vocab).enumerate() {
                    let (kept, next) = match drafts.get(i) {
                        Some(&d) => {
                            let (verdict, next) = stream.verify(tokenizer, row, d, acceptance);
                            (verdict == Verdict::Accepted, next)
                        }
                        None => (false, stream.sample(tokenizer, row)),
                    };
                    if kept {
                        draft.accepted += 1;
                    }
                    text.push_str(&next.text);
                    if !on_step(Step::Token(&next)) {
                        break 'generate FinishReason::Cancelled;
                    }
                    if let Some(reason) = next.finish {
                        break 'generate reason;
                    }
                    if !kept {
                        // Drop the cache past the pending token and the accepted drafts.
                        pending = next.token;
                        self.backend.truncate(len + 1 + i);
                        self.cached.truncate(len + 1 + i);
                        length.update(drafts.len(), i);
                        break;
                    }
                }
            }
        };
        // A stream that ended inside a draft leaves that draft's last tokens in the cache;
        // keep what a run without drafts holds: everything but the last token drawn.
        drop(drafter);
        let tokens = stream.tokens();
        self.keep_prefix(tokens, tokens.len() - 1);
        let tail = stream.finish(finish);
        if !tail.is_empty() {
            on_step(Step::Tail(&tail));
            text.push_str(&tail);
        }
        let tokens = stream.into_generated();
        timings.generated_tokens = tokens.len();
        timings.generation = gen_start.elapsed();
        Ok(Generation {
            text,
            tokens,
            finish,
            timings,
            draft,
        })
    }
}

/// The drafter `params` ask for: prompt lookup, or the session's draft model.
fn drafter<'a>(
    model: &'a mut Option<DraftModel>,
    params: &GenerateParams,
) -> Result<Option<Box<dyn Drafter + 'a>>> {
    let Some(spec) = params.speculative else {
        return Ok(None);
    };
    match spec.source {
        DraftSource::Lookup => Ok(Some(Box::new(PromptLookup::default()))),
        DraftSource::Model => Ok(model.as_mut().map(|m| Box::new(m) as Box<dyn Drafter>)),
    }
}

/// What [`Session::generate_tokens`] reports as it goes.
pub enum Step<'a> {
    /// A sampled token.
    Token(&'a Sampled),
    /// Text held back until the end (an incomplete character, a possible stop string's start).
    Tail(&'a str),
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
