//! Q6_K: 6-bit k-quants, super-blocks of 256 values in 210 bytes (6.5625 bits per weight).
//!
//! The super-block has 16 sub-blocks of 16 values, each with a signed 8-bit scale scaled by the
//! super-block's f16 `d`: `value = (d * scale) * (q - 32)` with `q` in 0..=63, stored as a
//! nibble and a 2-bit pair. The layout is ggml's `block_q6_K` byte for byte; its 210 bytes
//! leave every other super-block 2-byte aligned. GLSL twin: `shaders/glsl/include/quant/q6_k.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{self, nearest_int, QK_K};
use super::Rounding;

/// One super-block of 256 values (ggml's `block_q6_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
#[allow(non_camel_case_types)]
pub struct BlockQ6_K {
    /// Low 4 bits of the levels. Each 64 bytes hold a half of 128 values: values 0..32 of the
    /// half in the low nibbles of bytes 0..32, 32..64 in the low nibbles of bytes 32..64, then
    /// 64..96 and 96..128 in the high nibbles of the same bytes.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the levels. Each 32 bytes serve a half: value `l + 32 k` of the half
    /// (`l < 32`, `k < 4`) is at bit `2 k` of byte `l`.
    pub qh: [u8; QK_K / 4],
    /// Per sub-block scale.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: Half,
}

const _: () = assert!(size_of::<BlockQ6_K>() == 210);

super::block_codec!(BlockQ6_K, QK_K);

impl BlockQ6_K {
    /// The super-block's 256 values, as ggml's `dequantize_row_q6_K`: `d * scale * (q - 32)`
    /// evaluated left to right in f32, with the level offset in integers.
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let halves = self.ql.chunks_exact(64).zip(self.qh.chunks_exact(32));
        let halves = halves
            .zip(self.scales.chunks_exact(8))
            .zip(out.chunks_exact_mut(128));
        for (((ql, qh), sc), out) in halves {
            // Four quarters of 32 values: (low nibble bytes, nibble shift, pair shift, output).
            for k in 0..4 {
                let ql = &ql[32 * (k % 2)..][..32];
                let nibble = 4 * (k / 2);
                let pair = 2 * k;
                let out = &mut out[32 * k..][..32];
                for (l, ((&lo, &hi), out)) in ql.iter().zip(qh).zip(out).enumerate() {
                    let q = (((lo >> nibble) & 0xF) | (((hi >> pair) & 3) << 4)) as i8 - 32;
                    *out = d * f32::from(sc[l / 16 + 2 * k]) * f32::from(q);
                }
            }
        }
    }

    /// Quantizes 256 finite values as ggml's `quantize_row_q6_K_ref` does (`rounding` is not
    /// used): each sub-block's scale from [`kquant::make_qx_quants`] weighted by `x^2`, the
    /// sixteen rounded to signed bytes against the largest, then every level recomputed from
    /// the scales as stored.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        Self::quantize_by(src, |x, _| x.map(|v| v * v))
    }

    /// Quantizes 256 finite values with an importance per value (an importance matrix's
    /// column weights), as ggml's `quantize_row_q6_K_impl` does: [`BlockQ6_K::quantize`] with
    /// the importance in place of `x^2` in the sub-block searches.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        Self::quantize_by(src, |_, s| std::array::from_fn(|i| importance[16 * s + i]))
    }

    /// The quantizer with `weights(x, s)` the search weights of sub-block `s`, values `x`.
    fn quantize_by(src: &[f32; QK_K], weights: impl Fn(&[f32; 16], usize) -> [f32; 16]) -> Self {
        let mut levels = [0u8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for (ib, (s, (x, l))) in scales.iter_mut().zip(subs).enumerate() {
            *s = kquant::make_qx_quants(32, x, &weights(x, ib), l);
            if s.abs() > max_abs {
                max_abs = s.abs();
                max_scale = *s;
            }
        }
        if max_abs < kquant::GROUP_MAX_EPS {
            return BlockQ6_K::zeroed();
        }
        let iscale = -128.0 / max_scale;
        let d = Half::from_f32(1.0 / iscale);
        // As ggml: clamped to 127, then cut to a signed byte.
        let sc = scales.map(|s| nearest_int(iscale * s).min(127) as i8);
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for ((x, l), &sc) in subs.zip(&sc) {
            let dj = d.to_f32() * f32::from(sc);
            if dj == 0.0 {
                continue;
            }
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (nearest_int(v / dj).clamp(-32, 31) + 32) as u8;
            }
        }
        Self::pack(d, sc, &levels)
    }

    /// The super-block with scale `d`, sub-block scales `scales` and levels `q` (each below
    /// 64, the stored `level + 32`; higher bits are dropped).
    pub fn pack(d: Half, scales: [i8; 16], q: &[u8; QK_K]) -> Self {
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for (i, &q) in q.iter().enumerate() {
            // Half h, quarter k, position l: low nibble bytes 64h + 32(k % 2) + l, nibble k / 2.
            let (h, k, l) = (i / 128, i % 128 / 32, i % 32);
            ql[64 * h + 32 * (k % 2) + l] |= (q & 0xF) << (4 * (k / 2));
            qh[32 * h + l] |= ((q >> 4) & 3) << (2 * k);
        }
        BlockQ6_K { ql, qh, scales, d }
    }

    /// Reference dot product `sum_j value_j * x_j` of the dequantized values: each product is
    /// exact in f64, and they are summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    #[test]
    fn worked_example() {
        let mut block = BlockQ6_K::zeroed();
        block.d = Half::from_f32(0.5);
        block.scales[0] = 2; // level q is q - 32
        block.scales[13] = -6; // level q is -3 (q - 32)
                               // Value 0: low nibble of ql[0], pair at bit 0 of qh[0]: q = 0x2F = 47.
        block.ql[0] = 0x0F;
        block.qh[0] = 0b10;
        // Value 216 = 128 + 88: second half, quarter 2 (high nibbles of ql[64..96]), l = 24,
        // sub-block 13. q = 5 | 3 << 4 = 53.
        block.ql[64 + 24] = 0x50;
        block.qh[32 + 24] = 0b11 << 4;
        let out = dequantize_all(BlockType::Q6_K, bytemuck::bytes_of(&block));
        assert_eq!(out[0], 15.0);
        assert_eq!(out[1], -32.0);
        assert_eq!(out[216], -63.0);
        assert_eq!(out[152], -0.0 * 96.0); // value 152 = 128 + 24: quarter 0, sub-block 9, scale 0
        assert_eq!(out[217], 96.0); // q = 0
    }

    #[test]
    fn every_value_follows_the_formula() {
        let block = BlockQ6_K {
            ql: bytes(16),
            qh: bytes(17),
            scales: bytemuck::cast(bytes::<16>(18)),
            d: Half::from_bits(0x1F0C),
        };
        let d = block.d.to_f32();
        let out = dequantize_all(BlockType::Q6_K, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let (half, k, l) = (i / 128, i % 128 / 32, i % 32);
            let byte = block.ql[64 * half + 32 * (k % 2) + l];
            let low = if k < 2 { byte & 0xF } else { byte >> 4 };
            let high = (block.qh[32 * half + l] >> (2 * k)) & 3;
            let q = (low | (high << 4)) as i32 - 32;
            let want = d * block.scales[i / 16] as f32 * q as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "value {i}");
        }
    }
}
