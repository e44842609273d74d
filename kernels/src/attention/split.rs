//! Split decode attention (`include/attn_split.glsl`): a token's positions cut into runs that
//! workgroups take apart, each leaving a partial (its running maximum, sum and output), and
//! `attn_merge`, which combines them.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::ATTN_MERGE;

use super::AttnShape;
use crate::vk::{Buffer, BufferDesc, Device, DeviceKind, Recorder, Result};
use crate::{workgroup_size, Pipe};

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
    merge: Pipe,
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
    sinks: u32,
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
            merge: Pipe::specialized(
                device,
                ATTN_MERGE,
                &[workgroup_size(device.info()), head_dim],
            )?,
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
    /// (nothing when `runs` is 1: the kernel wrote o itself), each softmax joined once by its
    /// query head's sink where `sinks` holds them ([n_head]).
    pub(crate) fn merge<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        o: &'a Buffer,
        sinks: Option<&'a Buffer>,
        s: AttnShape,
        runs: u32,
    ) -> Result<()> {
        if runs <= 1 || s.tokens == 0 {
            return Ok(());
        }
        // The kernel before wrote a partial per (token, query head, run).
        let partials = s.tokens as u64 * s.n_head as u64 * runs as u64;
        let bytes = partials * (self.head_dim as u64 / 4 + 1) * 16;
        let push = MergePush {
            tokens: s.tokens,
            t0: s.t0,
            n_head: s.n_head,
            splits: runs,
            sinks: sinks.is_some() as u32,
        };
        let items = s.tokens as u64 * s.n_head as u64 * (self.head_dim as u64 / 4);
        let bindings = [
            ("part", &self.partials, bytes),
            ("o", o, 0),
            // Without sinks the binding is unread; the partials fill it.
            ("sinks", sinks.unwrap_or(&self.partials), 0),
        ];
        self.merge.dispatch_items(rec, bindings, &push, items)
    }
}
