//! `rope_kv`: rotates a step's queries and keys and stores its keys and values in the cache.

use std::sync::Arc;

use hearth_shaders::ROPE_KV;

use super::{AttnShape, RopeSpec, RopeTable};
use crate::kernels::{linear_groups, workgroup_size};
use crate::kv::KvLayer;
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result, VkError};

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
    /// in the cache; positions must lie within the rope table and the rows' block tables.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        kv: KvLayer<'a>,
        steps: &'a Buffer,
        s: AttnShape,
        rope: RopeTable<'a>,
    ) -> Result<()> {
        let RopeTable { table, spec: rope } = rope;
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

pub(super) fn check_rope(s: AttnShape, rope: RopeSpec) -> Result<()> {
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
