//! TQ1_0 and TQ2_0 (GGUF types 34 and 35): ternary weights (-1, 0, 1) times one f16 scale per
//! 256 values, as BitNet b1.58 models store them. TQ2_0 packs four 2-bit digits per byte;
//! TQ1_0 packs five base-3 digits per byte, as a fixed-point fraction of 3^5.

use bytemuck::{Pod, Zeroable};

use crate::formats::f16::Half;
use crate::formats::kquant::QK_K;

/// One TQ1_0 block (ggml's `block_tq1_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq1_0 {
    /// 240 values, five per byte: bytes 0..32 hold values n * 32 + m (n = 0..5), bytes
    /// 32..48 values 160 + n * 16 + m.
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    /// The last 16 values, four per byte: value 240 + n * 4 + m.
    pub qh: [u8; QK_K / 64],
    pub d: Half,
}

const _: () = assert!(size_of::<BlockTq1_0>() == 54);

/// One TQ2_0 block (ggml's `block_tq2_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockTq2_0 {
    /// Value g * 128 + l * 32 + m in bits 2l..2l+2 of byte g * 32 + m, plus one.
    pub qs: [u8; QK_K / 4],
    pub d: Half,
}

const _: () = assert!(size_of::<BlockTq2_0>() == 66);

/// Digit `n` of a byte that holds base-3 digits as a fraction of 3^5: multiplying by 3^n
/// (wrapping, in 8 bits) brings it to the top, and times 3 over 256 reads it.
fn trit(byte: u8, n: usize) -> f32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let shifted = byte.wrapping_mul(POW3[n]);
    f32::from(((u16::from(shifted) * 3) >> 8) as i8 - 1)
}

impl BlockTq1_0 {
    /// As ggml's `dequantize_row_tq1_0`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let mut i = 0;
        let groups: [(&[u8], usize); 3] = [(&self.qs[..32], 5), (&self.qs[32..], 5), (&self.qh, 4)];
        for (bytes, digits) in groups {
            for n in 0..digits {
                for &b in bytes {
                    out[i] = trit(b, n) * d;
                    i += 1;
                }
            }
        }
    }
}

impl BlockTq2_0 {
    /// As ggml's `dequantize_row_tq2_0`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        for (g, bytes) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..4 {
                for (m, &b) in bytes.iter().enumerate() {
                    let q = ((b >> (2 * l)) & 3) as i8 - 1;
                    out[g * 128 + l * 32 + m] = f32::from(q) * d;
                }
            }
        }
    }
}
