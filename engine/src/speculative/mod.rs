//! Speculative decoding: a cheap drafter guesses the next few tokens, the target model scores
//! the pending token and every guess in one step, and the guesses the target agrees with are
//! kept. A step over k+1 tokens costs little more than one token where decoding is bound by
//! reading the weights, so every accepted guess is a token gained.
//!
//! The output is the target's: under greedy decoding the same tokens, under sampling the same
//! distribution ([`verify`]). Two drafters:
//!
//! - [`PromptLookup`] finds the last few tokens earlier in the text and proposes what followed
//!   them there. No second model; it pays where output repeats its input (editing, retrieval,
//!   code).
//! - [`DraftModel`] runs a smaller model (or the same one quantized lower) greedily.

mod distribution;
mod draft_model;
mod lookup;
mod verify;

pub use distribution::Distribution;
pub use draft_model::DraftModel;
pub use lookup::PromptLookup;
pub use verify::{verify, Verdict};

use serde::Serialize;

use hearth_model::{Error, Result};
use hearth_models::Tokenizer;

/// Where drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftSource {
    /// n-grams of the prompt and the text so far ([`PromptLookup`]).
    Lookup,
    /// The draft model loaded beside the target ([`DraftModel`]).
    Model,
}

/// How the target decides on a drafted token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acceptance {
    /// The rejection rule of Leviathan et al. and Chen et al.: the output follows the
    /// target's distribution exactly.
    #[default]
    Exact,
    /// The Inferflow report's "top sampling" acceptance: a drafted token is kept whenever it
    /// is in the pool the target's top-k / top-p / min-p filters leave. More tokens are
    /// accepted, and the output no longer follows the target's distribution exactly (under
    /// greedy decoding the pool is one token, and it is exact again).
    TopPool,
}

/// Speculative decoding's settings for one generation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speculative {
    pub source: DraftSource,
    /// Most tokens drafted per step (`--draft-max`).
    pub max: usize,
    /// The draft model stops drafting at a token it gives less than this probability
    /// (`--draft-p-min`); prompt lookup ignores it.
    pub p_min: f32,
    pub acceptance: Acceptance,
}

impl Speculative {
    /// llama.cpp's defaults for a draft model: up to 16 tokens, stopping below 0.8.
    pub fn model() -> Self {
        Self {
            source: DraftSource::Model,
            max: 16,
            p_min: 0.8,
            acceptance: Acceptance::Exact,
        }
    }

    /// Prompt lookup, up to 10 tokens a step.
    pub fn lookup() -> Self {
        Self {
            source: DraftSource::Lookup,
            max: 10,
            p_min: 0.0,
            acceptance: Acceptance::Exact,
        }
    }
}

/// What a generation's drafts achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DraftStats {
    /// Target steps that verified a draft.
    pub steps: usize,
    /// Tokens drafted.
    pub drafted: usize,
    /// Drafted tokens the target kept.
    pub accepted: usize,
}

impl DraftStats {
    /// The fraction of drafted tokens kept; 0 with no drafts.
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    pub fn add(&mut self, other: DraftStats) {
        self.steps += other.steps;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
    }
}

/// How many tokens to draft next: a draft wholly accepted earns two more, a rejection costs
/// one (the heuristic of Hugging Face's assisted generation). A verified token that is
/// rejected costs a position of the step for nothing, so the length follows what the text
/// lets the drafter guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftLength {
    len: usize,
    max: usize,
}

impl DraftLength {
    pub fn new(max: usize) -> Self {
        Self {
            len: max.clamp(1, 4),
            max: max.max(1),
        }
    }

    /// Tokens to draft now.
    pub fn get(&self) -> usize {
        self.len
    }

    /// Learns from a verified draft of `drafted` tokens, `accepted` of them kept.
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.len = if accepted == drafted {
            (self.len + 2).min(self.max)
        } else {
            self.len.saturating_sub(1).max(1)
        };
    }
}

/// Proposes tokens to follow a text.
pub trait Drafter: Send {
    /// Up to `max` tokens likely to follow `tokens` (the prompt and everything generated,
    /// the token about to be fed last). May propose none.
    fn propose(&mut self, tokens: &[u32], max: usize, p_min: f32) -> Result<Vec<u32>>;
}

impl<D: Drafter + ?Sized> Drafter for &mut D {
    fn propose(&mut self, tokens: &[u32], max: usize, p_min: f32) -> Result<Vec<u32>> {
        (**self).propose(tokens, max, p_min)
    }
}

/// Refuses a draft whose tokens are not the target's: drafted ids go to the target as they
/// are, so one token read differently would make every draft after it worthless.
pub fn check_same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    if n != m {
        return Err(Error::options(
            "draft",
            format!(
                "the draft model has a vocabulary of {m} tokens and the target {n}; a draft \
                 model must share the target's tokenizer"
            ),
        ));
    }
    match (0..n as u32).find(|&id| target.token_bytes(id) != draft.token_bytes(id)) {
        Some(id) => Err(Error::options(
            "draft",
            format!(
                "token {id} is {:?} in the target and {:?} in the draft model; a draft model \
                 must share the target's tokenizer",
                target.token_text(id).unwrap_or_default(),
                draft.token_text(id).unwrap_or_default()
            ),
        )),
        None => Ok(()),
    }
}

/// Refuses speculative decoding where it cannot run: from a draft model when none is loaded,
/// and beside a sparse KV policy (InfiniGen, H2O), which takes a step of several tokens for a
/// prompt and would not score a draft as decoding.
pub fn check_drafting(
    speculative: Option<Speculative>,
    has_draft_model: bool,
    sparse_kv: bool,
) -> Result<()> {
    let Some(spec) = speculative else {
        return Ok(());
    };
    if spec.source == DraftSource::Model && !has_draft_model {
        return Err(Error::options(
            "draft",
            "speculative decoding from a draft model needs one loaded (--draft MODEL)",
        ));
    }
    if sparse_kv {
        return Err(Error::options(
            "draft",
            "speculative decoding does not run beside --kv-offload infinigen or h2o",
        ));
    }
    if spec.max == 0 {
        return Err(Error::options("draft-max", "must be at least 1"));
    }
    Ok(())
}
