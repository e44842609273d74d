//! Q4_K: 4-bit k-quants, super-blocks of 256 values in 144 bytes (4.5 bits per weight).
//!
//! The super-block has 8 sub-blocks of 32 values. Each has a 6-bit scale and a 6-bit min,
//! scaled by the super-block's f16 `d` and `dmin`: `value = (d * scale) * q - (dmin * min)`
//! with `q` in 0..=15. The layout is ggml's `block_q4_K` byte for byte. GLSL twin:
//! `shaders/glsl/include/quant/q4_k.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{self, Search, K_SCALE_SIZE, QK_K};
pub use super::kquant::scale_min_k4;
use super::Rounding;

/// One super-block of 256 values (ggml's `block_q4_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
#[allow(non_camel_case_types)]
pub struct BlockQ4_K {
    /// Super-block scale for the sub-block scales.
    pub d: Half,
    /// Super-block scale for the sub-block mins.
    pub dmin: Half,
    /// Eight 6-bit scales and eight 6-bit mins; see [`scale_min_k4`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Levels, two per byte. Each 32 bytes hold 64 values: the first 32 in the low nibbles,
    /// the next 32 in the high nibbles.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4_K>() == 144);

super::block_codec!(BlockQ4_K, QK_K);

/// ggml's search for Q4_K sub-blocks (`quantize_row_q4_K_ref`).
const SEARCH: Search = Search {
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
    use_mad: false,
};

impl BlockQ4_K {
    /// The super-block's 256 values, as ggml's `dequantize_row_q4_K`: per sub-block
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
            let (lo, hi) = out.split_at_mut(32);
            for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
                *lo = d1 * f32::from(q & 0xF) - m1;
                *hi = d2 * f32::from(q >> 4) - m2;
            }
        }
    }

    /// Quantizes 256 finite values as ggml's `quantize_row_q4_K_ref` does (`rounding` is not
    /// used): each sub-block's scale and min from [`kquant::make_qkx2_quants`] weighted by
    /// `rms + |x|`, the sixteen rounded to 6 bits against their maxima, then every level
    /// recomputed from the scales as stored.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
        let subs = kquant::sub_blocks::<32>(src).zip(levels.chunks_exact_mut(32));
        for (j, (x, l)) in subs.enumerate() {
            let w = kquant::rms_plus_abs(x);
            (scales[j], mins[j]) = kquant::make_qkx2_quants(15, x, &w, l, SEARCH);
        }
        let (d, dmin, packed) = kquant::quantize_scales_k4(&scales, &mins);
        let (d, dmin, packed, levels) = kquant::requantize_k4(src, (d, dmin, packed, levels), 15);
        Self::pack(d, dmin, packed, &levels)
    }

    /// Quantizes 256 finite values with an importance per value (an importance matrix's
    /// column weights), as ggml's `quantize_row_q4_K_impl` does; see
    /// [`kquant::quantize_k4_weighted`].
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        let (d, dmin, packed, levels) = kquant::quantize_k4_weighted(src, importance, 15);
        Self::pack(d, dmin, packed, &levels)
    }

    /// The super-block with scales `d`, `dmin`, packed sub-block scales and mins, and levels
    /// `q` (each below 16; higher bits are dropped).
    pub fn pack(d: Half, dmin: Half, scales: [u8; K_SCALE_SIZE], q: &[u8; QK_K]) -> Self {
        let qs = std::array::from_fn(|i| {
            let at = 64 * (i / 32) + i % 32;
            (q[at] & 0xF) | (q[at + 32] & 0xF) << 4
        });
        BlockQ4_K {
            d,
            dmin,
            scales,
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
pub(crate) mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    /// Packs eight 6-bit scales and mins (shared with Q5_K's tests).
    pub(crate) fn pack_scales(sc: [u8; 8], mins: [u8; 8]) -> [u8; K_SCALE_SIZE] {
        kquant::pack_scale_min_k4(&sc, &mins)
    }

    /// Eight scales and eight mins covering every bit of the 6-bit range.
    pub(crate) fn scales_and_mins(seed: u64) -> ([u8; 8], [u8; 8]) {
        let raw = bytes::<16>(seed);
        (
            std::array::from_fn(|j| raw[j] % 64),
            std::array::from_fn(|j| raw[8 + j] % 64),
        )
    }

    #[test]
    fn scales_and_mins_unpack() {
        for seed in 0..20 {
            let (sc, mins) = scales_and_mins(seed);
            let packed = pack_scales(sc, mins);
            for j in 0..8 {
                assert_eq!(
                    scale_min_k4(j, &packed),
                    (sc[j], mins[j]),
                    "seed {seed}, sub-block {j}"
                );
            }
        }
    }

    #[test]
    fn worked_example() {
        let mut sc = [0u8; 8];
        let mut mins = [0u8; 8];
        (sc[0], mins[0]) = (1, 2); // level q is q - 1
        (sc[5], mins[5]) = (40, 33); // level q is 40 q - 16.5 (both use their high bits)
        let mut block = BlockQ4_K {
            d: Half::from_f32(1.0),
            dmin: Half::from_f32(0.5),
            scales: pack_scales(sc, mins),
            qs: [0; 128],
        };
        block.qs[3] = 0x0C; // value 3: level 12 (sub-block 0); value 35: level 0 (sub-block 1)
                            // Value 170 is in group 2 (128..192), high nibbles (sub-block 5), byte 64 + 170 % 32.
        block.qs[64 + 10] = 0x70;
        let out = dequantize_all(BlockType::Q4_K, bytemuck::bytes_of(&block));
        assert_eq!(out[3], 11.0);
        assert_eq!(out[4], -1.0);
        assert_eq!(out[35], 0.0);
        assert_eq!(out[170], 263.5);
        assert_eq!(out[171], -16.5);
        assert_eq!(out[138], 0.0); // low nibble of the same byte: sub-block 4, scale 0
    }

    #[test]
    fn every_value_follows_the_formula() {
        let (sc, mins) = scales_and_mins(11);
        let block = BlockQ4_K {
            d: Half::from_bits(0x1C3B),
            dmin: Half::from_bits(0x1B7D),
            scales: pack_scales(sc, mins),
            qs: bytes(12),
        };
        let (d, dmin) = (block.d.to_f32(), block.dmin.to_f32());
        let out = dequantize_all(BlockType::Q4_K, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let s = i / 32;
            let byte = block.qs[32 * (i / 64) + i % 32];
            let q = if s % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let want = d * sc[s] as f32 * q as f32 - dmin * mins[s] as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "value {i}");
        }
    }
}
