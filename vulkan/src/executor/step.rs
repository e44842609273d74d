//! One step of the Vulkan executor: the sequences' tokens appended to their cache rows, a plan
//! of which kernels they take, the embedding, every layer and the logits recorded into one
//! command buffer, and the bookkeeping once it ran. An executor holding part of a split
//! model starts from the residual stream the layers before it left, or ends by handing its
//! own on.

use std::slice;

use super::kernels::DECODE_MAX_TOKENS;
use super::plan::{Run, StepPlan};
use super::policy::{rope_spec, Beside, RecordingLayer, StepView, FETCH_KERNELS};
use super::{DeviceMatrix, SeqStep, VkModel};
use hearth_kernels::kv::{BlockCopy, OutOfBlocks, NO_BEAM};
use hearth_kernels::vk::{Buffer, Completed, Recorder};
use hearth_kernels::{
    EmbedArgs, MatmulArgs, MatvecArgs, NormShape, OutputCols, QkvAdjustArgs, QkvHeads, RopeTable,
    StepToken,
};
use hearth_model::ops;
use hearth_model::Logits;
use hearth_model::{check_hidden, check_step, StageOutput};
use hearth_model::{Error, Result};

/// Where each sequence's requested logits land among the logits rows: (first row, rows).
pub(super) type Spans = Vec<(usize, usize)>;

/// A step's tokens as the executor runs them, after they were appended to their rows.
pub(super) struct PreparedStep {
    /// Token ids in the step's order (decode runs first).
    pub ids: Vec<u32>,
    /// Where each token goes in the cache and rotates.
    pub steps: Vec<StepToken>,
    pub runs: Vec<Run>,
    /// Blocks shared with another row, copied before the step writes to them.
    pub copies: Vec<BlockCopy>,
    /// Each sequence's row and its length before the step, in the order of `seqs`.
    pub rows: Vec<(usize, usize)>,
}

impl PreparedStep {
    /// The rows back at their lengths before the step.
    pub fn undo(&self, kv: &mut hearth_kernels::kv::KvCache) {
        for &(row, len) in &self.rows {
            kv.truncate(row, len);
        }
    }
}

/// Each sequence's first row in `seqs` order, where hidden states cross.
fn seq_starts(seqs: &[SeqStep]) -> Vec<usize> {
    seqs.iter()
        .scan(0, |t0, s| {
            let first = *t0;
            *t0 += s.tokens.len();
            Some(first)
        })
        .collect()
}

impl VkModel {
    /// Runs one step over several sequences (at most `max_step_tokens` tokens in all) in one
    /// submission, and returns each sequence's requested logits ([rows, n_vocab], empty when
    /// none were asked for). Each sequence's tokens go to its row at the row's next positions.
    pub fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        match self.step_stage(seqs, None)? {
            StageOutput::Logits(logits) => Ok(logits),
            StageOutput::Hidden(_) => Err(self.part.not_whole()),
        }
    }

    /// [`step_batch`](Self::step_batch) over the layers held, entered by `hidden` ([tokens,
    /// n_embd] in the order of `seqs`) where they do not start the model; returns the
    /// residual stream, in the same order, where they do not end it.
    pub fn step_stage(&mut self, seqs: &[SeqStep], hidden: Option<&[f32]>) -> Result<StageOutput> {
        check_hidden(&self.part, seqs, hidden, self.config.n_embd)?;
        let step = self.prepare_step(seqs)?;
        let result = self.record_step(&step, seqs, hidden);
        if result.is_err() {
            // Nothing was written: the rows go back to their old lengths.
            step.undo(&mut self.kv);
        }
        result
    }

    /// Checks a step and appends its tokens to their rows: their ids and cache places in the
    /// step's order, decode runs first, and the blocks to copy before it runs. Nothing is
    /// appended where it fails.
    pub(super) fn prepare_step(&mut self, seqs: &[SeqStep]) -> Result<PreparedStep> {
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
        self.policy.admit(&self.kv, seqs)?;
        // Short sequences (decode) first, so one decode-attention dispatch covers them; each
        // longer run gets a prefill-attention dispatch of its own.
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_by_key(|&i| seqs[i].tokens.len() > DECODE_MAX_TOKENS);
        let mut step = PreparedStep {
            ids: Vec::with_capacity(n),
            steps: Vec::with_capacity(n),
            runs: Vec::with_capacity(seqs.len()),
            copies: Vec::new(),
            rows: seqs.iter().map(|s| (s.row, self.kv.len(s.row))).collect(),
        };
        let before: Vec<(usize, usize)> = seqs
            .iter()
            .map(|s| (self.kv.len(s.row), self.position(s.row)))
            .collect();
        // Blocks are taken in the order of `seqs`, as every executor takes them, so that the
        // parts of a split model keep each position in the same block.
        for s in seqs {
            // Counted above, so this cannot run out.
            step.copies.extend(self.kv.append(s.row, s.tokens.len())?);
        }
        for &i in &order {
            let s = &seqs[i];
            let (len, pos) = before[i];
            step.runs.push(Run {
                seq: i,
                t0: step.ids.len(),
                tokens: s.tokens.len(),
                len,
            });
            for (j, &id) in s.tokens.iter().enumerate() {
                step.ids.push(id);
                step.steps.push(StepToken {
                    beam: s.beam.unwrap_or(NO_BEAM),
                    rope_pos: (pos + j) as u32,
                    ..StepToken::new(s.row as u32, (len + j) as u32)
                });
            }
        }
        Ok(step)
    }

    /// The next token's position in `row`'s sequence: its entries, and more once its pool has
    /// evicted tokens.
    pub(super) fn position(&self, row: usize) -> usize {
        self.kv.len(row) + self.policy.evicted(row)
    }

    fn record_step(
        &mut self,
        step: &PreparedStep,
        seqs: &[SeqStep],
        hidden: Option<&[f32]>,
    ) -> Result<StageOutput> {
        let (ids, steps, runs, copies) = (&step.ids, &step.steps, &step.runs, &step.copies);
        self.upload_step(step)?;
        if let (Some(h), Some(buffer)) = (hidden, &self.scratch.hidden_in) {
            buffer.upload(0, h)?;
        }
        let plan = self.plan_step(steps, runs);
        let view = StepView {
            runs,
            seqs,
            steps,
            n_layer: self.config.n_layer,
        };
        self.policy.plan(&view)?;
        let mut rec = self.recorder()?;
        self.kv.record_copies(&mut rec, copies)?;
        self.policy.record_start(&mut rec)?;
        match (hidden, &self.token_embd) {
            (Some(_), _) => self.record_hidden_in(&mut rec, runs, seqs)?,
            (None, Some(_)) => self.record_embed(&mut rec, ids.len())?,
            (None, None) => return Err(self.part.not_whole()),
        }
        let first = self.part.layers.start;
        for l in self.part.layers.clone() {
            self.record_layer(&mut rec, l, first, &plan)?;
        }
        if !self.part.heads() {
            self.record_hidden_out(&mut rec, runs, seqs)?;
            let done = rec.submit()?;
            self.policy.end_step(&view)?;
            self.account_step(&done);
            let n = ids.len() * self.config.n_embd;
            return Ok(StageOutput::Hidden(self.scratch.logits.download(n)?));
        }
        let spans = self.record_logits(&mut rec, runs, seqs, plan.streaming)?;
        let done = rec.submit()?;
        self.policy.end_step(&view)?;
        self.account_step(&done);
        self.read_logits(&spans)
    }

    /// A command buffer for a step, timed when profiling.
    pub(super) fn recorder(&self) -> Result<Recorder<'_>> {
        Ok(match self.profile.is_some() {
            true => Recorder::timed(&self.device)?,
            false => Recorder::new(&self.device)?,
        })
    }

    /// The step's ids, token places and block tables onto the device, before it is recorded.
    pub(super) fn upload_step(&mut self, step: &PreparedStep) -> Result<()> {
        self.kv.sync_tables()?;
        self.scratch.ids.upload(0, &step.ids)?;
        self.scratch.steps.upload(0, &step.steps)?;
        Ok(())
    }

    /// The token embedding of the step's tokens into x.
    pub(super) fn record_embed<'a>(&'a self, rec: &mut Recorder<'a>, tokens: usize) -> Result<()> {
        let (c, s) = (&self.config, &self.scratch);
        let Some(token_embd) = &self.token_embd else {
            return Err(self.part.not_whole());
        };
        let embed = &self.kernels.of(token_embd.format).embed;
        let args = EmbedArgs {
            table: &token_embd.buffer,
            ids: &s.ids,
            out: &s.x,
            tokens: tokens as u32,
            vocab: c.n_vocab as u32,
            dim: c.n_embd as u32,
            scale: c.embd_scale.unwrap_or(1.0),
        };
        Ok(embed.record(rec, args)?)
    }

    /// The residual stream uploaded to `hidden_in` (in `seqs` order) into x, in the step's
    /// order: decode runs first.
    pub(super) fn record_hidden_in<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        runs: &[Run],
        seqs: &[SeqStep],
    ) -> Result<()> {
        let s = &self.scratch;
        let Some(hidden_in) = &s.hidden_in else {
            return Err(Error::options("hidden", "this part embeds its own tokens"));
        };
        let row_bytes = self.config.n_embd as u64 * 4;
        let seq_t0 = seq_starts(seqs);
        for r in runs {
            let (src, dst) = (seq_t0[r.seq] as u64, r.t0 as u64);
            let bytes = r.tokens as u64 * row_bytes;
            rec.copy(hidden_in, src * row_bytes, &s.x, dst * row_bytes, bytes)?;
        }
        Ok(())
    }

    /// x back in `seqs` order into the read-back buffer, for the host.
    pub(super) fn record_hidden_out<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        runs: &[Run],
        seqs: &[SeqStep],
    ) -> Result<()> {
        let s = &self.scratch;
        let row_bytes = self.config.n_embd as u64 * 4;
        let seq_t0 = seq_starts(seqs);
        for r in runs {
            let (src, dst) = (r.t0 as u64, seq_t0[r.seq] as u64);
            let bytes = r.tokens as u64 * row_bytes;
            rec.copy(&s.x, src * row_bytes, &s.logits, dst * row_bytes, bytes)?;
        }
        Ok(())
    }

    /// The logits the step computed, each sequence's `spans` rows, soft-capped where the
    /// model caps them.
    pub(super) fn read_logits(&self, spans: &Spans) -> Result<StageOutput> {
        let n_vocab = self.config.n_vocab;
        let out_rows: usize = spans.iter().map(|&(_, count)| count).sum();
        let mut logits: Vec<f32> = self.scratch.logits.download(out_rows * n_vocab)?;
        // Soft-capped on the host, where the logits arrive anyway.
        if let Some(cap) = self.config.logit_softcap {
            ops::softcap(&mut logits, cap);
        }
        Ok(StageOutput::Logits(
            spans
                .iter()
                .map(|&(first, count)| logits[first * n_vocab..(first + count) * n_vocab].to_vec())
                .collect(),
        ))
    }

    /// Which kernels the step's runs take, before the KV policy plans its part.
    pub(super) fn plan_step<'s>(&self, steps: &'s [StepToken], runs: &[Run]) -> StepPlan<'s> {
        // Decode tokens come first: every run of at most DECODE_MAX_TOKENS.
        let decode_tokens: usize = runs.iter().filter(|r| r.decodes()).map(|r| r.tokens).sum();
        let longest = steps[..decode_tokens]
            .iter()
            .map(|st| st.pos + 1)
            .max()
            .unwrap_or(0);
        let fused = decode_tokens > 0 && runs.iter().filter(|r| r.decodes()).all(|r| r.tokens == 1);
        StepPlan {
            steps,
            decode_tokens,
            longest,
            fused,
            streaming: steps.len() <= DECODE_MAX_TOKENS || self.kernels.products.matvec_prefill,
            prefill: runs
                .iter()
                .filter(|r| !r.decodes())
                .map(|r| (r.t0, r.tokens))
                .collect(),
        }
    }

    /// Layer `l` for the step's tokens: the attention block and the MLP, each added to the
    /// residual stream x. The KV policy records the attention, and may record work for a
    /// later layer between this layer's kernels (InfiniGen's fetch of the next layer).
    fn record_layer<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        first: usize,
        plan: &'a StepPlan,
    ) -> Result<()> {
        let at = self.at_layer(l, first, plan, false);
        let mut beside = self.policy.beside(rec, &at)?;
        self.record_attention(rec, &at, &mut beside)?;
        self.record_mlp(rec, &at, &mut beside)?;
        beside.finish(rec)
    }

    /// What the kernels of layer `l` read, the executor's first layer being `first`;
    /// `partial` for a row split's share of it.
    pub(super) fn at_layer<'a>(
        &'a self,
        l: usize,
        first: usize,
        plan: &'a StepPlan,
        partial: bool,
    ) -> RecordingLayer<'a> {
        RecordingLayer {
            l,
            first,
            config: &self.config,
            kernels: &self.kernels,
            scratch: &self.scratch,
            layers: &self.layers,
            kv: &self.kv,
            rope_table: match &self.local_rope_table {
                Some(local) if self.config.local_rope(l) => local,
                _ => &self.rope_table,
            },
            global_rope_table: &self.rope_table,
            plan,
            fused: plan.fused && self.policy.fuses_append(l),
            partial,
        }
    }

    /// The attention block of a layer: its norm and QKV projection, RoPE and the K/V
    /// append, attention as the KV policy runs it, and the output projection.
    pub(super) fn record_attention<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        beside: &mut Beside<'a>,
    ) -> Result<()> {
        self.record_qkv(rec, at)?;
        self.record_rope_append(rec, at, beside)?;
        self.policy.attention(rec, at)?;
        beside.step(rec)?;
        self.record_output(rec, at)?;
        beside.step(rec)
    }

    /// The layer's norm and QKV projection, x into qkv, with the q/k/v biases and the
    /// per-head query/key norm where the model has them.
    fn record_qkv<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        let (c, k, s, w) = (at.config, at.kernels, at.scratch, at.weights());
        let t = at.plan.steps.len() as u32;
        let (qkv_dim, e, eps) = (c.qkv_dim() as u32, c.n_embd as u32, c.norm_eps);
        if at.plan.streaming {
            let args = MatvecArgs::plain(&w.wqkv[0].buffer, &s.x, &s.qkv, qkv_dim, e, t);
            let norm = Some((&w.attn_norm, eps));
            k.matvec(rec, &w.wqkv, MatvecArgs { norm, ..args })?;
        } else {
            let shape = NormShape { rows: t, n: e, eps };
            k.rmsnorm.record(rec, &s.x, &w.attn_norm, &s.xn, shape)?;
            let args = MatmulArgs {
                x: &s.xn,
                c: &s.qkv,
                n: t,
                m: qkv_dim,
                k: e,
                accumulate: false,
                cols: OutputCols::default(),
            };
            k.matmul(rec, &w.wqkv, args)?;
        }
        if let Some(adjust) = &k.qkv_adjust {
            let heads = QkvHeads {
                tokens: t,
                n_head: c.n_head as u32,
                n_head_kv: c.n_head_kv as u32,
                head_dim: c.head_dim as u32,
            };
            let args = QkvAdjustArgs {
                bias: w.qkv_bias.as_ref(),
                qk_norm: w.qk_norm().map(|(q, k)| (q, k, eps)),
                whole: c.qk_norm_whole,
            };
            adjust.record(rec, &s.qkv, heads, args)?;
        }
        Ok(())
    }

    /// RoPE on the step's queries and keys and their K/V into the cache, except for the
    /// tokens whose decode attention stores them itself (`at.fused`: a pure decode step, one
    /// token per sequence).
    fn record_rope_append<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        beside: &mut Beside<'a>,
    ) -> Result<()> {
        let (c, s, plan) = (at.config, at.scratch, at.plan);
        let n = plan.steps.len();
        let rest = match at.fused {
            true => at.attn_shape(plan.decode_tokens, n - plan.decode_tokens),
            false => at.attn_shape(0, n),
        };
        let before = rec.len();
        let rope = RopeTable {
            table: at.rope_table,
            spec: rope_spec(c, at.l),
        };
        at.kernels
            .rope_kv
            .record(rec, &s.qkv, at.kv_layer(), &s.steps, rest, rope)?;
        if rec.len() > before {
            beside.step(rec)?;
        }
        Ok(())
    }

    /// The output projection with its bias where the model has one, added to x (normed first
    /// where the model has a post-norm).
    fn record_output<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        let (c, s, w) = (at.config, at.scratch, at.weights());
        let post = w.attn_post_norm.as_ref();
        // Without a post-norm the product adds to x itself; with one it lands in xn first.
        let (out, accumulate) = match post {
            Some(_) => (&s.xn, false),
            None => (&s.x, !at.partial),
        };
        let shape = (c.n_embd as u32, c.attn_dim() as u32);
        self.record_projection(rec, at, &w.wo, (&s.att, out), shape, accumulate)?;
        if let Some(bias) = &w.wo_bias {
            // Added where the product landed: x + Wo att + b, or xn = Wo att + b.
            let rows = (at.plan.steps.len() as u32, c.n_embd as u32);
            at.kernels
                .bias(&self.device)?
                .record(rec, out, bias, rows, None)?;
        }
        self.record_post_norm(rec, at, post)
    }

    /// y [tokens, m] (+)= x [tokens, k] W^T for the step's tokens: weight-streaming products,
    /// or the tiled matmul in a prefill on a GPU.
    pub(super) fn record_projection<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        w: &'a [DeviceMatrix],
        (x, y): (&'a Buffer, &'a Buffer),
        (m, k): (u32, u32),
        accumulate: bool,
    ) -> Result<()> {
        let t = at.plan.steps.len() as u32;
        if at.plan.streaming {
            let args = MatvecArgs::plain(&w[0].buffer, x, y, m, k, t);
            at.kernels.matvec(rec, w, MatvecArgs { accumulate, ..args })
        } else {
            let args = MatmulArgs {
                x,
                c: y,
                n: t,
                m,
                k,
                accumulate,
                cols: OutputCols::default(),
            };
            at.kernels.matmul(rec, w, args)
        }
    }

    /// x += rmsnorm(xn) * gain, where a block's output in xn has a post-norm.
    pub(super) fn record_post_norm<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        gain: Option<&'a Buffer>,
    ) -> Result<()> {
        let Some(gain) = gain else { return Ok(()) };
        let (c, s) = (at.config, at.scratch);
        let shape = NormShape {
            rows: at.plan.steps.len() as u32,
            n: c.n_embd as u32,
            eps: c.norm_eps,
        };
        Ok(at
            .kernels
            .rmsnorm
            .record_add(rec, &s.xn, gain, &s.x, shape)?)
    }

    /// The final norm and the output head over the rows of x whose logits the sequences want,
    /// in the order of `seqs`; returns where each sequence's rows land.
    pub(super) fn record_logits<'a>(
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
        let (Some(head), Some(output_norm)) = (
            self.output.as_ref().or(self.token_embd.as_ref()),
            &self.output_norm,
        ) else {
            return Err(self.part.not_whole());
        };
        let rows = out_rows as u32;
        if streaming || out_rows <= DECODE_MAX_TOKENS {
            let args = MatvecArgs::plain(&head.buffer, x_rows, &s.logits, vocab, e, rows);
            let norm = Some((output_norm, eps));
            k.matvec(rec, slice::from_ref(head), MatvecArgs { norm, ..args })?;
        } else {
            let shape = NormShape { rows, n: e, eps };
            k.rmsnorm.record(rec, x_rows, output_norm, &s.xn, shape)?;
            let args = MatmulArgs {
                x: &s.xn,
                c: &s.logits,
                n: rows,
                m: vocab,
                k: e,
                accumulate: false,
                cols: OutputCols::default(),
            };
            k.matmul(rec, slice::from_ref(head), args)?;
        }
        Ok(spans)
    }

    /// After the step ran: the fetch kernels' grouping, and the profile.
    pub(super) fn account_step(&mut self, done: &Completed) {
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
    }
}
