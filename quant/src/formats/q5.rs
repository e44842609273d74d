//! Q5: 5-bit asymmetric quantization, blocks of 64 values in 44 bytes (5.5 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=31, `d` the block's scale and `m` its base, both f16.
//! The low four bits of each level are laid out as in Q4B64; the fifth bit of value `j` is bit
//! `j` of `qh`, a little-endian u64. GLSL twin: `shaders/glsl/include/quant/q5.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::q4b64::{nibble, pack_nibbles};
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 64;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 32;

/// One block of 64 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ5 {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Low four bits, two per byte: value `j < 32` in the low nibble of `qs[j]`, value `j + 32`
    /// in the high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
    /// Fifth bits, a little-endian u64: bit `j` belongs to value `j`.
    pub qh: [u8; BLOCK_LEN / 8],
}

const _: () = assert!(size_of::<BlockQ5>() == 44);

super::block_codec!(BlockQ5, BLOCK_LEN);

impl BlockQ5 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let mut qh = 0u64;
        for (j, &q) in q.iter().enumerate() {
            qh |= u64::from((q >> 4) & 1) << j;
        }
        BlockQ5 {
            d,
            m,
            qs: pack_nibbles(q),
            qh: qh.to_le_bytes(),
        }
    }

    /// The level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        let high = (u64::from_le_bytes(self.qh) >> j) & 1;
        nibble(&self.qs, j) | (high as u8) << 4
    }

    /// The block's 64 values: `q * d + m` in f32, a multiply then an add.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        super::dequantize_levels(self.d, self.m, |j| self.level(j), out);
    }

    /// Quantizes 64 finite values (the caller checks them).
    pub fn quantize(src: &[f32; BLOCK_LEN], rounding: Rounding) -> Self {
        let fit = fit::asymmetric(src, LEVELS, rounding);
        Self::pack(fit.d, fit.m, &fit.q)
    }

    /// Quantizes 64 finite values with each value's error weighted by `weights` (from an
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
        // Values at the nibble boundaries and at the byte boundaries of the fifth-bit mask.
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[7], q[8], q[31], q[32], q[63]) = (0x1A, 0x10, 0x01, 0x15, 0x13, 0x1F);
        let block = BlockQ5::pack(Half::from_f32(0.5), Half::from_f32(-8.0), &q);
        let mut want_qs = [0u8; 32];
        (want_qs[0], want_qs[8], want_qs[31]) = (0x3A, 0x01, 0xF5);
        assert_eq!(block.qs, want_qs);
        // Fifth bits of values 0, 7, 31, 32 and 63.
        assert_eq!(block.qh, [0x81, 0, 0, 0x80, 0x01, 0, 0, 0x80]);
        let out = dequantize_format(Format::Q5, bytemuck::bytes_of(&block));
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) * 0.5 - 8.0, "value {j}");
        }
    }

    #[test]
    fn levels_round_trip() {
        for seed in 0..8 {
            let q = bytes::<BLOCK_LEN>(seed).map(|b| b % LEVELS);
            let block = BlockQ5::pack(Half::ZERO, Half::ZERO, &q);
            assert_eq!(std::array::from_fn(|j| block.level(j)), q);
        }
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<44>(8);
        let block: BlockQ5 = *bytemuck::from_bytes(&raw);
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let qh = u64::from_le_bytes(std::array::from_fn(|i| raw[36 + i]));
        let mut out = [0.0; BLOCK_LEN];
        block.dequantize(&mut out);
        for (j, got) in out.iter().enumerate() {
            let low = if j < 32 {
                raw[4 + j] & 0xF
            } else {
                raw[4 + j - 32] >> 4
            };
            let q = low | (((qh >> j) & 1) as u8) << 4;
            assert_eq!(got.to_bits(), (f32::from(q) * d + m).to_bits(), "value {j}");
        }
    }
}
