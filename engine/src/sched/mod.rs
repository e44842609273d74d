//! Continuous batching (Orca's iteration-level scheduling, Inferflow's AddQuery / Infer):
//! requests join and leave the running batch at every step.
//!
//! Each step runs one batched forward pass over the paged KV cache: every running sequence
//! in decode contributes its next token, and sequences still reading their prompt fill the
//! rest of the step's token budget with a chunk of it, so a long prompt never stalls the
//! decodes. A finished sequence gives its row back at once; its blocks stay as a prefix cache
//! (a later request sharing the prompt, or the next turn of a chat, reuses them) until
//! anything else needs the room. A new sequence shares the longest cached prefix it finds
//! (copy on write). When blocks run out, the newest running sequence is preempted: its
//! blocks are freed and it is recomputed later from its tokens. A request that could never
//! fit is refused when it is added.

mod drafts;
mod output;
mod request;
mod rows;

pub use request::{RequestId, RequestParams, SeqTimes, TokenEvent};

use std::collections::VecDeque;
use std::time::Instant;

use hearth_models::Tokenizer;

use crate::sample::TokenStream;
use crate::speculative::{DraftLength, DraftModel, DraftStats, Speculative};
use hearth_model::kv::{blocks_for, OutOfBlocks};
use hearth_model::{BatchedBackend, Logits, SeqStep};
use hearth_model::{Error, Result};
use rows::Row;

/// Where a sequence stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not in a cache row yet (new, or preempted).
    Waiting,
    /// In a row, computing tokens[computed..].
    Running,
    Done,
}

/// One completion of one request.
struct Sequence {
    request: RequestId,
    sample: usize,
    phase: Phase,
    row: usize,
    /// Prompt and generated tokens so far, and what continues them.
    stream: TokenStream,
    /// Tokens whose K/V the row holds.
    computed: usize,
    /// A sequence of the same request to wait for, so this one shares its prompt's blocks.
    after: Option<usize>,
    /// Order of (re)admission; the newest is preempted first.
    admitted: u64,
    times: SeqTimes,
    cancelled: bool,
    /// Speculative decoding's settings, when the request asked for it.
    speculative: Option<Speculative>,
    /// Tokens drafted to follow the pending one this step.
    draft: Vec<u32>,
    /// How many to draft next.
    draft_length: DraftLength,
    /// What this completion's drafts achieved.
    drafts: DraftStats,
}

impl Sequence {
    fn tokens(&self) -> &[u32] {
        self.stream.tokens()
    }
}

pub struct Scheduler<'a> {
    model: &'a mut dyn BatchedBackend,
    tokenizer: &'a Tokenizer,
    seqs: Vec<Sequence>,
    rows: Vec<Row>,
    waiting: VecDeque<usize>,
    next_request: u64,
    clock: u64,
    /// Tokens reused from cached prefixes, for reports.
    reused_tokens: usize,
    preemptions: usize,
    /// Most sequences running at once (at most the cache's rows).
    max_running: usize,
    /// The draft model, for requests that draft from one.
    draft_model: Option<&'a mut DraftModel>,
}

impl<'a> Scheduler<'a> {
    /// A scheduler over every row of `model`'s KV cache, which it takes over (emptied).
    pub fn new(model: &'a mut dyn BatchedBackend, tokenizer: &'a Tokenizer) -> Self {
        let rows = model.kv().shape().rows;
        for row in 0..rows {
            model.kv_mut().clear(row);
        }
        Self {
            model,
            tokenizer,
            seqs: Vec::new(),
            rows: vec![Row::Free; rows],
            waiting: VecDeque::new(),
            next_request: 0,
            clock: 0,
            reused_tokens: 0,
            preemptions: 0,
            max_running: rows,
            draft_model: None,
        }
    }

    /// Gives requests that ask for [`DraftSource::Model`](crate::speculative::DraftSource)
    /// their draft model. It holds one sequence's cache: with several such sequences
    /// running it re-reads each one's text as they take turns, so it pays most with one.
    pub fn with_draft_model(mut self, draft: Option<&'a mut DraftModel>) -> Self {
        self.draft_model = draft;
        self
    }

    /// Runs at most `n` sequences at once (at least 1, at most the cache's rows).
    pub fn set_max_running(&mut self, n: usize) {
        self.max_running = n.clamp(1, self.rows.len());
    }

    /// Most sequences running at once.
    pub fn max_running(&self) -> usize {
        self.max_running
    }

    pub fn model(&self) -> &dyn BatchedBackend {
        &*self.model
    }

    /// Queues a request; it joins the running batch at a coming step. A request that could
    /// never fit the context or the KV pool is refused here.
    pub fn add_request(&mut self, prompt: &[u32], params: &RequestParams) -> Result<RequestId> {
        let g = &params.generate;
        let n_vocab = self.model.config().n_vocab;
        params.check(
            self.tokenizer,
            prompt,
            self.model.kv().shape().n_ctx,
            n_vocab,
        )?;
        crate::speculative::check_drafting(
            g.speculative,
            self.draft_model.is_some(),
            self.model.kv_policy_stats().is_some(),
        )?;
        let c = self.model.config();
        if let Some(&id) = prompt.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(Error::BadToken {
                id,
                n_vocab: c.n_vocab,
            });
        }
        // Even alone, with every other sequence's blocks freed, it would not fit.
        let free = self.model.kv().pool().capacity();
        let needed = blocks_for(prompt.len() + g.max_tokens.unwrap_or(0).max(1));
        if needed > free {
            return Err(OutOfBlocks { needed, free }.into());
        }
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let now = Instant::now();
        let first = self.seqs.len();
        // Every completion's stream before any joins, so that a refusal leaves none behind.
        let streams = (0..params.n)
            .map(|i| {
                let mut g = g.clone();
                g.sampler.seed = g.sampler.seed.wrapping_add(i as u64);
                TokenStream::new(self.tokenizer, prompt, &g)
            })
            .collect::<Result<Vec<_>>>()?;
        for (i, stream) in streams.into_iter().enumerate() {
            // Without `max_tokens`, `sample` ends the stream when the context is full.
            self.waiting.push_back(self.seqs.len());
            self.seqs.push(Sequence {
                request: id,
                sample: i,
                phase: Phase::Waiting,
                row: 0,
                stream,
                computed: 0,
                after: (i > 0).then_some(first),
                admitted: 0,
                times: SeqTimes {
                    added: now,
                    first_token: None,
                    finished: None,
                    generated: 0,
                    prompt: prompt.len(),
                    reused: 0,
                },
                cancelled: false,
                speculative: g.speculative,
                draft: Vec::new(),
                draft_length: DraftLength::new(g.speculative.map_or(1, |s| s.max)),
                drafts: DraftStats::default(),
            });
        }
        Ok(id)
    }

    /// Ends a request's completions; each gets a last event with `Cancelled` at the next step.
    pub fn cancel(&mut self, id: RequestId) {
        for s in self.seqs.iter_mut().filter(|s| s.request == id) {
            if s.phase != Phase::Done {
                s.cancelled = true;
            }
        }
    }

    /// Sequences not finished yet (running or waiting).
    pub fn pending(&self) -> usize {
        self.seqs.iter().filter(|s| s.phase != Phase::Done).count()
    }

    /// Sequences in a cache row now.
    pub fn running(&self) -> usize {
        self.seqs
            .iter()
            .filter(|s| s.phase == Phase::Running)
            .count()
    }

    /// KV blocks the running sequences hold. Blocks only cached prefixes hold are free to
    /// take, so they are not counted: with nothing running this is 0.
    pub fn blocks_running(&self) -> usize {
        let rows = self
            .rows
            .iter()
            .enumerate()
            .filter_map(|(r, row)| match row {
                Row::Busy(_) => Some(r),
                _ => None,
            });
        self.model.kv().blocks_of(rows)
    }

    /// Prompt tokens taken from cached prefixes instead of being computed.
    pub fn reused_tokens(&self) -> usize {
        self.reused_tokens
    }

    pub fn preemptions(&self) -> usize {
        self.preemptions
    }

    /// Timings of completion `sample` of request `id`.
    pub fn times_of(&self, id: RequestId, sample: usize) -> Option<SeqTimes> {
        self.seqs
            .iter()
            .find(|s| s.request == id && s.sample == sample)
            .map(|s| s.times)
    }

    /// What the drafts of completion `sample` of request `id` achieved.
    pub fn drafts_of(&self, id: RequestId, sample: usize) -> Option<DraftStats> {
        self.seqs
            .iter()
            .find(|s| s.request == id && s.sample == sample)
            .map(|s| s.drafts)
    }

    /// Timings of every completion of `id`.
    pub fn times(&self, id: RequestId) -> Vec<SeqTimes> {
        self.seqs
            .iter()
            .filter(|s| s.request == id)
            .map(|s| s.times)
            .collect()
    }

    /// Sequences whose state the scheduler holds: the pending ones, and finished ones not
    /// yet forgotten.
    pub fn held(&self) -> usize {
        self.seqs.len()
    }

    /// Forgets finished sequences (their cached prefixes stay), whatever else runs: each
    /// holds its tokens, stop strings and a vocabulary-sized candidate buffer, so under
    /// unbroken load keeping them until idle would grow without bound. Call it once their
    /// last events (and [`times`](Self::times)) have been read.
    pub fn forget_finished(&mut self) {
        if self.seqs.iter().all(|s| s.phase != Phase::Done) {
            return;
        }
        // Sequences are named by index (rows, the waiting queue, `after`): renumber them.
        let mut new_index = vec![None; self.seqs.len()];
        let mut kept = 0;
        for (i, s) in self.seqs.iter().enumerate() {
            if s.phase != Phase::Done {
                new_index[i] = Some(kept);
                kept += 1;
            }
        }
        self.seqs.retain(|s| s.phase != Phase::Done);
        for s in &mut self.seqs {
            // A finished lead has read its prompt: nothing to wait for.
            s.after = s.after.and_then(|lead| new_index[lead]);
        }
        for r in 0..self.rows.len() {
            if let Row::Busy(i) = self.rows[r] {
                match new_index[i] {
                    Some(j) => self.rows[r] = Row::Busy(j),
                    // A sequence's row becomes a cached prefix as it finishes, so none
                    // finished holds one; were one to, its blocks are freed with it.
                    None => {
                        self.model.kv_mut().clear(r);
                        self.rows[r] = Row::Free;
                    }
                }
            }
        }
        self.waiting = self.waiting.iter().filter_map(|&i| new_index[i]).collect();
    }

    /// Runs one step: admits waiting sequences, runs one batched forward pass, samples, and
    /// returns what each completion produced. Returns no events when nothing is pending.
    pub fn step(&mut self) -> Result<Vec<TokenEvent>> {
        let mut events = Vec::new();
        self.finish_cancelled(&mut events);
        self.admit();
        self.draft()?;
        let plan = self.plan()?;
        if plan.is_empty() {
            return Ok(events);
        }
        // A decode with a draft feeds the pending token and the draft, and wants every
        // position's logits; `plan` has cut drafts to the step's room.
        let inputs: Vec<Vec<u32>> = plan
            .iter()
            .map(|&(i, n)| {
                let s = &self.seqs[i];
                let mut input = s.tokens()[s.computed..].to_vec();
                input.extend_from_slice(&s.draft);
                input.truncate(n);
                input
            })
            .collect();
        let steps: Vec<SeqStep> = plan
            .iter()
            .zip(&inputs)
            .map(|(&(i, n), input)| {
                let s = &self.seqs[i];
                let last = s.computed + n >= s.tokens().len();
                let logits = match (last, s.draft.is_empty()) {
                    (false, _) => None,
                    (true, true) => Some(Logits::Last),
                    (true, false) => Some(Logits::All),
                };
                SeqStep {
                    row: s.row,
                    tokens: input,
                    logits,
                    beam: None,
                }
            })
            .collect();
        let logits = self.model.step_batch(&steps)?;
        let now = Instant::now();
        for (&(i, n), logits) in plan.iter().zip(logits) {
            self.seqs[i].computed += n;
            if self.seqs[i].draft.is_empty() {
                if !logits.is_empty() {
                    self.sample(i, &logits, now, &mut events);
                }
            } else {
                self.verify_draft(i, &logits, now, &mut events);
            }
        }
        Ok(events)
    }
}
