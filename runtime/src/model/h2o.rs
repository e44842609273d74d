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

use std::sync::Arc;

use super::infinigen::count_selections;
use crate::error::Result;
use crate::kernels::h2o::{DenseRun, H2oLse, H2oMass, H2oState, H2oUpdate};
use crate::kernels::infinigen::{AttnSparse, IgBatch, IgShape, IgStep, IgToken, KvGather, QueryAt};
use crate::kernels::StepToken;
use crate::kv::h2o::Head;
use crate::kv::infinigen::{IgParams, IgStats};
use crate::kv::KvLayer;
use crate::vk::{Buffer, BufferDesc, Device, Recorder};

/// One layer's state: see include/h2o.glsl.
struct LayerState {
    kept: Buffer,
    kept_count: Buffer,
    mass: Buffer,
}

pub(super) struct VkH2o {
    pub params: IgParams,
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
    /// Dense steps leave their entries pending rather than evict.
    holding: bool,
    pub stats: IgStats,
}

impl VkH2o {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: &Arc<Device>,
        params: IgParams,
        n_layer: usize,
        n_head: usize,
        n_head_kv: usize,
        head_dim: usize,
        n_ctx: usize,
        rows: usize,
        chunk: usize,
    ) -> Result<Self> {
        let shape = IgShape {
            n_head: n_head as u32,
            n_head_kv: n_head_kv as u32,
            head_dim: head_dim as u32,
            // InfiniGen's partial columns, unused here.
            partial: 4,
            n_ctx: n_ctx as u32,
            // A decode step's entry takes a slot before the lightest leaves.
            cap: (params.budget_tokens(n_ctx) + 1) as u32,
        };
        let local =
            |name: &str, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes));
        let lists = (rows * n_head_kv) as u64;
        let layers = (params.dense_layers.min(n_layer)..n_layer)
            .map(|l| -> crate::vk::Result<LayerState> {
                let state = LayerState {
                    kept: local(&format!("blk.{l}.h2o kept"), lists * shape.cap as u64 * 4)?,
                    kept_count: local(&format!("blk.{l}.h2o kept count"), lists * 4)?,
                    mass: local(&format!("blk.{l}.h2o mass"), lists * n_ctx as u64 * 4)?,
                };
                state.kept_count.upload(0, &vec![0u32; lists as usize])?;
                state.mass.upload(0, &vec![0f32; lists as usize * n_ctx])?;
                Ok(state)
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let tokens = rows as u32;
        let sel_count = (0..layers.len())
            .map(|i| {
                let name = format!("blk.{}.h2o selected", params.dense_layers + i);
                Buffer::new(
                    device,
                    BufferDesc::readback(&name, shape.sel_count_bytes(tokens)),
                )
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let group = (n_head / n_head_kv.max(1)) as u32;
        let (hd, step_bytes) = (
            head_dim as u32,
            (rows * std::mem::size_of::<IgStep>()) as u64,
        );
        Ok(Self {
            params,
            gather: KvGather::new(device)?,
            attn: AttnSparse::new(device, hd, group)?,
            update: H2oUpdate::new(device, hd, group)?,
            lse: H2oLse::new(device, hd, group)?,
            mass: H2oMass::new(device, hd, group)?,
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
            shape,
        })
    }

    /// Whether layer `l` keeps H2O's state (and a decode step attends sparsely there).
    pub fn applies(&self, l: usize) -> bool {
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

    /// Row `row`'s state: per sparse layer and KV head, layer-major.
    fn read_row(&self, row: usize) -> Result<Vec<Head>> {
        let (n_kv, cap, n_ctx) = (
            self.shape.n_head_kv as usize,
            self.shape.cap as usize,
            self.shape.n_ctx as usize,
        );
        let mut heads = Vec::with_capacity(self.layers.len() * n_kv);
        for s in &self.layers {
            let mut counts = vec![0u32; n_kv];
            s.kept_count
                .download_into((row * n_kv * 4) as u64, &mut counts)?;
            let mut kept = vec![0u32; n_kv * cap];
            s.kept
                .download_into((row * n_kv * cap * 4) as u64, &mut kept)?;
            let mut mass = vec![0f32; n_kv * n_ctx];
            s.mass
                .download_into((row * n_kv * n_ctx * 4) as u64, &mut mass)?;
            for g in 0..n_kv {
                let mut k = kept[g * cap..g * cap + (counts[g] as usize).min(cap)].to_vec();
                k.sort_unstable();
                heads.push(Head {
                    kept: k,
                    mass: mass[g * n_ctx..(g + 1) * n_ctx].to_vec(),
                });
            }
        }
        Ok(heads)
    }

    /// The positions KV head `g` of layer `l` keeps in row `row`, ascending, and their mass.
    pub fn head(&self, row: usize, l: usize, g: usize) -> Result<Head> {
        let n_kv = self.shape.n_head_kv as usize;
        let mut heads = self.read_row(row)?;
        Ok(heads.swap_remove((l - self.params.dense_layers) * n_kv + g))
    }

    /// Stores `heads` (as [`read_row`](Self::read_row) returns them) as row `row`'s state.
    fn write_row(&self, row: usize, heads: &[Head]) -> Result<()> {
        let (n_kv, cap, n_ctx) = (
            self.shape.n_head_kv as usize,
            self.shape.cap as usize,
            self.shape.n_ctx as usize,
        );
        for (s, heads) in self.layers.iter().zip(heads.chunks(n_kv)) {
            let counts: Vec<u32> = heads.iter().map(|h| h.kept.len() as u32).collect();
            let mut kept = vec![0u32; n_kv * cap];
            let mut mass = Vec::with_capacity(n_kv * n_ctx);
            for (g, h) in heads.iter().enumerate() {
                kept[g * cap..g * cap + h.kept.len()].copy_from_slice(&h.kept);
                mass.extend_from_slice(&h.mass);
            }
            s.kept_count.upload((row * n_kv * 4) as u64, &counts)?;
            s.kept.upload((row * n_kv * cap * 4) as u64, &kept)?;
            s.mass.upload((row * n_kv * n_ctx * 4) as u64, &mass)?;
        }
        Ok(())
    }

    /// Reads row `src`'s state, edits every head with `edit`, and stores it as row `dst`'s.
    fn rewrite(&self, src: usize, dst: usize, edit: impl Fn(&mut Head)) -> Result<()> {
        let mut heads = self.read_row(src)?;
        heads.iter_mut().for_each(edit);
        self.write_row(dst, &heads)
    }

    /// Brings row `row`'s state in line with its `len` cached entries: positions past them
    /// are forgotten, and entries it has not taken in yet (pending, or appended outside a
    /// step) join with the mass they have, after which the row evicts.
    pub fn sync(&mut self, row: usize, len: usize) -> Result<()> {
        let was = self.synced[row];
        if was == len {
            return Ok(());
        }
        let from = self.pending[row].take().unwrap_or(was).min(len);
        let budget = self.params.budget_tokens(len);
        self.rewrite(row, row, |h| {
            h.truncate(len);
            if from < len {
                h.end_step(from..len, budget);
            }
        })?;
        self.synced[row] = len;
        Ok(())
    }

    /// Takes in row `row`'s pending entries: they join the kept positions and the row evicts.
    pub fn settle(&mut self, row: usize) -> Result<()> {
        let Some(from) = self.pending[row].take() else {
            return Ok(());
        };
        let len = self.synced[row];
        let budget = self.params.budget_tokens(len);
        self.rewrite(row, row, |h| h.end_step(from..len, budget))
    }

    /// While `hold` is true, a dense step leaves its entries pending: the chunks of one
    /// prompt evict once, after the last, as the CPU reference evicts after a forward call.
    pub fn hold_eviction(&mut self, hold: bool) {
        self.holding = hold;
    }

    /// Ends a dense step that appended entries `old..new` to row `row`, whose attention the
    /// step added to the masses: they (and any pending before them) join the kept positions
    /// and the row evicts, unless eviction is held.
    pub fn end_dense(&mut self, row: usize, old: usize, new: usize) -> Result<()> {
        self.pending[row].get_or_insert(old);
        self.synced[row] = new;
        match self.holding {
            true => Ok(()),
            false => self.settle(row),
        }
    }

    /// Row `dst` now shares `src`'s first `len` entries: it takes `src`'s state for them.
    /// Should that fail, `dst` keeps what it had up to `len`, trimmed at its next step.
    pub fn fork(&mut self, src: usize, dst: usize, len: usize) {
        let copied = self.rewrite(src, dst, |h| h.truncate(len));
        self.pending[dst] = None;
        self.synced[dst] = match copied {
            Ok(()) => len,
            Err(_) => usize::MAX,
        };
    }

    /// Writes the tokens of the decode step being recorded (token t is `tokens[t]`), each
    /// with the budget for its row once it is cached, and returns them for
    /// [`batch`](Self::batch).
    pub fn set_step(&self, tokens: &[IgToken]) -> Result<Vec<IgStep>> {
        Ok(IgBatch::write(&self.steps, tokens, |at| {
            self.params.budget_tokens(at.index as usize + 1) as u32
        })?)
    }

    pub fn batch<'a>(&'a self, steps: &'a [IgStep]) -> IgBatch<'a> {
        IgBatch {
            buffer: &self.steps,
            steps,
        }
    }

    /// Layer `l` of a decode step: each token attends over its row's kept positions and
    /// itself (into `out`), then the masses, kept positions and eviction follow. `qkv` holds
    /// the step's queries and keys after RoPE, token t in row t.
    #[allow(clippy::too_many_arguments)]
    pub fn record_decode<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        qkv: &'a Buffer,
        qkv_stride: u32,
        kv: KvLayer<'a>,
        out: &'a Buffer,
        batch: IgBatch<'a>,
    ) -> Result<()> {
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
        self.gather.record(
            rec,
            kv,
            &self.sel_idx,
            sel_count,
            &self.fetches,
            &self.k_scratch,
            &self.v_scratch,
            s,
            batch,
        )?;
        let q = QueryAt {
            buffer: qkv,
            token: 0,
            stride: qkv_stride,
        };
        self.attn.record(
            rec,
            q,
            kv,
            &self.k_scratch,
            &self.v_scratch,
            sel_count,
            out,
            s,
            batch,
        )?;
        Ok(self
            .update
            .record(rec, q, &self.k_scratch, state, s, batch)?)
    }

    /// Layer `l` of a step that attended densely: adds the attention of each run of tokens
    /// (`steps[t0 .. t0 + len]` of one row, in `qkv` rows t0..) to the masses.
    pub fn record_dense<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        qkv: &'a Buffer,
        qkv_stride: u32,
        kv: KvLayer<'a>,
        steps_buffer: &'a Buffer,
        runs: &[(usize, &'a [StepToken])],
    ) -> Result<()> {
        let s = self.shape;
        for &(t0, run) in runs {
            let run = DenseRun {
                q: QueryAt {
                    buffer: qkv,
                    token: t0 as u32,
                    stride: qkv_stride,
                },
                steps: steps_buffer,
                run,
            };
            self.lse.record(rec, kv, run, &self.softmax_stats, s)?;
            self.mass
                .record(rec, kv, run, &self.softmax_stats, self.state(l), s)?;
        }
        Ok(())
    }

    /// Counts what a decode step attended to, per token, sparse layer and KV head, and notes
    /// that each token's row grew by it.
    pub fn end_decode(&mut self, tokens: &[IgToken]) -> Result<()> {
        let n_kv = self.shape.n_head_kv as usize;
        count_selections(&mut self.stats, &self.sel_count, tokens, n_kv)?;
        for at in tokens {
            self.synced[at.row as usize] = at.index as usize + 1;
        }
        Ok(())
    }
}
