//! H2O in the Vulkan executor (`--kv-offload h2o`): the baseline's state on the device and
//! what each layer of a step records (see `kv::h2o` for the method, `kernels::h2o` for the
//! kernels).
//!
//! A decode step (one token for each of its sequences, each with history) attends, in every
//! layer from `dense_layers` on, over the positions its row keeps: they are copied into the
//! step's selection lists, gathered and attended as InfiniGen's selections are, and then
//! `h2o_update` adds the attention to the masses, appends the new entry and evicts. Any other
//! step attends densely; `h2o_lse` and `h2o_mass` add its attention to the masses, and the
//! host then appends and evicts for each row the step wrote, with the CPU reference's code.
//! A row whose length changed outside a step (truncated, or reused for another sequence) is
//! brought in line before its next step.

mod rows;

use std::any::Any;
use std::sync::Arc;

use super::infinigen::count_selections;
use super::{record_dense_attention, KvPolicy, RecordingLayer, SeqStep, StepView};
use hearth_kernels::h2o::{DenseRun, H2oLse, H2oMass, H2oState, H2oUpdate};
use hearth_kernels::infinigen::{
    AttnSparse, GatherArgs, IgBatch, IgShape, IgStep, IgToken, KvGather, QueryAt, SparseArgs,
};
use hearth_kernels::kv::infinigen::{IgParams, IgStats};
use hearth_kernels::kv::policy::{KvPolicyKind, KvPolicyStats};
use hearth_kernels::kv::{KvCache, KvShape};
use hearth_kernels::vk::{Buffer, BufferDesc, Device, Recorder};
use hearth_model::ModelConfig;
use hearth_model::{Error, Result};

/// One layer's state: see include/h2o.glsl.
struct LayerState {
    kept: Buffer,
    kept_count: Buffer,
    mass: Buffer,
}

pub(in crate::executor) struct VkH2o {
    params: IgParams,
    shape: IgShape,
    gather: KvGather,
    attn: AttnSparse,
    update: H2oUpdate,
    lse: H2oLse,
    mass: H2oMass,
    /// Layers dense_layers.. in order.
    layers: Vec<LayerState>,
    /// [rows] `IgStep`: the tokens of the decode step being recorded.
    steps: Buffer,
    /// [tokens, n_kv, cap]: each decode token's kept positions, copied from its row.
    sel_idx: Buffer,
    /// Per sparse layer, [tokens, n_kv]: how many; read back for the figures.
    sel_count: Vec<Buffer>,
    k_scratch: Buffer,
    v_scratch: Buffer,
    /// `KvGather`'s fetch counters, which H2O does not read.
    fetches: Buffer,
    /// [chunk, n_head] (max, sum) of a dense step's queries.
    softmax_stats: Buffer,
    /// Per row: the entries its state describes.
    synced: Vec<usize>,
    /// Per row: the first entry of a dense step whose eviction waits (`hold_eviction`).
    pending: Vec<Option<usize>>,
    /// Dense steps leave their entries pending rather than evict: the chunks of one prompt
    /// evict once, after the last, as the CPU reference evicts after a forward call.
    holding: bool,
    stats: IgStats,
    /// The step being recorded.
    step: H2oStepPlan,
}

/// How a step attends, decided when it is planned.
#[derive(Default)]
struct H2oStepPlan {
    /// Tokens of a decode step, one per run, and their budgets as the kernels read them.
    sparse: Vec<IgToken>,
    steps: Vec<IgStep>,
    /// A dense step's runs, whose attention adds to their rows' masses: (first token,
    /// tokens).
    dense_runs: Vec<(usize, usize)>,
}

impl VkH2o {
    /// H2O over the cache `kv`, whose steps take at most `chunk` tokens. What the cache
    /// already holds joins with no mass (as `kv::h2o::H2o::new` does).
    pub(in crate::executor) fn start(
        device: &Arc<Device>,
        config: &ModelConfig,
        kv: &KvCache,
        chunk: usize,
        params: IgParams,
    ) -> Result<Self> {
        let shape = kv.shape();
        let mut h2o = Self::new(device, config, shape, chunk, params)?;
        for row in 0..shape.rows {
            h2o.sync(row, kv.len(row))?;
        }
        Ok(h2o)
    }

    fn new(
        device: &Arc<Device>,
        c: &ModelConfig,
        kv: KvShape,
        chunk: usize,
        params: IgParams,
    ) -> Result<Self> {
        let (n_ctx, rows, kv_type) = (kv.n_ctx, kv.rows, kv.kv_type);
        let (n_layer, n_head, n_head_kv, head_dim) = (c.n_layer, c.n_head, c.n_head_kv, c.head_dim);
        let shape = IgShape {
            n_head: n_head as u32,
            n_head_kv: n_head_kv as u32,
            head_dim: head_dim as u32,
            // InfiniGen's partial columns, unused here.
            partial: 4,
            n_ctx: n_ctx as u32,
            // A decode step's entry takes a slot before the lightest leaves.
            cap: (params.budget_tokens(n_ctx) + 1) as u32,
            // H2O runs plain scores only (`KvPolicyChoice::check_model`).
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
        };
        let local =
            |name: &str, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes));
        let lists = (rows * n_head_kv) as u64;
        let layers = (params.dense_layers.min(n_layer)..n_layer)
            .map(|l| -> hearth_kernels::vk::Result<LayerState> {
                let state = LayerState {
                    kept: local(&format!("blk.{l}.h2o kept"), lists * shape.cap as u64 * 4)?,
                    kept_count: local(&format!("blk.{l}.h2o kept count"), lists * 4)?,
                    mass: local(&format!("blk.{l}.h2o mass"), lists * n_ctx as u64 * 4)?,
                };
                state.kept_count.upload(0, &vec![0u32; lists as usize])?;
                state.mass.upload(0, &vec![0f32; lists as usize * n_ctx])?;
                Ok(state)
            })
            .collect::<hearth_kernels::vk::Result<Vec<_>>>()?;
        let tokens = rows as u32;
        let sel_count = (0..layers.len())
            .map(|i| {
                let name = format!("blk.{}.h2o selected", params.dense_layers + i);
                Buffer::new(
                    device,
                    BufferDesc::readback(&name, shape.sel_count_bytes(tokens)),
                )
            })
            .collect::<hearth_kernels::vk::Result<Vec<_>>>()?;
        let group = (n_head / n_head_kv.max(1)) as u32;
        let (hd, step_bytes) = (
            head_dim as u32,
            (rows * std::mem::size_of::<IgStep>()) as u64,
        );
        Ok(Self {
            params,
            gather: KvGather::new(device, kv_type)?,
            attn: AttnSparse::new(device, hd, group, kv_type)?,
            update: H2oUpdate::new(device, hd, group)?,
            lse: H2oLse::new(device, hd, group, kv_type)?,
            mass: H2oMass::new(device, hd, group, kv_type)?,
            layers,
            steps: Buffer::new(
                device,
                BufferDesc::host_visible("H2O step tokens", step_bytes),
            )?,
            sel_idx: local("H2O kept positions", shape.sel_idx_bytes(tokens))?,
            sel_count,
            k_scratch: local("H2O kept K", shape.scratch_bytes(tokens))?,
            v_scratch: local("H2O kept V", shape.scratch_bytes(tokens))?,
            fetches: local("H2O fetch counters", shape.seq_pos_bytes(tokens))?,
            softmax_stats: local("H2O softmax stats", (chunk * n_head * 8) as u64)?,
            synced: vec![0; rows],
            pending: vec![None; rows],
            holding: false,
            stats: IgStats::default(),
            step: H2oStepPlan::default(),
            shape,
        })
    }

    /// Whether layer `l` keeps H2O's state (and a decode step attends sparsely there).
    pub(in crate::executor) fn applies(&self, l: usize) -> bool {
        l >= self.params.dense_layers
    }

    fn state(&self, l: usize) -> H2oState<'_> {
        let s = &self.layers[l - self.params.dense_layers];
        H2oState {
            kept: &s.kept,
            kept_count: &s.kept_count,
            mass: &s.mass,
        }
    }

    /// Writes the tokens of the decode step being recorded (token t is `tokens[t]`), each
    /// with the budget for its row once it is cached, and returns them for
    /// [`batch`](Self::batch).
    fn set_step(&self, tokens: &[IgToken]) -> Result<Vec<IgStep>> {
        Ok(IgBatch::write(&self.steps, tokens, |at| {
            self.params.budget_tokens(at.index as usize + 1) as u32
        })?)
    }

    /// The planned step's tokens as the kernels take them.
    fn batch(&self) -> IgBatch<'_> {
        IgBatch {
            buffer: &self.steps,
            steps: &self.step.steps,
        }
    }

    /// Layer `at.l` of a decode step: each token attends over its row's kept positions and
    /// itself (into `att`), then the masses, kept positions and eviction follow. `qkv` holds
    /// the step's queries and keys after RoPE, token t in row t.
    fn record_decode<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        let (l, kv, batch) = (at.l, at.kv_layer(), self.batch());
        let (qkv, qkv_stride, out) = (&at.scratch.qkv, at.qkv_stride(), &at.scratch.att);
        let s = self.shape;
        let state = self.state(l);
        let sel_count = &self.sel_count[l - self.params.dense_layers];
        let (list_bytes, count_bytes) = (s.sel_idx_bytes(1), s.sel_count_bytes(1));
        let rows = |bytes: u64| -> Vec<(u64, u64)> {
            batch
                .steps
                .iter()
                .enumerate()
                .map(|(t, st)| (st.row as u64 * bytes, t as u64 * bytes))
                .collect()
        };
        rec.copy_regions(
            "h2o_kept",
            state.kept,
            &self.sel_idx,
            &rows(list_bytes),
            list_bytes,
        )?;
        rec.copy_regions(
            "h2o_kept",
            state.kept_count,
            sel_count,
            &rows(count_bytes),
            count_bytes,
        )?;
        let fetch = GatherArgs {
            kv,
            sel_idx: &self.sel_idx,
            sel_count,
            fetches: &self.fetches,
            k_scratch: &self.k_scratch,
            v_scratch: &self.v_scratch,
        };
        self.gather.record(rec, fetch, s, batch)?;
        let q = QueryAt {
            buffer: qkv,
            token: 0,
            stride: qkv_stride,
        };
        let attend = SparseArgs {
            q,
            kv,
            k_scratch: &self.k_scratch,
            v_scratch: &self.v_scratch,
            sel_count,
            o: out,
        };
        self.attn.record(rec, attend, s, batch)?;
        Ok(self
            .update
            .record(rec, q, &self.k_scratch, state, s, batch)?)
    }

    /// Layer `at.l` of a step that attended densely: adds the attention of each of its runs
    /// of tokens (of one row each, in `qkv` rows t0..) to the masses.
    fn record_masses<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        let (s, l, kv) = (self.shape, at.l, at.kv_layer());
        for &(t0, tokens) in &self.step.dense_runs {
            let run = DenseRun {
                q: QueryAt {
                    buffer: &at.scratch.qkv,
                    token: t0 as u32,
                    stride: at.qkv_stride(),
                },
                steps: &at.scratch.steps,
                run: &at.plan.steps[t0..t0 + tokens],
            };
            self.lse.record(rec, kv, run, &self.softmax_stats, s)?;
            self.mass
                .record(rec, kv, run, &self.softmax_stats, self.state(l), s)?;
        }
        Ok(())
    }

    /// Counts what a decode step attended to, per token, sparse layer and KV head, and notes
    /// that each token's row grew by it.
    fn end_decode(&mut self, tokens: &[IgToken]) -> Result<()> {
        let n_kv = self.shape.n_head_kv as usize;
        let layers: Vec<&Buffer> = self.sel_count.iter().collect();
        count_selections(&mut self.stats, &layers, tokens, n_kv)?;
        for at in tokens {
            self.synced[at.row as usize] = at.index as usize + 1;
        }
        Ok(())
    }
}

impl KvPolicy for VkH2o {
    fn stats(&self) -> Option<KvPolicyStats> {
        Some(KvPolicyStats {
            policy: KvPolicyKind::H2o,
            tokens: self.stats,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.fork_row(src, dst, len);
    }

    fn begin_chunk(&mut self, _kv: &mut KvCache, _tokens: usize, more: bool) -> Result<()> {
        // A prompt's chunks are one step to H2O: it evicts after the last.
        self.holding = more;
        Ok(())
    }

    fn end_chunk(&mut self, ran: bool) -> Result<()> {
        self.holding = false;
        match ran {
            true => Ok(()),
            // The chunks that ran evict as a step of their own.
            false => self.settle(0),
        }
    }

    fn admit(&mut self, kv: &KvCache, seqs: &[SeqStep]) -> Result<()> {
        if seqs.iter().any(|s| s.beam.is_some()) {
            return Err(Error::options(
                "kv-offload",
                "h2o does not run with beam search",
            ));
        }
        for s in seqs {
            self.sync(s.row, kv.len(s.row))?;
        }
        Ok(())
    }

    fn plan(&mut self, step: &StepView) -> Result<()> {
        let sparse = step.sparse_decodes();
        // A decode step attends over kept positions: a prompt's held entries join them first.
        for d in &sparse {
            self.settle(d.row as usize)?;
        }
        let mut plan = H2oStepPlan::default();
        if sparse.is_empty() {
            plan.dense_runs = step.runs.iter().map(|r| (r.t0, r.tokens)).collect();
        } else {
            plan.steps = self.set_step(&sparse)?;
        }
        plan.sparse = sparse;
        self.step = plan;
        Ok(())
    }

    fn fuses_append(&self, l: usize) -> bool {
        // The masses read the rotated queries, which only the separate append leaves in qkv.
        !self.applies(l)
    }

    fn attention<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        match (self.applies(at.l), self.step.sparse.is_empty()) {
            (true, false) => self.record_decode(rec, at),
            (true, true) => {
                record_dense_attention(rec, at)?;
                self.record_masses(rec, at)
            }
            (false, _) => record_dense_attention(rec, at),
        }
    }

    fn end_step(&mut self, step: &StepView) -> Result<()> {
        let plan = std::mem::take(&mut self.step);
        if plan.sparse.is_empty() {
            for r in step.runs {
                let row = step.seqs[r.seq].row;
                self.end_dense(row, r.len, r.len + r.tokens)?;
            }
            Ok(())
        } else {
            self.end_decode(&plan.sparse)
        }
    }
}
