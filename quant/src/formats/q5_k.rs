//! Q5_K: 5-bit k-quants, super-blocks of 256 values in 176 bytes (5.5 bits per weight).
//!
//! Q4_K with a fifth bit per level: the same 8 sub-blocks of 32 values, 6-bit scales and mins
//! and nibble layout, plus 32 bytes of high bits. `value = (d * scale) * q - (dmin * min)` with
//! `q` in 0..=31. The layout is ggml's `block_q5_K` byte for byte. GLSL twin:
//! `shaders/glsl/include/quant/q5_k.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{self, scale_min_k4, Search, K_SCALE_SIZE, QK_K};
use super::Rounding;

/// One super-block of 256 values (ggml's `block_q5_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
#[allow(non_camel_case_types)]
pub struct BlockQ5_K {
    /// Super-block scale for the sub-block scales.
    pub d: Half,
    /// Super-block scale for the sub-block mins.
    pub dmin: Half,
    /// Eight 6-bit scales and eight 6-bit mins, packed as in Q4_K ([`scale_min_k4`]).
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: value `i` is bit `i / 32` (its sub-block) of `qh[i % 32]`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, laid out as Q4_K's levels.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ5_K>() == 176);

super::block_codec!(BlockQ5_K, QK_K);

/// ggml's search for Q5_K sub-blocks (`quantize_row_q5_K_ref`).
const SEARCH: Search = Search {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: false,
};

impl BlockQ5_K {
    /// The super-block's 256 values, as ggml's `dequantize_row_q5_K`: per sub-block
    /// `d1 = d * scale` and `m1 = dmin * min`, then `d1 * q - m1` (a multiply then a subtract).
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        // Each group of 64 values is two sub-blocks sharing 32 bytes: low nibbles, then high.
        for (g, (qs, out)) in self
            .qs
            .chunks_exact(32)
            .zip(out.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc, m) = scale_min_k4(2 * g, &self.scales);
            let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
            let (sc, m) = scale_min_k4(2 * g + 1, &self.scales);
            let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
            let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
            let (lo, hi) = out.split_at_mut(32);
            for (((&q, &h), lo), hi) in qs.iter().zip(&self.qh).zip(lo).zip(hi) {
                let q1 = (q & 0xF) + if h & u1 != 0 { 16 } else { 0 };
                let q2 = (q >> 4) + if h & u2 != 0 { 16 } else { 0 };
                *lo = d1 * f32::from(q1) - m1;
                *hi = d2 * f32::from(q2) - m2;
            }
        }
    }

    /// Quantizes 256 finite values as ggml's `quantize_row_q5_K_ref` does (`rounding` is not
    /// used): Q4_K's procedure with 32 levels and ggml's narrower Q5_K search.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
        let subs = kquant::sub_blocks::<32>(src).zip(levels.chunks_exact_mut(32));
        for (j, (x, l)) in subs.enumerate() {
            let w = kquant::rms_plus_abs(x);
            (scales[j], mins[j]) = kquant::make_qkx2_quants(31, x, &w, l, SEARCH);
        }
        let (d, dmin, packed) = kquant::quantize_scales_k4(&scales, &mins);
        let (d, dmin, packed, levels) = kquant::requantize_k4(src, (d, dmin, packed, levels), 31);
        Self::pack(d, dmin, packed, &levels)
    }

    /// Quantizes 256 finite values with an importance per value (an importance matrix's
    /// column weights), as ggml's `quantize_row_q5_K_impl` does; see
    /// [`kquant::quantize_k4_weighted`].
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        let (d, dmin, packed, levels) = kquant::quantize_k4_weighted(src, importance, 31);
        Self::pack(d, dmin, packed, &levels)
    }

    /// The super-block with scales `d`, `dmin`, packed sub-block scales and mins, and levels
    /// `q` (each below 32; higher bits are dropped).
    pub fn pack(d: Half, dmin: Half, scales: [u8; K_SCALE_SIZE], q: &[u8; QK_K]) -> Self {
        let mut qh = [0u8; QK_K / 8];
        for (i, &q) in q.iter().enumerate() {
            qh[i % 32] |= ((q >> 4) & 1) << (i / 32);
        }
        let qs = std::array::from_fn(|i| {
            let at = 64 * (i / 32) + i % 32;
            (q[at] & 0xF) | (q[at + 32] & 0xF) << 4
        });
        BlockQ5_K {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
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
    use crate::formats::q4_k::tests::{pack_scales, scales_and_mins};
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    #[test]
    fn worked_example() {
        let mut sc = [0u8; 8];
        let mut mins = [0u8; 8];
        (sc[1], mins[1]) = (3, 4); // level q is 0.75 q - 1
        (sc[7], mins[7]) = (63, 63); // level q is 15.75 q - 15.75
        let mut block = BlockQ5_K {
            d: Half::from_f32(0.25),
            dmin: Half::from_f32(0.25),
            scales: pack_scales(sc, mins),
            qh: [0; 32],
            qs: [0; 128],
        };
        // Value 40: sub-block 1 (high nibbles of bytes 0..32), byte 8, fifth bit 1 of qh[8].
        block.qs[8] = 0x50;
        block.qh[8] = 1 << 1;
        // Value 255: sub-block 7, byte 96 + 31, fifth bit 7 of qh[31]; level 16 + 15.
        block.qs[127] = 0xF0;
        block.qh[31] = 1 << 7;
        let out = dequantize_all(BlockType::Q5_K, bytemuck::bytes_of(&block));
        assert_eq!(out[40], 0.75 * 21.0 - 1.0);
        assert_eq!(out[41], -1.0);
        assert_eq!(out[8], 0.0); // sub-block 0: scale and min 0
        assert_eq!(out[255], 15.75 * 31.0 - 15.75);
        assert_eq!(out[254], -15.75);
    }

    #[test]
    fn every_value_follows_the_formula() {
        let (sc, mins) = scales_and_mins(13);
        let block = BlockQ5_K {
            d: Half::from_bits(0x2411),
            dmin: Half::from_bits(0x1E9A),
            scales: pack_scales(sc, mins),
            qh: bytes(14),
            qs: bytes(15),
        };
        let (d, dmin) = (block.d.to_f32(), block.dmin.to_f32());
        let out = dequantize_all(BlockType::Q5_K, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let s = i / 32;
            let byte = block.qs[32 * (i / 64) + i % 32];
            let low = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let q = low + 16 * ((block.qh[i % 32] >> s) & 1);
            let want = d * sc[s] as f32 * q as f32 - dmin * mins[s] as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "value {i}");
        }
    }
}
