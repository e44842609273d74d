//! Q4_0: 4-bit symmetric quantization, blocks of 32 values in 18 bytes (4.5 bits per weight).
//!
//! `value = (q - 8) * d` with `q` in 0..=15 and `d` the block's f16 scale. The layout is GGUF's
//! Q4_0 byte for byte, and so are the blocks the quantizer writes: it follows ggml's reference
//! rule (see [`BlockQ4_0::quantize`]). GLSL twin: `shaders/glsl/include/quant/q4_0.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant;
use super::Rounding;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// Levels: `q` is in `0..LEVELS`, and level `LEVELS / 2` is zero.
pub const LEVELS: u8 = 16;

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

super::block_codec!(BlockQ4_0, BLOCK_LEN);

impl BlockQ4_0 {
    /// The block with scale `d` and levels `q` (each below [`LEVELS`]; higher bits are
    /// dropped).
    pub fn pack(d: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let qs = std::array::from_fn(|j| (q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        BlockQ4_0 { d, qs }
    }

    /// The stored level of value `j` (the value is `(level - 8) * d`).
    pub fn level(&self, j: usize) -> u8 {
        (self.qs[j % 16] >> (4 * (j / 16))) & 0x0F
    }

    /// Quantizes 32 finite values (the caller checks them) exactly as ggml's
    /// `quantize_row_q4_0_ref`, whatever `rounding`, so the bytes are those llama.cpp writes
    /// without an importance matrix: see [`symmetric_levels`].
    pub fn quantize(src: &[f32; BLOCK_LEN], _rounding: Rounding) -> Self {
        let (d, q) = symmetric_levels(src, LEVELS);
        Self::pack(d, &q)
    }

    /// Quantizes 32 finite values with a weight per value, as ggml's `quantize_row_q4_0_impl`
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

/// ggml's reference rule for its symmetric formats of `levels` levels (Q4_0: 16, Q5_0: 32),
/// with level `levels / 2` zero: the value of largest magnitude (the first, on a tie) sets
/// `d = w / -(levels / 2)`, so it gets level 0; every value gets
/// `min(levels - 1, trunc(v * (1 / d) + levels / 2 + 0.5))`, in f32 with the scale before
/// its rounding to f16 (an all-zero block: `d = 0`, every level `levels / 2`). Not the
/// nearest level to the stored scale: ggml's own rounding, kept so the bytes are ggml's.
pub(super) fn symmetric_levels(src: &[f32; BLOCK_LEN], levels: u8) -> (Half, [u8; BLOCK_LEN]) {
    let mut extreme = 0.0f32;
    for &v in src {
        if v.abs() > extreme.abs() {
            extreme = v;
        }
    }
    let half = f32::from(levels / 2);
    let d = extreme / -half;
    let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
    let top = i32::from(levels - 1);
    // `as i32` truncates toward zero, as ggml's cast to an integer does; the sum is positive.
    let q = src.map(|v| ((v * inv + (half + 0.5)) as i32).min(top) as u8);
    (Half::from_f32(d), q)
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
