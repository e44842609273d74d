//! IQ4_XS (GGUF type 23): IQ4_NL's 4-bit indices into its table of 16 levels, each 32 of a
//! 256-value super-block scaled by a 6-bit integer times the block's f16. (IQ4_NL itself is a
//! Hearth format: [`crate::formats::iq4_nl`].)

use bytemuck::{Pod, Zeroable};

use crate::formats::f16::Half;
use crate::formats::iq4_nl::levels_times;
use crate::formats::kquant::QK_K;

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
