//! IQ4_NL and IQ4_XS (GGUF types 20 and 23): 4-bit indices into one non-linear table of 16
//! signed levels, denser near zero where weights are. IQ4_NL scales blocks of 32 by an f16;
//! IQ4_XS scales each 32 of a 256-value super-block by a 6-bit integer times the f16.

use bytemuck::{Pod, Zeroable};

use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// The levels, from ggml's `kvalues_iq4nl`.
pub const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block (ggml's `block_iq4_nl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: Half,
    /// Value `j < 16` indexes with the low nibble of `qs[j]`, value `j + 16` the high.
    pub qs: [u8; 16],
}

const _: () = assert!(size_of::<BlockIq4Nl>() == 18);

impl BlockIq4Nl {
    /// As ggml's `dequantize_row_iq4_nl`: the level times `d`, in f32.
    pub fn dequantize(&self, out: &mut [f32; 32]) {
        levels_times(self.d.to_f32(), &self.qs, out);
    }
}

/// One IQ4_XS super-block (ggml's `block_iq4_xs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Xs {
    pub d: Half,
    /// The high two bits of each 32's 6-bit scale, two bits per 32, lowest first.
    pub scales_h: [u8; 2],
    /// The low four bits: 32 `2i` in the low nibble of byte `i`, `2i + 1` in the high.
    pub scales_l: [u8; QK_K / 64],
    /// Each 32's indices as IQ4_NL packs a block's.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockIq4Xs>() == 136);

impl BlockIq4Xs {
    /// As ggml's `dequantize_row_iq4_xs`: each 32's scale is `d * (s - 32)`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let high = u16::from_le_bytes(self.scales_h);
        for (ib, out) in out.chunks_exact_mut(32).enumerate() {
            let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
            let s = low | ((((high >> (2 * ib)) & 3) as u8) << 4);
            let dl = d * f32::from(s as i8 - 32);
            let qs = &self.qs[16 * ib..16 * ib + 16];
            if let Ok(out) = <&mut [f32; 32]>::try_from(out) {
                levels_times(dl, qs, out);
            }
        }
    }
}

/// `out[j] = d * LEVELS[index j]` for 32 values packed in 16 bytes.
fn levels_times(d: f32, qs: &[u8], out: &mut [f32; 32]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
        *lo = d * f32::from(LEVELS[usize::from(q & 0x0F)]);
        *hi = d * f32::from(LEVELS[usize::from(q >> 4)]);
    }
}
