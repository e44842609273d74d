//! Q4: 4-bit asymmetric quantization, blocks of 32 values in 20 bytes (5.0 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=15, `d` the block's scale and `m` its base (the value of
//! level 0, usually the block minimum), both f16. The layout is GGUF's Q4_1 byte for byte, so
//! Q4_1 tensors are used as they are. GLSL twin: `shaders/glsl/include/quant/q4.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant;
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 16;

/// One block of 32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ4 {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Levels, two per byte: value `j < 16` is the low nibble of `qs[j]`, value `j + 16` the
    /// high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockQ4>() == 20);

super::block_codec!(BlockQ4, BLOCK_LEN);

impl BlockQ4 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let qs = std::array::from_fn(|j| (q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        BlockQ4 { d, m, qs }
    }

    /// The level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        (self.qs[j % 16] >> (4 * (j / 16))) & 0x0F
    }

    /// The block's 32 values, as ggml's `dequantize_row_q4_1`: `q * d + m` in f32, a multiply
    /// then an add (no fused multiply-add), with `d` and `m` widened from f16 first.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let (lo, hi) = out.split_at_mut(BLOCK_LEN / 2);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = f32::from(q & 0x0F) * d + m;
            *hi = f32::from(q >> 4) * d + m;
        }
    }

    /// Quantizes 32 finite values (the caller checks them).
    pub fn quantize(src: &[f32; BLOCK_LEN], rounding: Rounding) -> Self {
        let fit = fit::asymmetric(src, LEVELS, rounding);
        Self::pack(fit.d, fit.m, &fit.q)
    }

    /// Quantizes 32 finite values with a weight per value, as ggml's `quantize_row_q4_1_impl`
    /// does with an importance matrix: scale and min from [`kquant::make_qkx2_quants`]'s
    /// weighted search.
    pub fn quantize_with_weights(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> Self {
        let mut q = [0u8; BLOCK_LEN];
        let nmax = i32::from(LEVELS - 1);
        let (d, min) = kquant::make_qkx2_quants(nmax, src, weights, &mut q, kquant::WEIGHTED_SEARCH);
        Self::pack(Half::from_f32(d), Half::from_f32(-min), &q)
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
    use crate::testutil::{bytes, check_table2, dequantize_all, dequantize_format, Table2};
    use crate::{BlockType, Format};

    #[test]
    fn bit_positions() {
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[15], q[16], q[31]) = (0xA, 0x5, 0x3, 0xF);
        let block = BlockQ4::pack(Half::from_f32(2.0), Half::from_f32(0.5), &q);
        let mut want = [0u8; 16];
        (want[0], want[15]) = (0x3A, 0xF5); // value 16 over value 0, value 31 over value 15
        assert_eq!(block.qs, want);
        let out = dequantize_format(Format::Q4, bytemuck::bytes_of(&block));
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) * 2.0 + 0.5, "value {j}");
        }
    }

    #[test]
    fn levels_round_trip() {
        for seed in 0..8 {
            let q = bytes::<BLOCK_LEN>(seed).map(|b| b % LEVELS);
            let block = BlockQ4::pack(Half::ZERO, Half::ZERO, &q);
            assert_eq!(std::array::from_fn(|j| block.level(j)), q);
        }
    }

    #[test]
    fn inferflow_table2_4_bit() {
        let want = Table2 {
            q: [0, 1, 2, 4, 5, 6, 7, 9, 10, 12, 14, 15],
            w: [
                "-1.000", "-0.833", "-0.667", "-0.333", "-0.167", "0.000", "0.167", "0.500",
                "0.667", "1.000", "1.333", "1.500",
            ],
            delta: [
                "0.000", "0.067", "0.067", "0.067", "0.033", "0.000", "0.067", "0.000", "0.033",
                "0.000", "0.033", "0.000",
            ],
            average: "0.031",
        };
        let level = |b: &[u8], j| bytemuck::from_bytes::<BlockQ4>(&b[..20]).level(j);
        check_table2(Format::Q4, LEVELS, level, &want);
    }

    #[test]
    fn worked_example() {
        // d = 0.5, m = -2: level q is -2 + q/2.
        let mut qs = [0u8; 16];
        qs[0] = 0x30; // value 0: level 0, value 16: level 3
        qs[5] = 0xF7; // value 5: level 7, value 21: level 15
        let block = BlockQ4 {
            d: Half::from_f32(0.5),
            m: Half::from_f32(-2.0),
            qs,
        };
        let out = dequantize_all(BlockType::Q4_1, bytemuck::bytes_of(&block));
        assert_eq!(out[0], -2.0);
        assert_eq!(out[16], -0.5);
        assert_eq!(out[5], 1.5);
        assert_eq!(out[21], 5.5);
        assert_eq!(out[1], -2.0);
    }

    #[test]
    fn every_value_follows_the_formula() {
        let qs = bytes(1);
        // Scale and base that are not short binary fractions, so rounding matters.
        let block = BlockQ4 {
            d: Half::from_bits(0x2E66),
            m: Half::from_bits(0xBC1F),
            qs,
        };
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let out = dequantize_all(BlockType::Q4_1, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let q = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
            assert_eq!(got.to_bits(), (q as f32 * d + m).to_bits(), "value {i}");
        }
    }
}
