//! x86-64 products of Q4_K rows interleaved eight at a time (`crate::interleave`) with `N`
//! tokens: each 32-byte load holds four values of each of eight rows in its low nibbles and
//! four more in its high ones, and each token's four matching activations are broadcast
//! against them, so every lane of a sum is one row's. Twice from one macro: with `vpmaddubsw`
//! (AVX2) and with `vpdpbusd` (AVX-512 VNNI on 256-bit registers).
//!
//! Levels (0..=15) are the unsigned operand and the activations the signed one. With AVX2,
//! a sub-block's eight `vpmaddubsw` results are added at 16 bits before one `vpmaddwd`:
//! each is at most `2 * 15 * 127` in magnitude, so eight of them fit.
//!
//! Every function here requires that the caller checked the CPU's features and the sizes:
//! `group` whole interleaved super-blocks, each activation row 256 values (8 scales, 16 sums)
//! per super-block.

use std::arch::x86_64::*;

use super::x86_kquant::levels_q4_k;
use crate::act::ActRow;
use crate::interleave::{GROUP_SUPER_BYTES, ROWS};

/// The eight bytes at `p` as floats.
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bytes8(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees eight readable bytes.
    let v = unsafe { _mm_loadl_epi64(p.cast()) };
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
}

/// The activations that meet a sub-block's levels as `levels_q4_k` reads them (chunk `c`'s
/// low nibbles at `2 c`, its high nibbles at `2 c + 1`): values `4 c..4 c + 4` and `16 + 4 c..` of
/// the 32 at `a`, each four broadcast to every lane.
///
/// # Safety
/// `a..a + 32` must be readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn acts(a: *const i8) -> [__m256i; 8] {
    // SAFETY: every offset below is within the 32 bytes the caller guarantees.
    std::array::from_fn(|i| unsafe {
        let at = 4 * (i / 2) + 16 * (i % 2);
        _mm256_set1_epi32(a.add(at).cast::<i32>().read_unaligned())
    })
}

/// A module `$name` with `q4_k::<N>` for one way of summing a sub-block's byte products.
macro_rules! interleaved {
    ($features:literal, $name:ident, $sums:expr) => {
        pub(super) mod $name {
            use super::*;

            /// Each lane's (row's) sum of a sub-block's 32 products, as floats (exact).
            #[inline]
            #[target_feature(enable = $features)]
            fn sums(w: &[__m256i; 8], a: &[__m256i; 8]) -> __m256 {
                #[allow(clippy::redundant_closure_call)]
                _mm256_cvtepi32_ps(($sums)(w, a))
            }

            /// `out[t][r]` = row `r` of the group `group` . `xs[t]`.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as the group's
            /// rows.
            #[target_feature(enable = $features)]
            pub unsafe fn q4_k<const N: usize>(
                group: &[u8],
                xs: &[ActRow; N],
                out: &mut [[f32; ROWS]; N],
            ) {
                let supers = group.len() / GROUP_SUPER_BYTES;
                let mut acc = [_mm256_setzero_ps(); N];
                let mut mins = [_mm256_setzero_ps(); N];
                for s in 0..supers {
                    // SAFETY: s < supers, whole super-blocks of group: the header's 160
                    // bytes, then 128 bytes of levels per sub-block.
                    let p = unsafe { group.as_ptr().add(GROUP_SUPER_BYTES * s) };
                    // SAFETY: as above.
                    let (d, dmin) = unsafe {
                        (
                            _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                            _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast())),
                        )
                    };
                    let mut msum = [_mm256_setzero_ps(); N];
                    for j in 0..8 {
                        // SAFETY: as above.
                        let (sc, m, w) = unsafe {
                            (
                                bytes8(p.add(32 + 8 * j)),
                                bytes8(p.add(96 + 8 * j)),
                                levels_q4_k(p.add(160 + 128 * j)),
                            )
                        };
                        let dsc = _mm256_mul_ps(sc, d);
                        let b = 8 * s + j;
                        for (t, x) in xs.iter().enumerate() {
                            // SAFETY: super-block s lies within every row of xs: 32 values
                            // from 32 b, scale b, sums 2 b and 2 b + 1.
                            let (a, xd, xsum) = unsafe {
                                (
                                    acts(x.q.as_ptr().add(32 * b)),
                                    *x.d.get_unchecked(b),
                                    *x.sums.get_unchecked(2 * b) + *x.sums.get_unchecked(2 * b + 1),
                                )
                            };
                            let scale = _mm256_mul_ps(dsc, _mm256_set1_ps(xd));
                            acc[t] = _mm256_fmadd_ps(sums(&w, &a), scale, acc[t]);
                            msum[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xsum), msum[t]);
                        }
                    }
                    for t in 0..N {
                        mins[t] = _mm256_fmadd_ps(dmin, msum[t], mins[t]);
                    }
                }
                for t in 0..N {
                    // SAFETY: out[t] holds eight floats.
                    unsafe {
                        _mm256_storeu_ps(out[t].as_mut_ptr(), _mm256_sub_ps(acc[t], mins[t]))
                    };
                }
            }
        }
    };
}

interleaved!(
    "avx2,fma,f16c",
    avx2,
    |w: &[__m256i; 8], a: &[__m256i; 8]| {
        let mut s = _mm256_maddubs_epi16(w[0], a[0]);
        for i in 1..8 {
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[i], a[i]));
        }
        _mm256_madd_epi16(s, _mm256_set1_epi16(1))
    }
);

interleaved!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    vnni,
    |w: &[__m256i; 8], a: &[__m256i; 8]| {
        // Two chains, so that the adds overlap.
        let (mut s0, mut s1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..4 {
            s0 = _mm256_dpbusd_epi32(s0, w[2 * c], a[2 * c]);
            s1 = _mm256_dpbusd_epi32(s1, w[2 * c + 1], a[2 * c + 1]);
        }
        _mm256_add_epi32(s0, s1)
    }
);
