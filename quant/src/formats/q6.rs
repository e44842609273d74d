//! Q6: 6-bit asymmetric quantization, blocks of 64 values in 52 bytes (6.5 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=63, `d` the block's scale and `m` its base, both f16.
//! The low four bits of each level are laid out as in Q4B64; bits 4-5 of value `j` sit at bits
//! `2 * (j / 16)` of `qh[j % 16]`. GLSL twin: `shaders/glsl/include/quant/q6.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::q4b64::{nibble, pack_nibbles};
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 64;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 64;

/// One block of 64 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ6 {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Low four bits, two per byte: value `j < 32` in the low nibble of `qs[j]`, value `j + 32`
    /// in the high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
    /// Bits 4-5, four pairs per byte: those of value `j` are `(qh[j % 16] >> (2 * (j / 16))) & 3`.
    pub qh: [u8; BLOCK_LEN / 4],
}

const _: () = assert!(size_of::<BlockQ6>() == 52);

super::block_codec!(BlockQ6, BLOCK_LEN);

impl BlockQ6 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let mut qh = [0u8; BLOCK_LEN / 4];
        for (j, &q) in q.iter().enumerate() {
            qh[j % 16] |= ((q >> 4) & 3) << (2 * (j / 16));
        }
        BlockQ6 {
            d,
            m,
            qs: pack_nibbles(q),
            qh,
        }
    }

    /// The level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        let high = (self.qh[j % 16] >> (2 * (j / 16))) & 3;
        nibble(&self.qs, j) | high << 4
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
        // Values at the nibble boundaries and at each shift of the first and last `qh` bytes.
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[15], q[16], q[31]) = (0x3A, 0x15, 0x27, 0x0C);
        (q[32], q[47], q[48], q[63]) = (0x31, 0x2E, 0x10, 0x3F);
        let block = BlockQ6::pack(Half::from_f32(0.125), Half::from_f32(-4.0), &q);
        let mut want_qs = [0u8; 32];
        (want_qs[0], want_qs[15], want_qs[16], want_qs[31]) = (0x1A, 0xE5, 0x07, 0xFC);
        assert_eq!(block.qs, want_qs);
        let mut want_qh = [0u8; 16];
        want_qh[0] = 0b01_11_10_11; // bits 4-5 of values 48, 32, 16, 0: 1, 3, 2, 3
        want_qh[15] = 0b11_10_00_01; // of values 63, 47, 31, 15: 3, 2, 0, 1
        assert_eq!(block.qh, want_qh);
        let out = dequantize_format(Format::Q6, bytemuck::bytes_of(&block));
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) * 0.125 - 4.0, "value {j}");
        }
    }

    #[test]
    fn levels_round_trip() {
        for seed in 0..8 {
            let q = bytes::<BLOCK_LEN>(seed).map(|b| b % LEVELS);
            let block = BlockQ6::pack(Half::ZERO, Half::ZERO, &q);
            assert_eq!(std::array::from_fn(|j| block.level(j)), q);
        }
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<52>(9);
        let block: BlockQ6 = *bytemuck::from_bytes(&raw);
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let mut out = [0.0; BLOCK_LEN];
        block.dequantize(&mut out);
        for (j, got) in out.iter().enumerate() {
            let low = if j < 32 {
                raw[4 + j] & 0xF
            } else {
                raw[4 + j - 32] >> 4
            };
            let q = low | ((raw[36 + j % 16] >> (2 * (j / 16))) & 3) << 4;
            assert_eq!(got.to_bits(), (f32::from(q) * d + m).to_bits(), "value {j}");
        }
    }
}
