//! IQ1_S and IQ1_M (GGUF types 19 and 29): about 1.6-1.8 bits per weight. Each group of 8 values
//! is a row of a grid over {-1, 0, 1} (11-bit index) shifted by ±1/8, times a 3-bit scale of
//! the block's f16: per 32 values in IQ1_S, per 16 in IQ1_M.

use bytemuck::{Pod, Zeroable};

use super::iq_grid::{scaled, IQ1S};
use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// ggml's `IQ1S_DELTA` (1/8) is the shift every row takes, its sign stored per 32 or 8 values.
/// As levels, values are `8 * grid ± 1` (odd, -9..=9) with the scale `dl / 8`: the product is
/// exactly ggml's `dl * (grid ± 1/8)` before rounding (both factors are exact), so it rounds to
/// the same f32.
const LEVEL_SCALE: f32 = 0.125;

/// One IQ1_S super-block (ggml's `block_iq1_s`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq1S {
    pub d: Half,
    /// The low 8 bits of each 8's grid index.
    pub qs: [u8; QK_K / 8],
    /// Per 32 values a little-endian u16: the four 8s' top index bits (3 each, bits 0..12),
    /// the scale (12..15) and the shift's sign (15).
    pub qh: [u8; QK_K / 16],
}

const _: () = assert!(size_of::<BlockIq1S>() == 50);

impl BlockIq1S {
    /// As ggml's `dequantize_row_iq1_s`: `d * (2s + 1) * (grid + delta)`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as levels `8 * grid ± 1` and a scale per 16 values (each 32's `dl / 8`
    /// twice): `scales[j / 16] * levels[j]` is value `j` as [`Self::dequantize`] gives it.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let d = self.d.to_f32();
        let groups = levels.chunks_exact_mut(32).zip(scales.chunks_exact_mut(2));
        for (ib, (levels, scales)) in groups.enumerate() {
            let word = u16::from_le_bytes([self.qh[2 * ib], self.qh[2 * ib + 1]]);
            scales.fill(d * f32::from(2 * (word >> 12 & 7) + 1) * LEVEL_SCALE);
            for (l, out) in levels.chunks_exact_mut(8).enumerate() {
                let index =
                    usize::from(self.qs[4 * ib + l]) | usize::from(word >> (3 * l) & 7) << 8;
                shifted(&IQ1S[index], word & 0x8000 != 0, out);
            }
        }
    }
}

/// One IQ1_M super-block (ggml's `block_iq1_m`). It has no f16 field: the scale's 16 bits are
/// the top nibbles of the four `scales` words.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq1M {
    /// The low 8 bits of each 8's grid index.
    pub qs: [u8; QK_K / 8],
    /// Per 8 values a nibble, two per byte, low first: the index's top 3 bits and the shift's
    /// sign (bit 3).
    pub qh: [u8; QK_K / 16],
    /// Four little-endian u16: each holds four 3-bit scales of 16 values (bits 0..12) and a
    /// nibble of the block's f16 scale (12..16; word 0 the lowest).
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(size_of::<BlockIq1M>() == 56);

impl BlockIq1M {
    /// As ggml's `dequantize_row_iq1_m`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// As [`BlockIq1S::levels`], with each 16's own scale and each 8's own shift.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        let words: [u16; 4] = std::array::from_fn(|i| {
            u16::from_le_bytes([self.scales[2 * i], self.scales[2 * i + 1]])
        });
        let bits = words
            .iter()
            .enumerate()
            .fold(0u16, |acc, (i, w)| acc | (w >> 12) << (4 * i));
        let d = Half::from_bits(bits).to_f32();
        for (half, scale) in scales.iter_mut().enumerate() {
            // Three bits per 16 values, four to a word.
            let s = words[half / 4] >> (3 * (half % 4)) & 7;
            *scale = d * f32::from(2 * s + 1) * LEVEL_SCALE;
        }
        for (g, out) in levels.chunks_exact_mut(8).enumerate() {
            let nibble = self.qh[g / 2] >> (4 * (g % 2)) & 0x0F;
            let index = usize::from(self.qs[g]) | usize::from(nibble & 7) << 8;
            shifted(&IQ1S[index], nibble & 8 != 0, out);
        }
    }
}

/// The levels `8 * grid[j] + 1`, or `- 1` when the shift is negative.
fn shifted(grid: &[i8; 8], negative: bool, out: &mut [i8]) {
    let shift = if negative { -1 } else { 1 };
    for (out, &g) in out.iter_mut().zip(grid) {
        *out = 8 * g + shift;
    }
}
