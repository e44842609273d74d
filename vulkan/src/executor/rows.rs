//! The Vulkan executor's share of a row split (`--split-mode row`): a step's tokens are appended
//! once ([`Stage::begin_rows`](hearth_model::Stage::begin_rows)), then each piece of the
//! step is a submission of its own: the embedding, each layer's attention and MLP over this
//! device's heads and units (their partial sums, for the host to add to the residual stream),
//! and the head.

use super::policy::Beside;
use super::step::PreparedStep;
use super::VkModel;
use hearth_model::{Error, Result, SeqStep, StageOutput, Sublayer};

/// A row split's step under way: its tokens, appended, and whether the blocks it copies on
/// write were copied (by its first piece).
pub(super) struct RowsStep {
    step: PreparedStep,
    copied: bool,
}

impl VkModel {
    pub(super) fn begin_rows(&mut self, seqs: &[SeqStep]) -> Result<()> {
        if self.part.shard.is_none() {
            return Err(Error::options(
                "split",
                "this executor holds whole layers, not a row split's share",
            ));
        }
        // A step left unfinished (its driver failed between pieces) is taken back first.
        if let Some(old) = self.rows_step.take() {
            old.step.undo(&mut self.kv);
        }
        let step = self.prepare_step(seqs)?;
        if let Err(e) = self.upload_step(&step) {
            step.undo(&mut self.kv);
            return Err(e);
        }
        self.rows_step = Some(RowsStep {
            step,
            copied: false,
        });
        Ok(())
    }

    pub(super) fn step_rows(
        &mut self,
        seqs: &[SeqStep],
        sub: Sublayer,
        hidden: Option<&[f32]>,
    ) -> Result<StageOutput> {
        let Some(mut pending) = self.rows_step.take() else {
            return Err(Error::options("split", "no row split step was begun"));
        };
        let out = self.record_rows(&mut pending, seqs, sub, hidden);
        self.rows_step = Some(pending);
        out
    }

    pub(super) fn end_rows(&mut self, ok: bool) {
        if let Some(pending) = self.rows_step.take() {
            if !ok {
                pending.step.undo(&mut self.kv);
            }
        }
    }

    fn record_rows(
        &mut self,
        pending: &mut RowsStep,
        seqs: &[SeqStep],
        sub: Sublayer,
        hidden: Option<&[f32]>,
    ) -> Result<StageOutput> {
        let step = &pending.step;
        let (n, e) = (step.ids.len(), self.config.n_embd);
        match (sub, hidden) {
            (Sublayer::Embed, None) => {}
            (Sublayer::Embed, Some(_)) => {
                return Err(Error::options("hidden", "embedding takes no hidden state"))
            }
            (_, Some(h)) if h.len() == n * e => match &self.scratch.hidden_in {
                Some(buffer) => buffer.upload(0, h)?,
                None => return Err(Error::options("hidden", "no room for a hidden state")),
            },
            (_, Some(h)) => {
                return Err(Error::options(
                    "hidden",
                    format!("{} values for {n} tokens of {e}", h.len()),
                ))
            }
            (_, None) => {
                return Err(Error::options(
                    "hidden",
                    format!("{sub:?} needs the residual stream"),
                ))
            }
        }
        if let Sublayer::Attention(l) | Sublayer::Mlp(l) = sub {
            if !self.part.layers.contains(&l) {
                return Err(Error::options(
                    "layers",
                    format!(
                        "layer {l} is not among this part's {}..{}",
                        self.part.layers.start, self.part.layers.end
                    ),
                ));
            }
        }
        let plan = self.plan_step(&step.steps, &step.runs);
        let mut rec = self.recorder()?;
        if !pending.copied {
            self.kv.record_copies(&mut rec, &step.copies)?;
        }
        let first = self.part.layers.start;
        let spans = match sub {
            Sublayer::Embed => {
                self.record_embed(&mut rec, n)?;
                self.record_hidden_out(&mut rec, &step.runs, seqs)?;
                None
            }
            Sublayer::Attention(l) | Sublayer::Mlp(l) => {
                self.record_hidden_in(&mut rec, &step.runs, seqs)?;
                let at = self.at_layer(l, first, &plan, true);
                let mut beside = Beside::none();
                match sub {
                    Sublayer::Attention(_) => self.record_attention(&mut rec, &at, &mut beside)?,
                    _ => self.record_mlp(&mut rec, &at, &mut beside)?,
                }
                beside.finish(&mut rec)?;
                self.record_hidden_out(&mut rec, &step.runs, seqs)?;
                None
            }
            Sublayer::Head => {
                self.record_hidden_in(&mut rec, &step.runs, seqs)?;
                Some(self.record_logits(&mut rec, &step.runs, seqs, plan.streaming)?)
            }
        };
        let done = rec.submit()?;
        pending.copied = true;
        self.account_step(&done);
        match spans {
            Some(spans) => self.read_logits(&spans),
            None => Ok(StageOutput::Hidden(self.scratch.logits.download(n * e)?)),
        }
    }
}
