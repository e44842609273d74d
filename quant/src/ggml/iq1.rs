//! IQ1_S and IQ1_M (GGUF types 19 and 29): about 1.6-1.8 bits per weight. Each group of 8 values
//! is a row of a grid over {-1, 0, 1} (11-bit index) shifted by ±1/8, times a 3-bit scale of
//! the block's f16: per 32 values in IQ1_S, per 16 in IQ1_M.

use bytemuck::{Pod, Zeroable};

use super::iq_grid::IQ1S;
use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// ggml's `IQ1S_DELTA`: the shift every row takes, its sign stored per 32 or 8 values.
const DELTA: f32 = 0.125;

/// One IQ1_S super-block (ggml's `block_iq1_s`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
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
        let d = self.d.to_f32();
        for (ib, out) in out.chunks_exact_mut(32).enumerate() {
            let word = u16::from_le_bytes([self.qh[2 * ib], self.qh[2 * ib + 1]]);
            let dl = d * f32::from(2 * (word >> 12 & 7) + 1);
            let delta = if word & 0x8000 != 0 { -DELTA } else { DELTA };
            for (l, out) in out.chunks_exact_mut(8).enumerate() {
                let index =
                    usize::from(self.qs[4 * ib + l]) | usize::from(word >> (3 * l) & 7) << 8;
                shifted(dl, delta, &IQ1S[index], out);
            }
        }
    }
}

/// One IQ1_M super-block (ggml's `block_iq1_m`). It has no f16 field: the scale's 16 bits are
/// the top nibbles of the four `scales` words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
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
        let words: [u16; 4] = std::array::from_fn(|i| {
            u16::from_le_bytes([self.scales[2 * i], self.scales[2 * i + 1]])
        });
        let bits = words
            .iter()
            .enumerate()
            .fold(0u16, |acc, (i, w)| acc | (w >> 12) << (4 * i));
        let d = Half::from_bits(bits).to_f32();
        for (g, out) in out.chunks_exact_mut(8).enumerate() {
            // 16 values share a scale: scale g / 2 of the block, three bits each.
            let half = g / 2;
            let s = words[half / 4] >> (3 * (half % 4)) & 7;
            let dl = d * f32::from(2 * s + 1);
            let nibble = self.qh[g / 2] >> (4 * (g % 2)) & 0x0F;
            let index = usize::from(self.qs[g]) | usize::from(nibble & 7) << 8;
            let delta = if nibble & 8 != 0 { -DELTA } else { DELTA };
            shifted(dl, delta, &IQ1S[index], out);
        }
    }
}

/// `out[j] = dl * (grid[j] + delta)`, in ggml's order.
fn shifted(dl: f32, delta: f32, grid: &[i8; 8], out: &mut [f32]) {
    for (out, &g) in out.iter_mut().zip(grid) {
        *out = dl * (f32::from(g) + delta);
    }
}
