//! Q5_1: 5-bit asymmetric quantization, blocks of 32 values in 24 bytes.
//!
//! `value = q * d + m` with `q` in 0..=31, packed as in Q5_0 (nibbles plus a mask of fifth
//! bits), and `d`, `m` the block's f16 scale and base.

use bytemuck::{Pod, Zeroable};

use crate::formats::f16::Half;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

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

impl BlockQ5_1 {
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
