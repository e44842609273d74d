//! Rotary position embedding, in place, from a host-computed (cos, sin) table.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::ROPE;

use super::{check_sizes, linear_groups, workgroup_size};
use crate::cpu::ops::RopeLayout;
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result, VkError};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RopePush {
    heads: u32,
    head_dim: u32,
    rot_dim: u32,
    mode: u32,
    pairs: u32,
}

/// The shape RoPE rotates: x is [tokens, heads, head_dim]; the first `rot_dim` dimensions of
/// each head rotate, paired as `layout` says. The table holds `max_pos` positions.
#[derive(Clone, Copy, Debug)]
pub struct RopeShape {
    pub tokens: u32,
    pub heads: u32,
    pub head_dim: u32,
    pub rot_dim: u32,
    pub layout: RopeLayout,
    pub max_pos: u32,
}

pub struct Rope {
    pipeline: Arc<Pipeline>,
}

impl Rope {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(ROPE, &[workgroup_size(device.info())])?,
        })
    }

    /// Rotates `x` in place; `pos` ([tokens], u32) gives each token's position and `table`
    /// ([max_pos, rot_dim/2] of (cos, sin)) comes from `cpu::ops::rope_table`. Positions are
    /// not checked on the device: the caller keeps them below `max_pos`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        pos: &'a Buffer,
        table: &'a Buffer,
        s: RopeShape,
    ) -> Result<()> {
        if s.rot_dim % 2 != 0 || s.rot_dim > s.head_dim {
            return Err(VkError::Kernel {
                kernel: ROPE.name,
                message: format!(
                    "rot_dim {} must be even and at most head_dim {}",
                    s.rot_dim, s.head_dim
                ),
            });
        }
        let elements = s.tokens as u64 * s.heads as u64 * s.head_dim as u64;
        check_sizes(
            ROPE.name,
            &[
                ("x", x, elements * 4),
                ("pos", pos, s.tokens as u64 * 4),
                ("table", table, s.max_pos as u64 * s.rot_dim as u64 / 2 * 8),
            ],
        )?;
        let pairs = s.tokens as u64 * s.heads as u64 * s.rot_dim as u64 / 2;
        let push = RopePush {
            heads: s.heads,
            head_dim: s.head_dim,
            rot_dim: s.rot_dim,
            mode: match s.layout {
                RopeLayout::Neox => 0,
                RopeLayout::Gptj => 1,
            },
            pairs: pairs as u32,
        };
        let groups = linear_groups(rec.device().info(), pairs, self.pipeline.workgroup_size());
        rec.dispatch(&self.pipeline, &[x, pos, table], &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::testing::{assert_close, device, finish, random, run, upload};

    #[test]
    fn rope_matches_reference_in_both_layouts() {
        let Some(dev) = device() else { return };
        let kernel = Rope::new(&dev).unwrap();
        let max_pos = 5000;
        for layout in [RopeLayout::Neox, RopeLayout::Gptj] {
            for &(tokens, heads, head_dim, rot_dim) in &[
                (1, 1, 2, 2),
                (3, 9, 64, 64),
                (7, 3, 80, 32),
                (2, 5, 128, 128),
            ] {
                let table = ops::rope_table(max_pos, rot_dim, 10000.0);
                // Far positions check that angles stay exact where a GPU's sin/cos would not.
                let pos: Vec<u32> = (0..tokens as u32)
                    .map(|t| t * 613 % max_pos as u32)
                    .collect();
                let x = random(tokens * heads * head_dim, 7, 1.0);
                let xb = upload(&dev, &x);
                let pb = Buffer::from_slice(&dev, "pos", &pos).unwrap();
                let tb = Buffer::from_slice(&dev, "table", &table).unwrap();
                let shape = RopeShape {
                    tokens: tokens as u32,
                    heads: heads as u32,
                    head_dim: head_dim as u32,
                    rot_dim: rot_dim as u32,
                    layout,
                    max_pos: max_pos as u32,
                };
                run(&dev, |rec| {
                    kernel.record(rec, &xb, &pb, &tb, shape).unwrap()
                });
                let mut want = x.clone();
                ops::rope(&mut want, &pos, heads, head_dim, rot_dim, layout, &table);
                let got = xb.download(x.len()).unwrap();
                assert_close(
                    &format!("rope {layout:?} {tokens}x{heads}x{head_dim}/{rot_dim}"),
                    &got,
                    &want,
                    |_| 1e-6,
                );
            }
        }
        finish(&dev);
    }
}
