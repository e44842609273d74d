//! MXFP4 (GGUF type 39, OCP's microscaling FP4, GPT-OSS's experts): 32 values of e2m1 (a
//! sign, two exponent bits, one mantissa bit) sharing a power-of-two scale stored as a biased
//! exponent byte (e8m0).

use bytemuck::{Pod, Zeroable};

/// The e2m1 values doubled, so that they are integers (ggml's `kvalues_mxfp4`); the scale is
/// halved to match.
pub const LEVELS: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One block (ggml's `block_mxfp4`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// The scale's exponent, biased by 127.
    pub e: u8,
    /// Value `j < 16` in the low nibble of `qs[j]`, value `j + 16` in the high.
    pub qs: [u8; 16],
}

const _: () = assert!(size_of::<BlockMxfp4>() == 17);

/// Half of 2^(e - 127), exactly, as ggml's `ggml_e8m0_to_fp32_half` (subnormal for e < 2).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = match e {
        0 | 1 => 0x0020_0000u32 << e,
        _ => u32::from(e - 1) << 23,
    };
    f32::from_bits(bits)
}

impl BlockMxfp4 {
    /// As ggml's `dequantize_row_mxfp4`.
    pub fn dequantize(&self, out: &mut [f32; 32]) {
        let d = e8m0_half(self.e);
        let (lo, hi) = out.split_at_mut(16);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = f32::from(LEVELS[usize::from(q & 0x0F)]) * d;
            *hi = f32::from(LEVELS[usize::from(q >> 4)]) * d;
        }
    }
}
