//! Q3_K: 3-bit k-quants, super-blocks of 256 values in 110 bytes (3.4375 bits per weight).
//!
//! The super-block has 16 sub-blocks of 16 values, each with a signed 6-bit scale scaled by the
//! super-block's f16 `d`: `value = (d * (scale - 32)) * (q - 4)` with `q` in 0..=7, stored as
//! two low bits (packed as in Q2_K) and a high bit in a separate mask. The layout is ggml's
//! `block_q3_K` byte for byte; its 110 bytes leave every other super-block 2-byte aligned. GLSL
//! twin: `shaders/glsl/include/quant/q3_k.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{self, nearest_int, K_SCALE_SIZE, QK_K};
use super::q2_k::pack_crumbs;
use super::Rounding;

/// One super-block of 256 values (ggml's `block_q3_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
#[allow(non_camel_case_types)]
pub struct BlockQ3_K {
    /// High bits of the levels: value `i` is bit `i / 32` of `hmask[i % 32]`. A clear bit
    /// subtracts 4 from the level.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the levels, placed as in Q2_K: value `i` is in byte
    /// `32 * (i / 128) + i % 32`, at bit `2 * (i % 128 / 32)`.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales (offset by 32); see [`BlockQ3_K::scale`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Super-block scale.
    pub d: Half,
}

const _: () = assert!(size_of::<BlockQ3_K>() == 110);

super::block_codec!(BlockQ3_K, QK_K);

impl BlockQ3_K {
    /// The 6-bit scale of sub-block `s` (0..16) minus 32. Its low 4 bits are a nibble of
    /// `scales[0..8]` (low nibbles for sub-blocks 0..8, high for 8..16), its high 2 bits a
    /// pair in `scales[8 + s % 4]` at bit `2 * (s / 4)`.
    pub fn scale(&self, s: usize) -> i8 {
        let low = if s < 8 {
            self.scales[s] & 0xF
        } else {
            self.scales[s - 8] >> 4
        };
        let high = (self.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    }

    /// The super-block's 256 values, as ggml's `dequantize_row_q3_K`: per sub-block
    /// `dl = d * (scale - 32)`, then `dl * (q - 4)` with the level offset in integers.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d_all = self.d.to_f32();
        for (s, out) in out.chunks_exact_mut(16).enumerate() {
            let dl = d_all * f32::from(self.scale(s));
            // Sub-block s: half s / 8, bit plane (s % 8) / 2, first or second 16 bytes by s % 2;
            // its high bits are bit s / 2 of the matching 16 mask bytes.
            let qs = &self.qs[32 * (s / 8) + 16 * (s % 2)..][..16];
            let hm = &self.hmask[16 * (s % 2)..][..16];
            let shift = 2 * (s % 8 / 2);
            let m = 1u8 << (s / 2);
            for ((&q, &h), out) in qs.iter().zip(hm).zip(out) {
                let level = ((q >> shift) & 3) as i8 - if h & m != 0 { 0 } else { 4 };
                *out = dl * f32::from(level);
            }
        }
    }

    /// Quantizes 256 finite values as ggml's `quantize_row_q3_K_ref` does (`rounding` is not
    /// used): each sub-block's scale from [`kquant::make_q3_quants`], the sixteen rounded to
    /// signed 6 bits against the largest, then every level recomputed from the scales as
    /// stored.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for (s, (x, l)) in scales.iter_mut().zip(subs) {
            *s = kquant::make_q3_quants(4, x, l);
            if s.abs() > amax {
                amax = s.abs();
                max_scale = *s;
            }
        }
        let mut block = BlockQ3_K::zeroed();
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            // As ggml: cut to a signed byte, then clamped and offset.
            block.scales = pack_scales(
                scales.map(|s| ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8),
            );
            block.d = Half::from_f32(1.0 / iscale);
        }
        block.requantize(src, levels)
    }

    /// Quantizes 256 finite values with an importance per value (an importance matrix's column
    /// weights), as ggml's `quantize_row_q3_K_impl` does: each value weighs its importance times
    /// `sqrt(2 mean x^2 + x^2)`, each sub-block's scale comes from [`kquant::make_qx_quants`]
    /// with those weights, the sixteen scales become signed 6-bit levels of the super-block's
    /// by the same search weighted by each sub-block's total weight, and every level is then
    /// recomputed from the scales as stored.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        let sigma2 = 2.0 * kquant::sum_squares(src) / QK_K as f32;
        let mut levels = [0u8; QK_K];
        let (mut scales, mut sw) = ([0.0f32; 16], [0.0f32; 16]);
        let subs = kquant::sub_blocks::<16>(src).zip(importance.chunks_exact(16));
        for (j, ((x, qw), l)) in subs.zip(levels.chunks_exact_mut(16)).enumerate() {
            let weights: [f32; 16] =
                std::array::from_fn(|i| kquant::importance_weight(qw[i], sigma2, x[i]));
            sw[j] = weights.iter().fold(0.0f32, |a, &w| a + w);
            scales[j] = kquant::make_qx_quants(4, x, &weights, l);
        }
        let mut ls = [0u8; 16];
        let mut block = BlockQ3_K::zeroed();
        block.d = Half::from_f32(kquant::make_qx_quants(32, &scales, &sw, &mut ls));
        block.scales = pack_scales(ls);
        block.requantize(src, levels)
    }

    /// Every level recomputed from the scales as stored (ggml's final pass), then packed;
    /// sub-blocks whose scale is zero keep `levels`.
    fn requantize(mut self, src: &[f32; QK_K], mut levels: [u8; QK_K]) -> Self {
        let d = self.d.to_f32();
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for (j, (x, l)) in subs.enumerate() {
            let dj = d * f32::from(self.scale(j));
            if dj == 0.0 {
                continue;
            }
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (nearest_int(v / dj).clamp(-4, 3) + 4) as u8;
            }
        }
        self.set_levels(&levels);
        self
    }

    /// Stores levels `q` (each below 8, the stored `level + 4`; higher bits are dropped).
    pub fn set_levels(&mut self, q: &[u8; QK_K]) {
        self.hmask = [0; QK_K / 8];
        for (i, &q) in q.iter().enumerate() {
            self.hmask[i % 32] |= ((q >> 2) & 1) << (i / 32);
        }
        self.qs = pack_crumbs(q);
    }

    /// Reference dot product `sum_j value_j * x_j` of the dequantized values: each product is
    /// exact in f64, and they are summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}

/// Sixteen 6-bit scales (0..64, the signed scale plus 32) packed as ggml's `block_q3_K` keeps
/// them: low nibbles in bytes 0..8 (sub-blocks 8..16 in the high nibbles), high 2 bits in bytes
/// 8..12.
pub fn pack_scales(sc: [u8; 16]) -> [u8; K_SCALE_SIZE] {
    let mut out = [0u8; K_SCALE_SIZE];
    for (j, &l) in sc.iter().enumerate() {
        if j < 8 {
            out[j] = l & 0xF;
        } else {
            out[j - 8] |= (l & 0xF) << 4;
        }
        out[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;


    #[test]
    fn scales_unpack() {
        let sc: [u8; 16] = std::array::from_fn(|j| ((j * 37 + 5) % 64) as u8);
        let block = BlockQ3_K {
            scales: pack_scales(sc),
            ..BlockQ3_K::zeroed()
        };
        for (s, &want) in sc.iter().enumerate() {
            assert_eq!(block.scale(s), want as i8 - 32, "sub-block {s}");
        }
    }

    #[test]
    fn worked_example() {
        let mut sc = [32u8; 16]; // scale 0
        sc[0] = 33; // +1
        sc[11] = 32 - 20; // -20
        let mut block = BlockQ3_K {
            scales: pack_scales(sc),
            d: Half::from_f32(0.5),
            ..BlockQ3_K::zeroed()
        };
        // Value 0: low bits 3, high bit set: level 7 - 4 = 3.
        block.qs[0] = 0b11;
        block.hmask[0] = 1;
        // Value 1: low bits 2, high bit clear: level 2 - 4 = -2.
        block.qs[1] = 0b10;
        // Value 181 = 128 + 53 (sub-block 11): byte 32 + 53 % 32 = 53, bit plane 53 / 32 = 1,
        // mask bit 181 / 32 = 5 of hmask[181 % 32 = 21]. Low bits 1, high bit set: level 1.
        block.qs[53] = 0b01 << 2;
        block.hmask[21] = 1 << 5;
        let out = dequantize_all(BlockType::Q3_K, bytemuck::bytes_of(&block));
        assert_eq!(out[0], 1.5);
        assert_eq!(out[1], -1.0);
        assert_eq!(out[2], -2.0); // level 0 - 4
        assert_eq!(out[181], -10.0);
        assert_eq!(out[176], 40.0); // sub-block 11, level -4
        assert_eq!(out[255], -0.0); // scale 0
    }

    #[test]
    fn every_value_follows_the_formula() {
        let sc: [u8; 16] = std::array::from_fn(|j| bytes::<16>(8)[j] % 64);
        let block = BlockQ3_K {
            hmask: bytes(9),
            qs: bytes(10),
            scales: pack_scales(sc),
            d: Half::from_bits(0xA6C1),
        };
        let d = block.d.to_f32();
        let out = dequantize_all(BlockType::Q3_K, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let low = (block.qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3;
            let high = (block.hmask[i % 32] >> (i / 32)) & 1;
            let level = (low + 4 * high) as i32 - 4;
            let want = d * (sc[i / 16] as i32 - 32) as f32 * level as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "value {i}");
        }
    }
}
