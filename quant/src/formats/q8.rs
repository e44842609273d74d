//! Q8: 8-bit symmetric quantization, blocks of 32 values in 34 bytes (8.5 bits per weight).
//!
//! `value = q * d` with `q` a signed byte and `d` the block's f16 scale. The layout is GGUF's
//! Q8_0 byte for byte, so Q8_0 tensors are used as they are. GLSL twin:
//! `shaders/glsl/include/quant/q8.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// The largest level magnitude the quantizer emits: levels are in `-MAX_LEVEL..=MAX_LEVEL`, so
/// -128 never appears (it still dequantizes, as in ggml).
pub const MAX_LEVEL: i8 = 127;

/// One block of 32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ8 {
    /// Scale.
    pub d: Half,
    /// Levels, one signed byte per value.
    pub qs: [i8; BLOCK_LEN],
}

const _: () = assert!(size_of::<BlockQ8>() == 34);

super::block_codec!(BlockQ8, BLOCK_LEN);

impl BlockQ8 {
    /// The block's 32 values, as ggml's `dequantize_row_q8_0`: `q * d` in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        for (&q, out) in self.qs.iter().zip(out) {
            *out = f32::from(q) * d;
        }
    }

    /// Quantizes 32 finite values (the caller checks them). [`Rounding::MinMax`] writes the
    /// bytes of ggml's `quantize_row_q8_0_ref`, as llama.cpp does: `d = absmax / 127`, and each
    /// level `round(v * (1 / d))` (ties away from zero) with the scale before its rounding to
    /// f16. [`Rounding::Search`] searches the scale, and its levels are the nearest to the
    /// stored scale, so its error is never above ggml's.
    pub fn quantize(src: &[f32; BLOCK_LEN], rounding: Rounding) -> Self {
        if rounding == Rounding::MinMax {
            let amax = src.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
            let d = amax / f32::from(MAX_LEVEL);
            let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
            // `as i8` saturates; |v * inv| is at most 127 plus a rounding error.
            let qs = src.map(|v| (v * inv).round() as i8);
            return BlockQ8 {
                d: Half::from_f32(d),
                qs,
            };
        }
        let fit = fit::symmetric(src, MAX_LEVEL, rounding);
        BlockQ8 {
            d: fit.d,
            qs: fit.q,
        }
    }

    /// Reference dot product `sum_j value_j * x_j` of the dequantized values: each product is
    /// exact in f64, and they are summed in f64 in index order.
    pub fn dot(&self, x: &[f32; BLOCK_LEN]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all, dequantize_format, quantize};
    use crate::{BlockType, Format};

    #[test]
    fn bit_positions() {
        // Levels are plain signed bytes after the f16 scale.
        let mut qs = [0i8; BLOCK_LEN];
        (qs[0], qs[31]) = (-127, 127);
        let block = BlockQ8 {
            d: Half::from_f32(0.5),
            qs,
        };
        let bytes = bytemuck::bytes_of(&block);
        assert_eq!(
            (bytes[0], bytes[1], bytes[2], bytes[33]),
            (0x00, 0x38, 0x81, 0x7F)
        );
        let out = dequantize_format(Format::Q8, bytes);
        assert_eq!((out[0], out[1], out[31]), (-63.5, 0.0, 63.5));
    }

    #[test]
    fn quantize_never_emits_minus_128() {
        // Blocks whose largest magnitude is negative, with both rounding rules.
        for rounding in [Rounding::MinMax, Rounding::Search] {
            for seed in 0..32 {
                let mut w: [f32; 32] = bytes::<32>(seed).map(|b| f32::from(b) / 255.0 - 0.5);
                w[seed as usize] = -3.0;
                let block = BlockQ8::quantize(&w, rounding);
                assert!(
                    block.qs.iter().all(|&q| q >= -MAX_LEVEL),
                    "{rounding:?} {seed}"
                );
                if rounding == Rounding::MinMax {
                    assert_eq!(
                        block.qs[seed as usize], -127,
                        "the extreme is the end level"
                    );
                }
            }
        }
    }

    #[test]
    fn min_max_rule() {
        // absmax 2.54: d = 0.02 (as f16), q = round(w / d).
        let mut w = [0.0f32; 32];
        (w[0], w[1], w[2]) = (2.54, -1.0, 0.011);
        let bytes = quantize(Format::Q8, &w, Rounding::MinMax);
        let block: &BlockQ8 = bytemuck::from_bytes(&bytes);
        assert_eq!(block.d, Half::from_f32(0.02));
        let d = block.d.to_f32();
        assert_eq!(f64::from(d), 0.020_004_272_460_937_5); // 0x251F
        assert_eq!(block.qs[..4], [127, -50, 1, 0]); // 2.54 / d = 126.97, -1 / d = -49.99
        let zeros = quantize(Format::Q8, &[0.0; 32], Rounding::Search);
        assert_eq!(zeros, [0; 34], "an all-zero block is all zeros");
    }

    #[test]
    fn worked_example() {
        let mut qs = [0i8; 32];
        qs[0] = 127;
        qs[1] = -128;
        qs[31] = -3;
        let block = BlockQ8 {
            d: Half::from_f32(0.25),
            qs,
        };
        let out = dequantize_all(BlockType::Q8_0, bytemuck::bytes_of(&block));
        assert_eq!(
            (out[0], out[1], out[2], out[31]),
            (31.75, -32.0, 0.0, -0.75)
        );
    }

    #[test]
    fn every_value_follows_the_formula() {
        let qs: [i8; 32] = bytemuck::cast(bytes::<32>(2));
        let block = BlockQ8 {
            d: Half::from_bits(0x1A3D),
            qs,
        };
        let d = block.d.to_f32();
        let out = dequantize_all(BlockType::Q8_0, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            assert_eq!(got.to_bits(), (qs[i] as f32 * d).to_bits(), "value {i}");
        }
    }
}
