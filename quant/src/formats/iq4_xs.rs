//! IQ4_XS: super-blocks of 256 values in 136 bytes (4.25 bits per weight). Each 32 values
//! index IQ4_NL's table of 16 non-linear levels with 4 bits, scaled by the super-block's f16
//! `d` times a 6-bit integer of its own stored offset by 32: `value = d * (s - 32) * LEVELS[q]`.
//!
//! The layout is GGUF's IQ4_XS byte for byte, and so are the blocks the quantizer writes: it
//! follows ggml's `quantize_iq4_xs` (see [`BlockIq4Xs::quantize_weighted`]).
//! GLSL twin: `shaders/glsl/include/quant/iq4_xs.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::iq4_nl::{block_scale, levels_times, nearest_level};
use super::kquant::{importance_weight, nearest_int, sum_squares, QK_K};
use super::Rounding;

/// Values that share one 6-bit scale.
const SUB: usize = 32;

/// One super-block (ggml's `block_iq4_xs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq4Xs {
    pub d: Half,
    /// The high two bits of each 32's scale, two bits per 32, lowest first (a little-endian
    /// u16).
    pub scales_h: [u8; 2],
    /// The low four bits: 32 `2i` in the low nibble of byte `i`, `2i + 1` in the high.
    pub scales_l: [u8; QK_K / 64],
    /// Each 32's indices as IQ4_NL packs a block's.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockIq4Xs>() == 136);

super::block_codec!(BlockIq4Xs, QK_K);

impl BlockIq4Xs {
    /// The stored scale of 32 `ib`, 0..=63: 32 above the signed multiplier of `d`.
    pub fn scale(&self, ib: usize) -> u8 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let high = (u16::from_le_bytes(self.scales_h) >> (2 * ib)) & 3;
        low | (high as u8) << 4
    }

    /// Quantizes 256 finite values as `llama-quantize` does without an importance matrix
    /// (each value weighted by its square), whatever `rounding`.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        Self::quantize_with(src, |_, x| x * x)
    }

    /// Quantizes 256 finite values with an importance per value (a column of llama.cpp's
    /// imatrix), as ggml's `quantize_iq4_xs` does given one: each value's error counts by its
    /// importance times `sqrt(sigma2 + x^2)`, `sigma2` twice the super-block's mean square.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        let sigma2 = sum_squares(src) * (2.0 / QK_K as f32);
        Self::quantize_with(src, |j, x| importance_weight(importance[j], sigma2, x))
    }

    /// ggml's `quantize_row_iq4_nl_impl` for a super-block: each 32's scale fitted as IQ4_NL
    /// fits a block's, the super-block scale `d` the largest of them over -32, each 32's
    /// scale rounded to a multiple of `d` in -32..=31, and every value the level nearest it
    /// under its rounded scale. `weight(j, x)` is value `j`'s weight.
    fn quantize_with(src: &[f32; QK_K], weight: impl Fn(usize, f32) -> f32) -> Self {
        let mut scales = [0.0f32; QK_K / SUB];
        let mut largest = 0.0f32;
        for (ib, (xb, scale)) in src.chunks_exact(SUB).zip(&mut scales).enumerate() {
            let Ok(xb) = <&[f32; SUB]>::try_from(xb) else {
                continue;
            };
            let weights = std::array::from_fn(|j| weight(SUB * ib + j, xb[j]));
            *scale = block_scale(xb, &weights);
            if scale.abs() > largest.abs() {
                largest = *scale;
            }
        }
        let d = -largest / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut block = BlockIq4Xs {
            d: Half::from_f32(d),
            ..Self::zeroed()
        };
        let mut high = 0u16;
        for (ib, &scale) in scales.iter().enumerate() {
            let l = nearest_int(id * scale).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let index = |j: usize| nearest_level(idl * src[SUB * ib + j]);
            for j in 0..16 {
                block.qs[16 * ib + j] = index(j) | index(j + 16) << 4;
            }
            let stored = (l + 32) as u8;
            block.scales_l[ib / 2] |= (stored & 0x0F) << (4 * (ib % 2));
            high |= u16::from(stored >> 4) << (2 * ib);
        }
        block.scales_h = high.to_le_bytes();
        block
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }

    /// As ggml's `dequantize_row_iq4_xs`: each 32's scale is `d * (s - 32)`, in f32.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (ib, out) in out.chunks_exact_mut(SUB).enumerate() {
            let dl = d * f32::from(self.scale(ib) as i8 - 32);
            if let Ok(out) = <&mut [f32; SUB]>::try_from(out) {
                levels_times(dl, &self.qs[16 * ib..16 * ib + 16], out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_super_block_is_zero_with_ggml_bytes() {
        let b = BlockIq4Xs::quantize(&[0.0; QK_K], Rounding::Search);
        // ggml: d = -0/32 (f16 -0), every scale 0 + 32, every index the level nearest 0.
        assert_eq!(b.d.to_bits(), 0x8000);
        assert!((0..8).all(|ib| b.scale(ib) == 32));
        assert!(b.qs.iter().all(|&q| q == 0x88));
        let mut out = [1.0; QK_K];
        b.dequantize(&mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn scales_pack_six_bits_each() {
        let mut b = BlockIq4Xs::zeroed();
        b.scales_l = [0x21, 0x43, 0x65, 0x87];
        b.scales_h = 0b11_10_01_00_11_10_01_00u16.to_le_bytes();
        let got: Vec<u8> = (0..8).map(|ib| b.scale(ib)).collect();
        assert_eq!(got, [0x01, 0x12, 0x23, 0x34, 0x05, 0x16, 0x27, 0x38]);
    }
}
