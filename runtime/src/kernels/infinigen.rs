//! InfiniGen's KV selection on the device, for the new tokens of a decode step (one per
//! sequence row, all in each dispatch: [`IgBatch`]). [`IgPartialKeys`] keeps a layer's partial
//! key cache (keys projected on the first r columns of the layer's skew) up to date;
//! [`IgSpeculate`] rotates each token's query, projects it the same way and scores every past
//! position; [`IgSelect`] picks how many positions to fetch (the mean over heads of those
//! within alpha of the head's best, at most the token's budget) and, per KV head, which (the
//! closest to some head's best, in ascending order); [`KvGather`] copies their K/V from the
//! (host) pool into a device scratch; [`AttnSparse`] attends over that scratch plus the
//! token's own position.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{
    Kernel, ATTN_SPARSE, IG_PARTIAL_KEYS, IG_SELECT, IG_SELECT_WIDE, IG_SPECULATE, KV_GATHER,
};

use super::attention::{
    decode_shape, head_workgroups, heads_per_workgroup, rolled_keys, AttnShape, Split, StepToken,
};
use super::{
    check_sizes, has_wide_loads, head_workgroup_size, linear_groups, wide_by_address,
    workgroup_size, RopeSpec,
};
use crate::cpu::ops::RopeLayout;
use crate::kv::{KvLayer, BLOCK_TOKENS};
use crate::vk::{Buffer, Device, DeviceKind, Pipeline, Recorder, Result, VkError};

/// Most query heads `IgSelect` handles (`MAX_HEADS` in ig_select.comp: its shared array of
/// per-head maxima).
pub const IG_MAX_HEADS: u32 = 256;

/// Most positions whose selection keys `IgSelect` keeps in shared memory (`KEY_CACHE`).
const MAX_KEY_CACHE: u32 = 16384;

/// Sizes shared by one layer's InfiniGen kernels, and the buffers they imply, for a step of
/// `tokens` tokens:
/// - `skew` [n_head_kv, head_dim, partial] f32: the first `partial` columns of each KV head's
///   orthogonal skew;
/// - `pkeys` [rows, n_ctx, n_head_kv, partial] f32: the partial key cache;
/// - `scores` [tokens, n_head, n_ctx] f32: speculated scores of each token;
/// - `sel_idx` [tokens, n_head_kv, cap] u32 and `sel_count` [tokens, n_head_kv] u32: the
///   selections;
/// - `k_scratch`, `v_scratch` [tokens, n_head_kv, cap, head_dim] f32: the selected K/V;
/// - `seq_pos` [rows, n_ctx] u32: the sequence position each row entry holds (the entry's
///   index until the pool evicts), and `fetches` [rows, n_ctx] u32: how often each was
///   fetched.
#[derive(Clone, Copy, Debug)]
pub struct IgShape {
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Columns r per KV head of `skew` and `pkeys`, a multiple of 4 up to head_dim: the
    /// model's partial dimensions, zero-filled (`Skew::partial_padded`) so that `ig_speculate`
    /// loads each position's partial key four columns at a time.
    pub partial: u32,
    /// Positions per row of `pkeys` and per head of `scores`.
    pub n_ctx: u32,
    /// Slots per KV head of the selection and the scratch: the most positions it can keep.
    pub cap: u32,
}

impl IgShape {
    pub fn skew_bytes(&self) -> u64 {
        self.n_head_kv as u64 * self.head_dim as u64 * self.partial as u64 * 4
    }

    /// Bytes of one entry (position) of the partial key cache: every KV head's columns.
    pub fn pkey_entry_bytes(&self) -> u64 {
        self.n_head_kv as u64 * self.partial as u64 * 4
    }

    /// Bytes of a partial key cache of `rows` rows.
    pub fn pkeys_bytes(&self, rows: u32) -> u64 {
        rows as u64 * self.n_ctx as u64 * self.pkey_entry_bytes()
    }

    pub fn scores_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head as u64 * self.n_ctx as u64 * 4
    }

    pub fn sel_idx_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head_kv as u64 * self.cap as u64 * 4
    }

    /// Bytes of a [rows, n_ctx] u32 map, as `seq_pos` and `fetches` are.
    pub fn seq_pos_bytes(&self, rows: u32) -> u64 {
        rows as u64 * self.n_ctx as u64 * 4
    }

    pub fn sel_count_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head_kv as u64 * 4
    }

    /// Bytes of `k_scratch` (and of `v_scratch`).
    pub fn scratch_bytes(&self, tokens: u32) -> u64 {
        self.sel_idx_bytes(tokens) * self.head_dim as u64
    }

    fn check(&self, kernel: &'static str) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        if self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return fail(format!(
                "{} KV heads do not divide {} query heads",
                self.n_head_kv, self.n_head
            ));
        }
        if self.n_head > IG_MAX_HEADS {
            return fail(format!(
                "{} query heads; at most {IG_MAX_HEADS} are supported",
                self.n_head
            ));
        }
        if self.head_dim == 0 || self.head_dim % 4 != 0 {
            return fail(format!("head_dim {} is not a multiple of 4", self.head_dim));
        }
        if self.partial == 0 || self.partial % 4 != 0 || self.partial > self.head_dim {
            return fail(format!(
                "{} partial dimensions; need a multiple of 4 up to head_dim {}",
                self.partial, self.head_dim
            ));
        }
        Ok(())
    }

    /// Checks that `pos` lies within `row`'s block table and within n_ctx.
    pub(crate) fn check_position(
        &self,
        kernel: &'static str,
        kv: &KvLayer,
        row: u32,
        pos: u32,
    ) -> Result<()> {
        check_sizes(
            kernel,
            &[(
                "tables",
                kv.tables,
                (row as u64 + 1) * kv.max_blocks as u64 * 4,
            )],
        )?;
        let held = (kv.max_blocks as u64 * BLOCK_TOKENS as u64).min(self.n_ctx as u64);
        if pos as u64 >= held {
            return Err(VkError::Kernel {
                kernel,
                message: format!("position {pos} is past the {held} a row holds"),
            });
        }
        Ok(())
    }

    fn push(&self) -> IgPush {
        IgPush {
            token: 0,
            tokens: 0,
            q_stride: 0,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            r: self.partial,
            n_ctx: self.n_ctx,
            max_blocks: 0,
            cap: self.cap,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            alpha: 0.0,
            rot_dim: 0,
            mode: 0,
            recent: 0,
            splits: 1,
            scores_addr: 0,
            seq_pos_addr: 0,
        }
    }
}

/// The current token of one row: at index `index` of the row, after the `index` entries it
/// may attend to, and at position `pos` of its sequence (the angle RoPE turns its query by, and
/// what the recent window counts back from). The two agree unless the row's pool has evicted
/// tokens (`kv::infinigen::evict`); then `seq_pos` maps the row's entries to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgToken {
    pub row: u32,
    pub index: u32,
    pub pos: u32,
}

impl IgToken {
    /// A token of a row that never evicted: its index is its position.
    pub fn new(row: u32, pos: u32) -> Self {
        Self {
            row,
            index: pos,
            pos,
        }
    }
}

/// A token of a batched dispatch as the kernels read it (`IgStep` in ig_step.glsl): the
/// token, and the most positions per KV head it fetches besides the recent ones.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct IgStep {
    pub row: u32,
    pub index: u32,
    pub pos: u32,
    pub budget: u32,
}

impl IgStep {
    pub fn new(at: IgToken, budget: u32) -> Self {
        Self {
            row: at.row,
            index: at.index,
            pos: at.pos,
            budget,
        }
    }
}

/// The tokens of a decode step, one per sequence row: token t of every InfiniGen dispatch
/// is `steps[t]`, which `buffer` holds too ([tokens] `IgStep`), and its slices of the
/// per-token buffers (scores, selection, scratch) are the t-th.
#[derive(Clone, Copy)]
pub struct IgBatch<'a> {
    pub buffer: &'a Buffer,
    pub steps: &'a [IgStep],
}

impl IgBatch<'_> {
    /// Writes the step's tokens into `buffer` as the kernels read them, each with the budget
    /// `budget` gives it, and returns them (the `steps` of a batch over `buffer`).
    pub fn write(
        buffer: &Buffer,
        tokens: &[IgToken],
        budget: impl Fn(IgToken) -> u32,
    ) -> Result<Vec<IgStep>> {
        let steps: Vec<IgStep> = tokens
            .iter()
            .map(|&at| IgStep::new(at, budget(at)))
            .collect();
        buffer.upload(0, &steps)?;
        Ok(steps)
    }

    fn tokens(&self) -> u32 {
        self.steps.len() as u32
    }

    /// The longest history among the tokens.
    fn longest(&self) -> u32 {
        self.steps.iter().map(|s| s.index).max().unwrap_or(0)
    }

    /// Rows the tokens reach into: the highest row plus one.
    pub(crate) fn rows(&self) -> u32 {
        self.steps.iter().map(|s| s.row + 1).max().unwrap_or(0)
    }

    pub(crate) fn check(&self, kernel: &'static str) -> Result<()> {
        check_sizes(
            kernel,
            &[(
                "steps",
                self.buffer,
                self.steps.len() as u64 * std::mem::size_of::<IgStep>() as u64,
            )],
        )
    }

    /// Checks every token's entry against `kv`'s block tables and n_ctx.
    fn check_positions(&self, kernel: &'static str, s: &IgShape, kv: &KvLayer) -> Result<()> {
        self.steps
            .iter()
            .try_for_each(|st| s.check_position(kernel, kv, st.row, st.index))
    }

    /// Checks that every token's history fits in n_ctx.
    fn check_indices(&self, kernel: Kernel, s: &IgShape) -> Result<()> {
        match self.steps.iter().find(|st| st.index > s.n_ctx) {
            Some(st) => Err(kernel_error(
                kernel,
                format!("index {} is past n_ctx {}", st.index, s.n_ctx),
            )),
            None => Ok(()),
        }
    }
}

/// Push constants of every InfiniGen kernel (the `Push` block each of them declares).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct IgPush {
    token: u32,
    tokens: u32,
    q_stride: u32,
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    r: u32,
    n_ctx: u32,
    max_blocks: u32,
    cap: u32,
    scale: f32,
    alpha: f32,
    rot_dim: u32,
    mode: u32,
    recent: u32,
    splits: u32,
    /// ig_select's scores and seq_pos addresses, where it reads through them (0 elsewhere).
    scores_addr: u64,
    seq_pos_addr: u64,
}

/// Where a kernel reads the tokens' query heads: token t of a dispatch at row `token + t` of
/// a [tokens, stride] f32 buffer whose rows begin with the n_head query heads. This is
/// attn_decode's `qkv` (stride (n_head + 2 n_head_kv) * head_dim); a plain [tokens, n_head *
/// head_dim] buffer is [`QueryAt::vectors`].
#[derive(Clone, Copy)]
pub struct QueryAt<'a> {
    pub buffer: &'a Buffer,
    pub token: u32,
    pub stride: u32,
}

impl<'a> QueryAt<'a> {
    pub fn vectors(buffer: &'a Buffer, s: IgShape) -> Self {
        Self {
            buffer,
            token: 0,
            stride: s.n_head * s.head_dim,
        }
    }

    /// Checks the stride and that the buffer holds `tokens` rows from `token`.
    fn check(&self, kernel: &'static str, s: IgShape, tokens: u32) -> Result<()> {
        self.check_width(kernel, s.n_head * s.head_dim, tokens)
    }

    /// Checks that each row holds `width` floats (a multiple of 4 apart) and that the buffer
    /// holds `tokens` rows from `token`.
    pub(crate) fn check_width(&self, kernel: &'static str, width: u32, tokens: u32) -> Result<()> {
        if self.stride < width || self.stride % 4 != 0 {
            return Err(VkError::Kernel {
                kernel,
                message: format!(
                    "query stride {} must be a multiple of 4 and hold {width} floats",
                    self.stride
                ),
            });
        }
        let end = (self.token + tokens.max(1) - 1) as u64 * self.stride as u64 + width as u64;
        check_sizes(kernel, &[("q", self.buffer, end * 4)])
    }
}

fn kernel_error(kernel: Kernel, message: String) -> VkError {
    VkError::Kernel {
        kernel: kernel.name,
        message,
    }
}

/// Fills the partial key cache from keys already in the pool.
pub struct IgPartialKeys {
    pipeline: Arc<Pipeline>,
}

impl IgPartialKeys {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(IG_PARTIAL_KEYS, &[workgroup_size(device.info())])?,
        })
    }

    /// pkeys[row][pos][g][..] = K(row, pos, g) · skew[g] for every token (row, pos) of
    /// `tokens`, which `steps` holds ([tokens] `StepToken`: a step's new tokens once rope_kv
    /// stored their keys, or a row's history).
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        kv: KvLayer<'a>,
        skew: &'a Buffer,
        pkeys: &'a Buffer,
        s: IgShape,
        steps: &'a Buffer,
        tokens: &[StepToken],
    ) -> Result<()> {
        let name = IG_PARTIAL_KEYS.name;
        s.check(name)?;
        if tokens.is_empty() {
            return Ok(());
        }
        for t in tokens {
            s.check_position(name, &kv, t.row, t.pos)?;
        }
        let rows = tokens.iter().map(|t| t.row + 1).max().unwrap_or(0);
        let token_bytes = std::mem::size_of::<StepToken>() as u64;
        check_sizes(
            name,
            &[
                ("skew", skew, s.skew_bytes()),
                ("pkeys", pkeys, s.pkeys_bytes(rows)),
                ("steps", steps, tokens.len() as u64 * token_bytes),
            ],
        )?;
        let push = IgPush {
            tokens: tokens.len() as u32,
            max_blocks: kv.max_blocks,
            ..s.push()
        };
        let work = tokens.len() as u64 * (s.n_head_kv * s.partial) as u64;
        let groups = linear_groups(rec.device().info(), work, self.pipeline.workgroup_size());
        // The kernel reads no V, so it has no binding for it.
        rec.dispatch(
            &self.pipeline,
            &[kv.k, kv.tables, skew, pkeys, steps],
            &push,
            groups,
        )
    }
}

/// Speculated attention scores of each token over its history.
pub struct IgSpeculate {
    pipeline: Arc<Pipeline>,
    /// The head_dim and partial columns it was built for.
    head_dim: u32,
    partial: u32,
    /// Positions each invocation scores (`SPAN` in the shader).
    span: u32,
    /// Query heads per workgroup (`QH`).
    heads_per_group: u32,
}

impl IgSpeculate {
    /// For a model of shape `s`, whose KV heads are each shared by n_head / n_head_kv query
    /// heads.
    pub fn new(device: &Device, s: IgShape) -> Result<Self> {
        Self::shaped_for(device, s, device.info().kind)
    }

    /// The kernel shaped as it would be for a device of `kind`.
    pub(crate) fn shaped_for(device: &Device, s: IgShape, kind: DeviceKind) -> Result<Self> {
        s.check(IG_SPECULATE.name)?;
        // Each workgroup first projects its head's query on the skew. A CPU device also pays
        // a fixed cost per workgroup, so it takes longer spans: on lavapipe, eight sequences
        // at 2048 tokens, 4.1 -> 3.0 ms per dispatch going from 4 to 16 (32 is no faster).
        let span = match kind {
            DeviceKind::Cpu => 16,
            _ => 4,
        };
        // On a CPU device a workgroup scores all the query heads of a KV head, loading each
        // partial key once for them: on lavapipe, eight sequences at 2048 tokens, 3.0 -> 2.0
        // ms per dispatch.
        let heads_per_group = heads_per_workgroup(kind, s.n_head / s.n_head_kv);
        let spec = [
            workgroup_size(device.info()),
            s.head_dim,
            span,
            heads_per_group,
            s.partial / 4,
        ];
        Ok(Self {
            pipeline: device.pipeline(IG_SPECULATE, &spec)?,
            head_dim: s.head_dim,
            partial: s.partial,
            span,
            heads_per_group,
        })
    }

    /// scores[t][h][i] for i < index of token t of `batch`: its query before RoPE (`q_raw`)
    /// rotated at its position as [`super::RopeKv`] does, projected on the skew, dotted with
    /// pkeys[row][i], times 1/sqrt(head_dim). `table` is `cpu::ops::rope_table(..)` holding
    /// every token's position (any buffer when rot_dim is 0). Scores at the index and beyond
    /// are left as they were.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        q_raw: QueryAt<'a>,
        table: &'a Buffer,
        rope: RopeSpec,
        skew: &'a Buffer,
        pkeys: &'a Buffer,
        scores: &'a Buffer,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let name = IG_SPECULATE.name;
        s.check(name)?;
        if (s.head_dim, s.partial) != (self.head_dim, self.partial) {
            return Err(kernel_error(
                IG_SPECULATE,
                format!(
                    "built for head_dim {} and {} partial columns, called with {} and {}",
                    self.head_dim, self.partial, s.head_dim, s.partial
                ),
            ));
        }
        if rope.rot_dim % 2 != 0 || rope.rot_dim > s.head_dim {
            return Err(kernel_error(
                IG_SPECULATE,
                format!("rot_dim {} must be even and at most head_dim", rope.rot_dim),
            ));
        }
        batch.check(name)?;
        batch.check_indices(IG_SPECULATE, &s)?;
        let tokens = batch.tokens();
        q_raw.check(name, s, tokens)?;
        let last_pos = batch.steps.iter().map(|st| st.pos).max().unwrap_or(0);
        let table_bytes = (last_pos as u64 + 1) * (rope.rot_dim / 2) as u64 * 8;
        check_sizes(
            name,
            &[
                ("table", table, table_bytes),
                ("skew", skew, s.skew_bytes()),
                ("pkeys", pkeys, s.pkeys_bytes(batch.rows())),
                ("scores", scores, s.scores_bytes(tokens)),
            ],
        )?;
        let longest = batch.longest();
        if longest == 0 {
            return Ok(());
        }
        let push = IgPush {
            token: q_raw.token,
            tokens,
            q_stride: q_raw.stride,
            rot_dim: rope.rot_dim,
            mode: match rope.layout {
                RopeLayout::Neox => 0,
                RopeLayout::Gptj => 1,
            },
            ..s.push()
        };
        let heads = head_workgroups(name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        let per_group = self.span * self.pipeline.workgroup_size();
        let groups = [longest.div_ceil(per_group), heads, tokens];
        rec.dispatch(
            &self.pipeline,
            &[q_raw.buffer, table, skew, pkeys, scores, batch.buffer],
            &push,
            groups,
        )
    }
}

/// Per token and KV head, the positions to fetch (InfiniGen's count and choice).
pub struct IgSelect {
    pipeline: Arc<Pipeline>,
    /// One workgroup per token takes every KV head (`EVERY_KV_HEAD`).
    every_kv_head: bool,
    /// With `every_kv_head`: how many workgroups the device runs at once (its host's cores).
    /// A step of fewer tokens splits each token's KV heads over that many.
    cores: u32,
}

impl IgSelect {
    pub fn new(device: &Device) -> Result<Self> {
        Self::shaped_for(device, device.info().kind)
    }

    /// The kernel shaped as it would be for a device of `kind` (tests run GPU shapes on
    /// lavapipe).
    pub(crate) fn shaped_for(device: &Device, kind: DeviceKind) -> Result<Self> {
        // On a CPU device one workgroup per token, one subgroup, so its scans need no barriers;
        // on a GPU one per KV head and token, the largest group, since a handful of workgroups
        // stream every score several times and their loops' latency is the kernel's time.
        let info = device.info();
        let wg = match kind {
            DeviceKind::Cpu => head_workgroup_size(info, kind),
            _ => info.limits.max_workgroup_invocations.clamp(1, 1024),
        };
        // The shared memory the kernel's other arrays leave (per-head maxima, histogram,
        // scan and reduction slots: under 3 KiB plus 8 bytes per invocation) holds the keys.
        // On lavapipe, eight sequences at 2048 tokens, keeping them took 3.9 -> 2.3 ms per
        // dispatch, and one workgroup per token for every KV head (CPU devices) 2.3 -> 1.5 ms
        // (one sequence: 0.42 -> 0.38 ms).
        let free = info.limits.max_shared_memory.saturating_sub(3072 + 8 * wg);
        let keys = (free / 4).clamp(1, MAX_KEY_CACHE);
        Self::with(device, wg, keys, kind == DeviceKind::Cpu)
    }

    /// The kernel with `wg` invocations, `keys` positions' keys kept in shared memory (tests
    /// make it small, so that histories run past it), and one workgroup per token for every KV
    /// head or one per KV head and token.
    ///
    /// With one workgroup per token (CPU devices), the `_wide` variant where the device has
    /// it, reading the scores and seq_pos through their addresses where the host allows
    /// (lavapipe, one sequence at 2048 tokens: 457 -> 407 µs per dispatch). Its passes over
    /// every score take four positions per invocation, in one 16-byte load where n_ctx is a
    /// multiple of 4 (346-358 -> 250-272 µs; eight sequences 1769 -> 1373 µs).
    pub(crate) fn with(device: &Device, wg: u32, keys: u32, every_kv_head: bool) -> Result<Self> {
        let wide = every_kv_head && has_wide_loads(device);
        let by_address = wide && wide_by_address();
        let kernel = if wide { IG_SELECT_WIDE } else { IG_SELECT };
        let spec = [wg, keys, every_kv_head as u32, by_address as u32];
        Ok(Self {
            pipeline: device.pipeline(kernel, &spec)?,
            every_kv_head,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        })
    }

    /// The kernel as a host with `cores` cores runs it (tests split tokens as a larger or
    /// smaller host would).
    #[cfg(test)]
    fn on_cores(self, cores: u32) -> Self {
        Self { cores, ..self }
    }

    /// Writes sel_idx[t][g][0 .. sel_count[t][g]] for every token t of `batch` and KV head g.
    /// Each head h counts the history entries i < index scoring at least
    /// max_i' scores[t][h][i'] minus alpha; k is the mean count over heads rounded up, at most
    /// the token's budget (<= cap). KV head g keeps the k positions with the largest
    /// m[i] = max over g's heads h of (scores[t][h][i] - max_i' scores[t][h][i']) and, at equal
    /// m, the lower positions, after the newest positions (`recent` of them, at most
    /// cap - budget), which come first and add to k; in ascending order. Scores must be
    /// finite. The newest are those whose position, `seq_pos[row][i]` ([rows, n_ctx] u32), is
    /// within that many of the token's.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        scores: &'a Buffer,
        seq_pos: &'a Buffer,
        sel_idx: &'a Buffer,
        sel_count: &'a Buffer,
        s: IgShape,
        batch: IgBatch<'a>,
        alpha: f32,
        recent: u32,
    ) -> Result<()> {
        let name = IG_SELECT.name;
        s.check(name)?;
        if alpha.is_nan() || alpha < 0.0 {
            return Err(kernel_error(
                IG_SELECT,
                format!("alpha {alpha} is not >= 0"),
            ));
        }
        if let Some(st) = batch.steps.iter().find(|st| st.budget > s.cap) {
            return Err(kernel_error(
                IG_SELECT,
                format!("budget {} must be at most cap {}", st.budget, s.cap),
            ));
        }
        batch.check(name)?;
        batch.check_indices(IG_SELECT, &s)?;
        let tokens = batch.tokens();
        check_sizes(
            name,
            &[
                ("scores", scores, s.scores_bytes(tokens)),
                ("seq_pos", seq_pos, s.seq_pos_bytes(batch.rows())),
                ("sel_idx", sel_idx, s.sel_idx_bytes(tokens)),
                ("sel_count", sel_count, s.sel_count_bytes(tokens)),
            ],
        )?;
        if tokens == 0 {
            return Ok(());
        }
        // alpha is >= 0 here; +0 keeps the shader's bit comparisons exact.
        let push = IgPush {
            tokens,
            alpha: alpha.abs(),
            recent,
            scores_addr: scores.device_address().unwrap_or(0),
            seq_pos_addr: seq_pos.device_address().unwrap_or(0),
            ..s.push()
        };
        // With one workgroup per token, a step of fewer tokens than cores gives each token
        // several, which split its KV heads; each takes the maxima and counts itself
        // (lavapipe, one sequence at 2048 tokens: 406 -> 342 µs per dispatch).
        let groups = if self.every_kv_head {
            self.cores.div_ceil(tokens).clamp(1, s.n_head_kv)
        } else {
            s.n_head_kv
        };
        rec.dispatch(
            &self.pipeline,
            &[scores, seq_pos, sel_idx, sel_count, batch.buffer],
            &push,
            [groups, tokens, 1],
        )
    }
}

/// Copies the selected positions' K/V from the pool into the device scratch.
pub struct KvGather {
    pipeline: Arc<Pipeline>,
    /// Most workgroups per KV head and token; they stride over the selection, whose size the
    /// host does not know.
    max_groups: u32,
    /// Each invocation copies whole positions (`PER_POSITION`), not single vec4s.
    per_position: bool,
}

impl KvGather {
    pub fn new(device: &Device) -> Result<Self> {
        Self::shaped_for(device, device.info().kind)
    }

    /// The kernel shaped as it would be for a device of `kind`.
    pub(crate) fn shaped_for(device: &Device, kind: DeviceKind) -> Result<Self> {
        // A CPU device runs a few groups at a time and pays for every idle one, and for each
        // lane's lookup of a position in the block table.
        let (max_groups, per_position) = match kind {
            DeviceKind::Cpu => (16, true),
            _ => (1024, false),
        };
        let spec = [workgroup_size(device.info()), per_position as u32];
        Ok(Self {
            pipeline: device.pipeline(KV_GATHER, &spec)?,
            max_groups,
            per_position,
        })
    }

    /// k_scratch[t][g][j] = K(row, sel_idx[t][g][j], g) and likewise V, for j <
    /// sel_count[t][g], token t of `batch` being in `row`; each fetch adds one to the entry's
    /// counter in `fetches` ([rows, n_ctx] u32), which pool eviction reads.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        kv: KvLayer<'a>,
        sel_idx: &'a Buffer,
        sel_count: &'a Buffer,
        fetches: &'a Buffer,
        k_scratch: &'a Buffer,
        v_scratch: &'a Buffer,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let name = KV_GATHER.name;
        s.check(name)?;
        batch.check(name)?;
        let (tokens, rows) = (batch.tokens(), batch.rows());
        check_sizes(
            name,
            &[
                ("tables", kv.tables, rows as u64 * kv.max_blocks as u64 * 4),
                ("sel_idx", sel_idx, s.sel_idx_bytes(tokens)),
                ("sel_count", sel_count, s.sel_count_bytes(tokens)),
                ("fetches", fetches, s.seq_pos_bytes(rows)),
                ("k_scratch", k_scratch, s.scratch_bytes(tokens)),
                ("v_scratch", v_scratch, s.scratch_bytes(tokens)),
            ],
        )?;
        if s.cap == 0 || tokens == 0 {
            return Ok(());
        }
        let push = IgPush {
            tokens,
            max_blocks: kv.max_blocks,
            ..s.push()
        };
        // No token keeps more than its history or the cap.
        let most = s.cap.min(batch.longest()).max(1);
        let wg = self.pipeline.workgroup_size() as u64;
        let items = match self.per_position {
            true => most as u64,
            false => most as u64 * (s.head_dim / 4) as u64,
        };
        let groups = items.div_ceil(wg).min(self.max_groups as u64) as u32;
        rec.dispatch(
            &self.pipeline,
            &[
                kv.k,
                kv.v,
                kv.tables,
                sel_idx,
                sel_count,
                k_scratch,
                v_scratch,
                fetches,
                batch.buffer,
            ],
            &push,
            [groups, s.n_head_kv, tokens],
        )
    }
}

/// Decode attention over the gathered selections plus each token's own position.
pub struct AttnSparse {
    pipeline: Arc<Pipeline>,
    split: Split,
    head_dim: u32,
    /// Query heads per workgroup (`QH` in the shader).
    heads_per_group: u32,
}

impl AttnSparse {
    /// For a model whose KV heads are each shared by `group` query heads.
    pub fn new(device: &Arc<Device>, head_dim: u32, group: u32) -> Result<Self> {
        Self::shaped_for(device, head_dim, group, device.info().kind)
    }

    /// The kernel shaped as `AttnDecode` is for a device of `kind`.
    pub(crate) fn shaped_for(
        device: &Arc<Device>,
        head_dim: u32,
        group: u32,
        kind: DeviceKind,
    ) -> Result<Self> {
        let heads_per_group = heads_per_workgroup(kind, group);
        let (wg, subgroups) = decode_shape(
            ATTN_SPARSE.name,
            device,
            kind,
            head_dim,
            heads_per_group - 1,
        )?;
        Ok(Self {
            pipeline: device.pipeline(
                ATTN_SPARSE,
                &[
                    wg,
                    head_dim,
                    subgroups,
                    heads_per_group,
                    rolled_keys(kind) as u32,
                ],
            )?,
            split: Split::new(device, head_dim, kind, heads_per_group)?,
            head_dim,
            heads_per_group,
        })
    }

    /// o[q.token + t] = attention of token t of `batch` (its query `q`, post-RoPE) over
    /// k/v_scratch[t][g][0 .. sel_count[t][g]] in stored order, then its own entry in the
    /// pool; `o` is [tokens, n_head * head_dim], as `AttnDecode` writes it.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        q: QueryAt<'a>,
        kv: KvLayer<'a>,
        k_scratch: &'a Buffer,
        v_scratch: &'a Buffer,
        sel_count: &'a Buffer,
        o: &'a Buffer,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let name = ATTN_SPARSE.name;
        s.check(name)?;
        if s.head_dim != self.head_dim {
            return Err(kernel_error(
                ATTN_SPARSE,
                format!(
                    "built for head_dim {}, called with {}",
                    self.head_dim, s.head_dim
                ),
            ));
        }
        let tokens = batch.tokens();
        q.check(name, s, tokens)?;
        batch.check(name)?;
        batch.check_positions(name, &s, &kv)?;
        let heads = (s.n_head * s.head_dim) as u64;
        check_sizes(
            name,
            &[
                ("k_scratch", k_scratch, s.scratch_bytes(tokens)),
                ("v_scratch", v_scratch, s.scratch_bytes(tokens)),
                ("sel_count", sel_count, s.sel_count_bytes(tokens)),
                ("o", o, (q.token + tokens) as u64 * heads * 4),
            ],
        )?;
        if tokens == 0 {
            return Ok(());
        }
        let workgroups = head_workgroups(name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        // A selection holds at most cap entries and the history, and the token's own comes
        // after them.
        let longest = s.cap.min(batch.longest()) + 1;
        let runs = self.split.runs(workgroups * tokens, longest);
        let push = IgPush {
            token: q.token,
            tokens,
            q_stride: q.stride,
            max_blocks: kv.max_blocks,
            splits: runs,
            ..s.push()
        };
        rec.dispatch(
            &self.pipeline,
            &[
                q.buffer,
                o,
                kv.k,
                kv.v,
                kv.tables,
                k_scratch,
                v_scratch,
                sel_count,
                &self.split.partials,
                batch.buffer,
            ],
            &push,
            [workgroups, tokens, runs],
        )?;
        let shape = AttnShape {
            tokens,
            t0: q.token,
            n_head: s.n_head,
            n_head_kv: s.n_head_kv,
            head_dim: s.head_dim,
        };
        self.split.merge(rec, o, shape, runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::kernels::{AttnDecode, AttnShape, StepToken};
    use crate::kv::{blocks_for, KvCache, KvPlacement, KvShape};
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};

    const EPS: f64 = f32::EPSILON as f64;

    fn shape(n_head: u32, n_head_kv: u32, n_ctx: u32, cap: u32) -> IgShape {
        IgShape {
            n_head,
            n_head_kv,
            head_dim: 64,
            partial: 16,
            n_ctx,
            cap,
        }
    }

    /// A host pool (InfiniGen's placement) whose rows take their blocks in turn, so no row's
    /// block table is contiguous, holding random K/V at positions 0 .. lens[row] that `k` and
    /// `v` mirror as [row][pos][kv_head][head_dim].
    struct Pool {
        cache: KvCache,
        k: Vec<Vec<f32>>,
        v: Vec<Vec<f32>>,
        kv_dim: usize,
        head_dim: usize,
    }

    impl Pool {
        fn new(s: IgShape, lens: &[usize]) -> Self {
            let dev = device().unwrap();
            let n_ctx = s.n_ctx as usize;
            let kv_dim = (s.n_head_kv * s.head_dim) as usize;
            let rows = lens.len() + 1;
            let shape = KvShape {
                n_layer: 1,
                n_head_kv: s.n_head_kv as usize,
                head_dim: s.head_dim as usize,
                blocks: rows * blocks_for(n_ctx) + 1,
                rows,
                n_ctx,
            };
            let mut cache = KvCache::new(&dev, shape, KvPlacement::Host).unwrap();
            // A spare row takes a block every round and frees them all at the end, so rows
            // neither start at block 0 nor run contiguously once the others are done.
            let spare = rows - 1;
            let mut held = vec![0; lens.len()];
            while held.iter().zip(lens).any(|(h, l)| h < l) {
                if cache.len(spare) + BLOCK_TOKENS <= n_ctx {
                    cache.append(spare, BLOCK_TOKENS).unwrap();
                }
                for (r, &len) in lens.iter().enumerate() {
                    let more = (len - held[r]).min(BLOCK_TOKENS);
                    cache.append(r, more).unwrap();
                    held[r] += more;
                }
            }
            cache.clear(spare);
            cache.sync_tables().unwrap();
            let mut pool = Pool {
                cache,
                k: Vec::new(),
                v: Vec::new(),
                kv_dim,
                head_dim: s.head_dim as usize,
            };
            let layer = pool.cache.layer(0);
            let max_blocks = layer.max_blocks as usize;
            let tables: Vec<u32> = layer.tables.download(lens.len() * max_blocks).unwrap();
            for (r, &len) in lens.iter().enumerate() {
                let k = random(len * kv_dim, 100 + r as u64, 1.0);
                let v = random(len * kv_dim, 200 + r as u64, 1.0);
                for p in 0..len {
                    let block = tables[r * max_blocks + p / BLOCK_TOKENS] as usize;
                    let slot = (block * BLOCK_TOKENS + p % BLOCK_TOKENS) as u64;
                    let bytes = slot * kv_dim as u64 * 4;
                    layer.k.upload(bytes, &k[p * kv_dim..][..kv_dim]).unwrap();
                    layer.v.upload(bytes, &v[p * kv_dim..][..kv_dim]).unwrap();
                }
                pool.k.push(k);
                pool.v.push(v);
            }
            for (r, &len) in lens.iter().enumerate() {
                let blocks = &tables[r * max_blocks..][..blocks_for(len)];
                assert!(
                    blocks.windows(2).all(|w| w[1] != w[0] + 1),
                    "row {r}'s blocks {blocks:?} should be scattered"
                );
            }
            pool
        }

        fn layer(&self) -> KvLayer<'_> {
            self.cache.layer(0)
        }

        /// K of KV head g at position p of `row`.
        fn k(&self, row: usize, p: usize, g: usize) -> &[f32] {
            &self.k[row][p * self.kv_dim + g * self.head_dim..][..self.head_dim]
        }

        fn v(&self, row: usize, p: usize, g: usize) -> &[f32] {
            &self.v[row][p * self.kv_dim + g * self.head_dim..][..self.head_dim]
        }
    }

    fn u32_buffer(dev: &Arc<Device>, data: &[u32]) -> Buffer {
        Buffer::from_slice(dev, "test u32", data).unwrap()
    }

    fn steps_buffer(dev: &Arc<Device>, steps: &[IgStep]) -> Buffer {
        Buffer::from_slice(dev, "test steps", steps).unwrap()
    }

    /// x · skew[g][.., c] for every column c, in f64, each with the sum of its terms' absolute
    /// values.
    fn project(x: &[f32], skew: &[f32], g: usize, r: usize) -> Vec<(f64, f64)> {
        let hd = x.len();
        (0..r)
            .map(|c| {
                let terms = (0..hd).map(|i| x[i] as f64 * skew[(g * hd + i) * r + c] as f64);
                terms.fold((0.0, 0.0), |(sum, abs), t| (sum + t, abs + t.abs()))
            })
            .collect()
    }

    #[test]
    fn partial_keys_and_speculated_scores_match_reference() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 300);
        let (nh, nkv, hd, r) = (6usize, 2usize, 64usize, s.partial as usize);
        let lens = [150usize, 272];
        let pool = Pool::new(s, &lens);
        // Entries of an orthogonal head_dim matrix are about 1/sqrt(head_dim). As for a model,
        // 13 columns are zero-filled to the shape's 16.
        let mut skew = random(nkv * hd * r, 5, 0.125);
        for row in skew.chunks_mut(r) {
            row[13..].fill(0.0);
        }
        let skew_b = upload(&dev, &skew);
        let pkeys_b = zeros(&dev, (s.pkeys_bytes(2) / 4) as usize);
        let partial = IgPartialKeys::new(&dev).unwrap();
        let (row, pos) = (1usize, 271u32);
        // Two dispatches, each over tokens of both rows in no order.
        let written = [(0usize, 17..40u32), (1, 0..100), (1, 100..pos + 1)];
        let tokens: Vec<StepToken> = written
            .iter()
            .flat_map(|(row, range)| range.clone().map(|p| StepToken::new(*row as u32, p)))
            .rev()
            .collect();
        let (first, second) = tokens.split_at(50);
        let first_b = Buffer::from_slice(&dev, "tokens", first).unwrap();
        let second_b = Buffer::from_slice(&dev, "tokens", second).unwrap();
        run(&dev, |rec| {
            for (b, list) in [(&first_b, first), (&second_b, second)] {
                partial
                    .record(rec, pool.layer(), &skew_b, &pkeys_b, s, b, list)
                    .unwrap();
            }
        });
        // Every f32 sum of n products is within n * eps/2 * (sum of |products|) of the exact
        // value, whatever the order; eps rather than eps/2 leaves room for FMA contraction.
        let pk_len = (s.pkeys_bytes(2) / 4) as usize;
        let (mut want, mut tol) = (vec![0f32; pk_len], vec![0f32; pk_len]);
        for (row, range) in &written {
            for p in range.clone() {
                for g in 0..nkv {
                    let at = ((row * s.n_ctx as usize + p as usize) * nkv + g) * r;
                    let k = pool.k(*row, p as usize, g);
                    for (c, (v, abs)) in project(k, &skew, g, r).into_iter().enumerate() {
                        want[at + c] = v as f32;
                        tol[at + c] = (hd as f64 * EPS * abs) as f32;
                    }
                }
            }
        }
        let pkeys: Vec<f32> = pkeys_b.download(pk_len).unwrap();
        assert_close("partial keys", &pkeys, &want, |i| tol[i]);

        // The raw queries are tokens 1 and 2 of a fused projection output: token 0 of the
        // dispatch is row 1's, token 1 row 0's (a shorter history).
        let stride = (nh + 2 * nkv) * hd;
        let qkv = random(3 * stride, 7, 1.5);
        let qkv_b = upload(&dev, &qkv);
        let shapes = [DeviceKind::Cpu, DeviceKind::Discrete];
        let scale = 1.0 / (hd as f64).sqrt();
        // The last case is a row whose pool evicted 500 tokens: RoPE turns the query by its
        // position, past its index.
        let cases = [
            (64u32, RopeLayout::Neox, pos),
            (48, RopeLayout::Gptj, pos),
            (64, RopeLayout::Neox, pos + 500),
        ];
        let per_token = nh * s.n_ctx as usize;
        for ((rot_dim, layout, seq_pos), kind) in
            cases.into_iter().flat_map(|c| shapes.map(|k| (c, k)))
        {
            let speculate = IgSpeculate::shaped_for(&dev, s, kind).unwrap();
            let table = ops::rope_table(seq_pos as usize + 1, rot_dim as usize, 10000.0);
            let table_b = Buffer::from_slice(&dev, "rope table", &table).unwrap();
            let scores_b = upload(&dev, &vec![9.0; 2 * per_token]);
            let q = QueryAt {
                buffer: &qkv_b,
                token: 1,
                stride: stride as u32,
            };
            let rope = RopeSpec { rot_dim, layout };
            let ats = [
                IgToken {
                    row: row as u32,
                    index: pos,
                    pos: seq_pos,
                },
                IgToken::new(0, 40),
            ];
            let steps: Vec<IgStep> = ats.iter().map(|&at| IgStep::new(at, 0)).collect();
            let steps_b = steps_buffer(&dev, &steps);
            let batch = IgBatch {
                buffer: &steps_b,
                steps: &steps,
            };
            run(&dev, |rec| {
                speculate
                    .record(
                        rec, q, &table_b, rope, &skew_b, &pkeys_b, &scores_b, s, batch,
                    )
                    .unwrap();
            });
            let mut want = vec![9f32; 2 * per_token];
            let mut tol = vec![0f32; want.len()];
            for (tk, at) in ats.iter().enumerate() {
                let mut q_rot = qkv[(1 + tk) * stride..][..nh * hd].to_vec();
                ops::rope(
                    &mut q_rot,
                    &[at.pos],
                    nh,
                    hd,
                    rot_dim as usize,
                    layout,
                    &table,
                );
                for h in 0..nh {
                    let g = h / (nh / nkv);
                    let (qp, qp_abs): (Vec<f64>, Vec<f64>) =
                        project(&q_rot[h * hd..][..hd], &skew, g, r)
                            .into_iter()
                            .unzip();
                    let row = at.row as usize;
                    for t in 0..at.index as usize {
                        let pk = &pkeys[((row * s.n_ctx as usize + t) * nkv + g) * r..][..r];
                        let dot: f64 = (0..r).map(|c| qp[c] * pk[c] as f64).sum();
                        let abs: f64 = (0..r).map(|c| qp_abs[c] * pk[c].abs() as f64).sum();
                        let at = tk * per_token + h * s.n_ctx as usize + t;
                        want[at] = (scale * dot) as f32;
                        // The rotation's two products, qp's head_dim terms, the score's r
                        // terms.
                        tol[at] = (scale * (hd + r + 4) as f64 * EPS * abs) as f32;
                    }
                }
            }
            let got: Vec<f32> = scores_b.download(want.len()).unwrap();
            assert_close(
                &format!(
                    "scores ({layout:?}, rot_dim {rot_dim}, position {seq_pos}, {kind:?} shape)"
                ),
                &got,
                &want,
                |i| tol[i],
            );
        }
        finish(&dev);
    }

    /// ig_select's rule, from the CPU reference of InfiniGen (`kv::infinigen::select`), on
    /// the first `pos` scores of each head; entry t holds position seq_pos[t], and the
    /// current token position `now`.
    #[allow(clippy::too_many_arguments)]
    fn reference_select(
        scores: &[f32],
        s: IgShape,
        pos: usize,
        alpha: f32,
        budget: usize,
        recent: usize,
        seq_pos: &[u32],
        now: u32,
    ) -> Vec<Vec<u32>> {
        use crate::kv::infinigen::select;
        let (n_head, n_kv) = (s.n_head as usize, s.n_head_kv as usize);
        let compact: Vec<f32> = (0..n_head)
            .flat_map(|h| scores[h * s.n_ctx as usize..][..pos].iter().copied())
            .collect();
        let k = select::fetch_count(&compact, pos, n_head, alpha, budget, recent);
        let is_recent = |t: usize| seq_pos[t] as usize + recent >= now as usize;
        (0..n_kv)
            .map(|g| select::select_among(&compact, pos, n_head, n_kv, g, k, is_recent))
            .collect()
    }

    /// Runs ig_select on `scores` and checks every KV head's selection exactly.
    fn check_select(
        select: &IgSelect,
        scores: &[f32],
        s: IgShape,
        pos: u32,
        alpha: f32,
        budget: u32,
        what: &str,
    ) -> Vec<Vec<u32>> {
        check_select_recent(select, scores, s, pos, alpha, budget, 0, what)
    }

    /// A token for [`check_select_batch`]: its scores ([n_head, n_ctx]), its index (history
    /// length) and budget, the positions its row's entries hold, and its own position.
    struct SelectCase<'a> {
        scores: &'a [f32],
        index: u32,
        budget: u32,
        seq_pos: &'a [u32],
        now: u32,
    }

    /// Runs ig_select on the tokens of `cases` in one dispatch, token t in row t + 1 (row 0
    /// holds garbage, which no token may read), and checks every token's selection for every
    /// KV head exactly; returns them, per token and KV head.
    fn check_select_batch(
        select: &IgSelect,
        s: IgShape,
        cases: &[SelectCase],
        alpha: f32,
        recent: u32,
        what: &str,
    ) -> Vec<Vec<Vec<u32>>> {
        let dev = device().unwrap();
        let (n_ctx, tokens) = (s.n_ctx as usize, cases.len() as u32);
        let scores: Vec<f32> = cases
            .iter()
            .flat_map(|c| c.scores.iter().copied())
            .collect();
        let scores_b = upload(&dev, &scores);
        let mut map = vec![u32::MAX / 2; (cases.len() + 1) * n_ctx];
        for (t, c) in cases.iter().enumerate() {
            map[(t + 1) * n_ctx..][..c.seq_pos.len()].copy_from_slice(c.seq_pos);
        }
        let map_b = u32_buffer(&dev, &map);
        let list = (s.n_head_kv * s.cap) as usize;
        let idx_b = u32_buffer(&dev, &vec![u32::MAX; cases.len() * list]);
        let count_b = u32_buffer(&dev, &vec![12345; cases.len() * s.n_head_kv as usize]);
        let steps: Vec<IgStep> = cases
            .iter()
            .enumerate()
            .map(|(t, c)| IgStep {
                row: t as u32 + 1,
                index: c.index,
                pos: c.now,
                budget: c.budget,
            })
            .collect();
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        run(&dev, |rec| {
            select
                .record(
                    rec, &scores_b, &map_b, &idx_b, &count_b, s, batch, alpha, recent,
                )
                .unwrap();
        });
        let counts: Vec<u32> = count_b
            .download(tokens as usize * s.n_head_kv as usize)
            .unwrap();
        let idx: Vec<u32> = idx_b.download(cases.len() * list).unwrap();
        let mut kept = Vec::new();
        for (t, c) in cases.iter().enumerate() {
            let want = reference_select(
                c.scores,
                s,
                c.index as usize,
                alpha,
                c.budget as usize,
                recent as usize,
                c.seq_pos,
                c.now,
            );
            for (g, want) in want.iter().enumerate() {
                let n = counts[t * s.n_head_kv as usize + g] as usize;
                assert_eq!(n, want.len(), "{what}: count of token {t}, KV head {g}");
                let got = &idx[t * list + g * s.cap as usize..][..n];
                assert_eq!(
                    got,
                    &want[..],
                    "{what}: positions of token {t}, KV head {g}"
                );
            }
            kept.push(want);
        }
        kept
    }

    /// [`check_select_batch`] for one token at `pos`, whose entries hold the positions
    /// `seq_pos` (an evicting pool) and whose own position is `now`.
    #[allow(clippy::too_many_arguments)]
    fn check_select_at(
        select: &IgSelect,
        scores: &[f32],
        s: IgShape,
        pos: u32,
        alpha: f32,
        budget: u32,
        recent: u32,
        seq_pos: &[u32],
        now: u32,
        what: &str,
    ) -> Vec<Vec<u32>> {
        let case = SelectCase {
            scores,
            index: pos,
            budget,
            seq_pos,
            now,
        };
        check_select_batch(select, s, &[case], alpha, recent, what).remove(0)
    }

    /// [`check_select`] with the `recent` newest positions always kept.
    #[allow(clippy::too_many_arguments)]
    fn check_select_recent(
        select: &IgSelect,
        scores: &[f32],
        s: IgShape,
        pos: u32,
        alpha: f32,
        budget: u32,
        recent: u32,
        what: &str,
    ) -> Vec<Vec<u32>> {
        let identity: Vec<u32> = (0..s.n_ctx).collect();
        check_select_at(
            select, scores, s, pos, alpha, budget, recent, &identity, pos, what,
        )
    }

    #[test]
    fn select_matches_reference() {
        let Some(dev) = device() else { return };
        // Both shapes, and two whose key cache (64 positions) most histories here outgrow.
        let selects = [
            (
                "CPU shape",
                IgSelect::shaped_for(&dev, DeviceKind::Cpu)
                    .unwrap()
                    .on_cores(1),
            ),
            (
                "GPU shape",
                IgSelect::shaped_for(&dev, DeviceKind::Discrete).unwrap(),
            ),
            (
                "64 keys cached",
                IgSelect::with(&dev, 32, 64, true).unwrap(),
            ),
            (
                "64 keys, one KV head",
                IgSelect::with(&dev, 32, 64, false).unwrap(),
            ),
            (
                "CPU shape, a token's KV heads over 2 cores",
                IgSelect::shaped_for(&dev, DeviceKind::Cpu)
                    .unwrap()
                    .on_cores(2),
            ),
            (
                "64 keys, a token's KV heads over 3 cores",
                IgSelect::with(&dev, 32, 64, true).unwrap().on_cores(3),
            ),
        ];
        for (kind, select) in &selects {
            // Rows of scores a whole number of 16-byte words long (300), and not (298).
            for (n_head, n_kv, n_ctx) in [(6, 2, 300), (6, 3, 298)] {
                let s = shape(n_head, n_kv, n_ctx, 320);
                let what = |case: &str| format!("{case} ({n_head}/{n_kv} heads, {kind})");
                let scores = random((n_head * s.n_ctx) as usize, 11, 6.0);
                let uncapped = check_select(select, &scores, s, 277, 4.0, 320, &what("alpha 4"));
                assert!(uncapped.iter().all(|k| k.len() > 50 && k.len() < 277));
                let capped = check_select(select, &scores, s, 277, 4.0, 50, &what("budget 50"));
                assert!(capped.iter().all(|k| k.len() == 50));
                let recent =
                    check_select_recent(select, &scores, s, 277, 4.0, 50, 20, &what("recent"));
                assert!(recent
                    .iter()
                    .all(|k| k.len() == 70 && k.ends_with(&(257..277).collect::<Vec<u32>>())));
                // An evicting row: 277 entries holding positions scattered over 0 .. 1000 in
                // no order; the newest 20 (985 .. 1000) wherever they sit.
                let mut seq_pos: Vec<u32> = (0..257).map(|t| t * 3).collect();
                seq_pos.extend(985..1005);
                seq_pos.swap(3, 270);
                seq_pos.swap(100, 260);
                let what_ev = what("evicted");
                let ev = check_select_at(
                    select, &scores, s, 277, 4.0, 50, 20, &seq_pos, 1005, &what_ev,
                );
                assert!(ev.iter().all(|k| k.len() == 70
                    && [3u32, 100].iter().all(|t| k.contains(t))
                    && !k.contains(&270)));
                let few = check_select_recent(select, &scores, s, 10, 0.0, 50, 20, &what("short"));
                assert!(few.iter().all(|k| k.iter().copied().eq(0..10)));
                let all = check_select(select, &scores, s, 290, 1e30, 300, &what("huge alpha"));
                assert!(all.iter().all(|k| k.iter().copied().eq(0..290)));
                check_select(
                    select,
                    &scores,
                    s,
                    290,
                    f32::INFINITY,
                    320,
                    &what("infinite alpha"),
                );
                let best = check_select(select, &scores, s, 290, 0.0, 320, &what("alpha 0"));
                assert!(best
                    .iter()
                    .all(|k| !k.is_empty() && k.len() <= n_head as usize));
                let none = check_select(select, &scores, s, 0, 4.0, 320, &what("pos 0"));
                assert!(none.iter().all(|k| k.is_empty()));
                let one = check_select(select, &scores, s, 1, 4.0, 320, &what("pos 1"));
                assert!(one.iter().all(|k| k == &[0]));
                check_select(select, &scores, s, 277, 4.0, 0, &what("budget 0"));

                // Scores on a grid of 1/4 tie in many places, also at the cut, where the lower
                // positions must win.
                let grid: Vec<f32> = scores.iter().map(|x| (x * 4.0).round() / 4.0).collect();
                for budget in [1, 37, 100] {
                    let kept = check_select(select, &grid, s, n_ctx, 5.0, budget, &what("ties"));
                    assert!(kept.iter().all(|k| k.len() == budget as usize));
                }
            }
        }
        finish(&dev);
    }

    /// Tens of thousands of positions: many tiles of the final scan and a radix select whose
    /// histograms see every position.
    #[test]
    fn select_scales_to_long_histories() {
        let Some(dev) = device() else { return };
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let select = IgSelect::shaped_for(&dev, kind).unwrap();
            let s = shape(8, 2, 20_000, 1024);
            let scores = random((s.n_head * s.n_ctx) as usize, 13, 8.0);
            let what = format!("20000 positions ({kind:?} shape)");
            let kept = check_select(&select, &scores, s, 19_999, 5.0, 1000, &what);
            assert!(kept.iter().all(|k| k.len() == 1000));
        }
        finish(&dev);
    }

    /// One dispatch selects for several tokens of different rows, histories, budgets and
    /// positions, each as it would alone.
    #[test]
    fn select_batches_the_tokens_of_a_step() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 320);
        let scores: Vec<Vec<f32>> = (0..3)
            .map(|i| random((s.n_head * s.n_ctx) as usize, 40 + i, 6.0))
            .collect();
        let identity: Vec<u32> = (0..s.n_ctx).collect();
        let mut evicted: Vec<u32> = (0..257).map(|t| t * 3).collect();
        evicted.extend(985..1005);
        evicted.swap(3, 270);
        let cases = [
            SelectCase {
                scores: &scores[0],
                index: 277,
                budget: 50,
                seq_pos: &identity,
                now: 277,
            },
            SelectCase {
                scores: &scores[1],
                index: 12,
                budget: 300,
                seq_pos: &identity,
                now: 12,
            },
            SelectCase {
                scores: &scores[2],
                index: 277,
                budget: 7,
                seq_pos: &evicted,
                now: 1005,
            },
        ];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let select = IgSelect::shaped_for(&dev, kind).unwrap();
            let kept = check_select_batch(&select, s, &cases, 4.0, 20, &format!("{kind:?}"));
            assert!(kept[0].iter().all(|k| k.len() == 70));
            assert!(kept[1].iter().all(|k| k.iter().copied().eq(0..12)));
            assert!(kept[2].iter().all(|k| k.len() == 27));
        }
        finish(&dev);
    }

    #[test]
    fn gather_copies_selected_positions_exactly() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 210, 80);
        let (hd, cap, n_ctx) = (64usize, 80usize, 210usize);
        let pool = Pool::new(s, &[90, 200]);
        // Token 0 is row 1's. KV head 0: every third position; head 1: a few, in no order,
        // one twice. Token 1 is row 0's, with a shorter history.
        let rows = [1usize, 0];
        let lists: [[Vec<u32>; 2]; 2] = [
            [(0..200).step_by(3).collect(), vec![199, 0, 57, 57, 130]],
            [(5..90).step_by(7).collect(), vec![89, 0, 0]],
        ];
        let mut idx = vec![0u32; 2 * 2 * cap];
        let mut counts = Vec::new();
        for (t, token) in lists.iter().enumerate() {
            for (g, list) in token.iter().enumerate() {
                idx[(t * 2 + g) * cap..][..list.len()].copy_from_slice(list);
                counts.push(list.len() as u32);
            }
        }
        let idx_b = u32_buffer(&dev, &idx);
        let count_b = u32_buffer(&dev, &counts);
        let steps = [
            IgStep::new(IgToken::new(1, 199), 0),
            IgStep::new(IgToken::new(0, 89), 0),
        ];
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let gather = KvGather::shaped_for(&dev, kind).unwrap();
            let n = (s.scratch_bytes(2) / 4) as usize;
            let k_b = upload(&dev, &vec![f32::MAX; n]);
            let v_b = upload(&dev, &vec![f32::MAX; n]);
            let fetches_b = u32_buffer(&dev, &vec![1; 2 * n_ctx]);
            run(&dev, |rec| {
                gather
                    .record(
                        rec,
                        pool.layer(),
                        &idx_b,
                        &count_b,
                        &fetches_b,
                        &k_b,
                        &v_b,
                        s,
                        batch,
                    )
                    .unwrap();
            });
            // Every fetch counts once in its row's counters, on top of what they held.
            let fetches: Vec<u32> = fetches_b.download(2 * n_ctx).unwrap();
            let mut want = vec![1u32; 2 * n_ctx];
            let (mut want_k, mut want_v) = (vec![f32::MAX; n], vec![f32::MAX; n]);
            for (t, token) in lists.iter().enumerate() {
                let row = rows[t];
                for (g, list) in token.iter().enumerate() {
                    for (j, &p) in list.iter().enumerate() {
                        want[row * n_ctx + p as usize] += 1;
                        let at = ((t * 2 + g) * cap + j) * hd;
                        want_k[at..at + hd].copy_from_slice(pool.k(row, p as usize, g));
                        want_v[at..at + hd].copy_from_slice(pool.v(row, p as usize, g));
                    }
                }
            }
            assert_eq!(fetches, want, "fetch counters ({kind:?} shape)");
            let (k, v): (Vec<f32>, Vec<f32>) = (k_b.download(n).unwrap(), v_b.download(n).unwrap());
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert!(bits(&k) == bits(&want_k), "gathered K ({kind:?} shape)");
            assert!(bits(&v) == bits(&want_v), "gathered V ({kind:?} shape)");
        }
        finish(&dev);
    }

    /// Attention of one query (post-RoPE) over positions `history` then `pos` of `row`, in f64.
    fn reference_sparse(
        pool: &Pool,
        q: &[f32],
        s: IgShape,
        row: usize,
        pos: usize,
        history: &[Vec<u32>],
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (s.n_head as usize, s.n_head_kv as usize, s.head_dim as usize);
        let mut out = vec![0f32; nh * hd];
        for h in 0..nh {
            let g = h / (nh / nkv);
            let positions: Vec<usize> = history[g]
                .iter()
                .map(|&p| p as usize)
                .chain([pos])
                .collect();
            let qh = &q[h * hd..][..hd];
            let scores: Vec<f64> = positions
                .iter()
                .map(|&p| {
                    qh.iter()
                        .zip(pool.k(row, p, g))
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = positions
                    .iter()
                    .zip(&e)
                    .map(|(&p, w)| w * pool.v(row, p, g)[d] as f64)
                    .sum();
                out[h * hd + d] = (acc / sum) as f32;
            }
        }
        out
    }

    /// A token of [`run_sparse`]: its row and index, and the history positions it attends to
    /// per KV head.
    struct SparseToken {
        row: u32,
        index: u32,
        history: Vec<Vec<u32>>,
    }

    /// Gathers each token's history per KV head and runs attn_sparse over all of them in one
    /// dispatch each, token t's query being row t of `qkv` (`q` on the host); returns the
    /// output ([tokens, n_head * head_dim]) and the reference.
    fn run_sparse(
        kind: DeviceKind,
        pool: &Pool,
        s: IgShape,
        qkv: &Buffer,
        q: &[f32],
        tokens: &[SparseToken],
    ) -> (Vec<f32>, Vec<f32>) {
        let dev = device().unwrap();
        let (cap, n_kv) = (s.cap as usize, s.n_head_kv as usize);
        let mut idx = vec![0u32; tokens.len() * n_kv * cap];
        let mut counts = Vec::new();
        for (t, token) in tokens.iter().enumerate() {
            for (g, list) in token.history.iter().enumerate() {
                idx[(t * n_kv + g) * cap..][..list.len()].copy_from_slice(list);
                counts.push(list.len() as u32);
            }
        }
        let idx_b = u32_buffer(&dev, &idx);
        let count_b = u32_buffer(&dev, &counts);
        let steps: Vec<IgStep> = tokens
            .iter()
            .map(|t| IgStep::new(IgToken::new(t.row, t.index), 0))
            .collect();
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let n = (s.scratch_bytes(tokens.len() as u32) / 4) as usize;
        let (k_b, v_b) = (zeros(&dev, n), zeros(&dev, n));
        let heads = (s.n_head * s.head_dim) as usize;
        let o = zeros(&dev, tokens.len() * heads);
        let fetches_b = u32_buffer(&dev, &vec![0; 2 * s.n_ctx as usize]);
        let gather = KvGather::shaped_for(&dev, kind).unwrap();
        let attn = AttnSparse::shaped_for(&dev, s.head_dim, s.n_head / s.n_head_kv, kind).unwrap();
        let stride = ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize;
        let query = QueryAt {
            buffer: qkv,
            token: 0,
            stride: stride as u32,
        };
        run(&dev, |rec| {
            gather
                .record(
                    rec,
                    pool.layer(),
                    &idx_b,
                    &count_b,
                    &fetches_b,
                    &k_b,
                    &v_b,
                    s,
                    batch,
                )
                .unwrap();
            attn.record(rec, query, pool.layer(), &k_b, &v_b, &count_b, &o, s, batch)
                .unwrap();
        });
        let want: Vec<f32> = tokens
            .iter()
            .enumerate()
            .flat_map(|(t, token)| {
                let (row, index) = (token.row as usize, token.index as usize);
                let q = &q[t * stride..][..heads];
                reference_sparse(pool, q, s, row, index, &token.history)
            })
            .collect();
        (o.download(want.len()).unwrap(), want)
    }

    #[test]
    fn sparse_attention_matches_reference() {
        let Some(dev) = device() else { return };
        let s = shape(6, 3, 230, 160);
        let pos = 203u32;
        let pool = Pool::new(s, &[40, pos as usize + 1]);
        // Token 0 is row 1's; token 1 is row 0's, with a short history.
        let stride = ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize;
        let qkv = random(2 * stride, 21, 1.5);
        let qkv_b = upload(&dev, &qkv);
        let keep = random(pos as usize, 22, 1.0);
        // Head 0: about half the history, ascending; head 1: a few, not in order; head 2: none.
        let tokens = [
            SparseToken {
                row: 1,
                index: pos,
                history: vec![
                    (0..pos).filter(|&t| keep[t as usize] > 0.0).collect(),
                    vec![202, 3, 150, 77],
                    vec![],
                ],
            },
            SparseToken {
                row: 0,
                index: 39,
                history: vec![vec![], (0..39).rev().collect(), vec![38, 0]],
            },
        ];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let (got, want) = run_sparse(kind, &pool, s, &qkv_b, &qkv, &tokens);
            // As for attn_decode: outputs are O(1) averages of |v| <= 1 over a few hundred
            // positions, computed in f32.
            assert_close(
                &format!("sparse attention ({kind:?} shape)"),
                &got,
                &want,
                |_| 2e-5,
            );
        }
        finish(&dev);
    }

    #[test]
    fn sparse_attention_over_everything_matches_attn_decode() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 300);
        let pos = 277u32;
        let pool = Pool::new(s, &[100, pos as usize + 1]);
        let qkv = random(
            ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize,
            31,
            1.5,
        );
        let qkv_b = upload(&dev, &qkv);
        let steps = Buffer::from_slice(&dev, "steps", &[StepToken::new(1, pos)]).unwrap();
        let tokens = [SparseToken {
            row: 1,
            index: pos,
            history: vec![(0..pos).collect::<Vec<_>>(); 2],
        }];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let dense =
                AttnDecode::shaped_for(&dev, s.head_dim, s.n_head / s.n_head_kv, kind).unwrap();
            let o = zeros(&dev, (s.n_head * s.head_dim) as usize);
            let shape = AttnShape {
                tokens: 1,
                t0: 0,
                n_head: s.n_head,
                n_head_kv: s.n_head_kv,
                head_dim: s.head_dim,
            };
            run(&dev, |rec| {
                dense
                    .record(rec, &qkv_b, pool.layer(), &steps, &o, shape, pos + 1)
                    .unwrap();
            });
            let dense_out: Vec<f32> = o.download((s.n_head * s.head_dim) as usize).unwrap();
            let (got, want) = run_sparse(kind, &pool, s, &qkv_b, &qkv, &tokens);
            let what = format!("({kind:?} shape)");
            assert_close(
                &format!("sparse vs attn_decode {what}"),
                &got,
                &dense_out,
                |_| 2e-5,
            );
            assert_close(&format!("sparse vs reference {what}"), &got, &want, |_| {
                2e-5
            });
        }
        finish(&dev);
    }

    #[test]
    fn shapes_are_checked() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 64, 32);
        let pool = Pool::new(s, &[20]);
        let buf = upload(&dev, &[0.0; 4096]);
        let small = upload(&dev, &[0.0; 4]);
        let attn = AttnSparse::new(&dev, 64, 3).unwrap();
        let message = |r: Result<()>| r.unwrap_err().to_string();

        let select = IgSelect::new(&dev).unwrap();
        let steps = [IgStep::new(IgToken::new(0, 10), 8)];
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let select_err = |map: &Buffer, idx: &Buffer, alpha: f32, budget: u32| {
            let steps = [IgStep { budget, ..steps[0] }];
            let mut rec = Recorder::new(&dev).unwrap();
            let batch = IgBatch {
                steps: &steps,
                ..batch
            };
            message(select.record(&mut rec, &buf, map, idx, &buf, s, batch, alpha, 0))
        };
        let err = select_err(&buf, &buf, 4.0, 33);
        assert!(err.contains("budget 33"), "{err}");
        let err = select_err(&buf, &buf, -1.0, 8);
        assert!(err.contains("alpha"), "{err}");
        let err = select_err(&buf, &small, 4.0, 8);
        assert!(err.contains("sel_idx"), "{err}");
        let err = select_err(&small, &buf, 4.0, 8);
        assert!(err.contains("seq_pos"), "{err}");
        // A step buffer shorter than its tokens.
        let two = [steps[0], steps[0]];
        let short = IgBatch {
            steps: &two,
            ..batch
        };
        let at3 = [IgStep::new(IgToken::new(0, 3), 8)];
        let mut rec = Recorder::new(&dev).unwrap();
        let err = message(select.record(&mut rec, &buf, &buf, &buf, &buf, s, short, 4.0, 0));
        assert!(err.contains("binding `steps`"), "{err}");

        let partial = IgPartialKeys::new(&dev).unwrap();
        let keys: Vec<StepToken> = (0..4).map(|p| StepToken::new(0, p)).collect();
        let keys_b = Buffer::from_slice(&dev, "tokens", &keys).unwrap();
        let partial_err = |shape: IgShape, keys: &[StepToken]| {
            let mut rec = Recorder::new(&dev).unwrap();
            message(partial.record(&mut rec, pool.layer(), &buf, &buf, shape, &keys_b, keys))
        };
        // Wider than a head, and not padded to a multiple of 4.
        for columns in [68, 13] {
            let err = partial_err(
                IgShape {
                    partial: columns,
                    ..s
                },
                &keys,
            );
            assert!(err.contains("partial dimensions"), "{err}");
        }
        let err = partial_err(s, &[StepToken::new(0, 64)]);
        assert!(err.contains("position 64"), "{err}");
        let odd = IgShape { n_head_kv: 4, ..s };
        let err = partial_err(odd, &keys);
        assert!(err.contains("do not divide"), "{err}");
        let five: Vec<StepToken> = (0..5).map(|p| StepToken::new(0, p)).collect();
        let err = partial_err(s, &five);
        assert!(err.contains("binding `steps`"), "{err}");

        let err = message(attn.record(
            &mut rec,
            QueryAt::vectors(&small, s),
            pool.layer(),
            &buf,
            &buf,
            &buf,
            &buf,
            s,
            IgBatch {
                steps: &at3,
                ..batch
            },
        ));
        assert!(err.contains("binding `q`"), "{err}");
        assert!(rec.is_empty());
    }
}
