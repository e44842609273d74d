//! `attn_decode`: each new token against every position of its own sequence up to its own,
//! split over runs of positions where a few tokens would leave the device idle; and how
//! decode attention kernels (this one, InfiniGen's and H2O's) are shaped for a device.

use std::sync::Arc;

use hearth_shaders::kv_kernels;

use super::rope_kv::check_rope;
use super::{record_attention, AttnDispatch, AttnIo, AttnShape, RopeTable, Split};
use crate::kv::KvType;
use crate::vk::{Device, DeviceKind, Recorder, Result, VkError};
use crate::{has_wide_loads, head_workgroup_size, shaped_kind, wide_by_address, Pipe};

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
    pipeline: Pipe,
    /// The variant that also rotates and stores its token's query, key and value.
    fused: Pipe,
    split: Split,
    head_dim: u32,
    kv_type: KvType,
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
    /// For a model whose KV heads are each shared by `group` query heads, and a cache of
    /// `kv_type`.
    pub fn new(device: &Arc<Device>, head_dim: u32, group: u32, kv_type: KvType) -> Result<Self> {
        let kind = shaped_kind(device.info());
        let kernels = kv_kernels(kv_type);
        // On CPU devices positions are spread over one subgroup's lanes. The fused variant
        // also keeps q, k, v being rotated in shared memory.
        let heads_per_group = heads_per_workgroup(kind, group);
        let extra = 2 * heads_per_group + 2;
        let (wg, subgroups) =
            decode_shape(kernels.attn_decode.name, device, kind, head_dim, extra)?;
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
            kernels.attn_decode_wide
        } else {
            kernels.attn_decode
        };
        Ok(Self {
            pipeline: Pipe::specialized(device, kernel, &constants(0))?,
            fused: Pipe::specialized(device, kernel, &constants(1))?,
            split: Split::new(device, head_dim, kind, heads_per_group)?,
            head_dim,
            kv_type,
            heads_per_group,
        })
    }

    /// Attention for tokens whose K/V `RopeKv` has stored, each softmax with the layer's sink
    /// where `io.sinks` holds them. `longest`, the most positions a
    /// token attends to (its own included), sizes the split on GPUs; the result does not
    /// depend on it, since each run covers its share of the token's own positions.
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        io: AttnIo<'a>,
        s: AttnShape,
        longest: u32,
    ) -> Result<()> {
        self.record_split(rec, &self.pipeline, io, s, None, longest)
    }

    /// `RopeKv` and attention in one dispatch, for tokens that are each the only new token
    /// of their sequence (a decode step): each workgroup rotates its query and the new key
    /// and stores the key and value itself. No token may read (through a beam table) a
    /// position another token of the dispatch writes: nothing orders the two. `rope` is as
    /// for [`RopeKv::record`]; `longest` as for [`record`](Self::record).
    pub fn record_fused<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        io: AttnIo<'a>,
        s: AttnShape,
        rope: RopeTable<'a>,
        longest: u32,
    ) -> Result<()> {
        check_rope(self.fused.name, s, rope.spec)?;
        self.record_split(rec, &self.fused, io, s, Some(rope), longest)
    }

    /// One attention dispatch, and when it splits, the merge after it.
    fn record_split<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        pipeline: &Pipe,
        io: AttnIo<'a>,
        s: AttnShape,
        rope: Option<RopeTable<'a>>,
        longest: u32,
    ) -> Result<()> {
        let workgroups =
            head_workgroups(pipeline.name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        // A local layer's tokens attend to its window at most.
        let runs = self
            .split
            .runs(workgroups * s.tokens, s.scores.span(longest));
        // Without rope the table binding is unused; any buffer fills it.
        let table = rope.map_or(io.qkv, |r| r.table);
        let dispatch = AttnDispatch {
            pipeline,
            built_head_dim: self.head_dim,
            kv_type: self.kv_type,
            extra: &[table, &self.split.partials, io.sink_binding()],
            groups: [workgroups, s.tokens, runs],
            splits: runs,
        };
        record_attention(rec, dispatch, io, s, rope.map(|r| r.spec))?;
        self.split.merge(rec, io.o, io.sinks, s, runs)
    }
}
