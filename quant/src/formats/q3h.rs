//! Q3H: "3.5-bit" asymmetric quantization (Inferflow's), blocks of 64 values in 32 bytes
//! (4.0 bits per weight).
//!
//! `value = q * d + m` with `q` in 0..=10 (11 levels), `d` the block's scale and `m` its base,
//! both f16. Two adjacent values share one 7-bit code: pair `p` (values `2p`, `2p + 1`) is
//! `c_p = q[2p] + 11 * q[2p + 1]`, below 121. The low four bits of `c_p` are a nibble of `lo`
//! (low nibble of `lo[p]` for `p < 16`, high nibble of `lo[p - 16]` for `p >= 16`); its bits
//! 4, 5 and 6 are bit `p` of the little-endian u32 planes `h0`, `h1`, `h2` stored in `hi`.
//! GLSL twin: `shaders/glsl/include/quant/q3h.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::{fit, Rounding};

/// Values per block.
pub const BLOCK_LEN: usize = 64;

/// Levels: `q` is in `0..LEVELS`.
pub const LEVELS: u8 = 11;

/// Pairs (codes) per block.
const PAIRS: usize = BLOCK_LEN / 2;

/// One block of 64 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ3H {
    /// Scale: the step between adjacent levels.
    pub d: Half,
    /// Base: the value of level 0.
    pub m: Half,
    /// Low four bits of the codes: pair `p < 16` in the low nibble of `lo[p]`, pair `p >= 16`
    /// in the high nibble of `lo[p - 16]`.
    pub lo: [u8; PAIRS / 2],
    /// Three little-endian u32 bit planes `h0`, `h1`, `h2`: bit `p` of `h_k` is bit `4 + k` of
    /// code `p`.
    pub hi: [u8; 3 * PAIRS / 8],
}

const _: () = assert!(size_of::<BlockQ3H>() == 32);

super::block_codec!(BlockQ3H, BLOCK_LEN);

impl BlockQ3H {
    /// The block with scale `d`, base `m` and levels `q` (each at most 10; larger levels are
    /// taken as 10).
    pub fn pack(d: Half, m: Half, q: &[u8; BLOCK_LEN]) -> Self {
        let top = LEVELS - 1;
        let codes: [u8; PAIRS] =
            std::array::from_fn(|p| q[2 * p].min(top) + LEVELS * q[2 * p + 1].min(top));
        Self::from_codes(d, m, &codes)
    }

    /// The block with scale `d`, base `m` and pair codes `codes` (each below 128; only the
    /// codes below 121 decode to levels 0..=10).
    pub fn from_codes(d: Half, m: Half, codes: &[u8; PAIRS]) -> Self {
        let mut lo = [0u8; PAIRS / 2];
        let mut planes = [0u32; 3];
        for (p, &c) in codes.iter().enumerate() {
            lo[p % 16] |= (c & 0x0F) << (4 * (p / 16));
            for (k, plane) in planes.iter_mut().enumerate() {
                *plane |= u32::from((c >> (4 + k)) & 1) << p;
            }
        }
        let mut hi = [0u8; 3 * PAIRS / 8];
        for (bytes, plane) in hi.chunks_exact_mut(4).zip(planes) {
            bytes.copy_from_slice(&plane.to_le_bytes());
        }
        BlockQ3H { d, m, lo, hi }
    }

    /// The 7-bit code of pair `p`.
    pub fn code(&self, p: usize) -> u8 {
        let low = (self.lo[p % 16] >> (4 * (p / 16))) & 0x0F;
        let plane = |k: usize| {
            let word = u32::from_le_bytes([
                self.hi[4 * k],
                self.hi[4 * k + 1],
                self.hi[4 * k + 2],
                self.hi[4 * k + 3],
            ]);
            ((word >> p) & 1) as u8
        };
        low | plane(0) << 4 | plane(1) << 5 | plane(2) << 6
    }

    /// The level of value `j`: the code's remainder by 11 for even `j`, its quotient for odd.
    pub fn level(&self, j: usize) -> u8 {
        let c = self.code(j / 2);
        if j % 2 == 0 {
            c % LEVELS
        } else {
            c / LEVELS
        }
    }

    /// The block's 64 values: `q * d + m` in f32, a multiply then an add.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        super::dequantize_levels(self.d, self.m, |j| self.level(j), out);
    }

    /// Quantizes 64 finite values (the caller checks them).
    pub fn quantize(src: &[f32; BLOCK_LEN], rounding: Rounding) -> Self {
        let fit = fit::asymmetric(src, LEVELS, rounding);
        Self::pack(fit.d, fit.m, &fit.q)
    }

    /// Quantizes 64 finite values with each value's error weighted by `weights` (from an
    /// importance matrix; the caller checks them).
    pub fn quantize_weighted(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> Self {
        let fit = fit::asymmetric_weighted(src, weights, LEVELS);
        Self::pack(fit.d, fit.m, &fit.q)
    }

    /// Reference dot product `sum_j value_j * x_j` of the dequantized values: each product is
    /// exact in f64, and they are summed in f64 in index order.
    pub fn dot(&self, x: &[f32; BLOCK_LEN]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, check_table2, dequantize_format, Table2};
    use crate::Format;

    #[test]
    fn bit_positions() {
        // Pairs at the nibble and plane boundaries: 0 and 15 (low nibbles of lo[0], lo[15]),
        // 16 and 31 (high nibbles of lo[0], lo[15]).
        let mut q = [0u8; BLOCK_LEN];
        (q[0], q[1]) = (3, 10); // pair 0: code 113 = 0b111_0001
        (q[30], q[31]) = (9, 0); // pair 15: code 9 = 0b000_1001
        (q[32], q[33]) = (10, 4); // pair 16: code 54 = 0b011_0110
        (q[62], q[63]) = (0, 8); // pair 31: code 88 = 0b101_1000
        let block = BlockQ3H::pack(Half::from_f32(1.0), Half::from_f32(-5.0), &q);
        let mut want_lo = [0u8; 16];
        want_lo[0] = 0x61; // pair 16's low nibble 6 over pair 0's 1
        want_lo[15] = 0x89; // pair 31's low nibble 8 over pair 15's 9
        assert_eq!(block.lo, want_lo);
        // h0 (bit 4 of codes): pairs 0, 16, 31; h1 (bit 5): pairs 0, 16; h2 (bit 6): 0, 31.
        let h0 = 1u32 | 1 << 16 | 1 << 31;
        let h1 = 1u32 | 1 << 16;
        let h2 = 1u32 | 1 << 31;
        let mut want_hi = [0u8; 12];
        want_hi[..4].copy_from_slice(&h0.to_le_bytes());
        want_hi[4..8].copy_from_slice(&h1.to_le_bytes());
        want_hi[8..].copy_from_slice(&h2.to_le_bytes());
        assert_eq!(block.hi, want_hi);
        assert_eq!(
            (block.code(0), block.code(15), block.code(16)),
            (113, 9, 54)
        );
        let out = dequantize_format(Format::Q3H, bytemuck::bytes_of(&block));
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(q[j]) - 5.0, "value {j}");
        }
    }

    #[test]
    fn every_code_round_trips_at_every_pair() {
        for c in 0..121u8 {
            let codes: [u8; PAIRS] =
                std::array::from_fn(|p| ((usize::from(c) + 37 * p) % 121) as u8);
            let block = BlockQ3H::from_codes(Half::ZERO, Half::ZERO, &codes);
            for (p, &code) in codes.iter().enumerate() {
                assert_eq!(block.code(p), code, "pair {p}");
                assert_eq!(block.level(2 * p), code % 11);
                assert_eq!(block.level(2 * p + 1), code / 11);
            }
            let q: [u8; BLOCK_LEN] = std::array::from_fn(|j| block.level(j));
            assert_eq!(BlockQ3H::pack(Half::ZERO, Half::ZERO, &q), block);
        }
    }

    #[test]
    fn every_value_follows_the_formula() {
        let raw = bytes::<32>(6);
        let block: BlockQ3H = *bytemuck::from_bytes(&raw);
        let (d, m) = (block.d.to_f32(), block.m.to_f32());
        let plane = |k: usize| u32::from_le_bytes(std::array::from_fn(|i| raw[20 + 4 * k + i]));
        let mut out = [0.0; BLOCK_LEN];
        block.dequantize(&mut out);
        for (j, got) in out.iter().enumerate() {
            let p = j / 2;
            let low = (raw[4 + p % 16] >> (4 * (p / 16))) & 0xF;
            let high = (0..3).map(|k| ((plane(k) >> p) & 1) << k).sum::<u32>() as u8;
            let c = low | high << 4;
            let q = if j % 2 == 0 { c % 11 } else { c / 11 };
            assert_eq!(got.to_bits(), (f32::from(q) * d + m).to_bits(), "value {j}");
        }
    }

    #[test]
    fn inferflow_table2_3_5_bit() {
        let want = Table2 {
            q: [0, 0, 2, 2, 3, 4, 4, 6, 7, 8, 9, 10],
            w: [
                "-1.000", "-1.000", "-0.500", "-0.500", "-0.250", "0.000", "0.000", "0.500",
                "0.750", "1.000", "1.250", "1.500",
            ],
            delta: [
                "0.000", "0.100", "0.100", "0.100", "0.050", "0.000", "0.100", "0.000", "0.050",
                "0.000", "0.050", "0.000",
            ],
            average: "0.046",
        };
        let level = |b: &[u8], j| bytemuck::from_bytes::<BlockQ3H>(&b[..32]).level(j);
        check_table2(Format::Q3H, LEVELS, level, &want);
    }
}
