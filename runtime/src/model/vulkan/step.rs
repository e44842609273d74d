//! One step of the Vulkan executor: the sequences' tokens appended to their cache rows, a plan
//! of which kernels they take, the embedding, every layer and the logits recorded into one
//! command buffer, and the bookkeeping once it ran.

use std::slice;

use super::kernels::DECODE_MAX_TOKENS;
use super::policy::{rope_spec, Beside, LayerAt, StepView, FETCH_KERNELS};
use super::{DeviceMatrix, SeqStep, VkModel};
use crate::cpu::forward::check_step;
use crate::cpu::ops;
use crate::error::{Error, Result};
use crate::kernels::{
    slots_per_token, EmbedArgs, ExpertSlots, MatmulArgs, MatvecArgs, NormShape, OutputCols,
    QkvAdjustArgs, QkvHeads, RopeTable, RouteOut, StepToken,
};
use crate::kv::{BlockCopy, OutOfBlocks, NO_BEAM};
use crate::model::{Logits, Mlp, SharedMlp};
use crate::vk::{Buffer, Completed, Recorder};

/// One sequence's tokens in a step: `tokens` of them from the step's token `t0`, appended
/// after the `len` entries its row held.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    /// Index in the step's `seqs`.
    pub seq: usize,
    pub t0: usize,
    pub tokens: usize,
    pub len: usize,
}

impl Run {
    /// Few enough tokens for the decode path.
    fn decodes(&self) -> bool {
        self.tokens <= DECODE_MAX_TOKENS
    }
}

/// What a step runs, decided before anything is recorded (the KV policy plans its part).
pub(super) struct StepPlan<'s> {
    /// The step's tokens, as `steps` in the scratch holds them.
    pub steps: &'s [StepToken],
    /// Tokens of the decode runs, which come first in the step.
    pub decode_tokens: usize,
    /// The most positions a decode token attends to, its own included.
    pub longest: u32,
    /// Every decode run is one token, so decode attention may store its K/V itself.
    pub fused: bool,
    /// Weight-streaming products (a few tokens, or any step on a CPU device) rather than
    /// tiled matmuls.
    pub streaming: bool,
    /// Runs too long for the decode path: (first token, tokens).
    pub prefill: Vec<(usize, usize)>,
}

/// Where each sequence's requested logits land among the logits rows: (first row, rows).
type Spans = Vec<(usize, usize)>;

/// A block's experts on the device (`Mlp::Experts`).
#[derive(Clone, Copy)]
struct ExpertsAt<'a> {
    router: &'a [DeviceMatrix],
    gate_up: &'a [DeviceMatrix],
    down: &'a [DeviceMatrix],
    shared: Option<&'a SharedMlp<Vec<DeviceMatrix>>>,
}

/// A gated MLP to record: its input, and its norm gain where the input is to be normed;
/// gate/up and down weights; its width; the [tokens, 2 n_ff] gate/up output (prefill) and
/// [tokens, n_ff] hidden scratch; and where its output goes (+= where accumulating).
struct GatedMlp<'a> {
    x: &'a Buffer,
    norm: Option<&'a Buffer>,
    weights: (&'a [DeviceMatrix], &'a [DeviceMatrix]),
    n_ff: u32,
    scratch: (&'a Buffer, &'a Buffer),
    out: (&'a Buffer, bool, OutputCols),
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
        self.policy.admit(&self.kv, seqs)?;
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
        self.kv.len(row) + self.policy.evicted(row)
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
        let plan = self.plan_step(steps, runs);
        let view = StepView {
            runs,
            seqs,
            steps,
            n_layer: self.config.n_layer,
        };
        self.policy.plan(&view)?;
        let mut rec = if self.profile.is_some() {
            Recorder::timed(&self.device)?
        } else {
            Recorder::new(&self.device)?
        };
        self.kv.record_copies(&mut rec, copies)?;
        self.policy.record_start(&mut rec)?;
        let c = &self.config;
        let s = &self.scratch;
        let embed = &self.kernels.of(self.token_embd.format).embed;
        let (t, vocab, e) = (ids.len() as u32, c.n_vocab as u32, c.n_embd as u32);
        let args = EmbedArgs {
            table: &self.token_embd.buffer,
            ids: &s.ids,
            out: &s.x,
            tokens: t,
            vocab,
            dim: e,
            scale: c.embd_scale.unwrap_or(1.0),
        };
        embed.record(&mut rec, args)?;
        for l in 0..self.layers.len() {
            self.record_layer(&mut rec, l, &plan)?;
        }
        let spans = self.record_logits(&mut rec, runs, seqs, plan.streaming)?;
        let done = rec.submit()?;
        self.policy.end_step(&view)?;
        self.account_step(&done);
        let n_vocab = self.config.n_vocab;
        let out_rows: usize = spans.iter().map(|&(_, count)| count).sum();
        let mut logits: Vec<f32> = self.scratch.logits.download(out_rows * n_vocab)?;
        // Soft-capped on the host, where the logits arrive anyway.
        if let Some(cap) = self.config.logit_softcap {
            ops::softcap(&mut logits, cap);
        }
        Ok(spans
            .iter()
            .map(|&(first, count)| logits[first * n_vocab..(first + count) * n_vocab].to_vec())
            .collect())
    }

    /// Which kernels the step's runs take, before the KV policy plans its part.
    fn plan_step<'s>(&self, steps: &'s [StepToken], runs: &[Run]) -> StepPlan<'s> {
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
            streaming: steps.len() <= DECODE_MAX_TOKENS || self.kernels.matvec_prefill,
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
        plan: &'a StepPlan,
    ) -> Result<()> {
        let at = LayerAt {
            l,
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
        };
        let mut beside = self.policy.beside(rec, &at)?;
        self.record_qkv(rec, &at)?;
        self.record_rope_append(rec, &at, &mut beside)?;
        self.policy.attention(rec, &at)?;
        beside.step(rec)?;
        self.record_output(rec, &at)?;
        beside.step(rec)?;
        self.record_mlp(rec, &at, &mut beside)?;
        beside.finish(rec)
    }

    /// The layer's norm and QKV projection, x into qkv, with the q/k/v biases and the
    /// per-head query/key norm where the model has them.
    fn record_qkv<'a>(&'a self, rec: &mut Recorder<'a>, at: &LayerAt<'a>) -> Result<()> {
        let (c, k, s, w) = (at.config, at.kernels, at.scratch, &self.layers[at.l]);
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
        at: &LayerAt<'a>,
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
            spec: rope_spec(c),
        };
        at.kernels
            .rope_kv
            .record(rec, &s.qkv, at.kv_layer(), &s.steps, rest, rope)?;
        if rec.len() > before {
            beside.step(rec)?;
        }
        Ok(())
    }

    /// The output projection, added to x (normed first where the model has a post-norm).
    fn record_output<'a>(&'a self, rec: &mut Recorder<'a>, at: &LayerAt<'a>) -> Result<()> {
        let (c, s, w) = (at.config, at.scratch, &self.layers[at.l]);
        let post = w.attn_post_norm.as_ref();
        // Without a post-norm the product adds to x itself; with one it lands in xn first.
        let (out, accumulate) = match post {
            Some(_) => (&s.xn, false),
            None => (&s.x, true),
        };
        let shape = (c.n_embd as u32, c.attn_dim() as u32);
        self.record_projection(rec, at, &w.wo, (&s.att, out), shape, accumulate)?;
        self.record_post_norm(rec, at, post)
    }

    /// y [tokens, m] (+)= x [tokens, k] W^T for the step's tokens: weight-streaming products,
    /// or the tiled matmul in a prefill on a GPU.
    fn record_projection<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &LayerAt<'a>,
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
    fn record_post_norm<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &LayerAt<'a>,
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

    /// The MLP block, down(act(gate(xn)) * up(xn)) added to x (normed first where the model
    /// has a post-norm), with a piece of `beside` between its two products.
    fn record_mlp<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &LayerAt<'a>,
        beside: &mut Beside<'a>,
    ) -> Result<()> {
        let (c, s, w) = (at.config, at.scratch, &self.layers[at.l]);
        // The down projection adds to x, or lands in xn for a post-norm.
        let post = w.ffn_post_norm.as_ref();
        let (out, accumulate) = match post {
            Some(_) => (&s.xn, false),
            None => (&s.x, true),
        };
        match &w.mlp {
            Mlp::Dense { gate_up, down } => {
                let mlp = GatedMlp {
                    x: &s.x,
                    norm: Some(&w.ffn_norm),
                    weights: (gate_up, down),
                    n_ff: c.n_ff as u32,
                    scratch: (&s.gate_up, &s.hidden),
                    out: (out, accumulate, OutputCols::default()),
                };
                self.record_gated_mlp(rec, at, Some(beside), mlp)?;
            }
            Mlp::Experts {
                router,
                gate_up,
                down,
                shared,
            } => {
                let experts = ExpertsAt {
                    router,
                    gate_up,
                    down,
                    shared: shared.as_ref(),
                };
                self.record_experts(rec, at, beside, experts, (out, accumulate))?;
            }
        }
        self.record_post_norm(rec, at, post)
    }

    /// A gated MLP, down(act(gate(x')) * up(x')) into `mlp.out`, x' the norm of x where
    /// `mlp.norm` is given, with a piece of `beside` between the two products.
    fn record_gated_mlp<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &LayerAt<'a>,
        mut beside: Option<&mut Beside<'a>>,
        mlp: GatedMlp<'a>,
    ) -> Result<()> {
        let (c, k, s) = (at.config, at.kernels, at.scratch);
        let t = at.plan.steps.len() as u32;
        let (e, n_ff, eps) = (c.n_embd as u32, mlp.n_ff, c.norm_eps);
        let (w_gate_up, w_down) = mlp.weights;
        let (gate_up, hidden) = mlp.scratch;
        let (out, accumulate, cols) = mlp.out;
        let mut between = |rec: &mut Recorder<'a>| match &mut beside {
            Some(b) => b.step(rec),
            None => Ok(()),
        };
        // The gated product reads gate and up rows together, in one format: gate and up in
        // different formats take the separate products and SwiGLU.
        if at.plan.streaming && w_gate_up.len() == 1 {
            let args = MatvecArgs::plain(&w_gate_up[0].buffer, mlp.x, hidden, n_ff, e, t);
            let norm = mlp.norm.map(|g| (g, eps));
            let gated = Some(c.mlp_act);
            k.matvec(
                rec,
                w_gate_up,
                MatvecArgs {
                    norm,
                    gated,
                    ..args
                },
            )?;
            between(rec)?;
            let args = MatvecArgs::plain(&w_down[0].buffer, hidden, out, e, n_ff, t);
            k.matvec(
                rec,
                w_down,
                MatvecArgs {
                    accumulate,
                    cols,
                    ..args
                },
            )?;
        } else {
            let x = match mlp.norm {
                Some(gain) => {
                    let shape = NormShape { rows: t, n: e, eps };
                    k.rmsnorm.record(rec, mlp.x, gain, &s.xn, shape)?;
                    &s.xn
                }
                None => mlp.x,
            };
            let args = MatmulArgs {
                x,
                c: gate_up,
                n: t,
                m: 2 * n_ff,
                k: e,
                accumulate: false,
                cols: OutputCols::default(),
            };
            k.matmul(rec, w_gate_up, args)?;
            between(rec)?;
            k.swiglu
                .record_fused(rec, gate_up, hidden, t, n_ff, c.mlp_act)?;
            let down = MatmulArgs {
                x: hidden,
                c: out,
                n: t,
                m: e,
                k: n_ff,
                accumulate,
                cols,
            };
            k.matmul(rec, w_down, down)?;
        }
        Ok(())
    }

    /// A mixture of experts' MLP block: the router's logits from the normed x, each token's
    /// experts chosen and grouped by expert, the chosen experts' gated products and down
    /// products, the shared expert's MLP where the model has one, and their outputs summed
    /// with the router's weights into `out`.
    fn record_experts<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &LayerAt<'a>,
        beside: &mut Beside<'a>,
        w: ExpertsAt<'a>,
        (out, accumulate): (&'a Buffer, bool),
    ) -> Result<()> {
        let (c, k, s) = (at.config, at.kernels, at.scratch);
        let (Some(x), Some(m), Some((route, combine))) = (&c.experts, &s.moe, &k.moe) else {
            return Err(Error::options(
                "experts",
                "a mixture of experts without its kernels",
            ));
        };
        let t = at.plan.steps.len() as u32;
        let (e, n_ff, used, count) = (
            c.n_embd as u32,
            x.n_ff as u32,
            x.used as u32,
            x.count as u32,
        );
        let stride = slots_per_token(x);
        let slots = t * stride;
        let router_rows = x.router_rows() as u32;
        let shape = NormShape {
            rows: t,
            n: e,
            eps: c.norm_eps,
        };
        k.rmsnorm
            .record(rec, &s.x, &self.layers[at.l].ffn_norm, &s.xn, shape)?;
        let io = (&s.xn, &m.router);
        self.record_projection(rec, at, w.router, io, (router_rows, e), false)?;
        let (gate_up, down) = match (w.gate_up, w.down) {
            ([gate_up], [down]) => (gate_up, down),
            _ => {
                return Err(Error::options(
                    "experts",
                    "experts' matrices of several formats in one tensor",
                ))
            }
        };
        let device = rec.device();
        let routes = RouteOut {
            weights: &m.weights,
            experts: &m.experts,
            order: &m.order,
            tiles: &m.tiles,
        };
        // A prompt on a GPU: tiled products over each expert's slots (up to 64 a tile), the
        // gated activation between them. Otherwise weight-streaming products taking one or
        // eight slots a pass, the activation folded into the first.
        let grouped = match (&m.gate_up, at.plan.streaming) {
            (Some(buffer), false) => Some((
                buffer,
                k.of(gate_up.format).grouped_experts_kernel(device)?,
                k.of(down.format).grouped_experts_kernel(device)?,
            )),
            _ => None,
        };
        let streamed = match grouped {
            Some(_) => None,
            None => Some((
                k.of(gate_up.format)
                    .experts_kernel(device, t * used, count)?,
                k.of(down.format).experts_kernel(device, t * used, count)?,
            )),
        };
        // Both products cut the slots the same way.
        let tile = match streamed {
            Some((up, down)) => up.tokens().min(down.tokens()),
            None => crate::kernels::MATMUL_TILE,
        };
        let max_tiles = route.record(rec, &m.router, routes, (t, x, tile))?;
        beside.step(rec)?;
        let slots_at = ExpertSlots {
            tiles: &m.tiles,
            order: &m.order,
            max_tiles,
            experts: count,
            x_per: stride,
        };
        let down_at = ExpertSlots {
            x_per: 1,
            ..slots_at
        };
        if let Some((up_kernel, down_kernel)) = streamed {
            let args = MatvecArgs {
                gated: Some(c.mlp_act),
                ..MatvecArgs::plain(&gate_up.buffer, &s.xn, &m.hidden, n_ff, e, slots)
            };
            up_kernel.record_experts(rec, args, slots_at)?;
            let args = MatvecArgs::plain(&down.buffer, &m.hidden, &m.out, e, n_ff, slots);
            down_kernel.record_experts(rec, args, down_at)?;
        }
        if let Some((both, up_kernel, down_kernel)) = grouped {
            let product = |x, c, m, k| MatmulArgs {
                x,
                c,
                n: slots,
                m,
                k,
                accumulate: false,
                cols: OutputCols::default(),
            };
            let args = product(&s.xn, both, 2 * n_ff, e);
            up_kernel.record_experts(rec, &gate_up.buffer, args, slots_at)?;
            k.swiglu
                .record_fused(rec, both, &m.hidden, slots, n_ff, c.mlp_act)?;
            let args = product(&m.hidden, &m.out, e, n_ff);
            down_kernel.record_experts(rec, &down.buffer, args, down_at)?;
        }
        // The shared expert's output is each token's last slot.
        if let (Some(sh), Some(weights), Some(scratch)) = (x.shared, w.shared, &m.shared) {
            let mlp = GatedMlp {
                x: &s.xn,
                norm: None,
                weights: (&weights.gate_up, &weights.down),
                n_ff: sh.n_ff as u32,
                scratch: (&scratch.0, &scratch.1),
                out: (
                    &m.out,
                    false,
                    OutputCols {
                        first: used * e,
                        width: stride * e,
                    },
                ),
            };
            self.record_gated_mlp(rec, at, None, mlp)?;
        }
        combine.record(rec, (&m.out, &m.weights), out, (t, e, stride), accumulate)?;
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
            k.matvec(rec, slice::from_ref(head), MatvecArgs { norm, ..args })?;
        } else {
            let shape = NormShape { rows, n: e, eps };
            k.rmsnorm
                .record(rec, x_rows, &self.output_norm, &s.xn, shape)?;
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
    fn account_step(&mut self, done: &Completed) {
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
