//! Whole-tensor dequantization to f32, eight values per invocation. It runs each format's
//! GLSL include on its own, which is how the includes are checked against `hearth-quant`.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::{
    check_sizes, format_kernels, linear_groups, matrix_bytes, workgroup_size, WeightFormat,
};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct DequantPush {
    chunks: u32,
}

pub struct Dequant {
    pipeline: Arc<Pipeline>,
    format: WeightFormat,
}

impl Dequant {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let kernel = format_kernels(format).dequant;
        Ok(Self {
            pipeline: device.pipeline(kernel, &[workgroup_size(device.info())])?,
            format,
        })
    }

    /// out [n] = the `n` values packed in `w` (whole blocks).
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a Buffer,
        out: &'a Buffer,
        n: u32,
    ) -> Result<()> {
        let bytes = matrix_bytes(self.pipeline.name, self.format, 1, n as u64)?;
        check_sizes(
            self.pipeline.name,
            &[("w", w, bytes), ("out", out, n as u64 * 4)],
        )?;
        let chunks = n / 8;
        let groups = linear_groups(
            rec.device().info(),
            chunks as u64,
            self.pipeline.workgroup_size(),
        );
        rec.dispatch(&self.pipeline, &[w, out], &DequantPush { chunks }, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::weight_buffer;
    use crate::testing::{device, finish, random, run, zeros};

    /// Every format's GLSL dequantization equals the Rust reference bit for bit, on data that
    /// reaches every level (random values with outliers, constant blocks, zeros, negatives).
    #[test]
    fn glsl_dequantization_is_bit_identical_to_rust() {
        let Some(dev) = device() else { return };
        for format in WeightFormat::ALL {
            let kernel = Dequant::new(&dev, format).unwrap();
            // 7 blocks of 64 (odd, so Q8's 34-byte blocks end mid-word) plus special rows.
            let n = 7 * 64;
            let mut values = random(n, 31, 2.0);
            values[3] = 40.0;
            values[70] = -0.0;
            for v in &mut values[128..192] {
                *v = 0.75;
            }
            for v in &mut values[192..256] {
                *v = 0.0;
            }
            let mut packed = vec![0u8; format.bytes_for(n).unwrap()];
            format.quantize(&values, &mut packed).unwrap();
            let mut want = vec![0f32; n];
            format.dequantize(&packed, &mut want).unwrap();

            let w = weight_buffer(&dev, "w", &packed).unwrap();
            let out = zeros(&dev, n);
            run(&dev, |rec| kernel.record(rec, &w, &out, n as u32).unwrap());
            let got = out.download::<f32>(n).unwrap();
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), e.to_bits(), "{format} value {i}: {g} vs {e}");
            }
        }
        finish(&dev);
    }
}
