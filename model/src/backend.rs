//! What an executor offers: [`Backend`], a model with its KV cache for one sequence, and
//! [`BatchedBackend`], batched steps over the rows of a paged cache (the scheduler, beam
//! search). The CPU reference and the Vulkan executor implement them; the engine holds either
//! as a `Box<dyn Backend>`.

use std::any::Any;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::kv::policy::{KvPolicyChoice, KvPolicyStats};
use crate::kv::{KvTables, KvUsage};

/// Which logits a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's, [tokens, n_vocab] (perplexity, tests).
    All,
}

/// A model with its KV cache for one sequence. `forward` appends `tokens` at positions
/// `len()..` and returns logits.
pub trait Backend: Any {
    fn config(&self) -> &ModelConfig;
    /// Positions the KV cache holds.
    fn n_ctx(&self) -> usize;
    /// Positions already in the cache.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets positions from `len` on (a new conversation, or an edit of an earlier turn).
    fn truncate(&mut self, len: usize);
    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>>;
    /// Batched steps over several sequences (the scheduler, beam search), where this
    /// executor runs them; `None` otherwise.
    fn as_batched_mut(&mut self) -> Option<&mut dyn BatchedBackend> {
        None
    }
    fn as_batched(&self) -> Option<&dyn BatchedBackend> {
        None
    }
    /// The executor itself, for callers that need what only it offers (the CPU reference's
    /// activation sums, say): downcast it to its type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Runs the KV policy `choice` from now on, over what the cache holds; an error where
    /// the backend does not run it.
    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        match choice {
            KvPolicyChoice::Dense => Ok(()),
            other => Err(Error::options(
                "kv-offload",
                format!("{} is not available on this backend", other.kind()),
            )),
        }
    }

    /// What the KV policy read so far, when a sparse one runs.
    fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
        None
    }
    /// What each executor of the model holds (one part unless the model is split); empty
    /// where the executor does not say (the CPU reference).
    fn placement(&self) -> Vec<crate::PlacedPart> {
        Vec::new()
    }
    /// GPU time per kernel since load, where the backend was asked to profile; empty
    /// otherwise.
    fn profile(&self) -> Profile {
        Profile::default()
    }
}

/// GPU time per kernel since load (`--profile`).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// (kernel, nanoseconds, dispatches).
    pub kernels: Vec<(&'static str, f64, u64)>,
    /// GPU time of InfiniGen's fetch kernels (speculation, selection, gather).
    pub fetch_ns: f64,
    /// How long InfiniGen's fetch kernels ran while other kernels ran too: the part of the
    /// fetch hidden behind the previous layer's compute. Zero on a device that runs one
    /// command at a time.
    pub fetch_overlap_ns: f64,
}

/// One sequence's part of a batched step: `tokens` appended to cache row `row`.
#[derive(Clone, Copy, Debug)]
pub struct SeqStep<'a> {
    pub row: usize,
    pub tokens: &'a [u32],
    /// Which logits to return for this sequence.
    pub logits: Option<Logits>,
    /// The row's beam table offset (from [`BatchedBackend::set_beams`]), when it reads its
    /// history through one.
    pub beam: Option<u32>,
}

/// An executor that steps several sequences at once over the rows of a paged KV cache.
pub trait BatchedBackend: Backend {
    /// The cache's block tables.
    fn kv(&self) -> &KvTables;
    /// Blocks in use and free, and the bytes of the whole cache (every part's, where the
    /// model is split).
    fn kv_usage(&self) -> KvUsage {
        self.kv().usage()
    }
    fn kv_mut(&mut self) -> &mut KvTables;
    /// Makes row `dst` share the first `len` positions of row `src` (prefix sharing; blocks
    /// are copied on write), with the KV policy's state for them.
    fn fork(&mut self, src: usize, dst: usize, len: usize);
    /// Most tokens one [`step_batch`](Self::step_batch) takes.
    fn max_step_tokens(&self) -> usize;
    /// Appends each sequence's tokens to its row in one step and returns the logits each
    /// asked for, in order.
    fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>>;
    /// Writes `row`'s beam table: position p of the sequence in `row` is read from row
    /// `beams[p]`. Returns the offset a step takes as the sequence's [`SeqStep::beam`].
    fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32>;
}

/// The steps of a single-sequence [`Backend::forward`] of `tokens` into row 0: chunks of at
/// most `chunk` tokens, of equal size so that a prompt's last is never a lone token (which
/// InfiniGen and H2O would take for a decode step), each with the logits it returns (`All`:
/// every chunk's; `Last`: the last chunk's last) and whether more chunks follow.
pub fn forward_steps(
    tokens: &[u32],
    chunk: usize,
    logits: Logits,
) -> impl Iterator<Item = (SeqStep<'_>, bool)> {
    let chunks = tokens.len().div_ceil(chunk.max(1));
    let size = tokens.len().div_ceil(chunks.max(1)).max(1);
    tokens.chunks(size).enumerate().map(move |(i, part)| {
        let more = i + 1 < chunks;
        let rows = match logits {
            Logits::All => Some(Logits::All),
            Logits::Last if !more => Some(Logits::Last),
            Logits::Last => None,
        };
        let step = SeqStep {
            row: 0,
            tokens: part,
            logits: rows,
            beam: None,
        };
        (step, more)
    })
}

/// Checks a step before any work: ids in the vocabulary, positions within the context.
pub fn check_step(c: &ModelConfig, tokens: &[u32], len: usize, n_ctx: usize) -> Result<()> {
    if tokens.is_empty() {
        return Err(Error::options("tokens", "a step needs at least one token"));
    }
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
        return Err(Error::BadToken {
            id,
            n_vocab: c.n_vocab,
        });
    }
    if len + tokens.len() > n_ctx {
        return Err(Error::ContextFull {
            needed: tokens.len(),
            used: len,
            n_ctx,
        });
    }
    Ok(())
}
