//! Speculative decoding in the batch: sequences that ask for it draft before the step, feed
//! their pending token and the draft in it, and keep what the target agrees with. Sequences
//! without drafts step beside them as usual.

use std::time::Instant;

use super::{Phase, Scheduler, TokenEvent};
use crate::speculative::{DraftSource, Drafter, PromptLookup, Verdict};
use hearth_model::Result;

impl Scheduler<'_> {
    /// Drafts for every decoding sequence that asks for it, within its room in the context
    /// and in `max_tokens`.
    pub(super) fn draft(&mut self) -> Result<()> {
        let n_ctx = self.model.kv().shape().n_ctx;
        for s in &mut self.seqs {
            s.draft.clear();
            let Some(spec) = s.speculative else {
                continue;
            };
            // Decoding: only the last token drawn is still to feed.
            if s.phase != Phase::Running || s.tokens().len() != s.computed + 1 {
                continue;
            }
            let room = (n_ctx - s.tokens().len()).min(s.stream.remaining());
            let max = s.draft_length.get().min(room);
            if max == 0 {
                continue;
            }
            s.draft = match spec.source {
                DraftSource::Lookup => PromptLookup::default().find(s.tokens(), max),
                DraftSource::Model => match self.draft_model.as_deref_mut() {
                    Some(model) => model.propose(s.tokens(), max, spec.p_min)?,
                    None => Vec::new(),
                },
            };
        }
        Ok(())
    }

    /// Decides on sequence `i`'s draft from the step's `logits` (a row for the pending token
    /// and one for each drafted token), reports the tokens kept and the one drawn after them,
    /// and cuts the rejected drafts from its cache row.
    pub(super) fn verify_draft(
        &mut self,
        i: usize,
        logits: &[f32],
        now: Instant,
        events: &mut Vec<TokenEvent>,
    ) {
        let n_ctx = self.model.kv().shape().n_ctx;
        let s = &mut self.seqs[i];
        let draft = std::mem::take(&mut s.draft);
        let acceptance = s.speculative.map(|p| p.acceptance).unwrap_or_default();
        let n_vocab = logits.len() / (draft.len() + 1);
        s.drafts.steps += 1;
        s.drafts.drafted += draft.len();
        let mut end = None;
        let mut accepted = 0;
        for (j, row) in logits.chunks_exact(n_vocab).enumerate() {
            let (kept, next) = match draft.get(j) {
                Some(&d) => {
                    let (verdict, next) = s.stream.verify(self.tokenizer, row, d, acceptance);
                    (verdict == Verdict::Accepted, next)
                }
                None => (false, s.stream.sample(self.tokenizer, row)),
            };
            accepted += usize::from(kept);
            end = s.report(next, now, n_ctx, events);
            if end.is_some() || !kept {
                break;
            }
        }
        s.drafts.accepted += accepted;
        s.draft_length.update(draft.len(), accepted);
        // The row keeps the pending token and the drafts kept; the last token drawn is the
        // next one to feed, as after a step without a draft.
        let keep = s.tokens().len() - 1;
        s.computed = keep;
        let row = s.row;
        self.model.kv_mut().truncate(row, keep);
        if let Some(reason) = end {
            self.finish(i, reason, now, events);
        }
    }
}
