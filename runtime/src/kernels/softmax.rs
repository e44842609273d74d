//! Row softmax: one workgroup per row.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::SOFTMAX;

use super::{check_sizes, workgroup_size};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SoftmaxPush {
    n: u32,
    scale: f32,
}

pub struct Softmax {
    pipeline: Arc<Pipeline>,
}

impl Softmax {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(SOFTMAX, &[workgroup_size(device.info())])?,
        })
    }

    /// y = softmax(scale * x) over each row of x, y [rows, n].
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        y: &'a Buffer,
        rows: u32,
        n: u32,
        scale: f32,
    ) -> Result<()> {
        let bytes = rows as u64 * n as u64 * 4;
        check_sizes(SOFTMAX.name, &[("x", x, bytes), ("y", y, bytes)])?;
        rec.dispatch(
            &self.pipeline,
            &[x, y],
            &SoftmaxPush { n, scale },
            [rows, 1, 1],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};

    #[test]
    fn softmax_matches_reference_and_survives_large_logits() {
        let Some(dev) = device() else { return };
        let kernel = Softmax::new(&dev).unwrap();
        for &(rows, n, scale) in &[
            (1, 1, 1.0),
            (3, 7, 1.0),
            (2, 64, 0.125),
            (5, 97, 1.0),
            (2, 4099, 1.0),
        ] {
            // Logits near 100 overflow exp() unless the maximum is subtracted first.
            let x: Vec<f32> = random(rows * n, 6, 8.0).iter().map(|v| v + 100.0).collect();
            let (xb, yb) = (upload(&dev, &x), zeros(&dev, rows * n));
            run(&dev, |rec| {
                kernel
                    .record(rec, &xb, &yb, rows as u32, n as u32, scale)
                    .unwrap()
            });
            let want = ops::softmax(&x, n, scale);
            let got = yb.download::<f32>(rows * n).unwrap();
            assert!(
                got.iter().all(|v| v.is_finite()),
                "softmax produced a non-finite value"
            );
            assert_close(&format!("softmax {rows}x{n}"), &got, &want, |i| {
                2e-6 * want[i] + 1e-9
            });
        }
        finish(&dev);
    }
}
