//! Text generation over a [`Backend`]: feed a prompt, sample, stream text, stop.
//!
//! A session remembers which tokens its KV cache holds. Each request passes the whole token
//! sequence (for a chat, the rendered conversation so far); the session keeps the longest
//! common prefix cached and feeds only the rest, so a multi-turn chat never recomputes earlier
//! turns, and editing an earlier message recomputes from the edit on.

use std::time::{Duration, Instant};

use hearth_models::Tokenizer;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::{Backend, Logits};
use crate::sample::{Sampler, SamplerParams, StopStrings};

/// What a generation request asks for.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate; `None` runs until the context is full.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerParams,
    /// Generation ends before any of these strings; they are not part of the text.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: Some(256),
            sampler: SamplerParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl GenerateParams {
    /// Checks a request before any work: valid sampling, a prompt, and room in a context of
    /// `n_ctx` for the prompt and `max_tokens`.
    pub(crate) fn check(&self, prompt: &[u32], n_ctx: usize) -> Result<()> {
        self.sampler
            .validate()
            .map_err(|e| Error::options(e.field, e.to_string()))?;
        if prompt.is_empty() {
            return Err(Error::options("prompt", "is empty"));
        }
        let needed = prompt.len() + self.max_tokens.unwrap_or(0);
        if needed > n_ctx {
            return Err(Error::ContextFull {
                needed,
                used: 0,
                n_ctx,
            });
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    Stop,
    /// `max_tokens` were generated, or the context is full.
    Length,
    /// The caller's callback asked to stop.
    Cancelled,
}

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
}

/// One model with its KV cache and the tokens the cache holds.
pub struct Session {
    backend: Box<dyn Backend + Send>,
    /// Tokens at positions 0..cached.len(); the backend may hold more after
    /// [`backend_at`](Session::backend_at), which the next use drops.
    cached: Vec<u32>,
}

impl Session {
    pub fn new(backend: Box<dyn Backend + Send>) -> Self {
        Self {
            backend,
            cached: Vec::new(),
        }
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
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
        let n_ctx = self.backend.n_ctx();
        params.check(prompt, n_ctx)?;

        // Reuse the cached prefix; at least one token must run to produce logits.
        let keep = self.keep_prefix(prompt, prompt.len() - 1);

        let start = Instant::now();
        let new = &prompt[keep..];
        let mut logits = self.backend.forward(new, Logits::Last)?;
        self.cached.extend_from_slice(new);
        let mut timings = Timings {
            prompt_tokens: new.len(),
            cached_tokens: keep,
            prompt: start.elapsed(),
            ..Timings::default()
        };

        let mut sampler = Sampler::new(params.sampler.clone());
        let mut stops = StopStrings::new(params.stop.clone());
        let mut decoder = tokenizer.stream_decoder(true);
        let mut history = prompt.to_vec();
        let mut tokens = Vec::new();
        let mut text = String::new();
        let gen_start = Instant::now();
        let limit = params.max_tokens.unwrap_or(usize::MAX);
        let finish = loop {
            if tokens.len() >= limit {
                break FinishReason::Length;
            }
            let id = sampler.sample(&logits, &history);
            tokens.push(id);
            history.push(id);
            if !params.ignore_eos && tokenizer.is_end_of_generation(id) {
                break FinishReason::Eos;
            }
            let delta = stops.push(&decoder.push(tokenizer, id));
            text.push_str(&delta.text);
            if !delta.text.is_empty() && !on_text(&delta.text) {
                break FinishReason::Cancelled;
            }
            if delta.stop.is_some() {
                break FinishReason::Stop;
            }
            if tokens.len() >= limit || self.backend.len() >= n_ctx {
                break FinishReason::Length;
            }
            logits = self.backend.forward(&[id], Logits::Last)?;
            self.cached.push(id);
        };
        if !matches!(finish, FinishReason::Stop | FinishReason::Cancelled) {
            let rest = stops.push(&decoder.finish());
            let tail = rest.text + &stops.finish();
            if !tail.is_empty() {
                on_text(&tail);
                text.push_str(&tail);
            }
        }
        timings.generated_tokens = tokens.len();
        timings.generation = gen_start.elapsed();
        Ok(Generation {
            text,
            tokens,
            finish,
            timings,
        })
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
