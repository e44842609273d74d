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

mod request;

pub use request::{RequestId, RequestParams, SeqTimes, TokenEvent};

use std::collections::VecDeque;
use std::time::Instant;

use hearth_models::Tokenizer;

use crate::error::{Error, Result};
use crate::kv::{blocks_for, OutOfBlocks};
use crate::model::{Backend, Logits, SeqStep, VkModel};
use crate::sample::{FinishReason, TokenStream};

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
}

impl Sequence {
    fn tokens(&self) -> &[u32] {
        self.stream.tokens()
    }
}

/// What a cache row holds.
#[derive(Clone, Debug)]
enum Row {
    Free,
    /// A running sequence (index into `seqs`).
    Busy(usize),
    /// A finished sequence's tokens, kept as a prefix cache until the room is needed.
    Cached {
        tokens: Vec<u32>,
        used: u64,
    },
}

pub struct Scheduler<'a> {
    model: &'a mut VkModel,
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
}

impl<'a> Scheduler<'a> {
    /// A scheduler over every row of `model`'s KV cache, which it takes over (emptied).
    pub fn new(model: &'a mut VkModel, tokenizer: &'a Tokenizer) -> Self {
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
        }
    }

    /// Runs at most `n` sequences at once (at least 1, at most the cache's rows).
    pub fn set_max_running(&mut self, n: usize) {
        self.max_running = n.clamp(1, self.rows.len());
    }

    pub fn model(&self) -> &VkModel {
        self.model
    }

    /// Queues a request; it joins the running batch at a coming step. A request that could
    /// never fit the context or the KV pool is refused here.
    pub fn add_request(&mut self, prompt: &[u32], params: &RequestParams) -> Result<RequestId> {
        let g = &params.generate;
        let n_ctx = self.model.kv().shape().n_ctx;
        g.check(prompt, n_ctx)?;
        if params.n == 0 {
            return Err(Error::options("n", "must be at least 1"));
        }
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
        for i in 0..params.n {
            // Without `max_tokens`, `sample` ends the stream when the context is full.
            let mut g = g.clone();
            g.sampler.seed = g.sampler.seed.wrapping_add(i as u64);
            self.waiting.push_back(self.seqs.len());
            self.seqs.push(Sequence {
                request: id,
                sample: i,
                phase: Phase::Waiting,
                row: 0,
                stream: TokenStream::new(prompt, &g),
                computed: 0,
                after: (i > 0).then_some(first),
                admitted: 0,
                times: SeqTimes {
                    added: now,
                    first_token: None,
                    finished: None,
                    generated: 0,
                },
                cancelled: false,
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

    /// Prompt tokens taken from cached prefixes instead of being computed.
    pub fn reused_tokens(&self) -> usize {
        self.reused_tokens
    }

    pub fn preemptions(&self) -> usize {
        self.preemptions
    }

    /// Timings of every completion of `id`.
    pub fn times(&self, id: RequestId) -> Vec<SeqTimes> {
        self.seqs
            .iter()
            .filter(|s| s.request == id)
            .map(|s| s.times)
            .collect()
    }

    /// Forgets finished requests' bookkeeping (their cached prefixes stay).
    pub fn forget_finished(&mut self) {
        if self.seqs.iter().all(|s| s.phase == Phase::Done) {
            self.seqs.clear();
            self.waiting.clear();
        }
    }

    /// Runs one step: admits waiting sequences, runs one batched forward pass, samples, and
    /// returns what each completion produced. Returns no events when nothing is pending.
    pub fn step(&mut self) -> Result<Vec<TokenEvent>> {
        let mut events = Vec::new();
        self.finish_cancelled(&mut events);
        self.admit();
        let plan = self.plan()?;
        if plan.is_empty() {
            return Ok(events);
        }
        let steps: Vec<SeqStep> = plan
            .iter()
            .map(|&(i, n)| {
                let s = &self.seqs[i];
                SeqStep {
                    row: s.row,
                    tokens: &s.tokens()[s.computed..s.computed + n],
                    logits: (s.computed + n == s.tokens().len()).then_some(Logits::Last),
                    beam: None,
                }
            })
            .collect();
        let logits = self.model.step_batch(&steps)?;
        let now = Instant::now();
        for (&(i, n), logits) in plan.iter().zip(logits) {
            self.seqs[i].computed += n;
            if !logits.is_empty() {
                self.sample(i, &logits, now, &mut events);
            }
        }
        Ok(events)
    }

    fn finish_cancelled(&mut self, events: &mut Vec<TokenEvent>) {
        for i in 0..self.seqs.len() {
            if self.seqs[i].cancelled && self.seqs[i].phase != Phase::Done {
                self.finish(i, FinishReason::Cancelled, Instant::now(), events);
            }
        }
    }

    /// Moves waiting sequences into free rows, oldest first, each sharing the longest cached
    /// prefix of its tokens.
    fn admit(&mut self) {
        let mut still = VecDeque::new();
        let mut running = self.running();
        while let Some(i) = self.waiting.pop_front() {
            if self.seqs[i].phase != Phase::Waiting {
                continue;
            }
            if running >= self.max_running {
                still.push_back(i);
                still.extend(self.waiting.drain(..));
                break;
            }
            // Completions of one request follow its first once that has read the prompt.
            if let Some(lead) = self.seqs[i].after {
                let l = &self.seqs[lead];
                if l.phase == Phase::Waiting
                    || (l.phase == Phase::Running && l.computed < l.stream.prompt_len() - 1)
                {
                    still.push_back(i);
                    continue;
                }
            }
            let Some(row) = self.take_row(i) else {
                still.push_back(i);
                still.extend(self.waiting.drain(..));
                break;
            };
            self.clock += 1;
            let s = &mut self.seqs[i];
            s.phase = Phase::Running;
            s.row = row;
            s.admitted = self.clock;
            self.rows[row] = Row::Busy(i);
            running += 1;
        }
        self.waiting = still;
    }

    /// A row for sequence `i`, holding as much of its tokens as some row has cached (at most
    /// all but the last, which must run to give logits), or `None` when every row is busy.
    fn take_row(&mut self, i: usize) -> Option<usize> {
        let tokens = self.seqs[i].tokens();
        let limit = tokens.len() - 1;
        // The row with the longest common prefix.
        let mut best: Option<(usize, usize)> = None;
        for (r, row) in self.rows.iter().enumerate() {
            let cached: &[u32] = match row {
                Row::Busy(j) => &self.seqs[*j].tokens()[..self.seqs[*j].computed],
                Row::Cached { tokens, .. } => tokens,
                Row::Free => continue,
            };
            let lcp = cached
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count()
                .min(limit);
            if lcp > 0 && best.is_none_or(|(_, l)| lcp > l) {
                best = Some((r, lcp));
            }
        }
        let free = self.rows.iter().position(|r| matches!(r, Row::Free));
        let (row, keep) = match (free, best) {
            (Some(row), Some((src, keep))) => {
                self.model.fork(src, row, keep);
                (row, keep)
            }
            (Some(row), None) => (row, 0),
            // No free row: take over the best cached one, or the least recently used.
            (None, Some((src, keep))) if matches!(self.rows[src], Row::Cached { .. }) => {
                self.model.kv_mut().truncate(src, keep);
                (src, keep)
            }
            (None, _) => {
                let lru = lru_cached(&self.rows)?;
                self.model.kv_mut().clear(lru);
                (lru, 0)
            }
        };
        self.reused_tokens += keep;
        self.seqs[i].computed = keep;
        Some(row)
    }

    /// This step's work: (sequence, tokens) for every running sequence, decodes first, then
    /// prompt chunks within the step's token budget; blocks are found by evicting cached
    /// prefixes and then preempting the newest sequences.
    fn plan(&mut self) -> Result<Vec<(usize, usize)>> {
        let budget = self.model.max_step_tokens();
        loop {
            let mut running: Vec<usize> = (0..self.seqs.len())
                .filter(|&i| self.seqs[i].phase == Phase::Running)
                .collect();
            running.sort_by_key(|&i| {
                (
                    self.seqs[i].tokens().len() - self.seqs[i].computed > 1,
                    self.seqs[i].admitted,
                )
            });
            let mut plan = Vec::new();
            let mut left = budget;
            for &i in &running {
                let s = &self.seqs[i];
                let n = (s.tokens().len() - s.computed).min(left);
                if n == 0 {
                    continue;
                }
                plan.push((i, n));
                left -= n;
            }
            let kv = self.model.kv();
            let needed: usize = plan
                .iter()
                .map(|&(i, n)| kv.blocks_needed(self.seqs[i].row, n))
                .sum();
            let free = kv.pool().free_blocks();
            if needed <= free {
                return Ok(plan);
            }
            if self.evict_cached() {
                continue;
            }
            // Preempt the newest running sequence; the oldest always keeps its room (every
            // request fits the pool alone, checked when it was added).
            let newest = running
                .iter()
                .copied()
                .max_by_key(|&i| self.seqs[i].admitted);
            match newest {
                Some(i) if running.len() > 1 => self.preempt(i),
                _ => return Err(OutOfBlocks { needed, free }.into()),
            }
        }
    }

    /// Frees the least recently used cached prefix; false when there is none.
    fn evict_cached(&mut self) -> bool {
        match lru_cached(&self.rows) {
            Some(r) => {
                self.model.kv_mut().clear(r);
                self.rows[r] = Row::Free;
                true
            }
            None => false,
        }
    }

    /// Frees sequence `i`'s row and blocks; it is recomputed from its tokens when readmitted.
    fn preempt(&mut self, i: usize) {
        let row = self.seqs[i].row;
        self.model.kv_mut().clear(row);
        self.rows[row] = Row::Free;
        let s = &mut self.seqs[i];
        s.phase = Phase::Waiting;
        s.computed = 0;
        self.waiting.push_front(i);
        self.preemptions += 1;
    }

    fn sample(&mut self, i: usize, logits: &[f32], now: Instant, events: &mut Vec<TokenEvent>) {
        let n_ctx = self.model.kv().shape().n_ctx;
        let s = &mut self.seqs[i];
        let next = s.stream.sample(self.tokenizer, logits);
        s.times.generated += 1;
        s.times.first_token.get_or_insert(now);
        events.push(TokenEvent {
            request: s.request,
            sample: s.sample,
            token: Some(next.token),
            text: next.text,
            finish: None,
        });
        let full = s.tokens().len() >= n_ctx;
        if let Some(reason) = next.finish.or(full.then_some(FinishReason::Length)) {
            self.finish(i, reason, now, events);
        }
    }

    /// Ends sequence `i`: flushes held-back text, gives its row back (keeping its tokens as a
    /// cached prefix) and emits the final event.
    fn finish(
        &mut self,
        i: usize,
        reason: FinishReason,
        now: Instant,
        events: &mut Vec<TokenEvent>,
    ) {
        let s = &mut self.seqs[i];
        let text = s.stream.finish(reason);
        let was_running = s.phase == Phase::Running;
        s.phase = Phase::Done;
        s.times.finished = Some(now);
        events.push(TokenEvent {
            request: s.request,
            sample: s.sample,
            token: None,
            text,
            finish: Some(reason),
        });
        if was_running {
            let row = s.row;
            let computed = s.computed;
            let tokens = s.tokens()[..computed].to_vec();
            self.clock += 1;
            self.model.kv_mut().truncate(row, computed);
            self.rows[row] = Row::Cached {
                tokens,
                used: self.clock,
            };
        }
    }
}

/// The cached row used least recently.
fn lru_cached(rows: &[Row]) -> Option<usize> {
    rows.iter()
        .enumerate()
        .filter_map(|(r, row)| match row {
            Row::Cached { used, .. } => Some((r, *used)),
            _ => None,
        })
        .min_by_key(|&(_, used)| used)
        .map(|(r, _)| r)
}
