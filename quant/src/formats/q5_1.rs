//! Q5_1: 5-bit asymmetric quantization, blocks of 32 values in 24 bytes (6 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=31, packed as in Q5_0 (nibbles plus a mask of fifth
//! bits), and `d`, `m` the block's f16 scale and base. The layout is GGUF's Q5_1 byte for byte,
//! and so are the blocks the quantizer writes (ggml's reference rule). GLSL twin:
//! `shaders/glsl/include/quant/q5_1.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant;
use super::q5_0::{level5, pack5};
use super::Rounding;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 32;

/// One block of 32 values (ggml's `block_q5_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Fifth bits, a little-endian u32: bit `j` belongs to value `j`.
    pub qh: [u8; 4],
    /// Low 4 bits, two per byte: value `j < 16` in the low nibble of `qs[j]`, value `j + 16` in
    /// the high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockQ5_1>() == 24);

super::block_codec!(BlockQ5_1, BLOCK_LEN);

impl BlockQ5_1 {
    /// The block with scale `d`, base `m` and levels `q` (each below [`LEVELS`]; higher bits
    /// are dropped).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let (qh, qs) = pack5(q);
        BlockQ5_1 { d, m, qh, qs }
    }

    /// The stored level of value `j`.
    pub fn level(&self, j: usize) -> u8 {
        level5(&self.qh, &self.qs, j)
    }

    /// Quantizes 32 finite values (the caller checks them) exactly as ggml's
    /// `quantize_row_q5_1_ref`, whatever `rounding`: `m = min`, `d = (max - min) / 31`, and
    /// each level `min(31, trunc((v - min) * (1 / d) + 0.5))` in f32 with the scale before its
    /// rounding to f16 (a constant block: `d = 0`, every level 0). The bytes are ggml's.
    pub fn quantize(src: &[f32; BLOCK_LEN], _rounding: Rounding) -> Self {
        let min = src.iter().copied().fold(f32::MAX, f32::min);
        let max = src.iter().copied().fold(f32::MIN, f32::max);
        let d = (max - min) / f32::from(LEVELS - 1);
        let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
        // `as u8` truncates toward zero, as ggml's cast does; the sum is positive.
        let q = src.map(|v| (((v - min) * inv + 0.5) as u8).min(LEVELS - 1));
        Self::pack(Half::from_f32(d), Half::from_f32(min), &q)
    }

    /// Quantizes 32 finite values with a weight per value, as ggml's `quantize_row_q5_1_impl`
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

    /// The block's 32 values, as ggml's `dequantize_row_q5_1`: `q * d + m` in f32, a multiply
    /// then an add.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        let m = self.m.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out.split_at_mut(BLOCK_LEN / 2);
        for (j, ((&q, lo), hi)) in self.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            *lo = f32::from((q & 0x0F) | (h0 << 4)) * d + m;
            *hi = f32::from((q >> 4) | (h1 << 4)) * d + m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    #[test]
    fn worked_example() {
        // d = 0.5, m = -8: level q is q/2 - 8.
        let mut qs = [0u8; 16];
        qs[0] = 0xA1; // value 0: low bits 1, value 16: low bits 10
        let qh = (1u32 << 16).to_le_bytes(); // fifth bit of value 16
        let block = BlockQ5_1 {
            d: Half::from_f32(0.5),
            m: Half::from_f32(-8.0),
            qh,
            qs,
        };
        let out = dequantize_all(BlockType::Q5_1, bytemuck::bytes_of(&block));
        assert_eq!(out[0], -7.5); // level 1
        assert_eq!(out[16], 5.0); // level 26
        assert_eq!(out[1], -8.0); // level 0
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<20>(5);
        let qh = [raw[0], raw[1], raw[2], raw[3]];
        let qs: [u8; 16] = std::array::from_fn(|j| raw[4 + j]);
        let block = BlockQ5_1 {
            d: Half::from_bits(0x2A8F),
            m: Half::from_bits(0xB0F1),
            qh,
            qs,
        };
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let mask = u32::from_le_bytes(qh);
        let out = dequantize_all(BlockType::Q5_1, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let low = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
            let q = low as u32 + 16 * ((mask >> i) & 1);
            assert_eq!(got.to_bits(), (q as f32 * d + m).to_bits(), "value {i}");
        }
    }
}
