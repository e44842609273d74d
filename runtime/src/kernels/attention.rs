//! Attention over the paged KV cache: `RopeKv` rotates the fused projection's queries and keys
//! and appends keys and values to the cache; `AttnDecode` and `AttnPrefill` attend over it.
//!
//! All three read the projection output `qkv` [tokens, (n_head + 2 n_head_kv) * head_dim]
//! (query heads, then key heads, then value heads) and write `o` [tokens, n_head * head_dim].
//! A step's tokens may come from several sequences: `steps` holds, per token, its row in the
//! cache, its position, and its beam-table offset ([`StepToken`]).

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{
    ATTN_DECODE, ATTN_DECODE_WIDE, ATTN_MERGE, ATTN_PREFILL, ATTN_PREFILL_WIDE, ROPE_KV,
};

use super::{
    check_sizes, has_wide_loads, head_workgroup_size, linear_groups, wide_by_address,
    workgroup_size, BROADCAST_LANES,
};
use crate::cpu::ops::RopeLayout;
use crate::kv::{KvLayer, NO_BEAM};
use crate::vk::{Buffer, BufferDesc, Device, DeviceKind, Pipeline, Recorder, Result, VkError};

/// Where one token of a step belongs, as the kernels read it (`uvec4` in `attn_push.glsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct StepToken {
    /// The cache row (sequence slot) it is written to.
    pub row: u32,
    /// Its index in the row: where its K/V go, after the `pos` entries it attends to.
    pub pos: u32,
    /// Offset of its sequence's beam table, or `NO_BEAM`.
    pub beam: u32,
    /// Its position in the sequence, which RoPE turns it by: `pos` unless the row's pool
    /// evicted tokens (`kv::infinigen::evict`).
    pub rope_pos: u32,
}

impl StepToken {
    pub fn new(row: u32, pos: u32) -> Self {
        Self {
            row,
            pos,
            beam: NO_BEAM,
            rope_pos: pos,
        }
    }
}

/// The shape of one attention dispatch: tokens t0 .. t0 + tokens of the step.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub tokens: u32,
    pub t0: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
}

impl AttnShape {
    fn q_stride(&self) -> u64 {
        (self.n_head + 2 * self.n_head_kv) as u64 * self.head_dim as u64
    }

    fn check(&self, kernel: &'static str, qkv: &Buffer, o: &Buffer, steps: &Buffer) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        if self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return fail(format!(
                "{} KV heads do not divide {} query heads",
                self.n_head_kv, self.n_head
            ));
        }
        if self.head_dim % 4 != 0 {
            return fail(format!("head_dim {} is not a multiple of 4", self.head_dim));
        }
        let end = (self.t0 + self.tokens) as u64;
        check_sizes(
            kernel,
            &[
                ("qkv", qkv, end * self.q_stride() * 4),
                ("o", o, end * (self.n_head * self.head_dim) as u64 * 4),
                ("steps", steps, end * 16),
            ],
        )
    }

    fn push(&self, kv: &KvLayer, rope: Option<RopeSpec>) -> AttnPush {
        AttnPush {
            tokens: self.tokens,
            t0: self.t0,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            q_stride: self.q_stride() as u32,
            max_blocks: kv.max_blocks,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            rot_dim: rope.map_or(0, |r| r.rot_dim),
            mode: match rope.map(|r| r.layout) {
                Some(RopeLayout::Gptj) => 1,
                _ => 0,
            },
            splits: 1,
            _pad: 0,
            k_addr: kv.k.device_address().unwrap_or(0),
            v_addr: kv.v.device_address().unwrap_or(0),
        }
    }
}

/// Push constants of rope_kv and both attention kernels (`include/attn_push.glsl`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnPush {
    tokens: u32,
    t0: u32,
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    q_stride: u32,
    max_blocks: u32,
    scale: f32,
    rot_dim: u32,
    mode: u32,
    splits: u32,
    _pad: u32,
    /// The layer's K and V addresses, for the kernels that read them so (0 elsewhere).
    k_addr: u64,
    v_addr: u64,
}

/// How the keys and queries rotate; `rot_dim` 0 means no rotary embedding.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub rot_dim: u32,
    pub layout: RopeLayout,
}

pub struct RopeKv {
    pipeline: Arc<Pipeline>,
}

impl RopeKv {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(ROPE_KV, &[workgroup_size(device.info())])?,
        })
    }

    /// Rotates q and k of `qkv` in place and stores k and v at each token's row and position
    /// in the cache. `table` is `cpu::ops::rope_table(n_ctx, rot_dim, base)` (any buffer when
    /// rot_dim is 0); positions must lie within it and within the rows' block tables.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        table: &'a Buffer,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        s: AttnShape,
        rope: RopeSpec,
    ) -> Result<()> {
        check_rope(s, rope)?;
        s.check(ROPE_KV.name, qkv, qkv, steps)?;
        if s.tokens == 0 {
            return Ok(());
        }
        let pairs = s.tokens as u64 * s.q_stride() / 2;
        let push = s.push(&kv, Some(rope));
        let groups = linear_groups(rec.device().info(), pairs, self.pipeline.workgroup_size());
        rec.dispatch(
            &self.pipeline,
            &[qkv, table, kv.k, kv.v, kv.tables, steps],
            &push,
            groups,
        )
    }
}

fn check_rope(s: AttnShape, rope: RopeSpec) -> Result<()> {
    if rope.rot_dim % 2 != 0 || rope.rot_dim > s.head_dim || s.head_dim % 2 != 0 {
        return Err(VkError::Kernel {
            kernel: ROPE_KV.name,
            message: format!(
                "rot_dim {} and head_dim {} must be even, rot_dim at most head_dim",
                rope.rot_dim, s.head_dim
            ),
        });
    }
    Ok(())
}

/// Checks the shape and records one attention dispatch over `groups` (`splits` is the
/// push constant of split decode attention, 1 elsewhere); `extra` buffers are bound after the
/// common ones (binding 7 on).
#[allow(clippy::too_many_arguments)]
fn record_attention<'a>(
    rec: &mut Recorder<'a>,
    pipeline: &Pipeline,
    built_head_dim: u32,
    [qkv, o, steps]: [&'a Buffer; 3],
    extra: &[&'a Buffer],
    kv: KvLayer<'a>,
    s: AttnShape,
    rope: Option<RopeSpec>,
    groups: [u32; 3],
    splits: u32,
) -> Result<()> {
    if built_head_dim != s.head_dim {
        return Err(VkError::Kernel {
            kernel: pipeline.name,
            message: format!(
                "built for head_dim {built_head_dim}, called with {}",
                s.head_dim
            ),
        });
    }
    s.check(pipeline.name, qkv, o, steps)?;
    if s.tokens == 0 {
        return Ok(());
    }
    let push = AttnPush {
        splits,
        ..s.push(&kv, rope)
    };
    let mut buffers = vec![qkv, o, kv.k, kv.v, kv.tables, kv.beams, steps];
    buffers.extend_from_slice(extra);
    rec.dispatch(pipeline, &buffers, &push, groups)
}

/// Workgroup size and subgroups per workgroup of a decode attention kernel shaped for a device
/// of `kind`, once its shared memory fits: q, a merge slot per subgroup, the lanes' partials
/// where the workgroup is one subgroup (`lane_acc`, one row elsewhere) and a reduction slot
/// per invocation, plus `extra` vectors of head_dim.
pub(crate) fn decode_shape(
    kernel: &'static str,
    device: &Device,
    kind: DeviceKind,
    head_dim: u32,
    extra: u32,
) -> Result<(u32, u32)> {
    let info = device.info();
    let wg = head_workgroup_size(info, kind);
    let subgroups = wg.div_ceil(info.subgroup.min_size.max(1));
    let lane_rows = if subgroups == 1 { wg } else { 1 };
    let shared = ((1 + subgroups + lane_rows + extra) * head_dim + wg) as u64 * 4;
    if shared > info.limits.max_shared_memory as u64 {
        return Err(VkError::Kernel {
            kernel,
            message: format!(
                "head_dim {head_dim} needs {shared} bytes of shared memory; the device has {}",
                info.limits.max_shared_memory
            ),
        });
    }
    Ok((wg, subgroups))
}

/// Decode attention: each token against every position of its own sequence up to its own.
pub struct AttnDecode {
    pipeline: Arc<Pipeline>,
    /// The variant that also rotates and stores its token's query, key and value.
    fused: Arc<Pipeline>,
    split: Split,
    head_dim: u32,
    /// Query heads per workgroup (`QH` in the shader).
    heads_per_group: u32,
}

/// Most query heads one workgroup of a CPU device takes (their K/V rows are loaded once).
const CPU_MAX_HEADS_PER_GROUP: u32 = 8;

/// Query heads per workgroup of decode attention for a device of `kind`, when `group` query
/// heads share each KV head: on CPU devices the whole group, since they load a K/V row lane
/// by lane and one load then serves every head; on GPUs one, for more workgroups.
pub(crate) fn heads_per_workgroup(kind: DeviceKind, group: u32) -> u32 {
    match kind {
        DeviceKind::Cpu if (1..=CPU_MAX_HEADS_PER_GROUP).contains(&group) => group,
        _ => 1,
    }
}

/// Whether decode attention walks each key row in a loop (`ROLLED_KEYS` in
/// include/attn_online.glsl): on CPU devices, where it compiles and runs faster; GPUs unroll it.
pub(crate) fn rolled_keys(kind: DeviceKind) -> bool {
    kind == DeviceKind::Cpu
}

/// Workgroups per token of a decode attention kernel built for `heads_per_group` query heads
/// per workgroup, or an error when the model's grouping does not match the build.
pub(crate) fn head_workgroups(
    kernel: &'static str,
    heads_per_group: u32,
    n_head: u32,
    n_head_kv: u32,
) -> Result<u32> {
    if (n_head / n_head_kv.max(1)) % heads_per_group != 0 {
        return Err(VkError::Kernel {
            kernel,
            message: format!(
                "built for {heads_per_group} query heads per KV head, called with \
                 {n_head}/{n_head_kv}"
            ),
        });
    }
    Ok(n_head / heads_per_group)
}

impl AttnDecode {
    /// For a model whose KV heads are each shared by `group` query heads.
    pub fn new(device: &Arc<Device>, head_dim: u32, group: u32) -> Result<Self> {
        Self::shaped_for(device, head_dim, group, device.info().kind)
    }

    /// The kernel shaped as it would be for a device of `kind` (tests run GPU shapes on
    /// lavapipe).
    pub(crate) fn shaped_for(
        device: &Arc<Device>,
        head_dim: u32,
        group: u32,
        kind: DeviceKind,
    ) -> Result<Self> {
        // On CPU devices positions are spread over one subgroup's lanes. The fused variant
        // also keeps q, k, v being rotated in shared memory.
        let heads_per_group = heads_per_workgroup(kind, group);
        let extra = 2 * heads_per_group + 2;
        let (wg, subgroups) = decode_shape(ATTN_DECODE.name, device, kind, head_dim, extra)?;
        let by_address = wide_by_address() as u32;
        let rolled = rolled_keys(kind) as u32;
        let constants = |fused| {
            [
                wg,
                head_dim,
                subgroups,
                fused,
                heads_per_group,
                by_address,
                rolled,
            ]
        };
        let kernel = if kind == DeviceKind::Cpu && has_wide_loads(device) {
            ATTN_DECODE_WIDE
        } else {
            ATTN_DECODE
        };
        Ok(Self {
            pipeline: device.pipeline(kernel, &constants(0))?,
            fused: device.pipeline(kernel, &constants(1))?,
            split: Split::new(device, head_dim, kind, heads_per_group)?,
            head_dim,
            heads_per_group,
        })
    }

    /// Attention for tokens whose K/V `RopeKv` has stored. `longest`, the most positions a
    /// token attends to (its own included), sizes the split on GPUs; the result does not
    /// depend on it, since each run covers its share of the token's own positions.
    #[allow(clippy::too_many_arguments)]
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        o: &'a Buffer,
        s: AttnShape,
        longest: u32,
    ) -> Result<()> {
        // The rope table binding is unused here; any buffer fills it.
        self.record_split(
            rec,
            &self.pipeline,
            [qkv, o, steps],
            qkv,
            kv,
            s,
            None,
            longest,
        )
    }

    /// `RopeKv` and attention in one dispatch, for tokens that are each the only new token
    /// of their sequence (a decode step): each workgroup rotates its query and the new key
    /// and stores the key and value itself. No token may read (through a beam table) a
    /// position another token of the dispatch writes: nothing orders the two. `table` is as
    /// for [`RopeKv::record`]; `longest` as for [`record`](Self::record).
    #[allow(clippy::too_many_arguments)]
    pub fn record_fused<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        table: &'a Buffer,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        o: &'a Buffer,
        s: AttnShape,
        rope: RopeSpec,
        longest: u32,
    ) -> Result<()> {
        check_rope(s, rope)?;
        self.record_split(
            rec,
            &self.fused,
            [qkv, o, steps],
            table,
            kv,
            s,
            Some(rope),
            longest,
        )
    }

    /// One attention dispatch, and when it splits, the merge after it.
    #[allow(clippy::too_many_arguments)]
    fn record_split<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        pipeline: &Pipeline,
        [qkv, o, steps]: [&'a Buffer; 3],
        table: &'a Buffer,
        kv: KvLayer<'a>,
        s: AttnShape,
        rope: Option<RopeSpec>,
        longest: u32,
    ) -> Result<()> {
        let workgroups =
            head_workgroups(pipeline.name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        let runs = self.split.runs(workgroups * s.tokens, longest);
        record_attention(
            rec,
            pipeline,
            self.head_dim,
            [qkv, o, steps],
            &[table, &self.split.partials],
            kv,
            s,
            rope,
            [workgroups, s.tokens, runs],
            runs,
        )?;
        self.split.merge(rec, o, s, runs)
    }
}

/// Workgroups split decode attention aims at on a GPU: a few per core of the largest GPUs,
/// so that one token over a long context keeps all of them busy.
const GPU_SPLIT_GROUPS: u32 = 1024;
/// Workgroups split decode attention aims at on a CPU device: four per core of this host,
/// where the device runs. One token of SmolLM2 is three workgroups, one per KV head, which two
/// cores run as two then one; cut into six runs they share the work evenly. On lavapipe, per
/// layer with the merge: 512 tokens 347 -> 329 us, 1024 694 -> 549, 2048 1160 -> 930.
fn cpu_split_groups() -> u32 {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Fewest positions per run (`SPLIT_MIN` in `attn_split.glsl`).
const SPLIT_MIN: u32 = 256;

/// What split decode attention (`include/attn_split.glsl`) adds to a kernel: the partials
/// of its runs and the merge that combines them.
pub(crate) struct Split {
    merge: Arc<Pipeline>,
    /// Room for the partials of `max_groups` workgroups, one per query head each takes.
    pub(crate) partials: Buffer,
    /// Most workgroups a split dispatch may have.
    max_groups: u32,
    head_dim: u32,
}

/// Push constants of attn_merge.comp.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MergePush {
    tokens: u32,
    t0: u32,
    n_head: u32,
    splits: u32,
}

impl Split {
    /// For a kernel whose workgroups take `heads_per_group` query heads each.
    pub(crate) fn new(
        device: &Arc<Device>,
        head_dim: u32,
        kind: DeviceKind,
        heads_per_group: u32,
    ) -> Result<Self> {
        let max_groups = match kind {
            DeviceKind::Cpu => cpu_split_groups(),
            _ => GPU_SPLIT_GROUPS,
        };
        // A workgroup leaves one partial per query head it takes.
        let partials = max_groups as u64 * heads_per_group as u64;
        let bytes = partials * (head_dim as u64 / 4 + 1) * 16;
        Ok(Self {
            merge: device.pipeline(ATTN_MERGE, &[workgroup_size(device.info()), head_dim])?,
            partials: Buffer::new(
                device,
                BufferDesc::device_local("attention partials", bytes),
            )?,
            max_groups,
            head_dim,
        })
    }

    /// Runs per (head, token) for `workgroups` (head, token) pairs over at most `longest`
    /// positions each: enough to fill the device, none shorter than `SPLIT_MIN`.
    pub(crate) fn runs(&self, workgroups: u32, longest: u32) -> u32 {
        let fill = self.max_groups / workgroups.max(1);
        fill.min(longest.div_ceil(SPLIT_MIN)).max(1)
    }

    /// Writes o for tokens s.t0 .. s.t0 + s.tokens from the partials of `runs` runs each
    /// (nothing when `runs` is 1: the kernel wrote o itself).
    pub(crate) fn merge<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        o: &'a Buffer,
        s: AttnShape,
        runs: u32,
    ) -> Result<()> {
        if runs <= 1 || s.tokens == 0 {
            return Ok(());
        }
        let merge = &self.merge;
        // The kernel before wrote a partial per (token, query head, run).
        let partials = s.tokens as u64 * s.n_head as u64 * runs as u64;
        let bytes = partials * (self.head_dim as u64 / 4 + 1) * 16;
        check_sizes(merge.name, &[("part", &self.partials, bytes)])?;
        let push = MergePush {
            tokens: s.tokens,
            t0: s.t0,
            n_head: s.n_head,
            splits: runs,
        };
        let items = s.tokens as u64 * s.n_head as u64 * (self.head_dim as u64 / 4);
        let groups = linear_groups(rec.device().info(), items, merge.workgroup_size());
        rec.dispatch(merge, &[&self.partials, o], &push, groups)
    }
}

/// Causal prefill attention for a run of one sequence's tokens at consecutive positions,
/// tiled over keys with an online softmax (see `attn_prefill.comp`).
pub struct AttnPrefill {
    pipeline: Arc<Pipeline>,
    head_dim: u32,
    /// Query heads per invocation (see `heads_per_workgroup`).
    heads: u32,
}

impl AttnPrefill {
    /// For a model whose KV heads are each shared by `group` query heads.
    pub fn new(device: &Device, head_dim: u32, group: u32) -> Result<Self> {
        Self::shaped_for(device, head_dim, group, device.info().kind)
    }

    /// The kernel shaped as it would be for a device of `kind` (tests run GPU shapes on
    /// lavapipe).
    pub(crate) fn shaped_for(
        device: &Device,
        head_dim: u32,
        group: u32,
        kind: DeviceKind,
    ) -> Result<Self> {
        let info = device.info();
        let (wg, tile, stage) = match kind {
            // One subgroup of queries; each lane loads one key and value of a tile as wide as
            // the subgroup and hands them round (at most BROADCAST_LANES).
            DeviceKind::Cpu if (1..=BROADCAST_LANES).contains(&info.subgroup.size) => {
                (info.subgroup.size, info.subgroup.size as u64, false)
            }
            _ => {
                // The K and V tiles live in shared memory: BC rows of head_dim each (also on a
                // CPU device whose subgroups are wider than the broadcast path handles).
                let mut tile = 32;
                while tile > 1
                    && 2 * tile * head_dim as u64 * 4 > info.limits.max_shared_memory as u64
                {
                    tile /= 2;
                }
                (workgroup_size(info).min(64), tile, true)
            }
        };
        if 2 * tile * head_dim as u64 * 4 > info.limits.max_shared_memory as u64 {
            return Err(VkError::Kernel {
                kernel: ATTN_PREFILL.name,
                message: format!("head_dim {head_dim} does not fit in shared memory"),
            });
        }
        // The broadcast path shares each key a lane hands round among the heads of its KV
        // group (lavapipe, SmolLM2 pp512: 9.0 -> 5.3 ms per layer and 256 tokens).
        let heads = if stage {
            1
        } else {
            heads_per_workgroup(kind, group)
        };
        let spec = [
            wg,
            head_dim,
            tile as u32,
            stage as u32,
            heads,
            wide_by_address() as u32,
        ];
        let kernel = if !stage && has_wide_loads(device) {
            ATTN_PREFILL_WIDE
        } else {
            ATTN_PREFILL
        };
        Ok(Self {
            pipeline: device.pipeline(kernel, &spec)?,
            head_dim,
            heads,
        })
    }

    /// Attention for tokens t0 .. t0 + tokens, which must be one sequence's consecutive
    /// positions (steps[t0] names the sequence and the first position).
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        o: &'a Buffer,
        s: AttnShape,
    ) -> Result<()> {
        // The shape first: its errors say more than a grouping mismatch would.
        s.check(self.pipeline.name, qkv, o, steps)?;
        let groups = [
            s.tokens.div_ceil(self.pipeline.workgroup_size()).max(1),
            head_workgroups(self.pipeline.name, self.heads, s.n_head, s.n_head_kv)?,
            1,
        ];
        record_attention(
            rec,
            &self.pipeline,
            self.head_dim,
            [qkv, o, steps],
            &[],
            kv,
            s,
            None,
            groups,
            1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::kv::{KvCache, KvPlacement, KvShape};
    use crate::testing::{assert_close, device, finish, random, run, upload};

    /// Heads of the test shape.
    #[derive(Clone, Copy)]
    struct Heads {
        n_head: u32,
        n_head_kv: u32,
        head_dim: u32,
    }

    impl Heads {
        fn stride(&self) -> usize {
            ((self.n_head + 2 * self.n_head_kv) * self.head_dim) as usize
        }
        fn kv_dim(&self) -> usize {
            (self.n_head_kv * self.head_dim) as usize
        }
        fn shape(&self, tokens: u32, t0: u32) -> AttnShape {
            AttnShape {
                tokens,
                t0,
                n_head: self.n_head,
                n_head_kv: self.n_head_kv,
                head_dim: self.head_dim,
            }
        }
    }

    /// Logical K/V of every row: [row][pos * kv_dim + i].
    struct Logical {
        k: Vec<Vec<f32>>,
        v: Vec<Vec<f32>>,
    }

    /// Rotates q and k heads of `qkv` and appends k, v at each token's row and position, as
    /// `rope_kv.comp` does.
    fn reference_rope_kv(
        qkv: &mut [f32],
        kv: &mut Logical,
        steps: &[StepToken],
        h: Heads,
        rot_dim: usize,
        table: &[[f32; 2]],
    ) {
        let (nh, nkv, hd) = (h.n_head as usize, h.n_head_kv as usize, h.head_dim as usize);
        for (row, st) in qkv.chunks_mut(h.stride()).zip(steps) {
            let (qk, v) = row.split_at_mut((nh + nkv) * hd);
            ops::rope(
                qk,
                &[st.pos],
                nh + nkv,
                hd,
                rot_dim,
                RopeLayout::Gptj,
                table,
            );
            let at = st.pos as usize * h.kv_dim();
            kv.k[st.row as usize][at..at + nkv * hd].copy_from_slice(&qk[nh * hd..]);
            kv.v[st.row as usize][at..at + nkv * hd].copy_from_slice(v);
        }
    }

    /// Causal attention of every token over its sequence's history, in f64; `source(t, p)`
    /// is the row holding position p for token t.
    fn reference_attention(
        qkv: &[f32],
        kv: &Logical,
        steps: &[StepToken],
        h: Heads,
        source: &dyn Fn(usize, usize) -> usize,
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (h.n_head as usize, h.n_head_kv as usize, h.head_dim as usize);
        let mut out = vec![0f32; steps.len() * nh * hd];
        for (t, st) in steps.iter().enumerate() {
            let n_kv = st.pos as usize + 1;
            for hh in 0..nh {
                let kvh = hh / (nh / nkv);
                let at = |p: usize| (p * nkv + kvh) * hd;
                let q = &qkv[t * h.stride() + hh * hd..][..hd];
                let scores: Vec<f64> = (0..n_kv)
                    .map(|p| {
                        let kr = &kv.k[source(t, p)][at(p)..][..hd];
                        q.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..hd {
                    let acc: f64 = (0..n_kv)
                        .map(|p| e[p] * kv.v[source(t, p)][at(p) + d] as f64)
                        .sum();
                    out[t * nh * hd + hh * hd + d] = (acc / sum) as f32;
                }
            }
        }
        out
    }

    /// A cache of `rows` rows whose blocks are scattered through the pool (another row takes
    /// and frees blocks in between), each holding `lens[r]` positions of random K/V that the
    /// returned `Logical` mirrors.
    fn scattered_cache(h: Heads, lens: &[usize], n_ctx: usize) -> (KvCache, Logical) {
        let dev = device().unwrap();
        let rows = lens.len() + 1;
        let shape = KvShape {
            n_layer: 1,
            n_head_kv: h.n_head_kv as usize,
            head_dim: h.head_dim as usize,
            blocks: rows * crate::kv::blocks_for(n_ctx) + 2,
            rows,
            n_ctx,
        };
        let mut cache = KvCache::new(&dev, shape, KvPlacement::Device).unwrap();
        let spare = rows - 1;
        let mut logical = Logical {
            k: Vec::new(),
            v: Vec::new(),
        };
        for (r, &len) in lens.iter().enumerate() {
            cache.append(spare, n_ctx.min(20)).unwrap();
            cache.append(r, len).unwrap();
            cache.clear(spare);
            logical
                .k
                .push(random(n_ctx * h.kv_dim(), 10 + r as u64, 1.0));
            logical
                .v
                .push(random(n_ctx * h.kv_dim(), 20 + r as u64, 1.0));
        }
        cache.sync_tables().unwrap();
        write_logical(&cache, &logical, lens, h);
        (cache, logical)
    }

    /// Stores positions 0..lens[r] of every row's logical K/V in their pool slots.
    fn write_logical(cache: &KvCache, kv: &Logical, lens: &[usize], h: Heads) {
        let layer = cache.layer(0);
        let bytes = h.kv_dim() as u64 * 4;
        let tables: Vec<u32> = layer
            .tables
            .download(lens.len() * layer.max_blocks as usize)
            .unwrap();
        for (r, &len) in lens.iter().enumerate() {
            for p in 0..len {
                let block = tables[r * layer.max_blocks as usize + p / BLOCK] as usize;
                let slot = (block * BLOCK + p % BLOCK) as u64;
                let at = p * h.kv_dim();
                layer
                    .k
                    .upload(slot * bytes, &kv.k[r][at..][..h.kv_dim()])
                    .unwrap();
                layer
                    .v
                    .upload(slot * bytes, &kv.v[r][at..][..h.kv_dim()])
                    .unwrap();
            }
        }
    }

    /// Reads positions 0..len of `row` back from the pool.
    fn read_row(cache: &KvCache, row: usize, len: usize, h: Heads) -> (Vec<f32>, Vec<f32>) {
        let layer = cache.layer(0);
        let tables: Vec<u32> = layer
            .tables
            .download((row + 1) * layer.max_blocks as usize)
            .unwrap();
        let all = |b: &Buffer| -> Vec<f32> { b.download((b.size() / 4) as usize).unwrap() };
        let (k, v) = (all(layer.k), all(layer.v));
        let (mut ko, mut vo) = (Vec::new(), Vec::new());
        for p in 0..len {
            let block = tables[row * layer.max_blocks as usize + p / BLOCK] as usize;
            let at = (block * BLOCK + p % BLOCK) * h.kv_dim();
            ko.extend_from_slice(&k[at..at + h.kv_dim()]);
            vo.extend_from_slice(&v[at..at + h.kv_dim()]);
        }
        (ko, vo)
    }

    const BLOCK: usize = crate::kv::BLOCK_TOKENS;

    /// Runs rope_kv then decode or prefill attention for `tokens` new tokens of one sequence
    /// already holding `pos0` positions in scattered blocks, and checks the output and the
    /// cache against the reference.
    fn check(decode: bool, tokens: u32, pos0: u32, n_head: u32, n_head_kv: u32, head_dim: u32) {
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            check_shaped(kind, decode, tokens, pos0, n_head, n_head_kv, head_dim);
        }
    }

    /// [`check`] with the kernels shaped for a device of `kind`.
    fn check_shaped(
        kind: DeviceKind,
        decode: bool,
        tokens: u32,
        pos0: u32,
        n_head: u32,
        n_head_kv: u32,
        head_dim: u32,
    ) {
        let Some(dev) = device() else { return };
        let h = Heads {
            n_head,
            n_head_kv,
            head_dim,
        };
        let (rot_dim, n_ctx) = (head_dim - 4, (pos0 + tokens + 3) as usize);
        let (mut cache, mut logical) = scattered_cache(h, &[pos0 as usize], n_ctx);
        cache.append(0, tokens as usize).unwrap();
        cache.sync_tables().unwrap();
        let steps: Vec<StepToken> = (0..tokens).map(|t| StepToken::new(0, pos0 + t)).collect();
        let mut qkv = random(tokens as usize * h.stride(), 3, 1.5);
        let table = ops::rope_table(n_ctx, rot_dim as usize, 10000.0);
        let qkv_b = upload(&dev, &qkv);
        let table_b = Buffer::from_slice(&dev, "t", &table).unwrap();
        let steps_b = Buffer::from_slice(&dev, "steps", &steps).unwrap();
        let o = upload(&dev, &vec![0f32; (tokens * n_head * head_dim) as usize]);

        let rope_kv = RopeKv::new(&dev).unwrap();
        let rope = RopeSpec {
            rot_dim,
            layout: RopeLayout::Gptj,
        };
        let s = h.shape(tokens, 0);
        let decode_kernel =
            AttnDecode::shaped_for(&dev, head_dim, n_head / n_head_kv, kind).unwrap();
        let prefill_kernel =
            AttnPrefill::shaped_for(&dev, head_dim, n_head / n_head_kv, kind).unwrap();
        let layer = cache.layer(0);
        let fused = decode && tokens == 1;
        let longest = pos0 + tokens;
        run(&dev, |rec| {
            if fused {
                decode_kernel
                    .record_fused(rec, &qkv_b, &table_b, layer, &steps_b, &o, s, rope, longest)
                    .unwrap();
                return;
            }
            rope_kv
                .record(rec, &qkv_b, &table_b, layer, &steps_b, s, rope)
                .unwrap();
            if decode {
                decode_kernel
                    .record(rec, &qkv_b, layer, &steps_b, &o, s, longest)
                    .unwrap();
            } else {
                prefill_kernel
                    .record(rec, &qkv_b, layer, &steps_b, &o, s)
                    .unwrap();
            }
        });
        let qkv_before = qkv.clone();

        reference_rope_kv(&mut qkv, &mut logical, &steps, h, rot_dim as usize, &table);
        let what = format!(
            "{} tokens={tokens} pos0={pos0} heads={n_head}/{n_head_kv} hd={head_dim} ({kind:?} shape)",
            if decode { "decode" } else { "prefill" }
        );
        let valid = (pos0 + tokens) as usize * h.kv_dim();
        let exact = |_| 1e-6;
        // The fused kernel rotates in registers and leaves qkv as it was.
        let qkv_want = if fused { &qkv_before } else { &qkv };
        assert_close(
            &format!("{what}: qkv"),
            &qkv_b.download(qkv.len()).unwrap(),
            qkv_want,
            exact,
        );
        let (k_got, v_got) = read_row(&cache, 0, (pos0 + tokens) as usize, h);
        assert_close(
            &format!("{what}: k cache"),
            &k_got,
            &logical.k[0][..valid],
            exact,
        );
        assert_close(
            &format!("{what}: v cache"),
            &v_got,
            &logical.v[0][..valid],
            exact,
        );
        let want = reference_attention(&qkv, &logical, &steps, h, &|_, _| 0);
        // Softmax weights sum to 1 and |v| <= 1, so outputs are O(1): f32 exp and sums over
        // at most a few hundred positions stay within a few ulps times the length.
        assert_close(&what, &o.download(want.len()).unwrap(), &want, |_| 2e-5);
        finish(&dev);
    }

    #[test]
    fn decode_attention_matches_reference() {
        check(true, 1, 0, 4, 4, 16);
        check(true, 1, 37, 6, 2, 24);
        check(true, 2, 130, 9, 3, 64);
        // Long enough for GPU shapes to split positions over workgroups (a short last run).
        check(true, 1, 1100, 9, 3, 64);
        check(true, 2, 700, 6, 2, 32);
    }

    #[test]
    fn prefill_attention_matches_reference() {
        check(false, 1, 0, 2, 1, 16);
        check(false, 13, 0, 6, 2, 24);
        check(false, 70, 9, 6, 3, 32);
        check(false, 33, 40, 9, 3, 64);
    }

    /// One decode step for three sequences of different lengths, one of them reading part of
    /// its history through a beam table from another row (the indirect KV cache).
    #[test]
    fn batched_decode_reads_each_sequence_and_beam_table() {
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            batched_decode_shaped(kind, [33, 5, 40]);
            // GPU shapes split the long sequences' positions; the short one has idle runs.
            batched_decode_shaped(kind, [633, 5, 640]);
        }
    }

    fn batched_decode_shaped(kind: DeviceKind, lens: [usize; 3]) {
        let Some(dev) = device() else { return };
        let h = Heads {
            n_head: 6,
            n_head_kv: 2,
            head_dim: 32,
        };
        let n_ctx = lens[2] + 8;
        let (mut cache, mut logical) = scattered_cache(h, &lens, n_ctx);
        for r in 0..lens.len() {
            cache.append(r, 1).unwrap();
        }
        cache.sync_tables().unwrap();
        // Row 2's sequence took positions 0..30 from row 0 (its ancestor's lane), and the
        // rest, including its new position, from its own row. As in beam search, it reads
        // nothing that another sequence writes in the same step (row 0 writes position
        // lens[0]).
        let beam_rows: Vec<u32> = (0..=lens[2]).map(|p| if p < 30 { 0 } else { 2 }).collect();
        let mut beams: Vec<u32> = beam_rows.clone();
        beams.resize(n_ctx, 0);
        let base = cache.set_beams(2, &beams).unwrap();
        let mut steps: Vec<StepToken> = lens
            .iter()
            .enumerate()
            .map(|(r, &len)| StepToken::new(r as u32, len as u32))
            .collect();
        steps[2].beam = base;

        let mut qkv = random(steps.len() * h.stride(), 4, 1.5);
        let table = ops::rope_table(n_ctx, 16, 10000.0);
        let qkv_b = upload(&dev, &qkv);
        let table_b = Buffer::from_slice(&dev, "t", &table).unwrap();
        let steps_b = Buffer::from_slice(&dev, "steps", &steps).unwrap();
        let o = upload(
            &dev,
            &vec![0f32; steps.len() * (h.n_head * h.head_dim) as usize],
        );
        let rope = RopeSpec {
            rot_dim: 16,
            layout: RopeLayout::Gptj,
        };
        let s = h.shape(steps.len() as u32, 0);
        let attn = AttnDecode::shaped_for(&dev, h.head_dim, h.n_head / h.n_head_kv, kind).unwrap();
        let layer = cache.layer(0);
        // One new token per sequence: the fused kernel rotates and stores K/V itself.
        run(&dev, |rec| {
            let longest = lens[2] as u32 + 1;
            attn.record_fused(rec, &qkv_b, &table_b, layer, &steps_b, &o, s, rope, longest)
                .unwrap();
        });
        reference_rope_kv(&mut qkv, &mut logical, &steps, h, 16, &table);
        let source = |t: usize, p: usize| if t == 2 { beam_rows[p] as usize } else { t };
        let want = reference_attention(&qkv, &logical, &steps, h, &source);
        assert_close(
            &format!("batched decode, lengths {lens:?} ({kind:?} shape)"),
            &o.download(want.len()).unwrap(),
            &want,
            |_| 2e-5,
        );
        finish(&dev);
    }

    #[test]
    fn shapes_are_checked() {
        let Some(dev) = device() else { return };
        let h = Heads {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
        };
        let (cache, _) = scattered_cache(h, &[4], 8);
        let buf = upload(&dev, &[0.0; 1024]);
        let kernel = AttnPrefill::new(&dev, 16, 2).unwrap();
        // Built for two query heads per KV head, as a CPU device groups them.
        let decode = AttnDecode::shaped_for(&dev, 16, 2, DeviceKind::Cpu).unwrap();
        let mut rec = Recorder::new(&dev).unwrap();
        let err = kernel
            .record(&mut rec, &buf, cache.layer(0), &buf, &buf, h.shape(40, 0))
            .unwrap_err();
        assert!(err.to_string().contains("holds"), "{err}");
        let bad = AttnShape {
            n_head_kv: 3,
            ..h.shape(4, 0)
        };
        let err = kernel
            .record(&mut rec, &buf, cache.layer(0), &buf, &buf, bad)
            .unwrap_err();
        assert!(err.to_string().contains("do not divide"), "{err}");
        let three = AttnShape {
            n_head: 3,
            n_head_kv: 1,
            ..h.shape(1, 0)
        };
        let err = decode
            .record(&mut rec, &buf, cache.layer(0), &buf, &buf, three, 1)
            .unwrap_err();
        assert!(err.to_string().contains("query heads per KV head"), "{err}");
    }
}
