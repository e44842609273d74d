//! Whole-tensor dequantization to f32, eight values per invocation. It runs each format's
//! GLSL include on its own, which is how the includes are checked against `hearth-quant`.

use bytemuck::{Pod, Zeroable};

use super::{format_kernels, matrix_bytes, Pipe, WeightFormat};
use crate::vk::{Buffer, Device, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct DequantPush {
    chunks: u32,
}

pub struct Dequant {
    pipe: Pipe,
    format: WeightFormat,
}

impl Dequant {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            pipe: Pipe::new(device, format_kernels(format).dequant)?,
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
        let bytes = matrix_bytes(self.pipe.name, self.format, 1, n as u64)?;
        let chunks = n / 8;
        let bindings = [("w", w, bytes), ("out", out, n as u64 * 4)];
        self.pipe
            .dispatch_items(rec, bindings, &DequantPush { chunks }, chunks as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{device, finish, random, run, zeros};
    use crate::weight_buffer;

    /// The `n` values `packed` holds, dequantized by `kernel`, are the Rust reference's bit for
    /// bit.
    fn assert_dequantizes_as_rust(dev: &Arc<Device>, kernel: &Dequant, packed: &[u8], n: usize) {
        let format = kernel.format;
        let mut want = vec![0f32; n];
        format.dequantize(packed, &mut want).unwrap();
        let w = weight_buffer(dev, "w", packed).unwrap();
        let out = zeros(dev, n);
        run(dev, |rec| kernel.record(rec, &w, &out, n as u32).unwrap());
        let got = out.download::<f32>(n).unwrap();
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), e.to_bits(), "{format} value {i}: {g} vs {e}");
        }
    }

    /// Every format's GLSL dequantization equals the Rust reference bit for bit, on data that
    /// reaches every level (random values with outliers, constant blocks, zeros, negatives).
    #[test]
    fn glsl_dequantization_is_bit_identical_to_rust() {
        let Some(dev) = device() else { return };
        for format in WeightFormat::ALL {
            let kernel = Dequant::new(&dev, format).unwrap();
            // 7 blocks of 64 (odd, so Q8's 34-byte blocks end mid-word) plus special rows; 7
            // super-blocks of the k-quants (Q3_K's and Q6_K's odd ones are 2-byte aligned).
            let n = 7 * if format.is_super_block() { 256 } else { 64 };
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
            assert_dequantizes_as_rust(&dev, &kernel, &packed, n);
        }
        finish(&dev);
    }

    /// The super-block formats' GLSL dequantization equals the Rust reference on random bytes,
    /// which reach scale, level and grid patterns the quantizer does not make (negative and extreme
    /// sub-block scales, every high-bit mask). Every f16 field is a random finite value.
    #[test]
    fn glsl_super_blocks_are_bit_identical_on_random_bytes() {
        let Some(dev) = device() else { return };
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for format in WeightFormat::ALL.into_iter().filter(|f| f.is_super_block()) {
            let kernel = Dequant::new(&dev, format).unwrap();
            let n = 5 * 256;
            let mut packed: Vec<u8> = (0..format.bytes_for(n).unwrap())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 32) as u8
                })
                .collect();
            // Clear each f16's top exponent bit so none is infinite or NaN.
            let halves: &[usize] = match format {
                WeightFormat::Q2_K => &[80, 82],
                WeightFormat::Q3_K => &[108],
                WeightFormat::Q4_K | WeightFormat::Q5_K => &[0, 2],
                WeightFormat::IQ4_XS
                | WeightFormat::IQ2_XXS
                | WeightFormat::IQ2_XS
                | WeightFormat::IQ2_S
                | WeightFormat::IQ3_XXS
                | WeightFormat::IQ3_S
                | WeightFormat::IQ1_S => &[0],
                // IQ1_M's f16 is the top nibbles of its last four u16: its top exponent bit
                // is bit 14 of the last.
                WeightFormat::IQ1_M => &[54],
                WeightFormat::TQ1_0 => &[52],
                WeightFormat::TQ2_0 => &[64],
                _ => &[208],
            };
            for block in packed.chunks_exact_mut(format.block_bytes()) {
                for &at in halves {
                    block[at + 1] &= 0xBF;
                }
            }
            assert_dequantizes_as_rust(&dev, &kernel, &packed, n);
        }
        finish(&dev);
    }
}
