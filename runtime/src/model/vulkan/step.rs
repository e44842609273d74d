//! One step of the Vulkan executor: the sequences' tokens appended to their cache rows, a plan
//! of which kernels they take, the embedding, every layer and the logits recorded into one
//! command buffer, and the bookkeeping once it ran.

use super::kernels::DECODE_MAX_TOKENS;
use super::{SeqStep, VkModel};
use crate::cpu::forward::check_step;
use crate::cpu::ops;
use crate::error::{Error, Result};
use crate::kernels::infinigen::{IgStep, IgToken};
use crate::kernels::{AttnShape, MatvecArgs, RopeSpec, StepToken};
use crate::kv::{BlockCopy, OutOfBlocks, NO_BEAM};
use crate::model::infinigen::{Fetch, FETCH_KERNELS};
use crate::model::{Logits, ModelConfig};
use crate::vk::{Completed, Recorder};

/// One sequence's tokens in a step: `tokens` of them from the step's token `t0`, appended
/// after the `len` entries its row held.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Index in the step's `seqs`.
    seq: usize,
    t0: usize,
    tokens: usize,
    len: usize,
}

impl Run {
    /// Few enough tokens for the decode path.
    fn decodes(&self) -> bool {
        self.tokens <= DECODE_MAX_TOKENS
    }
}

/// What a step runs, decided before anything is recorded.
struct StepPlan<'s> {
    /// The step's tokens, as `steps` in the scratch holds them.
    steps: &'s [StepToken],
    /// Tokens of the decode runs, which come first in the step.
    decode_tokens: usize,
    /// The most positions a decode token attends to, its own included.
    longest: u32,
    /// Every decode run is one token, so decode attention stores its K/V itself.
    fused: bool,
    /// Weight-streaming products (a few tokens, or any step on a CPU device) rather than
    /// tiled matmuls.
    streaming: bool,
    /// Tokens that attend sparsely (InfiniGen or H2O), one per run, and their budgets as the
    /// kernels read them.
    sparse: Vec<IgToken>,
    ig_steps: Vec<IgStep>,
    /// InfiniGen tokens of a step that attends densely, because some history is short
    /// enough for the floor and the recent window to cover.
    fetches_all: Vec<IgToken>,
    /// Runs too long for the decode path: (first token, tokens).
    prefill: Vec<(usize, usize)>,
    /// Under H2O, a dense step's runs, whose attention adds to their rows' masses: (first
    /// token, its step tokens).
    dense_runs: Vec<(usize, &'s [StepToken])>,
}

/// Where each sequence's requested logits land among the logits rows: (first row, rows).
type Spans = Vec<(usize, usize)>;

fn attn_shape(c: &ModelConfig, t0: usize, tokens: usize) -> AttnShape {
    AttnShape {
        tokens: tokens as u32,
        t0: t0 as u32,
        n_head: c.n_head as u32,
        n_head_kv: c.n_head_kv as u32,
        head_dim: c.head_dim as u32,
    }
}

fn rope_spec(c: &ModelConfig) -> RopeSpec {
    RopeSpec {
        rot_dim: c.rope.map_or(0, |r| r.dims as u32),
        layout: c.rope.map_or(ops::RopeLayout::Neox, |r| r.layout),
    }
}

impl VkModel {
    /// Runs one step over several sequences (at most `max_step_tokens` tokens in all) in one
    /// submission, and returns each sequence's requested logits ([rows, n_vocab], empty when
    /// none were asked for). Each sequence's tokens go to its row at the row's next positions.
    pub fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        if n > self.chunk {
            return Err(Error::options(
                "tokens",
                format!("a step takes at most {} tokens, got {n}", self.chunk),
            ));
        }
        let n_ctx = self.kv.shape().n_ctx;
        let mut needed = 0;
        for s in seqs {
            if s.row >= self.kv.shape().rows {
                return Err(Error::options("row", format!("no cache row {}", s.row)));
            }
            check_step(&self.config, s.tokens, self.position(s.row), n_ctx)?;
            needed += self.kv.blocks_needed(s.row, s.tokens.len());
        }
        let free = self.kv.pool().free_blocks();
        if needed > free {
            return Err(OutOfBlocks { needed, free }.into());
        }
        if let Some(h2o) = &mut self.h2o {
            if seqs.iter().any(|s| s.beam.is_some()) {
                return Err(Error::options(
                    "kv-offload",
                    "h2o does not run with beam search",
                ));
            }
            for s in seqs {
                h2o.sync(s.row, self.kv.len(s.row))?;
            }
        }
        // Short sequences (decode) first, so one decode-attention dispatch covers them; each
        // longer run gets a prefill-attention dispatch of its own.
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_by_key(|&i| seqs[i].tokens.len() > DECODE_MAX_TOKENS);
        let mut ids = Vec::with_capacity(n);
        let mut steps = Vec::with_capacity(n);
        let mut runs = Vec::with_capacity(seqs.len());
        let mut copies = Vec::new();
        for &i in &order {
            let s = &seqs[i];
            let len = self.kv.len(s.row);
            let pos = self.position(s.row);
            runs.push(Run {
                seq: i,
                t0: ids.len(),
                tokens: s.tokens.len(),
                len,
            });
            for (j, &id) in s.tokens.iter().enumerate() {
                ids.push(id);
                steps.push(StepToken {
                    beam: s.beam.unwrap_or(NO_BEAM),
                    rope_pos: (pos + j) as u32,
                    ..StepToken::new(s.row as u32, (len + j) as u32)
                });
            }
            // Counted above, so this cannot run out.
            copies.extend(self.kv.append(s.row, s.tokens.len())?);
        }
        let result = self.record_step(&ids, &steps, &runs, seqs, &copies);
        if result.is_err() {
            // Nothing was written: the rows go back to their old lengths.
            for r in &runs {
                self.kv.truncate(seqs[r.seq].row, r.len);
            }
        }
        result
    }

    /// The next token's position in `row`'s sequence: its entries, and more once its pool has
    /// evicted tokens.
    pub(super) fn position(&self, row: usize) -> usize {
        self.kv.len(row) + self.ig.as_ref().map_or(0, |ig| ig.evicted(row))
    }

    fn record_step(
        &mut self,
        ids: &[u32],
        steps: &[StepToken],
        runs: &[Run],
        seqs: &[SeqStep],
        copies: &[BlockCopy],
    ) -> Result<Vec<Vec<f32>>> {
        self.kv.sync_tables()?;
        self.scratch.ids.upload(0, ids)?;
        self.scratch.steps.upload(0, steps)?;
        let plan = self.plan_step(steps, runs, seqs)?;
        let mut rec = if self.profile.is_some() {
            Recorder::timed(&self.device)?
        } else {
            Recorder::new(&self.device)?
        };
        self.kv.record_copies(&mut rec, copies)?;
        if let Some(ig) = &self.ig {
            ig.record_forks(&mut rec)?;
        }
        let c = &self.config;
        let s = &self.scratch;
        let embed = &self.kernels.of(self.token_embd.format).embed;
        let (t, vocab, e) = (ids.len() as u32, c.n_vocab as u32, c.n_embd as u32);
        embed.record(&mut rec, &self.token_embd.buffer, &s.ids, &s.x, t, vocab, e)?;
        for l in 0..self.layers.len() {
            self.record_layer(&mut rec, l, &plan)?;
        }
        let spans = self.record_logits(&mut rec, runs, seqs, plan.streaming)?;
        let done = rec.submit()?;
        self.account_step(&done, runs, seqs, &plan)?;
        let n_vocab = self.config.n_vocab;
        let out_rows: usize = spans.iter().map(|&(_, count)| count).sum();
        let logits: Vec<f32> = self.scratch.logits.download(out_rows * n_vocab)?;
        Ok(spans
            .iter()
            .map(|&(first, count)| logits[first * n_vocab..(first + count) * n_vocab].to_vec())
            .collect())
    }

    /// Which kernels the step's runs take; readies H2O's and InfiniGen's state for its sparse
    /// tokens.
    fn plan_step<'s>(
        &mut self,
        steps: &'s [StepToken],
        runs: &[Run],
        seqs: &[SeqStep],
    ) -> Result<StepPlan<'s>> {
        // Decode tokens come first: every run of at most DECODE_MAX_TOKENS.
        let decode_tokens: usize = runs.iter().filter(|r| r.decodes()).map(|r| r.tokens).sum();
        let longest = steps[..decode_tokens]
            .iter()
            .map(|st| st.pos + 1)
            .max()
            .unwrap_or(0);
        let fused = decode_tokens > 0 && runs.iter().filter(|r| r.decodes()).all(|r| r.tokens == 1);
        // InfiniGen's and H2O's sparse decode: every sequence brings one token (token t is
        // run t), has history and reads no beam table.
        let decodes: Vec<IgToken> = if (self.ig.is_some() || self.h2o.is_some())
            && runs
                .iter()
                .all(|r| r.tokens == 1 && r.len > 0 && seqs[r.seq].beam.is_none())
        {
            runs.iter()
                .map(|r| IgToken {
                    row: seqs[r.seq].row as u32,
                    index: r.len as u32,
                    pos: steps[r.t0].rope_pos,
                })
                .collect()
        } else {
            Vec::new()
        };
        let (sparse, fetches_all) = match &self.ig {
            Some(ig)
                if decodes
                    .iter()
                    .any(|d| ig.params.fetches_all(d.index as usize)) =>
            {
                (Vec::new(), decodes)
            }
            _ => (decodes, Vec::new()),
        };
        // H2O's decode attends over kept positions: a prompt's held entries join them first.
        if let Some(h2o) = &mut self.h2o {
            for d in &sparse {
                h2o.settle(d.row as usize)?;
            }
        }
        let ig_steps = match (&self.ig, &self.h2o) {
            _ if sparse.is_empty() => Vec::new(),
            (Some(ig), _) => ig.set_step(&sparse)?,
            (None, Some(h2o)) => h2o.set_step(&sparse)?,
            (None, None) => Vec::new(),
        };
        let dense_runs = match &self.h2o {
            Some(_) if sparse.is_empty() => runs
                .iter()
                .map(|r| (r.t0, &steps[r.t0..r.t0 + r.tokens]))
                .collect(),
            _ => Vec::new(),
        };
        Ok(StepPlan {
            steps,
            decode_tokens,
            longest,
            fused,
            streaming: steps.len() <= DECODE_MAX_TOKENS || self.kernels.matvec_prefill,
            sparse,
            ig_steps,
            fetches_all,
            prefill: runs
                .iter()
                .filter(|r| !r.decodes())
                .map(|r| (r.t0, r.tokens))
                .collect(),
            dense_runs,
        })
    }

    /// Layer `l` for the step's tokens: the attention block and the MLP, each added to
    /// the residual stream x; and, recorded between its kernels, the next layer's InfiniGen
    /// fetch where that layer attends sparsely.
    fn record_layer<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        plan: &'a StepPlan,
    ) -> Result<()> {
        let (n, t) = (plan.steps.len(), plan.steps.len() as u32);
        let (c, k, s, w) = (&self.config, &self.kernels, &self.scratch, &self.layers[l]);
        let kv = self.kv.layer(l);
        let table = &self.rope_table;
        let rope = rope_spec(c);
        let (qkv_dim, attn_dim) = (c.qkv_dim() as u32, c.attn_dim() as u32);
        let (e, n_ff, eps) = (c.n_embd as u32, c.n_ff as u32, c.norm_eps);
        let sparse = !plan.sparse.is_empty();
        let sparse_here = sparse
            && (self.ig.as_ref().is_some_and(|ig| ig.sparse_layer(l))
                || self.h2o.as_ref().is_some_and(|h2o| h2o.applies(l)));
        // H2O's masses read the rotated queries, which only rope_kv leaves in qkv.
        let h2o_dense_here = !sparse && self.h2o.as_ref().is_some_and(|h2o| h2o.applies(l));
        // The next layer's fetch, when it attends sparsely: its query from this layer's
        // input, then speculation, selection and gather, each step recorded after one of this
        // layer's kernels so that a GPU runs the two together (`Fetch`).
        let mut fetch_next = match (&self.ig, self.layers.get(l + 1)) {
            (Some(ig), Some(next)) if sparse && ig.sparse_layer(l + 1) => {
                k.matvec(
                    rec,
                    &next.wqkv,
                    MatvecArgs {
                        // Its W_Q rows come first in the fused projection. The next layer's
                        // gain, as its own query will have.
                        norm: Some((&next.attn_norm, eps)),
                        ..MatvecArgs::plain(&next.wqkv.buffer, &s.x, &ig.q_spec, attn_dim, e, t)
                    },
                )?;
                let batch = ig.batch(&plan.ig_steps);
                Some(ig.fetch(l + 1, self.kv.layer(l + 1), table, rope, batch))
            }
            _ => None,
        };
        let mv = |w, x, y, m, kk| MatvecArgs::plain(w, x, y, m, kk, t);
        if plan.streaming {
            let args = mv(&w.wqkv.buffer, &s.x, &s.qkv, qkv_dim, e);
            let norm = Some((&w.attn_norm, eps));
            k.matvec(rec, &w.wqkv, MatvecArgs { norm, ..args })?;
        } else {
            k.rmsnorm
                .record(rec, &s.x, &w.attn_norm, &s.xn, t, e, eps)?;
            k.matmul(rec, &w.wqkv, &s.xn, &s.qkv, t, qkv_dim, e, false)?;
        }
        // A pure decode step (one token per sequence) stores K/V from the attention kernel
        // itself; RoPE and the append run apart for the rest.
        let fused_here = plan.fused && !sparse_here && !h2o_dense_here;
        let rest = match fused_here {
            true => attn_shape(c, plan.decode_tokens, n - plan.decode_tokens),
            false => attn_shape(c, 0, n),
        };
        let before = rec.len();
        k.rope_kv
            .record(rec, &s.qkv, table, kv, &s.steps, rest, rope)?;
        if let Some(f) = fetch_next.as_mut().filter(|_| rec.len() > before) {
            f.step(rec)?;
        }
        let decode = attn_shape(c, 0, plan.decode_tokens);
        if let (true, Some(ig)) = (sparse_here, &self.ig) {
            let batch = ig.batch(&plan.ig_steps);
            ig.record_attention(rec, l, &s.qkv, qkv_dim, kv, &s.att, batch)?;
        } else if let (true, Some(h2o)) = (sparse_here, &self.h2o) {
            let batch = h2o.batch(&plan.ig_steps);
            h2o.record_decode(rec, l, &s.qkv, qkv_dim, kv, &s.att, batch)?;
        } else if fused_here {
            k.attn_decode.record_fused(
                rec,
                &s.qkv,
                table,
                kv,
                &s.steps,
                &s.att,
                decode,
                rope,
                plan.longest,
            )?;
        } else if plan.decode_tokens > 0 {
            k.attn_decode
                .record(rec, &s.qkv, kv, &s.steps, &s.att, decode, plan.longest)?;
        }
        for &(t0, tokens) in &plan.prefill {
            let shape = attn_shape(c, t0, tokens);
            k.attn_prefill
                .record(rec, &s.qkv, kv, &s.steps, &s.att, shape)?;
        }
        if let (true, Some(h2o)) = (h2o_dense_here, &self.h2o) {
            h2o.record_dense(rec, l, &s.qkv, qkv_dim, kv, &s.steps, &plan.dense_runs)?;
        }
        Fetch::step_of(&mut fetch_next, rec)?;
        if let Some(ig) = self.ig.as_ref().filter(|ig| ig.sparse_layer(l)) {
            ig.record_partial_keys(rec, l, kv, &s.steps, plan.steps)?;
        }
        if plan.streaming {
            let args = mv(&w.wo.buffer, &s.att, &s.x, e, attn_dim);
            k.matvec(
                rec,
                &w.wo,
                MatvecArgs {
                    accumulate: true,
                    ..args
                },
            )?;
            Fetch::step_of(&mut fetch_next, rec)?;
            let args = mv(&w.w_gate_up.buffer, &s.x, &s.hidden, n_ff, e);
            let norm = Some((&w.ffn_norm, eps));
            k.matvec(
                rec,
                &w.w_gate_up,
                MatvecArgs {
                    norm,
                    gated: true,
                    ..args
                },
            )?;
            Fetch::step_of(&mut fetch_next, rec)?;
            let args = mv(&w.w_down.buffer, &s.hidden, &s.x, e, n_ff);
            k.matvec(
                rec,
                &w.w_down,
                MatvecArgs {
                    accumulate: true,
                    ..args
                },
            )?;
        } else {
            k.matmul(rec, &w.wo, &s.att, &s.x, t, e, attn_dim, true)?;
            Fetch::step_of(&mut fetch_next, rec)?;
            k.rmsnorm.record(rec, &s.x, &w.ffn_norm, &s.xn, t, e, eps)?;
            k.matmul(rec, &w.w_gate_up, &s.xn, &s.gate_up, t, 2 * n_ff, e, false)?;
            Fetch::step_of(&mut fetch_next, rec)?;
            k.swiglu.record_fused(rec, &s.gate_up, &s.hidden, t, n_ff)?;
            k.matmul(rec, &w.w_down, &s.hidden, &s.x, t, e, n_ff, true)?;
        }
        if let Some(fetch) = fetch_next {
            fetch.finish(rec)?;
        }
        Ok(())
    }

    /// The final norm and the output head over the rows of x whose logits the sequences want,
    /// in the order of `seqs`; returns where each sequence's rows land.
    fn record_logits<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        runs: &[Run],
        seqs: &[SeqStep],
        streaming: bool,
    ) -> Result<Spans> {
        let (c, k, s) = (&self.config, &self.kernels, &self.scratch);
        let (e, vocab, eps) = (c.n_embd as u32, c.n_vocab as u32, c.norm_eps);
        // (seq, first row of x, rows)
        let mut wanted: Vec<(usize, usize, usize)> = runs
            .iter()
            .map(|r| match seqs[r.seq].logits {
                None => (r.seq, r.t0, 0),
                Some(Logits::Last) => (r.seq, r.t0 + r.tokens - 1, 1),
                Some(Logits::All) => (r.seq, r.t0, r.tokens),
            })
            .collect();
        wanted.sort_by_key(|w| w.0);
        let mut spans = vec![(0usize, 0usize); seqs.len()];
        let mut out_rows = 0;
        for &(i, _, count) in &wanted {
            spans[i] = (out_rows, count);
            out_rows += count;
        }
        if out_rows == 0 {
            return Ok(spans);
        }
        // x itself when every wanted row already sits where its logits go; otherwise the
        // rows are gathered.
        let in_place = wanted
            .iter()
            .all(|&(i, first, count)| count == 0 || first == spans[i].0);
        let x_rows = if in_place {
            &s.x
        } else {
            let row_bytes = e as u64 * 4;
            for &(i, first, count) in wanted.iter().filter(|w| w.2 > 0) {
                rec.copy(
                    &s.x,
                    first as u64 * row_bytes,
                    &s.sel,
                    spans[i].0 as u64 * row_bytes,
                    count as u64 * row_bytes,
                )?;
            }
            &s.sel
        };
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        let rows = out_rows as u32;
        if streaming || out_rows <= DECODE_MAX_TOKENS {
            let args = MatvecArgs::plain(&head.buffer, x_rows, &s.logits, vocab, e, rows);
            let norm = Some((&self.output_norm, eps));
            k.matvec(rec, head, MatvecArgs { norm, ..args })?;
        } else {
            k.rmsnorm
                .record(rec, x_rows, &self.output_norm, &s.xn, rows, e, eps)?;
            k.matmul(rec, head, &s.xn, &s.logits, rows, vocab, e, false)?;
        }
        Ok(spans)
    }

    /// After the step ran: InfiniGen's and H2O's counts and state, and the profile.
    fn account_step(
        &mut self,
        done: &Completed,
        runs: &[Run],
        seqs: &[SeqStep],
        plan: &StepPlan,
    ) -> Result<()> {
        let n_layer = self.config.n_layer;
        if let Some(ig) = &mut self.ig {
            ig.forks_done();
            if !plan.sparse.is_empty() {
                ig.count_step(n_layer, &plan.sparse)?;
            }
            for d in &plan.fetches_all {
                ig.count_dense_step(n_layer, d.index as usize);
            }
        }
        if let Some(h2o) = &mut self.h2o {
            if plan.sparse.is_empty() {
                for r in runs {
                    h2o.end_dense(seqs[r.seq].row, r.len, r.len + r.tokens)?;
                }
            } else {
                h2o.end_decode(&plan.sparse)?;
            }
        }
        let (n, shared) = done.alongside(&FETCH_KERNELS);
        self.fetch_alongside.0 += n;
        self.fetch_alongside.1 += shared;
        if let Some(profile) = &mut self.profile {
            profile.fetch_overlap_ns += done.overlap_ns(&FETCH_KERNELS);
            for k in &done.kernels {
                let e = profile.kernels.entry(k.label).or_default();
                e.0 += k.ns;
                e.1 += 1;
            }
        }
        Ok(())
    }
}
