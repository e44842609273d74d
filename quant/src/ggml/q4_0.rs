//! Q4_0: 4-bit symmetric quantization, blocks of 32 values in 18 bytes.
//!
//! `value = (q - 8) * d` with `q` in 0..=15 and `d` the block's f16 scale.

use bytemuck::{Pod, Zeroable};

use crate::formats::f16::Half;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// One block of 32 values (ggml's `block_q4_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: Half,
    /// Levels, two per byte: value `j < 16` is the low nibble of `qs[j]`, value `j + 16` the
    /// high nibble.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);

impl BlockQ4_0 {
    /// The block's 32 values, as ggml's `dequantize_row_q4_0`: the level is centred in integers,
    /// then multiplied by `d` in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        let (lo, hi) = out.split_at_mut(BLOCK_LEN / 2);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = f32::from((q & 0x0F) as i8 - 8) * d;
            *hi = f32::from((q >> 4) as i8 - 8) * d;
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
        // d = 0.5: level q is (q - 8) / 2.
        let mut qs = [0x88u8; 16]; // level 8 everywhere: zero
        qs[0] = 0xF0; // value 0: level 0, value 16: level 15
        qs[9] = 0x39; // value 9: level 9, value 25: level 3
        let block = BlockQ4_0 {
            d: Half::from_f32(0.5),
            qs,
        };
        let out = dequantize_all(BlockType::Q4_0, bytemuck::bytes_of(&block));
        assert_eq!(
            (out[0], out[16], out[9], out[25], out[1]),
            (-4.0, 3.5, 0.5, -2.5, 0.0)
        );
    }

    #[test]
    fn every_value_follows_the_formula() {
        let qs = bytes(3);
        let block = BlockQ4_0 {
            d: Half::from_bits(0xAE3B),
            qs,
        };
        let d = block.d.to_f32();
        let out = dequantize_all(BlockType::Q4_0, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let q = if i < 16 { qs[i] & 0xF } else { qs[i - 16] >> 4 };
            assert_eq!(
                got.to_bits(),
                ((q as i32 - 8) as f32 * d).to_bits(),
                "value {i}"
            );
        }
    }
}
