//! `attn_prefill`: causal attention for a run of one sequence's tokens, tiled over keys with
//! an online softmax.

use hearth_shaders::kv_kernels;

use super::decode::{head_workgroups, heads_per_workgroup};
use super::{record_attention, AttnDispatch, AttnIo, AttnShape};
use crate::kv::KvType;
use crate::vk::{Device, DeviceKind, Recorder, Result, VkError};
use crate::{has_wide_loads, shaped_kind, wide_by_address, workgroup_size, Pipe, BROADCAST_LANES};

/// Causal prefill attention for a run of one sequence's tokens at consecutive positions,
/// tiled over keys with an online softmax (see `attn_prefill.comp`).
pub struct AttnPrefill {
    pipeline: Pipe,
    head_dim: u32,
    kv_type: KvType,
    /// Query heads per invocation (see `heads_per_workgroup`).
    heads: u32,
}

impl AttnPrefill {
    /// For a model whose KV heads are each shared by `group` query heads, and a cache of
    /// `kv_type`.
    pub fn new(device: &Device, head_dim: u32, group: u32, kv_type: KvType) -> Result<Self> {
        let kernels = kv_kernels(kv_type);
        let info = device.info();
        let kind = shaped_kind(info);
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
                kernel: kernels.attn_prefill.name,
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
            kernels.attn_prefill_wide
        } else {
            kernels.attn_prefill
        };
        Ok(Self {
            pipeline: Pipe::specialized(device, kernel, &spec)?,
            head_dim,
            kv_type,
            heads,
        })
    }

    /// Attention for tokens t0 .. t0 + tokens, which must be one sequence's consecutive
    /// positions (steps[t0] names the sequence and the first position), each softmax with the
    /// layer's sink where `io.sinks` holds them.
    pub fn record<'a>(&self, rec: &mut Recorder<'a>, io: AttnIo<'a>, s: AttnShape) -> Result<()> {
        // The shape first: its errors say more than a grouping mismatch would.
        s.check(self.pipeline.name, io.qkv, io.o, io.steps)?;
        let groups = [
            s.tokens.div_ceil(self.pipeline.workgroup_size()).max(1),
            head_workgroups(self.pipeline.name, self.heads, s.n_head, s.n_head_kv)?,
            1,
        ];
        let dispatch = AttnDispatch {
            pipeline: &self.pipeline,
            built_head_dim: self.head_dim,
            kv_type: self.kv_type,
            extra: &[io.sink_binding()],
            groups,
            splits: 1,
        };
        record_attention(rec, dispatch, io, s, None)
    }
}
