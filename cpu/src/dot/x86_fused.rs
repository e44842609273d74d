//! x86-64 dot products that read the most common formats' blocks directly, without unpacking
//! them to levels first: Q4 (GGUF's Q4_1), Q4_0 and Q8 (Q8_0), against 8-bit activations.
//! Each comes twice from one macro: with `vpmaddubsw` (AVX2) and with `vpdpbusd` (AVX-512
//! VNNI on 256-bit registers). Unsigned 4-bit levels go straight into the unsigned operand;
//! Q8's signed levels take the sign trick of `x86.rs`.
//!
//! Each takes several activation rows at once (a prompt's tokens), so a block's levels are read
//! and widened once for all of them.
//!
//! Every function here requires that the caller checked the CPU's features and the sizes: `row`
//! whole blocks, each activation row 32 values (one scale, two sums) per block of 32.

use std::arch::x86_64::*;

use crate::act::ActRow;

/// The f16 at `p` (little-endian) as f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn half_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees two readable bytes.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Sum of the eight lanes.
#[target_feature(enable = "avx2")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// 32 4-bit levels from 16 bytes at `p`: value `j < 16` the low nibble of byte `j`, value
/// `j + 16` its high nibble (Q4, Q4_0).
///
/// # Safety
/// `p..p + 16` must be readable.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(p.cast()) };
    let low = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, low);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), low);
    _mm256_set_m128i(hi, lo)
}

/// The 32 activation levels of block `b`.
///
/// # Safety
/// Block `b` must be within `x`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn acts(x: &ActRow, b: usize) -> __m256i {
    // SAFETY: the caller guarantees block b lies within x.
    unsafe { _mm256_loadu_si256(x.q.as_ptr().add(32 * b).cast()) }
}

/// Block `b` of `x`: its 32 levels, its scale, and the sum of its values.
///
/// # Safety
/// Block `b` must be within `x`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn block(x: &ActRow, b: usize) -> (__m256i, f32, f32) {
    // SAFETY: the caller guarantees block b lies within x: 32 levels from 32 b, its scale,
    // and its two sums from 2 b.
    unsafe {
        (
            acts(x, b),
            *x.d.get_unchecked(b),
            *x.sums.get_unchecked(2 * b) + *x.sums.get_unchecked(2 * b + 1),
        )
    }
}

/// A module `$name` of `q4`, `q4_0` and `q8` for one way of summing unsigned-by-signed bytes.
macro_rules! fused {
    ($features:literal, $name:ident, $dot:expr) => {
        pub(super) mod $name {
            use super::*;

            /// Eight 32-bit sums of four products each of unsigned `w` and signed `a` bytes.
            #[target_feature(enable = $features)]
            fn dot_u8_i8(w: __m256i, a: __m256i) -> __m256i {
                #[allow(clippy::redundant_closure_call)]
                ($dot)(w, a)
            }

            /// Q4: `value = q * d + m`, 20-byte blocks; `N` activation rows at once, each
            /// block's levels read and widened once for all of them. Two blocks a pass, each
            /// into its own sums, so that the sums stay in registers and their adds overlap.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q4<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                let blocks = row.len() / 20;
                // Two sums a row, alternating by block, so one row's adds do not wait on each other.
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                let mut base = [[0f32; 2]; N];
                for pair in 0..blocks.div_ceil(2) {
                    for h in 0..2 {
                        let b = 2 * pair + h;
                        if b == blocks {
                            break;
                        }
                        // SAFETY: b < blocks, whole blocks of row.
                        let (d, m, w) = unsafe {
                            let p = row.as_ptr().add(20 * b);
                            (half_at(p), half_at(p.add(2)), nibbles(p.add(4)))
                        };
                        for (i, x) in xs.iter().enumerate() {
                            // SAFETY: block b lies within every row of xs.
                            let (a, xd, xs) = unsafe { block(x, b) };
                            let sums = _mm256_cvtepi32_ps(dot_u8_i8(w, a));
                            acc[i][h] = _mm256_fmadd_ps(sums, _mm256_set1_ps(d * xd), acc[i][h]);
                            base[i][h] += m * xs;
                        }
                    }
                }
                std::array::from_fn(|i| {
                    hsum(_mm256_add_ps(acc[i][0], acc[i][1])) + (base[i][0] + base[i][1])
                })
            }

            /// Q4_0: `value = (q - 8) * d`, 18-byte blocks; `N` activation rows at once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q4_0<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                let blocks = row.len() / 18;
                // Two sums a row, alternating by block, so one row's adds do not wait on each other.
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                let mut base = [[0f32; 2]; N];
                for pair in 0..blocks.div_ceil(2) {
                    for h in 0..2 {
                        let b = 2 * pair + h;
                        if b == blocks {
                            break;
                        }
                        // SAFETY: b < blocks, whole blocks of row.
                        let (d, w) = unsafe {
                            let p = row.as_ptr().add(18 * b);
                            (half_at(p), nibbles(p.add(2)))
                        };
                        for (i, x) in xs.iter().enumerate() {
                            // SAFETY: block b lies within every row of xs.
                            let (a, xd, xs) = unsafe { block(x, b) };
                            let sums = _mm256_cvtepi32_ps(dot_u8_i8(w, a));
                            acc[i][h] = _mm256_fmadd_ps(sums, _mm256_set1_ps(d * xd), acc[i][h]);
                            base[i][h] -= 8.0 * d * xs;
                        }
                    }
                }
                std::array::from_fn(|i| {
                    hsum(_mm256_add_ps(acc[i][0], acc[i][1])) + (base[i][0] + base[i][1])
                })
            }

            /// Q8: `value = q * d` with signed `q`, 34-byte blocks; `N` activation rows at
            /// once.
            ///
            /// # Safety
            /// See the module's header; every row of `xs` has as many values as `row`.
            #[target_feature(enable = $features)]
            pub unsafe fn q8<const N: usize>(row: &[u8], xs: &[ActRow; N]) -> [f32; N] {
                let blocks = row.len() / 34;
                // Two sums a row, alternating by block, so one row's adds do not wait on each other.
                let mut acc = [[_mm256_setzero_ps(); 2]; N];
                for pair in 0..blocks.div_ceil(2) {
                    for h in 0..2 {
                        let b = 2 * pair + h;
                        if b == blocks {
                            break;
                        }
                        // SAFETY: b < blocks, whole blocks of row.
                        let (d, w) = unsafe {
                            let p = row.as_ptr().add(34 * b);
                            (half_at(p), _mm256_loadu_si256(p.add(2).cast()))
                        };
                        let magnitude = _mm256_sign_epi8(w, w);
                        for (i, x) in xs.iter().enumerate() {
                            // SAFETY: block b lies within every row of xs.
                            let (a, xd, _) = unsafe { block(x, b) };
                            let sums = dot_u8_i8(magnitude, _mm256_sign_epi8(a, w));
                            let scale = _mm256_set1_ps(d * xd);
                            acc[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i][h]);
                        }
                    }
                }
                std::array::from_fn(|i| hsum(_mm256_add_ps(acc[i][0], acc[i][1])))
            }
        }
    };
}

fused!("avx2,fma,f16c", avx2, |w, a| {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
});

fused!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", vnni, |w, a| {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a)
});
