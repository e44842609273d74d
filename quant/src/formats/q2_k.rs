//! Q2_K: 2-bit k-quants, super-blocks of 256 values in 84 bytes (2.625 bits per weight).
//!
//! The super-block has 16 sub-blocks of 16 values. Each sub-block has a 4-bit scale and a 4-bit
//! min, themselves scaled by the super-block's f16 `d` and `dmin`:
//! `value = (d * scale) * q - (dmin * min)` with `q` in 0..=3.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{self, nearest_int, Search, QK_K};
use super::Rounding;

/// One super-block of 256 values (ggml's `block_q2_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Pod, Zeroable)]
#[allow(non_camel_case_types)]
pub struct BlockQ2_K {
    /// Per sub-block: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// Levels, four per byte. Value `i` is in byte `32 * (i / 128) + i % 32`, at bit
    /// `2 * (i % 128 / 32)`: each 32-byte half holds 128 values as four 2-bit planes.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the sub-block scales.
    pub d: Half,
    /// Super-block scale for the sub-block mins.
    pub dmin: Half,
}

const _: () = assert!(size_of::<BlockQ2_K>() == 84);

super::block_codec!(BlockQ2_K, QK_K);

/// ggml's search for Q2_K sub-blocks (`quantize_row_q2_K_ref`): absolute errors.
const SEARCH: Search = Search {
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: true,
};

/// 256 2-bit levels packed as Q2_K and Q3_K store them: value `i` in byte
/// `32 * (i / 128) + i % 32` at bit `2 * (i % 128 / 32)` (higher bits are dropped).
pub fn pack_crumbs(q: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut out = [0u8; QK_K / 4];
    for (i, &q) in q.iter().enumerate() {
        out[32 * (i / 128) + i % 32] |= (q & 3) << (2 * (i % 128 / 32));
    }
    out
}

impl BlockQ2_K {
    /// The super-block's 256 values, as ggml's `dequantize_row_q2_K`: per sub-block
    /// `dl = d * scale` and `ml = dmin * min`, then `dl * q - ml` (a multiply then a subtract).
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = self.d.to_f32();
        let min = self.dmin.to_f32();
        for (s, (out, &sc)) in out.chunks_exact_mut(16).zip(&self.scales).enumerate() {
            let dl = d * f32::from(sc & 0xF);
            let ml = min * f32::from(sc >> 4);
            // Sub-block s: half s / 8, bit plane (s % 8) / 2, first or second 16 bytes by s % 2.
            let qs = &self.qs[32 * (s / 8) + 16 * (s % 2)..][..16];
            let shift = 2 * (s % 8 / 2);
            for (&q, out) in qs.iter().zip(out) {
                *out = dl * f32::from((q >> shift) & 3) - ml;
            }
        }
    }

    /// Quantizes 256 finite values as ggml's `quantize_row_q2_K_ref` does (`rounding` is not
    /// used): each sub-block's scale and min from [`kquant::make_qkx2_quants`] weighted by
    /// `|x|` with absolute errors, both rounded to 4 bits against their maxima, then every
    /// level recomputed from the scales as stored.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for (j, (x, l)) in subs.enumerate() {
            (scales[j], mins[j]) = kquant::make_qkx2_quants(3, x, &x.map(f32::abs), l, SEARCH);
        }
        let max_of = |v: &[f32; 16]| v.iter().fold(0.0f32, |a, &s| if s > a { s } else { a });
        let (max_scale, max_min) = (max_of(&scales), max_of(&mins));
        let mut block = BlockQ2_K::zeroed();
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (b, &s) in block.scales.iter_mut().zip(&scales) {
                *b = nearest_int(iscale * s) as u8;
            }
            block.d = Half::from_f32(max_scale / 15.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (b, &m) in block.scales.iter_mut().zip(&mins) {
                *b |= (nearest_int(iscale * m) << 4) as u8;
            }
            block.dmin = Half::from_f32(max_min / 15.0);
        }
        block.requantize(src, levels)
    }

    /// Quantizes 256 finite values with an importance per value (an importance matrix's column
    /// weights), as ggml's `quantize_row_q2_K_impl` does: each value weighs its importance times
    /// `sqrt(mean x^2 + x^2)`, each sub-block's scale and min come from a least-squares search
    /// with those weights, and the sixteen scales and mins become 4-bit levels of the
    /// super-block's by [`kquant::make_qp_quants`], weighted by each sub-block's total weight;
    /// every level is then recomputed from the scales as stored.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        let sigma2 = kquant::sum_squares(src) / QK_K as f32;
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins, mut sw) = ([0.0f32; 16], [0.0f32; 16], [0.0f32; 16]);
        let subs = kquant::sub_blocks::<16>(src).zip(importance.chunks_exact(16));
        for (j, ((x, qw), l)) in subs.zip(levels.chunks_exact_mut(16)).enumerate() {
            let weights: [f32; 16] =
                std::array::from_fn(|i| kquant::importance_weight(qw[i], sigma2, x[i]));
            sw[j] = weights.iter().fold(0.0f32, |a, &w| a + w);
            (scales[j], mins[j]) =
                kquant::make_qkx2_quants(3, x, &weights, l, kquant::WEIGHTED_SEARCH);
        }
        let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
        let mut block = BlockQ2_K::zeroed();
        block.d = Half::from_f32(kquant::make_qp_quants(15, &scales, &sw, &mut ls));
        block.dmin = Half::from_f32(kquant::make_qp_quants(15, &mins, &sw, &mut lm));
        block.scales = std::array::from_fn(|j| ls[j] | lm[j] << 4);
        block.requantize(src, levels)
    }

    /// Every level recomputed from the scales and mins as stored (ggml's final pass), then
    /// packed; sub-blocks whose scale is zero keep `levels`.
    fn requantize(mut self, src: &[f32; QK_K], mut levels: [u8; QK_K]) -> Self {
        let (d, dmin) = (self.d.to_f32(), self.dmin.to_f32());
        let subs = kquant::sub_blocks::<16>(src).zip(levels.chunks_exact_mut(16));
        for ((x, l), &sc) in subs.zip(&self.scales) {
            let dj = d * f32::from(sc & 0xF);
            if dj != 0.0 {
                kquant::requantize_asymmetric(x, dj, dmin * f32::from(sc >> 4), 3, l);
            }
        }
        self.qs = pack_crumbs(&levels);
        self
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
        let mut block = BlockQ2_K::zeroed();
        block.d = Half::from_f32(0.5);
        block.dmin = Half::from_f32(0.25);
        block.scales[0] = 0x32; // scale 2, min 3: level q is q - 0.75
        block.scales[13] = 0x1F; // scale 15, min 1: level q is 7.5 q - 0.25
        block.qs[0] = 0b11; // value 0: level 3
                            // Value 215 = 128 + 87: second half, bit plane 87 / 32 = 2, byte 32 + 87 % 32 = 55.
        block.qs[55] = 0b10 << 4;
        let out = dequantize_all(BlockType::Q2_K, bytemuck::bytes_of(&block));
        assert_eq!(out[0], 2.25);
        assert_eq!(out[1], -0.75);
        assert_eq!(out[215], 14.75); // sub-block 13, level 2
        assert_eq!(out[208], -0.25); // sub-block 13, level 0
        assert_eq!(out[255], 0.0); // sub-block 15: scale and min 0
    }

    #[test]
    fn every_value_follows_the_formula() {
        let block = BlockQ2_K {
            scales: bytes(6),
            qs: bytes(7),
            d: Half::from_bits(0x2D1F),
            dmin: Half::from_bits(0x2203),
        };
        let (d, dmin) = (block.d.to_f32(), block.dmin.to_f32());
        let out = dequantize_all(BlockType::Q2_K, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            let sc = block.scales[i / 16];
            let byte = block.qs[32 * (i / 128) + i % 32];
            let q = (byte >> (2 * (i % 128 / 32))) & 3;
            let want = d * (sc & 0xF) as f32 * q as f32 - dmin * (sc >> 4) as f32;
            assert_eq!(got.to_bits(), want.to_bits(), "value {i}");
        }
    }
}
