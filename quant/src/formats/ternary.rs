//! TQ1_0 and TQ2_0 (GGUF types 34 and 35): ternary weights (-1, 0, 1) times one f16 scale per
//! 256 values, as BitNet b1.58 models store them. TQ2_0 packs four 2-bit digits per byte;
//! TQ1_0 packs five base-3 digits per byte, as a fixed-point fraction of 3^5. Both quantize as
//! ggml's reference quantizers do (the scale is the block's largest magnitude, each value the
//! nearest of -1, 0, 1 times it), byte for byte; they take no importance matrix.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::iq::iq_grid::scaled;
use super::kquant::QK_K;

/// One TQ1_0 block (ggml's `block_tq1_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockTq2_0 {
    /// Value g * 128 + l * 32 + m in bits 2l..2l+2 of byte g * 32 + m, plus one.
    pub qs: [u8; QK_K / 4],
    pub d: Half,
}

const _: () = assert!(size_of::<BlockTq2_0>() == 66);

/// Digit `n` of a byte that holds base-3 digits as a fraction of 3^5, less one: multiplying
/// by 3^n (wrapping, in 8 bits) brings it to the top, and times 3 over 256 reads it.
fn trit(byte: u8, n: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let shifted = byte.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as i8 - 1
}

/// The block's scale `d` and each value's digit less one (-1, 0 or 1), as ggml's
/// `quantize_row_tq*_ref` choose them.
fn ternary(src: &[f32; QK_K]) -> (Half, [u8; QK_K]) {
    let amax = src.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 1.0 / amax } else { 0.0 };
    // lroundf: halves away from zero, as f32::round.
    let digits = src.map(|x| ((x * id).round() as i32 + 1) as u8);
    (Half::from_f32(amax), digits)
}

/// Base-3 digits `d` as a fraction of 3^5 in a byte, first digit the most significant
/// (ggml's ceiling division of the base-3 number by 243 over 256).
fn pack_trits(digits: impl Iterator<Item = u8>) -> u8 {
    let q = digits.fold(0u16, |q, d| q * 3 + u16::from(d));
    (q * 256).div_ceil(243) as u8
}

impl BlockTq1_0 {
    /// As ggml's `dequantize_row_tq1_0`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as levels -1, 0, 1 and the block's `d` once per 16 values.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        scales.fill(self.d.to_f32());
        let mut i = 0;
        let groups: [(&[u8], usize); 3] = [(&self.qs[..32], 5), (&self.qs[32..], 5), (&self.qh, 4)];
        for (bytes, digits) in groups {
            for n in 0..digits {
                for &b in bytes {
                    levels[i] = trit(b, n);
                    i += 1;
                }
            }
        }
    }

    /// As ggml's `quantize_row_tq1_0_ref`.
    pub fn quantize_ref(src: &[f32; QK_K]) -> Self {
        let (d, digits) = ternary(src);
        let mut block = Self {
            qs: [0; 48],
            qh: [0; 4],
            d,
        };
        // Values n * 32 + m of the first 160 in byte m, n * 16 + m of the next 80 in byte
        // 32 + m, digit n most significant first.
        for m in 0..32 {
            block.qs[m] = pack_trits((0..5).map(|n| digits[n * 32 + m]));
        }
        for m in 0..16 {
            block.qs[32 + m] = pack_trits((0..5).map(|n| digits[160 + n * 16 + m]));
        }
        // The last 16, four digits a byte, shifted up to fill five.
        for j in 0..4 {
            block.qh[j] = pack_trits((0..4).map(|m| digits[240 + j + 4 * m]).chain([0]));
        }
        block
    }
}

impl BlockTq2_0 {
    /// As ggml's `dequantize_row_tq2_0`.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let (mut levels, mut scales) = ([0; QK_K], [0.0; QK_K / 16]);
        self.levels(&mut levels, &mut scales);
        scaled(&levels, &scales, out);
    }

    /// The values as levels -1, 0, 1 and the block's `d` once per 16 values.
    pub fn levels(&self, levels: &mut [i8; QK_K], scales: &mut [f32; QK_K / 16]) {
        scales.fill(self.d.to_f32());
        for (g, bytes) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..4 {
                for (m, &b) in bytes.iter().enumerate() {
                    levels[g * 128 + l * 32 + m] = ((b >> (2 * l)) & 3) as i8 - 1;
                }
            }
        }
    }

    /// As ggml's `quantize_row_tq2_0_ref`.
    pub fn quantize_ref(src: &[f32; QK_K]) -> Self {
        let (d, digits) = ternary(src);
        let mut qs = [0u8; QK_K / 4];
        for (j, q) in qs.iter_mut().enumerate() {
            let (g, m) = (j / 32, j % 32);
            *q = (0..4).fold(0, |q, l| q | (digits[g * 128 + l * 32 + m] & 3) << (2 * l));
        }
        Self { qs, d }
    }
}
