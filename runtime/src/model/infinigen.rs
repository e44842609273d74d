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
//! With a pool capacity (`--kv-pool-capacity`), row 0 (the single sequence the engine's
//! session runs) evicts its least fetched tokens to make room (`kv::infinigen::evict`): their
//! entries are refilled from the end of the row by device copies of K, V and partial keys,
//! and `seq_pos` records which position each entry now holds.

use std::sync::Arc;

use crate::error::Result;
use crate::kernels::infinigen::{
    AttnSparse, IgBatch, IgPartialKeys, IgSelect, IgShape, IgSpeculate, IgStep, IgToken, KvGather,
    QueryAt,
};
use crate::kernels::{RopeSpec, StepToken};
use crate::kv::infinigen::evict::{SlotMap, SlotMove, SINKS};
use crate::kv::infinigen::{IgParams, IgStats, Skew};
use crate::kv::{KvCache, KvLayer};
use crate::vk::{Buffer, BufferDesc, Device, Recorder};

/// The kernels of a layer's fetch, which a GPU overlaps with the previous layer's compute
/// (the selection under either of its names: CPU devices run `ig_select_wide`).
pub const FETCH_KERNELS: [&str; 4] = [
    hearth_shaders::IG_SPECULATE.name,
    hearth_shaders::IG_SELECT.name,
    hearth_shaders::IG_SELECT_WIDE.name,
    hearth_shaders::KV_GATHER.name,
];

pub(super) struct VkInfinigen {
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
        // Zero columns up to a multiple of 4 (`IgShape::partial`).
        let width = r.next_multiple_of(4);
        let shape = IgShape {
            n_head: n_head as u32,
            n_head_kv: skew.n_head_kv as u32,
            head_dim: skew.head_dim as u32,
            partial: width as u32,
            n_ctx: n_ctx as u32,
            cap: (params.budget_tokens(n_ctx) + params.recent).clamp(1, n_ctx) as u32,
        };
        let local =
            |name: &str, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes));
        let skew_buffers = (0..skew.n_layer)
            .map(|l| {
                let columns = skew.partial_padded(l, r, width);
                Buffer::from_slice(device, &format!("blk.{l}.skew"), &columns)
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let pkeys = (0..skew.n_layer)
            .map(|l| {
                local(
                    &format!("blk.{l}.partial keys"),
                    shape.pkeys_bytes(rows as u32),
                )
            })
            .collect::<crate::vk::Result<Vec<_>>>()?;
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
            .collect::<crate::vk::Result<Vec<_>>>()?;
        let scratch_pair = |parity: usize| -> crate::vk::Result<(Buffer, Buffer)> {
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
            partial_keys: IgPartialKeys::new(device)?,
            speculate: IgSpeculate::new(device, shape)?,
            select: IgSelect::new(device)?,
            gather: KvGather::new(device)?,
            attn: AttnSparse::new(device, head_dim, shape.n_head / shape.n_head_kv)?,
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
            shape,
        })
    }

    /// Tokens `row` has evicted: how far its positions run ahead of its entries.
    pub fn evicted(&self, row: usize) -> usize {
        match (&self.slots, row) {
            (Some(map), 0) => map.evicted(),
            _ => 0,
        }
    }

    /// Notes that row 0 already holds `len` tokens (the cache when InfiniGen is turned on).
    pub fn adopt(&mut self, len: usize) {
        if let Some(map) = &mut self.slots {
            map.clear();
            map.append(len);
        }
    }

    /// Makes room in row 0 for `incoming` tokens and records their positions: when the pool
    /// would overflow, the least fetched tokens leave and the last entries fill their places
    /// (copied on the device before this returns), and the row shrinks in `kv`.
    pub fn make_room(&mut self, kv: &mut KvCache, incoming: usize) -> Result<()> {
        let first_sparse = self.first_sparse();
        let Some(map) = &mut self.slots else {
            return Ok(());
        };
        let slots = map.slots();
        // Row 0's counters come first.
        let mut fetches: Vec<u32> = self.fetches.download(slots)?;
        let moves = map.make_room(incoming, &mut fetches)?;
        if !moves.is_empty() {
            let mut rec = Recorder::new(&self.device)?;
            kv.record_entry_moves(&mut rec, 0, &moves)?;
            for pkeys in &self.pkeys[first_sparse.min(self.pkeys.len())..] {
                record_pkey_moves(&mut rec, self.shape, pkeys, &moves)?;
            }
            rec.submit()?;
        }
        let kept = map.slots();
        kv.truncate(0, kept);
        self.stats.evicted += (slots - kept) as u64;
        self.fetches.upload(0, &fetches)?;
        // The new tokens' positions, then every entry that moved.
        let next = map.next_position() as u32;
        let new: Vec<u32> = (next..next + incoming as u32).collect();
        self.seq_pos.upload(kept as u64 * 4, &new)?;
        for m in &moves {
            let at = m.to as usize;
            self.seq_pos
                .upload(at as u64 * 4, &map.positions()[at..at + 1])?;
        }
        map.append(incoming);
        Ok(())
    }

    /// Forgets row 0's tokens from position `len` on and returns the entries it keeps: all
    /// of them up to `len` when the tokens past `len` are the row's last entries (they
    /// arrived after its last eviction), otherwise none (the row starts over).
    pub fn truncate_row0(&mut self, entries: usize, len: usize) -> Result<usize> {
        let Some(map) = &mut self.slots else {
            return Ok(len.min(entries));
        };
        let kept = map.truncate(len);
        if kept < entries {
            self.fetches
                .upload(kept as u64 * 4, &vec![0u32; entries - kept])?;
        }
        if map.slots() == 0 {
            // Entries are positions again.
            let identity: Vec<u32> = (0..self.shape.n_ctx).collect();
            self.seq_pos.upload(0, &identity)?;
        }
        Ok(kept)
    }

    /// Whether layer `l` attends sparsely in a decode step; layer 0 never does, having no
    /// previous layer to speculate from.
    pub fn sparse_layer(&self, l: usize) -> bool {
        l >= self.first_sparse()
    }

    fn first_sparse(&self) -> usize {
        self.params.dense_layers.max(1)
    }

    /// Writes the tokens of the decode step being recorded (token t is `tokens[t]`) for the
    /// kernels, each with its budget, and returns them for [`batch`](Self::batch). The step
    /// must be recorded and run before the next one writes its own.
    pub fn set_step(&self, tokens: &[IgToken]) -> Result<Vec<IgStep>> {
        let cap = self.shape.cap;
        Ok(IgBatch::write(&self.steps, tokens, |at| {
            (self.params.budget_tokens(at.index as usize) as u32).min(cap)
        })?)
    }

    /// The step's tokens as the kernels take them: `steps` from [`set_step`](Self::set_step).
    pub fn batch<'a>(&'a self, steps: &'a [IgStep]) -> IgBatch<'a> {
        IgBatch {
            buffer: &self.steps,
            steps,
        }
    }

    /// Layer `l`'s fetch for the tokens of a decode step: its speculation, selection and
    /// gather, recorded one step at a time (`Fetch::step`).
    pub fn fetch<'a>(
        &'a self,
        l: usize,
        kv: KvLayer<'a>,
        table: &'a Buffer,
        rope: RopeSpec,
        batch: IgBatch<'a>,
    ) -> Fetch<'a> {
        Fetch {
            ig: self,
            l,
            kv,
            table,
            rope,
            batch,
            done: 0,
        }
    }

    /// Speculates layer `l`'s scores for the step's tokens from `q_spec`.
    fn record_speculate<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        table: &'a Buffer,
        rope: RopeSpec,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        Ok(self.speculate.record(
            rec,
            QueryAt::vectors(&self.q_spec, self.shape),
            table,
            rope,
            &self.skew[l],
            &self.pkeys[l],
            &self.scores,
            self.shape,
            batch,
        )?)
    }

    /// Selects layer `l`'s tokens for the step's tokens from their speculated scores.
    fn record_select<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        Ok(self.select.record(
            rec,
            &self.scores,
            &self.seq_pos,
            &self.sel_idx,
            &self.sel_count[l],
            self.shape,
            batch,
            self.params.alpha.min(f32::MAX),
            self.params.recent.min(u32::MAX as usize) as u32,
        )?)
    }

    /// Gathers the selected K/V of layer `l` (`kv`) into the scratch for l.
    fn record_gather<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let (k_scratch, v_scratch) = self.scratch(l);
        Ok(self.gather.record(
            rec,
            kv,
            &self.sel_idx,
            &self.sel_count[l],
            &self.fetches,
            k_scratch,
            v_scratch,
            self.shape,
            batch,
        )?)
    }

    /// The scratch of layer `l`: consecutive layers use different ones, so layer l's fetch
    /// can run while layer l-1 attends over its own.
    fn scratch(&self, l: usize) -> &(Buffer, Buffer) {
        &self.scratch[l % 2]
    }

    /// Layer `l`'s attention for the step's tokens over what `record_gather` gathered and
    /// each token itself; `qkv` holds the step's queries after RoPE (token t in row t).
    #[allow(clippy::too_many_arguments)]
    pub fn record_attention<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        qkv: &'a Buffer,
        qkv_stride: u32,
        kv: KvLayer<'a>,
        out: &'a Buffer,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let q = QueryAt {
            buffer: qkv,
            token: 0,
            stride: qkv_stride,
        };
        let (k_scratch, v_scratch) = self.scratch(l);
        Ok(self.attn.record(
            rec,
            q,
            kv,
            k_scratch,
            v_scratch,
            &self.sel_count[l],
            out,
            self.shape,
            batch,
        )?)
    }

    /// Notes that `row` now shares `src`'s first `len` positions: their partial keys are
    /// copied when the next step starts.
    pub fn fork(&mut self, src: usize, row: usize, len: usize) {
        self.forks.retain(|f| f.1 != row as u32);
        if len > 0 && src != row {
            self.forks.push((src as u32, row as u32, len as u32));
        }
    }

    /// Records the partial key copies of the rows forked since the last step. They stay
    /// pending until [`forks_done`](Self::forks_done): a step that fails before it runs
    /// leaves them for the next.
    pub fn record_forks<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<()> {
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

    /// The step that copied the pending forks' partial keys ran.
    pub fn forks_done(&mut self) {
        self.forks.clear();
    }

    /// Appends the partial keys of the tokens `tokens` (their K must be in the pool) in layer
    /// `l`; `steps` holds them ([tokens] `StepToken`).
    pub fn record_partial_keys<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        tokens: &[StepToken],
    ) -> Result<()> {
        Ok(self.partial_keys.record(
            rec,
            kv,
            &self.skew[l],
            &self.pkeys[l],
            self.shape,
            steps,
            tokens,
        )?)
    }

    /// Counts a decode step at `pos` that read every token (`IgParams::fetches_all`).
    pub fn count_dense_step(&mut self, n_layer: usize, pos: usize) {
        let heads = n_layer.saturating_sub(self.first_sparse()) * self.shape.n_head_kv as usize;
        for _ in 0..heads {
            self.stats.record(pos, pos);
        }
    }

    /// Counts what a sparse decode step fetched, per token, sparse layer and KV head.
    pub fn count_step(&mut self, n_layer: usize, tokens: &[IgToken]) -> Result<()> {
        let n_kv = self.shape.n_head_kv as usize;
        let first = self.first_sparse().min(n_layer);
        let layers = &self.sel_count[first..n_layer];
        count_selections(&mut self.stats, layers, tokens, n_kv)
    }
}

/// Counts, in `stats`, the tokens each of a decode step's `tokens` attended to in each layer
/// and KV head, as `sel_count` ([tokens, n_kv] per layer, read back) holds them.
pub(super) fn count_selections(
    stats: &mut IgStats,
    sel_count: &[Buffer],
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

/// One layer's fetch (speculation, then selection, then gather) for a decode step's tokens.
/// The forward pass records a step right after each of the previous layer's kernels that
/// waits for its predecessor: the step shares no buffer with that kernel, so the two form
/// one group of commands that a GPU runs together.
pub(super) struct Fetch<'a> {
    ig: &'a VkInfinigen,
    l: usize,
    kv: KvLayer<'a>,
    table: &'a Buffer,
    rope: RopeSpec,
    batch: IgBatch<'a>,
    /// Steps recorded.
    done: usize,
}

impl<'a> Fetch<'a> {
    /// Records the next step, for every token; nothing once all three are.
    pub fn step(&mut self, rec: &mut Recorder<'a>) -> Result<()> {
        let ig = self.ig;
        if self.done >= 3 {
            return Ok(());
        }
        let serial = ig.params.serial_fetch;
        if serial {
            rec.barrier();
        }
        match self.done {
            0 => ig.record_speculate(rec, self.l, self.table, self.rope, self.batch)?,
            1 => ig.record_select(rec, self.l, self.batch)?,
            _ => ig.record_gather(rec, self.l, self.kv, self.batch)?,
        }
        if serial {
            rec.barrier();
        }
        self.done += 1;
        Ok(())
    }

    /// Records the next step of `fetch`, when there is a fetch.
    pub fn step_of(fetch: &mut Option<Self>, rec: &mut Recorder<'a>) -> Result<()> {
        match fetch {
            Some(f) => f.step(rec),
            None => Ok(()),
        }
    }

    /// Records the steps left.
    pub fn finish(mut self, rec: &mut Recorder<'a>) -> Result<()> {
        while self.done < 3 {
            self.step(rec)?;
        }
        Ok(())
    }
}

/// Records eviction's moves in row 0 of a layer's partial key cache.
fn record_pkey_moves<'a>(
    rec: &mut Recorder<'a>,
    s: IgShape,
    pkeys: &'a Buffer,
    moves: &[SlotMove],
) -> Result<()> {
    let entry = s.pkey_entry_bytes();
    // Row 0's entries come first.
    let offsets: Vec<(u64, u64)> = moves
        .iter()
        .map(|m| (m.from as u64 * entry, m.to as u64 * entry))
        .collect();
    Ok(rec.copy_regions("kv_evict_move", pkeys, pkeys, &offsets, entry)?)
}
