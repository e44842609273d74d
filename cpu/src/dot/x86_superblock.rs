//! x86-64 decode products of Q4_K and Q6_K rows with activations quantized per super-block
//! (`ActK`, llama.cpp's Q8_K): a row's whole super-block is summed in integers. Each 32
//! levels meet their 32 activations in one `vpmaddubsw` (16-bit sums of two), the weights'
//! sub-block scales multiply those in one `vpmaddwd` (AVX2, then an add) or `vpdpwssd`
//! (AVX-512 VNNI), and only the super-block's total is scaled in float, by the weight's `d`
//! times the activations' `d`. The bases (Q4_K's mins, Q6_K's `- 32`) come from the
//! activations' per-16 sums the same way, once per super-block.
//!
//! No 16-bit sum can saturate: Q6_K's levels are at most 63, so two products are at most
//! 2 * 63 * 127 = 16002.
//!
//! Every function here requires that the caller checked the CPU's features and the sizes:
//! `row` whole super-blocks, the activation row as many values.

use std::arch::x86_64::*;

use super::x86_fused::{half_at, hsum};
use super::x86_kquant::{levels_q4_k, levels_q6_k, scales_k4};
use crate::act_k::ActKRow;

/// The 16 bytes of `v` (8 bytes, each twice) as 16-bit lanes: `v0, v0, v1, v1, ..`.
#[inline]
#[target_feature(enable = "avx2")]
fn doubled(v: u64) -> __m256i {
    let b = _mm_cvtsi64_si128(v as i64);
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
}

/// Masks that pick 16-bit lane `j` of a 128-bit half into all eight lanes (`vpshufb`).
#[inline]
#[target_feature(enable = "avx2")]
fn lane_masks() -> [__m256i; 8] {
    std::array::from_fn(|j| _mm256_set1_epi16((0x100 * (2 * j as i16 + 1)) | (2 * j as i16)))
}

/// The 32 activations from value `at` of `x`.
///
/// # Safety
/// `at + 32 <= x.q.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn acts32(x: &ActKRow, at: usize) -> __m256i {
    // SAFETY: guaranteed by the caller.
    unsafe { _mm256_loadu_si256(x.q.as_ptr().add(at).cast()) }
}

/// The 16 per-16 sums of super-block `s` of `x`.
///
/// # Safety
/// Super-block `s` must lie within `x`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn sums16(x: &ActKRow, s: usize) -> __m256i {
    // SAFETY: guaranteed by the caller.
    unsafe { _mm256_loadu_si256(x.sums.as_ptr().add(16 * s).cast()) }
}

/// A module `$name` of `q4_k` and `q6_k` for one way of multiplying 16-bit sums by 16-bit
/// scales into a 32-bit accumulator.
macro_rules! superblock {
    ($features:literal, $name:ident, $madd:expr) => {
        pub(super) mod $name {
            use super::*;

            /// `acc + pairs of (p * scale)` in 32-bit lanes.
            #[inline]
            #[target_feature(enable = $features)]
            fn madd(acc: __m256i, p: __m256i, scale: __m256i) -> __m256i {
                #[allow(clippy::redundant_closure_call)]
                ($madd)(acc, p, scale)
            }

            /// Q4_K: `value = (d * scale) * q - dmin * min` per 32 values, 144-byte
            /// super-blocks of 256.
            ///
            /// # Safety
            /// See the module's header.
            #[target_feature(enable = $features)]
            pub unsafe fn q4_k(row: &[u8], x: &ActKRow) -> f32 {
                let supers = row.len() / 144;
                let lanes = lane_masks();
                let mut acc = _mm256_setzero_ps();
                let mut mins = _mm256_setzero_ps();
                for s in 0..supers {
                    // SAFETY: s < supers, whole super-blocks of row; super-block s lies
                    // within x (256 values from 256 s, 16 sums from 16 s).
                    unsafe {
                        let p = row.as_ptr().add(144 * s);
                        let xd = *x.d.get_unchecked(s);
                        let (d, dmin) = (half_at(p) * xd, half_at(p.add(2)) * xd);
                        let (sc, m) = scales_k4(p.add(4));
                        let w = levels_q4_k(p.add(16));
                        // The eight scales as 16-bit lanes, in both 128-bit halves.
                        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(
                            _mm_cvtsi64_si128(sc as i64),
                        ));
                        // Two sums, so that consecutive sub-blocks' multiply-adds overlap.
                        let mut sum = [_mm256_setzero_si256(); 2];
                        for (j, &w) in w.iter().enumerate() {
                            let a = acts32(x, 256 * s + 32 * j);
                            let scale = _mm256_shuffle_epi8(sc16, lanes[j]);
                            sum[j % 2] = madd(sum[j % 2], _mm256_maddubs_epi16(w, a), scale);
                        }
                        let sum = _mm256_add_epi32(sum[0], sum[1]);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d), acc);
                        // Sub-block j's min times its two per-16 sums.
                        let based = _mm256_madd_epi16(sums16(x, s), doubled(m));
                        mins =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(based), _mm256_set1_ps(dmin), mins);
                    }
                }
                hsum(acc) - hsum(mins)
            }

            /// Q6_K: `value = (d * scale) * (q - 32)` per 16 values, signed scales, 210-byte
            /// super-blocks of 256.
            ///
            /// # Safety
            /// See the module's header.
            #[target_feature(enable = $features)]
            pub unsafe fn q6_k(row: &[u8], x: &ActKRow) -> f32 {
                let supers = row.len() / 210;
                let lanes = lane_masks();
                let mut acc = _mm256_setzero_ps();
                for s in 0..supers {
                    // SAFETY: s < supers, whole super-blocks of row (`ql` and `qh` in bytes
                    // 0..192, the 16 scales in 192..208, `d` in 208..210); super-block s lies
                    // within x.
                    unsafe {
                        let p = row.as_ptr().add(210 * s);
                        let d = half_at(p.add(208)) * *x.d.get_unchecked(s);
                        let sc = _mm_loadu_si128(p.add(192).cast());
                        // Scales 0-7 and 8-15 as 16-bit lanes; chunk c's two (2c and 2c + 1)
                        // go to the low and high 128-bit halves of its 16-bit sums.
                        let sc16 = _mm256_cvtepi8_epi16(sc);
                        let (lo, hi) = (
                            _mm256_permute2x128_si256::<0x00>(sc16, sc16),
                            _mm256_permute2x128_si256::<0x11>(sc16, sc16),
                        );
                        let w = levels_q6_k(p);
                        let mut sums = [_mm256_setzero_si256(); 2];
                        for (c, &w) in w.iter().enumerate() {
                            let a = acts32(x, 256 * s + 32 * c);
                            let half = if c < 4 { lo } else { hi };
                            let k = 2 * (c % 4);
                            let pick = _mm256_setr_m128i(
                                _mm256_castsi256_si128(lanes[k]),
                                _mm256_castsi256_si128(lanes[k + 1]),
                            );
                            let scale = _mm256_shuffle_epi8(half, pick);
                            sums[c % 2] = madd(sums[c % 2], _mm256_maddubs_epi16(w, a), scale);
                        }
                        let sum = _mm256_add_epi32(sums[0], sums[1]);
                        // The levels' offset of 32, through the per-16 sums.
                        let offset = _mm256_madd_epi16(sums16(x, s), _mm256_cvtepi8_epi16(sc));
                        let sum = _mm256_sub_epi32(sum, _mm256_slli_epi32::<5>(offset));
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d), acc);
                    }
                }
                hsum(acc)
            }
        }
    };
}

superblock!("avx2,fma,f16c", avx2, |acc, p, scale| {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale))
});

superblock!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    vnni,
    |acc, p, scale| _mm256_dpwssd_epi32(acc, p, scale)
);
