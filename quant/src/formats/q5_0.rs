//! Q5_0: 5-bit symmetric quantization, blocks of 32 values in 22 bytes (5.5 bits per weight).
//!
//! `value = (q - 16) * d` with `q` in 0..=31: its low 4 bits are nibbles as in Q4_0, its fifth
//! bit comes from a 32-bit mask with one bit per value. The layout is GGUF's Q5_0 byte for byte,
//! and so are the blocks the quantizer writes (ggml's reference rule). GLSL twin:
//! `shaders/glsl/include/quant/q5_0.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant;
use super::Rounding;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// Levels: `q` is in `0..LEVELS`, and level `LEVELS / 2` is zero.
pub const LEVELS: u8 = 32;

/// One block of 32 values (ggml's `block_q5_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: Half,
    /// Fifth bits, a little-endian u32: bit `j` belongs to value `j`.
    pub qh: [u8; 4],
    /// Low 4 bits, two per byte: value `j < 16` in the low nibble of `qs[j]`, value `j + 16` in
    /// the high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockQ5_0>() == 22);

super::block_codec!(BlockQ5_0, BLOCK_LEN);

impl BlockQ5_0 {
    /// The block with scale `d` and levels `q` (each below [`LEVELS`]; higher bits are
    /// dropped).
    pub fn pack(d: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let (qh, qs) = pack5(q);
        BlockQ5_0 { d, qh, qs }
    }

    /// The stored level of value `j` (the value is `(level - 16) * d`).
    pub fn level(&self, j: usize) -> u8 {
        level5(&self.qh, &self.qs, j)
    }

    /// Quantizes 32 finite values (the caller checks them) exactly as ggml's
    /// `quantize_row_q5_0_ref`, whatever `rounding`: the rule of
    /// [`q4_0::symmetric_levels`](super::q4_0) with 32 levels.
    pub fn quantize(src: &[f32; BLOCK_LEN], _rounding: Rounding) -> Self {
        let (d, q) = super::q4_0::symmetric_levels(src, LEVELS);
        Self::pack(d, &q)
    }

    /// Quantizes 32 finite values with a weight per value, as ggml's `quantize_row_q5_0_impl`
    /// does with an importance matrix: the scale and levels of [`kquant::make_qx_quants`].
    pub fn quantize_with_weights(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> Self {
        let mut q = [0u8; BLOCK_LEN];
        let d = kquant::make_qx_quants(i32::from(LEVELS / 2), src, weights, &mut q);
        Self::pack(Half::from_f32(d), &q)
    }

    /// Reference dot product `sum_j value_j * x_j` of the dequantized values: each product is
    /// exact in f64, and they are summed in f64 in index order.
    pub fn dot(&self, x: &[f32; BLOCK_LEN]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }

    /// The block's 32 values, as ggml's `dequantize_row_q5_0`: the level is centred in integers,
    /// then multiplied by `d` in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out.split_at_mut(BLOCK_LEN / 2);
        for (j, ((&q, lo), hi)) in self.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            *lo = f32::from(((q & 0x0F) | (h0 << 4)) as i8 - 16) * d;
            *hi = f32::from(((q >> 4) | (h1 << 4)) as i8 - 16) * d;
        }
    }
}

/// The fifth-bit mask and the nibbles of 32 five-bit levels, as Q5_0 and Q5_1 store them.
pub(super) fn pack5(q: &[u8; BLOCK_LEN]) -> ([u8; 4], [u8; BLOCK_LEN / 2]) {
    let qs = std::array::from_fn(|j| (q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
    let qh = (0..BLOCK_LEN).fold(0u32, |m, j| m | u32::from((q[j] >> 4) & 1) << j);
    (qh.to_le_bytes(), qs)
}

/// Level `j` of a Q5_0 or Q5_1 block from its mask and nibbles.
pub(super) fn level5(qh: &[u8; 4], qs: &[u8; BLOCK_LEN / 2], j: usize) -> u8 {
    let low = (qs[j % 16] >> (4 * (j / 16))) & 0x0F;
    let high = ((u32::from_le_bytes(*qh) >> j) & 1) as u8;
    low | high << 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    #[test]
    fn worked_example() {
        // d = 0.25: level q is (q - 16) / 4.
        let mut qs = [0u8; 16];
        qs[2] = 0xF3; // value 2: low bits 3, value 18: low bits 15
        qs[15] = 0x0F; // value 15: low bits 15, value 31: low bits 0
                       // Fifth bit set for values 2, 15 and 31 (bits 2, 15, 31 of the little-endian mask).
        let qh = (1u32 << 2 | 1 << 15 | 1 << 31).to_le_bytes();
        let block = BlockQ5_0 {
            d: Half::from_f32(0.25),
            qh,
            qs,
        };
        let out = dequantize_all(BlockType::Q5_0, bytemuck::bytes_of(&block));
        assert_eq!(out[2], (19 - 16) as f32 * 0.25);
        assert_eq!(out[18], (15 - 16) as f32 * 0.25);
        assert_eq!(out[15], (31 - 16) as f32 * 0.25);
        assert_eq!(out[31], (16 - 16) as f32 * 0.25);
        assert_eq!(out[0], -4.0);
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<20>(4);
        let qh = [raw[0], raw[1], raw[2], raw[3]];
        let qs: [u8; 16] = std::array::from_fn(|j| raw[4 + j]);
        let block = BlockQ5_0 {
            d: Half::from_bits(0x3155),
            qh,
            qs,
        };
        let d = block.d.to_f32();
        let mask = u32::from_le_bytes(qh);
        let out = dequantize_all(BlockType::Q5_0, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let low = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
            let q = low as i32 + 16 * ((mask >> i) & 1) as i32;
            assert_eq!(got.to_bits(), ((q - 16) as f32 * d).to_bits(), "value {i}");
        }
    }
}
