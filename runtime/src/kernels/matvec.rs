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
        // On a CPU device one workgroup of a few SIMD-wide subgroups per row group keeps the
        // dispatch cheap; on GPUs a wider group streams each row with more loads in flight.
        let (workgroup, rows) = match info.kind {
            DeviceKind::Cpu => (info.subgroup.size.max(8) * 4, 4),
            _ => (128, 2),
        };
        let workgroup = workgroup.min(info.limits.max_workgroup_invocations);
        Ok(Self {
            pipeline: device.pipeline(kernel, &[workgroup, rows])?,
            format,
            rows_per_group: rows,
        })
    }

    /// y [batch, m] = x [batch, k] times W [m, k] transposed.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a Buffer,
        x: &'a Buffer,
        y: &'a Buffer,
        m: u32,
        k: u32,
        batch: u32,
    ) -> Result<()> {
        check_sizes(
            self.pipeline.name,
            &[
                ("w", w, self.format.bytes(m as u64 * k as u64)),
                ("x", x, batch as u64 * k as u64 * 4),
                ("y", y, batch as u64 * m as u64 * 4),
            ],
        )?;
        if m as u64 * k as u64 > u32::MAX as u64 {
            return Err(VkError::Kernel {
                kernel: self.pipeline.name,
                message: format!("{m}x{k} has more than 2^32 elements"),
            });
        }
        let groups = [m.div_ceil(self.rows_per_group), batch, 1];
        rec.dispatch(&self.pipeline, &[w, x, y], &MatvecPush { m, k }, groups)
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
                    kernel
                        .record(rec, &w, &xb, &yb, m as u32, k as u32, batch as u32)
                        .unwrap()
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
}
