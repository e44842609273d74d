//! One small typed wrapper per kernel family: which variant to use, what it binds, its
//! push-constant struct and its dispatch size. Each checks buffer sizes against the shapes it
//! is given, so a wrong shape is an error naming the kernel and binding, never a stray read.

mod attention;
mod bandwidth;
mod elementwise;
mod embed;
mod matmul;
mod matvec;
mod norm;
mod rope;
mod softmax;

pub use attention::{AttnDecode, AttnPrefill, AttnShape, RopeKv, RopeSpec};
pub use bandwidth::ReadBandwidth;
pub use elementwise::{Binary, BinaryOp, Gelu, SwiGlu};
pub use embed::Embed;
pub use matmul::Matmul;
pub use matvec::{Matvec, MatvecArgs};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::{Rope, RopeShape};
pub use softmax::Softmax;

use crate::vk::{Buffer, DeviceInfo, DeviceKind, Result, VkError};

/// How a weight matrix is stored on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    F32,
    F16,
}

impl WeightFormat {
    pub fn bytes(self, elements: u64) -> u64 {
        match self {
            Self::F32 => elements * 4,
            Self::F16 => elements * 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }
}

/// Invocations per workgroup for kernels that reduce a row or stream elements. CPU devices
/// (lavapipe) run a workgroup as a loop over SIMD lanes, so smaller groups cost less per
/// dispatch; GPUs want several subgroups per group to hide latency.
pub fn workgroup_size(info: &DeviceInfo) -> u32 {
    let preferred = match info.kind {
        DeviceKind::Cpu => 64,
        _ => 256,
    };
    preferred.clamp(info.subgroup.size, info.limits.max_workgroup_invocations)
}

/// Checks that each (binding name, buffer, bytes needed) fits.
pub(crate) fn check_sizes(kernel: &'static str, needs: &[(&str, &Buffer, u64)]) -> Result<()> {
    for &(binding, buffer, bytes) in needs {
        if buffer.size() < bytes {
            return Err(VkError::Kernel {
                kernel,
                message: format!(
                    "binding `{binding}` (buffer `{}`) holds {} bytes but the shape needs {bytes}",
                    buffer.name(),
                    buffer.size()
                ),
            });
        }
    }
    Ok(())
}

/// Workgroup counts covering `invocations` one-dimensional work items, split over x and y so x
/// stays within the device limit (kernels rebuild the linear index with `linear_index()`).
pub(crate) fn linear_groups(info: &DeviceInfo, invocations: u64, workgroup: u32) -> [u32; 3] {
    let groups = invocations.div_ceil(workgroup as u64).max(1);
    let max_x = info.limits.max_workgroup_count[0] as u64;
    if groups <= max_x {
        [groups as u32, 1, 1]
    } else {
        [max_x as u32, groups.div_ceil(max_x) as u32, 1]
    }
}
