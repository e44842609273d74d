//! MXFP4 (OCP's microscaling FP4, GPT-OSS's experts): blocks of 32 values in 17 bytes (4.25
//! bits per weight), each value an e2m1 float (a sign, two exponent bits, one mantissa bit)
//! times the block's power-of-two scale, stored as a biased exponent byte (e8m0). The e2m1
//! values are kept doubled, as integers ([`LEVELS`]), and the scale halved:
//! `value = LEVELS[q] * 2^(e - 128)`.
//!
//! The layout is GGUF's MXFP4 byte for byte, and so are the blocks the quantizer writes
//! (ggml's `quantize_row_mxfp4_ref`, which `llama-quantize` runs with or without an importance
//! matrix). Blocks are byte-aligned only. GLSL twin: `shaders/glsl/include/quant/mxfp4.glsl`.

use bytemuck::{Pod, Zeroable};

use super::Rounding;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// The e2m1 values doubled, so that they are integers (ggml's `kvalues_mxfp4`); the scale is
/// halved to match.
pub const LEVELS: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One block (ggml's `block_mxfp4`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// The scale's exponent, biased by 127.
    pub e: u8,
    /// Value `j < 16` in the low nibble of `qs[j]`, value `j + 16` in the high.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockMxfp4>() == 17);

super::block_codec!(BlockMxfp4, BLOCK_LEN);

/// Half of 2^(e - 127), exactly, as ggml's `ggml_e8m0_to_fp32_half` (subnormal for e < 2).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = match e {
        0 | 1 => 0x0020_0000u32 << e,
        _ => u32::from(e - 1) << 23,
    };
    f32::from_bits(bits)
}

impl BlockMxfp4 {
    /// Quantizes 32 finite values as ggml's `quantize_row_mxfp4_ref`, whatever `rounding`:
    /// the exponent puts the largest magnitude in the top binade of the levels (its floor
    /// log2 less 2), and each value takes the level nearest it, the first on a tie.
    pub fn quantize(src: &[f32; BLOCK_LEN], _rounding: Rounding) -> Self {
        let amax = src.iter().fold(0.0f32, |m, &x| if m < x.abs() { x.abs() } else { m });
        // ggml converts the float to uint8_t through an int, as x86-64 does: values below
        // 2^-125, whose exponent would be negative, wrap.
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_half(e);
        let nearest = |x: f32| {
            let mut best = (0u8, (f32::from(LEVELS[0]) * d - x).abs());
            for (i, &l) in LEVELS.iter().enumerate().skip(1) {
                let err = (f32::from(l) * d - x).abs();
                if err < best.1 {
                    best = (i as u8, err);
                }
            }
            best.0
        };
        let qs = std::array::from_fn(|j| nearest(src[j]) | nearest(src[j + 16]) << 4);
        BlockMxfp4 { e, qs }
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; BLOCK_LEN]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }

    /// As ggml's `dequantize_row_mxfp4`: `level * d`, in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = e8m0_half(self.e);
        let (lo, hi) = out.split_at_mut(16);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = f32::from(LEVELS[usize::from(q & 0x0F)]) * d;
            *hi = f32::from(LEVELS[usize::from(q >> 4)]) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_is_a_halved_power_of_two() {
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(255), 2f32.powi(127));
    }

    #[test]
    fn levels_up_to_twelve_halves_of_the_scale_round_trip() {
        // amax 6 = 2^2.58: e = 2 - 2 + 127, d = 0.5, so the levels are the e2m1 values.
        let src: [f32; 32] = std::array::from_fn(|j| [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, -4.0, 6.0][j % 8]);
        let b = BlockMxfp4::quantize(&src, Rounding::Search);
        assert_eq!(b.e, 127);
        let mut out = [0.0; 32];
        b.dequantize(&mut out);
        assert_eq!(out, src);
    }
}
