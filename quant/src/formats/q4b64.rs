//! Q4B64: 4-bit asymmetric quantization, blocks of 64 values in 36 bytes (4.5 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=15, `d` the block's scale and `m` its base, both f16.
//! Q4 with twice the block: value `j < 32` is the low nibble of `qs[j]`, value `j + 32` the
//! high nibble. Q5 and Q6 keep their low four bits in this same layout.
//! GLSL twin: `shaders/glsl/include/quant/q4b64.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 64;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 16;

/// One block of 64 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ4B64 {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Levels, two per byte: value `j < 32` is the low nibble of `qs[j]`, value `j + 32` the
    /// high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockQ4B64>() == 36);

super::block_codec!(BlockQ4B64, BLOCK_LEN);

impl BlockQ4B64 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        BlockQ4B64 {
            d,
            m,
            qs: pack_nibbles(q),
        }
    }

    /// The level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        nibble(&self.qs, j)
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

/// The low four bits of 64 levels: value `j < 32` in the low nibble of byte `j`, value `j + 32`
/// in the high nibble.
pub(crate) fn pack_nibbles(q: &[u8; BLOCK_LEN]) -> [u8; BLOCK_LEN / 2] {
    std::array::from_fn(|j| (q[j] & 0x0F) | (q[j + 32] & 0x0F) << 4)
}

/// The low four bits of value `j` from [`pack_nibbles`]' bytes.
pub(crate) fn nibble(qs: &[u8; BLOCK_LEN / 2], j: usize) -> u8 {
    (qs[j % 32] >> (4 * (j / 32))) & 0x0F
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_format};
    use crate::Format;

    #[test]
    fn bit_positions() {
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[31], q[32], q[63]) = (0xA, 0x5, 0x3, 0xF);
        let block = BlockQ4B64::pack(Half::from_f32(2.0), Half::from_f32(0.5), &q);
        let mut want = [0u8; 32];
        (want[0], want[31]) = (0x3A, 0xF5); // value 32 over value 0, value 63 over value 31
        assert_eq!(block.qs, want);
        let out = dequantize_format(Format::Q4B64, bytemuck::bytes_of(&block));
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) * 2.0 + 0.5, "value {j}");
        }
    }

    #[test]
    fn levels_round_trip() {
        for seed in 0..8 {
            let q = bytes::<BLOCK_LEN>(seed).map(|b| b % LEVELS);
            let block = BlockQ4B64::pack(Half::ZERO, Half::ZERO, &q);
            assert_eq!(std::array::from_fn(|j| block.level(j)), q);
        }
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<36>(7);
        let block: BlockQ4B64 = *bytemuck::from_bytes(&raw);
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let mut out = [0.0; BLOCK_LEN];
        block.dequantize(&mut out);
        for (j, got) in out.iter().enumerate() {
            let q = if j < 32 {
                raw[4 + j] & 0xF
            } else {
                raw[4 + j - 32] >> 4
            };
            assert_eq!(got.to_bits(), (f32::from(q) * d + m).to_bits(), "value {j}");
        }
    }
}
