//! Tiled matrix-matrix product for prefill: C [n, m] = X [n, k] times W [m, k] transposed.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::{check_sizes, format_kernels, matrix_bytes, OutputCols, WeightFormat};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

/// Output tile edge, fixed in the shader.
const TILE: u32 = 64;

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
    pipeline: Arc<Pipeline>,
    format: WeightFormat,
}

impl Matmul {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(format_kernels(format).matmul, &[])?,
            format,
        })
    }

    /// C [n, m] = X [n, k] W [m, k]^T, or C += X W^T when `accumulate`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a Buffer,
        args: MatmulArgs<'a>,
    ) -> Result<()> {
        let MatmulArgs {
            x,
            c,
            n,
            m,
            k,
            accumulate,
            cols,
        } = args;
        let width = cols.width_for(self.pipeline.name, m)?;
        check_sizes(
            self.pipeline.name,
            &[
                (
                    "w",
                    w,
                    matrix_bytes(self.pipeline.name, self.format, m as u64, k as u64)?,
                ),
                ("x", x, n as u64 * k as u64 * 4),
                ("c", c, n as u64 * width as u64 * 4),
            ],
        )?;
        let groups = [m.div_ceil(TILE), n.div_ceil(TILE), 1];
        rec.dispatch(
            &self.pipeline,
            &[w, x, c],
            &MatmulPush {
                n,
                m,
                k,
                accumulate: accumulate.into(),
                c_first: cols.first,
                c_width: width,
            },
            groups,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::kernels::shader_block;
    use crate::testing::{
        assert_close, device, finish, random, run, upload, upload_weights, zeros,
    };

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
