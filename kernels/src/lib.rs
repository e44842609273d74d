//! Hearth's compute kernels on a Vulkan device: the device itself on ash and gpu-allocator
//! (`vk`), one small typed wrapper per kernel family (which variant to use, what it binds, its
//! push-constant struct and its dispatch size), and the paged KV cache's values on the device
//! (`kv`). Each wrapper checks buffer sizes against the shapes it is given, so a wrong shape
//! is an error naming the kernel and binding, never a stray read. Nothing here knows a model:
//! the Vulkan executor (`hearth-vulkan`) composes these into a model's step.

mod act_q8;
mod attention;
mod attn_encoder;
mod bandwidth;
mod build_info;
mod dequant;
mod elementwise;
mod embed;
pub mod h2o;
#[cfg(test)]
mod idot_tests;
pub mod infinigen;
mod matmul;
mod matvec;
mod moe;
mod norm;
mod pipe;
mod qkv_adjust;
#[cfg(test)]
mod shaped;
pub mod tune;
mod variants;

pub mod kv;
#[doc(hidden)]
pub mod testing;
// Vulkan is called through ash, whose calls are `unsafe`: here only, each with a SAFETY note.
#[allow(unsafe_code)]
pub mod vk;

pub use act_q8::{q8_act_bytes, ActQ8Host, QuantizeArgs, QuantizeQ8, Q8_ACT_BLOCK};
pub use attention::{
    AttnDecode, AttnIo, AttnPrefill, AttnShape, RopeKv, RopeSpec, RopeTable, Scores, StepToken,
};
pub use attn_encoder::{AttnEncoder, EncoderAttnIo, TextSpan};
pub use bandwidth::ReadBandwidth;
pub use build_info::build_info;
pub use dequant::Dequant;
pub use elementwise::{BiasAct, ExpertBiases, SwiGlu};
pub use embed::{Embed, EmbedArgs};
pub use kv::{KvCache, KvLayer};
pub use matmul::{Matmul, MatmulArgs, TILE as MATMUL_TILE};
pub use matvec::{ExpertSlots, Matvec, MatvecArgs};
pub use moe::{check_experts, max_tiles, slots_per_token, MoeCombine, MoeRoute, RouteOut};
pub use norm::{LayerNorm, NormShape, RmsNorm};
pub(crate) use pipe::Pipe;
pub use qkv_adjust::{QkvAdjust, QkvAdjustArgs, QkvHeads};
pub use variants::{Choices, MatvecVariant};

use std::sync::Arc;

use hearth_shaders::FormatKernels;

use crate::vk::{Buffer, BufferDesc, Device, DeviceInfo, DeviceKind, Result, VkError};

/// How a weight matrix is stored on the device: one of `hearth-quant`'s formats, each with its
/// own variant of the kernels that read weights.
pub use hearth_quant::Format as WeightFormat;

/// The kernels compiled for `format`, one field per kernel that reads weights.
pub(crate) fn format_kernels(format: WeightFormat) -> &'static FormatKernels {
    hearth_shaders::format_kernels(format)
}

/// Values per block as the kernels read them: the format's block, and at least 32 (plain
/// floats are read in blocks of 32, like the smallest quantized blocks). Rows of a weight
/// matrix are whole shader blocks.
pub fn shader_block(format: WeightFormat) -> u64 {
    hearth_model::min_row_block(format)
}

/// Bytes of a [rows, k] weight matrix in `format`, or an error naming the kernel when a row is
/// not whole blocks.
pub(crate) fn matrix_bytes(
    kernel: &'static str,
    format: WeightFormat,
    rows: u64,
    k: u64,
) -> Result<u64> {
    let block = shader_block(format);
    if k % block != 0 {
        return Err(VkError::Kernel {
            kernel,
            message: format!("rows of {k} values are not whole {block}-value {format} blocks"),
        });
    }
    Ok(rows * (k / format.block_size() as u64) * format.block_bytes() as u64)
}

/// Where a product's `m` output rows land in each token's output vector: at
/// `first..first + m` of vectors `width` values long. A matrix whose rows are runs of several
/// formats is one product per run, each filling its part of the one output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputCols {
    pub first: u32,
    /// 0 (the default): `m`, an output of the product's own.
    pub width: u32,
}

impl OutputCols {
    /// The output vectors' length for a product of `m` rows, checked to hold them; `kernel`
    /// names the error.
    pub fn width_for(self, kernel: &'static str, m: u32) -> Result<u32> {
        let width = if self.width == 0 { m } else { self.width };
        if self.first as u64 + m as u64 > width as u64 {
            return Err(VkError::Kernel {
                kernel,
                message: format!(
                    "rows {}..{} do not fit outputs of {width} values",
                    self.first,
                    self.first as u64 + m as u64
                ),
            });
        }
        Ok(width)
    }
}

/// Bytes a weight buffer carries past its data. Kernels read whole 16-byte words around a
/// block, and blocks of some formats (Q8: 34 bytes) straddle words, so the last block may read
/// a little past its end.
pub const WEIGHT_PADDING: u64 = 16;

/// Uploads packed weights in a device-local buffer with [`WEIGHT_PADDING`].
pub fn weight_buffer(device: &Arc<Device>, name: &str, bytes: &[u8]) -> Result<Buffer> {
    let buffer = Buffer::new(
        device,
        BufferDesc::device_local(name, bytes.len() as u64 + WEIGHT_PADDING),
    )?;
    buffer.upload(0, bytes)?;
    buffer.upload(bytes.len() as u64, &[0u8; WEIGHT_PADDING as usize])?;
    Ok(buffer)
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

/// Most lanes a CPU-device path hands loads round with subgroupBroadcast: `EACH_LANE` in
/// include/common.glsl names lanes 0 to 15, as the broadcast takes a constant lane.
pub(crate) const BROADCAST_LANES: u32 = 16;

/// Whether the device runs the `_wide` kernel variants, which read 8- and 16-byte words, through
/// buffer device addresses where `wide_by_address` allows (include/address.glsl): fewer and
/// cheaper loads where they differ per lane on a CPU device.
pub(crate) fn has_wide_loads(device: &Device) -> bool {
    let a = &device.info().arithmetic;
    a.shader_int64 && a.buffer_device_address
}

/// Whether the `_wide` variants read through the buffers' addresses (specialization constant
/// BY_ADDRESS) or from the bound buffers. A CPU device runs on this host, and lavapipe's LLVM
/// turns a per-lane load through an address into scalar loads (cheaper than a bound buffer's
/// checked ones) except where the host has AVX-512, whose gather instructions made the
/// products 2-3x slower on such a host.
pub(crate) fn wide_by_address() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// The kind of device kernels shape themselves for: the device's own, except in tests that
/// build GPU shapes on lavapipe (`shaped::shaped_as`).
pub(crate) fn shaped_kind(info: &DeviceInfo) -> DeviceKind {
    #[cfg(test)]
    if let Some(kind) = shaped::shaped_kind() {
        return kind;
    }
    info.kind
}

/// Invocations per workgroup for kernels shaped as for a device of `kind` that run one
/// workgroup per head: on CPU devices one subgroup, so no barriers (coroutine switches there)
/// and no cross-subgroup merge; on GPUs a full group.
pub(crate) fn head_workgroup_size(info: &DeviceInfo, kind: DeviceKind) -> u32 {
    match kind {
        DeviceKind::Cpu => info.subgroup.size.max(1),
        _ => workgroup_size(info),
    }
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
