//! IQ3_XXS and IQ3_S (GGUF types 18 and 21): about 3 bits per weight. Each group of 4 values is
//! a row of a grid of magnitudes (indexed by 8 or 9 bits); signs come per 8 values.

use bytemuck::{Pod, Zeroable};

use super::iq_grid::{scaled, signed_levels, IQ3S, IQ3XXS, SIGNS7};
use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// One IQ3_XXS super-block (ggml's `block_iq3_xxs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq3Xxs {
    pub d: Half,
    /// One grid index per 4 values (bytes 0..64), then per 32 values a little-endian u32 with
    /// four 7-bit sign indices (bits 0..28) and the 4-bit scale (bits 28..32).
    pub qs: [u8; 3 * QK_K / 8],
}

const _: () = assert!(size_of::<BlockIq3Xxs>() == 98);

impl BlockIq3Xxs {
    /// As ggml's `dequantize_row_iq3_xxs`: each 32's scale is `d * (0.5 + s) / 2`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as signed grid levels (-62..=62) and a scale per 16 values (each 32's twice):
    /// `scales[j / 16] * levels[j]` is value `j` as [`Self::dequantize`] gives it.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        let (indices, aux) = self.qs.split_at(QK_K / 4);
        let groups = levels.chunks_exact_mut(32).zip(scales.chunks_exact_mut(2));
        for (ib, (levels, scales)) in groups.enumerate() {
            let a = &aux[4 * ib..4 * ib + 4];
            let aux = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            scales.fill(d * (0.5 + (aux >> 28) as f32) * 0.5);
            for (l, out) in levels.chunks_exact_mut(8).enumerate() {
                let signs = SIGNS7[(aux >> (7 * l) & 127) as usize];
                let (lo, hi) = out.split_at_mut(4);
                let first = 8 * ib + 2 * l;
                signed_levels(&IQ3XXS[usize::from(indices[first])], signs, lo);
                signed_levels(&IQ3XXS[usize::from(indices[first + 1])], signs >> 4, hi);
            }
        }
    }
}

/// One IQ3_S super-block (ggml's `block_iq3_s`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq3S {
    pub d: Half,
    /// The low 8 bits of each 4's grid index.
    pub qs: [u8; QK_K / 4],
    /// The indices' ninth bits, eight 4s per byte, first lowest.
    pub qh: [u8; QK_K / 32],
    /// Each 8's signs.
    pub signs: [u8; QK_K / 8],
    /// Each 32's 4-bit scale, two per byte, low nibble first.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(size_of::<BlockIq3S>() == 110);

impl BlockIq3S {
    /// As ggml's `dequantize_row_iq3_s`: each 32's scale is `d * (1 + 2s)`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as signed grid levels (-15..=15) and a scale per 16 values (each 32's twice):
    /// `scales[j / 16] * levels[j]` is value `j` as [`Self::dequantize`] gives it.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        let groups = levels.chunks_exact_mut(32).zip(scales.chunks_exact_mut(2));
        for (ib, (levels, scales)) in groups.enumerate() {
            let s = self.scales[ib / 2] >> (4 * (ib % 2)) & 0x0F;
            scales.fill(d * f32::from(1 + 2 * s));
            for (k, out) in levels.chunks_exact_mut(4).enumerate() {
                let q = 8 * ib + k;
                let index = usize::from(self.qs[q]) | usize::from(self.qh[ib] >> k & 1) << 8;
                let signs = self.signs[q / 2] >> (4 * (k % 2));
                signed_levels(&IQ3S[index], signs, out);
            }
        }
    }
}
