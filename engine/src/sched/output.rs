//! What a step's logits become: each completion's next token and its text, as events, and
//! its end, which gives the row back as a cached prefix.

use std::time::Instant;

use super::rows::Row;
use super::{Phase, Scheduler, Sequence, TokenEvent};
use crate::sample::{FinishReason, Sampled};

impl Sequence {
    /// Reports a token this sequence drew, and returns why the sequence ends with it, if it
    /// does: its stream ended (end of generation, a stop string, `max_tokens`) or its
    /// context of `n_ctx` is full.
    pub(super) fn report(
        &mut self,
        next: Sampled,
        now: Instant,
        n_ctx: usize,
        events: &mut Vec<TokenEvent>,
    ) -> Option<FinishReason> {
        self.times.generated += 1;
        self.times.first_token.get_or_insert(now);
        events.push(TokenEvent {
            request: self.request,
            sample: self.sample,
            token: Some(next.token),
            text: next.text,
            finish: None,
            logprobs: next.logprobs,
        });
        let full = self.tokens().len() >= n_ctx;
        next.finish.or(full.then_some(FinishReason::Length))
    }
}

impl Scheduler<'_> {
    /// Ends the completions whose request was cancelled since the last step.
    pub(super) fn finish_cancelled(&mut self, events: &mut Vec<TokenEvent>) {
        for i in 0..self.seqs.len() {
            if self.seqs[i].cancelled && self.seqs[i].phase != Phase::Done {
                self.finish(i, FinishReason::Cancelled, Instant::now(), events);
            }
        }
    }

    /// Draws sequence `i`'s next token from `logits` and reports it; ends the sequence where
    /// its stream ends (end of generation, a stop string, `max_tokens`) or its context is full.
    pub(super) fn sample(
        &mut self,
        i: usize,
        logits: &[f32],
        now: Instant,
        events: &mut Vec<TokenEvent>,
    ) {
        let n_ctx = self.model.kv().shape().n_ctx;
        let s = &mut self.seqs[i];
        let next = s.stream.sample(self.tokenizer, logits);
        if let Some(reason) = s.report(next, now, n_ctx, events) {
            self.finish(i, reason, now, events);
        }
    }

    /// Ends sequence `i`: flushes held-back text, gives its row back (keeping its tokens as a
    /// cached prefix) and emits the final event.
    pub(super) fn finish(
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
            logprobs: None,
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
