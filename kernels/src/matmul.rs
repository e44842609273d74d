//! Tiled matrix-matrix product for prefill: C [n, m] = X [n, k] times W [m, k] transposed;
//! and its experts variant, the same over each expert's slots of a mixture of experts.

use bytemuck::{Pod, Zeroable};

use super::{format_kernels, matrix_bytes, ExpertSlots, OutputCols, Pipe, WeightFormat};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};

/// Output tile edge, fixed in the shader: also the most slots of one expert a workgroup of
/// the experts variant takes (`moe_route`'s tile).
pub const TILE: u32 = 64;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulPush {
    n: u32,
    m: u32,
    k: u32,
    accumulate: u32,
    /// Where the rows land in c (`OutputCols`).
    c_first: u32,
    c_width: u32,
    /// Experts variant: rows of W per expert, and slots per row of x.
    expert_rows: u32,
    x_per: u32,
}

/// One product's activations and shape; the weights come beside it.
#[derive(Clone, Copy)]
pub struct MatmulArgs<'a> {
    /// [n, k]
    pub x: &'a Buffer,
    /// [n, m], or [n, cols.width] with the rows at `cols.first..`
    pub c: &'a Buffer,
    /// Rows of x and c (tokens).
    pub n: u32,
    /// Rows of W: columns of c.
    pub m: u32,
    pub k: u32,
    /// C += X W^T instead of C = X W^T.
    pub accumulate: bool,
    /// Where the rows land in c.
    pub cols: OutputCols,
}

pub struct Matmul {
    pipe: Pipe,
    format: WeightFormat,
    experts: bool,
}

impl Matmul {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        Self::variant(device, format, false)
    }

    /// The experts variant ([`record_experts`](Self::record_experts)).
    pub fn experts(device: &Device, format: WeightFormat) -> Result<Self> {
        Self::variant(device, format, true)
    }

    fn variant(device: &Device, format: WeightFormat, experts: bool) -> Result<Self> {
        let kernels = format_kernels(format);
        let kernel = match experts {
            true => kernels.matmul_experts,
            false => kernels.matmul,
        };
        Ok(Self {
            pipe: Pipe::specialized(device, kernel, &[])?,
            format,
            experts,
        })
    }

    /// C [slots, m] = the product of each slot's x row (slot / `x_per`) with its expert's m
    /// rows of W [experts * m, k], over `moe_route`'s tiles of at most [`TILE`] slots;
    /// `args.n` is the slots.
    pub fn record_experts<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a Buffer,
        args: MatmulArgs<'a>,
        slots: ExpertSlots<'a>,
    ) -> Result<()> {
        let name = self.pipe.name;
        if !self.experts || slots.x_per == 0 || args.accumulate {
            return Err(VkError::Kernel {
                kernel: name,
                message: "expert slots (at least one per row of x, no accumulation) go with \
                          the experts variant, and only with it"
                    .into(),
            });
        }
        let MatmulArgs {
            x,
            c,
            n,
            m,
            k,
            cols,
            ..
        } = args;
        let width = cols.width_for(name, m)?;
        let w_rows = slots.experts as u64 * m as u64;
        let bindings = [
            ("w", w, matrix_bytes(name, self.format, w_rows, k as u64)?),
            ("x", x, (n / slots.x_per) as u64 * k as u64 * 4),
            ("c", c, n as u64 * width as u64 * 4),
            ("tiles", slots.tiles, slots.max_tiles as u64 * 16),
            ("order", slots.order, 4),
        ];
        let push = MatmulPush {
            n,
            m,
            k,
            accumulate: 0,
            c_first: cols.first,
            c_width: width,
            expert_rows: m,
            x_per: slots.x_per,
        };
        let groups = [m.div_ceil(TILE), slots.max_tiles, 1];
        self.pipe.dispatch(rec, bindings, &push, groups)
    }

    /// C [n, m] = X [n, k] W [m, k]^T, or C += X W^T when `accumulate`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a Buffer,
        args: MatmulArgs<'a>,
    ) -> Result<()> {
        let name = self.pipe.name;
        if self.experts {
            return Err(VkError::Kernel {
                kernel: name,
                message: "the experts variant takes expert slots (record_experts)".into(),
            });
        }
        let MatmulArgs {
            x,
            c,
            n,
            m,
            k,
            accumulate,
            cols,
        } = args;
        let width = cols.width_for(name, m)?;
        let bindings = [
            ("w", w, matrix_bytes(name, self.format, m as u64, k as u64)?),
            ("x", x, n as u64 * k as u64 * 4),
            ("c", c, n as u64 * width as u64 * 4),
        ];
        let push = MatmulPush {
            n,
            m,
            k,
            accumulate: accumulate.into(),
            c_first: cols.first,
            c_width: width,
            expert_rows: 0,
            x_per: 0,
        };
        let groups = [m.div_ceil(TILE), n.div_ceil(TILE), 1];
        self.pipe.dispatch(rec, bindings, &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shader_block;
    use crate::testing::{
        assert_close, device, finish, random, run, upload, upload_weights, zeros,
    };
    use hearth_reference::ops;

    #[test]
    fn matmul_matches_reference_in_every_format() {
        let Some(dev) = device() else { return };
        for format in WeightFormat::ALL {
            let kernel = Matmul::new(&dev, format).unwrap();
            let block = shader_block(format) as usize;
            for &(n, m, blocks) in &[(1, 1, 1), (3, 5, 3), (65, 130, 2), (17, 70, 9)] {
                let k = blocks * block;
                let (w, wd) = upload_weights(&dev, &random(m * k, 16, 1.0), format);
                let x = random(n * k, 17, 1.0);
                let (xb, cb) = (upload(&dev, &x), zeros(&dev, n * m));
                let args = MatmulArgs {
                    x: &xb,
                    c: &cb,
                    n: n as u32,
                    m: m as u32,
                    k: k as u32,
                    accumulate: false,
                    cols: OutputCols::default(),
                };
                run(&dev, |rec| kernel.record(rec, &w, args).unwrap());
                // C[t, r] = sum_k X[t, k] W[r, k]: the same sums as a batched matvec.
                let want = ops::matvec(&wd, &x, m, k);
                let mag = ops::matvec_magnitude(&wd, &x, m, k);
                assert_close(
                    &format!("matmul {format} {n}x{m}x{k}"),
                    &cb.download(n * m).unwrap(),
                    &want,
                    |i| 4e-7 * mag[i] * (k as f32).log2().max(1.0) + 1e-7,
                );
            }
        }
        finish(&dev);
    }
}
