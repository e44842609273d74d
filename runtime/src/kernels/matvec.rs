//! Matrix-vector product for decode: y[b] = W x[b] for a small batch of vectors.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{MATVEC_F16, MATVEC_F32};

use super::{check_sizes, WeightFormat};
use crate::vk::{Buffer, Device, DeviceKind, Pipeline, Recorder, Result, VkError};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatvecPush {
    m: u32,
    k: u32,
    flags: u32,
    eps: f32,
}

const NORM: u32 = 1;
const ACCUMULATE: u32 = 2;
const GATED: u32 = 4;

/// One matrix-vector product and the work folded into it (see `matvec.comp`).
#[derive(Clone, Copy)]
pub struct MatvecArgs<'a> {
    /// [m, k], or [2m, k] holding gate rows then up rows when `gated`.
    pub w: &'a Buffer,
    /// [batch, k]
    pub x: &'a Buffer,
    /// [batch, m]
    pub y: &'a Buffer,
    pub m: u32,
    pub k: u32,
    pub batch: u32,
    /// RMSNorm of x with this gain ([k]) and epsilon before the product.
    pub norm: Option<(&'a Buffer, f32)>,
    /// y += W x instead of y = W x.
    pub accumulate: bool,
    /// y = silu(W_gate x) * (W_up x).
    pub gated: bool,
}

impl<'a> MatvecArgs<'a> {
    /// y = W x, nothing folded in.
    pub fn plain(w: &'a Buffer, x: &'a Buffer, y: &'a Buffer, m: u32, k: u32, batch: u32) -> Self {
        Self {
            w,
            x,
            y,
            m,
            k,
            batch,
            norm: None,
            accumulate: false,
            gated: false,
        }
    }
}

pub struct Matvec {
    pipeline: Arc<Pipeline>,
    format: WeightFormat,
    rows_per_group: u32,
}

impl Matvec {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let kernel = match format {
            WeightFormat::F32 => MATVEC_F32,
            WeightFormat::F16 => MATVEC_F16,
        };
        let info = device.info();
        // On a CPU device a workgroup is one SIMD-wide subgroup, so reductions need no barrier
        // (a barrier switches coroutines there); on GPUs a wider group streams each row with
        // more loads in flight.
        let (workgroup, rows) = match info.kind {
            DeviceKind::Cpu => (info.subgroup.size, 8),
            _ => (128, 2),
        };
        let workgroup = workgroup.min(info.limits.max_workgroup_invocations);
        Ok(Self {
            pipeline: device.pipeline(kernel, &[workgroup, rows])?,
            format,
            rows_per_group: rows,
        })
    }

    pub fn record<'a>(&self, rec: &mut Recorder<'a>, a: MatvecArgs<'a>) -> Result<()> {
        let (m, k, batch) = (a.m as u64, a.k as u64, a.batch as u64);
        let w_rows = if a.gated { 2 * m } else { m };
        let mut needs = vec![
            ("w", a.w, self.format.bytes(w_rows * k)),
            ("x", a.x, batch * k * 4),
            ("y", a.y, batch * m * 4),
        ];
        if let Some((g, _)) = a.norm {
            needs.push(("norm gain", g, k * 4));
        }
        check_sizes(self.pipeline.name, &needs)?;
        if w_rows * k > u32::MAX as u64 {
            return Err(VkError::Kernel {
                kernel: self.pipeline.name,
                message: format!("{w_rows}x{k} has more than 2^32 elements"),
            });
        }
        let mut flags = 0;
        if a.norm.is_some() {
            flags |= NORM;
        }
        if a.accumulate {
            flags |= ACCUMULATE;
        }
        if a.gated {
            flags |= GATED;
        }
        let (gain, eps) = a.norm.unwrap_or((a.x, 0.0));
        let push = MatvecPush {
            m: a.m,
            k: a.k,
            flags,
            eps,
        };
        let groups = [a.m.div_ceil(self.rows_per_group), a.batch, 1];
        rec.dispatch(&self.pipeline, &[a.w, a.x, a.y, gain], &push, groups)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};
    use half::f16;

    /// Uploads `w` in `format`, returning the buffer and the values the device will see.
    pub(crate) fn weights(
        dev: &Arc<Device>,
        w: &[f32],
        format: WeightFormat,
    ) -> (Buffer, Vec<f32>) {
        match format {
            WeightFormat::F32 => (upload(dev, w), w.to_vec()),
            WeightFormat::F16 => {
                let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
                (
                    Buffer::from_slice(dev, "w", &h).unwrap(),
                    h.iter().map(|v| v.to_f32()).collect(),
                )
            }
        }
    }

    #[test]
    fn matvec_matches_reference_at_awkward_sizes() {
        let Some(dev) = device() else { return };
        for format in [WeightFormat::F32, WeightFormat::F16] {
            let kernel = Matvec::new(&dev, format).unwrap();
            for &(m, k, batch) in &[
                (1, 1, 1),
                (7, 3, 1),
                (13, 97, 2),
                (64, 64, 1),
                (257, 576, 3),
                (31, 4099, 1),
                (1536, 576, 1),
            ] {
                let (w, wd) = weights(&dev, &random(m * k, 14, 1.0), format);
                let x = random(batch * k, 15, 1.0);
                let (xb, yb) = (upload(&dev, &x), zeros(&dev, batch * m));
                run(&dev, |rec| {
                    let args = MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, batch as u32);
                    kernel.record(rec, args).unwrap()
                });
                let want = ops::matvec(&wd, &x, m, k);
                let mag = ops::matvec_magnitude(&wd, &x, m, k);
                // f32 accumulation: error grows like eps * sum |w x| (with room for ordering).
                assert_close(
                    &format!("matvec {format:?} {m}x{k}x{batch}"),
                    &yb.download(batch * m).unwrap(),
                    &want,
                    |i| 4e-7 * mag[i] * (k as f32).log2().max(1.0) + 1e-7,
                );
            }
        }
        finish(&dev);
    }

    #[test]
    fn folded_norm_residual_and_swiglu_match_reference() {
        let Some(dev) = device() else { return };
        let kernel = Matvec::new(&dev, WeightFormat::F16).unwrap();
        for &(m, k) in &[(5, 24), (37, 576), (19, 30)] {
            let (w, wd) = weights(&dev, &random(2 * m * k, 21, 1.0), WeightFormat::F16);
            let x = random(k, 22, 2.0);
            let gain = random(k, 23, 1.0);
            let residual = random(m, 24, 1.0);
            let (xb, gb) = (upload(&dev, &x), upload(&dev, &gain));
            let xn = ops::rmsnorm(&x, &gain, k, 1e-5);
            let mag = ops::matvec_magnitude(&wd, &xn, 2 * m, k);
            let tol = |i: usize| 1e-6 * (mag[i] + mag[i + m]) * (k as f32).log2() + 1e-5;

            // y = residual + W rmsnorm(x)
            let yb = upload(&dev, &residual);
            run(&dev, |rec| {
                let args = MatvecArgs {
                    norm: Some((&gb, 1e-5)),
                    accumulate: true,
                    ..MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, 1)
                };
                kernel.record(rec, args).unwrap()
            });
            let plain = ops::matvec(&wd, &xn, m, k);
            let want: Vec<f32> = plain.iter().zip(&residual).map(|(a, b)| a + b).collect();
            assert_close(
                &format!("norm+accumulate {m}x{k}"),
                &yb.download(m).unwrap(),
                &want,
                tol,
            );

            // y = silu(W_gate rmsnorm(x)) * (W_up rmsnorm(x))
            let yb = upload(&dev, &vec![0f32; m]);
            run(&dev, |rec| {
                let args = MatvecArgs {
                    norm: Some((&gb, 1e-5)),
                    gated: true,
                    ..MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, 1)
                };
                kernel.record(rec, args).unwrap()
            });
            let both = ops::matvec(&wd, &xn, 2 * m, k);
            let want = ops::swiglu(&both[..m], &both[m..]);
            // silu(g) * u: the error of g and u scaled by the other factor.
            let scale: Vec<f32> = (0..m)
                .map(|i| 1.0 + both[i].abs() + both[m + i].abs())
                .collect();
            assert_close(
                &format!("gated {m}x{k}"),
                &yb.download(m).unwrap(),
                &want,
                |i| tol(i) * scale[i],
            );
        }
        finish(&dev);
    }
}
