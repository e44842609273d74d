//! Q2: 2-bit asymmetric quantization, blocks of 32 values in 12 bytes (3.0 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=3, `d` the block's scale and `m` its base, both f16.
//! Four values share a byte, in planes: value `j` sits at bits `2 * (j / 8)` of byte `j % 8`.
//! GLSL twin: `shaders/glsl/include/quant/q2.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 4;

/// One block of 32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ2 {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Levels, four per byte: value `j` is `(qs[j % 8] >> (2 * (j / 8))) & 3`.
    pub qs: [u8; BLOCK_LEN / 4],
}

const _: () = assert!(size_of::<BlockQ2>() == 12);

super::block_codec!(BlockQ2, BLOCK_LEN);

impl BlockQ2 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let mut qs = [0u8; BLOCK_LEN / 4];
        for (j, &q) in q.iter().enumerate() {
            qs[j % 8] |= (q & 3) << (2 * (j / 8));
        }
        BlockQ2 { d, m, qs }
    }

    /// The level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        (self.qs[j % 8] >> (2 * (j / 8))) & 3
    }

    /// The block's 32 values: `q * d + m` in f32, a multiply then an add.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        super::dequantize_levels(self.d, self.m, |j| self.level(j), out);
    }

    /// Quantizes 32 finite values (the caller checks them).
    pub fn quantize(src: &[f32; BLOCK_LEN], rounding: Rounding) -> Self {
        let fit = fit::asymmetric(src, LEVELS, rounding);
        Self::pack(fit.d, fit.m, &fit.q)
    }

    /// Quantizes 32 finite values with each value's error weighted by `weights` (from an
    /// importance matrix; the caller checks them).
    pub fn quantize_weighted(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> Self {
        let fit = fit::asymmetric_weighted(src, weights, LEVELS);
        Self::pack(fit.d, fit.m, &fit.q)
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
    use crate::testutil::{bytes, dequantize_format};
    use crate::Format;

    #[test]
    fn bit_positions() {
        // One value at each plane and byte boundary, each with a distinct level.
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[7], q[8], q[15], q[16], q[31]) = (1, 2, 3, 1, 2, 3);
        let block = BlockQ2::pack(Half::from_f32(0.5), Half::from_f32(-1.0), &q);
        // Byte 0 holds values 0, 8, 16, 24 (bits 0-1, 2-3, 4-5, 6-7); byte 7 values 7, 15, 23, 31.
        let mut want = [0u8; 8];
        want[0] = 0b00_10_11_01;
        want[7] = 0b11_00_01_10;
        assert_eq!(block.qs, want);
        let bytes = bytemuck::bytes_of(&block);
        assert_eq!(
            &bytes[..4],
            &[0x00, 0x38, 0x00, 0xBC],
            "d = 0.5, m = -1 as LE f16"
        );
        let out = dequantize_format(Format::Q2, bytes);
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) * 0.5 - 1.0, "value {j}");
        }
    }

    #[test]
    fn levels_round_trip() {
        for seed in 0..8 {
            let q = bytes::<BLOCK_LEN>(seed).map(|b| b % LEVELS);
            let block = BlockQ2::pack(Half::ZERO, Half::ZERO, &q);
            assert_eq!(std::array::from_fn(|j| block.level(j)), q);
        }
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<12>(3);
        let block: BlockQ2 = *bytemuck::from_bytes(&raw);
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let mut out = [0.0; BLOCK_LEN];
        block.dequantize(&mut out);
        for (j, got) in out.iter().enumerate() {
            let q = (raw[4 + j % 8] >> (2 * (j / 8))) & 3;
            assert_eq!(got.to_bits(), (f32::from(q) * d + m).to_bits(), "value {j}");
        }
    }
}
