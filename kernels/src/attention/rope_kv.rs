//! `rope_kv`: rotates a step's queries and keys and stores its keys and values in the cache.

use hearth_shaders::kv_kernels;

use super::{AttnShape, RopeSpec, RopeTable};
use crate::kv::{KvLayer, KvType};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};
use crate::{linear_groups, Pipe};

pub struct RopeKv {
    pipe: Pipe,
    kv_type: KvType,
}

impl RopeKv {
    /// For a cache of `kv_type`.
    pub fn new(device: &Device, kv_type: KvType) -> Result<Self> {
        let pipe = Pipe::new(device, kv_kernels(kv_type).rope_kv)?;
        Ok(Self { pipe, kv_type })
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
        let name = self.pipe.name;
        check_rope(name, s, rope)?;
        s.check(name, qkv, qkv, steps)?;
        kv.check_type(name, self.kv_type)?;
        check_group(name, s, self.kv_type)?;
        if s.tokens == 0 {
            return Ok(());
        }
        // Per token: a pair of each query head's dimensions, and each key and value head.
        let per_token = (s.n_head * s.head_dim / 2 + 2 * s.n_head_kv) as u64;
        let push = s.push(&kv, Some(rope));
        let groups = linear_groups(
            rec.device().info(),
            s.tokens as u64 * per_token,
            self.pipe.workgroup_size(),
        );
        rec.dispatch(
            &self.pipe,
            &[qkv, table, kv.k, kv.v, kv.tables, steps],
            &push,
            groups,
        )
    }
}

/// An error unless head_dim is a multiple of the values `kv_type` stores at once.
pub(super) fn check_group(kernel: &'static str, s: AttnShape, kv_type: KvType) -> Result<()> {
    let group = kv_type.group() as u32;
    if s.head_dim % group != 0 {
        return Err(VkError::Kernel {
            kernel,
            message: format!(
                "head_dim {} is not a multiple of {group}, which a {kv_type} cache stores at once",
                s.head_dim
            ),
        });
    }
    Ok(())
}

pub(super) fn check_rope(kernel: &'static str, s: AttnShape, rope: RopeSpec) -> Result<()> {
    if rope.rot_dim % 2 != 0 || rope.rot_dim > s.head_dim || s.head_dim % 2 != 0 {
        return Err(VkError::Kernel {
            kernel,
            message: format!(
                "rot_dim {} and head_dim {} must be even, rot_dim at most head_dim",
                rope.rot_dim, s.head_dim
            ),
        });
    }
    Ok(())
}
