//! InfiniGen in the Vulkan executor: the buffers and kernels of `--kv-offload infinigen`, and
//! what each layer of a step records (see `kv::infinigen` for the method).
//!
//! A decode step (one new token for each of its sequences) runs, in layer l >= dense_layers:
//! speculation of l's scores from the query that layer l-1's input produced through l's W_Q,
//! selection, and the gather of the selected K/V from the pool into the device scratch, each
//! recorded beside one of layer l-1's kernels (`Fetch`); then l's attention over the scratch
//! and the new token. Each is one dispatch for all the step's sequences (`IgBatch`: token t
//! has the t-th slice of every per-token buffer). Every step appends its keys' partial
//! columns to the partial key cache, and a forked row gets a copy of its source's. Prefill,
//! and decode steps whose histories the floor and the recent window cover, attend densely.
//!
//! With a pool capacity, row 0 evicts its least fetched tokens (`pool`).

mod fetch;
mod pool;

use std::any::Any;
use std::sync::Arc;

use super::{record_dense_attention, Beside, KvPolicy, RecordingLayer, StepView};
use hearth_kernels::infinigen::{
    AttnSparse, IgBatch, IgPartialKeys, IgSelect, IgShape, IgSpeculate, IgStep, IgToken, KvGather,
    PartialKeysArgs, QueryAt, SparseArgs,
};
use hearth_kernels::kv::infinigen::evict::{SlotMap, SINKS};
use hearth_kernels::kv::infinigen::{IgParams, IgStats, Skew};
use hearth_kernels::kv::policy::{KvPolicyKind, KvPolicyStats};
use hearth_kernels::kv::{KvCache, KvLayer, KvShape};
use hearth_kernels::vk::{Buffer, BufferDesc, Device, Recorder};
use hearth_kernels::StepToken;
use hearth_model::ModelConfig;
use hearth_model::Result;

pub use self::fetch::FETCH_KERNELS;

pub(in crate::executor) struct VkInfinigen {
    device: Arc<Device>,
    pub params: IgParams,
    pub shape: IgShape,
    partial_keys: IgPartialKeys,
    speculate: IgSpeculate,
    select: IgSelect,
    gather: KvGather,
    attn: AttnSparse,
    /// Per layer: [n_kv, head_dim, r].
    skew: Vec<Buffer>,
    /// Per layer: [rows, n_ctx, n_kv, r].
    pkeys: Vec<Buffer>,
    /// [rows, n_head * head_dim]: each decode token's query for the next layer, before RoPE,
    /// from this layer's input.
    pub q_spec: Buffer,
    /// [rows] `IgStep`: the tokens of the decode step being recorded.
    steps: Buffer,
    /// Speculated scores and selected entries of each token of a decode step ([tokens, ..]).
    scores: Buffer,
    sel_idx: Buffer,
    /// Per layer parity: the K and V each token gathered.
    scratch: [(Buffer, Buffer); 2],
    /// Per layer: [tokens, n_kv] tokens selected, read back for the figures.
    sel_count: Vec<Buffer>,
    /// Partial keys to copy when the next step starts: (source row, row, positions), for
    /// rows forked from others.
    forks: Vec<(u32, u32, u32)>,
    /// [rows, n_ctx]: the sequence position each row entry holds.
    seq_pos: Buffer,
    /// [rows, n_ctx]: how often each entry was fetched, summed over layers and KV heads.
    fetches: Buffer,
    /// Row 0's entries when its pool has a capacity.
    slots: Option<SlotMap>,
    stats: IgStats,
    /// The step being recorded.
    step: IgStepPlan,
    /// Per layer: local (windowed), so never sparse.
    local: Vec<bool>,
}

/// How a step attends, decided when it is planned.
#[derive(Default)]
struct IgStepPlan {
    /// Tokens that attend sparsely (one per run), and their budgets as the kernels read them
    /// (`steps`).
    sparse: Vec<IgToken>,
    steps: Vec<IgStep>,
    /// Tokens of a decode step that attends densely, because some history is short enough
    /// for the floor and the recent window to cover.
    fetches_all: Vec<IgToken>,
}

impl VkInfinigen {
    /// InfiniGen over the cache `kv`: the partial keys of what its rows already hold are
    /// computed before this returns.
    pub(in crate::executor) fn start(
        device: &Arc<Device>,
        config: &ModelConfig,
        kv: &KvCache,
        skew: &Skew,
        params: IgParams,
    ) -> Result<Self> {
        let shape = kv.shape();
        let mut ig = Self::new(device, skew, params, config, shape)?;
        ig.local = (0..config.n_layer)
            .map(|l| config.window(l).is_some())
            .collect();
        ig.adopt(kv.len(0));
        // Partial keys of what the cache already holds: every entry of every row.
        let held: Vec<StepToken> = (0..shape.rows)
            .flat_map(|row| (0..kv.len(row) as u32).map(move |pos| StepToken::new(row as u32, pos)))
            .collect();
        if !held.is_empty() {
            let held_b = Buffer::from_slice(device, "cached tokens", &held)?;
            let mut rec = Recorder::new(device)?;
            for l in (0..config.n_layer).filter(|&l| ig.sparse_layer(l)) {
                ig.record_partial_keys(&mut rec, l, kv.layer(l), &held_b, &held)?;
            }
            rec.submit()?;
        }
        Ok(ig)
    }

    fn new(
        device: &Arc<Device>,
        skew: &Skew,
        params: IgParams,
        config: &ModelConfig,
        kv: KvShape,
    ) -> Result<Self> {
        let n_head = config.n_head;
        let (n_ctx, rows, kv_type) = (kv.n_ctx, kv.rows, kv.kv_type);
        let r = skew.partial_dims(params.partial_ratio);
        // Zero columns up to a multiple of 4 (`IgShape::partial`).
        let width = r.next_multiple_of(4);
        let shape = IgShape {
            n_head: n_head as u32,
            n_head_kv: skew.n_head_kv as u32,
            head_dim: skew.head_dim as u32,
            partial: width as u32,
            n_ctx: n_ctx as u32,
            cap: (params.budget_tokens(n_ctx) + params.recent).clamp(1, n_ctx) as u32,
            scale: config.attn_scale,
            softcap: config.attn_softcap,
        };
        let local =
            |name: &str, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes));
        let skew_buffers = (0..skew.n_layer)
            .map(|l| {
                let columns = skew.partial_padded(l, r, width);
                Buffer::from_slice(device, &format!("blk.{l}.skew"), &columns)
            })
            .collect::<hearth_kernels::vk::Result<Vec<_>>>()?;
        let pkeys = (0..skew.n_layer)
            .map(|l| {
                local(
                    &format!("blk.{l}.partial keys"),
                    shape.pkeys_bytes(rows as u32),
                )
            })
            .collect::<hearth_kernels::vk::Result<Vec<_>>>()?;
        // A decode step has at most one token per row.
        let tokens = rows as u32;
        let sel_count = (0..skew.n_layer)
            .map(|l| {
                let name = format!("blk.{l}.selected");
                Buffer::new(
                    device,
                    BufferDesc::readback(&name, shape.sel_count_bytes(tokens)),
                )
            })
            .collect::<hearth_kernels::vk::Result<Vec<_>>>()?;
        let scratch_pair = |parity: usize| -> hearth_kernels::vk::Result<(Buffer, Buffer)> {
            let bytes = shape.scratch_bytes(tokens);
            Ok((
                local(&format!("selected K.{parity}"), bytes)?,
                local(&format!("selected V.{parity}"), bytes)?,
            ))
        };
        let head_dim = skew.head_dim as u32;
        let identity: Vec<u32> = (0..rows).flat_map(|_| 0..n_ctx as u32).collect();
        let seq_pos = Buffer::new(
            device,
            BufferDesc::host_visible("entry positions", shape.seq_pos_bytes(rows as u32)),
        )?;
        seq_pos.upload(0, &identity)?;
        let fetches = Buffer::new(
            device,
            BufferDesc::readback("fetch counters", shape.seq_pos_bytes(rows as u32)),
        )?;
        fetches.upload(0, &vec![0u32; rows * n_ctx])?;
        let step_bytes = (rows * std::mem::size_of::<IgStep>()) as u64;
        Ok(Self {
            params,
            partial_keys: IgPartialKeys::new(device, kv_type)?,
            speculate: IgSpeculate::new(device, shape)?,
            select: IgSelect::new(device)?,
            gather: KvGather::new(device, kv_type)?,
            attn: AttnSparse::new(device, head_dim, shape.n_head / shape.n_head_kv, kv_type)?,
            skew: skew_buffers,
            pkeys,
            q_spec: local(
                "speculated query",
                (rows * n_head * skew.head_dim * 4) as u64,
            )?,
            steps: Buffer::new(
                device,
                BufferDesc::host_visible("InfiniGen step tokens", step_bytes),
            )?,
            scores: local("speculated scores", shape.scores_bytes(tokens))?,
            sel_idx: local("selected positions", shape.sel_idx_bytes(tokens))?,
            scratch: [scratch_pair(0)?, scratch_pair(1)?],
            sel_count,
            forks: Vec::new(),
            seq_pos,
            fetches,
            device: device.clone(),
            slots: params
                .pool_capacity
                .map(|capacity| SlotMap::new(capacity, params.recent).keeping_first(SINKS)),
            stats: IgStats::default(),
            step: IgStepPlan::default(),
            local: Vec::new(),
            shape,
        })
    }

    /// Whether layer `l` attends sparsely in a decode step; layer 0 never does, having no
    /// previous layer to speculate from.
    /// Whether layer `l` may attend sparsely: past the dense layers, and not local (a local
    /// layer reads its window, densely).
    fn sparse_layer(&self, l: usize) -> bool {
        l >= self.first_sparse() && !self.local.get(l).copied().unwrap_or(false)
    }

    fn first_sparse(&self) -> usize {
        self.params.dense_layers.max(1)
    }

    /// Writes the tokens of the decode step being recorded (token t is `tokens[t]`) for the
    /// kernels, each with its budget, and returns them for [`batch`](Self::batch). The step
    /// must be recorded and run before the next one writes its own.
    fn set_step(&self, tokens: &[IgToken]) -> Result<Vec<IgStep>> {
        let cap = self.shape.cap;
        Ok(IgBatch::write(&self.steps, tokens, |at| {
            (self.params.budget_tokens(at.index as usize) as u32).min(cap)
        })?)
    }

    /// The planned step's sparse tokens as the kernels take them.
    fn batch(&self) -> IgBatch<'_> {
        IgBatch {
            buffer: &self.steps,
            steps: &self.step.steps,
        }
    }

    /// The scratch of layer `l`: consecutive layers use different ones, so layer l's fetch
    /// can run while layer l-1 attends over its own.
    fn scratch(&self, l: usize) -> &(Buffer, Buffer) {
        &self.scratch[l % 2]
    }

    /// Layer `at.l`'s attention for the step's tokens over what the fetch gathered and each
    /// token itself; `qkv` holds the step's queries after RoPE (token t in row t).
    fn record_sparse_attention<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
    ) -> Result<()> {
        let s = at.scratch;
        let (k_scratch, v_scratch) = self.scratch(at.l);
        let args = SparseArgs {
            q: QueryAt {
                buffer: &s.qkv,
                token: 0,
                stride: at.qkv_stride(),
            },
            kv: at.kv_layer(),
            k_scratch,
            v_scratch,
            sel_count: &self.sel_count[at.l],
            o: &s.att,
        };
        Ok(self.attn.record(rec, args, self.shape, self.batch())?)
    }

    /// Notes that `row` now shares `src`'s first `len` positions: their partial keys are
    /// copied when the next step starts.
    fn fork_row(&mut self, src: usize, row: usize, len: usize) {
        self.forks.retain(|f| f.1 != row as u32);
        if len > 0 && src != row {
            self.forks.push((src as u32, row as u32, len as u32));
        }
    }

    /// Records the partial key copies of the rows forked since the last step. They stay
    /// pending until the step ran: a step that fails before it runs leaves them for the next.
    fn record_forks<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<()> {
        let entry = self.shape.pkey_entry_bytes();
        let row_bytes = self.shape.pkeys_bytes(1);
        for &(src, row, len) in &self.forks {
            for pkeys in &self.pkeys[self.first_sparse().min(self.pkeys.len())..] {
                let (from, to) = (src as u64 * row_bytes, row as u64 * row_bytes);
                rec.copy_as(
                    "ig_fork_partial_keys",
                    pkeys,
                    from,
                    pkeys,
                    to,
                    len as u64 * entry,
                )?;
            }
        }
        Ok(())
    }

    /// Appends the partial keys of the tokens `tokens` (their K must be in the pool) in layer
    /// `l`; `steps` holds them ([tokens] `StepToken`).
    fn record_partial_keys<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        tokens: &[StepToken],
    ) -> Result<()> {
        let args = PartialKeysArgs {
            kv,
            skew: &self.skew[l],
            pkeys: &self.pkeys[l],
            steps,
        };
        Ok(self.partial_keys.record(rec, args, self.shape, tokens)?)
    }

    /// Counts a decode step at `pos` that read every token (`IgParams::fetches_all`).
    fn count_dense_step(&mut self, n_layer: usize, pos: usize) {
        let layers = (0..n_layer).filter(|&l| self.sparse_layer(l)).count();
        for _ in 0..layers * self.shape.n_head_kv as usize {
            self.stats.record(pos, pos);
        }
    }

    /// Counts what a sparse decode step fetched, per token, sparse layer and KV head.
    fn count_step(&mut self, n_layer: usize, tokens: &[IgToken]) -> Result<()> {
        let n_kv = self.shape.n_head_kv as usize;
        let layers: Vec<&Buffer> = (0..n_layer.min(self.sel_count.len()))
            .filter(|&l| self.sparse_layer(l))
            .map(|l| &self.sel_count[l])
            .collect();
        count_selections(&mut self.stats, &layers, tokens, n_kv)
    }
}

/// Counts, in `stats`, the tokens each of a decode step's `tokens` attended to in each layer
/// and KV head, as `sel_count` ([tokens, n_kv] per layer, read back) holds them.
pub(in crate::executor) fn count_selections(
    stats: &mut IgStats,
    sel_count: &[&Buffer],
    tokens: &[IgToken],
    n_kv: usize,
) -> Result<()> {
    for counts in sel_count {
        let counts: Vec<u32> = counts.download(tokens.len() * n_kv)?;
        for (at, counts) in tokens.iter().zip(counts.chunks(n_kv)) {
            for &c in counts {
                stats.record(c as usize, at.index as usize);
            }
        }
    }
    Ok(())
}

impl KvPolicy for VkInfinigen {
    fn stats(&self) -> Option<KvPolicyStats> {
        Some(KvPolicyStats {
            policy: KvPolicyKind::Infinigen,
            tokens: self.stats,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn evicted(&self, row: usize) -> usize {
        self.evicted_from(row)
    }

    fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.fork_row(src, dst, len);
    }

    fn truncate(&mut self, entries: usize, len: usize) -> usize {
        // Should resetting the counters or positions fail, the row starts over, its entries
        // forgotten as the map forgets them.
        self.truncate_row0(entries, len).unwrap_or_else(|_| {
            self.adopt(0);
            0
        })
    }

    fn begin_chunk(&mut self, kv: &mut KvCache, tokens: usize, _more: bool) -> Result<()> {
        self.make_room(kv, tokens)
    }

    fn plan(&mut self, step: &StepView) -> Result<()> {
        let decodes = step.sparse_decodes();
        let mut plan = IgStepPlan::default();
        if decodes
            .iter()
            .any(|d| self.params.fetches_all(d.index as usize))
        {
            plan.fetches_all = decodes;
        } else if !decodes.is_empty() {
            plan.steps = self.set_step(&decodes)?;
            plan.sparse = decodes;
        }
        self.step = plan;
        Ok(())
    }

    fn record_start<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<()> {
        self.record_forks(rec)
    }

    fn fuses_append(&self, l: usize) -> bool {
        self.step.sparse.is_empty() || !self.sparse_layer(l)
    }

    fn beside<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<Beside<'a>> {
        self.fetch_next(rec, at)
    }

    fn attention<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        if !self.step.sparse.is_empty() && self.sparse_layer(at.l) {
            self.record_sparse_attention(rec, at)?;
        } else {
            record_dense_attention(rec, at)?;
        }
        // Every step's keys join the partial key cache of the layers that may attend
        // sparsely.
        if self.sparse_layer(at.l) {
            let s = at.scratch;
            self.record_partial_keys(rec, at.l, at.kv_layer(), &s.steps, at.plan.steps)?;
        }
        Ok(())
    }

    fn end_step(&mut self, step: &StepView) -> Result<()> {
        // The step copied the pending forks' partial keys.
        self.forks.clear();
        let plan = std::mem::take(&mut self.step);
        if !plan.sparse.is_empty() {
            self.count_step(step.n_layer, &plan.sparse)?;
        }
        for d in &plan.fetches_all {
            self.count_dense_step(step.n_layer, d.index as usize);
        }
        Ok(())
    }
}
