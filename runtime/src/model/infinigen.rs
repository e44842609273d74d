//! InfiniGen in the Vulkan executor: the buffers and kernels of `--kv-offload infinigen`, and
//! what each layer of a step records (see `kv::infinigen` for the method).
//!
//! A single-sequence decode step runs, in layer l >= dense_layers: speculation of l's scores
//! from the query that layer l-1's input produced through l's W_Q (recorded at the start of
//! layer l-1), selection, and the gather of the selected K/V from the pool into a device
//! scratch; then l's attention over the scratch and the new token. Every step appends its
//! keys' partial columns to the partial key cache. Steps with several sequences, and prefill,
//! attend densely.

use std::sync::Arc;

use crate::error::Result;
use crate::kernels::infinigen::{
    AttnSparse, IgPartialKeys, IgSelect, IgShape, IgSpeculate, KvGather, QueryAt,
};
use crate::kernels::RopeSpec;
use crate::kv::infinigen::{IgParams, IgStats, Skew};
use crate::kv::KvLayer;
use crate::vk::{Buffer, BufferDesc, Device, Recorder};

pub(super) struct VkInfinigen {
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
    /// [n_head * head_dim]: the next layer's query before RoPE, from this layer's input.
    pub q_spec: Buffer,
    scores: Buffer,
    sel_idx: Buffer,
    k_scratch: Buffer,
    v_scratch: Buffer,
    /// Per layer: [n_kv] tokens selected, read back for the figures.
    sel_count: Vec<Buffer>,
    pub stats: IgStats,
}

impl VkInfinigen {
    pub fn new(
        device: &Arc<Device>,
        skew: &Skew,
        params: IgParams,
        n_head: usize,
        n_ctx: usize,
        rows: usize,
    ) -> Result<Self> {
        let r = skew.partial_dims(params.partial_ratio);
        let shape = IgShape {
            n_head: n_head as u32,
            n_head_kv: skew.n_head_kv as u32,
            head_dim: skew.head_dim as u32,
            partial: r as u32,
            n_ctx: n_ctx as u32,
            cap: (params.budget_tokens(n_ctx) + params.recent).clamp(1, n_ctx) as u32,
        };
        let local =
            |name: &str, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes));
        let skew_buffers = (0..skew.n_layer)
            .map(|l| Buffer::from_slice(device, &format!("blk.{l}.skew"), &skew.partial(l, r)))
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let pkeys = (0..skew.n_layer)
            .map(|l| {
                local(
                    &format!("blk.{l}.partial keys"),
                    shape.pkeys_bytes(rows as u32),
                )
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let sel_count = (0..skew.n_layer)
            .map(|l| {
                Buffer::new(
                    device,
                    BufferDesc::readback(&format!("blk.{l}.selected"), shape.sel_count_bytes()),
                )
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let head_dim = skew.head_dim as u32;
        Ok(Self {
            params,
            partial_keys: IgPartialKeys::new(device)?,
            speculate: IgSpeculate::new(device, head_dim)?,
            select: IgSelect::new(device)?,
            gather: KvGather::new(device)?,
            attn: AttnSparse::new(device, head_dim)?,
            skew: skew_buffers,
            pkeys,
            q_spec: local("speculated query", (n_head * skew.head_dim * 4) as u64)?,
            scores: local("speculated scores", shape.scores_bytes())?,
            sel_idx: local("selected positions", shape.sel_idx_bytes())?,
            k_scratch: local("selected K", shape.scratch_bytes())?,
            v_scratch: local("selected V", shape.scratch_bytes())?,
            sel_count,
            stats: IgStats::default(),
            shape,
        })
    }

    /// Whether layer `l` attends sparsely in a decode step.
    pub fn sparse_layer(&self, l: usize) -> bool {
        l >= self.params.dense_layers
    }

    /// Speculates layer `l`'s scores for the token at `pos` of `row` from `q_spec`, selects
    /// and gathers the tokens it will attend to.
    #[allow(clippy::too_many_arguments)]
    pub fn record_fetch<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        table: &'a Buffer,
        rope: RopeSpec,
        row: u32,
        pos: u32,
    ) -> Result<()> {
        let s = self.shape;
        let budget = self.params.budget_tokens(pos as usize) as u32;
        let q = QueryAt::vector(&self.q_spec, s);
        self.speculate.record(
            rec,
            q,
            table,
            rope,
            &self.skew[l],
            &self.pkeys[l],
            &self.scores,
            s,
            row,
            pos,
        )?;
        let alpha = self.params.alpha.min(f32::MAX);
        self.select.record(
            rec,
            &self.scores,
            &self.sel_idx,
            &self.sel_count[l],
            s,
            pos,
            alpha,
            budget.min(s.cap),
            (self.params.recent as u32).min(s.cap - budget.min(s.cap)),
        )?;
        self.gather.record(
            rec,
            kv,
            &self.sel_idx,
            &self.sel_count[l],
            &self.k_scratch,
            &self.v_scratch,
            s,
            row,
        )?;
        Ok(())
    }

    /// Layer `l`'s attention for the token at `pos` of `row` over what `record_fetch`
    /// gathered and the token itself; `qkv` holds the token's query after RoPE at `token`.
    #[allow(clippy::too_many_arguments)]
    pub fn record_attention<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        qkv: &'a Buffer,
        qkv_stride: u32,
        kv: KvLayer<'a>,
        out: &'a Buffer,
        row: u32,
        pos: u32,
    ) -> Result<()> {
        let q = QueryAt {
            buffer: qkv,
            token: 0,
            stride: qkv_stride,
        };
        Ok(self.attn.record(
            rec,
            q,
            kv,
            &self.k_scratch,
            &self.v_scratch,
            &self.sel_count[l],
            out,
            self.shape,
            row,
            pos,
        )?)
    }

    /// Appends the partial keys of `row`'s positions `positions` in layer `l` (their K must
    /// be in the pool).
    pub fn record_partial_keys<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        row: u32,
        positions: std::ops::Range<u32>,
    ) -> Result<()> {
        Ok(self.partial_keys.record(
            rec,
            kv,
            &self.skew[l],
            &self.pkeys[l],
            self.shape,
            row,
            positions,
        )?)
    }

    /// Counts a decode step at `pos` that read every token (`IgParams::fetches_all`).
    pub fn count_dense_step(&mut self, n_layer: usize, pos: usize) {
        let heads = (n_layer - self.params.dense_layers) * self.shape.n_head_kv as usize;
        for _ in 0..heads {
            self.stats.record(pos, pos);
        }
    }

    /// Counts what a sparse step at `pos` fetched, per sparse layer and KV head.
    pub fn count_step(&mut self, n_layer: usize, pos: usize) -> Result<()> {
        for l in self.params.dense_layers..n_layer {
            let counts: Vec<u32> = self.sel_count[l].download(self.shape.n_head_kv as usize)?;
            for c in counts {
                self.stats.record(c as usize, pos);
            }
        }
        Ok(())
    }
}
