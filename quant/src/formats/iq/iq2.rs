//! IQ2_XXS, IQ2_XS and IQ2_S (GGUF types 16, 17 and 22): about 2 bits per weight. Each group of
//! 8 values is a row of an E8-lattice grid of magnitudes (indexed by 8, 9 or 10 bits) with 8
//! signs, and each 32 (XXS) or 16 (XS, S) values share a 4-bit scale of the block's f16.

use bytemuck::{Pod, Zeroable};

use super::iq_grid::{scaled, signed_levels, IQ2S, IQ2XS, IQ2XXS, SIGNS7};
use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// One IQ2_XXS super-block (ggml's `block_iq2_xxs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq2Xxs {
    pub d: Half,
    /// Per 32 values, 8 bytes: four grid indices, then a little-endian u32 holding four 7-bit
    /// sign indices (bits 0..28) and the 4-bit scale (bits 28..32).
    pub qs: [u8; QK_K / 4],
}

const _: () = assert!(size_of::<BlockIq2Xxs>() == 66);

impl BlockIq2Xxs {
    /// As ggml's `dequantize_row_iq2_xxs`: each 32's scale is `d * (0.5 + s) / 4`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as signed grid levels (-43..=43) and a scale per 16 values (each 32's twice):
    /// `scales[j / 16] * levels[j]` is value `j` as [`Self::dequantize`] gives it.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        let groups = self.qs.chunks_exact(8).zip(levels.chunks_exact_mut(32));
        for ((q, levels), scales) in groups.zip(scales.chunks_exact_mut(2)) {
            let aux = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
            scales.fill(d * (0.5 + (aux >> 28) as f32) * 0.25);
            for (l, out) in levels.chunks_exact_mut(8).enumerate() {
                let signs = SIGNS7[(aux >> (7 * l) & 127) as usize];
                signed_levels(&IQ2XXS[usize::from(q[l])], signs, out);
            }
        }
    }
}

/// One IQ2_XS super-block (ggml's `block_iq2_xs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq2Xs {
    pub d: Half,
    /// Per 8 values a little-endian u16: the grid index (bits 0..9), the sign index (9..16).
    pub qs: [u8; QK_K / 4],
    /// Per 32 values a byte: the first 16's scale in the low nibble, the second's in the high.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(size_of::<BlockIq2Xs>() == 74);

impl BlockIq2Xs {
    /// As ggml's `dequantize_row_iq2_xs`: each 16's scale is `d * (0.5 + s) / 4`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as signed grid levels (-43..=43) and a scale per 16 values: `scales[j / 16] *
    /// levels[j]` is value `j` as [`Self::dequantize`] gives it.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        for (half, scale) in scales.iter_mut().enumerate() {
            *scale = quarter_scale(d, self.scales[half / 2], half);
        }
        for (g, out) in levels.chunks_exact_mut(8).enumerate() {
            let word = u16::from_le_bytes([self.qs[2 * g], self.qs[2 * g + 1]]);
            let signs = SIGNS7[usize::from(word >> 9)];
            signed_levels(&IQ2XS[usize::from(word & 511)], signs, out);
        }
    }
}

/// One IQ2_S super-block (ggml's `block_iq2_s`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq2S {
    pub d: Half,
    /// The low 8 bits of each 8's grid index (bytes 0..32), then each 8's signs (32..64).
    pub qs: [u8; QK_K / 4],
    /// The indices' top 2 bits, four 8s per byte, first lowest.
    pub qh: [u8; QK_K / 32],
    /// As IQ2_XS's.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(size_of::<BlockIq2S>() == 82);

impl BlockIq2S {
    /// As ggml's `dequantize_row_iq2_s`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// As [`BlockIq2Xs::levels`].
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        for (half, scale) in scales.iter_mut().enumerate() {
            *scale = quarter_scale(d, self.scales[half / 2], half);
        }
        let (low, signs) = self.qs.split_at(QK_K / 8);
        for (g, out) in levels.chunks_exact_mut(8).enumerate() {
            let high = usize::from(self.qh[g / 4] >> (2 * (g % 4)) & 3);
            let index = usize::from(low[g]) | high << 8;
            signed_levels(&IQ2S[index], signs[g], out);
        }
    }
}

/// `d * (0.5 + s) / 4` for 16 values `half` (counted over the block) of a byte that holds two
/// 4-bit scales, low nibble first.
fn quarter_scale(d: f32, byte: u8, half: usize) -> f32 {
    let s = byte >> (4 * (half % 2)) & 0x0F;
    d * (0.5 + f32::from(s)) * 0.25
}
