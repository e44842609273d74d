//! x86-64 dot products that read the blocks of Q4_K, Q6_K (llama.cpp's Q4_K_M files), Q5_0
//! and Q5_1 directly, in the manner of `x86_fused.rs`: each twice from one macro (`vpmaddubsw`
//! and 256-bit `vpdpbusd`), `N` activation rows at once.
//!
//! Levels go into the unsigned operand as stored (0..=15, 0..=31 or 0..=63); a format's offset
//! (`- 16`, `- 32`) and bases come from the activations' per-16 sums instead. A super-block's
//! sub-blocks are 32 values, one activation block each, so each sub-block's eight 32-bit sums
//! are scaled in float: its weight scale times the block's activation scale. A super-block's
//! scales are decoded once for all rows; each row's eight activation scales are multiplied by
//! them in one vector, and each sub-block's lanes picked out by a permute.
//!
//! Every function here requires that the caller checked the CPU's features and the sizes:
//! `row` whole blocks, each activation row 32 values (one scale, two sums) per block of 32.

use std::arch::x86_64::*;

use super::x86_fused::{acts, half_at, hsum, nibbles};
use crate::act::ActRow;

/// Eight floats of `v` from `at`.
///
/// # Safety
/// `at + 8 <= v.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load8(v: &[f32], at: usize) -> __m256 {
    // SAFETY: the caller guarantees eight values from `at`.
    unsafe { _mm256_loadu_ps(v.as_ptr().add(at)) }
}

/// The eight bytes of `v` as floats.
#[inline]
#[target_feature(enable = "avx2")]
fn bytes_f32(v: u64) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)))
}

/// Lane `j` of `v` in every lane.
#[inline]
#[target_feature(enable = "avx2")]
fn lane(v: __m256, j: usize) -> __m256 {
    _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j as i32))
}

/// Lanes `f, f, f + 1, f + 1, .., f + 3, f + 3` of `v`: per-32 values spread over 16s.
#[inline]
#[target_feature(enable = "avx2")]
fn pairs(v: __m256, f: i32) -> __m256 {
    let idx = _mm256_setr_epi32(f, f, f + 1, f + 1, f + 2, f + 2, f + 3, f + 3);
    _mm256_permutevar8x32_ps(v, idx)
}

/// Lane `f` of `v` in lanes 0-3 and lane `f + 1` in 4-7: a 32-value chunk's two per-16 scales.
#[inline]
#[target_feature(enable = "avx2")]
fn halves(v: __m256, f: i32) -> __m256 {
    let idx = _mm256_setr_epi32(f, f, f, f, f + 1, f + 1, f + 1, f + 1);
    _mm256_permutevar8x32_ps(v, idx)
}

/// Q4_K's eight 6-bit scales and eight 6-bit mins from the 12 bytes at `p`, a byte each, as
/// `kquant::scale_min_k4` reads them (ggml's `utmp` shuffle).
///
/// # Safety
/// `p..p + 12` must be readable.
#[inline]
unsafe fn scales_k4(p: *const u8) -> (u64, u64) {
    // SAFETY: the caller guarantees 12 readable bytes.
    let u = unsafe { [0, 4, 8].map(|o| p.add(o).cast::<u32>().read_unaligned()) };
    let (low6, low4, top2) = (0x3F3F_3F3F, 0x0F0F_0F0F, 0x0303_0303);
    // Scales 0-3 are the low 6 bits of bytes 0-3, mins 0-3 of bytes 4-7; scales and mins 4-7
    // are the nibbles of bytes 8-11 with the top two bits of bytes 0-3 and 4-7 above them.
    let sc_hi = (u[2] & low4) | ((u[0] >> 6) & top2) << 4;
    let m_hi = ((u[2] >> 4) & low4) | ((u[1] >> 6) & top2) << 4;
    let sc = u64::from(u[0] & low6) | u64::from(sc_hi) << 32;
    let m = u64::from(u[1] & low6) | u64::from(m_hi) << 32;
    (sc, m)
}

/// Q4_K's 256 levels from the 128 bytes at `p`, 32 a sub-block: each 32 bytes hold two
/// sub-blocks, the low nibbles then the high.
///
/// # Safety
/// `p..p + 128` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn levels_q4_k(p: *const u8) -> [__m256i; 8] {
    let low = _mm256_set1_epi8(0x0F);
    let mut w = [_mm256_setzero_si256(); 8];
    for g in 0..4 {
        // SAFETY: 32 g + 32 <= 128 bytes the caller guarantees.
        let q = unsafe { _mm256_loadu_si256(p.add(32 * g).cast()) };
        w[2 * g] = _mm256_and_si256(q, low);
        w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
    }
    w
}

/// Q6_K's 256 levels (unsigned, 0..=63) from the 192 bytes of `ql` and `qh` at `p`, 32 a
/// chunk: in each half of 128 values, chunk `k` takes the low (`k < 2`) or high nibbles of
/// `ql` bytes `32 (k % 2)..` and bits `2k..2k + 2` of the half's 32 `qh` bytes.
///
/// # Safety
/// `p..p + 192` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn levels_q6_k(p: *const u8) -> [__m256i; 8] {
    let (low, pair) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let mut w = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        // SAFETY: 64 h + 64 <= 128 and 128 + 32 h + 32 <= 192 bytes the caller guarantees.
        let (ql0, ql1, qh) = unsafe {
            (
                _mm256_loadu_si256(p.add(64 * h).cast()),
                _mm256_loadu_si256(p.add(64 * h + 32).cast()),
                _mm256_loadu_si256(p.add(128 + 32 * h).cast()),
            )
        };
        // 16-bit shifts: the masks keep only bits that stayed within their byte.
        let lo = |q| _mm256_and_si256(q, low);
        let hi = |q| _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
        w[4 * h] = _mm256_or_si256(lo(ql0), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), pair));
        w[4 * h + 1] = _mm256_or_si256(lo(ql1), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), pair));
        w[4 * h + 2] = _mm256_or_si256(hi(ql0), _mm256_and_si256(qh, pair));
        w[4 * h + 3] = _mm256_or_si256(hi(ql1), _mm256_and_si256(_mm256_srli_epi16::<2>(qh), pair));
    }
    w
}

/// Q5_0's and Q5_1's 32 levels from the 4-byte fifth-bit mask at `p` and the 16 nibble bytes
/// after it: bit `j` of the mask (little-endian) is bit 4 of value `j`.
///
/// # Safety
/// `p..p + 20` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn levels5(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 20 readable bytes.
    let (qh, q) = unsafe { (p.cast::<u32>().read_unaligned(), nibbles(p.add(4))) };
    // Byte j takes mask byte j / 8, then tests its bit j % 8.
    let spread = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// A module `$name` of `q4_k`, `q6_k`, `q5_0` and `q5_1` for one way of summing
/// unsigned-by-signed bytes.
macro_rules! kquant {
    ($features:literal, $name:ident, $dot:expr) => {
        pub(super) mod $name {
            use super::*;

            /// Block `b`'s products of unsigned levels `w` with `x`: eight 32-bit sums of four,
            /// as floats (exact: at most 32 * 63 * 127 in magnitude).
            ///
            /// # Safety
            /// Block `b` must be within `x`.
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn products(w: __m256i, x: &ActRow, b: usize) -> __m256 {
                // SAFETY: the caller guarantees block b lies within x.
                let a = unsafe { acts(x, b) };
                #[allow(clippy::redundant_closure_call)]
                _mm256_cvtepi32_ps(($dot)(w, a))
            }

            /// Q4_K: `value = (d * scale) * q - dmin * min` per 32 values, 144-byte
            /// super-blocks of 256; `N` activation rows at once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q4_k<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                let supers = row.len() / 144;
                // Two accumulators a row, so that sub-blocks' adds overlap.
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                let mut mins = [_mm256_setzero_ps(); N];
                for s in 0..supers {
                    // SAFETY: s < supers, whole super-blocks of row.
                    let (d, dmin, (sc, m), w) = unsafe {
                        let p = row.as_ptr().add(144 * s);
                        let sm = scales_k4(p.add(4));
                        (half_at(p), half_at(p.add(2)), sm, levels_q4_k(p.add(16)))
                    };
                    let dsc = _mm256_mul_ps(bytes_f32(sc), _mm256_set1_ps(d));
                    let dm = _mm256_mul_ps(bytes_f32(m), _mm256_set1_ps(dmin));
                    let dm = [pairs(dm, 0), pairs(dm, 4)];
                    for (i, x) in xs.iter().enumerate() {
                        // SAFETY: super-block s lies within every row of xs: 8 scales and
                        // 16 sums from 8 s and 16 s.
                        let (xd, s0, s1) = unsafe {
                            (
                                load8(x.d, 8 * s),
                                load8(x.sums, 16 * s),
                                load8(x.sums, 16 * s + 8),
                            )
                        };
                        mins[i] = _mm256_fmadd_ps(dm[0], s0, mins[i]);
                        mins[i] = _mm256_fmadd_ps(dm[1], s1, mins[i]);
                        let scales = _mm256_mul_ps(dsc, xd);
                        for (j, &w) in w.iter().enumerate() {
                            // SAFETY: block 8 s + j lies within x, as above.
                            let p = unsafe { products(w, x, 8 * s + j) };
                            let a = &mut acc[i][j % 2];
                            *a = _mm256_fmadd_ps(p, lane(scales, j), *a);
                        }
                    }
                }
                std::array::from_fn(|i| hsum(_mm256_add_ps(acc[i][0], acc[i][1])) - hsum(mins[i]))
            }

            /// Q6_K: `value = (d * scale) * (q - 32)` per 16 values, signed scales, 210-byte
            /// super-blocks of 256; `N` activation rows at once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q6_k<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                let supers = row.len() / 210;
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                let mut offset = [_mm256_setzero_ps(); N];
                for s in 0..supers {
                    // SAFETY: s < supers, whole super-blocks of row: `ql` and `qh` in bytes
                    // 0..192, the 16 scales in 192..208, `d` in 208..210.
                    let (d, sc, w) = unsafe {
                        let p = row.as_ptr().add(210 * s);
                        let sc = _mm_loadu_si128(p.add(192).cast());
                        (half_at(p.add(208)), sc, levels_q6_k(p))
                    };
                    let d = _mm256_set1_ps(d);
                    let scale = |v| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
                    let dsc = [scale(sc), scale(_mm_srli_si128::<8>(sc))];
                    for (i, x) in xs.iter().enumerate() {
                        // SAFETY: super-block s lies within every row of xs: 8 scales and
                        // 16 sums from 8 s and 16 s.
                        let (xd, s0, s1) = unsafe {
                            (
                                load8(x.d, 8 * s),
                                load8(x.sums, 16 * s),
                                load8(x.sums, 16 * s + 8),
                            )
                        };
                        offset[i] = _mm256_fmadd_ps(dsc[0], s0, offset[i]);
                        offset[i] = _mm256_fmadd_ps(dsc[1], s1, offset[i]);
                        // Per 16 values, the weight scale times its block's activation scale.
                        let scales = [
                            _mm256_mul_ps(dsc[0], pairs(xd, 0)),
                            _mm256_mul_ps(dsc[1], pairs(xd, 4)),
                        ];
                        for (c, &w) in w.iter().enumerate() {
                            // SAFETY: block 8 s + c lies within x, as above.
                            let p = unsafe { products(w, x, 8 * s + c) };
                            let sc = halves(scales[c / 4], 2 * (c % 4) as i32);
                            let a = &mut acc[i][c % 2];
                            *a = _mm256_fmadd_ps(p, sc, *a);
                        }
                    }
                }
                std::array::from_fn(|i| {
                    hsum(_mm256_add_ps(acc[i][0], acc[i][1])) - 32.0 * hsum(offset[i])
                })
            }

            /// Q5_0: `value = (q - 16) * d`, 22-byte blocks; `N` activation rows at once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q5_0<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                // SAFETY: as the caller guarantees.
                unsafe { q5::<N, false>(row, xs) }
            }

            /// Q5_1: `value = q * d + m`, 24-byte blocks; `N` activation rows at once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q5_1<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                // SAFETY: as the caller guarantees.
                unsafe { q5::<N, true>(row, xs) }
            }

            /// Q5_0 (`BASE` false: 22-byte blocks, `value = (q - 16) * d`) or Q5_1 (24-byte
            /// blocks, `value = q * d + m`). Two blocks a pass, each into its own sums, so
            /// that the sums stay in registers and their adds overlap.
            ///
            /// # Safety
            /// As [`q5_0`].
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn q5<const N: usize, const BASE: bool>(
                row: &[u8],
                xs: &[ActRow; N],
            ) -> [f32; N] {
                let size = if BASE { 24 } else { 22 };
                let blocks = row.len() / size;
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                let mut base = [[0f32; 2]; N];
                // Block b into sums h.
                let mut one = |b: usize, h: usize| {
                    // SAFETY: b < blocks, whole blocks of row.
                    let (d, m, w) = unsafe {
                        let p = row.as_ptr().add(size * b);
                        let m = if BASE { half_at(p.add(2)) } else { 0.0 };
                        (half_at(p), m, levels5(p.add(size - 20)))
                    };
                    // Q5_0's offset: -16 * d per value.
                    let m = if BASE { m } else { -16.0 * d };
                    for (i, x) in xs.iter().enumerate() {
                        // SAFETY: block b lies within every row of xs.
                        let (p, xd, sum) = unsafe {
                            (
                                products(w, x, b),
                                *x.d.get_unchecked(b),
                                *x.sums.get_unchecked(2 * b) + *x.sums.get_unchecked(2 * b + 1),
                            )
                        };
                        acc[i][h] = _mm256_fmadd_ps(p, _mm256_set1_ps(d * xd), acc[i][h]);
                        base[i][h] += m * sum;
                    }
                };
                for pair in 0..blocks / 2 {
                    one(2 * pair, 0);
                    one(2 * pair + 1, 1);
                }
                if blocks % 2 == 1 {
                    one(blocks - 1, 0);
                }
                std::array::from_fn(|i| {
                    hsum(_mm256_add_ps(acc[i][0], acc[i][1])) + base[i][0] + base[i][1]
                })
            }
        }
    };
}

kquant!("avx2,fma,f16c", avx2, |w, a| {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
});

kquant!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", vnni, |w, a| {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a)
});
